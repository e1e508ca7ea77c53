"""``scowl backfill DIR --events PATH… [--start ISO --end ISO | --auto] [--force]`` (SPEC §5.6, §6).

The job itself is ``writer.backfill``; this module parses the command line,
shows the job's progress (``scowl.progress``) and prints what it did.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from scowl.common import (UserError, check_store, compile_topology, console, open_store, parse_iso_ms, plural,
                          scowl_home, start_spark)
from scowl.inputs import resolve_inputs
from scowl.progress import backfill_progress, job_progress


def backfill(
    directory: Path = typer.Argument(..., metavar="DIR", help="Topology directory (its *.scowl files)."),
    events: List[str] = typer.Option(..., "--events", metavar="PATH",
                                     help="JSONL or Parquet timeline files, globs or directories, or redis:KEY "
                                     "(a Redis stream in the store) (repeatable)."),
    start: Optional[str] = typer.Option(None, metavar="ISO",
                                        help="Run window start (ISO-8601, inclusive); default the first event."),
    end: Optional[str] = typer.Option(None, metavar="ISO",
                                      help="Run window end (ISO-8601, exclusive); default just after the last event."),
    auto: bool = typer.Option(False, "--auto", help="Backfill exactly what is missing: per aggregate state, the "
                              "input's event span minus the intervals already backfilled, never into time the "
                              "online path has written. Not with --start/--end."),
    force: bool = typer.Option(False, "--force", help="Run even where the online path has already written "
                               "(overwrites what it wrote there)."),
    store_retry: float = typer.Option(300.0, "--store-retry", min=0, metavar="SECONDS",
                                      help="How long a write waits out an unavailable store (a lost connection, a "
                                      "store still loading), sent again with growing pauses, before the run "
                                      "stops; a store that comes back as a new server process (restarted, failed "
                                      "over) stops the run, which must then be run again; 0 stops at once."),
    master: Optional[str] = typer.Option(None, metavar="URL",
                                         help="Spark master (default SCOWL_SPARK_MASTER or local[*])."),
) -> None:
    """Backfill historical events into the store's tiles (Spark).

    Computes each aggregate's tiles from JSONL or Parquet events with Spark
    and writes them to the store.
    The run window [start, end) is widened down to a whole tile, and it says
    so; re-running a window overwrites, never adds. Each aggregate's window
    is exact at its resolution, as online (docs/semantics.md). The store is
    SCOWL_REDIS_URL, else the embedded one under SCOWL_HOME (default
    ./.scowl), which `scowl serve` then uses.
    """
    if auto and (start is not None or end is not None):
        raise typer.BadParameter("--auto computes the run windows itself: do not combine it with --start/--end",
                                 param_hint="--auto")
    p = compile_topology(directory)
    start_ms = parse_iso_ms(start) if start else None
    end_ms = parse_iso_ms(end) if end else None
    with open_store() as url:
        events = resolve_inputs(events, url)  # redis:KEY inputs exported to JSONL first (scowl.inputs)
        report = run_backfill_with_progress(p, events, url, start_ms, end_ms, master, auto=auto, force=force,
                                            store_retry_s=store_retry)
    if auto:
        print_auto_report(p, report)
    else:
        print_backfill_report(report)


def run_backfill_with_progress(plan, events, url, start_ms, end_ms, master, auto: bool = False, force: bool = False,
                               store_retry_s: float | None = None):
    """Run ``writer.backfill.run_backfill`` (or ``run_auto_backfill`` with ``auto``) under a progress display.

    Args:
        plan: the compiled plan.
        events: input paths (files, globs, directories).
        url: the store.
        start_ms, end_ms: run window (epoch ms) or ``None`` (the events' span); ignored with ``auto``.
        master: Spark master or ``None``.
        auto, force: see ``scowl backfill --help``.
        store_retry_s: ``--store-retry`` (``None``: ``writer.redisio.DEFAULT_STORE_RETRY_S``).

    Returns:
        ``writer.backfill.BackfillReport`` (``AutoReport`` with ``auto``).

    Raises:
        UserError: bad input, an unsupported plan, a window overlapping the
            online path's writes, an unreachable store (message, no traceback).
    """
    import redis

    from writer.backfill import BackfillError, check_window, run_auto_backfill, run_backfill
    from writer.features import StagedFeatureError
    from writer.sources import SourceError

    if not auto and start_ms is not None and end_ms is not None:
        try:  # refuse an overlap with the online path before starting Spark
            check_window(plan, url, start_ms, end_ms, force)
        except BackfillError as e:
            raise UserError(str(e)) from None
        except redis.RedisError as e:
            raise UserError(f"store unavailable: {e}") from None
    check_store(url)  # before Spark: the job would find out only after reading every input
    with job_progress(console) as prog:
        cb = backfill_progress(prog)
        spark_task = prog.add_task("starting Spark", total=1)
        spark = start_spark(master, events=events)
        prog.update(spark_task, completed=1)
        try:
            retry = {"notice": lambda text: console.print(f"backfill: {text}", highlight=False)}
            if store_retry_s is not None:
                retry["store_retry_s"] = store_retry_s
            if auto:
                return run_auto_backfill(spark, plan, events, url, rejected_dir=scowl_home() / "rejected",
                                         progress=cb, force=force, **retry)
            return run_backfill(spark, plan, events, url, start_ms, end_ms,
                                rejected_dir=scowl_home() / "rejected", progress=cb, force=force, **retry)
        except (BackfillError, StagedFeatureError, SourceError, NotImplementedError) as e:
            raise UserError(str(e)) from None
        except redis.RedisError as e:
            raise UserError(f"store unavailable: {e}") from None


def print_backfill_report(report) -> None:
    """Print what a backfill run did (a ``writer.backfill.BackfillReport``): window, events, tile rows, notes."""
    from compiler.typesystem import format_time

    s, e = report.window
    staged = f" ({plural(report.stages, 'dependency stage')})" if report.stages else ""
    console.print(f"backfilled [{format_time(s)}, {format_time(e)}): {plural(report.events, 'event')}, "
                  f"{plural(sum(report.rows.values()), 'tile row')} over {plural(len(report.rows), 'state')}{staged}")
    if report.widened:
        rs, re_ = report.requested
        moved = []
        if s != rs:
            moved.append("its start moved down to a whole tile (older events read to complete it)")
        if e != re_:
            moved.append("its end moved up to a whole tile (the time after it was already backfilled)")
        console.print(f"note: the run window [{format_time(rs)}, {format_time(re_)}) was widened: {'; '.join(moved)}")
    if report.rejected:
        where = f" (set aside in {report.rejected_path})" if report.rejected_path else ""
        console.print(f"note: {plural(report.rejected, 'invalid record')} skipped{where}")


def print_auto_report(plan, report) -> None:
    """Print what ``backfill --auto`` did (a ``writer.backfill.AutoReport``): span, held-back states, runs."""
    from compiler.typesystem import format_time
    from writer.status import state_features

    lo, hi = report.span
    console.print(f"auto: input events span [{format_time(lo)}, {format_time(hi)})")
    names = state_features(plan)
    for h, lim in sorted(report.held_back.items()):
        feats = ", ".join(names.get(h, [])) or h
        if lim is None:
            console.print(f"note: {feats}: not backfilled, the online path has written it (--force to overwrite)")
        else:
            console.print(f"note: {feats}: backfilled only before {format_time(lim)}, where the online path's "
                          "writes begin (--force to overwrite)")
    if not report.missing:
        console.print("auto: nothing to backfill: every aggregate state already covers the input's span")
    n_states = len(plan.states)
    for s, e, hs in report.missing:
        which = "all states" if len(hs) == n_states else f"{len(hs)} of {n_states} states"
        console.print(f"auto: missing [{format_time(s)}, {format_time(e)}) for {which}")
    for run in report.runs:
        print_backfill_report(run)
    if report.rejected and not report.runs:
        where = f" (set aside in {report.rejected_path})" if report.rejected_path else ""
        console.print(f"note: {plural(report.rejected, 'invalid record')} skipped{where}")
