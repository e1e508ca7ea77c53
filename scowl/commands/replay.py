"""``scowl replay`` (SPEC §5.8, §6): the point-in-time training set as Parquet, one dataset per event type."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from scowl.common import UserError, compile_topology, console, plural, scowl_home, start_spark
from scowl.progress import job_progress, phase_progress

#: Progress bar labels of the replay phases (``writer.replay``).
REPLAY_PHASES = {"read": "replay: reading events", "replay": "replay: event types written"}


def replay(
    directory: Path = typer.Argument(..., metavar="DIR", help="Topology directory (its *.scowl files)."),
    events: List[str] = typer.Option(..., "--events", metavar="PATH",
                                     help="JSONL or Parquet inputs: files, globs or directories (repeatable)."),
    out: Path = typer.Option(..., "--out", metavar="OUTDIR",
                             help="Output directory: one Parquet dataset per event type at OUTDIR/EVENT/."),
    types: Optional[str] = typer.Option(None, "--types", metavar="E,...",
                                        help="Comma-separated event types to write (default all)."),
    master: Optional[str] = typer.Option(None, metavar="URL",
                                         help="Spark master (default SCOWL_SPARK_MASTER or local[*])."),
) -> None:
    """Replay events into a point-in-time training set (Parquet).

    Writes, for every input event, the feature values it would have
    received online: each event sees the events before it
    in arrival order (time, then position in the input), with windows exact
    at their resolution. One Parquet dataset per event type at OUTDIR/EVENT/
    with the columns _seq, _time, _id and one per feature, encoded as the API
    encodes them. Arrival order, windows and encodings: docs/semantics.md.
    Needs no store.
    """
    from writer.features import StagedFeatureError
    from writer.replay import ReplayError, run_replay
    from writer.sources import SourceError

    plan = compile_topology(directory)
    wanted = [t.strip() for t in types.split(",") if t.strip()] if types else None
    unknown = [t for t in wanted or [] if t not in plan.events]
    if unknown:  # before Spark starts
        raise UserError(f"unknown event type(s) {', '.join(unknown)}; the topology has {', '.join(sorted(plan.events))}")
    with job_progress(console) as prog:
        cb = phase_progress(prog, REPLAY_PHASES)
        spark_task = prog.add_task("starting Spark", total=1)
        spark = start_spark(master, events=events)
        prog.update(spark_task, completed=1)
        try:
            report = run_replay(spark, plan, events, out, wanted, rejected_dir=scowl_home() / "rejected",
                                progress=cb)
        except (ReplayError, StagedFeatureError, SourceError, NotImplementedError) as e:
            raise UserError(str(e)) from None
    for ev, n in sorted(report.rows.items()):
        console.print(f"{out / ev}: {plural(n, 'row', spec=',')}")
    if report.rejected:
        where = f" (set aside in {report.rejected_path})" if report.rejected_path else ""
        console.print(f"note: {plural(report.rejected, 'invalid record')} skipped{where}")
