"""Event sources -> a DataFrame of raw events (SPEC §5.6).

Inputs: JSONL timelines (Sumatra format: one JSON object per line with
``_type``, optional ``_time``, payload fields) and Parquet files with the same
fields as columns (``_time`` a string, epoch ms or a timestamp). Files, globs
and directories are expanded into one sorted list of files; "file order" is
that list, then line (row) order within each file. In-memory inputs
(``scowl.training``) take the same path: a Spark DataFrame of events is
rendered row by row as a Parquet file is (:func:`events_from_frame`), and
JSON texts, one per event, are numbered in list order (:func:`events_from_json`).

Output columns: ``_type`` (string), ``_time_ms`` (long, event time in epoch
ms), ``_seq`` (long, the 0-based position of the record among the input's
non-blank records, in file order: SPEC §6 ``scowl replay``), ``_raw``
(string, the event's JSON text; a Parquet row is rendered with ``to_json``,
timestamps as ISO-8601 UTC with milliseconds). Records that are not JSON
objects with a known ``_type`` and a parseable ``_time`` are counted and set
aside by the caller (:func:`valid`).
"""

from __future__ import annotations

import glob
import os
import struct
from pathlib import Path
from typing import Sequence

import mmh3
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from compiler.typesystem import MAX_TIME_MS, MIN_TIME_MS, time_column
from writer.session import configure, memo_column, restart_lambda_names


class SourceError(ValueError):
    """An input path matched no file."""


def expand_paths(paths: Sequence[str | Path]) -> list[str]:
    """Expand files, globs and directories (recursively ``*.jsonl``, ``*.json``, ``*.parquet``) into sorted files.

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


#: bytes of each JSONL file :func:`estimate_events` reads to measure its mean line length
SAMPLE_BYTES = 1 << 20


def estimate_events(paths: Sequence[str | Path]) -> int:
    """Estimate the number of events in ``paths`` without starting Spark (cheap: footers and 1 MiB per file).

    Used to pick a job's JVM options before the JVM starts
    (``writer.session.java_options``), so it needs to be right within a
    factor, not exact. It is also where a command meets its inputs first,
    so a file it cannot read is a :class:`SourceError` here, before any
    Spark job: the user gets one line naming the file, not a failed job's
    Java error.

    Args:
        paths: files, globs or directories, as :func:`read_events` takes them.

    Returns:
        Parquet: the row counts of the files' footers (pyarrow). JSONL: each
        file's size divided by the mean line length of its first
        :data:`SAMPLE_BYTES` bytes (a file shorter than that is counted
        exactly); a ``.gz`` or ``.bz2`` file (Spark's text source
        decompresses them) by the lines of its first :data:`SAMPLE_BYTES`
        decompressed bytes per compressed byte read (the decoder reads ahead,
        so this falls short: by 12% on a highly compressible 3 MiB test file).

    Raises:
        SourceError: a path matches nothing, or a file cannot be read: no
            read permission, a ``.parquet`` file without a readable Parquet
            footer (not Parquet, truncated, empty), a ``.gz``/``.bz2`` file
            whose first bytes do not decompress.
    """
    import bz2
    import gzip

    total = 0
    for f in expand_paths(paths):
        if _is_parquet(f):  # a file: expand_paths lists a directory's files
            total += _parquet_rows(f)
            continue
        try:
            size = os.path.getsize(f)
            opener = {".gz": gzip.open, ".bz2": bz2.open}.get(Path(f).suffix)
            with open(f, "rb") as raw:
                if opener is None:
                    head = raw.read(SAMPLE_BYTES)
                else:
                    with opener(raw) as fh:
                        head = fh.read(SAMPLE_BYTES)
                read = raw.tell()  # bytes of the file behind head (compressed: what the decoder consumed)
        except OSError as e:
            if e.errno is not None:  # the file system's refusal (permissions, a vanished file)
                raise SourceError(f"cannot read {f}: {e.strerror}") from None
            # gzip.BadGzipFile and bz2's "Invalid data stream" are OSErrors without an errno
            raise SourceError(f"{f} does not decompress ({_first_line(e)})") from None
        except (EOFError, ValueError) as e:  # a stream that ends early, bad compressed data
            raise SourceError(f"{f} does not decompress ({_first_line(e)})") from None
        whole = len(head) < SAMPLE_BYTES or read >= size
        lines = head.count(b"\n") + (1 if head and not head.endswith(b"\n") and whole else 0)
        if whole:
            total += lines
        elif lines:
            total += round(size * lines / max(read, 1))
        else:  # one line longer than the sample
            total += 1
    return total


def _parquet_rows(path: str) -> int:
    """The rows of one Parquet file, from its footer (pyarrow).

    Raises:
        SourceError: the file cannot be read, or has no readable footer (a
            footer that does not parse is a bare ``OSError`` in pyarrow).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, OSError) and e.errno is not None:
            raise SourceError(f"cannot read {path}: {e.strerror}") from None
        raise SourceError(f"{path} is not a readable Parquet file ({_first_line(e)})") from None


