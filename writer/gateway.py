"""Starting Spark's JVM for a command: its output relayed, its start-up failures made an error a user can read.

PySpark starts the driver JVM (``bin/spark-submit pyspark-shell``) with
this process's standard output and error, so three things reached users
unfiltered (seen 2026-12-05, pyspark 4.3 on Java 17):

* every command's output opened with the JVM's ``WARNING: Using incubator
  modules: jdk.incubator.vector`` (Spark's launcher adds the module to
  every command line, ``JavaModuleOptions``; no JVM option silences it);
* a JVM that could not start (no Java at ``JAVA_HOME``, a heap larger than
  the host allows, a bad option in ``SCOWL_JAVA_OPTIONS``) printed its
  reason, then PySpark raised ``PySparkRuntimeError: [JAVA_GATEWAY_EXITED]``
  and the command ended in a traceback;
* a JVM that outlives its command (it writes the class-data archive after a
  first command exits, :mod:`writer.classdata`) held the command's output
  open, so ``scowl replay .. | tee log`` ended only when the JVM did.

:func:`launch` starts the same JVM through PySpark's own
``launch_gateway`` with pipes for both streams and relays them
(:class:`Relay`: line by line to this process's file descriptors 1 and 2,
the incubator warning dropped), and raises :class:`SparkStartError` with
the JVM's last lines of output when it exits before it is ready (what it
writes before then is held back, so that a failed start is told once).
Once this process exits nothing reads the pipes, and a JVM still running
gets ``EPIPE`` for what it writes (HotSpot ignores ``SIGPIPE``).
"""

from __future__ import annotations

import os
import threading

__all__ = ["DROPPED_LINES", "Relay", "SparkStartError", "StartOutput", "launch"]

#: Beginnings of JVM output lines that are not relayed (module docstring).
DROPPED_LINES: tuple[bytes, ...] = (b"WARNING: Using incubator modules:",)

#: Lines of the JVM's start-up output (both streams) quoted in :class:`SparkStartError`'s message.
TAIL_LINES = 12

#: Lines of start-up output held back at most (:class:`StartOutput`).
HELD_LINES = 1000

#: Seconds :func:`launch` waits for the relays to reach the end of a failed JVM's output.
DRAIN_TIMEOUT_S = 2.0


class SparkStartError(RuntimeError):
    """Spark's JVM exited before it was ready (a user-facing failure: the CLI prints it, exit 1).

    Its message says so, quotes the JVM's last lines of output (both
    streams, :data:`TAIL_LINES`) and names what usually causes it.
    """


