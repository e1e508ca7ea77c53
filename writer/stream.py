"""``scowl stream``: live events -> tiles merged into Redis, exactly once per micro-batch (SPEC §5.7).

Sources (Spark Structured Streaming):

* ``dir:PATH`` -- new JSONL files in a directory (Spark's file source; put
  files in place atomically, e.g. write a hidden ``.name`` and rename). Within
  a batch, events are ordered by file path, then line.
* ``redis:STREAM`` -- a Redis Stream (``writer.redis_source``), entries in
  stream order.

Each micro-batch (``foreachBatch``, :class:`BatchProcessor`):

1. parses the raw events (``_type``, ``_time_ms``, ``_seq``, ``_raw`` as in
   ``writer.sources``) and sets aside invalid records (not JSON, unknown
   ``_type``, bad ``_time``);
2. takes the batch's **watermark**: the largest valid event time of the
   batches before it minus the allowed lateness (default: the plan's longest
   window). Events older than it are *late*: counted and written to the
   dead-letter output, never applied and never silently dropped;
3. records the watermark and counts in the checkpoint
   (``<checkpoint>/scowl/batches/<id>.json``) *before* touching the store, so
   a batch re-run after a crash uses the same watermark (the counts, and a
   ``dir:`` batch's file splits that number it, come from one job);
4. computes, in one Spark job, every state's counted writes of the batch
   (``writer.features.batch_features`` and
   ``writer.tilepass.batch_write_rows``: every writer event type in one
   frame, built-in column functions, one shuffle by key) and, per partition, their partial aggregates per (state, key, tile)
   with numpy (``compiler.algebra.arrowtiles.merge_ops``), and merges them
   into Redis from the executors (``writer.sink.merge_keys``): one
   atomic ``event.lua`` call per key that applies the key's merges only if
   the key has not yet recorded this batch id for this stream
   (field ``_b:<stream id>``), and records it. That job is built and
   planned on the driver while the counting job of step 3 runs on the
   executors (for a batch without ``_id``s and, from ``dir:``, of one file
   split; other batches are planned after the count); it runs after the
   record is written. Before that, each written
   state's earliest event time of the batch lowers its online-writer start
   (``sc:online``, as the API's writes do), so ``scowl backfill`` does not
   overwrite streamed time.

Spark re-runs an unfinished batch with the same id and the same input after
a restart (its offset log is written before the batch runs), so a batch's
effect is applied exactly once per key, whatever happened in between.

Dead letters: ``<dead letter dir>/late/batch-<id>/`` and
``.../invalid/batch-<id>/`` (text files, one raw record a line, rewritten
identically when a batch is re-run); default dead letter dir
``<checkpoint>/dead-letter``.

Not supported: aggregates whose keys, values or filters depend on other
aggregates (dependency stages): a batch alone does not hold the history
those values need. :func:`check_streamable` refuses them.

The stream job adds to what the store holds; do not point it at the store of
an API that appends its own events to the source stream (serving's
``SCOWL_EVENT_STREAM``): those events are already counted there.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import orjson
from pyspark import StorageLevel, inheritable_thread_target
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from compiler.algebra.storekeys import DEFAULT_ID_TTL_S
from compiler.plan import Plan, StateSpec
from writer.redisio import DEFAULT_STORE_RETRY_S, retry_outages, store_outage
from writer.session import memo_column, restart_lambda_names, without_adaptive, without_codegen
from writer.status import BATCH_RECORDS, CHECKPOINT_META, latest_batch_record
from writer.sink import claim_ids, merge_keys, merge_params
from writer.sources import envelope_columns, event_id, mark_repeated_ids, valid
from writer.features import batch_features
from writer.tilepass import batch_write_rows, tile_specs

#: Batch records older than this many batches are deleted (their totals live on in later records).
KEEP_RECORDS = 100

class StreamError(ValueError):
    """The stream cannot run: bad source, checkpoint of another source, unsupported plan."""


@dataclass
class BatchResult:
    """What one micro-batch did.

    Attributes:
        batch_id: Spark's batch id (0, 1, ...; the same when a batch is re-run).
        events: valid, on-time events applied.
        late: valid events older than the watermark (dead-lettered).
        invalid: invalid records (dead-lettered).
        watermark_ms: the batch's watermark (epoch ms), ``None`` for none yet.
        max_time_ms: the largest valid event time seen up to this batch.
        applied: state keys merged by this run.
        skipped: state keys found already merged (a re-run after a crash).
        rerun: the batch had been started before (its record existed).
        seconds: wall time.
        behind_ms: a ``redis:`` source's lag when the batch ended: the
            append time of the stream's last entry less that of the batch's
            last entry (ms; ``writer.redis_source.behind_ms``). ``None`` for a
            ``dir:`` source or an empty batch.
        retries: times the batch was run again after the store was
            unavailable (:class:`StoreRetry`); 0 for most.
        store_restarted: the store answering after those retries is not
            the server process the job began with (its ``run_id`` changed:
            a restart, a failover): what earlier batches merged is only
            there if the store persisted it. ``False`` when unknown (a
            cluster, no retry).
    """

    batch_id: int
    events: int = 0
    late: int = 0
    invalid: int = 0
    watermark_ms: int | None = None
    max_time_ms: int | None = None
    applied: int = 0
    skipped: int = 0
    rerun: bool = False
    seconds: float = 0.0
    behind_ms: int | None = None
    retries: int = 0
    store_restarted: bool = False


#: The longest wait before a batch is run again after a store outage, in seconds (the waits double from 1 s).
RETRY_MAX_WAIT_S = 30.0


@dataclass(frozen=True)
class StoreRetry:
    """A micro-batch about to run again because the store was unavailable (``on_retry`` of :func:`run_stream`).

    Attributes:
        batch_id: the batch.
        attempt: 1 for the first retry, 2 for the next, ...
        wait_s: seconds until it runs again.
        error: the store's error (``writer.redisio.store_outage``), e.g.
            ``"ConnectionError: Error 111 connecting to 127.0.0.1:6379. Connection refused."``.
        waited_s: seconds since the batch first failed so.
        budget_s: seconds after the first failure at which the job stops instead.
    """

    batch_id: int
    attempt: int
    wait_s: float
    error: str
    waited_s: float
    budget_s: float


@dataclass
class StreamReport:
    """What a ``scowl stream`` run did.

    Attributes:
        stream_id: the checkpoint's stream id (the guard field is ``_b:<id>``).
        checkpoint: the checkpoint directory.
        dead_letter: the dead-letter directory.
        batches: the batches this run processed, in order.
        totals: counts over every batch of the checkpoint, this run's and
            earlier ones: ``{"batches", "events", "late", "invalid"}``.
    """

    stream_id: str
    checkpoint: str
    dead_letter: str
    batches: list[BatchResult] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)

    @property
    def events(self) -> int:
        """Events applied by this run."""
        return sum(b.events for b in self.batches)

    @property
    def late(self) -> int:
        """Late events set aside by this run."""
        return sum(b.late for b in self.batches)

    @property
    def invalid(self) -> int:
        """Invalid records set aside by this run."""
        return sum(b.invalid for b in self.batches)


def parse_source(text: str) -> tuple[str, str]:
    """Split ``dir:PATH`` / ``redis:STREAM`` into ``(kind, target)``.

    Raises:
        StreamError: another form.

    >>> parse_source("dir:/data/in"), parse_source("redis:events")
    (('dir', '/data/in'), ('redis', 'events'))
    """
    kind, sep, target = text.partition(":")
    if not sep or kind not in ("dir", "redis") or not target:
        raise StreamError(f"--source must be dir:PATH or redis:STREAM, got {text!r}")
    return kind, target


def default_lateness_ms(plan: Plan) -> int:
    """The default allowed lateness: the longest window of the plan's aggregates (ms; 0 without any)."""
    return max((st.window_s * 1000 for st in plan.states.values()), default=0)


