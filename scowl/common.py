"""What every ``scowl`` command shares (SPEC §6): output, errors, exit codes, the topology, the store.

The command modules (``scowl.commands.*``) import this module; the app
(``scowl.cli``) imports the command modules. This module imports neither,
so there is no import cycle inside ``scowl``.

Output is written so that it reads the same in an 80-column terminal and
through a pipe: :data:`console` never hard-wraps a line of text (a long path
or message stays one line; the terminal wraps it), and error messages go to
stderr as plain text (:func:`print_error`).
"""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from rich.console import Console

if TYPE_CHECKING:
    import socket

    import uvicorn

    from compiler.plan import Plan

#: Exit code of a successful run (SPEC §6).
EXIT_OK = 0
#: Exit code of a user error: a diagnostic or a message, never a traceback (SPEC §6).
EXIT_USER_ERROR = 1
#: Exit code of a usage error (bad options or arguments; click's own code, SPEC §6).
EXIT_USAGE_ERROR = 2

#: Standard output of every command. ``soft_wrap``: text is never broken into
#: lines by rich (tables and progress bars still fit the width); ``markup``
#: off: a ``[`` in a path or message is printed as it is.
console = Console(soft_wrap=True, markup=False)


class UserError(Exception):
    """A user-facing failure: printed by :func:`print_error`, exit code :data:`EXIT_USER_ERROR`."""


def plural(n: int, noun: str, nouns: str | None = None, spec: str = "") -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``plural(1, "event")`` is ``"1 event"``, ``plural(2, "batch",
    "batches")`` is ``"2 batches"``.

    Args:
        n: the count.
        noun: the singular.
        nouns: the plural (default ``noun + "s"``).
        spec: format spec of the number (``","``: ``"1,500 rows"``).

    Returns:
        ``"<n> <noun>"`` for ``n == 1``, else ``"<n> <nouns>"``, the number formatted with ``spec``.
    """
    return f"{n:{spec}} {noun if n == 1 else (nouns or noun + 's')}"


def print_error(message: str) -> None:
    """Write ``error: <message>`` to stderr as one plain line (no wrapping, no markup, no colour).

    Args:
        message: the text; a multi-line message is written as it is.
    """
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()


def writable_dir(path: Path, what: str) -> Path:
    """Make sure the directory ``path`` exists and a file can be written in it, before a job that writes there.

    A Spark job that cannot create its output fails in its tasks, with pages
    of stack traces and after the job's whole work (an unwritable
    ``scowl replay --out`` gave ~1,500 lines); this asks first.

    Args:
        path: a local directory (created with its parents if missing).
        what: how the error names it (``"--out"``).

    Returns:
        ``path``.

    Raises:
        UserError: it cannot be created, is not a directory, or cannot be written.
    """
    import tempfile

    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".scowl-write-test-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UserError(f"{what} {path}: cannot write there ({e.strerror or e})") from None
    return path


def compile_topology(directory: Path) -> "Plan":
    """Compile the topology in ``directory`` (its ``*.scowl`` files, SPEC §2.1).

    Diagnostics are written to stderr exactly as the compiler renders them.

    Args:
        directory: the topology directory.

    Returns:
        The compiled plan.

    Raises:
        UserError: ``directory`` is not a directory.
        typer.Exit: the topology has errors (exit code 1; diagnostics already printed).
    """
    import typer

    from compiler import compile_dir

    if not directory.is_dir():
        raise UserError(f"{directory}: not a directory")
    result = compile_dir(directory)
    if result.plan is None:
        sys.stderr.write(result.render().rstrip("\n") + "\n")
        raise typer.Exit(EXIT_USER_ERROR)
    return result.plan


def scowl_home() -> Path:
    """Return ``SCOWL_HOME``, the directory of the embedded store's state (default ``./.scowl``, SPEC §6)."""
    return Path(os.environ.get("SCOWL_HOME", ".scowl"))


#: The URL schemes of ``SCOWL_REDIS_URL`` (redis-py's ``from_url``; a cluster's URL names one of its nodes).
STORE_URL_SCHEMES = ("redis://", "rediss://", "unix://")


def store_error(url: str) -> str | None:
    """Ask the store at ``url`` for ``PING`` (5 s timeouts); return redis-py's reason when it does not answer.

    Args:
        url: a store URL (:func:`open_store`); any node of a cluster answers.

    Returns:
        ``None`` when it answers, else the error's first line without its
        final period (``"Error 111 connecting to 127.0.0.1:1. Connection refused"``).
    """
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    try:
        client.ping()
    except redis.RedisError as e:
        text = str(e).strip()
        return text.splitlines()[0].rstrip(".") if text else type(e).__name__
    finally:
        client.close()
    return None


