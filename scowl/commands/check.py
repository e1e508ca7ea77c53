"""``scowl check DIR`` (SPEC §6): compile a topology, print its diagnostics, exit 1 on any error."""

from __future__ import annotations

from pathlib import Path

import typer

from scowl.common import compile_topology, console, plural


def check(directory: Path = typer.Argument(..., metavar="DIR", help="Topology directory (its *.scowl files).")) -> None:
    """Compile a topology and print its diagnostics.

    Errors and warnings go to stderr with their file:line:column, and the
    exit code is 1 if there is any error; on success one line sums up the
    events, features and aggregate states.
    """
    plan = compile_topology(directory)
    n = sum(len(e.outputs) for e in plan.events.values())
    console.print(f"ok: {plural(len(plan.events), 'event')}, {plural(n, 'feature')}, "
                  f"{plural(len(plan.states), 'aggregate state')}")
