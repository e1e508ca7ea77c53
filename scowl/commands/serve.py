"""``scowl serve DIR [--host H] [--port P] [--workers N] [--worker-policy POLICY]``: the event API (SPEC §4, §6).

One worker (the default): the app is built in this process and served by one
uvicorn server (``scowl.signals.GracefulServer``).

``--workers N`` (N > 1): this process starts (or connects to) the store once,
compiles the topology once (its errors are reported as with one worker),
binds the port (on Linux one ``SO_REUSEPORT`` socket per worker, so that
the kernel spreads the connections over the workers: :func:`listen_slots`),
and runs uvicorn's supervisor (``uvicorn.supervisors.Multiprocess``) over N
worker processes, worker ``i`` on socket ``i``. Each worker builds the app with :func:`worker_app`
(``serving.app.create_app_from_env`` on ``SCOWL_TOPOLOGY``, the topology's
absolute path, and ``SCOWL_REDIS_URL``, the store's URL, both passed through
the environment), so all workers read and write one store: a feature's
value does not depend on which worker answers. A worker that dies is
replaced by the supervisor, on the same socket.

``--worker-policy`` sets the workers' Linux scheduling policy
(``scowl.sched``): ``auto``, the default, is ``SCHED_BATCH`` when several
workers share this host's cores with the store (the embedded one, or any
store on a loopback address or a Unix socket), else the default
``SCHED_OTHER``. Two workers beside the store made 0.87x the events/s of
one at ``SCHED_OTHER`` and ~1.03x at ``SCHED_BATCH`` on 2 cores
(``scowl.sched``'s docstring has why and the numbers).

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

from scowl.common import UserError, bind_address, bind_failure, compile_topology, console, open_store, redact_url
from scowl import sched

if TYPE_CHECKING:
    import socket

    import uvicorn
    from fastapi import FastAPI

def _policy_choice(value: str) -> str:
    """``--worker-policy``'s value, lower-cased, checked against :data:`scowl.sched.WORKER_POLICIES`.

    Raises:
        typer.BadParameter: not one of them (click prints it as a usage error, exit 2).
    """
    if value.lower() not in sched.WORKER_POLICIES:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(map(repr, sched.WORKER_POLICIES))}.")
    return value.lower()


#: The ASGI factory each worker of ``--workers N`` runs (``uvicorn --factory`` import string).
WORKER_APP = "scowl.commands.serve:worker_app"


def serve(
    directory: Path = typer.Argument(..., metavar="DIR", help="Topology directory (its *.scowl files)."),
    host: str = typer.Option("127.0.0.1", metavar="HOST", help="Bind address."),
    port: int = typer.Option(8000, metavar="PORT", help="TCP port."),
    workers: int = typer.Option(1, min=1, metavar="N", help="Worker processes, all over the same store."),
    worker_policy: str = typer.Option(
        "auto", "--worker-policy", metavar="POLICY", callback=_policy_choice,
        help="Linux scheduling policy of the --workers processes, one of: auto (batch when they share this host with "
             "the store, else normal), normal, batch, or idle (fastest beside the store, but any other busy "
             "process on the host starves the workers)."),
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
    from serving.settings import Settings, SettingsError

    p = compile_topology(directory)
    try:
        settings = Settings.load()  # before the store: a bad SCOWL_* value is one line, not a traceback
    except SettingsError as e:
        raise UserError(str(e)) from None
    with open_store() as url:
        try:
            api = create_app(p, settings, redis_url=url)  # with workers too: an unsupported plan fails here
        except NotImplementedError as e:
            raise UserError(str(e)) from None
        unanswered = _store_note(url)  # a store that is down is not fatal: the API says so until it answers
        if workers == 1:
            from scowl.ui import install_ui

            ui = install_ui(api, directory)  # the explorer under /ui (SCOWL_UI, default on)
            freeze_heap()
            config = uvicorn.Config(api, host=host, port=port, log_level="warning")
            sock = bind_address(config)  # before "serving ...": a busy port is one error line
            sock.listen(config.backlog)  # connections made once "serving ..." is printed wait for the server
            bound = f"http://{host}:{sock.getsockname()[1]}"
            console.print(f"serving {directory} on {bound} (store {redact_url(url)})")
            if ui:
                console.print(f"feature explorer: {bound}/ui")
            if unanswered:
                console.print(unanswered, highlight=False)
            with sock:
                _starting(lambda: graceful_server_class()(config).run(sockets=[sock]), host, port)
            return
        del api
        policy = sched.worker_policy(worker_policy, workers, url)
        config = uvicorn.Config(WORKER_APP, factory=True, workers=workers, host=host, port=port,
                                log_level="warning")

        def serving(bound_port: int) -> None:
            console.print(f"serving {directory} on http://{host}:{bound_port} with {workers} workers "
                          f"({sched.SCHED_NAMES[policy]}; store {redact_url(url)})")
            if unanswered:
                console.print(unanswered, highlight=False)

        with _environment(SCOWL_TOPOLOGY=str(directory.resolve()), SCOWL_REDIS_URL=url):
            stop_signal = run_workers(config, policy, on_bound=serving)
        if stop_signal is None:  # the supervisor gave up: a worker failed before serving (uvicorn logged why)
            raise UserError(f"the API workers could not start on {host}:{port} (see the message above)")
        signal.raise_signal(stop_signal)  # now the handlers of scowl.signals.signals_stop: Stopped, clean-up


def _store_note(url: str) -> str | None:
    """The note ``scowl serve`` prints when its store does not answer ``PING`` at start (``None`` when it does).

    Serving starts anyway, as a service behind a load balancer should: each
    event is answered 503 ``store-unavailable`` and ``GET /ready`` 503 until
    the store answers (SPEC §4), so a wrong ``SCOWL_REDIS_URL`` shows at once
    instead of at the first event.
    """
    from scowl.common import store_error

    reason = store_error(url)
    if reason is None:
        return None
    given = " (is SCOWL_REDIS_URL right?)" if os.environ.get("SCOWL_REDIS_URL") else ""
    return (f"note: the store does not answer ({reason}): events are answered 503 store-unavailable, and "
            f"GET /ready 503, until it does{given}")


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


def run_workers(config: "uvicorn.Config", policy: str = "normal",
                on_bound: Callable[[int], None] | None = None) -> int | None:
    """Bind ``config``'s address and serve it with ``config.workers`` worker processes until a stop signal.

    The listening sockets come from :func:`listen_slots` (one per worker on
    Linux, so that the kernel spreads connections over the workers);
    :func:`_supervise` runs the workers on them, sharing one metrics
    directory (:func:`metrics_dir`: ``GET /metrics`` gives the service's
    totals on any worker); the sockets are closed on return. ``scowl serve
    --workers N`` calls this, and so does
    ``bench/serve.py`` for its rows with several workers, so that the
    benchmark measures what the command runs.

    Args:
        config: a ``uvicorn.Config`` with ``workers`` > 1 and an app import
            string (``factory=True`` for a factory), host and port.
        policy: the workers' scheduling policy, ``"normal"``, ``"batch"`` or
            ``"idle"`` (``scowl.sched.worker_policy``; each worker sets it on
            itself before it starts serving: ``scowl.uvworker.PolicyWorker``).
        on_bound: called with the bound port (the one chosen if
            ``config.port`` is 0) once the sockets listen, before any worker
            starts (``scowl serve`` prints its "serving ..." line there).

    Returns:
        The stop signal's number, or ``None`` if the workers failed to start
        (uvicorn logged why).

    Raises:
        UserError: the address cannot be bound (:func:`bind_address`).
    """
    slots = listen_slots(config)
    if on_bound is not None:
        on_bound(slots[0].getsockname()[1])
    try:
        with metrics_dir():
            return _supervise(config, slots, policy)
    finally:
        for sock in slots:
            sock.close()


@contextmanager
def metrics_dir() -> Iterator[Path]:
    """Within the block, ``PROMETHEUS_MULTIPROC_DIR`` names an empty directory the workers share.

    prometheus_client's multiprocess mode (``serving.metrics``): each worker
    writes its values to files there, and ``GET /metrics`` on any worker
    adds up all of them. A directory given in ``PROMETHEUS_MULTIPROC_DIR``
    is used and its ``*.db`` files (a previous run's) deleted first, as
    prometheus_client asks; otherwise a new temporary one is made and
    deleted on exit.

    Yields:
        The directory.
    """
    import shutil
    import tempfile

    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        for old in path.glob("*.db"):
            old.unlink(missing_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix="scowl-metrics-"))
    try:
        with _environment(PROMETHEUS_MULTIPROC_DIR=str(path)):
            yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def listen_slots(config: "uvicorn.Config") -> "list[socket.socket]":
    """Listening sockets for ``config.workers`` workers on ``config``'s host and port: one per worker on Linux.

    uvicorn's supervisor gives every worker one shared socket, and a worker
    woken by a new connection accepts every connection then waiting (uvloop
    accepts until the queue is empty). A client that opens its connections
    at once -- a load balancer's pool, ``wrk -c16`` -- ends with all or most
    of them on one worker, which then does all the work while the others
    idle: measured with ``bench/serve.py --workers 2``, 16 of 16 connections
    on one worker, the other below 3% of a core. Here, on Linux, each
    worker gets its own socket bound to the same address with
    ``SO_REUSEPORT``: the kernel picks the socket of each new connection by
    a hash of its addresses and ports, so connections spread over the
    workers, about evenly, whatever their timing (``socket(7)``; the ``reuseport`` of
    nginx's ``listen``). The sockets are listening before any worker starts
    (the kernel sends a connection to any socket of the group, and one
    queues until its worker accepts), and they stay open in this process:
    a worker that dies is replaced on the same socket, and the connections
    sent to it meanwhile wait for the new worker instead of being reset.

    First the address is bound once without ``SO_REUSEPORT``
    (:func:`bind_address`) and released: that bind fails if anything
    listens there, so a port already in use is an error as before, even if
    its listener allows ``SO_REUSEPORT`` (the kernel would let the group
    join it otherwise). Elsewhere than Linux, with a Unix socket (``uds``)
    or an inherited ``fd``, this returns that one socket, shared by all
    workers as uvicorn does.

    Args:
        config: the ``uvicorn.Config`` (``host``, ``port``: 0 picks a free
            port, ``workers``, ``backlog``).

    Returns:
        ``config.workers`` sockets (one elsewhere), bound and listening,
        inheritable.

    Raises:
        UserError: the address cannot be bound, or a socket of the group
            cannot (:func:`bind_address`'s message).
    """
    import socket

    first = bind_address(config)
    if not sys.platform.startswith("linux") or not hasattr(socket, "SO_REUSEPORT") or config.uds \
            or config.fd is not None or config.workers < 2:
        return [first]
    family, address = first.family, first.getsockname()[:2]  # the port chosen if config.port was 0
    first.close()
    slots: list[socket.socket] = []
    try:
        for _ in range(config.workers):
            sock = socket.socket(family=family)
            slots.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
            sock.listen(config.backlog)
            sock.set_inheritable(True)
    except OSError as e:
        for sock in slots:
            sock.close()
        raise UserError(bind_failure(config, e)) from None
    return slots


def _supervise(config: "uvicorn.Config", slots: "list[socket.socket]", policy: str = "normal") -> int | None:
    """Run ``config.workers`` workers on ``slots`` until a stop signal; return it (``None``: they failed to start).

    With one socket per worker (:func:`listen_slots`) worker ``i`` serves
    ``slots[i]``, and its replacement, if it dies, serves the same socket;
    with one socket, every worker serves it (uvicorn's own supervisor).

    uvicorn's ``Multiprocess`` replaces the handlers of the signals it
    knows (the stop signals among them) by its own queue; they are restored
    when it returns, so that raising the stop signal again reaches
    ``scowl.signals.signals_stop``. The number of workers is fixed:
    uvicorn's SIGTTIN and SIGTTOU (one worker more or less) are logged and
    ignored, since a worker more would share a socket and one less would
    leave its socket's connections waiting.
    """
    import logging

    from uvicorn.supervisors.multiprocess import SIGNALS, Multiprocess

    from scowl.uvworker import PolicyWorker

    log = logging.getLogger("uvicorn.error")

    class Supervisor(Multiprocess):
        """uvicorn's supervisor, with every stop signal (SIGHUP too) ending it, the first one recorded, and
        worker ``i`` on socket ``slots[i]`` (all of them if there is one)."""

        stop_signal: int | None = None

        def _spawn(self, idx: int):
            """A started worker process for place ``idx`` (on its socket)."""
            process = PolicyWorker(self.config, [slots[idx]] if len(slots) > 1 else slots, policy)
            process.start()
            return process

        def init_processes(self) -> None:
            self.processes = [self._spawn(i) for i in range(self.processes_num)]

        def keep_subprocess_alive(self) -> None:
            """Replace each dead or hung worker by a new one on the same socket (as uvicorn does, per place)."""
            from uvicorn.config import STARTUP_FAILURE

            for idx, process in enumerate(self.processes):
                if self.should_exit.is_set():
                    return
                if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                    continue
                process.kill()  # hung, or already dead
                process.join()
                if process.exitcode == STARTUP_FAILURE:  # the app cannot start: every restart would fail
                    log.error(f"Child process [{process.pid}] failed to start, stopping the parent process.")
                    self.should_exit.set()
                    return
                if self.should_exit.is_set():
                    return
                log.info(f"Child process [{process.pid}] died")
                self.processes[idx] = self._spawn(idx)

        def handle_ttin(self) -> None:
            log.warning("SIGTTIN ignored: scowl serve runs the --workers it was started with")

        def handle_ttou(self) -> None:
            log.warning("SIGTTOU ignored: scowl serve runs the --workers it was started with")

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
        supervisor = Supervisor(config, sockets=slots)
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
