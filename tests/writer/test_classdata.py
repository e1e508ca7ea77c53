"""The driver JVM's class-data archive (``writer.classdata``): when it is mapped, written, checked and installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from writer import classdata
from writer.classdata import ClassDataPlan, plan_for_session

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache directory, sharing on, no user JVM options."""
    monkeypatch.setenv("SCOWL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SCOWL_CLASS_DATA", raising=False)
    monkeypatch.delenv("SCOWL_JAVA_OPTIONS", raising=False)
    return tmp_path / "cache" / "jvm"


@pytest.fixture
def spark_home(tmp_path, monkeypatch):
    """A Spark installation of two jars (``SPARK_HOME``), for the fingerprint."""
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    for name in ("a.jar", "b.jar"):
        (home / "jars" / name).write_bytes(b"PK" + name.encode())
    monkeypatch.setenv("SPARK_HOME", str(home))
    return home


def test_switches(monkeypatch):
    """``SCOWL_CLASS_DATA=off`` (and its spellings) and CDS options in ``SCOWL_JAVA_OPTIONS`` turn sharing off."""
    monkeypatch.delenv("SCOWL_JAVA_OPTIONS", raising=False)
    monkeypatch.delenv("SCOWL_CLASS_DATA", raising=False)
    assert classdata.enabled()
    for off in ("off", "0", "false", "No"):
        monkeypatch.setenv("SCOWL_CLASS_DATA", off)
        assert not classdata.enabled()
        assert plan_for_session() == ClassDataPlan("")
    monkeypatch.setenv("SCOWL_CLASS_DATA", "on")
    assert classdata.enabled()
    monkeypatch.setenv("SCOWL_JAVA_OPTIONS", "-XX:+UseG1GC -Xshare:off")
    assert not classdata.enabled()
    monkeypatch.setenv("SCOWL_JAVA_OPTIONS", "-XX:+RecordDynamicDumpInfo")  # with scowl's archive: no JVM at all
    assert not classdata.enabled()
    monkeypatch.setenv("SCOWL_JAVA_OPTIONS", "-XX:+UseG1GC")
    assert classdata.enabled()


