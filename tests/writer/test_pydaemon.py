"""``writer.pydaemon``: Spark's Python workers import the installed PySpark, without archives that only slow imports."""

from __future__ import annotations

import os
import sys
import zipfile

import pyspark
import pytest

from writer.pydaemon import PRELOAD, import_path, preload

SITE = os.path.dirname(os.path.dirname(pyspark.__file__))  # where the installed pyspark lives


def _zip(path, files: dict[str, bytes]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return str(path)


def _installed_version() -> bytes:
    with open(os.path.join(SITE, "pyspark", "version.py"), "rb") as f:
        return f.read()


def test_archives_without_python_are_dropped_and_others_kept_in_order(tmp_path):
    jar = _zip(tmp_path / "spark-core.jar", {"org/apache/spark/A.class": b"x", "META-INF/MANIFEST.MF": b""})
    lib = _zip(tmp_path / "lib.zip", {"mylib/__init__.py": b""})
    missing = str(tmp_path / "python311.zip")  # not a file: kept, as Python keeps it
    path = ["/somewhere", jar, lib, missing, SITE]
    assert import_path(path) == ["/somewhere", lib, missing, SITE]


def test_spark_zips_dropped_only_for_the_same_installed_version(tmp_path):
    same = _zip(tmp_path / "pyspark.zip", {"pyspark/__init__.py": b"", "pyspark/version.py": _installed_version()})
    py4j = _zip(tmp_path / "py4j-0.10.9.9-src.zip", {"py4j/__init__.py": b""})
    assert import_path([same, py4j, SITE]) == [SITE]
    other = _zip(tmp_path / "pyspark-old.zip",
                 {"pyspark/__init__.py": b"", "pyspark/version.py": b'__version__ = "0.0.1"\n'})
    assert import_path([other, py4j, SITE]) == [other, py4j, SITE]
    # no installed pyspark on the rest of the path: the zips stay
    assert import_path([same, py4j, str(tmp_path)]) == [same, py4j, str(tmp_path)]


def test_workers_of_the_test_session_import_the_installed_pyspark(spark):
    import pyarrow as pa

    def probe(batches):
        import sys

        import pyspark as worker_pyspark

        archives = [p for p in sys.path if p.endswith((".jar", ".zip")) and os.path.isfile(p)]
        for b in batches:
            yield pa.RecordBatch.from_pydict({"file": [worker_pyspark.__file__] * b.num_rows,
                                              "archives": pa.array([len(archives)] * b.num_rows, pa.int64())})

    # the importers pyspark.worker re-reads for every task (importlib.invalidate_caches): none of an archive
    rows = spark.range(4, numPartitions=2).mapInArrow(probe, "file string, archives long").collect()
    assert {r["file"] for r in rows} == {pyspark.__file__}
    assert {r["archives"] for r in rows} == {0}


def test_preload_imports_what_it_can_and_skips_what_fails(tmp_path, monkeypatch):
    (tmp_path / "scowl_preload_ok.py").write_text("VALUE = 1\n")
    (tmp_path / "scowl_preload_bad.py").write_text("raise RuntimeError('broken on import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    done = preload(("scowl_preload_bad", "scowl_preload_ok", "scowl_no_such_module"))
    assert done == ["scowl_preload_ok"]
    assert sys.modules["scowl_preload_ok"].VALUE == 1
    assert "scowl_preload_bad" not in sys.modules


def test_workers_start_with_the_preloaded_modules(spark):
    import pyarrow as pa

    def probe(batches):
        import sys as worker_sys

        loaded = [name for name in PRELOAD if name in worker_sys.modules]
        for b in batches:
            yield pa.RecordBatch.from_pydict({"loaded": [",".join(loaded)] * b.num_rows})

    rows = spark.range(2, numPartitions=2).mapInArrow(probe, "loaded string").collect()
    assert {r["loaded"] for r in rows} == {",".join(PRELOAD)}


def test_workers_keep_the_memory_they_free_and_ask_no_huge_pages(spark):
    """``keep_freed_memory``: a worker's 16 MB array comes from its heap, not an mmap of its own, and stays
    there once freed; numpy's huge-page advice is off (fresh huge pages were ~20x dearer per byte here)."""
    import pyarrow as pa

    def probe(batches):
        import ctypes

        import numpy as np
        from numpy._core import multiarray

        class MallInfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                       "fsmblks", "uordblks", "fordblks", "keepcost")]

        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = MallInfo2
        mapped = libc.mallinfo2().hblkhd
        a = np.ones(2_000_000)  # 16 MB
        a_mapped = libc.mallinfo2().hblkhd - mapped
        del a
        free = libc.mallinfo2().fordblks
        for b in batches:
            yield pa.RecordBatch.from_pydict({"hugepage": [bool(multiarray._get_madvise_hugepage())] * b.num_rows,
                                              "mapped": pa.array([a_mapped] * b.num_rows, pa.int64()),
                                              "free": pa.array([free] * b.num_rows, pa.int64())})

    rows = spark.range(2, numPartitions=2).mapInArrow(probe, "hugepage boolean, mapped long, free long").collect()
    assert {r["hugepage"] for r in rows} == {False}
    assert all(r["mapped"] < 16_000_000 <= r["free"] for r in rows), rows


def test_a_worker_whose_executor_closed_the_connection_ends_quietly(monkeypatch):
    """Over a Unix domain socket, ``pyspark.daemon.worker`` on a connection its executor has closed fails its
    flush with ``BrokenPipeError`` (which the daemon printed as a traceback); ``ending_quietly`` returns exit
    code 1 instead, and lets any other error through."""
    import socket

    import pyspark.daemon

    from writer.pydaemon import ending_quietly

    monkeypatch.setenv("PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE", "true")  # as the executors set it
    for quiet in (False, True):
        mine, executor = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        executor.close()
        try:
            if quiet:
                assert ending_quietly(pyspark.daemon.worker)(mine, True) == 1
            else:
                with pytest.raises(BrokenPipeError):
                    pyspark.daemon.worker(mine, True)
        finally:
            mine.close()

    def fails(sock, authenticated):
        raise ValueError("not a connection error")

    with pytest.raises(ValueError, match="not a connection error"):
        ending_quietly(fails)(None, True)
    assert ending_quietly(lambda sock, authenticated: 0)(None, True) == 0
