"""Event inputs of ``scowl replay`` and ``scowl backfill`` that are not files: ``redis:STREAM``.

``--events redis:KEY`` names a Redis stream in the store (``SCOWL_REDIS_URL``,
else the embedded one under ``SCOWL_HOME``), such as the one the API appends
every event it writes to (``SCOWL_EVENT_STREAM``). :func:`resolve_inputs`
exports each such stream to a JSONL file under ``SCOWL_HOME/exports/``
(``writer.redis_source.export_stream``: one event a line, in the stream's
order, which is the API's arrival order) and passes the file on, so the jobs
read it as any timeline file. Replaying the API's own stream gives, row for
row, the values the API answered (SPEC §3.3, §5.8), and the file stays as
the training set's exact input.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from scowl.common import UserError, console, file_slug, plural, scowl_home

#: The prefix of a stream input.
PREFIX = "redis:"


def stream_inputs(events: Sequence[str]) -> list[str]:
    """The stream keys named among ``events`` (items ``redis:KEY``), in order."""
    return [e[len(PREFIX):] for e in events if e.startswith(PREFIX)]


def resolve_inputs(events: Sequence[str], url: str, home: Path | None = None, quiet: bool = False) -> list[str]:
    """``events`` with each ``redis:KEY`` replaced by a JSONL export of that stream (module docstring).

    Prints one line per export (unless ``quiet``): the stream, its entries and the file.

    Args:
        events: ``--events`` items: paths, globs, directories or ``redis:KEY``.
        url: the store holding the streams.
        home: ``SCOWL_HOME`` (default :func:`scowl.common.scowl_home`); the
            exports go to ``home/exports/<key>-<UTC time>.jsonl``.
        quiet: print nothing (``scowl.training_set`` in a notebook).

    Returns:
        The items, streams replaced by their files, order kept.

    Raises:
        UserError: an empty key, a key the store does not hold, a key that is
            not a stream, or a store that does not answer.
    """
    import redis

    from writer.redis_source import export_stream

    out: list[str] = []
    for item in events:
        if not item.startswith(PREFIX):
            out.append(item)
            continue
        key = item[len(PREFIX):]
        if not key:
            raise UserError(f"--events {item}: name a stream, e.g. redis:events")
        folder = (home or scowl_home()) / "exports"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{file_slug(key)}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.jsonl"
        try:
            done = export_stream(url, key, path)
        except LookupError:
            raise UserError(f"--events {item}: the store holds no key {key!r} (the API appends to the stream "
                            "named by SCOWL_EVENT_STREAM)") from None
        except redis.ResponseError as e:
            raise UserError(f"--events {item}: {key!r} is not a Redis stream ({e})") from None
        except redis.RedisError as e:
            raise UserError(f"store unavailable: {e}") from None
        span = f" ({done.first_id} .. {done.last_id})" if done.entries else ""
        if not quiet:
            console.print(f"exported {plural(done.entries, 'entry', 'entries', spec=',')} of {item}{span} to "
                          f"{path}", highlight=False)
        out.append(str(path))
    return out