def check_store(url: str) -> None:
    """Raise :class:`UserError` unless the store at ``url`` answers ``PING`` (before a job that needs it starts).

    Args:
        url: a store URL (:func:`open_store`); any node of a cluster answers.

    Raises:
        UserError: ``store unavailable: <redis-py's reason>`` (:func:`store_error`).
    """
    error = store_error(url)
    if error is not None:
        raise UserError(f"store unavailable: {error}")


@contextmanager
def open_store(home: Path | None = None) -> Iterator[str]:
    """Yield a store URL: ``SCOWL_REDIS_URL``, else the embedded server of ``home`` (SPEC §5.9, §6).

    The embedded server (``scowl.embedded.EmbeddedStore``, persisted under
    ``home/store``) is reused if one is already running there; if this call
    started it, it is saved and stopped when the block exits, however it
    exits (an exception, or a stop signal turned into one by
    ``scowl.signals.signals_stop``).

    Args:
        home: ``SCOWL_HOME`` (default :func:`scowl_home`).

    Yields:
        ``redis://...`` URL of the store.

    Raises:
        UserError: ``SCOWL_REDIS_URL`` is no store URL (:data:`STORE_URL_SCHEMES`),
            or the embedded server could not be found or started.
    """
    url = os.environ.get("SCOWL_REDIS_URL")
    if url:
        if not url.startswith(STORE_URL_SCHEMES):
            raise UserError(f"SCOWL_REDIS_URL={redact_url(url)}: not a store URL (it starts with "
                            f"{', '.join(STORE_URL_SCHEMES[:-1])} or {STORE_URL_SCHEMES[-1]})")
        yield url
        return
    from scowl.embedded import EmbeddedStore, EmbeddedStoreError

    store = EmbeddedStore(home or scowl_home())
    try:
        try:
            url = store.start()
        except EmbeddedStoreError as e:
            raise UserError(str(e)) from None
        yield url
    finally:
        store.stop()


def file_slug(text: str, default: str = "stream") -> str:
    """``text`` as a file name part: runs of characters other than ``A-Za-z0-9_.-`` become ``_``, at most 80.

    >>> file_slug("redis:events"), file_slug("dir:/tmp/in put"), file_slug("::")
    ('redis_events', 'dir_tmp_in_put', 'stream')
    """
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or default


def redact_url(url: str) -> str:
    """Return ``url`` with its password replaced by ``***``, for printing (a store URL may carry one).

    >>> redact_url("redis://:s3cret@db:6379/0"), redact_url("redis://u:pw@db/1"), redact_url("redis://127.0.0.1:7/0")
    ('redis://:***@db:6379/0', 'redis://u:***@db/1', 'redis://127.0.0.1:7/0')
    """
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def parse_iso_ms(text: str) -> int:
    """Parse an ISO-8601 date/time (naive = UTC, SPEC §3.1) into epoch milliseconds.

    Raises:
        UserError: not a valid ISO-8601 time.
    """
    from compiler.typesystem import parse_time

    try:
        return parse_time(text)
    except ValueError:
        raise UserError(f"not an ISO-8601 time: {text!r}") from None


#: Units of :func:`format_duration_s`, largest first: (suffix, seconds).
DURATION_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))


def format_duration_s(seconds: int) -> str:
    """Format a whole number of seconds compactly, as windows and resolutions are shown (SPEC §2.4, §3.2).

    The largest unit that divides the duration exactly is used when the
    count stays below 100 (``90s``, ``10m``, ``36h``, ``30d``), or when that
    unit is days (``400d``); otherwise the duration is spelled out unit by
    unit, largest first (``1d1s``, ``2m30s``).

    Args:
        seconds: the duration in seconds (an int; negative gets a leading ``-``).

    Returns:
        The text, e.g. ``"30d"``.

    >>> [format_duration_s(s) for s in (0, 1, 90, 150, 600, 3600, 5400, 86400, 2592000, 86401, 129600, 3661)]
    ['0s', '1s', '90s', '2m30s', '10m', '1h', '90m', '1d', '30d', '1d1s', '36h', '1h1m1s']
    >>> format_duration_s(400 * 86400), format_duration_s(-60)
    ('400d', '-1m')
    """
    if seconds < 0:
        return "-" + format_duration_s(-seconds)
    if seconds == 0:
        return "0s"
    for suffix, size in DURATION_UNITS:
        if seconds % size == 0:
            if seconds // size < 100 or suffix == "d":
                return f"{seconds // size}{suffix}"
            break
    parts = []
    for suffix, size in DURATION_UNITS:
        if seconds >= size:
            parts.append(f"{seconds // size}{suffix}")
            seconds %= size
    return "".join(parts)


