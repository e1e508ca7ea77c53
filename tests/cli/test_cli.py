"""The ``scowl`` command: exit codes and outputs (SPEC §6)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLIGHTS = ROOT / "examples" / "flights"


def scowl(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scowl", *args], capture_output=True, text=True, cwd=cwd or ROOT,
                          env=env, timeout=600)


def test_check_ok():
    r = scowl("check", str(FLIGHTS))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok: 4 events, ") and r.stdout.endswith(" aggregate states\n"), r.stdout


def test_check_counts_in_the_singular_for_one(tmp_path):
    """One event type with one feature and one aggregate state: ``1 event``, not ``1 events``."""
    (tmp_path / "a.scowl").write_text("event e\nn := Count(last 1 hour)\n")
    r = scowl("check", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ok: 1 event, 1 feature, 1 aggregate state\n"


def test_check_reports_errors_with_positions(tmp_path):
    (tmp_path / "a.scowl").write_text("event e\nx := $.x as int\ny := Count(by nope)\nz := Sum(x last q)\n")
    r = scowl("check", str(tmp_path))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "a.scowl:3:" in r.stderr and "E0301" in r.stderr
    assert "a.scowl:4:" in r.stderr


def test_usage_error_is_2():
    r = scowl("check")
    assert r.returncode == 2


def test_plan_json_fields():
    r = scowl("plan", str(FLIGHTS), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    feats = {f["name"]: f for f in doc["events"]["departure"]["features"]}
    assert feats["origin"]["kind"] == "input" and feats["origin"]["type"] == "string"
    assert feats["route"]["kind"] == "scalar"
    agg = feats["departures_1h"]
    assert agg["kind"] == "aggregate" and agg["type"] == "int"
    for key in ("function", "scopes", "window_s", "resolution_s", "limit", "definition_hash"):
        assert key in agg
    assert (agg["function"], agg["window_s"], agg["resolution_s"], agg["limit"]) == ("Count", 3600, 1, None)
    assert feats["miles_tail_30d"]["window_s"] == 30 * 86400 and feats["miles_tail_30d"]["resolution_s"] == 60
    assert feats["visib"]["scopes"] == ["weather_obs"]


def test_not_a_directory_is_user_error(tmp_path):
    """One plain line on stderr, never wrapped however long the path and however narrow the terminal."""
    missing = tmp_path / ("long-directory-name-" * 6) / "missing"
    r = scowl("check", str(missing), env={**os.environ, "COLUMNS": "40"})
    assert r.returncode == 1
    assert r.stderr == f"error: {missing}: not a directory\n"
    assert r.stdout == ""


def test_backfill_of_missing_input_is_a_user_error_before_spark(tmp_path):
    """The input paths are expanded (to pick the JVM options, ``writer.sources.estimate_events``) before
    Spark starts: a path that matches nothing is exit 1 with its message, no traceback."""
    env = {k: v for k, v in os.environ.items() if k != "SCOWL_REDIS_URL"}
    env["SCOWL_HOME"] = str(tmp_path / "home")
    r = scowl("backfill", str(FLIGHTS), "--events", str(tmp_path / "missing*.jsonl"), cwd=tmp_path, env=env)
    assert r.returncode == 1 and "no input files match" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_an_output_directory_that_cannot_be_written_is_a_user_error_before_spark(tmp_path):
    """``replay --out`` under a file (or anywhere it cannot be created) is refused before Spark starts: one
    message, exit 1. Spark found it out in its tasks, after the whole replay, with ~1,500 lines of traces."""
    (tmp_path / "a-file").write_text("x")
    out = tmp_path / "a-file" / "out"
    env = {**os.environ, "SCOWL_HOME": str(tmp_path / "home")}
    r = scowl("replay", str(FLIGHTS), "--events", str(FLIGHTS / "missing.jsonl"), "--out", str(out), cwd=tmp_path,
              env=env)
    assert r.returncode == 1, r.stderr
    assert r.stderr == f"error: --out {out}: cannot write there (Not a directory)\n"
    ck = tmp_path / "a-file" / "ck"
    r = scowl("stream", str(FLIGHTS), "--source", f"dir:{tmp_path}", "--checkpoint", str(ck), cwd=tmp_path, env=env)
    assert r.returncode == 1 and r.stderr == f"error: --checkpoint {ck}: cannot write there (Not a directory)\n"


def test_an_unexpected_failure_is_one_line_and_a_saved_traceback(tmp_path):
    """A failure no command turns into a user error (here a file where replay writes an event type's dataset)
    prints one ``error:`` line naming the exception and the file its traceback was saved to, exit 1;
    ``SCOWL_TRACEBACK=1`` raises it as it is."""
    events = tmp_path / "e.jsonl"
    events.write_text('{"_type": "weather_obs", "_time": "2013-01-01T05:00:00Z", "origin": "EWR", "visib": 10}\n')
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "weather_obs").write_text("not a directory")
    env = {**os.environ, "SCOWL_HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path)}
    env.pop("SCOWL_TRACEBACK", None)
    r = scowl("replay", str(FLIGHTS), "--events", str(events), "--out", str(tmp_path / "out"), cwd=tmp_path,
              env=env)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    (line, note) = [x for x in r.stderr.splitlines() if x.startswith(("error:", "(an unexpected"))]
    assert line.startswith("error: NotADirectoryError: ") and "weather_obs" in line
    (saved,) = tmp_path.glob("scowl-error-*.txt")
    assert str(saved) in note
    text = saved.read_text()
    assert text.startswith("scowl replay ") and "Traceback (most recent call last)" in text
    assert "NotADirectoryError" in text


def test_a_failed_spark_call_is_summarized_by_its_java_root_cause(spark):
    """A failed call into the JVM (PySpark's captured exceptions keep the Java one as ``_origin``, py4j's
    ``Py4JJavaError`` as ``java_exception``) is named by its innermost Java cause."""
    from scowl.cli import failure_summary

    try:
        spark._jvm.java.lang.Integer.parseInt("not-a-number")
    except Exception as e:  # noqa: BLE001 -- whichever class PySpark makes of it
        error = e
    assert failure_summary(error) == 'Spark failed: java.lang.NumberFormatException: For input string: "not-a-number"'
    # py4j's own error for a call whose exception PySpark does not convert
    from py4j.protocol import Py4JJavaError

    try:
        spark._jvm.java.util.ArrayList().get(3)
    except Py4JJavaError as e:
        error = e
    assert failure_summary(error).startswith("Spark failed: java.lang.IndexOutOfBoundsException: Index 3")
    # a Spark job's error is a chain (SparkException, caused by the task's exception): its innermost cause
    chain = spark._jvm.java.lang.RuntimeException("Job aborted", spark._jvm.java.io.IOException("Mkdirs failed"))
    assert failure_summary(type("Wrapped", (Exception,), {"java_exception": chain})("x")) == \
        "Spark failed: java.io.IOException: Mkdirs failed"
    assert failure_summary(ValueError("bad\nsecond line")) == "ValueError: bad"
    # an input file Spark could not read is the user's to fix (scowl.cli.input_read_failure); others are not
    from scowl.cli import input_read_failure

    assert input_read_failure(type("Wrapped", (Exception,), {"java_exception": chain})("x")) is None
    assert input_read_failure(ValueError("[FAILED_READ_FILE.NO_HINT] not from Spark")) is None
    jvm = spark._jvm.java
    read = jvm.lang.RuntimeException("Job aborted", jvm.lang.RuntimeException(
        "[FAILED_READ_FILE.NO_HINT] Encountered error while reading file file:/x.parquet.  SQLSTATE: KD001",
        jvm.io.IOException("can not read class org.apache.parquet.format.PageHeader")))
    assert input_read_failure(type("Wrapped", (Exception,), {"java_exception": read})("x")) == (
        "cannot read an input file: [FAILED_READ_FILE.NO_HINT] Encountered error while reading file "
        "file:/x.parquet. (java.io.IOException: can not read class org.apache.parquet.format.PageHeader)")



def _corrupt_parquet(path) -> None:
    """A Parquet file whose footer reads (so the command starts its job) and whose data pages do not."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"_type": "departure", "_time": "2013-01-01T00:00:00Z", "origin": "JFK"}] * 2000
    pq.write_table(pa.Table.from_pylist(rows), path, compression="snappy", use_dictionary=False)
    data = bytearray(path.read_bytes())
    pages_end = len(data) - 8 - int.from_bytes(data[-8:-4], "little")  # the footer, its length, b"PAR1" stay
    data[8:pages_end] = b"\xab" * (pages_end - 8)
    path.write_bytes(bytes(data))
    assert pq.ParquetFile(path).metadata.num_rows == 2000


def test_a_failed_spark_job_logs_its_errors_without_java_stack_traces(tmp_path):
    """A Spark job that fails (here on a Parquet file whose pages are corrupt, which the footer check before
    the job lets through) logs no Java frames and no failed task's errors (writer/log4j2.properties: the job's
    failure is reported once, by the command); its phase is drawn as stopped (``scowl.progress.job_progress``), not as a
    spinner still running; and, an input file Spark could not read (its ``FAILED_READ_FILE`` error), it is a
    user error: one ``error:`` line naming the file and the cause, exit 1, no traceback file
    (``scowl.cli.input_read_failure``), in replay and backfill alike."""
    bad = tmp_path / "bad.parquet"
    _corrupt_parquet(bad)
    env = {**os.environ, "SCOWL_HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path)}
    for name in ("SCOWL_TRACEBACK", "SCOWL_JAVA_OPTIONS", "SPARK_CONF_DIR"):
        env.pop(name, None)
    for command, phase in ((("replay", str(FLIGHTS), "--events", str(bad), "--out", str(tmp_path / "out")), "replay"),
                           (("backfill", str(FLIGHTS), "--events", str(bad)), "backfill")):
        r = scowl(*command, cwd=tmp_path, env=env)
        assert r.returncode == 1, r.stderr
        assert "\tat " not in r.stderr and "Caused by:" not in r.stderr and "Traceback" not in r.stderr
        lines = r.stderr.splitlines()
        # the failed task is not logged apart from its job's failure, which the error line reports
        assert not [x for x in lines if " ERROR Executor: " in x or " ERROR TaskSetManager: " in x], r.stderr
        assert all(len(x) < 400 for x in lines), r.stderr  # any logged cause is cut to its first line
        (line,) = [x for x in lines if x.startswith("error:")]
        assert line == (f"error: cannot read an input file: [FAILED_READ_FILE.NO_HINT] Encountered error while "
                        f"reading file file://{bad}. (shaded.parquet.org.apache.thrift.transport."
                        "TTransportException: Socket is closed by peer.)"), line
        assert "unexpected failure" not in r.stderr and not list(tmp_path.glob("scowl-error-*.txt"))
        # the phase that failed is drawn as stopped, not as a spinner still running; the finished one as done
        out = r.stdout.splitlines()
        (read,) = [x for x in out if f"{phase}: reading events" in x]
        assert f"{phase}: reading events (stopped)" in read and "0/1" in read, r.stdout
        (start,) = [x for x in out if "starting Spark" in x]
        assert "(stopped)" not in start and "1/1" in start


def test_an_input_that_cannot_be_read_is_a_user_error_before_spark(tmp_path):
    """A ``.parquet`` input that is no Parquet file, or a ``.gz`` one that does not decompress: one ``error:``
    line naming the file, exit 1, before Spark starts (no Spark log line, no traceback file), where the job
    failed with Spark's error and a traceback file (``writer.sources.estimate_events``)."""
    import gzip

    env = {**os.environ, "SCOWL_HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path)}
    env.pop("SCOWL_TRACEBACK", None)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"no")
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(b'{"_type": "departure", "_time": 0}\n' * 100)[:40])
    for path, why in ((bad, "is not a readable Parquet file (Parquet file size is 2 bytes, smaller than the "
                            "minimum file footer (8 bytes))"),
                      (cut, "does not decompress (Compressed file ended before the end-of-stream marker was "
                            "reached)")):
        for command in (("replay", str(FLIGHTS), "--events", str(path), "--out", str(tmp_path / "out")),
                        ("backfill", str(FLIGHTS), "--events", str(path))):
            r = scowl(*command, cwd=tmp_path, env=env)
            assert r.returncode == 1, r.stderr
            assert r.stderr == f"error: {path} {why}\n", r.stderr
            assert not list(tmp_path.glob("scowl-error-*.txt"))

def test_a_store_url_that_is_none_or_a_store_that_does_not_answer_is_a_user_error_before_spark(tmp_path):
    """``SCOWL_REDIS_URL`` without a store scheme (redis-py's ValueError before), and a stream whose store does
    not answer (its first batch failed after Spark's start, with pages of the JVM's log): one line, exit 1."""
    env = {**os.environ, "SCOWL_HOME": str(tmp_path / "home"), "SCOWL_REDIS_URL": "localhost:6379"}
    r = scowl("status", str(FLIGHTS), cwd=tmp_path, env=env)
    assert r.returncode == 1
    assert r.stderr == ("error: SCOWL_REDIS_URL=localhost:6379: not a store URL (it starts with redis://, "
                        "rediss:// or unix://)\n")
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env["SCOWL_REDIS_URL"] = f"redis://127.0.0.1:{port}"
    r = scowl("stream", str(FLIGHTS), "--source", f"dir:{tmp_path}", "--available-now", "--checkpoint",
              str(tmp_path / "ck"), cwd=tmp_path, env=env)
    assert r.returncode == 1
    assert r.stderr.startswith("error: store unavailable: ") and "Connection refused" in r.stderr
    assert "\tat org.apache" not in r.stderr and r.stderr.count("\n") == 1
    # backfill too asks before Spark starts (it found out after reading every input)
    events = tmp_path / "events.jsonl"
    events.write_text('{"_type": "departure", "_time": "2013-01-01T00:00:00Z", "origin": "JFK"}\n')
    r = scowl("backfill", str(FLIGHTS), "--events", str(events), cwd=tmp_path, env=env)
    assert r.returncode == 1 and "starting Spark" not in r.stdout, r.stdout
    assert r.stderr.startswith("error: store unavailable: ") and r.stderr.count("\n") == 1, r.stderr


def test_a_setting_out_of_range_is_a_user_error_naming_the_variable(tmp_path):
    """``scowl serve`` with ``SCOWL_*`` values it cannot take: one line naming each variable and its value
    (``serving.settings.Settings.load``), exit 1, before any store is started; was pydantic's
    ``ValidationError`` reported as an unexpected failure with a traceback file."""
    env = {**os.environ, "SCOWL_HOME": str(tmp_path / "home"), "SCOWL_EVENT_STREAM": "ev",
           "SCOWL_EVENT_STREAM_MAXLEN": "0", "SCOWL_ALLOWED_LATENESS": "soon"}
    env.pop("SCOWL_REDIS_URL", None)
    r = scowl("serve", str(FLIGHTS), "--port", "1", env=env)
    assert r.returncode == 1, r.stderr
    assert r.stderr == ("error: SCOWL_EVENT_STREAM_MAXLEN=0: Input should be greater than or equal to 1; "
                        "SCOWL_ALLOWED_LATENESS=soon: Input should be a valid integer, unable to parse string as an "
                        "integer\n"), r.stderr
    assert not (tmp_path / "home").exists()
