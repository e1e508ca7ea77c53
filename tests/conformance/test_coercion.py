"""The coercion table (SPEC §2.2): ``coerce``/``read_input`` in Python and ``input_column`` in Spark agree.

Each row is ``(json_value, type, expected_value, expected_error)``: the raw
JSON text of one value, read from ``{"v": <json>}``. Python gets the value
parsed by :func:`json.loads`; Spark gets the raw text. ``expected_error`` says
whether an error is reported (Python: a message; Spark: the error flag).
"""

from __future__ import annotations

import json

import pytest

from compiler.plan import InputSpec
from compiler.typesystem import INT64_MAX, INT64_MIN, coerce, read_input, time_column
from tests.conformance.compare import grouped_columns, same

T0 = 1_357_035_420_000

COERCIONS: list[tuple[str, str, object, bool]] = [
    # int
    ("5", "int", 5, False),
    ('"5"', "int", 5, False),
    ("5.0", "int", 5, False),
    ('"5.0"', "int", 5, False),
    ("5.6", "int", 5, True),
    ('"5.6"', "int", 5, True),
    ("-5.6", "int", -5, True),
    ('"bar"', "int", None, True),
    ('"null"', "int", None, False),
    ("null", "int", None, False),
    ("true", "int", None, True),
    ('"1e3"', "int", 1000, False),
    ("1e3", "int", 1000, False),
    ("-0.0", "int", 0, False),
    ("9223372036854775807", "int", INT64_MAX, False),
    ("-9223372036854775808", "int", INT64_MIN, False),
    ('"9223372036854775807"', "int", INT64_MAX, False),
    ("9223372036854775808", "int", None, True),
    ("12345678901234567890", "int", None, True),
    ("9007199254740993.0", "int", 9007199254740992, False),
    ('" 5"', "int", None, True),
    ('""', "int", None, True),
    ('{"a": 1}', "int", None, True),
    ("[1]", "int", None, True),
    # float
    ("2.5", "float", 2.5, False),
    ('"2.5"', "float", 2.5, False),
    ("2", "float", 2.0, False),
    ("0.1", "float", 0.1, False),
    ("9007199254740993", "float", 9007199254740992.0, False),
    ('"1e3"', "float", 1000.0, False),
    ("-0.0", "float", 0.0, False),
    ('"abc"', "float", None, True),
    ('"NaN"', "float", None, True),
    ('"Infinity"', "float", None, True),
    ("true", "float", None, True),
    ("[]", "float", None, True),
    ('"null"', "float", None, False),
    # string
    ('"abc"', "string", "abc", False),
    ('""', "string", "", False),
    ('"é😀"', "string", "é😀", False),
    ('" spaced "', "string", " spaced ", False),
    ('"line\\nbreak"', "string", "line\nbreak", False),
    ('"5"', "string", "5", False),
    ("5", "string", "5", False),
    ("-3", "string", "-3", False),
    ("5.0", "string", "5.0", False),
    ("5.60", "string", "5.6", False),
    ("0.1", "string", "0.1", False),
    ("1e20", "string", "1e+20", False),
    ("1.5e-7", "string", "1.5e-07", False),
    ("12345678901234567890", "string", "12345678901234567890", False),
    # a JSON negative zero is the float -0.0 to Python; Spark's parse_json keeps it as the DECIMAL 0
    ("-0.0", "string", "-0.0", False),
    ("-0.000", "string", "-0.0", False),
    ("-0e0", "string", "-0.0", False),
    ("0.0", "string", "0.0", False),
    ("-0", "string", "0", False),
    ("true", "string", "true", False),
    ("false", "string", "false", False),
    ('"null"', "string", None, False),
    ('{"a": 1}', "string", None, True),
    ("[1, 2]", "string", None, True),
    # bool
    ("true", "bool", True, False),
    ("false", "bool", False, False),
    ('"true"', "bool", True, False),
    ('"FALSE"', "bool", False, False),
    ("1", "bool", None, True),
    ("0", "bool", None, True),
    ('"yes"', "bool", None, True),
    ('"null"', "bool", None, False),
    # time
    ('"2013-01-01T10:17:00Z"', "time", T0, False),
    ('"2013-01-01T10:17:00.000+00:00"', "time", T0, False),
    ('"2013-01-01T12:17:00+02:00"', "time", T0, False),
    ('"2013-01-01 10:17:00"', "time", T0, False),
    ('"1969-12-31T23:59:59.999Z"', "time", -1, False),
    ('"2024-02-29T00:00:00Z"', "time", 1_709_164_800_000, False),
    ('"2023-02-29T00:00:00Z"', "time", None, True),
    ("1357035420000", "time", T0, False),
    ('"1357035420000"', "time", T0, False),
    ("1357035420000.9", "time", T0, False),
    ("1.35703542E12", "time", T0, False),
    ("-1", "time", -1, False),
    ('"bad"', "time", None, True),
    ("true", "time", None, True),
    ('{"t": 1}', "time", None, True),
    ('"null"', "time", None, False),
]

