"""``scowl backfill``: historical events -> tiles in Redis (SPEC §5.6, §6).

Steps: read the timeline (``writer.sources``: JSONL and Parquet files, globs,
directories), set aside invalid records, widen the start of the run window
``[start, end)`` down to a whole tile of the coarsest level in use (reading the
older events that tile needs), compute the values of aggregates that writes
depend on in dependency stages (``writer.pointintime``), compute each state's
store image with Spark built-ins (``writer.tiles``) and write it from the
executors, pipelined (``writer.sink``). Tiles are overwritten, never added
to, so re-running a window gives the same state, also after a run killed
half-way.

The end is not widened: a tile that ``end`` cuts through holds exactly the
events before ``end``, so online events from ``end`` on add to it correctly,
and a later run starting at ``end`` is widened down to that tile's start and
rewrites it whole. Except when time just after ``end`` (up to the next
whole tile) was already backfilled for a state of the run: then the end is
widened up to that tile's end too, so the run rewrites the tile whole
instead of dropping the later events from it.

``Decayed*`` states have no window: their one value is computed from every
event before the end, and where an earlier run already backfilled the state
up to a later time, from every event before that time (so a run over an
earlier window never rewinds it).

Coverage: once every tile of a run is written, its interval (widened) is
added per state to ``sc:cov:<definition hash>`` (fields
``<start_ms>-<end_ms>``, kept merged; value: wall-clock ms of the latest run;
``writer.status.record_coverage``). A run killed before that records nothing.

Store outages (``store_retry_s``, ``scowl backfill --store-retry``): a write
pipeline that meets an unavailable store is re-sent on a new connection after
1, 2, 4, ... s (every write is an overwrite), and every connection, the
coverage record's too, first checks that the store is the server process it
was as the run's writes began (``writer.redisio.WriteRetry``). One that
restarted since, or a cluster that failed over, may have lost writes already
acknowledged, so the run stops (``writer.redisio.StoreRestarted``) and records
nothing. The driver's reads of coverage wait out an outage too.

Online overlap: the online path records per state the earliest event time
it wrote (``sc:online``, ``compiler.algebra.storekeys.ONLINE_KEY``). A run that would
overwrite state at or after that time is refused (:class:`OnlineOverlapError`)
unless ``force``: for tile states, every tile up to the end rounded up to the
state's coarsest tile size is rewritten; for write logs, ``CountUnique`` and
``Latest*``, time up to the end; a ``Decayed*`` state is replaced whole, so
any online write conflicts (:func:`online_limit`).

``--auto`` (:func:`run_auto_backfill`) computes the windows itself: per state,
the input's event span ``[first event, last event + 1 ms)``, cut at the
state's :func:`online_limit` (unless ``force``), minus the state's covered
intervals; the union is split where the set of states needing it changes,
and each piece runs for exactly those states, in time order. With no
coverage that is the whole span; time beyond the input's span is never
"missing".

Progress (the ``progress`` callback, ``(phase, done, total)``): ``read``;
then per run window ``stage <k>`` (aggregate values of dependency stage
``k``, only when writes depend on aggregates), ``features`` (feature columns
per writer event type), ``tiles`` (per state) and ``coverage``. With
``--auto`` the run phases are prefixed ``run <i>/<n>: ``.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compiler.algebra.registry import storage_of
from compiler.algebra.windows import levels_s, raw_bucket_s
from compiler.plan import Plan, StateSpec
from compiler.typesystem import format_time
from writer.pointintime import staged_stage_count
from writer.redisio import DEFAULT_STORE_RETRY_S, WriteRetry, connect
from writer.session import abandon_jobs, with_job_tags, without_adaptive, without_codegen
from writer.sink import write_keys, write_partition
from writer.sources import event_id, mark_repeated_ids, read_events, valid
from writer.status import read_coverage, read_online_starts, record_coverage, state_features
from writer.tilepass import form, state_rows_all
from writer.tiles import feature_frames, state_rows
from writer.writes import writes_of_state

Progress = Callable[[str, int, int], None]

#: Spark jobs (one per state) submitted at once from driver threads.
CONCURRENT_JOBS = 4


@dataclass
class BackfillReport:
    """What one backfill run (one window) did.

    Attributes:
        requested: ``(start_ms, end_ms)`` as asked (or the events' span).
        window: ``(start_ms, end_ms)`` after widening to whole tiles.
        widened: whether widening changed the window.
        events: valid events inside the widened window.
        rejected: invalid records set aside (see ``rejected_path``).
        rejected_path: where they were written, if any.
        rows: store-image rows written, per definition hash (the states of the run).
        stages: number of dependency stages computed (0: no write depends on an aggregate).
        seconds: wall time per phase (``read``, ``features``, ``tiles``).
    """

    requested: tuple[int, int]
    window: tuple[int, int]
    widened: bool
    events: int = 0
    rejected: int = 0
    rejected_path: str | None = None
    rows: dict[str, int] = field(default_factory=dict)
    stages: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class AutoReport:
    """What ``backfill --auto`` did (:func:`run_auto_backfill`).

    Attributes:
        span: ``(first_ms, last_ms + 1)``: the valid input events' time span.
        missing: the computed windows ``(start_ms, end_ms, definition hashes)``,
            in time order, before widening.
        held_back: definition hash -> the time (epoch ms) from which the
            online path's writes keep ``--auto`` out (``None``: the whole state,
            a ``Decayed*`` the online path has written); only states whose
            limit cut into the span.
        runs: one :class:`BackfillReport` per window run.
        rejected, rejected_path: invalid input records (as in :class:`BackfillReport`).
    """

    span: tuple[int, int]
    missing: list[tuple[int, int, frozenset[str]]] = field(default_factory=list)
    held_back: dict[str, int | None] = field(default_factory=dict)
    runs: list[BackfillReport] = field(default_factory=list)
    rejected: int = 0
    rejected_path: str | None = None


class BackfillError(ValueError):
    """The backfill cannot run (empty input, bad window, unsupported plan)."""


class OnlineOverlapError(BackfillError):
    """The run window would overwrite state the online path has written (module docstring).

    Attributes:
        conflicts: ``[(definition hash, online start ms), ..]``.
    """

    def __init__(self, message: str, conflicts: list[tuple[str, int]]):
        super().__init__(message)
        self.conflicts = conflicts


# ------------------------------------------------------------------ windows
def widen(start_ms: int, end_ms: int, unit_ms: int) -> tuple[int, int]:
    """Widen ``[start_ms, end_ms)`` to multiples of ``unit_ms``.

    >>> widen(90_000, 150_000, 60_000)
    (60000, 180000)
    """
    lo = (start_ms // unit_ms) * unit_ms
    hi = -((-end_ms) // unit_ms) * unit_ms
    return lo, hi


def coarsest_ms(state: StateSpec) -> int:
    """Return the largest tile size stored for ``state``, in ms (``compiler.algebra.windows.levels_s``)."""
    return max(levels_s(state.window_s)) * 1000


def is_decayed(state: StateSpec) -> bool:
    """Return whether ``state`` is a ``Decayed*`` state (one value over all history, no window)."""
    return storage_of(state) == "decayed"


def _tiled(state: StateSpec) -> bool:
    """Whether backfill writes the state as overwritten tiles (``mode`` ``set`` in ``writer.tiles``)."""
    return storage_of(state) == "tiles"


def online_limit(state: StateSpec, online_ms: int) -> int | None:
    """Return the latest run end (epoch ms) that leaves the online path's writes to ``state`` intact.

    A run ending at ``end`` rewrites, for a tile state, every tile up to
    ``end`` rounded up to the state's coarsest tile size; for a write log,
    ``CountUnique`` or ``Latest*`` state, time before ``end``; a ``Decayed*``
    state whole. A run ending after the limit would overwrite online writes
    made at or after ``online_ms``. For a tile state the limit is also a
    boundary of its raw buckets (``windows.raw_bucket_s``): a late online
    read takes its own resolution tile from the online raw entries of that
    tile's bucket, so a backfilled tile sharing a bucket with online writes
    would go uncounted (SPEC §3.3). Only windows under 15 s, whose coarsest
    tile (5 s) is finer than a bucket (15 s), are held back further by it.

    Args:
        state: the state.
        online_ms: its online-writer start time (epoch ms).

    Returns:
        The limit in epoch ms, or ``None`` if no run can leave them intact (``Decayed*``).

    Source: SPEC §5.6 (a window overlapping online time is refused).
    """
    if is_decayed(state):
        return None
    if _tiled(state):
        unit = math.lcm(coarsest_ms(state), raw_bucket_s(state.resolution_s) * 1000)
        return (online_ms // unit) * unit
    return online_ms


def subtract(interval: tuple[int, int], covered: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Return the parts of the half-open ``interval`` outside the sorted, disjoint ``covered`` intervals.

    >>> subtract((0, 10), [(2, 4), (6, 7)])
    [(0, 2), (4, 6), (7, 10)]
    >>> subtract((5, 5), [])
    []
    """
    lo, hi = interval
    out = []
    for a, b in covered:
        if b <= lo or a >= hi:
            continue
        if a > lo:
            out.append((lo, a))
        lo = max(lo, b)
    if lo < hi:
        out.append((lo, hi))
    return out


