"""The embedded server's allocator: mimalloc preloaded unless ``SCOWL_EMBEDDED_ALLOCATOR=libc`` (``scowl.embedded.server_env``).

Real ``valkey-server`` processes started by ``scowl.embedded.EmbeddedStore``;
what they run on is read from ``/proc/<pid>/maps`` (Linux, where the
preload applies).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import redis

from scowl.embedded import ALLOCATOR_ENV, EmbeddedStore, EmbeddedStoreError, allocator_library, server_env

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD: Linux only")


def _mapped(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


@linux_only
def test_the_embedded_server_runs_on_mimalloc_and_keeps_its_data(tmp_path, monkeypatch):
    monkeypatch.delenv(ALLOCATOR_ENV, raising=False)
    lib = allocator_library()
    assert lib is not None and lib.name.startswith("libmimalloc.so")  # a dependency of scowl on Linux
    store = EmbeddedStore(tmp_path, persist=True)
    store.start()
    try:
        assert str(lib) in _mapped(store.proc.pid)
        r = redis.Redis.from_url(store.url)
        r.hset("h", mapping={f"f{i}": "x" * (i % 300) for i in range(5000)})
        assert r.hlen("h") == 5000 and r.hget("h", "f299") == b"x" * 299
        assert r.info("memory")["used_memory"] > 5000 * 8
    finally:
        store.stop()
    # saved on stop, loaded back by the next server (also on mimalloc)
    again = EmbeddedStore(tmp_path, persist=False)
    again.start()
    try:
        assert str(lib) in _mapped(again.proc.pid)
        assert redis.Redis.from_url(again.url).hlen("h") == 5000
    finally:
        again.stop()


@linux_only
def test_libc_setting_runs_the_server_on_glibc_malloc(tmp_path, monkeypatch):
    monkeypatch.setenv(ALLOCATOR_ENV, "libc")
    assert "mimalloc" not in server_env().get("LD_PRELOAD", "")
    with EmbeddedStore(tmp_path, persist=False) as store:
        assert "libmimalloc" not in _mapped(store.proc.pid)
        assert redis.Redis.from_url(store.url).ping()


@linux_only
def test_a_preload_already_set_is_kept_after_mimalloc(monkeypatch):
    monkeypatch.delenv(ALLOCATOR_ENV, raising=False)
    monkeypatch.setenv("LD_PRELOAD", "/opt/other/libhook.so")
    assert server_env()["LD_PRELOAD"] == f"{allocator_library()} /opt/other/libhook.so"
    assert server_env()["LC_ALL"] == "C"


@linux_only
def test_a_library_path_that_ld_preload_would_split_is_left_out(monkeypatch, tmp_path):
    monkeypatch.delenv(ALLOCATOR_ENV, raising=False)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    for odd in ("my venv/libmimalloc.so", "a:b/libmimalloc.so"):
        monkeypatch.setattr("scowl.embedded.allocator_library", lambda odd=odd: tmp_path / odd)
        assert "LD_PRELOAD" not in server_env()


def test_an_unknown_allocator_is_refused_before_starting(tmp_path, monkeypatch):
    monkeypatch.setenv(ALLOCATOR_ENV, "tcmalloc")
    with pytest.raises(EmbeddedStoreError, match="SCOWL_EMBEDDED_ALLOCATOR must be 'mimalloc' or 'libc', not 'tcmalloc'"):
        EmbeddedStore(tmp_path, persist=False).start()


def test_the_embedded_server_runs_with_the_store_settings(tmp_path):
    """``STORE_SETTINGS``: tile hashes past 32 fields are hashtables, and the Lua VM runs without a count hook."""
    from scowl.embedded import STORE_SETTINGS

    assert STORE_SETTINGS == ("--hash-max-listpack-entries", "32", "--busy-reply-threshold", "0")
    with EmbeddedStore(tmp_path, persist=False) as store:
        r = redis.Redis.from_url(store.url)
        assert r.config_get("hash-max-listpack-entries") == {"hash-max-listpack-entries": "32"}
        assert r.config_get("busy-reply-threshold") == {"busy-reply-threshold": "0"}
        r.hset("small", mapping={f"f{i}": i for i in range(32)})
        r.hset("large", mapping={f"f{i}": i for i in range(33)})
        assert (r.object("encoding", "small"), r.object("encoding", "large")) == (b"listpack", b"hashtable")
        # a script still runs to its end and answers (no hook, no BUSY machinery needed for it)
        assert r.eval("local n = 0 for i = 1, 2000000 do n = n + i end return n", 0) == 2000001000000