#: ``(payload JSON, spec, type, expected value, expected error)`` for paths, required/optional/default.
INPUTS: list[tuple[str, InputSpec, str, object, bool]] = [
    ("{}", InputSpec(("v",)), "int", None, True),
    ('{"v": null}', InputSpec(("v",)), "int", None, True),
    ('{"v": "null"}', InputSpec(("v",)), "string", None, True),
    ("{}", InputSpec(("v",), optional=True), "int", None, False),
    ("{}", InputSpec(("v",), default=7, has_default=True), "int", 7, False),
    ('{"v": "null"}', InputSpec(("v",), default=7, has_default=True), "int", 7, False),
    ('{"v": "bar"}', InputSpec(("v",), default=7, has_default=True), "int", None, True),
    ('{"v": 0}', InputSpec(("v",), default=7, has_default=True), "int", 0, False),
    ('{"a": {"b": [1, -0.0]}}', InputSpec(("a", "b", 1)), "string", "-0.0", False),
    ('{"v": 0.0, "v": -0.0}', InputSpec(("v",)), "string", "-0.0", False),
    ('{"v": -0.0, "v": 0.0}', InputSpec(("v",)), "string", "0.0", False),
    ("{}", InputSpec(("v",), default=False, has_default=True), "bool", False, False),
    ("{}", InputSpec(("v",), default=T0, has_default=True), "time", T0, False),
    ("{}", InputSpec(("v",), default="", has_default=True), "string", "", False),
    ('{"a": {"b": [1, 7]}}', InputSpec(("a", "b", 1)), "int", 7, False),
    ('{"a": {"b": [1, 7]}}', InputSpec(("a", "b", 2)), "int", None, True),
    ('{"a": {"b": [1, 7]}}', InputSpec(("a", "c")), "int", None, True),
    ('{"a": [1]}', InputSpec(("a", "b")), "int", None, True),
    ('{"a": 5}', InputSpec(("a", 0)), "int", None, True),
    ('{"a.b": 5}', InputSpec(("a.b",)), "int", 5, False),
    ('{"a b": "x"}', InputSpec(("a b",)), "string", "x", False),
    ('{"é": 1.5}', InputSpec(("é",)), "float", 1.5, False),
    ("not json", InputSpec(("v",)), "int", None, True),
]


def _python_row(payload: str, spec: InputSpec, type_name: str):
    try:
        parsed = json.loads(payload)
    except ValueError:
        return None, "missing required input" if not spec.optional and not spec.has_default else None
    return read_input(parsed, spec, type_name)


@pytest.mark.parametrize("raw,type_name,expected,error", COERCIONS, ids=[f"{t}:{r}" for r, t, _, _ in COERCIONS])
def test_coerce_python(raw, type_name, expected, error):
    value, err = coerce(json.loads(raw), type_name)
    assert same(value, expected), f"{value!r} != {expected!r}"
    assert (err is not None) == error, err


@pytest.mark.parametrize("payload,spec,type_name,expected,error", INPUTS,
                         ids=[f"{t}:{p}:{s.path}" for p, s, t, _, _ in INPUTS])
def test_read_input_python(payload, spec, type_name, expected, error):
    value, err = _python_row(payload, spec, type_name)
    assert same(value, expected), f"{value!r} != {expected!r}"
    assert (err is not None) == error, err


def test_required_error_message():
    assert read_input({}, InputSpec(("v",)), "int") == (None, "missing required input")
    assert coerce(5.6, "int") == (5, "loss of precision")