def check_streamable(plan: Plan) -> None:
    """Refuse plans whose state writes depend on aggregates (SPEC §5.6 dependency stages).

    Raises:
        StreamError: naming the writer features that need aggregate values.
    """
    from writer.features import needed_features

    bad = []
    for st in plan.states.values():
        for ev, w in st.writes.items():
            ep = plan.events[ev]
            aggs = [n for n in needed_features(ep, sorted(w.deps())) if ep.feature(n).kind == "aggregate"]
            if aggs:
                bad.append(f"{ev}: {', '.join(aggs)}")
    if bad:
        raise StreamError(
            "scowl stream does not support aggregates whose keys, values or filters depend on other aggregates "
            f"(a micro-batch does not hold the history they need): {'; '.join(sorted(set(bad)))}. "
            "Use scowl backfill for them, or serve them online."
        )


def open_checkpoint(checkpoint: Path, source: str) -> str:
    """Create or check ``<checkpoint>/scowl/stream.json``; return the stream id.

    The stream id (12 hex digits, random on the first run) names the guard
    field ``_b:<id>`` of every state key this checkpoint's batches touch.

    Raises:
        StreamError: the checkpoint belongs to another source.
    """
    meta = checkpoint.joinpath(*CHECKPOINT_META)
    if meta.exists():
        doc = orjson.loads(meta.read_bytes())
        if doc.get("source") != source:
            raise StreamError(f"checkpoint {checkpoint} belongs to source {doc.get('source')}, not {source}; "
                              "use another --checkpoint")
        return doc["id"]
    meta.parent.mkdir(parents=True, exist_ok=True)
    doc = {"id": uuid.uuid4().hex[:12], "source": source, "created_ms": int(time.time() * 1000)}
    _write_atomic(meta, orjson.dumps(doc))
    return doc["id"]


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def raw_events(df: DataFrame, seq: Column) -> DataFrame:
    """Return the raw event columns of ``writer.sources`` from a frame with ``_raw``.

    Args:
        df: a frame with ``_raw`` (string: one JSON record).
        seq: the arrival order column (long) to use as ``_seq``.

    Returns:
        Columns ``_type``, ``_time_ms`` (null unless a parseable ``_time``),
        ``_seq``, ``_raw``.
    """
    return envelope_columns(df, seq.alias("_seq"), "_raw")


