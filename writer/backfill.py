"""``scowl backfill``: historical events -> tiles in Redis (SPEC §5.6).

Steps: read the timeline (``writer.sources``), set aside invalid records,
widen the start of the run window ``[start, end)`` down to a whole tile of the
coarsest level in use (reading the older events that tile needs), compute each state's store image with
Spark built-ins (``writer.tiles``) and write it from the executors, pipelined
(``writer.sink``). Tiles are overwritten, never added to, so re-running a
window gives the same state. The end is not widened: a tile that ``end``
cuts through holds exactly the events before ``end``, so online events from
``end`` on add to it correctly, and a later run starting at ``end`` is widened
down to that tile's start and rewrites it whole. The covered interval is recorded per state in
``sc:cov:<definition hash>`` (field ``<start_ms>-<end_ms>``, value: wall-clock
ms of the run).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import redis
from pyspark import StorageLevel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from compiler.algebra.windows import levels_s
from compiler.plan import Plan, StateSpec
from writer.sink import write_partition
from writer.sources import read_events, valid
from writer.tiles import feature_frames, state_rows, writes_of_state

Progress = Callable[[str, int, int], None]

#: Spark jobs (one per state) submitted at once from driver threads.
CONCURRENT_JOBS = 4


@dataclass
class BackfillReport:
    """What a backfill did.

    Attributes:
        requested: ``(start_ms, end_ms)`` as asked (or the events' span).
        window: ``(start_ms, end_ms)`` after widening to whole tiles.
        widened: whether widening changed the window.
        events: valid events inside the widened window.
        rejected: invalid records set aside (see ``rejected_path``).
        rejected_path: where they were written, if any.
        rows: store-image rows written, per definition hash.
        seconds: wall time per phase.
    """

    requested: tuple[int, int]
    window: tuple[int, int]
    widened: bool
    events: int = 0
    rejected: int = 0
    rejected_path: str | None = None
    rows: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


class BackfillError(ValueError):
    """The backfill cannot run (empty input, bad window, unsupported plan)."""


def widen(start_ms: int, end_ms: int, unit_ms: int) -> tuple[int, int]:
    """Widen ``[start_ms, end_ms)`` to multiples of ``unit_ms``.

    >>> widen(90_000, 150_000, 60_000)
    (60000, 180000)
    """
    lo = (start_ms // unit_ms) * unit_ms
    hi = -((-end_ms) // unit_ms) * unit_ms
    return lo, hi


def run_backfill(
    spark: SparkSession,
    plan: Plan,
    paths: Sequence[str | Path],
    redis_url: str,
    start_ms: int | None = None,
    end_ms: int | None = None,
    rejected_dir: str | Path | None = None,
    progress: Progress | None = None,
) -> BackfillReport:
    """Backfill every state of ``plan`` from the events in ``paths``.

    Args:
        spark: the session (``writer.session.get_spark``).
        plan: the compiled plan.
        paths: JSONL files, globs or directories (Sumatra timeline format).
        redis_url: the store.
        start_ms, end_ms: run window ``[start, end)`` in epoch ms; default the
            events' full span.
        rejected_dir: where invalid records are written (JSONL text); default
            none (counted only).
        progress: optional callback ``(phase, done, total)``.

    Returns:
        A :class:`BackfillReport`.

    Raises:
        BackfillError: no valid events, ``start >= end``.
        writer.features.StagedFeatureError: aggregates that depend on each other across
            event types in a cycle (no dependency stage can compute either first).
        writer.sources.SourceError: an input path matches nothing.
    """
    report_progress = progress or (lambda phase, done, total: None)
    t0 = time.perf_counter()
    raw = read_events(spark, paths)
    ok = valid(list(plan.events))
    raw = raw.persist(StorageLevel.MEMORY_AND_DISK)
    report_progress("read", 0, 1)
    span = raw.where(ok).agg(F.min("_time_ms"), F.max("_time_ms"), F.count(F.lit(1))).collect()[0]
    bad = raw.where(~ok | ok.isNull())
    rejected = bad.count()
    rejected_path = None
    if rejected and rejected_dir is not None:
        rejected_path = str(Path(rejected_dir) / f"backfill-{int(time.time() * 1000)}")
        bad.select("_raw").write.mode("overwrite").text(rejected_path)
    if span[2] == 0:
        raise BackfillError("no valid events in the input (each line needs a known _type and a parseable _time)")
    s = span[0] if start_ms is None else start_ms
    e = span[1] + 1 if end_ms is None else end_ms
    if s >= e:
        raise BackfillError(f"empty run window: start {s} >= end {e}")
    unit_s = max((max(levels_s(st.window_s)) for st in plan.states.values()), default=1)
    ws, _ = widen(s, e, unit_s * 1000)
    we = e
    report = BackfillReport(requested=(s, e), window=(ws, we), widened=(ws, we) != (s, e), rejected=rejected,
                            rejected_path=rejected_path)
    # Decayed* states have no window: they are computed from every event
    # before the end; the others from the widened run window only.
    decayed = any(st.function.startswith("Decayed") for st in plan.states.values())
    events = raw.where(ok & (F.col("_time_ms") < F.lit(we)))
    if not decayed:
        events = events.where(F.col("_time_ms") >= F.lit(ws))
    events = events.persist(StorageLevel.MEMORY_AND_DISK)
    report.events = events.where(F.col("_time_ms") >= F.lit(ws)).count()
    raw.unpersist()
    report.seconds["read"] = time.perf_counter() - t0
    report_progress("read", 1, 1)

    t1 = time.perf_counter()
    states = sorted(plan.states.values(), key=lambda st: st.definition_hash)
    url = redis_url
    # Input coercion makes wide projections; whole-stage code generation of
    # them can exceed the JVM's 64 KB method limit (Spark then falls back,
    # slowly, logging errors). Materialise the feature columns without it,
    # then aggregate with it.
    previous = spark.conf.get("spark.sql.codegen.wholeStage")
    spark.conf.set("spark.sql.codegen.wholeStage", "false")
    try:
        # writes that depend on aggregates read the events before the window from the input
        history = raw.where(ok & (F.col("_time_ms") < F.lit(we)))
        staged = feature_frames(events, plan, states, history=history, history_start_ms=None if decayed else ws)
        frames = {ev: df.persist(StorageLevel.MEMORY_AND_DISK) for ev, df in staged.items()}
        for df in frames.values():
            df.count()
    finally:
        spark.conf.set("spark.sql.codegen.wholeStage", previous)
    def write_state(st: StateSpec) -> tuple[str, int]:
        rows = state_rows(writes_of_state(frames, st), st, we, ws)
        return st.definition_hash, int(rows.rdd.mapPartitions(lambda it: [write_partition(it, url)]).sum())

    # One Spark job per state, several in flight at once: each job is small,
    # so concurrent jobs keep the cores busy during the others' planning,
    # scheduling and Redis round trips.
    report_progress("tiles", 0, len(states))
    with ThreadPoolExecutor(max_workers=CONCURRENT_JOBS) as pool:
        for i, fut in enumerate(as_completed([pool.submit(write_state, st) for st in states]), start=1):
            h, written = fut.result()
            report.rows[h] = written
            report_progress("tiles", i, len(states))
    for df in frames.values():
        df.unpersist()
    events.unpersist()
    client = redis.Redis.from_url(redis_url)
    now = int(time.time() * 1000)
    pipe = client.pipeline(transaction=False)
    for st in states:
        pipe.hset(f"sc:cov:{st.definition_hash}", f"{ws}-{we}", now)
    pipe.execute()
    client.close()
    report.seconds["tiles"] = time.perf_counter() - t1
    return report