def auto_windows(needs: dict[str, list[tuple[int, int]]]) -> list[tuple[int, int, frozenset[str]]]:
    """Split the union of per-state missing intervals into run windows (module docstring).

    Args:
        needs: definition hash -> sorted, disjoint intervals ``(start_ms, end_ms)`` it lacks.

    Returns:
        ``[(start_ms, end_ms, hashes)]`` in time order: consecutive pieces
        with the same set of states needing all of the piece are one window.

    >>> [(s, e, sorted(hs)) for s, e, hs in auto_windows({"a": [(0, 10)], "b": [(0, 5), (20, 30)]})]
    [(0, 5, ['a', 'b']), (5, 10, ['a']), (20, 30, ['b'])]
    """
    points = sorted({p for ivs in needs.values() for iv in ivs for p in iv})
    out: list[tuple[int, int, frozenset[str]]] = []
    for a, b in zip(points, points[1:]):
        hs = frozenset(h for h, ivs in needs.items() if any(lo <= a and b <= hi for lo, hi in ivs))
        if not hs:
            continue
        if out and out[-1][1] == a and out[-1][2] == hs:
            out[-1] = (out[-1][0], b, hs)
        else:
            out.append((a, b, hs))
    return out


@dataclass
class _Window:
    """One run: widened ``[start, end)``, its states, and the ``Decayed*`` states' ends."""

    requested: tuple[int, int]
    start: int
    end: int
    states: list[StateSpec]
    decay_end: dict[str, int]
    #: the run may overwrite online writes (``--force``): the tiles it writes then drop the
    #: generated scripts' ``_m`` (``writer.sink.write_partition``)
    force: bool = False


