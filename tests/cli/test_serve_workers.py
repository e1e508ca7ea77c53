"""``scowl serve DIR --workers N``: N uvicorn worker processes over one store, stopped gracefully.

Real processes, real signals, the real embedded ``valkey-server`` (no
``SCOWL_REDIS_URL``; a private ``SCOWL_HOME``), as in ``test_signals``. Which
worker answers a request is decided, not left to the kernel: the test
stops the other worker (SIGSTOP) while it opens a connection, so only the
chosen one can accept it, finds the connection among the chosen worker's
sockets in ``/proc``, lets the other continue (SIGCONT) and sends the
request on that connection. Each worker listens on its own socket
(``scowl.commands.serve.listen_slots``), so the kernel may queue the
connection for the stopped one: then it is closed and another is tried.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from scowl.embedded import free_port
from tests.cli.test_signals import ROOT, Command, group, live_processes, proc_stat, running, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

#: A departure of examples/flights; ``departures_1h`` counts by origin, ``miles_tail_30d`` sums distance by tailnum.
DISTANCE = 2475


def departure(k: int) -> dict:
    """The ``k``-th departure of one aircraft from JFK, ``k`` minutes after 10:00 on 2013-01-01."""
    return {"_type": "departure", "_time": f"2013-01-01T10:{k:02d}:00Z", "carrier": "UA", "flight": k,
            "tailnum": "N1", "origin": "JFK", "dest": "LAX", "dep_delay": 5.0, "distance": DISTANCE}


def workers(pid: int) -> list[int]:
    """Pids of the live uvicorn workers of ``pid`` (its ``multiprocessing.spawn`` children)."""
    out = []
    for p, st in live_processes().items():
        if st[2] != pid:
            continue
        try:
            if b"multiprocessing.spawn" in Path(f"/proc/{p}/cmdline").read_bytes():
                out.append(p)
        except OSError:
            pass
    return sorted(out)


def environ(pid: int) -> dict[str, str]:
    """The environment process ``pid`` started with (``/proc/PID/environ``)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.decode().partition("=")[::2] for item in raw.split(b"\0") if b"=" in item)


