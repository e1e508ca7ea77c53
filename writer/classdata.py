"""Class-data sharing for the Spark JVMs scowl starts: an archive of loaded classes, written once, mapped after.

A JVM that starts Spark loads ~15-18k classes from ~250 jars, parses and
verifies each: on this 2-core host about 2 s of a session's start and another
second in its first jobs. HotSpot's class-data sharing (CDS, JEP 310 and JEP
350: a *dynamic archive* of the application's classes, written at exit by
``-XX:ArchiveClassesAtExit`` and mapped at the next start by
``-XX:SharedArchiveFile``) maps them instead, pre-parsed. JDK 19 automates this
(``-XX:+AutoCreateSharedArchive``, JEP none, JDK-8261455); scowl needs Java 17,
so this module does the same by hand, for the driver JVM only (the whole JVM
under ``local[*]``; on a cluster the executors' class paths are the workers').

Measured (bench/HISTORY.md, fortieth session): a session's start 4.4-5.1 s
against 2.6-2.8 s with the archive, its first two small jobs 2.6-3.0 s against
1.6-1.9 s; a cold 1M-event Zipf replay 22.0-24.1 s against 21.4-21.7 s
timed, 29.8-32.0 s against 27.0-27.3 s for the whole process.

How it runs (:func:`plan_for_session`, :func:`finish_at_exit`):

* The archive of a Java installation and a Spark installation is
  ``<cache>/jvm/<fingerprint>.jsa`` (:func:`fingerprint`: the ``java``
  binary and its ``lib/modules``, Spark's jars: paths, sizes and times; a
  JDK or PySpark upgrade makes a new one). ``<cache>`` is
  ``SCOWL_CACHE_DIR``, else ``$XDG_CACHE_HOME/scowl``, else
  ``~/.cache/scowl``. An archive takes ~110-190 MB, by what the first
  command loaded.
* If it exists, the JVM maps it (a JVM that cannot use it, whatever the
  reason, starts without it: ``-Xshare:auto``; CDS's own log lines are off).
* If not, one process at a time (a lock file, ``O_EXCL``; a lock whose
  process is gone is taken over) starts its JVM with
  ``-XX:ArchiveClassesAtExit=<fingerprint>.<pid>.part``. When that process
  exits, :func:`finish_at_exit` starts a *finisher* (a detached process of
  its own session, :func:`finish_detached`, which takes over the lock) and
  ends the JVM (the gateway exits when its standard input closes), so the
  command returns at once and the JVM writes the archive behind it (~10 s
  of one core, once). The finisher waits for the JVM to end, checks that a
  JVM with the same class path maps the archive (``-Xshare:on``: a
  truncated archive crashes a JVM that maps it, so nothing unchecked is
  ever installed) and renames it into place. Where no finisher can start,
  the exiting process does the same itself. An ended JVM that left no
  archive that maps (a JDK without a base archive, say; a JVM killed while
  it wrote) counts a failed attempt in ``<fingerprint>.failed``; after
  :data:`FAILED_ATTEMPTS` no process tries again. A creator or finisher
  killed on the way is taken over by the next process.
* ``SCOWL_CLASS_DATA=off`` turns all of it off, as does a
  ``SCOWL_JAVA_OPTIONS`` that sets CDS options of its own.

Nothing here changes what a job computes: the archive holds the same classes
the JVM would otherwise load from the same jars.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ARCHIVES_KEPT", "ClassDataPlan", "FAILED_ATTEMPTS", "FINISH_TIMEOUT_S", "cache_dir", "enabled",
           "failed_attempts", "fingerprint", "finish_at_exit", "finish_detached", "pid_alive", "plan_for_session",
           "process_running", "release_plan"]

#: Seconds a finisher waits for the JVM to write its archive and exit (a 1M-event replay's: ~15 s).
FINISH_TIMEOUT_S = 180
#: Ended JVMs that left no usable archive after which no process tries again (``<fingerprint>.failed``).
FAILED_ATTEMPTS = 3
#: Archives kept in the cache directory (other installations' included); the least recently used go first.
ARCHIVES_KEPT = 4
#: CDS's own log lines off (a JVM that cannot map an archive says so on standard output, and one that writes
#: one lists every class of a signed jar it skips).
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: ``SCOWL_JAVA_OPTIONS`` words that mean the user manages CDS (a JVM with ``-XX:+RecordDynamicDumpInfo`` and a
#: dynamic archive mapped does not start: "DynamicDumpSharedSpaces is unsupported when base CDS archive is not
#: loaded").
_USER_CDS = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit", "DumpLoadedClassList", "SharedClassListFile",
             "RecordDynamicDumpInfo", "AutoCreateSharedArchive")


@dataclass(frozen=True)
class ClassDataPlan:
    """What one JVM start does with the archive (:func:`plan_for_session`).

    Attributes:
        options: JVM options for the driver (``spark.driver.extraJavaOptions``),
            empty when the JVM neither maps nor writes an archive.
        archive: where the archive is (or will be installed).
        part: the file this JVM writes at exit, when it creates the archive; else ``None``.
        lock: the lock this process holds while it creates the archive; else ``None``.
    """

    options: str
    archive: Path | None = None
    part: Path | None = None
    lock: Path | None = None


def enabled() -> bool:
    """Whether class-data sharing is on: ``SCOWL_CLASS_DATA`` is not ``off``/``0``/``false``/``no`` and
    ``SCOWL_JAVA_OPTIONS`` sets no CDS option of its own."""
    if os.environ.get("SCOWL_CLASS_DATA", "").strip().lower() in ("off", "0", "false", "no"):
        return False
    return not any(word in os.environ.get("SCOWL_JAVA_OPTIONS", "") for word in _USER_CDS)


def cache_dir() -> Path:
    """The directory the archives live in: ``$SCOWL_CACHE_DIR/jvm``, ``$XDG_CACHE_HOME/scowl/jvm`` or
    ``~/.cache/scowl/jvm`` (not created here)."""
    base = os.environ.get("SCOWL_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = os.path.join(xdg, "scowl") if xdg else os.path.join(os.path.expanduser("~"), ".cache", "scowl")
    return Path(base) / "jvm"


def _java() -> str | None:
    """The ``java`` Spark's launcher runs (``spark-class``: ``$JAVA_HOME/bin/java``, else the one on ``PATH``),
    resolved through links; ``None`` if there is none."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def _spark_jars() -> Path | None:
    """The ``jars`` directory of the Spark installation PySpark launches (``SPARK_HOME`` or PySpark's own)."""
    try:
        from pyspark.find_spark_home import _find_spark_home

        jars = Path(_find_spark_home()) / "jars"
    except Exception:  # pragma: no cover - a PySpark without its helper: no archive
        return None
    return jars if jars.is_dir() else None


