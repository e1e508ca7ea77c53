"""Stop signals (SIGINT, SIGTERM, SIGHUP) end every ``scowl`` command cleanly.

``kill <pid>``, Ctrl-C and a closed terminal must not leave the embedded
store (``scowl.embedded``) running without its owner (SPEC §5.9). While
:func:`signals_stop` is active, the first stop signal raises :class:`Stopped`
in the main thread; it unwinds the command like any exception, so the
``finally`` blocks run (``scowl.common.open_store`` saves and stops the
store), and ``scowl.cli.main`` exits with ``128 + signal number`` (130 for
SIGINT, 143 for SIGTERM, 129 for SIGHUP), as a shell reports a process
ended by that signal. Later stop signals are ignored so that the clean-up
itself is not cut short (``kill -9`` still ends everything; the embedded
server then dies with its parent, see ``scowl.embedded``).

``scowl serve`` lets uvicorn handle the signal first (:class:`GracefulServer`):
it stops accepting connections, finishes the requests in flight, and only
then is :class:`Stopped` raised.

Starting Spark in the main thread installs pyspark's own SIGINT handler
(cancel every job from the main thread, raise ``KeyboardInterrupt``). The
Spark commands start it from a thread instead (``scowl.common.start_spark``),
so this module's handler stays and Ctrl-C stops them as SIGTERM does, and
every stop signal first cancels their Spark jobs (:func:`add_stop_hook`,
``writer.session.stop_spark_jobs``): the signal usually lands while the
main thread waits inside a py4j call for a job, and pyspark's handler,
calling the JVM on that same connection, failed with a screen of
tracebacks ("reentrant call"), where a SIGTERM waited for the job to end
(up to the rest of a replay). ``scowl stream`` without ``--available-now``
runs until stopped, so there every stop signal ends it normally
(:func:`signals_request_stop`): the query stops, the summary is printed,
exit 0.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Callable, ContextManager, Iterator

#: The signals that stop a command.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal arrived: unwinds the command (a ``BaseException``, so ``except Exception`` lets it pass).

    Args:
        signum: the signal number.

    Attributes:
        signum: the signal number.
        exit_code: ``128 + signum``, the process's exit code.
    """

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.exit_code = 128 + signum

    @property
    def name(self) -> str:
        """The signal's name, e.g. ``"SIGTERM"``."""
        return signal.Signals(self.signum).name


#: What the first stop signal runs before it raises (:func:`add_stop_hook`).
_hooks: list[Callable[[int, object], None]] = []


def add_stop_hook(hook: Callable[[int, object], None]) -> None:
    """Have the first stop signal call ``hook(signum, frame)`` in the main thread before it raises :class:`Stopped`.

    For work the unwinding must not wait for: a Spark command cancels its
    running jobs here (``writer.session.stop_spark_jobs``), from a thread,
    rather than in its ``finally`` blocks, which run only after the main
    thread's interrupted call returned. ``frame`` is the frame the signal
    interrupted. A hook must return quickly and not raise (an exception
    from it is dropped). Hooks stay for the life of the process (a
    command runs once per process); adding the same hook again changes
    nothing.

    Args:
        hook: a callable ``(signum, frame) -> None``.
    """
    if hook not in _hooks:
        _hooks.append(hook)


def _run_hooks(signum: int, frame) -> None:
    """Call every :func:`add_stop_hook` hook, in order, dropping their exceptions."""
    for hook in list(_hooks):
        try:
            hook(signum, frame)
        except Exception:  # noqa: BLE001 - a hook must not keep the command from stopping
            pass


#: :func:`stop_deferred` nesting depth and the first stop signal that arrived meanwhile.
_deferral: dict[str, int | None] = {"depth": 0, "pending": None}


