"""``writer.gateway``: the driver JVM's output relayed (its incubator warning left out), and a JVM that cannot
start made a :class:`SparkStartError` quoting what it said (real ``spark-submit`` launches, no Spark session)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pyspark import SparkConf

from writer import gateway
from writer.gateway import Relay, SparkStartError, StartOutput

ROOT = Path(__file__).resolve().parents[2]


def _relay(data: list[bytes], start: StartOutput, fd_out: int) -> Relay:
    """A relay from a pipe fed ``data`` (in those writes, then closed) to ``fd_out``; returned after its end."""
    r, w = os.pipe()
    relay = Relay(r, fd_out, start)
    for chunk in data:
        os.write(w, chunk)
        time.sleep(0.01)
    os.close(w)
    relay.join(5)
    return relay


def test_relay_drops_the_incubator_warning_and_holds_lines_until_live(tmp_path):
    target = tmp_path / "out"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT)
    try:
        start = StartOutput()
        # lines split across writes, the warning among them, a last line without its newline
        _relay([b"WARNING: Using incubator modules: jdk.incubator.vector\nfirst li", b"ne\nsecond\n", b"last"],
               start, fd)
        assert target.read_bytes() == b""  # not live yet: held
        assert start.last(5) == [b"first line\n", b"second\n", b"last"]
        start.go_live()
        assert target.read_bytes() == b"first line\nsecond\nlast"
        _relay([b"after\nWARNING: Using incubator modules: x\n"], start, fd)  # live: written as read
        assert target.read_bytes() == b"first line\nsecond\nlastafter\n"
    finally:
        os.close(fd)


def test_relay_drains_its_pipe_when_the_target_cannot_be_written():
    start = StartOutput()
    start.go_live()
    r, w = os.pipe()
    dead_r, dead_w = os.pipe()
    os.close(dead_r)  # writing to dead_w fails (EPIPE; Python ignores SIGPIPE)
    relay = Relay(r, dead_w, start)
    block = b"x" * 1023 + b"\n"
    done = threading.Event()

    def feed():  # 4 MiB: far more than a pipe holds, so an undrained pipe would block this writer
        for _ in range(4096):
            os.write(w, block)
        os.close(w)
        done.set()

    threading.Thread(target=feed, daemon=True).start()
    assert done.wait(30), "the JVM side blocked: the relay stopped reading"
    relay.join(5)
    os.close(dead_w)


def test_a_jvm_that_cannot_start_raises_with_what_it_said(monkeypatch):
    # HotSpot writes its own start-up errors to standard output: quoted, not printed
    conf = SparkConf(loadDefaults=False).set("spark.master", "local[1]").set("spark.driver.memory", "900000g")
    with pytest.raises(SparkStartError) as err:
        gateway.launch(conf)
    text = str(err.value)
    assert text.startswith("Spark could not start: its JVM exited before it was ready; the JVM said:")
    assert "Could not reserve enough space" in text
    assert "Java 17 or newer" in text and "SCOWL_DRIVER_MEMORY" in text

    # no java where JAVA_HOME points: Spark's launcher script says so on standard error
    monkeypatch.setenv("JAVA_HOME", "/nonexistent-java-home")
    with pytest.raises(SparkStartError) as err:
        gateway.launch(SparkConf(loadDefaults=False).set("spark.master", "local[1]"))
    assert "/nonexistent-java-home/bin/java: No such file or directory" in str(err.value)


def test_the_cli_says_why_spark_did_not_start_without_a_traceback(tmp_path):
    events = tmp_path / "e.jsonl"
    events.write_text('{"_type": "departure", "_time": "2013-01-01T05:00:00Z"}\n')
    env = {**os.environ, "JAVA_HOME": "/nonexistent-java-home", "SCOWL_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-m", "scowl", "replay", "examples/flights", "--events", str(events),
                          "--out", str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "error: Spark could not start" in out.stderr
    assert "/nonexistent-java-home/bin/java: No such file or directory" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    # the archive this command would have written is not given up on: no failed attempt, no lock left behind
    jvm = tmp_path / "cache" / "jvm"
    assert not list(jvm.glob("*.failed")) and not list(jvm.glob("*.lock")) and not list(jvm.glob("*.part"))