def fingerprint() -> str | None:
    """The name of the archive for this Java and this Spark installation, or ``None`` if either is not found.

    Hashes the ``java`` binary's path, the size and time of its JDK's
    ``lib/modules`` (every JDK update changes it), and each Spark jar's
    path, size and time (an archive records the class path; a JVM refuses
    one written for other jars, so a reinstall needs a new one).

    Returns:
        32 hex digits, or ``None``.
    """
    java, jars = _java(), _spark_jars()
    if java is None or jars is None:
        return None
    h = hashlib.sha256()
    h.update(java.encode())
    modules = Path(java).parent.parent / "lib" / "modules"
    if modules.exists():
        st = modules.stat()
        h.update(f"|{st.st_size}|{st.st_mtime_ns}".encode())
    for entry in sorted(os.scandir(jars), key=lambda e: e.name):
        st = entry.stat()
        h.update(f"|{entry.path}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:32]


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0; a process of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - another user's process
        return True
    return True


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), ``None`` if there is no such
    process.

    Raises:
        OSError: this system has no ``/proc`` (macOS).
    """
    if not os.path.exists("/proc/self/stat"):
        raise OSError("no /proc")
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def _start_ticks(pid: int) -> int | None:
    """Process ``pid``'s start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), ``None`` where
    there is no ``/proc`` or no such process."""
    try:
        fields = _stat_fields(pid)
    except OSError:
        return None
    return int(fields[19]) if fields and len(fields) > 19 else None


def process_running(pid: int, start_ticks: int | None = None) -> bool:
    """Whether process ``pid`` still runs: it exists and is not a zombie (an ended process its parent has not
    reaped: a JVM whose launcher has exited waits for ``init`` or a subreaper, which may be slow), and, given
    ``start_ticks`` (:func:`_start_ticks` when it ran), it is the same process, not a reuse of its pid.
    Where there is no ``/proc`` (macOS), whether the pid exists (:func:`pid_alive`)."""
    try:
        fields = _stat_fields(pid)
    except OSError:
        return pid_alive(pid)
    if not fields or fields[0] in ("Z", "X", "x"):
        return False
    return start_ticks is None or len(fields) < 20 or int(fields[19]) == start_ticks


def failed_attempts(directory: Path, name: str) -> int:
    """Failed attempts recorded for archive ``name`` (``<name>.failed``: a count; a file without one, as an
    earlier scowl wrote it, counts :data:`FAILED_ATTEMPTS`); 0 without the file."""
    mark = directory / f"{name}.failed"
    try:
        text = mark.read_text().strip()
    except FileNotFoundError:
        return 0
    except OSError:
        return FAILED_ATTEMPTS
    try:
        return int(text)
    except ValueError:
        return FAILED_ATTEMPTS


def _claim(lock: Path) -> bool:
    """Take the creation lock (``O_EXCL``), taking over one whose process has ended; ``True`` if taken."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                pid = int(lock.read_text().strip() or "0")
            except (OSError, ValueError):
                pid = 0
            if pid and pid_alive(pid):
                return False
            try:  # its process is gone (or the lock is unreadable): clear it and try once more
                lock.unlink()
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def _clear_parts(directory: Path, name: str) -> None:
    """Remove ``<name>.<pid>.part`` files whose process has ended (a creator killed before it finished)."""
    for part in directory.glob(f"{name}.*.part"):
        try:
            pid = int(part.name.split(".")[-2])
        except ValueError:
            pid = 0
        if not pid or not pid_alive(pid):
            part.unlink(missing_ok=True)


