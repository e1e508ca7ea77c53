"""``scowl serve DIR [--host 127.0.0.1] [--port 8000] [--workers N]`` (SPEC §4, §6): the event API over the store.

One worker (the default): the app is built in this process and served by one
uvicorn server (``scowl.signals.GracefulServer``).

``--workers N`` (N > 1): this process starts (or connects to) the store once,
compiles the topology once (its errors are reported as with one worker),
binds the port, and runs uvicorn's own supervisor
(``uvicorn.supervisors.Multiprocess``) over N worker processes sharing that
socket. Each worker builds the app with :func:`worker_app`
(``serving.app.create_app_from_env`` on ``SCOWL_TOPOLOGY``, the topology's
absolute path, and ``SCOWL_REDIS_URL``, the store's URL, both passed through
the environment), so all workers read and write one store: a feature's
value does not depend on which worker answers. A worker that dies is
replaced by the supervisor.

Shutdown (``scowl.signals``): on SIGINT, SIGTERM or SIGHUP uvicorn stops
accepting connections and finishes the requests in flight; only then is the
embedded store (if this command started it) saved and stopped, and the
process exits with ``128 + signal number``. With workers, the signal goes
to this process (``kill <pid>``; Ctrl-C reaches the workers as well): it
sends SIGTERM to each worker, each finishes its requests in flight and
exits, and once all have exited the store is saved and stopped. SIGHUP
stops the service as the other two do (uvicorn's supervisor would restart
its workers); a worker ignores SIGHUP itself and leaves it to this process,
so a closed terminal also stops the workers gracefully. A worker gets
SIGTERM if this process dies (even by ``kill -9``, Linux), as the embedded
store does (``scowl.embedded``): nothing is left running.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import typer

from scowl.common import UserError, compile_topology, console, open_store, redact_url

if TYPE_CHECKING:
    import socket

    import uvicorn
    from fastapi import FastAPI

#: The ASGI factory each worker of ``--workers N`` runs (``uvicorn --factory`` import string).
WORKER_APP = "scowl.commands.serve:worker_app"


def serve(
    directory: Path = typer.Argument(..., metavar="DIR", help="Topology directory (its *.scowl files)."),
    host: str = typer.Option("127.0.0.1", metavar="HOST", help="Bind address."),
    port: int = typer.Option(8000, metavar="PORT", help="TCP port."),
    workers: int = typer.Option(1, min=1, metavar="N", help="Worker processes, all over the same store."),
) -> None:
    """Run the event API (POST /event, /batch) over the store.

    The API is wire-compatible with Sumatra's Event API (docs/semantics.md §8).
    Each event's features are computed as it arrives, in arrival order, with
    windows exact at their resolution (docs/semantics.md). The store is
    SCOWL_REDIS_URL, else the embedded one under SCOWL_HOME (default
    ./.scowl), shared with `scowl backfill`. --workers N runs N uvicorn
    worker processes on the port, all over that one store. API keys:
    SCOWL_API_KEYS (comma-separated, several for rotation; none means no
    authentication); SCOWL_AUTH_ALL=true requires the key on every path
    but /health and /ready (/metrics included). Stop it
    with Ctrl-C or kill: requests in flight are answered first (by every
    worker), then the embedded store is saved and stopped.
    """
    import uvicorn

    from scowl.signals import graceful_server_class
    from serving.app import create_app, freeze_heap
    from serving.settings import Settings

    p = compile_topology(directory)
    with open_store() as url:
        try:
            api = create_app(p, Settings(), redis_url=url)  # with workers too: an unsupported plan fails here
        except NotImplementedError as e:
            raise UserError(str(e)) from None
        if workers == 1:
            from scowl.ui import install_ui

            ui = install_ui(api, directory)  # the explorer under /ui (SCOWL_UI, default on)
            freeze_heap()
            console.print(f"serving {directory} on http://{host}:{port} (store {redact_url(url)})")
            if ui:
                console.print(f"feature explorer: http://{host}:{port}/ui")
            server = graceful_server_class()(uvicorn.Config(api, host=host, port=port, log_level="warning"))
            _starting(server.run, host, port)
            return
        del api
        console.print(f"serving {directory} on http://{host}:{port} with {workers} workers (store {redact_url(url)})")
        config = uvicorn.Config(WORKER_APP, factory=True, workers=workers, host=host, port=port,
                                log_level="warning")
        with _environment(SCOWL_TOPOLOGY=str(directory.resolve()), SCOWL_REDIS_URL=url):
            sock = _starting(config.bind_socket, host, port)
            try:
                stop_signal = _supervise(config, sock)
            finally:
                sock.close()
        if stop_signal is None:  # the supervisor gave up: a worker failed before serving (uvicorn logged why)
            raise UserError(f"the API workers could not start on {host}:{port} (see the message above)")
        signal.raise_signal(stop_signal)  # now the handlers of scowl.signals.signals_stop: Stopped, clean-up


def worker_app() -> "FastAPI":
    """ASGI factory of one ``scowl serve --workers N`` worker (run by uvicorn in the worker process).

    Ignores SIGHUP (the parent stops the workers with SIGTERM, gracefully),
    asks for SIGTERM when the parent dies (Linux), and returns
    ``serving.app.create_app_from_env()``: the topology ``$SCOWL_TOPOLOGY``
    over the store ``$SCOWL_REDIS_URL``, with the feature explorer under
    ``/ui`` (``scowl.ui.install_ui``, unless ``SCOWL_UI=false``).

    Returns:
        The FastAPI app.
    """
    import multiprocessing

    from scowl.ui import install_ui
    from serving.app import create_app_from_env

    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        _die_with_parent(parent.pid)
    app = create_app_from_env()
    install_ui(app, os.environ.get("SCOWL_TOPOLOGY"))  # the explorer under /ui (SCOWL_UI, default on)
    return app


def _die_with_parent(parent_pid: int) -> None:
    """Have the kernel send this process SIGTERM when its parent dies (Linux; elsewhere nothing).

    If the parent is already gone (``parent_pid`` is no longer the parent),
    SIGTERM is sent at once.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import ctypes.util

    from scowl.embedded import PR_SET_PDEATHSIG

    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return
    prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGTERM)


