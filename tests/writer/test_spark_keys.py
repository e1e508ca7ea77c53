"""The Spark twin of the key encoding agrees with Python's (SPEC §5.5)."""

from __future__ import annotations

from pyspark.sql import functions as F

from compiler.algebra.keys import encode_key, redis_key
from compiler.algebra.spark import encode_tuple_column, redis_key_column

ROWS = [
    ("JFK", 1545, True),
    ("a|b", -5, False),
    ("{tag}%", 0, True),
    ("ünïcødé ✈", 2**62, False),
    ("", 7, True),
    ("x" * 300, 1, True),
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