def plan_for_session(create: bool = True) -> ClassDataPlan:
    """Decide what the JVM about to start does with the archive (module docstring).

    Args:
        create: this process may write the archive when there is none (a
            command's short-lived JVM); ``False`` for a JVM that lives as
            long as a test run, whose archive would come only at its end.

    Returns:
        A :class:`ClassDataPlan`; its ``options`` are empty when sharing is
        off, the installation is not found, the cache is not writable, or
        another process is creating the archive.
    """
    if not enabled():
        return ClassDataPlan("")
    name = fingerprint()
    if name is None:
        return ClassDataPlan("")
    directory = cache_dir()
    archive = directory / f"{name}.jsa"
    if archive.exists():
        try:
            os.utime(archive)  # its last use, for ARCHIVES_KEPT
        except OSError:
            pass
        return ClassDataPlan(f"-XX:SharedArchiveFile={archive} {QUIET}", archive)
    if not create or failed_attempts(directory, name) >= FAILED_ATTEMPTS:
        return ClassDataPlan("", archive)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = directory / f"{name}.lock"
        if not _claim(lock):
            return ClassDataPlan("", archive)
        _clear_parts(directory, name)
    except OSError:
        return ClassDataPlan("", archive)
    part = directory / f"{name}.{os.getpid()}.part"
    return ClassDataPlan(f"-XX:ArchiveClassesAtExit={part} {QUIET}", archive, part, lock)