def start_spark(master: str | None = None, app_name: str = "scowl", events=None):
    """Start (or get) the Spark session with stop signals held back until it is up.

    Args:
        master: Spark master URL (default ``SCOWL_SPARK_MASTER`` or ``local[*]``).
        app_name: the application name Spark shows.
        events: the job's input paths (files, globs, directories), or
            ``None`` (a stream): their estimated event count picks the JVM
            options (``writer.sources.estimate_events``,
            ``writer.session.java_options``).

    Returns:
        The ``pyspark.sql.SparkSession`` of ``writer.session.get_spark``.

    Raises:
        UserError: an ``events`` path matches nothing, or Spark's JVM could
            not start (``writer.gateway.SparkStartError``'s message).

    A stop signal during start-up is delivered once the session exists
    (``scowl.signals.stop_deferred``), so it never orphans Spark's JVM. The
    session is started from a driver thread, where pyspark installs no SIGINT
    handler of its own: this process's (``scowl.signals.signals_stop``) stays,
    so Ctrl-C stops the command as SIGTERM does. The first stop signal
    cancels the session's jobs before the command unwinds
    (``writer.session.stop_spark_jobs``).
    """
    from concurrent.futures import ThreadPoolExecutor

    from scowl.signals import add_stop_hook, stop_deferred
    from writer.gateway import SparkStartError
    from writer.session import get_spark, stop_spark_jobs
    from writer.sources import SourceError, estimate_events

    try:
        n = estimate_events(events) if events is not None else None
    except SourceError as e:
        raise UserError(str(e)) from None
    add_stop_hook(stop_spark_jobs)
    with stop_deferred():
        # started from a thread of its own: pyspark installs its SIGINT handler only when Spark starts in the
        # main thread (and then at the end of SparkContext's set-up, where restoring ours afterwards leaves a
        # window in which Ctrl-C met pyspark's handler, seen under load), so this process's handler stays. A stop
        # signal while the main thread waits is held back (stop_deferred) and delivered after the block
        with ThreadPoolExecutor(1, thread_name_prefix="scowl-start-spark") as pool:
            try:
                return pool.submit(get_spark, master, app_name=app_name, events=n).result()
            except SparkStartError as e:  # no Java, a heap the host cannot give, a bad JVM option
                raise UserError(str(e)) from None


def bind_address(config: "uvicorn.Config") -> "socket.socket":
    """A socket bound to ``config``'s address, inheritable, not yet listening (uvicorn's ``Config.bind_socket``).

    As uvicorn binds it: IPv6 if the host holds a ``:``, ``SO_REUSEADDR``
    set; a Unix socket (``config.uds``) or an inherited ``fd`` is left to
    uvicorn itself. Unlike uvicorn, a failure is a :class:`UserError` of
    one line (uvicorn logs the error and exits), so that ``scowl serve``
    says "serving ..." only once the port is its own.

    Args:
        config: the ``uvicorn.Config`` (``host``, ``port``: 0 picks a free
            port).

    Returns:
        The bound socket (``getsockname()[1]`` is the port).

    Raises:
        UserError: the address cannot be bound, e.g. ``cannot listen on
            127.0.0.1:8000: address already in use (another process listens
            there; give another --port)``.
    """
    import socket

    if config.uds is not None or config.fd is not None:
        return config.bind_socket()
    family = socket.AF_INET6 if config.host and ":" in config.host else socket.AF_INET
    sock = socket.socket(family=family, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((config.host, config.port))
    except OSError as e:
        sock.close()
        raise UserError(bind_failure(config, e)) from None
    sock.set_inheritable(True)
    return sock


def bind_failure(config: "uvicorn.Config", error: OSError) -> str:
    """The one-line message of a failed bind of ``config``'s address (``error``: the ``OSError``)."""
    import errno

    reason = (error.strerror or str(error)).lower()
    hint = {errno.EADDRINUSE: " (another process listens there; give another --port)",
            errno.EACCES: " (ports below 1024 need privileges; give another --port)",
            errno.EADDRNOTAVAIL: " (no interface of this host has that address; see --host)"}.get(error.errno, "")
    return f"cannot listen on {config.host}:{config.port}: {reason}{hint}"
