"""Spark's Python daemon for scowl's jobs (``spark.python.daemon.module``, set by ``writer.session.get_spark``).

It is ``pyspark.daemon`` (which forks one Python worker per task slot and
hands it ``pyspark.worker``), started after one change to the daemon's
import path (:func:`import_path`). Spark puts its own
``python/lib/pyspark.zip``, the py4j zip and the ``spark-core`` jar first on
every worker's ``PYTHONPATH``. Python compiles modules imported from a zip
every time (no bytecode cache), and ``pyspark.worker`` calls
``importlib.invalidate_caches()`` for every task, which re-reads the
directory of every zip importer (the jar alone has ~6,000 entries).
Measured 2026-11-27 on the 2-core machine (pyspark 4.3, Python 3.11):
importing ``pyspark.worker``, its Arrow serializers and
``pyspark.sql.functions`` from the zip 1.41 s against 0.20 s from
site-packages, once per worker process; ``invalidate_caches`` 112-181 ms
per task (the zips, and the jar's two importers 86 and 48 ms) against well
under a millisecond without them.

It also imports, once, what every task of scowl's jobs imports (:data:`PRELOAD`), before it forks:
a forked worker starts with them loaded. Measured 2026-11-30 (py-spy of the workers of a cold
nycflights13 replay): 108 of 421 samples, 2.2 s of the workers' 8.4 s of CPU, were those imports
(pyarrow, pandas, numpy, ``writer.sweep`` and the algebra), done again by each worker process.
Those objects are then frozen (``gc.freeze``, made for pre-fork servers): a worker collects garbage
after every task, and walked them each time (49 of 339 worker samples, with them preloaded).

Before anything, it makes the daemon and its workers keep the memory they
free (:func:`keep_freed_memory`): a sweep's numpy arrays, allocated anew for
every bucket, otherwise fault in fresh pages (and fresh huge pages) each
time, which a virtual machine's host makes dear.

Only entries that change nothing are taken off ``sys.path``, before
anything of PySpark is imported, so the daemon and its forked workers
import the installed copy: jars and zips holding no Python module, and
Spark's PySpark and py4j zips when the same PySpark version is installed
on the rest of the path (a ``pip install pyspark``, what ``pyproject.toml``
asks for). Otherwise (another Spark home, another version) those stay.
"""

from __future__ import annotations

import gc
import importlib
import os
import socket
import sys
import zipfile
from importlib.machinery import PathFinder
from typing import Callable


#: Modules the daemon imports before it forks its workers (:func:`preload`): ``pyspark.worker`` and its
#: Arrow serializers, what ``mapInArrow`` functions need (pyarrow, numpy, pandas: PySpark's Arrow
#: path imports it), and scowl's modules whose functions run in tasks (the sweep, the sinks).
PRELOAD = ("pyspark.worker", "pyspark.sql.pandas.serializers", "numpy", "pyarrow", "pyarrow.compute", "pandas",
           "writer.sweep", "writer.sink", "writer.tilepass")