def _window(plan: Plan, states: list[StateSpec], s: int, e: int, coverage: dict[str, list[tuple[int, int]]],
            online: dict[str, int], force: bool) -> _Window:
    """Widen ``[s, e)`` for ``states`` and check it against the online path (module docstring).

    Raises:
        BackfillError: ``s >= e``.
        OnlineOverlapError: the run would overwrite online writes and not ``force``.
    """
    if s >= e:
        raise BackfillError(f"empty run window: start {format_time(s)} is not before end {format_time(e)}")
    unit = max((coarsest_ms(st) for st in plan.states.values()), default=1000)
    ws, up = widen(s, e, unit)
    we = e
    if up != e and any(subtract((e, up), coverage.get(st.definition_hash, [])) != [(e, up)] for st in states):
        we = up  # the rest of the end tile was backfilled: rewrite it whole
    decay_end = {st.definition_hash: max([we] + [hi for _, hi in coverage.get(st.definition_hash, [])])
                 for st in states if is_decayed(st)}
    if not force:
        conflicts = []
        for st in states:
            o = online.get(st.definition_hash)
            if o is None:
                continue
            lim = online_limit(st, o)
            if lim is None or we > lim:
                conflicts.append((st, o, lim))
        if conflicts:
            raise OnlineOverlapError(_overlap_message(plan, ws, we, conflicts),
                                     [(st.definition_hash, o) for st, o, _ in conflicts])
    return _Window((s, e), ws, we, states, decay_end, force)


def _overlap_message(plan: Plan, ws: int, we: int, conflicts: list[tuple[StateSpec, int, int | None]]) -> str:
    names = state_features(plan)
    parts = [f"{', '.join(names[st.definition_hash]) or st.definition_hash} (online writes since {format_time(o)})"
             for st, o, _ in conflicts]
    msg = (f"refusing to backfill [{format_time(ws)}, {format_time(we)}): it overlaps time the online path has "
           f"already written for {'; '.join(parts)}. ")
    limits = [lim for _, _, lim in conflicts if lim is not None]
    if limits:
        msg += f"End the run at or before {format_time(min(limits))} (whole tiles before the online writes)"
        if len(limits) < len(conflicts):
            msg += "; Decayed* aggregates hold one value over all history, so any backfill replaces their online state"
        msg += ", or pass --force to overwrite what the online path wrote."
    else:
        msg += ("Decayed* aggregates hold one value over all history, so any backfill replaces their online state; "
                "pass --force to overwrite it.")
    return msg