def dir_raw(batch: DataFrame) -> tuple[DataFrame, list[DataFrame]]:
    """Raw events of a ``dir:`` micro-batch, to be numbered by file path, then line (:func:`split_seq`).

    ``_seq`` (not 0-based: only its order matters) is computed with
    built-ins: each file split's rows are contiguous in one partition, in line
    order, numbered by ``monotonically_increasing_id`` (``_mid``: the
    partition's index ``<< 33`` plus the row's position in it). The batch's
    splits ``(_file, _block)`` are collected by the job that counts the
    batch (:meth:`BatchProcessor.process`), and a row's ``_seq`` is its
    split's rank (by path, then offset) ``<< 33`` plus its position in its
    partition (the low 33 bits of ``_mid``): no job of its own.

    Args:
        batch: the micro-batch with ``_raw``, ``_file``, ``_block``.

    Returns:
        ``(raw, persisted)``: columns ``_type``, ``_time_ms`` (as
        :func:`raw_events`), ``_raw``, ``_file``, ``_block``, ``_mid`` (no
        ``_seq`` yet); nothing persisted (the caller persists ``raw``).
    """
    df = batch.where(F.octet_length(F.trim(F.col("_raw"))) > 0)  # as writer.sources._numbered
    return envelope_columns(df, "_raw", "_file", "_block", F.monotonically_increasing_id().alias("_mid")), []


#: the low bits of ``monotonically_increasing_id``: the row's position in its partition
_ROW_BITS = 33


def split_seq(splits: list) -> Column:
    """``_seq`` of a :func:`dir_raw` frame: split rank (by path, then offset) ``<< 33`` plus position in partition.

    Args:
        splits: the batch's distinct ``(_file, _block)`` pairs (rows or tuples:
            path string, split start offset in bytes), in any order.

    Returns:
        A long column over ``_file``, ``_block``, ``_mid``: increasing in
        (file path, offset, line) order within the batch.
    """
    row = F.col("_mid").bitwiseAND(F.lit((1 << _ROW_BITS) - 1))
    ranked = sorted((str(f), int(b)) for f, b in splits)
    if len(ranked) <= 1:
        return row
    split_key = F.concat(F.col("_file"), F.lit("\u0000"), F.col("_block").cast("string"))
    bases = F.create_map(*[
        x for rank, (f, b) in enumerate(ranked)
        for x in (F.lit(f"{f}\u0000{b}"), F.lit(rank << _ROW_BITS).cast("long"))
    ])
    return F.element_at(bases, split_key) + row


def redis_raw(batch: DataFrame) -> tuple[DataFrame, list[DataFrame]]:
    """Raw events of a ``redis:`` micro-batch (``_seq`` from the entry id, ``writer.redis_source``)."""
    return raw_events(batch, F.col("_seq")), []


def store_run_id(url: str) -> str | None:
    """The store's server process(es) as one text (``writer.redisio.store_identity``: new at every start), or ``None``.

    Args:
        url: the store; a cluster's text names every primary's ``run_id``,
            so a failover (a replica promoted) changes it too.

    Returns:
        The text, or ``None`` for a store that does not answer.
    """
    import redis

    from writer.redisio import connect, store_identity

    try:
        client = connect(url, socket_timeout=5.0)
        try:
            return ",".join(store_identity(client)) or None
        finally:
            client.close()
    except redis.RedisError:
        return None


def _error_line(error: BaseException) -> str:
    """One line naming a failed batch's cause: a Python task's exception line (``writer.session.python_error_line``:
    PySpark's own first line, "An exception was thrown from the Python worker:", names nothing), else
    ``<type>: <first line>``."""
    from writer.session import python_error_line

    raised = python_error_line(str(error))
    if raised is not None:
        return f"a Python task raised {raised}"
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