def test_cache_dir(monkeypatch, tmp_path):
    """``SCOWL_CACHE_DIR``, else ``$XDG_CACHE_HOME/scowl``, else ``~/.cache/scowl``; the archives in ``jvm/``."""
    monkeypatch.setenv("SCOWL_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert classdata.cache_dir() == tmp_path / "a" / "jvm"
    monkeypatch.delenv("SCOWL_CACHE_DIR")
    assert classdata.cache_dir() == tmp_path / "x" / "scowl" / "jvm"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert classdata.cache_dir() == tmp_path / "home" / ".cache" / "scowl" / "jvm"


def test_fingerprint_follows_the_jars_and_the_java(spark_home, monkeypatch, tmp_path):
    """A jar rewritten, added or moved, or another ``java``, gives another archive name; the same files the same."""
    first = classdata.fingerprint()
    assert first is not None and len(first) == 32
    assert classdata.fingerprint() == first
    jar = spark_home / "jars" / "a.jar"
    st = jar.stat()
    os.utime(jar, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a reinstall: same bytes, new time
    second = classdata.fingerprint()
    assert second != first
    (spark_home / "jars" / "c.jar").write_bytes(b"PK")
    assert classdata.fingerprint() not in (first, second)
    # another JDK: JAVA_HOME names the java Spark's launcher runs
    jdk = tmp_path / "jdk"
    (jdk / "bin").mkdir(parents=True)
    (jdk / "bin" / "java").write_text("#!/bin/sh\n")
    third = classdata.fingerprint()
    monkeypatch.setenv("JAVA_HOME", str(jdk))
    assert classdata.fingerprint() not in (first, second, third, None)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-such-jdk"))
    assert classdata.fingerprint() is None  # no java: no archive


def test_plans(cache, spark_home, monkeypatch):
    """No archive: this process claims the creation (a lock with its pid, a part named after it); while the lock
    holder lives nobody else writes; an archive is mapped; ``create=False`` and a failed mark never write."""
    name = classdata.fingerprint()
    archive = cache / f"{name}.jsa"
    assert plan_for_session(create=False) == ClassDataPlan("", archive)
    assert not cache.exists()  # nothing written for a plan that does not create

    plan = plan_for_session()
    assert plan.part == cache / f"{name}.{os.getpid()}.part" and plan.lock == cache / f"{name}.lock"
    assert plan.options == f"-XX:ArchiveClassesAtExit={plan.part} {classdata.QUIET}"
    assert plan.lock.read_text() == str(os.getpid())
    assert plan_for_session() == ClassDataPlan("", archive)  # the holder (this process) is alive

    # a holder that has gone: its lock and part are cleared, and the next process writes
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    plan.lock.write_text(dead)
    stale = cache / f"{name}.{dead}.part"
    stale.write_bytes(b"half")
    again = plan_for_session()
    assert again.part == plan.part and again.lock.read_text() == str(os.getpid())
    assert not stale.exists()
    classdata._release(again, failed=False)
    assert not again.lock.exists()

    archive.write_bytes(b"an archive")
    os.utime(archive, (1, 1))
    mapped = plan_for_session(create=False)
    assert mapped.options == f"-XX:SharedArchiveFile={archive} {classdata.QUIET}" and mapped.part is None
    assert archive.stat().st_mtime > 1  # its use is its time, for ARCHIVES_KEPT

    archive.unlink()
    for attempt in range(1, classdata.FAILED_ATTEMPTS):  # failed attempts are counted; the next one is tried
        classdata._release(ClassDataPlan("", archive), failed=True)
        assert classdata.failed_attempts(cache, name) == attempt
        tried = plan_for_session()
        assert tried.part is not None
        classdata._release(tried, failed=False)
    classdata._release(ClassDataPlan("", archive), failed=True)
    assert (cache / f"{name}.failed").read_text() == str(classdata.FAILED_ATTEMPTS)
    assert plan_for_session() == ClassDataPlan("", archive)  # not tried again
    (cache / f"{name}.failed").write_text("")  # an earlier scowl's mark: no count, as good as all of them
    assert classdata.failed_attempts(cache, name) == classdata.FAILED_ATTEMPTS
    assert plan_for_session() == ClassDataPlan("", archive)


def test_process_running_sees_ended_zombie_and_reused_processes():
    """A running process runs; one that has ended is not running, before its parent reaps it (a zombie: the
    writing JVM once its launcher has exited) and after; a pid whose start time differs is another process."""
    assert classdata.process_running(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    while classdata._stat_fields(child.pid)[0] != "Z":
        time.sleep(0.01)  # not reaped: a zombie once it ends
    assert not classdata.process_running(child.pid)
    child.wait()
    assert not classdata.process_running(child.pid)
    me = classdata._start_ticks(os.getpid())
    assert me is not None and classdata.process_running(os.getpid(), me)
    assert not classdata.process_running(os.getpid(), me + 1)


def test_process_running_without_proc_asks_the_kernel(monkeypatch):
    """Where there is no ``/proc`` (macOS), a process runs while its pid exists (signal 0), not "never"."""
    exists = os.path.exists
    monkeypatch.setattr(classdata.os.path, "exists", lambda p: p != "/proc/self/stat" and exists(p))
    assert classdata.process_running(os.getpid(), 12345) and classdata._start_ticks(os.getpid()) is None
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not classdata.process_running(child.pid)


def test_the_finisher_waits_for_the_jvm_then_settles(cache, tmp_path, monkeypatch):
    """``finish_detached`` waits while the writing process runs, then checks the part: one that does not map is
    removed with the lock and counts a failed attempt; a process still running at the timeout leaves the next
    process to try, no attempt counted."""
    cache.mkdir(parents=True)
    java = classdata._java()
    assert java is not None, "the tests need Java (README)"
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    part, lock = cache / f"x.{writer.pid}.part", cache / "x.lock"
    part.write_bytes(b"half an archive")
    lock.write_text(str(os.getpid()))
    job = {"pid": writer.pid, "start": classdata._start_ticks(writer.pid), "part": str(part),
           "archive": str(cache / "x.jsa"), "lock": str(lock), "java": java, "class_path": str(tmp_path)}
    done = threading.Event()
    thread = threading.Thread(target=lambda: (classdata.finish_detached(json.dumps(job)), done.set()))
    thread.start()
    assert not done.wait(0.5) and part.exists() and lock.exists()  # the writer still runs: nothing touched
    writer.wait()
    thread.join(30)
    assert done.is_set()
    assert not part.exists() and not lock.exists() and not (cache / "x.jsa").exists()
    assert classdata.failed_attempts(cache, "x") == 1

    monkeypatch.setattr(classdata, "FINISH_TIMEOUT_S", 0.3)
    part.write_bytes(b"being written")
    lock.write_text(str(os.getpid()))
    job.update(pid=os.getpid(), start=classdata._start_ticks(os.getpid()))  # a "JVM" that outlives the wait
    classdata.finish_detached(json.dumps(job))
    assert not part.exists() and not lock.exists()
    assert classdata.failed_attempts(cache, "x") == 1


def test_process_confs_give_the_archive_and_the_log_configuration_to_the_driver_only(monkeypatch):
    """The driver's options end with the log configuration's and the plan's; the executors' (a cluster's
    workers: other files) have neither."""
    from writer.session import LOG_CONFIG, java_options, process_confs

    monkeypatch.delenv("SCOWL_JAVA_OPTIONS", raising=False)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    log = f"-Dlog4j2.configurationFile={LOG_CONFIG}"
    confs = process_confs(driver_options="-XX:SharedArchiveFile=/x.jsa")
    assert confs["spark.driver.extraJavaOptions"] == f"{java_options()} {log} -XX:SharedArchiveFile=/x.jsa"
    assert confs["spark.executor.extraJavaOptions"] == java_options()
    assert process_confs()["spark.driver.extraJavaOptions"] == f"{java_options()} {log}"


def test_a_log_configuration_of_the_users_wins(monkeypatch, tmp_path):
    """scowl's log4j2 file (errors only) is left out when ``SCOWL_JAVA_OPTIONS`` names a log4j configuration or
    Spark's configuration directory has a ``log4j2.*`` file; a path with a space is quoted (Spark splits the
    options as a shell does)."""
    from writer import session

    monkeypatch.delenv("SCOWL_JAVA_OPTIONS", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert session.log_options() == f"-Dlog4j2.configurationFile={session.LOG_CONFIG}"
    assert "rootLogger.level = error" in session.LOG_CONFIG.read_text()
    (tmp_path / "log4j2.properties").write_text("rootLogger.level = info\n")
    assert session.log_options() == ""
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path.parent))  # its conf/ has none
    assert session.log_options() != ""
    monkeypatch.setenv("SCOWL_JAVA_OPTIONS", "-XX:+UseG1GC -Dlog4j2.configurationFile=/etc/mine.xml")
    assert session.log_options() == ""
    monkeypatch.delenv("SCOWL_JAVA_OPTIONS")
    spaced = tmp_path / "a dir" / "log4j2.properties"
    spaced.parent.mkdir()
    spaced.write_text("")
    monkeypatch.setattr(session, "LOG_CONFIG", spaced)
    assert session.log_options() == f'"-Dlog4j2.configurationFile={spaced}"'


def test_a_damaged_part_is_never_installed(cache, tmp_path):
    """The check runs a JVM that must map the part (``-Xshare:on``): a truncated or foreign file fails it (a
    truncated archive crashes the JVM that maps it), is not renamed into place and leaves no JVM error file."""
    cache.mkdir(parents=True)
    java = classdata._java()
    assert java is not None, "the tests need Java (README)"
    for body in (b"not an archive", b""):
        part = cache / "x.1.part"
        part.write_bytes(body)
        plan = ClassDataPlan("", cache / "x.jsa", part, None)
        assert not classdata._install(plan, java, str(tmp_path))
        assert not (cache / "x.jsa").exists()
    assert not list(Path.cwd().glob("hs_err_pid*.log"))


_SESSION = textwrap.dedent("""
    import json, sys
    from writer.session import get_spark
    spark = get_spark(app_name="classdata-test")
    args = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    total = spark.range(1000).selectExpr("sum(id) AS s").collect()[0]["s"]
    print(json.dumps({"args": [a for a in args if "Archive" in a], "sum": total,
                      "class_path": spark._jvm.System.getProperty("java.class.path"),
                      "java_home": spark._jvm.System.getProperty("java.home"),
                      "jvm_pid": spark.sparkContext._gateway.proc.pid}))
""")


def _session(env: dict, out_dir: Path) -> tuple[dict, Path, int]:
    """Run :data:`_SESSION` with its standard streams on a pipe read to its end, as ``scowl .. | tee`` reads a
    command's: that ends with the process, not with a JVM that outlives it (``writer.gateway`` relays the JVM's
    output; before, the JVM inherited the pipe and its reader waited for the archive). Returns the result, a file
    holding the output and the process's pid."""
    out = out_dir / f"session-{len(list(out_dir.glob('session-*')))}.txt"
    proc = subprocess.Popen([sys.executable, "-c", _SESSION], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    data, _ = proc.communicate(timeout=300)
    out.write_bytes(data)
    assert proc.returncode == 0, out.read_text()[-3000:]
    lines = [line for line in out.read_text().splitlines() if line.startswith("{")]
    return json.loads(lines[-1]), out, proc.pid


def test_first_session_writes_the_archive_the_next_maps_it(tmp_path):
    """A real driver JVM (``get_spark``) with no archive writes one after its process has exited (the process
    does not wait), and a finisher checks and installs it (no part or lock left, no CDS or Spark start-up log
    line in the output); the next session's JVM starts with it, and a JVM with that class path maps it
    (``-Xshare:on``)."""
    env = {**os.environ, "SCOWL_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("SCOWL_CLASS_DATA", None)
    env.pop("SCOWL_JAVA_OPTIONS", None)
    jvm = tmp_path / "cache" / "jvm"

    first, out, pid = _session(env, tmp_path)
    assert classdata.process_running(first["jvm_pid"])  # the pipe's reader did not wait for the JVM's archive
    assert first["sum"] == 499500
    assert len(first["args"]) == 1 and first["args"][0].startswith(f"-XX:ArchiveClassesAtExit={jvm}/")
    # the process has gone while its JVM writes the archive (~10 s): the lock is a finisher's, a process of its
    # own that installs the archive once the JVM has ended
    (lock,) = jvm.glob("*.lock")
    finisher = int(lock.read_text())
    assert finisher != pid and classdata.process_running(finisher)
    assert b"finish_detached" in Path(f"/proc/{finisher}/cmdline").read_bytes()
    assert not list(jvm.glob("*.jsa"))
    deadline = time.monotonic() + 120
    while lock.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    archives = list(jvm.glob("*.jsa"))
    assert len(archives) == 1, sorted(p.name for p in jvm.iterdir())
    assert not list(jvm.glob("*.part")) and not list(jvm.glob("*.lock")) and not list(jvm.glob("*.failed"))
    text = out.read_text()
    assert "[cds" not in text and "Skipping" not in text
    assert "Using incubator modules" not in text  # the JVM's warning on every command (writer.gateway)
    # errors only from the JVM's first line (writer/log4j2.properties): none of Spark's start-up chatter
    assert "default log4j profile" not in text and "Setting default log level" not in text
    assert "NativeCodeLoader" not in text

    second, out, _ = _session(env, tmp_path)
    assert second["sum"] == 499500
    assert second["args"] == [f"-XX:SharedArchiveFile={archives[0]}"]
    assert not list(jvm.glob("*.lock"))  # nothing to write: no finisher
    assert "[cds" not in out.read_text()
    assert classdata._maps(os.path.join(second["java_home"], "bin", "java"), second["class_path"], archives[0])
