"""``scowl replay`` (SPEC §5.8, §6): the point-in-time training set as Parquet, one dataset per event type."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from scowl.cli import UserError, _compile, app, console, scowl_home


@app.command()
def replay(
    directory: Path = typer.Argument(..., help="Topology directory."),
    events: List[str] = typer.Option(..., "--events", help="JSONL or Parquet inputs: files, globs or directories."),
    out: Path = typer.Option(..., "--out", help="Output directory: one Parquet dataset per event type at OUT/EVENT/."),
    types: Optional[str] = typer.Option(None, "--types", help="Comma-separated event types to write (default all)."),
    master: Optional[str] = typer.Option(None, help="Spark master (default SCOWL_SPARK_MASTER or local[*])."),
) -> None:
    """Write, for every input event, the feature values it would have received online (SPEC §3.3, §5.8)."""
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from writer.features import StagedFeatureError
    from writer.replay import ReplayError, run_replay
    from writer.session import get_spark
    from writer.sources import SourceError, expand_paths

    plan = _compile(directory)
    wanted = [t.strip() for t in types.split(",") if t.strip()] if types else None
    unknown = [t for t in wanted or [] if t not in plan.events]
    if unknown:  # before Spark starts
        raise UserError(f"unknown event type(s) {', '.join(unknown)}; the topology has {', '.join(sorted(plan.events))}")
    try:
        expand_paths(events)
    except SourceError as e:
        raise UserError(str(e)) from None
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=False) as prog:
        tasks: dict[str, int] = {}
        labels = {"read": "replay: reading events", "replay": "replay: event types written"}

        def cb(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = prog.add_task(labels.get(phase, phase), total=total)
            prog.update(tasks[phase], completed=done, total=total)

        spark_task = prog.add_task("starting Spark", total=1)
        spark = get_spark(master)
        prog.update(spark_task, completed=1)
        try:
            report = run_replay(spark, plan, events, out, wanted, rejected_dir=scowl_home() / "rejected",
                                progress=cb)
        except (ReplayError, StagedFeatureError, SourceError, NotImplementedError) as e:
            raise UserError(str(e)) from None
    for ev, n in sorted(report.rows.items()):
        console.print(f"{out / ev}: {n:,} rows")
    if report.rejected:
        where = f" (set aside in {report.rejected_path})" if report.rejected_path else ""
        console.print(f"note: {report.rejected} invalid records skipped{where}")
