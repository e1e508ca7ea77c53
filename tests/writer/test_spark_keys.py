"""The Spark twin of the key encoding agrees with Python's (SPEC §5.5)."""

from __future__ import annotations

from pyspark.sql import functions as F

from compiler.algebra.keys import encode_key
from compiler.algebra.spark import encode_tuple_column

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