def test_coercion_spark_matches(spark):
    """All rows in one DataFrame; one column pair per distinct (spec, type), each compiled in its own query."""
    from pyspark.sql import functions as F

    from compiler.typesystem import input_column_with_error

    cases = [(f'{{"v": {raw}}}', InputSpec(("v",), optional=True), t, v, e) for raw, t, v, e in COERCIONS]
    cases += INPUTS
    df = spark.createDataFrame([(k, c[0]) for k, c in enumerate(cases)], "_row bigint, raw string")
    out, slot_of = grouped_columns([(spec, t) for _p, spec, t, _v, _e in cases],
                                   lambda key: input_column_with_error(F.col("raw"), *key))
    # one query per (spec, type) slot, planned as replay plans input coercion (without whole-stage code
    # generation, writer.session.without_codegen): all slots in one projection exceed Janino's 64 KB
    # limit, and Spark would then evaluate them interpreted, which is not what the jobs run
    from writer.session import without_codegen

    got = {}
    with without_codegen(spark):
        for u in range(1, len(out), 2):
            for r in df.select(out[0], *out[u:u + 2]).collect():
                if slot_of[r["_row"]] == (u - 1) // 2:  # the slot's own rows
                    got[r["_row"]] = r
    failures = []
    for k in range(len(cases)):
        r = got.get(k)
        if r is None:
            failures.append(f"row {k}: not returned by its slot's query")
            continue
        u = slot_of[k]
        payload, spec, t, expected, error = cases[k]
        value, err = r[f"v{u}"], r[f"e{u}"]
        py_value, py_err = _python_row(payload, spec, t)
        if not (same(value, expected) and err is error and same(py_value, value) and (py_err is not None) is err):
            failures.append(f"{t} {payload} {spec}: spark={value!r}/{err!r} "
                            f"python={py_value!r}/{py_err!r} expected={expected!r}/{error!r}")
    assert not failures, "\n".join(failures)


def test_time_column_matches_parse_time(spark):
    from pyspark.sql import functions as F

    from compiler.typesystem import parse_time

    texts = ["2013-01-01T10:17:00Z", "1357035420000", "1.35703542E12", "2013-01-01", "nope", None,
             "2013-01-01T10:17:00.999999Z", "0000-01-01T00:00:00Z",
             # the canonical form's fast path (typesystem._J_CANONICAL) and texts of its shape it must leave alone
             "2024-03-01T00:00:01.779Z", "1900-01-01T00:00:00.000Z", "2099-12-31T23:59:59.999Z",
             "1969-12-31T23:59:59.999Z", "2012-02-29T12:00:00.500Z", "2013-02-29T00:00:00.000Z",
             "2013-13-01T00:00:00.000Z", "2013-01-32T00:00:00.000Z", "2013-01-01T24:00:00.000Z",
             "2013-01-01T23:60:00.000Z", "2013-01-01T23:59:60.000Z", "1899-12-31T23:59:59.999Z",
             "2100-01-01T00:00:00.000Z", "2013-01-01T10:17:00.000z", "2013-01-01T10:17:00.000Z "]
    rows = spark.createDataFrame([(x,) for x in texts], "raw string").select(
        "raw", time_column(F.col("raw")).alias("ms")).collect()
    for r in rows:
        try:
            expected = None if r.raw is None else parse_time(r.raw)
        except ValueError:
            expected = None
        assert r.ms == expected, r.raw
    longs = spark.createDataFrame([(T0,), (-1,)], "raw bigint").select(time_column(F.col("raw")).alias("ms"))
    assert [r.ms for r in longs.collect()] == [T0, -1]


def test_input_column_keeps_lossy_value(spark):
    """``input_column`` is the value half of ``input_column_with_error``: errors null, 5.6 as int still 5."""
    from pyspark.sql import functions as F

    from compiler.typesystem import input_column

    df = spark.createDataFrame([('{"v": 5.6}',), ('{"v": "bar"}',), ('{"v": "7"}',)], "raw string")
    got = [r.v for r in df.select(input_column(F.col("raw"), InputSpec(("v",)), "int").alias("v")).collect()]
    assert got == [5, None, 7]