class StartOutput:
    """What the JVM writes before it is ready, held back so that a failed start is told once.

    While held, the :class:`Relay` threads append each line with its target
    descriptor here instead of writing it; :meth:`go_live` writes them, in
    the order they were read, and lets later lines through; a failed start
    quotes :meth:`last` in its error instead. Past :data:`HELD_LINES` lines
    (a JVM told to be verbose) the lines go through at once.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: list[tuple[int, bytes]] = []
        self.live = False

    def go_live(self) -> None:
        """Write the held lines and let later lines through."""
        with self.lock:
            for fd, line in self.held:
                _write(fd, line)
            self.held.clear()
            self.live = True

    def last(self, n: int) -> list[bytes]:
        """The last ``n`` held lines (both streams, in the order read)."""
        with self.lock:
            return [line for _, line in self.held[-n:]]


class Relay:
    """Copy one of the JVM's output pipes to a file descriptor of this process, in a daemon thread.

    Lines starting with one of :data:`DROPPED_LINES` are left out; until the
    JVM is ready the lines are held in ``start`` (:class:`StartOutput`). If
    the target cannot be written (closed, a full disk), the pipe is still
    drained to its end, so the JVM never blocks on a full pipe. The pipe is
    read with ``os.read`` (no buffered file object, whose lock a daemon
    thread blocked in a read would hold while the interpreter shuts down).

    Args:
        fd_in: the pipe's read end (a file descriptor; closed at its end).
        fd_out: the descriptor to write to (1 or 2).
        start: the start-up output both relays of one JVM share.
    """

    def __init__(self, fd_in: int, fd_out: int, start: StartOutput) -> None:
        self._in = fd_in
        self._out = fd_out
        self._start = start
        self._writable = True
        self._thread = threading.Thread(target=self._run, name=f"scowl-jvm-output-{fd_out}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rest = b""
        try:
            while True:
                chunk = os.read(self._in, 65536)
                if not chunk:
                    break
                *lines, rest = (rest + chunk).split(b"\n")
                for line in lines:
                    self._emit(line + b"\n")
            if rest:
                self._emit(rest)
        except OSError:  # the pipe failed under us: nothing left to relay
            pass
        finally:
            try:
                os.close(self._in)
            except OSError:
                pass

    def _emit(self, line: bytes) -> None:
        if line.startswith(DROPPED_LINES):
            return
        start = self._start
        if not start.live:
            with start.lock:
                if not start.live:
                    start.held.append((self._out, line))
                    if len(start.held) <= HELD_LINES:
                        return
                    for fd, held in start.held[:-TAIL_LINES]:  # verbose: through, keeping a tail to quote
                        self._writable = _write(fd, held) and self._writable
                    del start.held[:-TAIL_LINES]
                    return
        if self._writable:
            self._writable = _write(self._out, line)  # once it fails: keep draining, write no more

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds (float) for the pipe's end."""
        self._thread.join(timeout)


def _write(fd: int, data: bytes) -> bool:
    """Write all of ``data`` to ``fd``; ``False`` if it cannot be written."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        return True
    except OSError:
        return False


def launch(conf) -> object:
    """Start Spark's driver JVM with ``conf`` as PySpark does, its output relayed (module docstring).

    The JVM's standard output and error are the write ends of two pipes
    made here, read from the start by two :class:`Relay` threads, so
    nothing the JVM writes can fill a pipe. What it writes before it is
    ready is written once it is (:class:`StartOutput`), or quoted in the
    error if it never is (HotSpot writes its own start-up errors to
    standard output, the launcher script to standard error).

    Args:
        conf: the ``pyspark.SparkConf`` the session is built with (its
            settings go to ``spark-submit`` as ``--conf``, as
            ``SparkContext`` passes them).

    Returns:
        PySpark's gateway (``launch_gateway``'s result; its ``proc`` is the
        JVM's ``Popen``), to be set as ``SparkContext._gateway``.

    Raises:
        SparkStartError: the JVM exited before it was ready, or
            ``spark-submit`` could not be run.
    """
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    start = StartOutput()
    relays = [Relay(out_r, 1, start), Relay(err_r, 2, start)]
    try:
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": out_w, "stderr": err_w})
        finally:  # the JVM holds its own copies: the pipes end when it and its children do
            os.close(out_w)
            os.close(err_w)
    except (PySparkRuntimeError, OSError) as e:
        for r in relays:
            r.join(DRAIN_TIMEOUT_S)
        raise SparkStartError(_message(start.last(TAIL_LINES), e)) from None
    start.go_live()
    return gateway


def _message(tail, error: BaseException) -> str:
    """:class:`SparkStartError`'s text: what failed, the JVM's last lines, what to check."""
    lines = [b.decode("utf-8", "replace").rstrip() for b in tail]
    lines = [x for x in lines if x.strip()]
    said = ("; the JVM said:\n  " + "\n  ".join(lines)) if lines else f" ({error})"
    return (f"Spark could not start: its JVM exited before it was ready{said}\n"
            "Check that Java 17 or newer is installed (JAVA_HOME, or java on PATH), and the JVM settings: "
            "SCOWL_JAVA_OPTIONS, SCOWL_DRIVER_MEMORY (default 4g).")
