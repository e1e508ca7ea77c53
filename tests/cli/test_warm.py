"""``scowl replay --warm`` and ``scowl warm`` (``scowl.warm``): one warm Spark session per ``SCOWL_HOME``.

Through the real commands (subprocesses, each warm server a real Spark
session in a background process): the warm replay writes what a replay in a
session of its own writes, later replays reuse the same server, errors are
user errors without a traceback, a changed environment replaces the server,
an idle server exits, ``scowl warm --stop`` stops one. Every test stops the
servers it started.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from compiler import compile_dir
from scowl import warm
from tests.cli.test_replay import TOPOLOGY, _events


def _scowl(*args: str, home: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scowl", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900, env={**os.environ, "SCOWL_HOME": str(home), "SCOWL_SHUFFLE_PARTITIONS": "2",
                                            "SCOWL_WARM_IDLE_S": "300", **env})


def _server(home: Path) -> dict | None:
    try:
        return json.loads((home / "warm" / "server.json").read_text())
    except OSError:
        return None


_alive = warm.pid_alive  # the client's own test of a server pid


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def rig(tmp_path):
    """``(home, topology dir, input path)`` with the events of ``tests/cli/test_replay.py``; at teardown every
    warm server started under ``home`` is killed."""
    home, topo = tmp_path / "home", tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    lines = [json.dumps(e) for e in _events()]
    lines.insert(10, '{"_type": "nope"}')  # invalid: set aside
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    yield home, topo, tmp_path / "in.jsonl"
    log = home / "warm" / "server.log"
    pids = set()
    if log.exists():  # every server that ever started here logs "scowl-warm[<pid>]"
        import re

        pids = {int(p) for p in re.findall(r"scowl-warm\[(\d+)\]", log.read_text(errors="replace"))}
    for pid in pids:
        if _alive(pid):
            os.kill(pid, 15)
    for pid in pids:
        if not _wait_gone(pid, 30):
            os.kill(pid, 9)


def _table(path: Path):
    return pq.read_table(path).sort_by("_seq")


def test_warm_replay_writes_what_a_replay_writes_and_reuses_its_session(spark, rig, tmp_path):
    home, topo, events = rig
    from writer.replay import run_replay

    want = run_replay(spark, compile_dir(topo).plan, [events], tmp_path / "cold")
    assert want.rejected == 1

    first = _scowl("replay", str(topo), "--events", str(events), "--out", "w1", "--warm", home=home, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "warm Spark session (started)" in first.stdout
    assert "1 invalid record skipped" in first.stdout
    server = _server(home)
    assert server is not None and _alive(server["pid"])
    assert os.stat(home / "warm" / "server.json").st_mode & 0o077 == 0  # its token is the user's alone

    again = _scowl("replay", str(topo), "--events", "in.jsonl", "--out", "w2", "--warm", home=home, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "warm Spark session (running)" in again.stdout
    assert _server(home)["pid"] == server["pid"]  # the same session
    for ev in ("pay", "probe"):
        cold = _table(tmp_path / "cold" / ev)
        assert cold.num_rows == want.rows[ev]
        for out in ("w1", "w2"):  # relative --events and --out resolve against the caller's directory
            assert _table(tmp_path / out / ev).equals(cold), (out, ev)
        assert f"{Path('w2') / ev}: {cold.num_rows:,} rows" in again.stdout

    # a client that leaves mid-replay (its progress callback raises, as Ctrl-C would) cancels the replay's jobs;
    # the session stays up and serves the next one
    class Left(Exception):
        pass

    def leave(phase: str, done: int, total: int) -> None:
        raise Left(phase)

    env = {"SCOWL_SHUFFLE_PARTITIONS": "2", "SCOWL_WARM_IDLE_S": "300"}  # _scowl's: the same server
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        with pytest.raises(Left):
            warm.replay(home, topo, [str(events)], tmp_path / "left", None, None, leave)
    deadline = time.monotonic() + 60
    log = home / "warm" / "server.log"
    while "client went away: cancelling" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "client went away: cancelling" in log.read_text()
    after = _scowl("replay", str(topo), "--events", str(events), "--out", "w3", "--warm", home=home, cwd=tmp_path)
    assert after.returncode == 0, after.stderr[-3000:]
    assert _server(home)["pid"] == server["pid"]
    for ev in ("pay", "probe"):
        assert _table(tmp_path / "w3" / ev).equals(_table(tmp_path / "cold" / ev)), ev

    shown = _scowl("warm", home=home, cwd=tmp_path)
    assert shown.returncode == 0 and f"pid {server['pid']}" in shown.stdout and "4 replays run" in shown.stdout
    stopped = _scowl("warm", "--stop", home=home, cwd=tmp_path)
    assert stopped.returncode == 0 and f"stopped the warm Spark session (pid {server['pid']})" in stopped.stdout
    assert _wait_gone(server["pid"], 30)
    assert _server(home) is None
    none = _scowl("warm", home=home, cwd=tmp_path)
    assert none.returncode == 0 and "no warm Spark session is running" in none.stdout


def test_warm_errors_a_changed_environment_and_the_idle_timeout(rig, tmp_path):
    home, topo, events = rig
    # an input with no valid event: the server's ReplayError is the user's error, no traceback
    (tmp_path / "bad.jsonl").write_text('{"_type": "nope"}\n')
    bad = _scowl("replay", str(topo), "--events", "bad.jsonl", "--out", "o", "--warm", home=home, cwd=tmp_path)
    assert bad.returncode == 1
    assert "error: no valid events in the input" in bad.stderr and "Traceback" not in bad.stderr
    first = _server(home)
    assert first is not None and _alive(first["pid"])
    # a path that matches nothing: found before any server is asked, as without --warm
    missing = _scowl("replay", str(topo), "--events", "nothing/*.jsonl", "--out", "o", "--warm", home=home,
                     cwd=tmp_path)
    assert missing.returncode == 1 and "no input files match" in missing.stderr
    # an input file Spark cannot read (its pages are corrupt, its footer is fine): one line, the user's error;
    # the session is not broken, so it stays up (any other failure makes the next replay start a new one)
    from tests.cli.test_cli import _corrupt_parquet

    _corrupt_parquet(tmp_path / "corrupt.parquet")
    corrupt = _scowl("replay", str(topo), "--events", "corrupt.parquet", "--out", "o", "--warm", home=home,
                     cwd=tmp_path)
    assert corrupt.returncode == 1
    (line,) = [x for x in corrupt.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith("error: cannot read an input file: [FAILED_READ_FILE.NO_HINT] Encountered error while "
                           f"reading file file://{tmp_path / 'corrupt.parquet'}. ("), line
    assert "\tat " not in corrupt.stderr and "Traceback" not in corrupt.stderr
    assert _server(home)["pid"] == first["pid"] and _alive(first["pid"])

    # other Spark settings: a new server; the old one is asked to stop, and does
    other = _scowl("replay", str(topo), "--events", str(events), "--out", "o3", "--warm", home=home, cwd=tmp_path,
                   SCOWL_SHUFFLE_PARTITIONS="3", SCOWL_WARM_IDLE_S="2")
    assert other.returncode == 0, other.stderr[-3000:]
    assert "warm Spark session (started)" in other.stdout
    second = _server(home)
    assert second is not None and second["pid"] != first["pid"]
    assert _wait_gone(first["pid"], 60)
    # and that one, idle for its 2 s, exits by itself and removes its address
    assert _wait_gone(second["pid"], 60)
    assert _server(home) is None
    assert "idle for 2 s: stopping" in (home / "warm" / "server.log").read_text()


def test_the_server_answers_only_its_token(tmp_path):
    """The protocol without Spark: a request with another token is refused; status and stop answer."""
    logs: list[str] = []
    server = warm._Server(None, "secret", 60.0, logs.append, tmp_path / "log")
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        def ask(obj: dict) -> dict:
            with socket.create_connection(server.server_address, timeout=10) as s, s.makefile("rb") as f:
                s.sendall(json.dumps(obj).encode() + b"\n")
                return json.loads(f.readline())

        assert ask({"token": "guess", "op": "replay"}) == {"error": "bad token", "user": True}
        assert ask({"token": "secret", "op": "dance"}) == {"error": "unknown op 'dance'", "user": True}
        got = ask({"token": "secret", "op": "status"})["status"]
        assert got["replays"] == 0 and got["busy"] is False and got["idle_s"] == 60.0
        assert not server.should_exit()
        assert got["stopping"] is False
        assert ask({"token": "secret", "op": "stop"}) == {"stopping": True}
        assert server.should_exit()
        # a stopping server takes no new replay, and says so: clients then start a new one
        assert ask({"token": "secret", "op": "status"})["status"]["stopping"] is True
        refused = ask({"token": "secret", "op": "replay"})
        assert refused["user"] is False and refused["refused"] is True and "stopping" in refused["error"]
        assert server.state()["replays"] == 0
    finally:
        server.shutdown()
        server.server_close()


def test_fingerprint_and_idle_setting(monkeypatch):
    base = warm.fingerprint()
    assert warm.fingerprint() == base
    assert warm.fingerprint("spark://127.0.0.1:7077") != base
    monkeypatch.setenv("SCOWL_SHUFFLE_PARTITIONS", "17")
    partitions = warm.fingerprint()
    assert partitions != base
    monkeypatch.setenv("SCOWL_WARM_IDLE_S", "2.5")
    assert warm.idle_seconds() == 2.5
    # a server keeps the idle timeout it started with: another one is another server
    assert warm.fingerprint() != partitions
    for text in ("0", "-1", "soon", "nan"):
        monkeypatch.setenv("SCOWL_WARM_IDLE_S", text)
        with pytest.raises(warm.WarmError, match="SCOWL_WARM_IDLE_S must be a positive number"):
            warm.idle_seconds()
    monkeypatch.delenv("SCOWL_WARM_IDLE_S")
    assert warm.idle_seconds() == warm.IDLE_S


def test_a_warm_server_whose_spark_cannot_start_is_a_user_error(rig, tmp_path):
    """No Java where ``JAVA_HOME`` points: the server logs why Spark did not start and exits 1, and the client
    quotes it (exit 1, no traceback) and leaves no server behind."""
    home, topo, path = rig
    out = _scowl("replay", str(topo), "--events", str(path), "--out", str(tmp_path / "o"), "--warm", home=home,
                 cwd=tmp_path, JAVA_HOME="/nonexistent-java-home", SCOWL_CACHE_DIR=str(tmp_path / "cache"))
    assert out.returncode == 1, out.stderr[-3000:]
    assert "the warm server exited at start-up (code 1" in out.stderr
    assert "Spark could not start" in out.stderr and "/nonexistent-java-home/bin/java" in out.stderr
    assert "Traceback" not in out.stderr and "Traceback" not in (home / "warm" / "server.log").read_text()
    assert _server(home) is None