def policies(pid: int) -> set[int]:
    """The scheduling policies (``os.SCHED_*``) of the threads of process ``pid``."""
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out.add(os.sched_getscheduler(int(task.name)))
        except OSError:  # the thread ended
            pass
    return out


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets ``pid`` has open."""
    out = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return out
    for fd in fds:
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(int(link[len("socket:["):-1]))
    return out


def tcp() -> list[tuple[int, int, int, int]]:
    """Established IPv4 TCP sockets of this network namespace: ``(local port, remote port, receive queue, inode)``."""
    rows = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[3] == "01":  # TCP_ESTABLISHED
            rows.append((int(f[1].split(":")[1], 16), int(f[2].split(":")[1], 16), int(f[4].split(":")[1], 16),
                         int(f[9])))
    return rows


def owner(server_port: int, client_port: int, pids: list[int]) -> int | None:
    """The pid among ``pids`` that accepted the connection from ``client_port`` to ``server_port``, if any."""
    inodes = {row[3] for row in tcp() if row[0] == server_port and row[1] == client_port}
    for pid in pids:
        if inodes & socket_inodes(pid):
            return pid
    return None


class WorkerGone(Exception):
    """The worker to connect to exited (uvicorn's supervisor replaced it: see :func:`connect_to`)."""


def _signal(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid``; nothing if it has exited (a worker the supervisor replaced)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def connect_to(worker: int, others: list[int], port: int) -> http.client.HTTPConnection:
    """An HTTP connection accepted by ``worker``: the others are stopped while it is opened (each time < 3 s,
    well within uvicorn's 5 s health check); retried until ``worker`` accepts (the workers may still be starting:
    the port listens once the first one is up; the kernel may queue the connection on a stopped worker's socket).
    Between tries the others run for 0.2 s: the supervisor's health check pings every worker, and one stopped
    again at once would not answer in time and be replaced. On a loaded machine a worker may miss a health
    check all the same (a ``SCHED_IDLE`` worker runs only when nothing else wants the core) and be replaced:
    a replaced other is skipped, and a replaced ``worker`` raises :class:`WorkerGone` for the caller to
    connect to its successor."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not Path(f"/proc/{worker}").exists():
            raise WorkerGone(worker)
        for p in others:
            _signal(p, signal.SIGSTOP)
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        except ConnectionRefusedError:  # no worker has started listening yet
            sock = None
        try:
            client_port = sock.getsockname()[1] if sock else None
            until = time.monotonic() + 2.5
            while sock and time.monotonic() < until and owner(port, client_port, [worker]) is None:
                time.sleep(0.02)
        finally:
            for p in others:
                _signal(p, signal.SIGCONT)
        if sock is not None and owner(port, client_port, [worker]) == worker:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.sock = sock
            return conn
        if sock is not None:
            sock.close()
        time.sleep(0.2)
    pytest.fail(f"worker {worker} accepted no connection in 60 s")


def post(conn: http.client.HTTPConnection, event: dict) -> dict:
    """``POST /event`` on ``conn``; the answer's JSON (status 200 asserted)."""
    conn.request("POST", "/event", body=json.dumps(event), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    body = r.read()
    assert r.status == 200, body
    return json.loads(body)


@pytest.mark.slow
def test_workers_share_one_store_and_stop_gracefully(tmp_path, monkeypatch):
    """Two workers answer alternately, each on its own connection, and count in one store: the k-th
    departure's count is k whichever worker answers. SIGTERM to serve while a request is in flight (the store
    is paused under it): the other worker exits, the request is answered, then serve saves and stops the
    store and exits 143; no worker, no ``valkey-server``, no other process of serve's is left."""
    monkeypatch.setenv("SCOWL_STORE_TIMEOUT_S", "60")  # the store is paused (SIGSTOP) under a request below
    port = free_port()
    cmd = Command(tmp_path, "serve", "examples/flights", "--workers", "2", "--port", str(port))
    with cmd:
        valkey = cmd.valkey_pid()

        def two_workers() -> list[int] | bool:
            found = workers(cmd.proc.pid)
            return found if len(found) == 2 else cmd.proc.poll() is not None

        pids = wait_for(two_workers, 60, "two workers")
        assert cmd.proc.poll() is None, cmd.err.read_text()
        assert cmd.out.read_text() == (f"serving examples/flights on http://127.0.0.1:{port} with 2 workers "
                                       f"(SCHED_BATCH; store {cmd.store_url()})\n")
        # --worker-policy auto beside the embedded store: every thread of each worker at SCHED_BATCH (set by
        # each worker as it starts, before it serves)
        wait_for(lambda: all(policies(p) == {os.SCHED_BATCH} for p in pids), 60, "the workers at SCHED_BATCH")
        served = []
        for k in range(1, 7):
            w = pids[k % 2]
            conn = connect_to(w, [p for p in pids if p != w], port)
            feats = post(conn, departure(k))["features"]
            conn.close()
            served.append(w)
            assert (feats["departures_1h"], feats["miles_tail_30d"]) == (k, k * DISTANCE), (k, w, feats)
        assert set(served) == set(pids)
        assert workers(cmd.proc.pid) == pids  # none was replaced
        # GET /metrics gives the service's totals on either worker (a shared multiprocess directory); its
        # build info names the plan as `scowl plan DIR --json | sha256sum` does
        shown = subprocess.run([sys.executable, "-m", "scowl", "plan", "examples/flights", "--json"],
                               capture_output=True, cwd=ROOT, timeout=120, check=True).stdout
        digest = hashlib.sha256(shown).hexdigest()[:16]
        for w in pids:
            conn = connect_to(w, [p for p in pids if p != w], port)
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
            conn.close()
            assert 'scowl_events_total{event_type="departure"} 6.0' in text.splitlines(), (w, text)
            # both workers serve one plan: one build-info sample (the workers' maximum), not one per worker
            info = [line for line in text.splitlines() if line.startswith("scowl_build_info{")]
            assert len(info) == 1 and info[0].endswith(" 1.0") and f'plan="{digest}"' in info[0], (w, info, digest)
        metrics = {environ(w).get("PROMETHEUS_MULTIPROC_DIR") for w in pids}
        assert len(metrics) == 1 and None not in metrics, metrics
        metrics_dir = Path(metrics.pop())
        assert metrics_dir.is_dir()

        # a request in flight at SIGTERM: worker w has sent its script call to the paused store
        w, other = pids
        conn = connect_to(w, [other], port)
        valkey_port = int((cmd.home / "store" / "port").read_text())
        result: dict = {}
        os.kill(valkey, signal.SIGSTOP)
        try:
            t = threading.Thread(target=lambda: result.update(answer=post(conn, departure(7))))
            t.start()
            wait_for(lambda: any(row[0] == valkey_port and row[2] > 0 for row in tcp()), 30,
                     "the worker's call to the store")
            os.kill(cmd.proc.pid, signal.SIGTERM)
            wait_for(lambda: not running(other), 30, "the idle worker to exit")
            assert running(w) and t.is_alive() and cmd.proc.poll() is None
        finally:
            os.kill(valkey, signal.SIGCONT)
        t.join(timeout=60)
        assert result["answer"]["features"]["departures_1h"] == 7
        assert cmd.proc.wait(timeout=60) == 128 + signal.SIGTERM
        err = cmd.err.read_text()
        assert err.endswith("scowl: stopped by SIGTERM\n") and "Traceback" not in err, err
        assert "Warning" not in err, err  # e.g. prometheus_client's about multiprocess mode
        assert not running(w) and not running(valkey), (proc_stat(w), proc_stat(valkey))
        wait_for(lambda: not group(cmd.proc.pid), 30, "every process of serve's group to exit")
        assert not (cmd.home / "store" / "port").exists()
        assert (cmd.home / "store" / "dump.rdb").exists()
        assert not metrics_dir.exists()


@pytest.mark.slow
def test_connections_opened_at_once_spread_over_the_workers(tmp_path):
    """A client opens 16 connections at once while one worker is busy (here: stopped): the busy worker still
    gets its share, about half, once it runs again, and a request on each of its connections is answered.
    Through one shared socket (uvicorn's supervisor) the awake worker accepted all 16 and the other none,
    which is what ``bench/serve.py --workers 2`` met: 16 of 16 on one worker (a socket per worker,
    ``scowl.commands.serve.listen_slots``). At least 2 of 16: a fair split falls below that with
    probability 17/65536."""
    port = free_port()
    cmd = Command(tmp_path, "serve", "examples/flights", "--workers", "2", "--port", str(port))
    with cmd:
        wait_for(lambda: len(workers(cmd.proc.pid)) == 2 or cmd.proc.poll() is not None, 60, "two workers")
        assert cmd.proc.poll() is None, cmd.err.read_text()
        deadline, posted = time.monotonic() + 180, 0
        while True:  # both listen; a worker replaced meanwhile (a loaded machine: connect_to) is met anew
            wait_for(lambda: len(workers(cmd.proc.pid)) == 2, 60, "two workers")
            busy, awake = workers(cmd.proc.pid)
            try:
                for one, other in ((busy, awake), (awake, busy)):
                    conn = connect_to(one, [other], port)
                    posted += 1
                    assert post(conn, departure(posted))["features"]["departures_1h"] == posted
                break
            except WorkerGone:
                assert time.monotonic() < deadline, "workers kept being replaced for 180 s"
        os.kill(busy, signal.SIGSTOP)
        try:
            socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(16)]
            time.sleep(0.5)  # the awake worker accepts what it can
        finally:
            os.kill(busy, signal.SIGCONT)
        ports = [s.getsockname()[1] for s in socks]
        owners = wait_for(lambda: (lambda o: o if None not in o else None)(
            [owner(port, p, [busy, awake]) for p in ports]), 30, "every connection accepted")
        mine = [s for s, o in zip(socks, owners) if o == busy]
        assert 2 <= len(mine) <= 14, owners
        for k, sock in enumerate(mine):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.sock = sock
            assert post(conn, departure(posted + 1 + k))["features"]["departures_1h"] == posted + 1 + k
        for sock in socks:
            sock.close()
        assert workers(cmd.proc.pid) == sorted([busy, awake])  # none was replaced


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_workers_stop_on_sigint_and_sighup(tmp_path, sig):
    """SIGINT and SIGHUP to serve stop it as SIGTERM does (uvicorn's supervisor would restart its workers on
    SIGHUP): exit 128+n, nothing of serve's left, the store stopped."""
    port = free_port()
    cmd = Command(tmp_path, "serve", "examples/flights", "--workers", "2", "--port", str(port))
    with cmd:
        valkey = cmd.valkey_pid()
        wait_for(lambda: len(workers(cmd.proc.pid)) == 2 or cmd.proc.poll() is not None, 60, "two workers")
        assert cmd.proc.poll() is None, cmd.err.read_text()
        pids = workers(cmd.proc.pid)
        assert post(connect_to(pids[0], pids[1:], port), departure(1))["features"]["departures_1h"] == 1
        assert cmd.stop(sig) == 128 + sig
        err = cmd.err.read_text()
        assert err.endswith(f"scowl: stopped by {sig.name}\n") and "Traceback" not in err, err
        assert not running(valkey)
        wait_for(lambda: not group(cmd.proc.pid), 30, "every process of serve's group to exit")
        assert not (cmd.home / "store" / "port").exists()


@pytest.mark.parametrize("reuseport", [False, True], ids=["plain", "SO_REUSEPORT"])
def test_workers_on_a_busy_port_is_a_user_error_and_stops_the_store(tmp_path, reuseport):
    """The port is taken: one error line, no "serving ..." line, exit 1, starting no worker. Also when
    the listener there allows ``SO_REUSEPORT`` (another server's workers, say), which the workers' own sockets
    set: serve does not join its group."""
    with socket.socket() as busy:
        if reuseport:
            busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cmd = Command(tmp_path, "serve", "examples/flights", "--workers", "2", "--port", str(port))
        with cmd:
            assert cmd.proc.wait(timeout=60) == 1
            err = cmd.err.read_text()
            assert "serving" not in cmd.out.read_text()
            assert err == (f"error: cannot listen on 127.0.0.1:{port}: address already in use (another process "
                           "listens there; give another --port)\n"), err
            assert group(cmd.proc.pid) == []
            assert not (cmd.home / "store" / "port").exists()


@pytest.mark.parametrize("n", ["1", "2"])
def test_port_zero_serves_on_the_port_it_prints(tmp_path, n):
    """``--port 0``: the "serving ..." line, printed once the port is bound, names the port the kernel chose,
    and ``/health`` answers there (one worker and two)."""
    import re

    cmd = Command(tmp_path, "serve", "examples/flights", "--workers", n, "--port", "0")
    with cmd:
        line = wait_for(lambda: re.search(r"serving examples/flights on http://127\.0\.0\.1:(\d+)", cmd.out.read_text())
                        or cmd.proc.poll() is not None and "exited", 60, "the serving line")
        assert line != "exited", cmd.err.read_text()
        port = int(line.group(1))
        assert port != 0
        status = wait_for(lambda: _health(port), 60, "/health to answer")
        assert status == 200
        assert "note:" not in cmd.out.read_text()  # the embedded store answers
        assert cmd.stop(signal.SIGTERM) == 128 + signal.SIGTERM


def test_serve_on_a_store_that_does_not_answer_says_so_and_answers_503(tmp_path):
    """``SCOWL_REDIS_URL`` naming a port nothing listens on: serve starts (a service waits for its store), prints
    one note naming the store's error, and ``/ready`` and ``POST /event`` answer 503 ``store-unavailable``."""
    import re

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    cmd = Command(tmp_path, "serve", "examples/flights", "--port", "0",
                  env={"SCOWL_REDIS_URL": f"redis://127.0.0.1:{dead}"})
    with cmd:
        note = wait_for(lambda: re.search(r"^note: .*$", cmd.out.read_text(), re.M) or cmd.proc.poll() is not None
                        and "exited", 60, "the note")
        assert note != "exited", cmd.err.read_text()
        assert note.group(0) == (f"note: the store does not answer (Error 111 connecting to 127.0.0.1:{dead}. "
                                 "Connection refused): events are answered 503 store-unavailable, and GET /ready "
                                 "503, until it does (is SCOWL_REDIS_URL right?)")
        port = int(re.search(r"on http://127\.0\.0\.1:(\d+)", cmd.out.read_text()).group(1))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        wait_for(lambda: _health(port), 60, "/health to answer")
        conn.request("GET", "/ready")
        ready = conn.getresponse()
        assert ready.status == 503 and json.loads(ready.read())["error"]["code"] == "store-unavailable"
        assert post_status(conn, departure(1)) == 503
        assert cmd.stop(signal.SIGTERM) == 128 + signal.SIGTERM


def post_status(conn: http.client.HTTPConnection, event: dict) -> int:
    """``POST /event``'s status code for ``event`` on ``conn`` (the body read and dropped)."""
    conn.request("POST", "/event", body=json.dumps(event), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    return r.status


def _health(port: int) -> int | None:
    """``GET /health``'s status on 127.0.0.1:``port``, or ``None`` while nothing answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


@pytest.mark.parametrize("n", ["0", "-1"])
def test_workers_below_one_is_a_usage_error(tmp_path, n):
    """``--workers 0`` (or less): exit 2 with click's message naming the option, no traceback, no store started."""
    cmd = Command(tmp_path, "serve", "examples/flights", "--workers", n)
    with cmd:
        assert cmd.proc.wait(timeout=60) == 2
        err = cmd.err.read_text()
        assert "Invalid value for '--workers'" in err and "greater than or equal to 1" in err, err
        assert "Traceback" not in err
        assert not (cmd.home / "store").exists()


@pytest.mark.slow
@pytest.mark.parametrize(("choice", "policy"), [("normal", "SCHED_OTHER"), ("IDLE", "SCHED_IDLE")])
def test_worker_policy_sets_every_workers_threads(tmp_path, choice, policy):
    """``--worker-policy normal`` leaves the workers at ``SCHED_OTHER`` beside the embedded store (``auto``
    would pick ``SCHED_BATCH``: the first test), ``idle`` (any case) runs every thread of each worker at
    ``SCHED_IDLE``; serve says which, and the workers answer."""
    port = free_port()
    cmd = Command(tmp_path, "serve", "examples/flights", "--workers", "2", "--port", str(port),
                  "--worker-policy", choice)
    with cmd:
        wait_for(lambda: len(workers(cmd.proc.pid)) == 2 or cmd.proc.poll() is not None, 60, "two workers")
        assert cmd.proc.poll() is None, cmd.err.read_text()
        assert cmd.out.read_text() == (f"serving examples/flights on http://127.0.0.1:{port} with 2 workers "
                                       f"({policy}; store {cmd.store_url()})\n")
        # each worker serves: it has set its policy (the first thing it does); one the supervisor replaces
        # meanwhile (a missed health check on a loaded machine) is served by its successor instead
        served: list[int] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            pids = workers(cmd.proc.pid)
            todo = [p for p in pids if p not in served]
            if len(pids) == 2 and not todo:
                break
            if not todo:
                time.sleep(0.2)  # a replacement is starting
                continue
            try:
                conn = connect_to(todo[0], [p for p in pids if p != todo[0]], port)
            except WorkerGone:
                continue
            feats = post(conn, departure(len(served) + 1))["features"]
            served.append(todo[0])
            assert feats["departures_1h"] == len(served)
        else:
            pytest.fail(f"the workers did not all serve in 180 s (served {served}, live {workers(cmd.proc.pid)})")
        want = getattr(os, policy)
        got = {}
        for p in workers(cmd.proc.pid):  # (a worker replaced since sets its policy first too)
            try:
                got[p] = policies(p)
            except FileNotFoundError:  # replaced just now
                pass
        assert got and got == {p: {want} for p in got}, got
        assert cmd.stop(signal.SIGTERM) == 128 + signal.SIGTERM


def test_an_unknown_worker_policy_is_a_usage_error(tmp_path):
    """``--worker-policy fast``: exit 2 with click's message naming the option and the choices, no store started."""
    cmd = Command(tmp_path, "serve", "examples/flights", "--workers", "2", "--worker-policy", "fast")
    with cmd:
        assert cmd.proc.wait(timeout=60) == 2
        err = cmd.err.read_text()
        assert ("Error: Invalid value for '--worker-policy': 'fast' is not one of 'auto', 'normal', 'batch', "
                "'idle'.\n") in err, err
        assert "Traceback" not in err
        assert not (cmd.home / "store").exists()


def test_metrics_dir_is_made_for_the_workers_or_taken_from_the_environment(tmp_path, monkeypatch):
    """``run_workers``' metrics directory: a new one in ``PROMETHEUS_MULTIPROC_DIR`` for the block, deleted
    after it; or the one the environment names, its earlier ``*.db`` files (a previous run's counters) deleted
    and the directory kept."""
    from scowl.commands.serve import metrics_dir

    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    with metrics_dir() as made:
        assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(made) and made.is_dir() and not any(made.iterdir())
        (made / "counter_1.db").write_bytes(b"x")
    assert not made.exists() and "PROMETHEUS_MULTIPROC_DIR" not in os.environ
    given = tmp_path / "metrics"
    given.mkdir()
    (given / "counter_99.db").write_bytes(b"stale")
    (given / "notes.txt").write_text("kept")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(given))
    with metrics_dir() as used:
        assert used == given and sorted(p.name for p in given.iterdir()) == ["notes.txt"]
    assert given.is_dir() and os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(given)


def test_bind_address_failures_are_one_line_each():
    """``scowl.common.bind_address``: a busy port and an address no interface holds are a ``UserError`` of one
    line naming the address and what to change; a free port 0 is bound to a real port."""
    import uvicorn

    from scowl.common import UserError, bind_address

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UserError) as e:
            bind_address(uvicorn.Config("x:y", host="127.0.0.1", port=port))
        assert str(e.value) == (f"cannot listen on 127.0.0.1:{port}: address already in use (another process "
                                "listens there; give another --port)")
    with pytest.raises(UserError, match=r"^cannot listen on 192\.0\.2\.1:8000: cannot assign requested address "
                                        r"\(no interface of this host has that address; see --host\)$"):
        bind_address(uvicorn.Config("x:y", host="192.0.2.1", port=8000))  # TEST-NET-1: never local
    with bind_address(uvicorn.Config("x:y", host="127.0.0.1", port=0)) as sock:
        assert sock.getsockname()[1] != 0 and sock.get_inheritable()