def test_negative_zero_keeps_its_sign(spark):
    """A JSON ``-0.0`` is Python's float ``-0.0`` (``'-0.0'`` as a string). Spark's ``parse_json`` stores
    it as the DECIMAL 0, sign lost: the Spark inputs take the sign from the raw token, by the whole path
    (``input_column``) and by the writer's top-level field pass (``writer.features.input_columns``)."""
    import math

    from pyspark.sql import functions as F

    from compiler.plan import Feature
    from compiler.typesystem import input_column
    from writer.features import input_columns
    from writer.session import without_codegen

    payloads = ['{"v": -0.0, "a": [-0.00]}', '{"v": 0.0, "a": [0.0]}', '{"v": -0, "a": [-0]}']
    feats = {"f": Feature(name="f", type="float", kind="input", input=InputSpec(("v",))),
             "s": Feature(name="s", type="string", kind="input", input=InputSpec(("v",))),
             "fa": Feature(name="fa", type="float", kind="input", input=InputSpec(("a", 0))),
             "sa": Feature(name="sa", type="string", kind="input", input=InputSpec(("a", 0)))}
    df = spark.createDataFrame([(k, p) for k, p in enumerate(payloads)], "_row bigint, _raw string")
    with without_codegen(spark):
        by_field = sorted(input_columns(df, ["_row"], feats).collect())
        by_path = sorted(df.select("_row", *[input_column(F.col("_raw"), f.input, f.type).alias(n)
                                             for n, f in feats.items()]).collect())
    for rows in (by_field, by_path):
        got = [(math.copysign(1.0, r["f"]), r["s"], math.copysign(1.0, r["fa"]), r["sa"]) for r in rows]
        want = []
        for p in payloads:
            py = {n: _python_row(p, f.input, f.type)[0] for n, f in feats.items()}
            want.append((math.copysign(1.0, py["f"]), py["s"], math.copysign(1.0, py["fa"]), py["sa"]))
        assert got == want == [(-1.0, "-0.0", -1.0, "-0.0"), (1.0, "0.0", 1.0, "0.0"), (1.0, "0", 1.0, "0")]


#: Payloads whose top-level shape decides what every input reads: the writer takes top-level fields
#: out of the payload in one pass (``writer.features.input_columns``), so these check that pass against
#: the API's reading (case-sensitive keys, the last of a repeated key, non-object payloads, odd names).
SHAPES: list[tuple[str, InputSpec, str]] = [
    ('{"Carrier": "BB"}', InputSpec(("carrier",), optional=True), "string"),
    ('{"carrier": "AA", "Carrier": "BB"}', InputSpec(("carrier",)), "string"),
    ('{"carrier": "x", "carrier": "y"}', InputSpec(("carrier",)), "string"),
    ('[1, 2]', InputSpec(("v",), optional=True), "int"),
    ('[1, 2]', InputSpec((1,)), "int"),
    ('[{"v": 3}]', InputSpec((0, "v")), "int"),
    ('5', InputSpec(("v",), default=7, has_default=True), "int"),
    ('"text"', InputSpec(("v",)), "string"),
    ('{"a`b": 4, "a": 1}', InputSpec(("a`b",)), "int"),
    ('{"a": {"b": {"c": "deep"}}}', InputSpec(("a", "b", "c")), "string"),
    ('{"a": {"b": {"c": "deep"}}}', InputSpec(("a", "b")), "string"),
    ('{"v": {"w": 1}}', InputSpec(("v",)), "int"),
    ('{"v": 1e400}', InputSpec(("v",)), "float"),
    ('{"v": 12.50}', InputSpec(("v",)), "string"),
    ('{"v": 123456789012345678901234}', InputSpec(("v",)), "string"),
]


