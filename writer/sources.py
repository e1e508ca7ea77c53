"""Event sources -> a DataFrame of raw events (SPEC §5.6).

Output columns: ``_type`` (string), ``_time_ms`` (long, event time in epoch
ms), ``_seq`` (long, position in the input, file order: file index in sorted
path order << 40 plus a row id increasing within the file), ``_raw`` (string,
the event's JSON text). Records that are not JSON objects with a known
``_type`` and a parseable ``_time`` are counted and set aside by the caller
(``bad_records``).
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from compiler.typesystem import time_column


class SourceError(ValueError):
    """An input path matched no file."""


def expand_paths(paths: Sequence[str | Path]) -> list[str]:
    """Expand files, globs and directories (recursively ``*.jsonl``/``*.json``) into sorted files.

    Raises:
        SourceError: a path matches nothing.
    """
    out: list[str] = []
    for p in paths:
        p = str(p)
        if os.path.isdir(p):
            found = sorted(
                str(f) for f in Path(p).rglob("*") if f.is_file() and f.suffix in (".jsonl", ".json", ".parquet")
            )
        elif any(ch in p for ch in "*?["):
            found = sorted(glob.glob(p, recursive=True))
        elif os.path.exists(p):
            found = [p]
        else:
            found = []
        if not found:
            raise SourceError(f"no input files match {p}")
        out.extend(found)
    return out


def read_events(spark: SparkSession, paths: Sequence[str | Path]) -> DataFrame:
    """Read JSONL timelines (Sumatra format) into the raw event DataFrame (module docstring).

    Args:
        spark: the session.
        paths: files, globs or directories.

    Returns:
        Columns ``_type``, ``_time_ms``, ``_seq``, ``_raw``; ``_type`` or
        ``_time_ms`` is null for records that are not valid events.
    """
    files = expand_paths(paths)
    frames = []
    for i, f in enumerate(files):
        df = spark.read.text(f).withColumnRenamed("value", "_raw")
        df = df.withColumn("_seq", F.lit(i).cast("long") * F.lit(1 << 40) + F.monotonically_increasing_id())
        frames.append(df)
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    df = df.where(F.length(F.trim(F.col("_raw"))) > 0)
    return df.select(
        F.get_json_object("_raw", "$._type").alias("_type"),
        time_column(F.get_json_object("_raw", "$._time")).alias("_time_ms"),
        "_seq",
        "_raw",
    )


def valid(event_types: Sequence[str]) -> Column:
    """Return the condition a raw event must meet to be used."""
    return F.col("_type").isin(list(event_types)) & F.col("_time_ms").isNotNull()
