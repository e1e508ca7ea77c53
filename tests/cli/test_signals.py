"""Stop signals end ``scowl`` commands cleanly: the embedded store is saved and stopped, never orphaned (SPEC §5.9).

Real processes and real signals: ``scowl serve`` (no ``SCOWL_REDIS_URL``, so
it starts its own ``valkey-server`` under a temporary ``SCOWL_HOME``) runs in
a process group of its own; the test finds the server's pid in ``/proc``,
sends the signal to the serve process only (as ``kill <pid>`` does), and
checks that serve exits with ``128 + n``, that no ``valkey-server`` is left,
and that what the API wrote was saved (a new server on the same home loads
it). ``scowl stream`` (until stopped) ends like Ctrl-C on SIGTERM. ``scowl backfill`` and ``scowl replay``
stopped mid-job cancel their Spark jobs and exit with scowl's one line.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import redis

from scowl.embedded import EmbeddedStore, free_port

ROOT = Path(__file__).resolve().parents[2]

TOPOLOGY = """
event pay
user := $.user as string
amount := $.amount as int
n := Count(by user last 1 hour)
total := Sum(amount by user)
users := CountUnique(user last 1 day)
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def proc_stat(pid: int) -> tuple[str, str, int, int] | None:
    """``(comm, state, ppid, pgrp)`` of a process from ``/proc/<pid>/stat``, or ``None`` if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = stat[stat.index("(") + 1:stat.rindex(")")]
    state, ppid, pgrp = stat[stat.rindex(")") + 2:].split()[:3]
    return comm, state, int(ppid), int(pgrp)


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is dead: it only waits to be reaped)."""
    st = proc_stat(pid)
    return st is not None and st[1] not in ("Z", "X")


def live_processes() -> dict[int, tuple[str, str, int, int]]:
    """Every live process: ``{pid: (comm, state, ppid, pgrp)}``."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = proc_stat(int(d.name))
            if st is not None and st[1] not in ("Z", "X"):
                out[int(d.name)] = st
    return out


def children(pid: int, comm: str) -> list[int]:
    """Pids of the live child processes of ``pid`` named ``comm``."""
    return [p for p, st in live_processes().items() if st[2] == pid and st[0] == comm]


def group(pgrp: int) -> list[tuple[int, str]]:
    """``(pid, comm)`` of the live processes of process group ``pgrp``."""
    return [(p, st[0]) for p, st in live_processes().items() if st[3] == pgrp]


def wait_for(predicate, timeout_s: float, what: str):
    """Poll ``predicate`` every 50 ms until it returns something truthy; return that, or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