def test_writer_inputs_match_path_lookups(spark):
    """``writer.features.input_columns`` (top-level fields taken out in one pass) reads every input as a
    lookup of its whole path in the parsed payload does, and as the API does on the shapes above."""
    from pyspark.sql import functions as F

    from compiler.plan import Feature
    from compiler.typesystem import input_column
    from writer.features import input_columns
    from writer.session import without_codegen

    cases = [(f'{{"v": {raw}}}', InputSpec(("v",), optional=True), t) for raw, t, _v, _e in COERCIONS]
    cases += [(p, spec, t) for p, spec, t, _v, _e in INPUTS] + SHAPES
    # one feature per distinct (spec, type); every row reads every feature (payloads of other cases too)
    feats: dict[tuple, Feature] = {}
    for _p, spec, t in cases:
        feats.setdefault((spec, t), Feature(name=f"i{len(feats)}", type=t, kind="input", input=spec))
    names = {f.name: f for f in feats.values()}
    payloads = sorted({p for p, _s, _t in cases})
    df = spark.createDataFrame([(k, p) for k, p in enumerate(payloads)], "_row bigint, _raw string")
    lookups = [input_column(F.col("_raw"), f.input, f.type).alias(f"w_{n}") for n, f in names.items()]
    with without_codegen(spark):
        got = {r["_row"]: r for r in input_columns(df, ["_row"], names).collect()}
        want = {r["_row"]: r for r in df.select("_row", *lookups).collect()}
    assert sorted(got) == sorted(want) == list(range(len(payloads)))
    failures = [f"{f.type} {payloads[k]} {f.input}: fields={got[k][n]!r} path={want[k][f'w_{n}']!r}"
                for k in got for n, f in names.items() if not same(got[k][n], want[k][f"w_{n}"])]
    shapes = {p for p, _s, _t in SHAPES if "1e400" not in p}  # Python's json reads 1e400 as inf, orjson refuses it
    for k in got:
        if payloads[k] in shapes:
            for n, f in names.items():
                py, _err = _python_row(payloads[k], f.input, f.type)
                if f.input in {s for p, s, _t in SHAPES if p == payloads[k]} and not same(got[k][n], py):
                    failures.append(f"{f.type} {payloads[k]} {f.input}: spark={got[k][n]!r} python={py!r}")
    assert not failures, "\n".join(failures[:20])


def _json_number_tokens(n: int, seed: int) -> list[str]:
    """JSON number tokens of every shape ``parse_json`` stores differently: 64-bit integers, integers
    beyond them (decimals), plain decimals of 1-38 digits and scales, exponents (doubles), overflow."""
    import random

    rnd = random.Random(seed)
    toks = ["0", "-0", "1", "-1", "0.0", "-0.0", "1.5", "1e5", "1E5", "1e-7", "1.0e-7", "0.0000001", "100.00",
            "123456789012345678901234567890", "1.23456789012345678901234567890123456789",
            "3.14159265358979323846264338327950288419716939937510", "9223372036854775807",
            "9223372036854775808", "-9223372036854775809", "1e400", "-1e400", "-1e-400", "4.9e-324",
            "1.7976931348623157e308", "2.5e+3", "123e-2", "-0e0", "0e10", "12345678901234567890.5"]
    for _ in range(n):
        k = rnd.random()
        if k < 0.3:
            toks.append(str(rnd.randint(-10 ** rnd.randint(1, 25), 10 ** rnd.randint(1, 25))))
        elif k < 0.55:
            toks.append(repr(rnd.uniform(-1e6, 1e6) * 10 ** rnd.randint(-30, 30)))
        elif k < 0.8:
            toks.append(f"{'-' if rnd.random() < 0.3 else ''}{rnd.randint(0, 10 ** rnd.randint(1, 20))}."
                        f"{rnd.randint(0, 10 ** rnd.randint(1, 25)):0{rnd.randint(1, 25)}d}")
        else:
            toks.append(f"{rnd.randint(-999, 999)}e{rnd.randint(-330, 330)}")
    return toks


def test_variant_token_text_equals_variant_get_string(spark):
    """``compiler.typesystem.variant_token``'s text (``to_json`` for numbers and booleans) is the text
    ``try_variant_get(.., 'string')`` gives, on every kind of JSON token, read whole and by a path."""
    from pyspark.sql import functions as F

    from compiler.typesystem import variant_token

    toks = _json_number_tokens(3000, seed=20261130)
    toks += ["true", "false", "null", '"x"', '"null"', '"12"', '""', "[1, 2]", '{"a": 1}', "[]", "{}",
             '"a\\"b"', '"tab\\there"', '"\\u00e9t\\u00e9"', '"été"', '"\\ud83d\\ude00"', '"line\\nbreak"']
    df = spark.createDataFrame([(t, '{"a": %s}' % t) for t in toks], "tok string, raw string")
    parsed = F.try_parse_json("raw")
    field = F.try_variant_get(parsed, "$", "struct<a variant>").getField("a")
    kind_f, text_f = variant_token(field, ())
    kind_p, text_p = variant_token(parsed, ("a",))
    got = df.select(
        "tok", kind_f.alias("kind"), kind_p.alias("kind_p"),
        F.try_variant_get(field, "$", "string").alias("want_field"), text_f.alias("got_field"),
        F.try_variant_get(parsed, "$.a", "string").alias("want_path"), text_p.alias("got_path"),
    ).collect()
    kinds = {r["kind"].split("(")[0].split("<")[0] for r in got}
    assert {"BIGINT", "DECIMAL", "DOUBLE", "BOOLEAN", "STRING", "VOID", "ARRAY"} <= kinds, kinds
    assert all(r["kind"] == r["kind_p"] for r in got)
    bad = [r for r in got if r["got_field"] != r["want_field"] or r["got_path"] != r["want_path"]]
    assert not bad, bad[:10]


