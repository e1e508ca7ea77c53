"""``scowl status DIR`` (SPEC §5.6, §6): per aggregate state, coverage, gaps, online start and size in the store.

The numbers come from ``writer.status.store_status``. The output is a
listing that does not depend on the terminal's width: the store, its server
and what a restart of it keeps (:func:`server_lines`), then one block per
state:

    departure.departures_1h
      Count, window 1h, resolution 1s, state 30b863a1c2d3e4f5
      backfilled 2013-01-01T00:00:00.000Z .. 2013-12-01T00:00:00.000Z
      online since 2013-12-01T05:00:00.000Z
      3 keys, 12,345 bytes

With ``SCOWL_EVENT_STREAM`` set, a block describes that stream
(:func:`stream_lines`); the ``scowl stream`` checkpoints under
``SCOWL_HOME/checkpoints`` (its default place) end the listing
(:func:`checkpoint_lines`). A state read by several features has one header line per feature; an
aggregate written inside a scalar feature (SPEC §2.4) is named by that
feature and its source text, e.g. ``e.past_money: Sum(amount by a last 30 days)``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from scowl.common import (UserError, compile_topology, console, format_duration_s, open_store, plural, redact_url,
                          scowl_home)


def status(directory: Path = typer.Argument(..., metavar="DIR", help="Topology directory (its *.scowl files).")) -> None:
    """Show the store's coverage, gaps and size per aggregate.

    Per aggregate state: the backfilled intervals and the gaps between them,
    the earliest event time the online path (serve, stream) wrote, and the
    number of keys and bytes. With SCOWL_EVENT_STREAM set, also that event
    stream's entries, bytes and append times. Then each scowl stream
    checkpoint under SCOWL_HOME/checkpoints: its source, totals and last
    batch. The store is SCOWL_REDIS_URL, else the embedded one under
    SCOWL_HOME (default ./.scowl).
    """
    import redis

    from serving.settings import Settings, SettingsError
    from writer.status import checkpoint_status, server_status, store_status, stream_status

    plan = compile_topology(directory)
    try:
        settings = Settings.load()  # SCOWL_EVENT_STREAM and its cap, read as the API reads them
    except SettingsError as e:
        raise UserError(str(e)) from None
    stream_key = settings.event_stream or None
    with open_store() as url:
        try:
            states = store_status(plan, url)
            stream = stream_status(url, stream_key) if stream_key else None
            server = server_status(url)
        except redis.RedisError as e:
            raise UserError(f"store unavailable: {e}") from None
    console.print(f"store {redact_url(url)}: {plural(len(states), 'aggregate state')}",
                  highlight=False)
    for line in server_lines(server):
        console.print(line, highlight=False)
    for s in states:
        console.print("")
        for line in state_lines(s):
            console.print(line, highlight=False)
    if stream is not None:
        console.print("")
        for line in stream_lines(stream, settings.event_stream_maxlen):
            console.print(line, highlight=False)
    root = scowl_home() / "checkpoints"
    checkpoints = checkpoint_status(root)
    if checkpoints:
        console.print("")
        for line in checkpoint_lines(root, checkpoints):
            console.print(line, highlight=False)


def server_lines(server, now_s: int | None = None) -> list[str]:
    """Return the lines on the store's server (a ``writer.status.ServerStatus``) under the ``store`` line.

    ``  server Valkey 8.1.8, up 2h 5m; memory 81.9 MB, no maxmemory (policy noeviction)`` and a
    ``  persistence ...`` line saying what a restart keeps: every write up to the append-only file's
    fsync, the last snapshot, or (neither) nothing written since the server started.

    Args:
        server: the status.
        now_s: the current epoch seconds (default: now).
    """
    import time

    now_s = int(time.time()) if now_s is None else now_s
    nodes = f" ({server.primaries} primaries)" if server.primaries > 1 else ""
    limit = (f"of maxmemory {server.maxmemory / 1e6:,.1f} MB" if server.maxmemory else "no maxmemory")
    lines = [f"  server {server.software}{nodes}, up {_rough(server.uptime_s)}; memory "
             f"{server.used_memory / 1e6:,.1f} MB, {limit} (policy {server.policy})"]
    if server.aof_fsync is not None:
        keeps = {"always": "every write", "everysec": "every write but up to the last second's",
                 "no": "every write the OS has flushed"}.get(server.aof_fsync, "what its append-only file holds")
        lines.append(f"  persistence append-only file, fsync {server.aof_fsync}: a restart keeps {keeps}")
    elif server.save:
        ago = _rough(max(0, now_s - server.last_save_s))
        lines.append(f"  persistence snapshots (save {server.save}), the last {ago} ago: a restart loses what "
                     "was written since the last one")
    elif server.save is None:
        lines.append("  persistence unknown (CONFIG is refused): ask the store's operator what a restart keeps")
    else:
        lines.append("  persistence none while it runs (no append-only file, no snapshot schedule): a crash "
                     "loses every state written since it started (the embedded store saves when scowl stops it)")
    return lines


def _rough(seconds: int) -> str:
    """A duration for a person: seconds under 2 minutes, then whole minutes, from 2 days whole hours (``2h5m``)."""
    if seconds >= 2 * 86_400:
        seconds -= seconds % 3_600
    elif seconds >= 120:
        seconds -= seconds % 60
    return format_duration_s(seconds)


def checkpoint_lines(root: Path, checkpoints: list, now_ms: int | None = None) -> list[str]:
    """Return the lines of the stream checkpoints' block.

    Args:
        root: the directory they were found in (``SCOWL_HOME/checkpoints``).
        checkpoints: ``writer.status.CheckpointStatus`` objects.
        now_ms: the current time (epoch ms; default the clock), for the
            age of each last batch.

    Returns:
        A header, then per checkpoint its directory name and source, its
        totals, and its last batch with its age and watermark, e.g.::

            stream checkpoints under .scowl/checkpoints
              dir-events (dir:/data/events)
                12 batches: 120,000 events, 3 late, 1 invalid set aside
                last batch 11 started 2026-12-05T10:00:00.000Z (4m10s ago); watermark 2026-11-05T09:59:00.000Z

        A batch's record is written when it starts (its counts known, its merges not yet made: a batch cut
        short is redone from it on restart), so the totals include the last batch however it ended.
    """
    import time

    from compiler.typesystem import format_time

    now = int(time.time() * 1000) if now_ms is None else now_ms
    lines = [f"stream checkpoints under {root}"]
    for c in checkpoints:
        lines.append(f"  {Path(c.path).name} ({c.source})")
        if c.last_batch is None:
            lines.append("    no batch yet")
            continue
        lines.append(f"    {plural(c.batches, 'batch', 'batches', spec=',')}: {plural(c.events, 'event', spec=',')}, "
                     f"{c.late:,} late, {c.invalid:,} invalid set aside")
        age = format_duration_s(max(0, (now - c.last_batch_ms) // 1000))
        wm = "none" if c.watermark_ms is None else format_time(c.watermark_ms)
        lines.append(f"    last batch {c.last_batch} started {format_time(c.last_batch_ms)} ({age} ago); "
                     f"watermark {wm}")
    return lines


def stream_lines(s, maxlen: int | None) -> list[str]:
    """Return the lines of the event stream's block (``SCOWL_EVENT_STREAM`` set).

    Args:
        s: a ``writer.status.StreamStatus``.
        maxlen: ``SCOWL_EVENT_STREAM_MAXLEN`` (``serving.settings.Settings``), or ``None``.

    Returns:
        A header naming the stream, then (indented) its entries and bytes,
        the append times of its first and last entries, and how it is
        trimmed, e.g.::

            event stream events (SCOWL_EVENT_STREAM)
              1,200 entries (3,400 appended in all), 245,760 bytes
              appended 2026-12-05T10:00:00.000Z .. 2026-12-05T10:05:00.000Z
              capped at about 1,000 entries (SCOWL_EVENT_STREAM_MAXLEN)
    """
    from compiler.typesystem import format_time

    lines = [f"event stream {s.key} (SCOWL_EVENT_STREAM)"]
    if s.entries == 0 and s.added == 0:
        lines.append("  empty")
    else:
        lines.append(f"  {plural(s.entries, 'entry', 'entries', spec=',')} ({s.added:,} appended in all), "
                     f"{s.bytes:,} bytes")
        if s.first_ms is not None and s.last_ms is not None:
            lines.append(f"  appended {format_time(s.first_ms)} .. {format_time(s.last_ms)}")
    if maxlen:
        lines.append(f"  capped at about {maxlen:,} entries (SCOWL_EVENT_STREAM_MAXLEN)")
    else:
        lines.append("  no cap: trimmed only by its reader (scowl stream --trim-source) or by hand")
    return lines


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