def preload(names: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``names`` into this process, skipping any that fails to import.

    Args:
        names: module names.

    Returns:
        The names imported (a module that raised on import is left out and
        will be imported, and raise, in the task that needs it).
    """
    done = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the task that needs it reports the error
            continue
        done.append(name)
    return done


def _version_text(root: str) -> bytes | None:
    """The bytes of ``pyspark/version.py`` under ``root`` (a directory or a zip), or None if absent."""
    try:
        if zipfile.is_zipfile(root):
            with zipfile.ZipFile(root) as z:
                return z.read("pyspark/version.py")
        with open(os.path.join(root, "pyspark", "version.py"), "rb") as f:
            return f.read()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def _holds_python(archive: str) -> bool:
    """Whether the zip or jar ``archive`` holds a Python module or package (True when it cannot be read)."""
    try:
        with zipfile.ZipFile(archive) as z:
            return any(n.endswith((".py", ".pyc", ".so", ".pyd")) for n in z.namelist())
    except (OSError, zipfile.BadZipFile):
        return True


def import_path(path: list[str]) -> list[str]:
    """``path`` without the archives that only slow imports down: a new list.

    Dropped: ``.jar`` and ``.zip`` entries holding no Python module
    (nothing can be imported from them), and Spark's ``pyspark*.zip`` and
    ``py4j*.zip`` when ``pyspark`` and ``py4j`` are importable from the
    other entries and ``pyspark/version.py`` is byte-identical in the zip
    and the installed copy. Every other entry stays, in order.

    Args:
        path: an import path (``sys.path``).

    Returns:
        The kept entries.
    """
    path = [p for p in path if not (p.endswith((".jar", ".zip")) and os.path.isfile(p) and not _holds_python(p))]
    return _prefer_installed_pyspark(path)


def _prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` without Spark's PySpark and py4j zips when an installed PySpark of the same version is on the rest."""
    zips = [p for p in path if p.endswith(".zip") and os.path.basename(p).startswith(("pyspark", "py4j"))]
    rest = [p for p in path if p not in zips]
    spark_zip = next((p for p in zips if os.path.basename(p).startswith("pyspark")), None)
    if spark_zip is None:
        return list(path)
    installed = PathFinder.find_spec("pyspark", rest)
    if installed is None or not installed.submodule_search_locations or PathFinder.find_spec("py4j", rest) is None:
        return list(path)
    pkg_root = os.path.dirname(list(installed.submodule_search_locations)[0])
    theirs, ours = _version_text(spark_zip), _version_text(pkg_root)
    if theirs is None or theirs != ours:
        return list(path)
    return rest


#: glibc ``mallopt`` parameters (``<malloc.h>``) set by :func:`keep_freed_memory`.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: The largest ``M_MMAP_THRESHOLD`` glibc takes on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB).
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
#: Free memory at the top of a worker's heap that glibc keeps rather than returns (1 GiB).
TRIM_THRESHOLD = 1024 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Make this process (and the workers it forks) reuse the memory it frees instead of giving it back.

    Memory new to a process costs a page fault per page on first touch, and
    on a virtual machine whose free memory goes back to the host (a balloon
    with free page reporting, as this project's 2-core machines have) each
    fault also waits for the host: measured 2026-12-02 (bench/HISTORY.md,
    thirtieth session), touching 512 MB of fresh memory took 0.25 s in 4 KB
    pages and 5.2 s in transparent huge pages, against ~0.05 s for memory
    the process already had. A sweep (``writer.sweep``) allocates its numpy
    arrays anew for every bucket; by default glibc serves each array of
    more than 128 KB-32 MB with its own ``mmap`` and unmaps it when freed,
    and numpy asks for huge pages for arrays of 4 MB and more
    (``madvise(MADV_HUGEPAGE)``). So, before numpy is imported:

    * ``NUMPY_MADVISE_HUGEPAGE=0`` (unless set): numpy's huge-page advice off;
    * glibc ``mallopt``: ``M_MMAP_THRESHOLD`` at its 32 MB maximum (arrays
      up to it come from the heap, and freed ones are reused) and
      ``M_TRIM_THRESHOLD`` at 1 GB (the heap's free top is kept).

    A worker's memory then grows to its largest bucket and stays; the
    workers end with the job's session.

    Returns:
        Whether glibc took both settings (False off glibc: nothing changed but the variable).
    """
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def ending_quietly(worker: Callable[[socket.socket, bool], int]) -> Callable[[socket.socket, bool], int]:
    """``pyspark.daemon.worker`` that ends with exit code 1, not a traceback, when its executor closed the connection.

    With the executors reaching their workers through a Unix domain socket
    (``writer.session.STATIC_CONFS``), a worker whose executor has closed
    the connection (the session stopping while the worker waits for its
    next task, a cancelled task) fails its last flush with ``EPIPE`` at
    once, where loopback TCP took the write; ``pyspark.daemon`` then
    printed the ``BrokenPipeError`` traceback to the command's stderr
    (intermittently, at the end of ``scowl replay``). Nobody is left to
    answer, so the worker ends as it does for any other non-zero code: it
    is not reused, and its process exits.

    Args:
        worker: ``pyspark.daemon.worker`` (``(sock, authenticated) -> exit code``).

    Returns:
        The same function, returning 1 where ``worker`` raised
        ``BrokenPipeError`` or ``ConnectionResetError``; any other error
        still propagates.
    """
    def run(sock: socket.socket, authenticated: bool) -> int:
        try:
            return worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            return 1

    return run


def main() -> None:
    """Fix the import path (:func:`import_path`), keep freed memory (:func:`keep_freed_memory`), import
    :data:`PRELOAD`, then run ``pyspark.daemon.manager`` with :func:`ending_quietly` workers (never returns)."""
    keep_freed_memory()
    before = list(sys.path)
    sys.path[:] = import_path(sys.path)
    for p in set(before) - set(sys.path):
        sys.path_importer_cache.pop(p, None)
    import pyspark.daemon as daemon

    daemon.worker = ending_quietly(daemon.worker)  # the forked worker calls it by its module name
    preload()
    # the daemon's objects, shared with every forked worker, out of the collector's reach: a worker runs
    # gc.collect() after each task (pyspark.daemon), which otherwise walks every object of the preloaded
    # modules (49 of 339 worker samples, 2026-11-30) and copies the pages it touches
    gc.freeze()

    daemon.manager()


if __name__ == "__main__":
    main()
