"""``scowl status DIR`` (SPEC §5.6, §6): per aggregate state, coverage, gaps, online start and size in the store.

The numbers come from ``writer.status.store_status``. The output is a
listing that does not depend on the terminal's width, one block per state:

    departure.departures_1h
      Count, window 1h, resolution 1s, state 30b863a1c2d3e4f5
      backfilled 2013-01-01T00:00:00.000Z .. 2013-12-01T00:00:00.000Z
      online since 2013-12-01T05:00:00.000Z
      3 keys, 12,345 bytes

A state read by several features has one header line per feature; an
aggregate written inside a scalar feature (SPEC §2.4) is named by that
feature and its source text, e.g. ``e.past_money: Sum(amount by a last 30 days)``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from scowl.common import UserError, compile_topology, console, format_duration_s, open_store, plural, redact_url


def status(directory: Path = typer.Argument(..., metavar="DIR", help="Topology directory (its *.scowl files).")) -> None:
    """Show the store's coverage, gaps and size per aggregate.

    Per aggregate state: the backfilled intervals and the gaps between them,
    the earliest event time the online path (serve, stream) wrote, and the
    number of keys and bytes. The store is SCOWL_REDIS_URL, else the embedded one under
    SCOWL_HOME (default ./.scowl).
    """
    import redis

    from writer.status import store_status

    plan = compile_topology(directory)
    with open_store() as url:
        try:
            states = store_status(plan, url)
        except redis.RedisError as e:
            raise UserError(f"store unavailable: {e}") from None
    console.print(f"store {redact_url(url)}: {plural(len(states), 'aggregate state')}",
                  highlight=False)
    for s in states:
        console.print("")
        for line in state_lines(s):
            console.print(line, highlight=False)


def state_lines(s) -> list[str]:
    """Return the lines of one state of the listing (module docstring).

    Args:
        s: a ``writer.status.StateStatus``.

    Returns:
        One line per reading feature, then the definition, the backfilled
        intervals and gaps, the online start and the size, indented.
    """
    from compiler.typesystem import format_time

    def span(a: int, b: int) -> str:
        return f"{format_time(a)} .. {format_time(b)}"

    lines = list(s.features) or [f"(no feature reads state {s.definition_hash})"]
    limit = f" limit {s.limit}" if s.limit else ""
    lines.append(f"  {s.function}{limit}, window {format_duration_s(s.window_s)}, "
                 f"resolution {format_duration_s(s.resolution_s)}, state {s.definition_hash}")
    lines.extend(f"  backfilled {span(a, b)}" for a, b in s.covered)
    if not s.covered:
        lines.append("  backfilled: never")
    lines.extend(f"  gap {span(a, b)}" for a, b in s.gaps)
    lines.append(f"  online since {format_time(s.online_since)}" if s.online_since is not None else "  online: never")
    lines.append(f"  {plural(s.keys, 'key', spec=',')}, {s.bytes:,} bytes")
    return lines
