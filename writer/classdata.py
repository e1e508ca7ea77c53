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
  exits, :func:`finish_at_exit` ends the JVM (the gateway exits when its
  standard input closes), waits for it to write the archive (~10 s, once),
  checks that a JVM with the same class path maps it (``-Xshare:on``: a
  truncated archive crashes a JVM that maps it, so nothing unchecked is
  ever installed) and renames it into place. A JVM that exits normally
  but leaves no archive that maps (a JDK without a base archive, say)
  leaves ``<fingerprint>.failed``, and no later process tries again; a
  creator killed on the way is taken over by the next one.
* ``SCOWL_CLASS_DATA=off`` turns all of it off, as does a
  ``SCOWL_JAVA_OPTIONS`` that sets CDS options of its own.

Nothing here changes what a job computes: the archive holds the same classes
the JVM would otherwise load from the same jars.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ARCHIVES_KEPT", "ClassDataPlan", "FINISH_TIMEOUT_S", "cache_dir", "enabled", "fingerprint",
           "finish_at_exit", "pid_alive", "plan_for_session"]

#: Seconds :func:`finish_at_exit` waits for the JVM to write its archive and exit (a 1M-event replay's: ~15 s).
FINISH_TIMEOUT_S = 180
#: Archives kept in the cache directory (other installations' included); the least recently used go first.
ARCHIVES_KEPT = 4
#: CDS's own log lines off (a JVM that cannot map an archive says so on standard output, and one that writes
#: one lists every class of a signed jar it skips).
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: ``SCOWL_JAVA_OPTIONS`` words that mean the user manages CDS.
_USER_CDS = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit", "DumpLoadedClassList", "SharedClassListFile")


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
    if not create or (directory / f"{name}.failed").exists():
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
    """When ``plan`` creates the archive, have this process finish it at exit (module docstring).

    Registers an ``atexit`` hook that closes the gateway JVM's standard input
    (PySpark's ``PythonGatewayServer`` exits on end of file), waits up to
    :data:`FINISH_TIMEOUT_S` for the JVM to write the archive and exit, checks
    it (:func:`_maps`) and renames it into place (or, after a normal exit
    with nothing usable, marks the fingerprint failed); the lock is
    released either way. On a terminal, one line on
    standard error says what the wait is. Does nothing for a plan that does
    not create.

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
        failed = False
        try:
            if proc.poll() is None:
                if sys.stderr.isatty():
                    print("scowl: saving the JVM's class-data archive for faster starts (once; "
                          "SCOWL_CLASS_DATA=off skips it)", file=sys.stderr, flush=True)
                proc.stdin.close()
                proc.wait(timeout=FINISH_TIMEOUT_S)
            # a JVM that exited normally and wrote nothing usable cannot write one here (a JDK without a base
            # archive, say): not tried again. A JVM killed or slow is tried again by a later process
            failed = proc.returncode == 0 and not _install(plan, java, class_path)
        except BaseException:  # never fail a command's exit over the archive (a second Ctrl-C ends the wait)
            pass
        _release(plan, failed=failed)

    atexit.register(finish)


def _release(plan: ClassDataPlan, failed: bool) -> None:
    """Remove the part and the lock; with ``failed``, mark the fingerprint so that no later process tries again."""
    try:
        if plan.part is not None:
            plan.part.unlink(missing_ok=True)
        if failed and plan.archive is not None:
            plan.archive.with_suffix(".failed").touch()
        if plan.lock is not None:
            plan.lock.unlink(missing_ok=True)
    except OSError:
        pass
