"""``scowl replay`` (SPEC §5.8, §6): the point-in-time training set as Parquet, one dataset per event type."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from scowl.common import (
    UserError, compile_topology, console, open_store, plural, scowl_home, start_spark, writable_dir,
)
from scowl.inputs import resolve_inputs, stream_inputs
from scowl.progress import job_progress, phase_progress

#: Progress bar labels of the replay phases (``writer.replay``).
REPLAY_PHASES = {"read": "replay: reading events", "replay": "replay: event types written",
                 "queued": "warm Spark session: another replay first"}


def replay(
    directory: Path = typer.Argument(..., metavar="DIR", help="Topology directory (its *.scowl files)."),
    events: List[str] = typer.Option(..., "--events", metavar="PATH",
                                     help="JSONL or Parquet inputs: files, globs or directories, or redis:KEY "
                                     "(a Redis stream in the store, e.g. the API's SCOWL_EVENT_STREAM) "
                                     "(repeatable)."),
    out: Path = typer.Option(..., "--out", metavar="OUTDIR",
                             help="Output directory: one Parquet dataset per event type at OUTDIR/EVENT/."),
    types: Optional[str] = typer.Option(None, "--types", metavar="E,...",
                                        help="Comma-separated event types to write (default all)."),
    master: Optional[str] = typer.Option(None, metavar="URL",
                                         help="Spark master (default SCOWL_SPARK_MASTER or local[*])."),
    warm: bool = typer.Option(False, "--warm",
                              help="Run in a warm background Spark session, started if none is running and "
                                   "kept for 15 idle minutes (SCOWL_WARM_IDLE_S), so later replays skip "
                                   "Spark's start-up and the JVM's warm-up. See 'scowl warm'."),
) -> None:
    """Replay events into a point-in-time training set (Parquet).

    Writes, for every input event, the feature values it would have
    received online: each event sees the events before it
    in arrival order (time, then position in the input), with windows exact
    at their resolution. One Parquet dataset per event type at OUTDIR/EVENT/
    with the columns _seq, _time, _id and one per feature, encoded as the API
    encodes them. Arrival order, windows and encodings: docs/semantics.md.
    Needs no store, unless an input is redis:KEY: that stream of the store
    is exported to SCOWL_HOME/exports/ first and replayed in its order (the
    API's own SCOWL_EVENT_STREAM replays to the values the API answered).
    """
    plan = compile_topology(directory)
    wanted = [t.strip() for t in types.split(",") if t.strip()] if types else None
    unknown = [t for t in wanted or [] if t not in plan.events]
    if unknown:  # before Spark starts
        raise UserError(f"unknown event type(s) {', '.join(unknown)}; the topology has {', '.join(sorted(plan.events))}")
    writable_dir(out, "--out")  # before Spark: a job that cannot write fails only after all its work
    if stream_inputs(events):  # redis:KEY inputs: exported from the store to JSONL first (scowl.inputs)
        with open_store() as url:
            events = resolve_inputs(events, url)
    if warm:
        rows, rejected, rejected_path = _warm_replay(directory, events, out, wanted, master)
    else:
        rows, rejected, rejected_path = _replay(plan, events, out, wanted, master)
    for ev, n in sorted(rows.items()):
        console.print(f"{out / ev}: {plural(n, 'row', spec=',')}")
    if rejected:
        where = f" (set aside in {rejected_path})" if rejected_path else ""
        console.print(f"note: {plural(rejected, 'invalid record')} skipped{where}")


def _replay(plan, events: List[str], out: Path, wanted: Optional[List[str]],
            master: Optional[str]) -> tuple[dict[str, int], int, Optional[str]]:
    """Replay in a Spark session of this process: ``(rows per event type, rejected, rejected path)``."""
    from writer.replay import REPLAY_USER_ERRORS, run_replay

    with job_progress(console) as prog:
        cb = phase_progress(prog, REPLAY_PHASES)
        spark_task = prog.add_task("starting Spark", total=1)
        spark = start_spark(master, events=events)
        prog.update(spark_task, completed=1)
        try:
            report = run_replay(spark, plan, events, out, wanted, rejected_dir=scowl_home() / "rejected",
                                progress=cb)
        except REPLAY_USER_ERRORS as e:
            raise UserError(str(e)) from None
    return report.rows, report.rejected, report.rejected_path


def _warm_replay(directory: Path, events: List[str], out: Path, wanted: Optional[List[str]],
                 master: Optional[str]) -> tuple[dict[str, int], int, Optional[str]]:
    """Replay on the warm server of ``SCOWL_HOME`` (``scowl.warm``): ``(rows per event type, rejected, rejected
    path)``."""
    from scowl.warm import WarmError, replay as warm_replay
    from writer.sources import SourceError, estimate_events

    try:
        estimate_events(events)  # a path that matches nothing: the cold command's message, before any server
    except SourceError as e:
        raise UserError(str(e)) from None
    with job_progress(console) as prog:
        cb = phase_progress(prog, REPLAY_PHASES)
        spark_task = prog.add_task("warm Spark session", total=1)

        def ready(running: bool) -> None:
            label = "warm Spark session (running)" if running else "warm Spark session (started)"
            prog.update(spark_task, completed=1, description=label)

        try:
            done = warm_replay(scowl_home(), directory, events, out, wanted, scowl_home() / "rejected", cb,
                               master=master, on_ready=ready)
        except WarmError as e:
            raise UserError(str(e)) from None
    return done["rows"], done["rejected"], done["rejected_path"]
