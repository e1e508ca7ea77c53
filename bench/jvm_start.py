"""How long a scowl Spark session takes to start and run its first jobs, with and without the class-data archive.

Each round starts two fresh processes in turns (the order alternates): one
with ``SCOWL_CLASS_DATA=off`` (the floor: the JVM loads every class from
Spark's jars) and one with the archive of ``writer.classdata`` (written
first, unmeasured, if the cache has none). Each process times

* ``start``: ``writer.session.get_spark`` (the JVM, the gateway, the
  session);
* ``jobs``: two small jobs (a ``sum`` over 1,000 rows, a filter and count of
  this repository's README as text), the first jobs of any command;
* ``process``: the whole process, as a shell would (Python's imports and
  the JVM's exit included).

Printed: the median of each over ``--rounds`` rounds, and the archive's
ratio to the floor.

Usage::

    python bench/jvm_start.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
t0 = time.perf_counter()
from pyspark.sql import functions as F
from writer.session import get_spark
spark = get_spark(app_name="scowl-bench-jvm-start")
t1 = time.perf_counter()
spark.range(1000).select(F.sum("id")).collect()
spark.read.text(sys.argv[1]).where(F.col("value").contains("scowl")).count()
t2 = time.perf_counter()
print(json.dumps({"start": t1 - t0, "jobs": t2 - t1}))
"""


def run_child(archive: bool) -> dict[str, float]:
    """One fresh process: its ``start``, ``jobs`` and ``process`` seconds."""
    env = dict(os.environ)
    env.pop("SCOWL_JAVA_OPTIONS", None)
    env["SCOWL_CLASS_DATA"] = "on" if archive else "off"
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "README.md")], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"the child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "process": seconds}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="pairs of processes, in turns")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from writer.classdata import cache_dir, fingerprint

    name = fingerprint()
    if name is None:
        raise SystemExit("no java or no Spark installation found")
    archive = cache_dir() / f"{name}.jsa"
    if not archive.exists():
        print(f"writing the archive first (unmeasured): {archive}", file=sys.stderr)
        run_child(True)
        lock = archive.with_suffix(".lock")  # its finisher (writer.classdata) installs it after the JVM ends
        deadline = time.monotonic() + 180
        while lock.exists() and not archive.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if not archive.exists():
            raise SystemExit("no archive was written (see writer.classdata)")
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for i in range(args.rounds):
        for with_archive in ((False, True) if i % 2 == 0 else (True, False)):
            runs[with_archive].append(run_child(with_archive))
    table = Table(title=f"a Spark session's start, {args.rounds} rounds in turns (medians, seconds)")
    for col in ("", "start", "first jobs", "process"):
        table.add_column(col, justify="right" if col else "left")
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("start", "jobs", "process")} for k, v in runs.items()}
    table.add_row("floor: SCOWL_CLASS_DATA=off", *(f"{med[False][m]:.2f}" for m in ("start", "jobs", "process")))
    table.add_row(f"class-data archive ({archive.stat().st_size / 2**20:.0f} MB)",
                  *(f"{med[True][m]:.2f}" for m in ("start", "jobs", "process")))
    table.add_row("archive / floor", *(f"{med[True][m] / med[False][m]:.3f}x" for m in ("start", "jobs", "process")))
    Console(width=max(100, Console().width)).print(table)


if __name__ == "__main__":
    main()