def _maps(java: str, class_path: str, archive: Path) -> bool:
    """Whether a JVM with ``class_path`` maps ``archive`` (``-Xshare:on`` exits 1 otherwise; a damaged archive
    may crash it, with no error file)."""
    cmd = [java, "-cp", class_path, f"-XX:SharedArchiveFile={archive}", "-Xshare:on", *QUIET.split(),
           "-XX:ErrorFile=/dev/null", "-XX:-CreateCoredumpOnCrash", "-version"]
    try:
        return subprocess.run(cmd, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _install(plan: ClassDataPlan, java: str, class_path: str) -> bool:
    """Check the written part and rename it to the archive; ``True`` if installed. Drops old archives."""
    assert plan.part is not None and plan.archive is not None
    if not plan.part.exists() or not _maps(java, class_path, plan.part):
        return False
    os.replace(plan.part, plan.archive)
    archives = sorted(plan.archive.parent.glob("*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[ARCHIVES_KEPT:]:
        old.unlink(missing_ok=True)
    return True


def finish_at_exit(plan: ClassDataPlan, spark) -> None:
    """When ``plan`` creates the archive, have it finished when this process exits (module docstring).

    Registers an ``atexit`` hook that starts a finisher (:func:`finish_detached`
    in a process of its own session, standard streams closed, which takes
    over the lock), then closes the gateway JVM's standard input
    (PySpark's ``PythonGatewayServer`` exits on end of file) and returns: the
    JVM writes the archive after this process has gone. On a terminal, one
    line on standard error says so. If the JVM has already ended, or no
    finisher starts, the hook finishes here (waiting up to
    :data:`FINISH_TIMEOUT_S` for the JVM; a second Ctrl-C ends the wait).
    Does nothing for a plan that does not create.

    Args:
        plan: from :func:`plan_for_session`, for the JVM ``spark`` runs on.
        spark: the session just started (its JVM gives the class path and
            ``java.home`` the check uses).
    """
    if plan.part is None:
        return
    gateway = spark.sparkContext._gateway
    proc = getattr(gateway, "proc", None)
    jvm = spark.sparkContext._jvm
    try:
        class_path = str(jvm.System.getProperty("java.class.path"))
        java = os.path.join(str(jvm.System.getProperty("java.home")), "bin", "java")
    except Exception:  # pragma: no cover - the JVM is gone already
        proc = None
    if proc is None:  # not a JVM this process launched: no exit to wait for
        _release(plan, failed=False)
        return

    def finish() -> None:
        try:
            handed = proc.poll() is None and _start_finisher(plan, proc.pid, java, class_path)
        except BaseException:  # noqa: BLE001 -- no finisher: finished here, below
            handed = False
        if handed:  # the lock and the part are the finisher's now: this process only lets the JVM go
            try:
                if sys.stderr.isatty():
                    print("scowl: the JVM saves its class-data archive in the background for faster starts "
                          "(once; SCOWL_CLASS_DATA=off skips it)", file=sys.stderr, flush=True)
                proc.stdin.close()  # (else the pipe closes as this process ends)
            except BaseException:  # noqa: BLE001
                pass
            return
        try:
            if proc.poll() is None:
                if sys.stderr.isatty():
                    print("scowl: saving the JVM's class-data archive for faster starts (once; "
                          "SCOWL_CLASS_DATA=off skips it)", file=sys.stderr, flush=True)
                proc.stdin.close()
                proc.wait(timeout=FINISH_TIMEOUT_S)
            _settle(plan, java, class_path)
        except BaseException:  # never fail a command's exit over the archive (a second Ctrl-C ends the wait)
            _release(plan, failed=False)

    atexit.register(finish)


def _start_finisher(plan: ClassDataPlan, jvm_pid: int, java: str, class_path: str) -> bool:
    """Start :func:`finish_detached` for ``plan`` in a process of its own session and hand it the lock (its pid
    written in place of this process's); ``True`` if it started."""
    if not sys.executable or plan.lock is None:
        return False
    job = {"pid": jvm_pid, "start": _start_ticks(jvm_pid), "part": str(plan.part), "archive": str(plan.archive),
           "lock": str(plan.lock), "java": java, "class_path": class_path}
    root = str(Path(__file__).resolve().parents[1])  # where the writer package is, installed or not
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    try:
        child = subprocess.Popen([sys.executable, "-c", "import sys; from writer.classdata import finish_detached; "
                                  "finish_detached(sys.argv[1])", json.dumps(job)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True, close_fds=True, env=env, cwd="/")
    except OSError:
        return False
    tmp = plan.lock.with_name(f"{plan.lock.name}.{os.getpid()}.tmp")
    try:  # the lock is the finisher's now: a process that sees this one gone must not take it over
        tmp.write_text(str(child.pid))
        os.replace(tmp, plan.lock)
    except OSError:
        child.kill()
        tmp.unlink(missing_ok=True)
        return False
    return True


def finish_detached(job: str) -> None:
    """The finisher's body: wait for the JVM, then check and install its archive (:func:`finish_at_exit`).

    Args:
        job: JSON of ``pid`` (the JVM), ``start`` (its start ticks or null),
            ``part``, ``archive``, ``lock``, ``java`` and ``class_path``.

    Waits up to :data:`FINISH_TIMEOUT_S` for the JVM to end (it is not this
    process's child: :func:`process_running` polls it), then settles the
    plan (:func:`_settle`); a JVM still running then leaves the part to a
    later process (the lock released, no attempt counted).
    """
    spec = json.loads(job)
    plan = ClassDataPlan("", Path(spec["archive"]), Path(spec["part"]), Path(spec["lock"]))
    deadline = time.monotonic() + FINISH_TIMEOUT_S
    while process_running(spec["pid"], spec["start"]):
        if time.monotonic() > deadline:
            _release(plan, failed=False)
            return
        time.sleep(0.1)
    _settle(plan, spec["java"], spec["class_path"])


def _settle(plan: ClassDataPlan, java: str, class_path: str) -> None:
    """After the writing JVM ended: install its archive if it maps, else count a failed attempt; release."""
    installed = False
    try:
        installed = _install(plan, java, class_path)
    except OSError:
        pass
    _release(plan, failed=not installed)


def release_plan(plan: ClassDataPlan) -> None:
    """Give up ``plan`` when its JVM never started: its part and lock removed, no failed attempt counted
    (a JVM that cannot start says nothing about the archive; the next command tries again).

    Args:
        plan: from :func:`plan_for_session` (one that creates nothing has no part or lock: nothing is done).
    """
    _release(plan, failed=False)


def _release(plan: ClassDataPlan, failed: bool) -> None:
    """Remove the part and the lock; with ``failed``, count a failed attempt in ``<fingerprint>.failed``
    (:data:`FAILED_ATTEMPTS` of them and no later process tries again)."""
    try:
        if plan.part is not None:
            plan.part.unlink(missing_ok=True)
        if failed and plan.archive is not None:
            count = failed_attempts(plan.archive.parent, plan.archive.stem) + 1
            plan.archive.with_suffix(".failed").write_text(str(count))
        if plan.lock is not None:
            plan.lock.unlink(missing_ok=True)
    except OSError:
        pass
