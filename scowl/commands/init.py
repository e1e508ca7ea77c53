"""``scowl init DIR``: start a project of one's own -- a topology to edit and events to run it on.

What ``feast init`` and ``tecton init`` give their users: a directory that
every other command runs on as it is (``scowl.starter``), and the commands
to try next, in the order a first session takes them.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import typer

from scowl.common import UserError, compile_topology, console, plural
from scowl.starter import write_starter


def init(
    directory: Path = typer.Argument(..., metavar="DIR", help="Project directory (created if missing)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the starter's two files if DIR holds them."),
) -> None:
    """Start a project: a topology to edit and events to try it on.

    Writes DIR/features.scowl (login and payment features) and
    DIR/events.jsonl (about 1,000 events over the last 24 hours), then
    prints the commands to check, replay, backfill and serve them. Files
    already there are left alone unless --force.
    """
    try:
        made = write_starter(directory, now_ms=int(time.time() * 1000), force=force)
    except FileExistsError as e:
        raise UserError(f"{e.filename} already exists (--force overwrites it and {directory}'s other starter file)") \
            from None
    except OSError as e:
        raise UserError(f"cannot write the project in {directory}: {e.strerror or e}") from None
    plan = compile_topology(directory)
    n = sum(len(ev.outputs) for ev in plan.events.values())
    d = shlex.quote(str(directory))
    first, last = (time.strftime("%Y-%m-%d %H:%M", time.gmtime(ms / 1000)) for ms in (made.first_ms, made.last_ms))
    console.print(f"wrote {made.topology}: {plural(len(plan.events), 'event type')}, {plural(n, 'feature')}, "
                  f"{plural(len(plan.states), 'aggregate state')}")
    console.print(f"wrote {made.events}: {plural(made.n_events, 'event', spec=',')}, {first} to {last} UTC")
    console.print("next:")
    for line in (
        f"scowl check {d}",
        f"scowl replay {d} --events {shlex.quote(str(made.events))} --out {shlex.quote(str(directory / 'training'))}"
        "    # the training set, as Parquet",
        f"scowl backfill {d} --events {shlex.quote(str(made.events))}    # their tiles into the store",
        f"scowl serve {d}    # then, from another terminal:",
        "curl -s localhost:8000/event -d '{\"_type\": \"payment\", \"user\": \"user07\", \"card\": \"card-07a\", "
        "\"amount\": 25}'",
    ):
        console.print(f"  {line}")