@contextmanager
def stop_deferred() -> Iterator[None]:
    """Within the block, a stop signal is held back and delivered again when the block ends.

    For steps that must not be cut in half: starting Spark. A stop signal
    that lands while pyspark launches its JVM makes Python exit before the
    gateway connects, and the JVM then lives on, orphaned (seen with
    ``kill`` one second into ``scowl backfill``). Held back, the signal is
    re-sent to this process once the session is up; the command then
    unwinds as usual, and the JVM exits with its driver. Nests; only the
    outermost block re-sends.

    Yields:
        Nothing.
    """
    _deferral["depth"] += 1
    try:
        yield
    finally:
        _deferral["depth"] -= 1
        pending = _deferral["pending"]
        if _deferral["depth"] == 0 and pending is not None:
            _deferral["pending"] = None
            os.kill(os.getpid(), pending)


@contextmanager
def _first_signal_raises(signals: tuple[int, ...], make: Callable[[int], BaseException]) -> Iterator[None]:
    """Within the block, the first of ``signals`` raises ``make(signum)`` in the main thread.

    Later ones are ignored until the block exits; the previous handlers are
    restored on exit. Outside the main thread (where Python cannot install
    handlers) the block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = False

    def handler(signum: int, frame) -> None:
        nonlocal stopping
        if stopping:
            return
        if _deferral["depth"]:
            _deferral["pending"] = _deferral["pending"] or signum
            return
        stopping = True
        _run_hooks(signum, frame)
        raise make(signum)

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)


def signals_stop() -> ContextManager[None]:
    """Within the block, the first stop signal (:data:`STOP_SIGNALS`) raises :class:`Stopped` in the main thread.

    Later stop signals are ignored until the block exits; the previous
    handlers are restored on exit. Outside the main thread (where Python
    cannot install handlers) the block runs unchanged.

    Returns:
        A context manager.
    """
    return _first_signal_raises(tuple(STOP_SIGNALS), Stopped)


@contextmanager
def signals_request_stop(signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[threading.Event]:
    """Within the block, the first of ``signals`` (default: every stop signal) sets the yielded event; a second one raises.

    For a job whose normal end is an interruption (``scowl stream`` without
    ``--available-now``): ``writer.stream.run_stream`` polls the event and
    stops its query. Raising from the handler instead would interrupt
    whatever py4j call the main thread is in, and the query would have to be
    stopped over a connection left mid-call. A second signal, while that
    stop is under way (a batch that does not end, say), forces it as a
    second Ctrl-C forces uvicorn's shutdown: the :func:`add_stop_hook` hooks
    run and :class:`Stopped` is raised, so the command unwinds (its store
    saved and stopped) and exits ``128 + n``. The previous handlers are
    restored on exit. Outside the main thread the event is never set by a
    signal.

    Yields:
        A :class:`threading.Event`, set by the first of ``signals``.
    """
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    forced = False

    def handler(signum: int, frame) -> None:
        nonlocal forced
        if not stop.is_set():
            stop.set()
            return
        if forced:
            return
        forced = True
        _run_hooks(signum, frame)
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield stop
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)


def graceful_server_class():
    """Return :class:`GracefulServer`, a ``uvicorn.Server`` (imported lazily: uvicorn is only needed by serve)."""
    import uvicorn

    class GracefulServer(uvicorn.Server):
        """A ``uvicorn.Server`` that shuts down gracefully on every stop signal, SIGHUP included.

        On SIGINT, SIGTERM or SIGHUP it stops accepting connections and
        finishes the requests in flight (uvicorn's graceful shutdown; a
        second SIGINT forces it); after :meth:`run` returns, the first
        signal it caught is in :attr:`stop_signal` and is raised again, so
        the handlers of :func:`signals_stop` turn it into :class:`Stopped`.

        Attributes:
            stop_signal: the first stop signal caught, or ``None``.
        """

        stop_signal: int | None = None

        def handle_exit(self, sig: int, frame) -> None:
            """Record the first stop signal and start uvicorn's graceful shutdown."""
            if self.stop_signal is None:
                self.stop_signal = sig
            super().handle_exit(sig, frame)

        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            """While serving, every stop signal starts the graceful shutdown; the first is raised again after it."""
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
            try:
                yield
            finally:
                for sig, h in previous.items():
                    signal.signal(sig, h)
            if self.stop_signal is not None:
                signal.raise_signal(self.stop_signal)

    return GracefulServer
