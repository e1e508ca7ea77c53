"""The embedded server's Unix socket (``scowl.embedded.socket_path``), which ``scowl serve``'s workers use.

Real ``valkey-server`` processes started by ``scowl.embedded.EmbeddedStore``.
The loopback URL stays what every command prints and stores (SPEC §5.9);
the socket is for clients on this machine (``scowl.common.local_store_url``).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
import redis

from scowl.common import local_store_url
from scowl.embedded import MAX_SOCKET_PATH, EmbeddedStore, socket_path

unix_only = pytest.mark.skipif(sys.platform == "win32", reason="Unix domain sockets")


@unix_only
def test_the_store_answers_on_its_socket_with_the_same_data_and_only_for_its_user(tmp_path):
    with EmbeddedStore(tmp_path, persist=False) as store:
        assert store.url.startswith("redis://127.0.0.1:")
        assert store.local_url == f"unix://{socket_path(tmp_path / 'store')}?db=0"
        sock = socket_path(tmp_path / "store")
        assert stat.S_ISSOCK(os.stat(sock).st_mode) and stat.S_IMODE(os.stat(sock).st_mode) == 0o700
        redis.Redis.from_url(store.url).set("k", "v")
        assert redis.Redis.from_url(store.local_url).get("k") == b"v"
        # a command that reuses the running server (its port file) finds the same socket
        again = EmbeddedStore(tmp_path, persist=False)
        assert again.start() == store.url and again.local_url == store.local_url and not again.owned
    assert not sock.exists()  # the server removes it when it stops


@unix_only
def test_a_deep_home_puts_the_socket_in_the_temporary_directory(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    assert len(os.fsencode(str(deep / "store" / "valkey.sock"))) > MAX_SOCKET_PATH
    path = socket_path(deep / "store")
    assert len(os.fsencode(str(path))) <= MAX_SOCKET_PATH and path.name.startswith("scowl-")
    assert path == socket_path(deep / "store") != socket_path(tmp_path / "other" / "store")
    with EmbeddedStore(deep, persist=False) as store:
        assert store.local_url == f"unix://{path}?db=0"
        assert redis.Redis.from_url(store.local_url).ping()


@unix_only
def test_local_store_url_is_the_socket_of_the_embedded_store_and_the_given_url_otherwise(tmp_path, monkeypatch):
    monkeypatch.delenv("SCOWL_REDIS_URL", raising=False)
    with EmbeddedStore(tmp_path, persist=False) as store:
        assert local_store_url(store.url, tmp_path) == store.local_url != store.url
        monkeypatch.setenv("SCOWL_REDIS_URL", store.url)
        assert local_store_url(store.url, tmp_path) == store.url
    monkeypatch.delenv("SCOWL_REDIS_URL")
    # no live server on that home's socket: the URL given
    assert local_store_url("redis://127.0.0.1:1/0", Path(tmp_path / "none")) == "redis://127.0.0.1:1/0"