def test_format_time_column_matches_format_time(spark):
    """The Spark formatter of times (replay's ``_time`` and time features) writes the API's text for every
    time in years 0000-9999 -- ends of days, months, leap days, both ends of the range -- and null outside it."""
    import random

    from pyspark.sql import functions as F

    from compiler.typesystem import MAX_TIME_MS, MIN_TIME_MS, format_time, format_time_column

    rng = random.Random(11)
    day = 86_400_000
    values = [MIN_TIME_MS, MIN_TIME_MS + 1, MAX_TIME_MS, MAX_TIME_MS - 1, 0, -1, 1, 951_782_400_000 - 1,
              951_782_400_000, 951_868_800_000, 4_107_542_400_000, -2_203_891_200_000]  # 2000-02-29, 2100-03-01, ...
    values += [rng.randint(MIN_TIME_MS, MAX_TIME_MS) for _ in range(20000)]
    values += [rng.randint(MIN_TIME_MS // day, MAX_TIME_MS // day) * day + off for off in (0, day - 1) for _ in range(500)]
    outside = [MIN_TIME_MS - 1, MAX_TIME_MS + 1, -2**63, 2**63 - 1]
    rows = spark.createDataFrame([(v,) for v in values + outside] + [(None,)], "ms long").select(
        "ms", format_time_column(F.col("ms")).alias("text")).collect()
    got = {r["ms"]: r["text"] for r in rows}
    assert {v: got[v] for v in values} == {v: format_time(v) for v in values}
    assert [got[v] for v in outside] == [None] * len(outside)
    assert got[None] is None


def test_format_time_is_datetimes_utc_text():
    """``format_time`` writes what ``datetime`` does for years 0001-9999 (an independent calendar), for days
    met again (its date text is kept per day) and at both ends of each day."""
    import random
    from datetime import datetime, timedelta, timezone

    from compiler.typesystem import MAX_TIME_MS, format_time

    rng = random.Random(12)
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    first = int((datetime(1, 1, 1, tzinfo=timezone.utc) - epoch).total_seconds()) * 1000
    day = 86_400_000
    values = [rng.randint(first, MAX_TIME_MS) for _ in range(5000)]
    values += [d * day + off for d in (rng.randint(first // day + 1, MAX_TIME_MS // day - 1) for _ in range(300))
               for off in (0, day - 1, rng.randrange(day))]
    values += values[:200]
    for ms in values:
        t = epoch + timedelta(milliseconds=ms)
        want = (f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}."
                f"{t.microsecond // 1000:03d}Z")
        assert format_time(ms) == want, ms


@pytest.mark.parametrize("type_name, values", [
    ("int", [0, -5, INT64_MAX, INT64_MIN]),
    ("str", ["", "é", "a\x00b"]),
    ("bool", [True, False]),
    ("float", [0.0, -0.0, 1, 2.5, float("inf"), float("-inf"), float("nan"), 1e308]),
    ("duration", [0, 1.5, float("nan")]),
    ("time", [0, 1357035420123, -62135596800000, 253402300799999, 253402300800000, -62135596800001]),
    ("array<struct{t:time,n:int}>", [[], [{"t": 0, "n": 2}, {"t": None, "n": None}]]),
    ("array<tuple{time,duration}>", [[[0, 1.5], [None, float("inf")]]]),
    ("struct{a:float,b:str}", [{"a": float("nan"), "b": "x"}, {}]),
])
def test_json_encoder_is_to_json_value(type_name, values):
    """``json_encoder`` (serving's per-output encoder, chosen once) gives what ``to_json_value`` gives, value by
    value, and is ``None`` only where every value is its own JSON form."""
    from compiler.typesystem import json_encoder, to_json_value

    encode = json_encoder(type_name)
    for v in values:
        got = v if encode is None else encode(v)
        want = to_json_value(v, type_name)
        assert json.dumps(got) == json.dumps(want)
        if encode is None:
            assert got is v