def _starting(start: Callable, host: str, port: int):
    """Call ``start()`` (uvicorn's start-up); its ``SystemExit`` on failure becomes a :class:`UserError`."""
    try:
        return start()
    except SystemExit as e:  # uvicorn could not start (it logged why, e.g. the address is in use)
        if e.code not in (0, None):
            raise UserError(f"the API could not start on {host}:{port} (see the message above)") from None
        raise


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Within the block, ``os.environ`` holds ``values`` (inherited by the workers); restored on exit."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _supervise(config: "uvicorn.Config", sock: "socket.socket") -> int | None:
    """Run ``config.workers`` workers on ``sock`` until a stop signal; return it (``None``: they failed to start).

    uvicorn's ``Multiprocess`` replaces the handlers of the signals it
    knows (the stop signals among them) by its own queue; they are restored
    when it returns, so that raising the stop signal again reaches
    ``scowl.signals.signals_stop``.
    """
    from uvicorn.supervisors.multiprocess import SIGNALS, Multiprocess

    class Supervisor(Multiprocess):
        """uvicorn's supervisor, with every stop signal (SIGHUP too) ending it, the first one recorded."""

        stop_signal: int | None = None

        def stop(self, sig: int) -> None:
            """Record the first stop signal; the run loop then terminates the workers and waits for them."""
            if self.stop_signal is None:
                self.stop_signal = sig
            self.should_exit.set()

        def handle_int(self) -> None:
            self.stop(signal.SIGINT)

        def handle_term(self) -> None:
            self.stop(signal.SIGTERM)

        def handle_hup(self) -> None:  # uvicorn: restart the workers; scowl: a stop signal
            self.stop(signal.SIGHUP)

    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    try:
        supervisor = Supervisor(config, sockets=[sock])
        try:
            supervisor.run()
        except BaseException:  # never leave workers behind
            supervisor.terminate_all()
            supervisor.join_all()
            raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
    return supervisor.stop_signal
