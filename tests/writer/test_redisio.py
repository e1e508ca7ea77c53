"""writer.redisio against the session's real Redis-protocol server: the jobs' command packer.

Checked: :class:`writer.redisio.HiredisPacker` (hiredis's C packer, for the
jobs' standalone connections) sends byte for byte what redis-py's own packer
sends, for every argument type the jobs use and for what it hands back to
redis-py (names with a space, bytearray/memoryview); what neither can pack
raises redis-py's ``DataError``; and ``connect`` gives standalone clients
that packer, so pipelines and script calls still answer as before.
"""

from __future__ import annotations

import pytest
import redis
from redis.connection import HiredisRespSerializer

from writer.redisio import HiredisPacker, connect


@pytest.mark.parametrize("args", [
    ("EVALSHA", "a" * 40, 2, "sc:{k}:1", "", 1_700_000_000_123, "", "é ünïcode", b"\x00raw", 2**63 - 1, -5, 1.5,
     0.1 + 0.2, 1e-300),
    ("HSET", "k", "f", "v" * 70_000),  # past redis-py's buffer cut-off
    ("SCRIPT LOAD", "return 1"),  # split into two words by redis-py
    (b"CLIENT SETINFO", b"LIB-NAME", b"x"),
    ("SET", bytearray(b"k"), memoryview(b"v")),  # hiredis refuses these: redis-py's packer takes them
])
def test_packer_sends_the_bytes_redis_py_would(args):
    assert b"".join(HiredisPacker().pack(*args)) == b"".join(HiredisRespSerializer().pack(*args))


def test_packer_refuses_what_redis_py_refuses():
    with pytest.raises(redis.DataError):
        HiredisPacker().pack("SET", "k", None)


def test_connect_packs_with_hiredis_and_still_answers(redis_url):
    client = connect(redis_url)
    try:
        assert isinstance(client.connection_pool.connection_kwargs.get("command_packer"), HiredisPacker)
        sha = client.script_load("return {KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1}")
        pipe = client.pipeline(transaction=False)
        pipe.hset("redisio:k", mapping={"a": "1", "b": 2.5})
        pipe.evalsha(sha, 1, "redisio:k", "é", 41)
        pipe.hgetall("redisio:k")
        assert pipe.execute() == [2, [b"redisio:k", "é".encode(), 42], {b"a": b"1", b"b": b"2.5"}]
    finally:
        client.delete("redisio:k")
        client.close()