# ------------------------------------------------------------------- stages
# --------------------------------------------------------------------- runs
@dataclass
class _Input:
    """The valid input events (persisted) and what reading them found."""

    raw: DataFrame
    events: DataFrame
    span: tuple[int, int]
    rejected: int
    rejected_path: str | None
    seconds: float
    valid: int = 0


def _read_input(spark: SparkSession, plan: Plan, paths: Sequence[str | Path], rejected_dir: str | Path | None,
                progress: Progress) -> _Input:
    """Read the inputs, set invalid records aside, find the events' span (phase ``read``).

    Raises:
        BackfillError: no valid events.
        writer.sources.SourceError: a path matches nothing.
    """
    t0 = time.perf_counter()
    progress("read", 0, 1)
    # _seq orders events (ties within a ms), no output needs it dense: skip its counting read
    raw = read_events(spark, paths, dense_seq=False).persist(StorageLevel.MEMORY_AND_DISK)
    ok = valid(list(plan.events))
    # one pass over the cached events for the span and both counts: one job that parses, caches and
    # counts (adaptive execution would run the cache as a query stage of its own, then read it back)
    with without_adaptive(spark):
        span = raw.agg(F.min(F.when(ok, F.col("_time_ms"))), F.max(F.when(ok, F.col("_time_ms"))),
                       F.count(F.when(ok, 1)), F.count(F.when(~ok | ok.isNull(), 1)),
                       F.count(F.when(ok, event_id()))).collect()[0]
    bad = raw.where(~ok | ok.isNull())
    rejected = span[3]
    rejected_path = None
    if rejected and rejected_dir is not None:
        rejected_path = str(Path(rejected_dir) / f"backfill-{int(time.time() * 1000)}")
        bad.select("_raw").write.mode("overwrite").text(rejected_path)
    if span[2] == 0:
        raw.unpersist()
        raise BackfillError("no valid events in the input (each record needs a known _type and a parseable _time)")
    events = raw.where(ok)
    if span[4]:  # events with an _id: a repeated one writes nothing (SPEC §4), marked once for every window
        events = mark_repeated_ids(events).persist(StorageLevel.MEMORY_AND_DISK)
    progress("read", 1, 1)
    return _Input(raw, events, (span[0], span[1] + 1), rejected, rejected_path, time.perf_counter() - t0,
                  valid=span[2])


