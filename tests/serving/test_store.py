"""serving.store.Store against the session's real Redis-protocol server (SPEC §5.2).

Checked: commands packed by hiredis are byte for byte those of redis-py's own
packer (and what hiredis cannot pack still raises redis-py's ``DataError``);
a script call after ``SCRIPT FLUSH`` (the store restarted or lost its
scripts) runs once, through ``EVAL``; a store that is gone is
``StoreUnavailable``.
"""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from serving.store import Store, StoreUnavailable

SCRIPT = "redis.call('INCR', KEYS[1]); return {tonumber(ARGV[1]) + 1, ARGV[2]}"


@pytest.mark.parametrize("args", [
    ("EVALSHA", "a" * 40, 2, "sc:{k}:1", "", 1_700_000_000_123, "", "é ünïcode", b"\x00raw", 2**63 - 1, -5, 1.5,
     0.1 + 0.2, 1e-300),
    ("HSET", "k", "f", "v" * 7000),  # past redis-py's buffer cut-off: it sends chunks, hiredis one buffer
])
def test_hiredis_packing_sends_the_bytes_redis_py_would(redis_url, args):
    store = Store(redis_url)
    assert asyncio.run(store.connect()) is False  # a standalone server
    packing = store.client.connection_pool.connection_class(host="127.0.0.1")
    plain = Connection(host="127.0.0.1")
    assert b"".join(packing.pack_command(*args)) == b"".join(plain.pack_command(*args))
    # a command name with a space is split as redis-py splits it
    assert b"".join(packing.pack_command("SCRIPT LOAD", "return 1")) == \
        b"".join(plain.pack_command("SCRIPT LOAD", "return 1"))
    with pytest.raises(DataError):
        packing.pack_command("SET", "k", None)


def test_run_survives_a_script_flush_and_runs_once(redis_url):
    client = redis.Redis.from_url(redis_url)

    async def go() -> list:
        store = Store(redis_url)
        try:
            first = await store.run(SCRIPT, ["n"], [1, "x"])
            client.script_flush()
            second = await store.run(SCRIPT, ["n"], [41, "y"])  # NOSCRIPT, then EVAL
            third = await store.run(SCRIPT, ["n"], [0, "z"])  # loaded again by that EVAL
            return [first, second, third]
        finally:
            await store.close()

    assert asyncio.run(go()) == [[2, b"x"], [42, b"y"], [1, b"z"]]
    assert client.get("n") == b"3"  # each call ran exactly once
    client.close()


def test_run_on_a_store_that_is_gone_is_unavailable():
    async def go() -> None:
        store = Store("redis://127.0.0.1:1/0", timeout_s=0.5)
        try:
            await store.run(SCRIPT, ["n"], [1, "x"])
        finally:
            await store.close()

    with pytest.raises(StoreUnavailable, match="unreachable"):
        asyncio.run(go())