class BatchProcessor:
    """The ``foreachBatch`` function of the stream (module docstring).

    Args:
        plan: the compiled plan (:func:`check_streamable` passed).
        redis_url: the store.
        checkpoint: the checkpoint directory (local path).
        stream_id: from :func:`open_checkpoint`.
        lateness_ms: allowed lateness (ms, >= 0).
        dead_letter: the dead-letter directory.
        to_raw: :func:`dir_raw` or :func:`redis_raw`.
        fault: test-only fault injection (``writer.sink.merge_keys``).
        on_batch: called with each :class:`BatchResult` (progress).
        lag: for a ``redis:`` source, called with a batch's largest ``_seq``
            once the batch is applied; returns :attr:`BatchResult.behind_ms`.
        store_retry_s: how long a batch waits out an unavailable store
            (``writer.redisio.store_outage``) by running again, in seconds
            from its first such failure; 0: it fails at once.
        on_retry: called with a :class:`StoreRetry` before each such wait.

    Attributes:
        id_ttl_ms: how long a claimed ``_id`` is remembered: ``SCOWL_ID_TTL_S``
            (the API's setting, default ``storekeys.DEFAULT_ID_TTL_S``), in ms.
        stopping: set when the job is being stopped: a batch waiting out a
            store outage stops waiting and fails (it is redone on restart).
    """

    def __init__(self, plan: Plan, redis_url: str, checkpoint: Path, stream_id: str, lateness_ms: int,
                 dead_letter: Path, to_raw: Callable[[DataFrame], tuple[DataFrame, list[DataFrame]]] = redis_raw,
                 fault: tuple[int, int, str] | None = None, on_batch: Callable[[BatchResult], None] | None = None,
                 lag: Callable[[int], int | None] | None = None, store_retry_s: float = DEFAULT_STORE_RETRY_S,
                 on_retry: Callable[[StoreRetry], None] | None = None):
        self.plan = plan
        self.lag = lag
        self.store_retry_s = store_retry_s
        self.on_retry = on_retry
        self.stopping = threading.Event()
        self._retries = 0  # of the batch being processed
        self._first_rerun = False  # whether the batch had a record at its first attempt here
        self._run_id: str | None = None  # the store's server process when the job began (store_run_id)
        self.url = redis_url
        self.records = checkpoint.joinpath(*BATCH_RECORDS)
        self.records.mkdir(parents=True, exist_ok=True)
        self.stream_id = stream_id
        self.marker = f"_b:{stream_id}"
        self.id_ttl_ms = int(os.environ.get("SCOWL_ID_TTL_S") or DEFAULT_ID_TTL_S) * 1000
        self.lateness_ms = lateness_ms
        self.dead_letter = dead_letter
        self.to_raw = to_raw
        self.fault = fault
        self.on_batch = on_batch
        self.states: list[StateSpec] = sorted(plan.states.values(), key=lambda s: s.definition_hash)
        self.params = merge_params(self.states)
        self.specs = tile_specs(self.states)
        #: writer event type -> the features its states' writes read
        needs: dict[str, set[str]] = {}
        for st in self.states:
            for ev, w in st.writes.items():
                needs.setdefault(ev, set()).update(w.deps())
        self.needs: dict[str, list[str]] = {ev: sorted(names) for ev, names in needs.items()}
        self.results: list[BatchResult] = []
        self.error: BaseException | None = None

    # ------------------------------------------------------------ records
    def _record_path(self, batch_id: int) -> Path:
        return self.records / f"{batch_id:012d}.json"

    def record(self, batch_id: int) -> dict | None:
        """Return the checkpoint record of ``batch_id`` (``None`` if it never started)."""
        p = self._record_path(batch_id)
        return orjson.loads(p.read_bytes()) if p.exists() else None

    def previous(self, batch_id: int) -> dict | None:
        """Return the record of the latest batch before ``batch_id`` (``None`` for the first)."""
        rec = self.record(batch_id - 1)
        if rec is not None:
            return rec
        ids = [int(p.stem) for p in self.records.glob("*.json") if p.stem.isdigit() and int(p.stem) < batch_id]
        return self.record(max(ids)) if ids else None

    def totals(self) -> dict[str, int]:
        """Totals of the latest record of the checkpoint (``{}`` before any batch)."""
        latest = latest_batch_record(self.records)
        return dict(latest[2]["totals"]) if latest is not None else {}

    # ------------------------------------------------------------ batches
    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """``foreachBatch`` entry point: process one micro-batch (errors are kept in :attr:`error`)."""
        try:
            # the same generated code for every batch (compiled once, kept hot by HotSpot)
            restart_lambda_names(batch.sparkSession)
            raw, persisted = self.to_raw(batch)
            try:
                self._process_waiting_out_outages(raw, batch_id)
            finally:
                for df in persisted:
                    df.unpersist()
        except BaseException as e:
            self.error = e
            raise

    def _process_waiting_out_outages(self, raw: DataFrame, batch_id: int) -> BatchResult:
        """:meth:`process`, run again while the store is unavailable, for up to :attr:`store_retry_s`.

        A store that restarts, fails over or is briefly unreachable makes a
        batch fail wherever it touches the store (the driver's calls, or a
        Spark task's merges). :meth:`process` is safe to run again with the
        same batch (keys already merged are skipped by their batch-id guard,
        SPEC §5.7), so the batch waits 1, 2, 4, ... seconds (at most
        :data:`RETRY_MAX_WAIT_S`) and runs again (``writer.redisio.retry_outages``,
        inside the batch so that the query keeps its offsets), calling
        :attr:`on_retry` before each wait; any other error, a stop request
        (:attr:`stopping`) or a store still unavailable :attr:`store_retry_s`
        seconds after the batch's first failure raises.
        """
        def announce(attempt: int, pause: float, outage: str, waited: float) -> None:
            self._retries = attempt
            if self.on_retry is not None:
                self.on_retry(StoreRetry(batch_id, attempt, pause, outage, waited, self.store_retry_s))

        if self._run_id is None and self.store_retry_s > 0:
            self._run_id = store_run_id(self.url) or ""
        self._retries = 0
        try:
            return retry_outages(lambda: self.process(raw, batch_id), self.store_retry_s, announce,
                                 max_wait_s=RETRY_MAX_WAIT_S, stop=self.stopping)
        finally:
            self._retries = 0  # a later direct call of process() is a batch of its own

    def process(self, raw: DataFrame, batch_id: int) -> BatchResult:
        """Process one batch of raw events (``_type``, ``_time_ms``, ``_seq``, ``_raw``).

        ``raw`` may instead be a :func:`dir_raw` frame (``_file``, ``_block``,
        ``_mid`` in place of ``_seq``): the job that counts the batch then also
        collects its file splits, and ``_seq`` comes from them (:func:`split_seq`).

        Safe to call again with the same ``batch_id`` and events (a re-run):
        the watermark comes from the batch's record, dead letters are
        rewritten identically and keys already merged are skipped.

        Returns:
            The batch's :class:`BatchResult` (also appended to :attr:`results`).

        Raises:
            redis.RedisError: the store failed (the batch fails; Spark stops the query).
        """
        t0 = time.perf_counter()
        spark = raw.sparkSession
        ok = memo_column(("stream-valid", tuple(sorted(self.plan.events))), lambda: valid(list(self.plan.events)))
        rec = self.record(batch_id)
        if not self._retries:  # a retry finds the record its first attempt wrote: no restart
            self._first_rerun = rec is not None
        if rec is not None:
            wm = rec["watermark_ms"]
        else:
            prev = self.previous(batch_id)
            wm = None if prev is None or prev["max_time_ms"] is None else prev["max_time_ms"] - self.lateness_ms
        # the watermark as a column of the cached batch (added after the exchange below, in a stage of its
        # own), not a literal in the stages that parse and count: a literal is a constant of the generated
        # code, so each batch's code would differ and be compiled (and warmed up by HotSpot) anew. The
        # column is the watermark's decimal text, cast where it is compared: Spark's generated code reads
        # a string literal from its references array, where a long literal is written into the code (the
        # projection that adds it was two Janino compilations per batch, ~25-40 ms, and a new class for
        # HotSpot to compile)
        late = (ok & (F.col("_time_ms") < F.col("_wm").cast("long"))) if wm is not None else F.lit(False)
        numbered = "_seq" in raw.columns  # else a dir_raw frame: numbered from the splits counted here
        writers = sorted({ev for st in self.states for ev in st.writes})
        # one job: parses and caches the batch, counts it and, for a dir: batch, collects its file splits
        # (without adaptive execution, the cached plan too: one job of three stages, not a job per
        # stage and one more)
        with without_adaptive(spark):
            # spread over the cores (a file split is one partition: a batch of one file would compute
            # every event's features and writes in one task), by the arrival number computed before
            cached = raw.repartition(spark.sparkContext.defaultParallelism, "_seq" if numbered else "_mid")
            if wm is not None:
                cached = cached.withColumn("_wm", F.lit(str(int(wm))))
            cached = cached.persist(StorageLevel.MEMORY_AND_DISK)
            counting = cached.agg(
                F.count(F.lit(1)).alias("n"),
                F.count(F.when(ok, 1)).alias("valid"),
                F.count(F.when(late, 1)).alias("late"),
                F.max(F.when(ok, F.col("_time_ms"))).alias("max_t"),
                F.count(F.when(ok, memo_column(("stream-event-id",), event_id))).alias("ids"),
                *[F.min(F.when(ok & ~late & (F.col("_type") == F.lit(ev)), F.col("_time_ms"))).alias(f"min_{i}")
                  for i, ev in enumerate(writers)],
                *([] if numbered else [F.collect_set(F.struct("_file", "_block")).alias("splits")]),
                *([F.max("_seq").alias("max_seq")] if numbered else []),
            )
            counting._jdf.queryExecution().executedPlan()  # planned here, under these settings
        # The counting job runs on the executors while this thread builds and plans the merge job
        # (~0.7 s of driver time per 10k-event batch, against the job's ~0.5 s): planned for the usual
        # batch, with no _id (ids are claimed in the store first, after the record) and, from a dir:
        # source, one file split (_seq needs no split ranks); another batch is planned after the count.
        # Only planning overlaps: nothing touches the store before the batch's record is written.
        def numbered_by(splits: list) -> DataFrame:  # a dir: batch's _seq from its file splits (split_seq)
            return cached if numbered else cached.select(
                "_type", "_time_ms", split_seq(splits).alias("_seq"), "_raw", *(["_wm"] if wm is not None else []))

        # (leaving the block waits for the count, also when planning fails)
        with ThreadPoolExecutor(max_workers=1) as pool:
            counted = pool.submit(inheritable_thread_target(spark)(counting.collect))
            planned = self._merge_frame(spark, numbered_by([]).where(ok & ~late).drop("_wm"), batch_id) \
                if self.states else None
            row = counted.result()[0]
        if not numbered and len(row["splits"]) > 1:
            planned = None  # numbered by split ranks: not the frame planned above
        raw = numbered_by(row["splits"] if not numbered else [])
        earliest = {ev: row[f"min_{i}"] for i, ev in enumerate(writers) if row[f"min_{i}"] is not None}
        res = BatchResult(batch_id, events=row["valid"] - row["late"], late=row["late"],
                          invalid=row["n"] - row["valid"], watermark_ms=wm,
                          rerun=self._first_rerun, retries=self._retries)
        if self._retries and self._run_id:
            now_id = store_run_id(self.url)
            res.store_restarted = now_id is not None and now_id != self._run_id
            self._run_id = now_id or self._run_id  # the next restart is measured from this one
        if rec is None:
            prev = self.previous(batch_id)
            seen = [x for x in (row["max_t"], prev and prev["max_time_ms"]) if x is not None]
            totals = dict(prev["totals"]) if prev else {"batches": 0, "events": 0, "late": 0, "invalid": 0}
            totals = {"batches": totals["batches"] + 1, "events": totals["events"] + res.events,
                      "late": totals["late"] + res.late, "invalid": totals["invalid"] + res.invalid}
            rec = {"batch_id": batch_id, "watermark_ms": wm, "max_time_ms": max(seen) if seen else None,
                   "lateness_ms": self.lateness_ms, "events": res.events, "late": res.late,
                   "invalid": res.invalid, "totals": totals}
            _write_atomic(self._record_path(batch_id), orjson.dumps(rec))
            for p in self.records.glob("*.json"):
                if p.stem.isdigit() and int(p.stem) < batch_id - KEEP_RECORDS:
                    p.unlink(missing_ok=True)
        res.max_time_ms = rec["max_time_ms"]
        try:
            if res.invalid:
                raw.where(~ok | ok.isNull()).select("_raw").write.mode("overwrite").text(
                    str(self.dead_letter / "invalid" / f"batch-{batch_id}"))
            if res.late:
                raw.where(late).select("_raw").write.mode("overwrite").text(
                    str(self.dead_letter / "late" / f"batch-{batch_id}"))
            if res.events and self.states:
                self._record_written(earliest)
                on_time = raw.where(ok & ~late).drop("_wm")
                if row["ids"]:
                    # a repeated _id writes nothing (SPEC §4): repeats within the batch are marked, and
                    # the others' ids claimed in the store, where the API and earlier batches claim theirs
                    on_time = self._claim_ids(mark_repeated_ids(on_time), batch_id)
                    planned = None
                try:
                    if planned is None:
                        planned = self._merge_frame(spark, on_time, batch_id)
                    res.applied, res.skipped = self._apply(spark, planned)
                finally:
                    on_time.unpersist()  # persisted by _claim_ids (a no-op otherwise)
        finally:
            cached.unpersist()
        if self.lag is not None and numbered and row["max_seq"] is not None:
            res.behind_ms = self.lag(int(row["max_seq"]))
        res.seconds = time.perf_counter() - t0
        self.results.append(res)
        if self.on_batch is not None:
            self.on_batch(res)
        return res

    def _record_written(self, earliest: dict[str, int]) -> None:
        """Lower each written state's online-writer start (``storekeys.ONLINE_KEY``) to the batch's earliest event.

        Streamed writes are merged, like the API's, so ``scowl backfill``
        (which overwrites tiles) must leave their time alone (SPEC §5.6).
        Keeps the minimum, so a re-run batch changes nothing.

        Args:
            earliest: event type -> earliest on-time event time of the batch (ms).
        """

        from compiler.algebra.script import online_min_script
        from compiler.algebra.storekeys import ONLINE_KEY
        from writer.redisio import connect

        args: list = []
        for st in self.states:
            times = [earliest[ev] for ev in st.writes if ev in earliest]
            if times:
                args += [st.definition_hash, min(times)]
        if not args:
            return
        client = connect(self.url)
        try:
            client.eval(online_min_script(), 1, ONLINE_KEY, *args)
        finally:
            client.close()

    def _claim_ids(self, events: DataFrame, batch_id: int) -> DataFrame:
        """``events`` with ``_repeat`` also true for an id the store already holds (``writer.sink.claim_ids``).

        One job claims the ids and keeps the events taken elsewhere (a local
        checkpoint, so the claims are sent once however many frames read the
        result); a re-run of the batch finds its own marker and keeps its
        events. Returns the events persisted: the caller unpersists them.
        """
        url, marker, ttl_ms = self.url, f"{self.marker}:{batch_id}", self.id_ttl_ms
        first = events.where(event_id().isNotNull() & ~F.col("_repeat")).select(event_id().alias("_id"), "_seq")
        taken = (first.mapInArrow(lambda it: claim_ids(it, url, marker, ttl_ms), "_seq long, _taken boolean")
                 .where("_taken").select("_seq").localCheckpoint(eager=True))
        marked = events.join(F.broadcast(taken.withColumn("_taken", F.lit(True))), "_seq", "left")
        return (marked.withColumn("_repeat", F.col("_repeat") | F.coalesce(F.col("_taken"), F.lit(False)))
                .drop("_taken").persist(StorageLevel.MEMORY_AND_DISK))

    def _merge_frame(self, spark: SparkSession, events: DataFrame, batch_id: int) -> DataFrame | None:
        """The merge job of a batch's on-time ``events``, built and planned, not run (:meth:`_apply` runs it).

        Returns:
            A frame of ``applied``, ``skipped`` (long) per partition of the
            writes, whose physical plan is made; ``None`` when no state has a writer.
        """
        # One job: every writer event type's features (input coercion: wide projections, so planned
        # without whole-stage codegen) and all their states' writes in one frame, one exploding
        # projection, shuffled by key once (writer.features.batch_features, writer.tilepass.
        # batch_write_rows: ~6 DataFrame steps to analyse, where a frame per event type and their
        # union took ~35); each partition's partial aggregates and merge ops in numpy
        # (compiler.algebra.arrowtiles), applied per key (writer.sink.merge_keys). It replaced a
        # Spark aggregation per kind of partial and per write-log state: ~10 stages and ~26 tasks
        # for 10k events.
        url, marker, params, fault, specs = self.url, self.marker, self.params, self.fault, self.specs
        # without adaptive execution: one job of two stages (adaptive execution ran the map stage as a
        # job of its own, then re-planned the rest: nothing to re-optimise, the shuffle has a fixed
        # partition count)
        with without_codegen(spark), without_adaptive(spark):
            frame, names = batch_features(events, self.plan, self.needs)
            rows = batch_write_rows(frame, names, self.states, spark.sparkContext.defaultParallelism)
            if rows is None:
                return None
            merged = rows.mapInArrow(lambda it: merge_keys(it, url, batch_id, marker, params, specs, fault),
                                     "applied long, skipped long")
            merged._jdf.queryExecution().executedPlan()  # the plan an action on this frame runs
        return merged

    @staticmethod
    def _apply(spark: SparkSession, merged: DataFrame | None) -> tuple[int, int]:
        """Run a :meth:`_merge_frame` job (it merges into the store); return ``(applied, skipped)`` keys."""
        if merged is None:
            return 0, 0
        with without_codegen(spark), without_adaptive(spark):
            out = merged.collect()
        return sum(r["applied"] for r in out), sum(r["skipped"] for r in out)


