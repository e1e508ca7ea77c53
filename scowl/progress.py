"""Progress bars of the long jobs (SPEC §6: "Long jobs show progress"): backfill, replay and the demo."""

from __future__ import annotations

from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

#: Progress bar labels of the backfill phases (``writer.backfill`` module docstring).
BACKFILL_PHASES = {
    "read": "reading events",
    "features": "feature columns per event type",
    "tiles": "tiles per aggregate state",
    "coverage": "recording coverage",
}


class _Spinner(SpinnerColumn):
    """The spinner, left blank for a bar marked stopped (a spinner frame there read as a phase still running)."""

    def render(self, task: Task) -> Text:
        """A blank of the spinner's width for a stopped task, else the spinner's frame."""
        if task.fields.get("stopped"):
            return Text(" ")
        return super().render(task)


class _JobProgress(Progress):
    """A ``Progress`` whose unfinished bars say "(stopped)", without a spinner, when its block ends in an exception.

    Without it a failed or interrupted job left its last phase's spinner
    frozen above the ``error:`` line, as if the phase were still running.
    """

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        if exc_type is not None:
            for task in self.tasks:
                if not task.finished:
                    self.update(task.id, description=f"{task.description} (stopped)", stopped=True)
        super().__exit__(exc_type, exc_val, exc_tb)


def job_progress(console: Console) -> Progress:
    """Return a rich ``Progress`` for a job's phases: spinner, label, bar, ``done/total``, elapsed time.

    Args:
        console: where to draw (the bars are redrawn in a terminal and
            printed once, finished, when the output is piped).

    Returns:
        The (not yet started) ``Progress``; use it as a context manager.
        When its block raises (a failed job, Ctrl-C), each bar not
        finished has "(stopped)" added to its label before the last draw.
    """
    return _JobProgress(_Spinner(), TextColumn("{task.description}", markup=False), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False)


def phase_progress(prog: Progress, labels: dict[str, str] | None = None) -> Callable[[str, int, int], None]:
    """Return a ``(phase, done, total)`` progress callback drawing one bar per phase on ``prog``.

    Args:
        prog: a started ``Progress``.
        labels: bar label per phase name (default: the phase name itself).

    Returns:
        The callback, for ``writer.replay.run_replay`` and the like.
    """
    tasks: dict[str, int] = {}
    labels = labels or {}

    def cb(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = prog.add_task(labels.get(phase, phase), total=total)
        prog.update(tasks[phase], completed=done, total=total)

    return cb


def backfill_progress(prog: Progress) -> Callable[[str, int, int], None]:
    """Return a ``writer.backfill.run_backfill`` progress callback drawing one bar per phase on ``prog``.

    Phases (``writer.backfill`` module docstring): ``read``, ``stage <k>``
    (dependency stage ``k``), ``features``, ``tiles``, ``coverage``,
    optionally prefixed ``run <i>/<n>: `` (``--auto``). Labels read e.g.
    ``backfill run 1/2: tiles per aggregate state``.

    Args:
        prog: a started ``Progress``.

    Returns:
        The callback ``(phase, done, total)``.
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