def _execute(spark: SparkSession, plan: Plan, inp: _Input, win: _Window, redis_url: str,
             progress: Progress, retry: WriteRetry, notice: Callable[[str], None] | None = None) -> BackfillReport:
    """Compute and write the tiles of one window, then record its coverage (module docstring).

    Every write, and the coverage record, waits out an unavailable store
    (``retry``: :func:`_write_retry`) and stops the run if the store is not
    the server process it was as the writes began.
    """
    ws, we = win.start, win.end
    report = BackfillReport(requested=win.requested, window=(ws, we), widened=(ws, we) != win.requested,
                            rejected=inp.rejected, rejected_path=inp.rejected_path)
    report.seconds["read"] = inp.seconds
    t0 = time.perf_counter()
    # Decayed* states have no window: they are computed from every event
    # before their end; the others from the widened run window only.
    read_end = max([we, *win.decay_end.values()])
    lo = ws if not win.decay_end else None
    # a run that reads every valid event uses the cached input as it is (no second copy in the cache)
    owned = not ((lo is None or lo <= inp.span[0]) and read_end >= inp.span[1])
    events = inp.events
    if owned:
        events = events.where(F.col("_time_ms") < F.lit(read_end))
        if lo is not None:
            events = events.where(F.col("_time_ms") >= F.lit(lo))
        events = events.persist(StorageLevel.MEMORY_AND_DISK)
    if ws <= inp.span[0] and we >= inp.span[1]:
        report.events = inp.valid  # counted when the input was read
    else:
        report.events = events.where((F.col("_time_ms") >= F.lit(ws)) & (F.col("_time_ms") < F.lit(we))).count()
    states = sorted(win.states, key=lambda st: st.definition_hash)
    # materialise the (wide) feature columns without whole-stage codegen, then aggregate with it
    with without_codegen(spark):
        # writes that depend on aggregates read the events before the window from the input
        history = inp.events.where(F.col("_time_ms") < F.lit(read_end))
        frames = feature_frames(events, plan, states, history=history,
                                history_start_ms=None if win.decay_end else ws, progress=progress, persist=True)
        report.stages = staged_stage_count(plan, states)
    report.seconds["features"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    url = redis_url

    forced = win.force
    # the store as the writes begin: one that restarts from here on may lose some of them (a restart
    # before, during the read, loses none of this run's)
    pinned = retry.pinned(redis_url)

    stopping = threading.Event()  # set when the run fails or is stopped: no state's write job starts after it

    def write(rows: DataFrame) -> int:
        batches = rows.rdd.mapPartitions(lambda it: [write_partition(it, url, forced, pinned)])
        if stopping.is_set():
            raise RuntimeError("backfill stopped")
        return int(batches.sum())

    def write_state(st: StateSpec) -> tuple[str, int]:
        end = win.decay_end.get(st.definition_hash, we)
        return st.definition_hash, write(state_rows(writes_of_state(frames, st), st, end, ws))

    # The merged-tile states in one pass (writer.tilepass: one job for all),
    # write logs and Decayed* one job per state, several in flight at once:
    # concurrent jobs keep the cores busy during the others' planning,
    # scheduling and Redis round trips.
    together = [st for st in states if form(st) is not None]
    apart = [st for st in states if form(st) is None]
    progress("tiles", 0, len(states))
    done = 0
    tag = f"scowl-backfill-{uuid.uuid4().hex}"  # the write jobs of every pool thread (writer.session.with_job_tags)
    pool = ThreadPoolExecutor(max_workers=CONCURRENT_JOBS)
    watch = StoreWatch(redis_url, notice or _log_notice, pinned.budget_s) if pinned.budget_s > 0 else None
    try:
        if watch is not None:
            watch.start()
        futures = [pool.submit(with_job_tags(write_state, [tag]), st) for st in apart]
        if together:
            def write_together() -> tuple[None, dict[str, int]]:
                parts = int(spark.conf.get("spark.sql.shuffle.partitions"))
                rows = state_rows_all(frames, together, ws, we, key_partitions=parts)
                per_g: dict[int, int] = {}
                # planned (seconds, cold)
                batches = rows.rdd.mapPartitions(lambda it: [write_keys(it, url, forced, pinned)])
                if stopping.is_set():
                    raise RuntimeError("backfill stopped")
                for counts in batches.collect():
                    for g, n in counts.items():
                        per_g[g] = per_g.get(g, 0) + n
                return None, {st.definition_hash: per_g.get(g, 0) for g, st in enumerate(together)}
            futures.append(pool.submit(with_job_tags(write_together, [tag])))
        for fut in as_completed(futures):
            h, written = fut.result()
            if h is None:
                report.rows.update(written)
                done += len(together)
            else:
                report.rows[h] = written
                done += 1
            progress("tiles", done, len(states))
    except BaseException:
        # a failed state or a stop signal: the states not started never start, those in flight end now
        stopping.set()
        abandon_jobs(pool, spark.sparkContext, tag)
        raise
    finally:
        pool.shutdown()
        if watch is not None:
            watch.stop()
    for df in frames.values():
        df.unpersist()
    if owned:
        events.unpersist()
    report.seconds["tiles"] = time.perf_counter() - t1
    # only now, with every tile written, is the window covered
    progress("coverage", 0, 1)

    def cover() -> None:
        client = connect(redis_url)
        try:
            pinned.check(client)  # a store that restarted may have lost tiles: no coverage claim
            record_coverage(client, [st.definition_hash for st in states], ws, we, int(time.time() * 1000))
        finally:
            client.close()

    pinned.call(cover)
    progress("coverage", 1, 1)
    return report


def _write_retry(spark: SparkSession, store_retry_s: float) -> WriteRetry:
    """The run's :class:`writer.redisio.WriteRetry`: ``store_retry_s`` of waiting per outage, not yet pinned to a
    server process (``WriteRetry.pinned``, as a run's writes begin). Under ``local[*]`` the tasks log no waits:
    the driver says it once (:class:`StoreWatch`).

    Raises:
        ValueError: ``store_retry_s`` < 0.
    """
    if store_retry_s < 0:
        raise ValueError("store_retry_s must be >= 0")
    return WriteRetry(store_retry_s, label="backfill", log_waits=not spark.sparkContext.master.startswith("local"))


def _log_notice(text: str) -> None:
    """A notice of a run without a ``notice`` callback: logged (``scowl.backfill``, warning)."""
    import logging

    logging.getLogger("scowl.backfill").warning("%s", text)


class StoreWatch:
    """While a run's writes go on, asks the store every :attr:`interval_s` whether it answers, and says when not.

    The write tasks wait out an outage themselves (``writer.redisio.WriteRetry``);
    this tells the user, on the driver, once when the store stops answering
    and once when it answers again, instead of a line from every waiting
    task (under ``local[*]`` those would cut through the command's progress
    display). Asks with ``INFO server`` on every primary
    (``writer.redisio.store_identity``), each call with a 2 s timeout.

    Args:
        url: the store.
        notice: called with each message (``scowl backfill`` prints it).
        budget_s: the run's ``store_retry_s`` (named in the message).
        interval_s: seconds between two asks.
    """

    def __init__(self, url: str, notice: Callable[[str], None], budget_s: float, interval_s: float = 1.0):
        self.url = url
        self.notice = notice
        self.budget_s = budget_s
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scowl-store-watch", daemon=True)

    def start(self) -> None:
        """Start asking (a daemon thread)."""
        self._thread.start()

    def stop(self) -> None:
        """Stop asking and wait for the thread (at most one ask's timeout)."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        import redis

        from writer.redisio import store_identity, store_outage

        client = None
        down_since: float | None = None
        while not self._stop.wait(self.interval_s):
            try:
                if client is None:
                    client = connect(self.url, socket_timeout=2.0)
                store_identity(client)
            except redis.RedisError as e:
                if client is not None:
                    client.close()
                    client = None
                outage = store_outage(e)
                if down_since is None and outage is not None:
                    down_since = time.monotonic()
                    self.notice(f"store unavailable ({outage}): the writes wait for it, up to --store-retry "
                                f"{self.budget_s:g}s")
                continue
            if down_since is not None:
                self.notice(f"store answers again after {time.monotonic() - down_since:.0f}s")
                down_since = None
        if client is not None:
            client.close()


def _store_state(plan: Plan, redis_url: str) -> tuple[dict[str, list[tuple[int, int]]], dict[str, int]]:
    """Return ``(coverage per state, online-writer start per state)`` from the store."""
    client = connect(redis_url)
    try:
        return read_coverage(client, sorted(plan.states)), read_online_starts(client)
    finally:
        client.close()


def check_window(plan: Plan, redis_url: str, start_ms: int, end_ms: int, force: bool = False) -> tuple[int, int]:
    """Check a run window against the store before any Spark work; return it widened (module docstring).

    ``run_backfill`` checks again; this lets the CLI refuse before starting Spark.

    Args:
        plan: the plan.
        redis_url: the store.
        start_ms, end_ms: run window ``[start, end)`` (epoch ms).
        force: skip the online-overlap check.

    Returns:
        ``(start_ms, end_ms)`` widened as the run would widen them.

    Raises:
        BackfillError: ``start >= end``.
        OnlineOverlapError: the window overlaps online writes and not ``force``.
        redis.RedisError: the store failed.
    """
    win = _window(plan, list(plan.states.values()), start_ms, end_ms, *_store_state(plan, redis_url), force)
    return win.start, win.end


def run_backfill(
    spark: SparkSession,
    plan: Plan,
    paths: Sequence[str | Path],
    redis_url: str,
    start_ms: int | None = None,
    end_ms: int | None = None,
    rejected_dir: str | Path | None = None,
    progress: Progress | None = None,
    force: bool = False,
    store_retry_s: float = DEFAULT_STORE_RETRY_S,
    notice: Callable[[str], None] | None = None,
) -> BackfillReport:
    """Backfill every state of ``plan`` from the events in ``paths`` over one run window (SPEC §5.6).

    Args:
        spark: the session (``writer.session.get_spark``).
        plan: the compiled plan.
        paths: JSONL or Parquet files, globs or directories (``writer.sources``).
        redis_url: the store.
        start_ms, end_ms: run window ``[start, end)`` in epoch ms; each
            defaults to the events' span (first event, last event + 1 ms).
        rejected_dir: where invalid records are written (JSONL text); default
            none (counted only).
        progress: optional callback ``(phase, done, total)`` (module docstring).
        force: run even where the online path has written (module docstring).
        store_retry_s: seconds each write (and the coverage record) waits
            out an unavailable store, re-sent after 1, 2, 4, ... s (every
            write is an overwrite: re-sending one changes nothing); a store
            that answers as another server process than at the start (it
            restarted, or a cluster failed over) stops the run, since what it
            had not persisted may be lost (``writer.redisio.WriteRetry``).
        notice: called with a line when the store stops answering during
            the writes and when it answers again (:class:`StoreWatch`);
            default: logged.

    Returns:
        A :class:`BackfillReport`.

    Raises:
        BackfillError: no valid events, ``start >= end``.
        OnlineOverlapError: the window overlaps online writes and not ``force``
            (checked before anything is written; with ``start_ms`` and
            ``end_ms`` both given, before the input is read).
        writer.features.StagedFeatureError: aggregates that depend on each other across
            event types in a cycle (no dependency stage can compute either first).
        writer.sources.SourceError: an input path matches nothing.
        redis.RedisError: the store failed (past ``store_retry_s``).
        writer.redisio.StoreRestarted: the store restarted during the run (on
            the driver, or quoted in a Spark job's failure).
    """
    report_progress = progress or (lambda phase, done, total: None)
    states = list(plan.states.values())
    retry = _write_retry(spark, store_retry_s)
    win = None
    if start_ms is not None and end_ms is not None:  # refuse before reading the input
        win = _window(plan, states, start_ms, end_ms, *retry.call(lambda: _store_state(plan, redis_url)), force)
    inp = _read_input(spark, plan, paths, rejected_dir, report_progress)
    try:
        if win is None:
            s = inp.span[0] if start_ms is None else start_ms
            e = inp.span[1] if end_ms is None else end_ms
            win = _window(plan, states, s, e, *retry.call(lambda: _store_state(plan, redis_url)), force)
        return _execute(spark, plan, inp, win, redis_url, report_progress, retry, notice)
    finally:
        inp.events.unpersist()
        inp.raw.unpersist()


def run_auto_backfill(
    spark: SparkSession,
    plan: Plan,
    paths: Sequence[str | Path],
    redis_url: str,
    rejected_dir: str | Path | None = None,
    progress: Progress | None = None,
    force: bool = False,
    store_retry_s: float = DEFAULT_STORE_RETRY_S,
    notice: Callable[[str], None] | None = None,
) -> AutoReport:
    """Backfill exactly what each state lacks within the input's span (``--auto``, module docstring).

    Args:
        spark, plan, paths, redis_url, rejected_dir, store_retry_s, notice: as :func:`run_backfill`.
        progress: optional callback ``(phase, done, total)``; run phases are
            prefixed ``run <i>/<n>: ``.
        force: ignore the online path's writes (fill up to the span's end).

    Returns:
        An :class:`AutoReport` (no runs when nothing is missing).

    Raises:
        As :func:`run_backfill`; every window is checked before the first
        one runs.
    """
    report_progress = progress or (lambda phase, done, total: None)
    retry = _write_retry(spark, store_retry_s)
    inp = _read_input(spark, plan, paths, rejected_dir, report_progress)
    try:
        coverage, online = retry.call(lambda: _store_state(plan, redis_url))
        report = AutoReport(span=inp.span, rejected=inp.rejected, rejected_path=inp.rejected_path)
        lo, hi = inp.span
        needs: dict[str, list[tuple[int, int]]] = {}
        for h, st in plan.states.items():
            end = hi
            if not force and h in online:
                lim = online_limit(st, online[h])
                if lim is None or lim < hi:
                    report.held_back[h] = lim
                if lim is None:
                    continue
                end = min(end, lim)
            needs[h] = subtract((lo, end), coverage.get(h, [])) if lo < end else []
        report.missing = auto_windows(needs)
        wins = [_window(plan, [plan.states[h] for h in sorted(hs)], s, e, coverage, online, force)
                for s, e, hs in report.missing]
        for i, win in enumerate(wins, start=1):
            prefix = f"run {i}/{len(wins)}: "
            report.runs.append(_execute(spark, plan, inp, win, redis_url,
                                        lambda phase, done, total: report_progress(prefix + phase, done, total),
                                        retry, notice))
        return report
    finally:
        inp.events.unpersist()
        inp.raw.unpersist()
