"""The Spark twins of the key and value encodings agree with Python's (SPEC §5.5)."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from compiler.algebra.keys import MAX_KEY_CHARS, encode_key, redis_key
from compiler.algebra.ops import _values_of_json, values_json
from compiler.algebra.spark import encode_tuple_column, redis_key_column, values_json_column
from compiler.typesystem import format_float, format_float_column

ROWS = [
    ("JFK", 1545, True),
    ("a|b", -5, False),
    ("{tag}%", 0, True),
    ("ünïcødé ✈", 2**62, False),
    ("", 7, True),
    ("x" * 300, 1, True),
    # more bytes than MAX_KEY_CHARS in fewer characters (kept), and more characters too (hashed)
    ("é" * (MAX_KEY_CHARS - 20), 1, True),
    ("é" * (MAX_KEY_CHARS + 20), 1, True),
]


def test_spark_key_encoding_matches_python(spark):
    df = spark.createDataFrame(ROWS, "s string, i long, b boolean")
    types = ["string", "int", "bool"]
    got = [r[0] for r in df.select(encode_tuple_column([F.col("s"), F.col("i"), F.col("b")], types)).collect()]
    assert got == [encode_key(row, types) for row in ROWS]
    glob = df.select(encode_tuple_column([], [])).first()[0]
    assert glob == encode_key((), ())
    # the Redis key names, a global state's included (its tag is GLOBAL_TAG, never empty: SPEC §5.1)
    enc = encode_tuple_column([F.col("s"), F.col("i"), F.col("b")], types)
    names = [r[0] for r in df.select(redis_key_column(enc, 3, "0123456789abcdef")).collect()]
    assert names == [redis_key(encode_key(row, types), "0123456789abcdef") for row in ROWS]
    assert df.select(redis_key_column(encode_tuple_column([], []), 0, "ab")).first()[0] == redis_key("", "ab") == "sc:{_}:ab"


FLOATS = [2.5, 0.1, -0.0, 0.0, 15_000_000.0, 1e7, 9_999_999.5, 1e-3, 1e-5, 1.5e-7, 123456789.125, 1e16, 1e22,
          -3.75e-9, 2.0**62, 1e300, float("inf"), float("-inf")]


def test_spark_float_key_encoding_matches_python(spark):
    """Float and duration components (keys, ``CountUnique`` values, HyperLogLog items) are Python's repr in both.

    Regression: the Spark twin cast the double to a string, which prints
    ``1.5E7`` where Python prints ``15000000.0`` (every |x| >= 1e7 or < 1e-3),
    so after a backfill an online ``CountUnique`` of such amounts counted each
    value twice and a float-keyed state read an empty key; ``-0.0`` was a key
    apart from ``0.0``.
    """
    df = spark.createDataFrame([(x, x) for x in FLOATS], "f double, d double")
    types = ["float", "duration"]
    got = [r[0] for r in df.select(encode_tuple_column([F.col("f"), F.col("d")], types)).collect()]
    assert got == [encode_key((x, x), types) for x in FLOATS]
    assert encode_key((-0.0,), ["float"]) == encode_key((0.0,), ["float"]) == "f0.0"
    assert encode_key((15_000_000.0,), ["float"]) == "f15000000.0"


def test_spark_values_json_matches_python_and_reads_back(spark):
    """``values_json_column`` (Spark's ``to_json``) writes what ``ops.values_json`` writes, non-finite floats included.

    Regression: orjson wrote infinity as ``null``, so a ``Min(f limit 3)``
    whose log held ``Float('1e400')`` failed every later read of the key
    with a 500 (``float(None)`` in the fold); Spark writes ``"Infinity"``.
    """
    inf = float("inf")
    rows = [(2.5, 7, "x"), (inf, -3, ""), (-inf, 0, "é"), (float("nan"), 2**62, "a\"b"), (1e-300, None, None)]
    df = spark.createDataFrame(rows, "v0 double, v1 long, v2 string")
    got = [r[0] for r in df.select(values_json_column(3)).collect()]
    def present(text):  # Spark leaves a null value out, Python writes null: both read back as None
        return {k: v for k, v in orjson.loads(text).items() if v is not None}

    assert [present(g) for g in got] == [present(values_json(row)) for row in rows]
    for text in got:  # what either engine wrote reads back as the value
        back = _values_of_json(text, ("float", "int", "string"))
        want = rows[got.index(text)]
        assert repr(back) == repr(want)
    assert values_json([inf, -inf]) == '{"v0":"Infinity","v1":"-Infinity"}'


#: integral doubles of [1e16, 2^63) whose shortest digits end in zeros Java 17 prints as digits
#: (``2.82879384806159008E17``), and the range's edges
BIG = [1e16, 2.82879384806159e17, 1.0000000000000002e16, 123456789012345678.0, 9.2233720368547748e18,
       2.0**62, 1e18, 4.5e18, 1.2345e17, 9.007199254740993e16]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.integers(10**16, 2**63 - 1).map(float),
                          st.floats(1e16, 9.2e18),
                          st.integers(1, 10**12).map(lambda m: float(m * 10**7))), min_size=50, max_size=200))
def test_spark_float_text_of_large_integral_doubles_is_pythons(spark, xs):
    """``format_float_column`` gives Python's shortest ``repr`` digits for integral doubles in
    [1e16, 2^63), where Java 17's ``Double.toString`` prints every digit of the integer: the coarsest
    rounding to a power of ten up to 10^10 that converts back to the same double (the fold over
    powers of ten in ``compiler.typesystem._format_float_body``), signs and the ``FLOATS`` of the
    other branches included."""
    values = [v for x in xs + BIG for v in (x, -x) if abs(v) < 2.0**63] + FLOATS
    df = spark.createDataFrame([(x,) for x in values], "x double")
    got = [r[0] for r in df.select(format_float_column(F.col("x"))).collect()]
    assert got == [format_float(x) for x in values]