class Command:
    """``python -m scowl ARGS`` in its own process group with a private ``SCOWL_HOME`` and no ``SCOWL_REDIS_URL``
    (unless ``env``, added to the environment, gives one).

    The whole group is killed (SIGKILL) on exit if still there, so a failed
    test leaves nothing behind.
    """

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None):
        self.home = tmp_path / "home"
        environ = {k: v for k, v in os.environ.items() if k != "SCOWL_REDIS_URL"}
        environ.update(SCOWL_HOME=str(self.home), COLUMNS="80", SCOWL_API_KEYS="", **(env or {}))
        env = environ
        self.out = tmp_path / "out.txt"
        self.err = tmp_path / "err.txt"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "scowl", *args], cwd=ROOT, env=env, stdout=out,
                                         stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)

    def valkey_pid(self) -> int:
        """The pid of the embedded ``valkey-server`` this command started (waits for it)."""
        found = wait_for(lambda: children(self.proc.pid, "valkey-server") or self.proc.poll() is not None, 60,
                         "the embedded valkey-server")
        assert self.proc.poll() is None, self.err.read_text()
        assert len(found) == 1, found
        return found[0]

    def store_url(self) -> str:
        """The embedded store's URL, from its port file."""
        return f"redis://127.0.0.1:{(self.home / 'store' / 'port').read_text().strip()}/0"

    def stop(self, sig: int, timeout_s: float = 60) -> int:
        """Send ``sig`` to the command's process (not its group) and return its exit code."""
        os.kill(self.proc.pid, sig)
        return self.proc.wait(timeout=timeout_s)

    def __enter__(self) -> "Command":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def serve(tmp_path: Path) -> tuple[Command, str]:
    """Start ``scowl serve`` on a free port; return it and its base URL once ``GET /health`` answers."""
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    port = free_port()
    cmd = Command(tmp_path, "serve", str(topo), "--port", str(port))
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert cmd.proc.poll() is None, cmd.err.read_text()
        try:
            return httpx.get(f"{base}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(healthy, 60, "GET /health")
    return cmd, base


def events(n: int) -> list[dict]:
    """``n`` pay events over 50 users."""
    return [{"_type": "pay", "user": f"u{i % 50}", "amount": i} for i in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_serve_saves_and_stops_the_embedded_store_on_a_stop_signal(tmp_path, sig):
    """``kill -TERM|-INT|-HUP <serve pid>``: serve exits 128+n, its valkey-server is gone, the data are on disk."""
    cmd, base = serve(tmp_path)
    with cmd:
        valkey = cmd.valkey_pid()
        r = httpx.post(f"{base}/batch", json=events(200), timeout=60)
        assert r.status_code == 200, r.text
        stored = redis.Redis.from_url(cmd.store_url()).dbsize()
        assert stored >= 100  # the tiles of 50 users for 2 keyed states, and more
        assert cmd.stop(sig) == 128 + sig
        assert cmd.err.read_text().endswith(f"scowl: stopped by {sig.name}\n")
        assert "Traceback" not in cmd.err.read_text()
        assert not running(valkey), proc_stat(valkey)
        assert group(cmd.proc.pid) == []
        assert not (cmd.home / "store" / "port").exists()
    again = EmbeddedStore(cmd.home)  # a new server on the same home loads what serve's server saved
    try:
        assert redis.Redis.from_url(again.start()).dbsize() == stored
    finally:
        again.stop()


@pytest.mark.slow
def test_serve_answers_the_request_in_flight_before_stopping(tmp_path):
    """SIGTERM while a large /batch is being processed: the batch completes with 200, then the store stops."""
    cmd, base = serve(tmp_path)
    n = 20_000
    with cmd:
        valkey = cmd.valkey_pid()
        store = redis.Redis.from_url(cmd.store_url())
        result: dict = {}

        def post() -> None:
            result["response"] = httpx.post(f"{base}/batch", json=events(n), timeout=300)

        t = threading.Thread(target=post)
        t.start()
        wait_for(lambda: store.dbsize() > 0, 60, "the batch's first writes")
        assert t.is_alive(), "the batch finished before the signal: make it larger"
        os.kill(cmd.proc.pid, signal.SIGTERM)
        t.join(timeout=300)
        response = result["response"]
        assert response.status_code == 200, response.text
        body = response.json()
        assert len(body) == n and body[-1]["features"]["n"] == n // 50  # u49's count includes the last event
        assert cmd.proc.wait(timeout=60) == 128 + signal.SIGTERM
        assert not running(valkey)
        with pytest.raises(httpx.ConnectError):  # no longer accepting
            httpx.get(f"{base}/health", timeout=1)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stream_until_stopped_ends_like_ctrl_c_on_sigterm(tmp_path, sig):
    """``scowl stream --source dir:…`` (runs until stopped): SIGTERM or Ctrl-C during the query stops it,
    prints the summary, exits 0, and saves and stops the embedded store; no process of the job is left, and
    no traceback is printed (Ctrl-C used to reach pyspark's handler, which called the JVM on the connection
    the main thread was waiting on: "reentrant call")."""
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(f'{{"_type": "pay", "_time": {1_700_000_000_000 + i}, "user": "u{i % 3}", '
                                         f'"amount": {i}}}\n' for i in range(30)))
    ck = tmp_path / "ck"
    cmd = Command(tmp_path, "stream", str(topo), "--source", f"dir:{src}", "--checkpoint", str(ck), "--master",
                  "local[1]")
    with cmd:
        valkey = cmd.valkey_pid()
        # after the first micro-batch the job waits for new files in the query
        wait_for(lambda: "batch 0: 30 events" in cmd.out.read_text() or cmd.proc.poll() is not None, 300,
                 "the first micro-batch")
        assert cmd.proc.poll() is None, cmd.err.read_text()
        stored = redis.Redis.from_url(cmd.store_url()).dbsize()
        assert stored > 0
        assert cmd.stop(sig, timeout_s=120) == 0, cmd.err.read_text()
        assert "streamed 1 batch: 30 events merged, 0 late and 0 invalid set aside" in cmd.out.read_text()
        assert "Traceback" not in cmd.err.read_text(), cmd.err.read_text()[-3000:]
        assert not running(valkey)
        assert not (cmd.home / "store" / "port").exists()
        wait_for(lambda: not group(cmd.proc.pid), 60, "Spark's JVM (and every other process of the job) to exit")
    again = EmbeddedStore(cmd.home)
    try:
        assert redis.Redis.from_url(again.start()).dbsize() == stored
    finally:
        again.stop()


def test_serve_on_a_busy_port_is_a_user_error_and_stops_the_store(tmp_path):
    """The port is taken: one error line, no "serving ..." line, exit 1; its valkey-server is gone."""
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cmd = Command(tmp_path, "serve", str(topo), "--port", str(port))
        with cmd:
            assert cmd.proc.wait(timeout=60) == 1
            err = cmd.err.read_text()
            assert "serving" not in cmd.out.read_text()
            assert err == (f"error: cannot listen on 127.0.0.1:{port}: address already in use (another process "
                           "listens there; give another --port)\n"), err
            assert group(cmd.proc.pid) == []
            assert not (cmd.home / "store" / "port").exists()  # the server it started was stopped
            assert (cmd.home / "store" / "dump.rdb").exists()  # ... and saved


def pay_job(tmp_path: Path, n: int, users: int) -> tuple[Path, Path]:
    """A topology directory of :data:`TOPOLOGY` and a JSONL file of ``n`` pay events ~1 s apart over ``users`` users."""
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    events = tmp_path / "events.jsonl"
    events.write_text("".join(f'{{"_type": "pay", "_time": {1_700_000_000_000 + 997 * i}, "user": "u{i % users}", '
                              f'"amount": {i}}}\n' for i in range(n)))
    return topo, events


def test_backfill_stopped_mid_job_stops_the_embedded_store(tmp_path):
    """``scowl backfill`` (a Spark job, embedded store): SIGTERM while Spark starts exits 143 and leaves no
    ``valkey-server`` and no process of the job. Spark's JVM included: the signal is held back until the
    session is up (``scowl.signals.stop_deferred``); before, Python exited mid-launch and the JVM lived on."""
    topo, events = pay_job(tmp_path, 20_000, 50)
    cmd = Command(tmp_path, "backfill", str(topo), "--events", str(events), "--master", "local[1]")
    with cmd:
        valkey = cmd.valkey_pid()
        # Spark is up once the driver has a java child; stop it while it works
        wait_for(lambda: children(cmd.proc.pid, "java") or cmd.proc.poll() is not None, 120, "Spark's JVM")
        assert cmd.proc.poll() is None, cmd.err.read_text()
        time.sleep(1.0)  # pyspark is launching its JVM: a signal here used to orphan it
        assert cmd.stop(signal.SIGTERM, timeout_s=120) == 128 + signal.SIGTERM, cmd.err.read_text()
        assert "backfill wrote" not in cmd.out.read_text()
        assert not running(valkey)
        assert not (cmd.home / "store" / "port").exists()
        wait_for(lambda: not group(cmd.proc.pid), 60, "Spark's JVM (and every other process of the job) to exit")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_replay_stopped_mid_job_cancels_its_jobs_and_exits_quietly(tmp_path, sig):
    """``scowl replay`` stopped while its Spark jobs run: exit ``128 + n`` with scowl's one line, no traceback,
    no process left. Ctrl-C used to reach pyspark's own SIGINT handler, which called the JVM on the
    connection the main thread was waiting on: "reentrant call inside BufferedReader" and a screen of
    tracebacks; SIGTERM waited for the running job, up to the rest of the replay
    (``writer.session.stop_spark_jobs`` now cancels the jobs first, ``scowl.common.start_spark`` keeps
    scowl's SIGINT handler)."""
    topo, events = pay_job(tmp_path, 150_000, 500)
    cmd = Command(tmp_path, "replay", str(topo), "--events", str(events), "--out", str(tmp_path / "out"),
                  "--master", "local[1]")
    with cmd:
        wait_for(lambda: children(cmd.proc.pid, "java") or cmd.proc.poll() is not None, 120, "Spark's JVM")
        assert cmd.proc.poll() is None, cmd.err.read_text()
        time.sleep(8.0)  # the session is up and the replay's jobs run (the whole replay takes far longer)
        assert cmd.proc.poll() is None, cmd.err.read_text()
        assert cmd.stop(sig, timeout_s=120) == 128 + sig
        err = cmd.err.read_text()
        assert "Traceback" not in err, err[-3000:]
        assert err.splitlines()[-1] == f"scowl: stopped by {signal.Signals(sig).name}", err[-3000:]
        assert "rows" not in cmd.out.read_text()  # no dataset reported written
        wait_for(lambda: not group(cmd.proc.pid), 60, "Spark's JVM (and every other process of the job) to exit")


REQUEST_STOP_PROBE = """
import os, signal
from scowl.signals import Stopped, add_stop_hook, signals_request_stop
before = signal.getsignal(signal.SIGINT)  # default_int_handler, or SIG_IGN when started in a shell's background
add_stop_hook(lambda signum, frame: print("HOOK", signum, flush=True))
with signals_request_stop() as stop:
    os.kill(os.getpid(), signal.SIGTERM)
    print("SET", stop.is_set(), flush=True)
    try:
        os.kill(os.getpid(), signal.SIGINT)
        print("NOT RAISED", flush=True)
    except Stopped as e:
        print("RAISED", e.signum, flush=True)
    os.kill(os.getpid(), signal.SIGHUP)  # a third: ignored
    print("THIRD IGNORED", flush=True)
print("RESTORED", signal.getsignal(signal.SIGINT) is before, flush=True)
"""


def test_request_stop_sets_the_event_then_a_second_signal_forces_the_stop():
    """``signals_request_stop`` (an until-stopped ``scowl stream``): the first stop signal only sets the event
    (the query is stopped cleanly); a second one, while that stop is under way, runs the stop hooks (cancel the
    Spark jobs) and raises ``Stopped``, as a second Ctrl-C forces uvicorn's shutdown; later ones are ignored."""
    out = subprocess.run([sys.executable, "-c", REQUEST_STOP_PROBE], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["SET True", f"HOOK {int(signal.SIGINT)}", f"RAISED {int(signal.SIGINT)}",
                                       "THIRD IGNORED", "RESTORED True"]