def run_stream(
    spark: SparkSession,
    plan: Plan,
    redis_url: str,
    source: str,
    checkpoint: str | Path,
    *,
    source_url: str | None = None,
    allowed_lateness_ms: int | None = None,
    dead_letter: str | Path | None = None,
    available_now: bool = False,
    trigger_s: float | None = None,
    max_files_per_trigger: int | None = None,
    max_events_per_batch: int | None = None,
    trim_source: bool = False,
    skip_trimmed: bool = False,
    fault: tuple[int, int, str] | None = None,
    on_batch: Callable[[BatchResult], None] | None = None,
    stop_requested: Callable[[], bool] | None = None,
    store_retry_s: float = DEFAULT_STORE_RETRY_S,
    on_retry: Callable[[StoreRetry], None] | None = None,
) -> StreamReport:
    """Run the stream job until its source is drained (``available_now``) or it is interrupted.

    Args:
        spark: the session (``writer.session.get_spark``).
        plan: the compiled plan.
        redis_url: the store the tiles are merged into.
        source: ``dir:PATH`` or ``redis:STREAM``.
        checkpoint: checkpoint directory (a local path): Spark's offsets and
            commits under ``spark/``, the stream id and batch records under
            ``scowl/``. Restart with the same one to resume exactly once.
        source_url: Redis URL of a ``redis:`` source (default ``redis_url``).
        allowed_lateness_ms: watermark lag (ms); default the longest window.
        dead_letter: dead-letter directory; default ``<checkpoint>/dead-letter``.
        available_now: process what the source holds now (in as many batches
            as the per-batch limits make), then return.
        trigger_s: seconds between micro-batches when running continuously
            (default: as soon as the previous one ends).
        max_files_per_trigger: ``dir:`` files per batch (default all new ones).
        max_events_per_batch: ``redis:`` entries per batch (default all new ones).
        trim_source: delete what committed micro-batches read: a ``redis:``
            stream's entries before each committed batch's last one
            (``XTRIM MINID``, ``writer.redis_source``), a ``dir:`` source's
            files (Spark's ``cleanSource=delete``). For a job that is its
            source's only reader.
        skip_trimmed: ``redis:`` only: when the stream no longer holds the
            last entry read (trimmed past the checkpoint, entries may be
            lost), go on with what is left instead of stopping
            (``failOnDataLoss=false``).
        fault: test-only fault injection (``writer.sink.merge_keys``).
        on_batch: called after each batch with its :class:`BatchResult`.
        stop_requested: polled about once a second while the query runs; when
            it returns true the query is stopped and the report returned, as
            on ``KeyboardInterrupt`` (``scowl stream`` sets it on SIGINT, SIGTERM and SIGHUP).
        store_retry_s: how long a micro-batch waits out an unavailable store
            (connection refused or lost, timeouts, a server loading its data,
            a failover: ``writer.redisio.store_outage``), running again with
            growing pauses, before the job stops (seconds from the batch's
            first such failure; 0: stop at once). Re-running a batch merges
            nothing twice (SPEC §5.7).
        on_retry: called with a :class:`StoreRetry` before each such pause.

    Returns:
        A :class:`StreamReport`.

    Raises:
        StreamError: bad source or options, a checkpoint of another source,
            a plan with staged aggregates, a ``redis:`` stream trimmed past
            the checkpoint (unless ``skip_trimmed``), a store still unavailable
            after ``store_retry_s``, or a failed batch (the message names the
            cause; the query stops and can be restarted).

    Source: SPEC §5.7.
    """
    check_streamable(plan)
    kind, target = parse_source(source)
    if allowed_lateness_ms is not None and allowed_lateness_ms < 0:
        raise StreamError("--allowed-lateness must be >= 0")
    if skip_trimmed and kind != "redis":
        raise StreamError("--skip-trimmed applies to a redis: source only")
    if store_retry_s < 0:
        raise StreamError("--store-retry must be >= 0")
    if kind == "dir":
        path = Path(target).absolute()
        if not path.is_dir():
            raise StreamError(f"{target}: not a directory")
        source_id = f"dir:{path}"
    else:
        source_id = f"redis:{target}"
    checkpoint = Path(checkpoint).absolute()
    stream_id = open_checkpoint(checkpoint, source_id)
    dl = Path(dead_letter).absolute() if dead_letter is not None else checkpoint / "dead-letter"
    lateness = default_lateness_ms(plan) if allowed_lateness_ms is None else allowed_lateness_ms
    # where a redis: source says it was trimmed past the checkpoint (writer.redis_source: it then offers nothing)
    loss_file = checkpoint / "scowl" / "trimmed.txt"
    loss_file.unlink(missing_ok=True)
    lag = None
    if kind == "redis":
        from functools import partial

        from writer.redis_source import behind_ms

        lag = partial(behind_ms, source_url or redis_url, target)  # called with a batch's largest _seq
    processor = BatchProcessor(plan, redis_url, checkpoint, stream_id, lateness, dl,
                               dir_raw if kind == "dir" else redis_raw, fault=fault, on_batch=on_batch, lag=lag,
                               store_retry_s=store_retry_s, on_retry=on_retry)
    if kind == "dir":
        reader = spark.readStream.format("text")
        if trim_source:
            reader = reader.option("cleanSource", "delete")
        if max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", int(max_files_per_trigger))
        sdf = reader.load(str(path)).select(
            F.col("value").alias("_raw"), F.col("_metadata.file_path").alias("_file"),
            F.col("_metadata.file_block_start").alias("_block"))
    else:
        from writer.redis_source import RedisStreamDataSource

        spark.dataSource.register(RedisStreamDataSource)
        reader = spark.readStream.format("scowl-redis-stream").option("url", source_url or redis_url).option("stream", target)
        if max_events_per_batch:
            reader = reader.option("maxRecordsPerBatch", int(max_events_per_batch))
        reader = (reader.option("trim", str(trim_source).lower()).option("failOnDataLoss", str(not skip_trimmed).lower())
                  .option("lossFile", str(loss_file)).option("retryS", str(float(store_retry_s))))
        sdf = reader.load()
    writer = sdf.writeStream.foreachBatch(processor).option("checkpointLocation", str(checkpoint / "spark"))
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger_s:
        writer = writer.trigger(processingTime=f"{float(trigger_s)} seconds")
    query = writer.start()
    try:
        # poll, so that a stop request is seen without interrupting a py4j call (an exception
        # raised inside one can leave the gateway connection unusable for query.stop())
        while not query.awaitTermination(1):
            if (stop_requested is not None and stop_requested()) or loss_file.exists():
                processor.stopping.set()  # a batch waiting out a store outage stops waiting
                query.stop()
                break
    except KeyboardInterrupt:
        processor.stopping.set()
        query.stop()
    except Exception as e:
        processor.stopping.set()
        query.stop()
        cause = processor.error if processor.error is not None else e
        outage = store_outage(cause)
        if outage is not None:
            waited = f"for {store_retry_s:g}s (--store-retry)" if store_retry_s else "(--store-retry 0)"
            raise StreamError(f"the stream stopped: the store was unavailable {waited}: {outage}; restart with "
                              "the same --checkpoint once it answers (nothing is merged twice)") from cause
        raise StreamError(f"the stream stopped in a failed batch ({_error_line(cause)}); "
                          "fix the cause and restart with the same --checkpoint") from cause
    if loss_file.exists():
        raise StreamError(loss_file.read_text(encoding="utf-8").strip())
    return StreamReport(stream_id, str(checkpoint), str(dl), list(processor.results), processor.totals())