def _first_line(e: BaseException) -> str:
    """The first line of an exception's message (pyarrow's may run on), or its type's name."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _is_parquet(path: str) -> bool:
    return path.endswith(".parquet") or (os.path.isdir(path) and any(Path(path).glob("*.parquet")))


def _json_rows(df: DataFrame) -> DataFrame:
    """Each row of ``df`` as its JSON text, one ``_raw`` string column (null fields left out, timestamps ISO-8601)."""
    opts = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "ignoreNullFields": "true"}
    return df.select(F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns]), opts).alias("_raw"))


def _raw_lines(spark: SparkSession, path: str) -> DataFrame:
    """One file as a single ``_raw`` string column, in file order."""
    if _is_parquet(path):
        return _json_rows(spark.read.parquet(path))
    return spark.read.text(path).withColumnRenamed("value", "_raw")


def read_events(spark: SparkSession, paths: Sequence[str | Path], dense_seq: bool = True) -> DataFrame:
    """Read JSONL and Parquet timelines into the raw event DataFrame (module docstring).

    ``_seq`` is computed with built-ins: ``monotonically_increasing_id`` gives
    (partition << 33) + row within the partition; one small job counts the
    rows per partition, and each row's position is its partition's offset
    plus its row number. File reads split deterministically, so the numbering
    is the same whenever Spark recomputes the frame.

    Args:
        spark: the session.
        paths: files, globs or directories (``*.jsonl``, ``*.json``, ``*.parquet``).
        dense_seq: number the records 0, 1, 2, .. (SPEC §6, what ``scowl
            replay`` writes). ``False``: ``_seq`` keeps file order but has
            gaps (``monotonically_increasing_id``), and the counting job,
            a second read of every input, is skipped (backfill only orders
            by it).

    Returns:
        Columns ``_type``, ``_time_ms``, ``_seq``, ``_raw``; ``_type`` or
        ``_time_ms`` is null for records that are not valid events.

    Raises:
        SourceError: a path matches nothing.
    """
    files = expand_paths(paths)
    df = _raw_lines(spark, files[0])
    for f in files[1:]:
        df = df.unionByName(_raw_lines(spark, f))
    return _numbered(df, dense_seq)


def events_from_frame(df: DataFrame) -> DataFrame:
    """Read the events of a Spark DataFrame (one row per event) into the raw event DataFrame (module docstring).

    Each row becomes the JSON text of its columns, as a Parquet input's row
    does (``_type``, ``_time`` -- string, epoch ms or timestamp -- and the
    payload fields; null fields left out, timestamps ISO-8601 with their
    offset). The text is checkpointed (``localCheckpoint``, one job) before it
    is numbered, so that ``_seq`` is stable even when ``df`` is not
    deterministic; ``_seq`` is the row order Spark gives (its partitions in
    order: ``orderBy`` first when the order matters).

    Args:
        df: the events; any columns Spark's ``to_json`` renders.

    Returns:
        Columns ``_type``, ``_time_ms``, ``_seq`` (0, 1, 2, ..), ``_raw``, as :func:`read_events`.
    """
    from pyspark import StorageLevel

    return _numbered(_json_rows(df).localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK), True)


def events_from_json(spark: SparkSession, records: Sequence[str]) -> DataFrame:
    """Read events given as JSON texts, in arrival order, into the raw event DataFrame (module docstring).

    Args:
        spark: the session.
        records: one JSON text per event (a JSONL line without its newline);
            ``_seq`` is the position in ``records`` (0-based).

    Returns:
        Columns ``_type``, ``_time_ms``, ``_seq``, ``_raw``, as :func:`read_events`
        (a text that is not a valid event has a null ``_type`` or ``_time_ms``).
    """
    df = spark.createDataFrame([(i, r) for i, r in enumerate(records)], "_seq long, _raw string")
    return _event_columns(df, F.col("_seq"))


def _numbered(df: DataFrame, dense_seq: bool) -> DataFrame:
    """Number the non-blank ``_raw`` records of ``df`` in partition order (:func:`read_events`) and parse them."""
    # octet_length, not length: the same test (no characters iff no bytes), without counting a line's
    # characters (UTF8String.numChars, ~10% of a replay's read phase by JFR samples; trim returns the
    # line itself when it has no spaces to drop)
    df = df.where(F.col("_raw").isNotNull() & (F.octet_length(F.trim(F.col("_raw"))) > 0))
    df = df.select("_raw", F.monotonically_increasing_id().alias("_mid"))
    if dense_seq:
        seq = dense_seq_column(F.col("_mid"), dict(df.groupBy(partition_of(F.col("_mid"))).count().collect()))
    else:
        seq = F.col("_mid")
    return _event_columns(df, seq)


def partition_of(mid: Column) -> Column:
    """The partition number of a ``monotonically_increasing_id`` value (its bits from 33 up)."""
    return F.shiftright(mid, 33).cast("int")


def dense_seq_column(mid: Column, counts: dict[int, int]) -> Column:
    """``0, 1, 2, ..`` in partition order from ``monotonically_increasing_id`` values and rows per partition.

    ``monotonically_increasing_id`` is ``(partition << 33) + row`` within the
    partition; a row's position is the rows of the partitions before its own
    plus its row number.

    Args:
        mid: the ``monotonically_increasing_id`` column (long).
        counts: partition number (:func:`partition_of`) -> its rows.

    Returns:
        The position, a long column.
    """
    offsets, total = [], 0
    for pid in range(max(counts, default=-1) + 1):
        offsets.append(total)
        total += counts.get(pid, 0)
    pid = partition_of(mid)
    offset = F.element_at(F.array(*[F.lit(o).cast("long") for o in offsets] or [F.lit(0).cast("long")]), pid + 1)
    return offset + (mid - F.shiftleft(pid.cast("long"), 33))


def seq_ranges(spark: SparkSession, total: int) -> "SeqRanges":
    """The range partitioning of a dense ``_seq`` (``0 .. total - 1``) over the session's shuffle partitions.

    See :class:`SeqRanges`.

    Args:
        spark: the session (``spark.sql.shuffle.partitions`` gives ``P``).
        total: the number of records ``_seq`` numbers.

    Returns:
        A :class:`SeqRanges`.
    """
    parts = max(1, int(spark.conf.get("spark.sql.shuffle.partitions") or 8))
    return SeqRanges(parts, max(total, 1), tuple(_partition_keys(parts)))


class SeqRanges:
    """Frames laid out by ranges of ``_seq``: partition ``i`` of ``P`` holds ``_seq`` in ``[i*total/P, (i+1)*total/P)``.

    ``_seq`` is dense (``0 .. total - 1``, SPEC §6), so the range of a row
    is known without sampling (what ``orderBy`` costs: the whole plan run
    twice). Spark's partitioner for an expression is ``pmod(murmur3(value,
    42), P)`` (``HashPartitioning``, the function ``F.hash`` computes); each
    range is given a key (the ``_p`` column) that this function sends to
    partition ``i``, found once by Spark itself. Frames laid out with
    :meth:`layout` are hash-partitioned by ``_p`` and sorted by ``(seq,
    _p)`` within partitions, so Spark joins two of them on ``["_seq",
    "_p"]`` without an exchange or a sort (both sides are co-partitioned,
    and a ``localCheckpoint`` keeps its plan's partitioning and order), and
    the joined rows come out in ``_seq`` order, partition after partition
    (``writer.replay``: the training set in input order).

    Attributes:
        parts: ``P``, the number of partitions.
        total: the number of records ``_seq`` numbers (at least 1).
        keys: per partition ``i``, a long that Spark's hash partitioning sends to ``i``.
    """

    def __init__(self, parts: int, total: int, keys: tuple[int, ...]):
        self.parts, self.total, self.keys = parts, total, keys

    def key(self, seq: Column) -> Column:
        """The ``_p`` value (long) of the range holding ``seq``."""
        index = F.least(F.floor(seq * F.lit(self.parts) / F.lit(self.total)).cast("int"), F.lit(self.parts - 1))
        return F.element_at(F.array(*[F.lit(k).cast("long") for k in self.keys]), F.greatest(index, F.lit(0)) + 1)

    def layout(self, df: DataFrame, seq: str = "_seq") -> DataFrame:
        """``df`` with ``_p`` (from its column ``seq``), partitioned by ``_p`` and sorted by ``(seq, _p)`` within.

        A frame that already has ``_p`` and that layout gets neither an
        exchange nor a sort (Spark drops a repartition its child already
        satisfies, and a sort of sorted rows).
        """
        if "_p" not in df.columns:
            df = df.withColumn("_p", self.key(F.col(seq)))
        return df.repartition(self.parts, F.col("_p")).sortWithinPartitions(seq, "_p")


def seq_join_keys(left: DataFrame, right: DataFrame) -> list[str]:
    """The keys to join two frames of events on: ``["_seq", "_p"]`` when both are laid out by :class:`SeqRanges`, else ``["_seq"]``."""
    return ["_seq", "_p"] if "_p" in left.columns and "_p" in right.columns else ["_seq"]


#: parts -> :func:`_partition_keys` (Spark's hash partitioning is the same function in every session)
_KEYS: dict[int, list[int]] = {}

def spark_hash_long(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of one ``long`` value: Murmur3 x86 32-bit of its 8 little-endian bytes.

    ``Murmur3_x86_32.hashLong`` mixes the low then the high 32 bits and
    finishes with length 8: the reference MurmurHash3 of those bytes, which
    ``mmh3`` computes.

    Args:
        value: a signed 64-bit integer.
        seed: the seed (Spark's ``hash`` and hash partitioning use 42).

    Returns:
        The signed 32-bit hash, as Spark's ``hash(value)`` returns it.

    Source: Apache Spark, ``org.apache.spark.unsafe.hash.Murmur3_x86_32.hashLong`` (Austin Appleby's MurmurHash3).
    """
    return mmh3.hash(struct.pack("<q", value), seed, signed=True)


def _partition_keys(parts: int) -> list[int]:
    """For each partition ``i < parts``, the smallest long ``>= 0`` that Spark's hash partitioning sends to ``i``.

    Hash partitioning sends a long ``x`` to ``pmod(hash(x), parts)``
    (``HashPartitioning``: Murmur3 with seed 42, :func:`spark_hash_long`),
    computed here without a job (one cost ~0.6 s at the start of a cold
    replay).

    Raises:
        RuntimeError: no such key among the first ``4096 * parts`` longs (not seen: murmur3 spreads them).
    """
    if parts in _KEYS:
        return _KEYS[parts]
    found: dict[int, int] = {}
    for x in range(4096 * parts):
        found.setdefault(spark_hash_long(x) % parts, x)
        if len(found) == parts:
            break
    missing = [i for i in range(parts) if i not in found]
    if missing:
        raise RuntimeError(f"no key of hash partition(s) {missing} of {parts}")
    _KEYS[parts] = [found[i] for i in range(parts)]
    return _KEYS[parts]


def envelope_columns(df: DataFrame, *rest: Column | str) -> DataFrame:
    """``_type``, ``_time_ms`` and ``rest`` of a frame with the ``_raw`` text (replay, backfill and stream inputs).

    Both envelope fields come from one parse (``json_tuple``: half the cost
    of a ``get_json_object`` per field); a repeated key reads as its last
    value, as the API's JSON parser reads it (docs/semantics.md §5). A
    record the API's parser would reject (:func:`read_as_the_api_reads_it`:
    text after the object, lone surrogate escapes, raw control characters in
    a string, single quotes, invalid UTF-8, a number beyond the double
    range) has a null ``_type`` (invalid: counted and set aside, where the
    API answers ``400 malformed-json``). The ``_time_ms`` tree
    (``compiler.typesystem.time_column``, ~0.1 s of py4j round trips) is
    built once per process (``writer.session.memo_column``).

    Args:
        df: a frame with ``_raw`` (string: one JSON record).
        rest: further columns to keep (names, or aliased columns).

    Returns:
        Columns ``_type`` (null for an invalid record), ``_time_ms`` (null
        unless a parseable ``_time`` in years 0000-9999, as the API reads
        it), then ``rest``.

    Source: SPEC §3.1 (``_time``), §4 (malformed JSON is a 4xx), §5.6 (bad records are counted and set aside).
    """
    configure(df.sparkSession)  # a repeated key in a nested object parses (try_parse_json, on the strict path)
    ok = memo_column(("envelope-ok",), lambda: read_as_the_api_reads_it(F.col("_raw")))
    fields = df.select(F.json_tuple("_raw", "_type", "_time").alias("_type", "_time"), *rest, ok.alias("_ok"))
    time_ms = memo_column(("envelope-time-ms",), lambda: time_column(F.col("_time")))
    # a record the API's parser rejects is invalid (null type), as the API answers such a body 400
    out = fields.select(F.when(F.col("_ok"), F.col("_type")).alias("_type"), time_ms.alias("_time_ms"),
                        *fields.columns[2:-1])
    # a time outside years 0000-9999 is null, as the API answers it bad-time (serving.evaluate; an epoch ms
    # number can lie beyond them). A projection of its own: Spark keeps it apart rather than copy the parse
    # into the test's three uses (CollapseProject)
    ms = F.col("_time_ms")
    return out.withColumn("_time_ms", F.when(ms.between(F.lit(MIN_TIME_MS), F.lit(MAX_TIME_MS)), ms))


#: A flat JSON object's text with nothing the API's parser is stricter on than ``json_tuple``'s
#: (:func:`read_as_the_api_reads_it`): one ``}``, at the end but for JSON whitespace, and no control character,
#: single quote, backslash or exponent (``e``/``E`` before a digit or ``+``). Possessive loops: one pass, no
#: backtracking. The control characters are listed one by one: Java then tests the class with one bit
#: lookup (a range ``\x00-\x1f`` made the pass 1.5x slower; a U+FFFD in the class, for bytes that are not
#: UTF-8, 7x: ``is_valid_utf8`` tests those).
_CLEAN_RUN = "(?:[^" + "".join(f"\\x{c:02x}" for c in range(32)) + r"'\\eE%s]++|[eE](?![+0-9]))*+"
_CLEAN_FLAT = "^" + _CLEAN_RUN % "}" + r"\}[ \t\r\n]*$"
#: Any JSON text with none of the characters of :data:`_CLEAN_FLAT` (a nested object's, say).
_CLEAN = "^" + _CLEAN_RUN % "" + "$"
#: A text with no exponent of 100 or more (``e``/``E``, maybe ``+`` and zeros, then three digits): one anchored
#: pass over the text, stopping only at each ``e`` (a search for the exponent, which tries every position, took
#: 1.5x its time over 300k nested lines).
_NO_LARGE_EXPONENT = r"^(?:[^eE]++|[eE](?!\+?0*[1-9][0-9]{2}))*+$"
#: A JSON string token (in valid JSON: a quote, then characters or escapes, then a quote).
_JSON_STRING = r'"(?:[^"\\]|\\.)*"'
#: A JSON number token (outside strings).
_JSON_NUMBER = r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"


def read_as_the_api_reads_it(raw: Column) -> Column:
    """Whether a record whose ``json_tuple`` parse succeeds is one JSON value the API's parser (orjson) accepts.

    ``json_tuple`` (Jackson, with Hive's two leniencies: raw control
    characters in strings and single quotes) reads what orjson also rejects:
    those two, lone surrogate escapes (``\\ud800``), bytes that are not UTF-8
    (Spark reads a line's bytes as they are, and a parse sees U+FFFD),
    numbers whose double is infinite (``1e400``, 400 digits: orjson's "number
    is infinity when parsed as double"), and text after the value
    (:func:`one_json_value`). A flat object's text with none of the
    characters those need (:data:`_CLEAN_FLAT`, one regular-expression pass:
    every line of the benchmark timelines) and no run of 309 digits is
    accepted as ``json_tuple`` parsed it, if it is UTF-8 (``is_valid_utf8``,
    every text). Any other text must also:

    * parse with ``try_parse_json`` (Jackson, strict, and the variant builder
      rejects lone surrogates);
    * hold no number whose double is infinite: only a text with a run of 210
      digits or an exponent of 100 or more can (``intdigits + exp >= 309``);
      in those the string tokens are removed and each number token is cast
      to a double (Java rounds as orjson does: ``1.7976931348623158e308`` is
      the largest finite one);
    * be one value (:func:`one_json_value`).

    A nested object's text with none of those characters (:data:`_CLEAN`)
    needs only the last.

    Known differences left, each rejecting what orjson accepts: nesting
    between 1,000 and 1,024 levels (a nested text is also read inside a
    wrapper, one level deeper), a number of over 1,000 characters that does
    not overflow (Jackson's read limits), and a text whose ``VARIANT`` would
    exceed Spark's 16 MiB.

    Args:
        raw: the record's text (string column).

    Returns:
        A boolean column, false (not null) for a null text; for a text whose
        ``json_tuple`` parse fails the answer is unspecified (its ``_type`` is null).

    Source: SPEC §4 (malformed JSON is a 4xx), §5.6 (bad records are counted and set aside);
    orjson's README ("Deserialize": what ``loads`` raises ``JSONDecodeError`` on).
    """
    numbers = F.regexp_extract_all(F.regexp_replace(raw, _JSON_STRING, '""'), F.lit(_JSON_NUMBER), 0)
    infinite = F.exists(numbers, lambda x: F.abs(x.cast("double")) == F.lit(float("inf")))
    # intdigits + exp >= 309: with an exponent below 100, a run of 210 digits
    may_overflow = _digit_run(raw, 210) | ~raw.rlike(_NO_LARGE_EXPONENT)
    finite = F.when(may_overflow, ~infinite).otherwise(F.lit(True))
    strict = F.try_parse_json(raw).isNotNull() & finite & one_json_value(raw)
    # without an exponent a number overflows only with 309 digits before its point
    no_long = ~_digit_run(raw, 309)
    ok = F.when(raw.rlike(_CLEAN_FLAT) & no_long, F.lit(True)) \
        .when(raw.rlike(_CLEAN) & no_long, one_json_value(raw)).otherwise(strict)
    return F.coalesce(F.is_valid_utf8(raw) & ok, F.lit(False))


def _digit_run(raw: Column, n: int) -> Column:
    """Whether the text ``raw`` holds a run of ``n`` digits (:func:`read_as_the_api_reads_it`'s overflow tests).

    The length is tested first: a text of fewer than ``n`` bytes has none, and is not converted for the
    regular expression (Spark evaluates ``And`` lazily).
    """
    return (F.octet_length(raw) >= F.lit(n)) & raw.rlike(f"[0-9]{{{n}}}")


#: A text whose only ``}`` ends it, but for JSON whitespace (:func:`one_json_value`'s quick test).
_ONE_CLOSING_BRACE = r"^[^}]*\}[ \t\r\n]*$"


def one_json_value(raw: Column) -> Column:
    """Whether ``raw``, a record that parses as a JSON object, holds nothing after it but JSON whitespace.

    ``json_tuple``, ``from_json`` and ``try_parse_json`` read the first JSON
    value of a text and ignore what follows it, where the API's parser
    rejects the body (``{"_type": ..} x``, or two objects on one line where
    files were joined without a newline: the second would be lost). The
    object of a text whose only ``}`` is its last character (a flat payload:
    one regular-expression scan) ends there. Any other text is read twice
    more, as the first of two array elements, ``[<text>,0]`` (two elements),
    and as the one value of an object, ``{"k":<text>}`` (one key): a parser
    stops at the end of the outer value, so text after the object could
    close either wrapper early (``..},0]..``, ``..}}..``), but not both: after
    the object, the array needs ``,`` or ``]`` and the object ``,"key":`` or
    ``}``, and each of those breaks the other wrapper. Measured on 1M flat
    Zipf lines (warm, 2 cores): 0.25 s on top of the envelope's 1.3 s parse,
    against 0.9 s for one wrapped read of every line.

    Args:
        raw: the record's text (string column).

    Returns:
        A boolean column (null for a null text); for a text that is no JSON
        object the answer is unspecified (the envelope has no ``_type``).

    Source: SPEC §4 (malformed JSON is a 4xx), §5.6 (bad records are counted and set aside).
    """
    as_element = F.json_array_length(F.concat(F.lit("["), raw, F.lit(",0]"))) == 2
    as_value = F.size(F.json_object_keys(F.concat(F.lit('{"k":'), raw, F.lit("}")))) == 1
    return raw.rlike(_ONE_CLOSING_BRACE) | (as_element & as_value)


def _event_columns(df: DataFrame, seq: Column) -> DataFrame:
    """``_type``, ``_time_ms``, ``_seq`` (= ``seq``) and ``_raw`` of a frame with the ``_raw`` text (:func:`envelope_columns`).

    Each read restarts the lambda variables' numbering first
    (``writer.session.restart_lambda_names``), so a job run again in the same
    session (a replay or backfill of the same topology: tests, notebooks)
    builds the same generated code and reuses the compiled classes.
    """
    restart_lambda_names(df.sparkSession)
    return envelope_columns(df, seq.alias("_seq"), "_raw")


def valid(event_types: Sequence[str]) -> Column:
    """Return the condition a raw event must meet to be used."""
    return F.col("_type").isin(list(event_types)) & F.col("_time_ms").isNotNull()


def event_id() -> Column:
    """The event's ``_id`` (SPEC §4) from ``_raw``, as the API reads it: a string, or an integer as its decimal text.

    The JSON is parsed only when its text could hold the key: a key that
    spells ``_id`` is the bytes ``"_id"`` or has a backslash escape in it,
    so texts with neither have no ``_id`` (null) without a parse (a JSON
    parse per event was a third of reading an input without ids). A key
    given twice reads as its last value (docs/semantics.md §5).
    """
    raw = F.col("_raw")
    # from_json, not get_json_object: a repeated key reads as its last value, as the API's parser reads it
    return F.when(raw.contains('"_id"') | raw.contains("\\"), F.from_json(raw, "_id string").getField("_id"))


def mark_repeated_ids(events: DataFrame) -> DataFrame:
    """Add ``_repeat`` (boolean): an earlier event of the input (smaller ``_seq``) has the same ``_id``.

    The API answers a repeated ``_id`` without writing it again (SPEC §4):
    every job that writes state from an input leaves the repeats' writes out
    (``writer.writes.writes_of_state``, ``writer.tilepass``), and replay
    still gives them a row, read without their own write, as the API
    answers them. Events without ``_id`` are never repeats. Ids are compared
    across event types and over the whole input (the API remembers an id
    for ``SCOWL_ID_TTL_S``; a batch input has no arrival clock, so within one
    input a repeat is always left out).

    Args:
        events: raw events (``_seq``, ``_raw``); call it only when some have
            an ``_id`` (without ``_repeat``, every event writes).

    Returns:
        ``events`` with ``_repeat``. The window partitions by the id, each
        event without one in a partition of its own (no skew on null).
    """
    from pyspark.sql import Window

    ident = F.coalesce(F.concat(F.lit("i"), event_id()), F.concat(F.lit("n"), F.col("_seq").cast("string")))
    first = Window.partitionBy(ident).orderBy("_seq")
    return events.withColumn("_repeat", event_id().isNotNull() & (F.row_number().over(first) > F.lit(1)))


def carried_columns(df: DataFrame) -> list[str]:
    """The raw-event columns feature frames keep: ``_time_ms``, ``_seq`` and ``_repeat`` when present."""
    return ["_time_ms", "_seq", *(["_repeat"] if "_repeat" in df.columns else [])]


def counted(df: DataFrame) -> Column:
    """The condition a feature frame's event meets to write state: not a repeated ``_id`` (:func:`mark_repeated_ids`)."""
    return ~F.col("_repeat") if "_repeat" in df.columns else F.lit(True)
