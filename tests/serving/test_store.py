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


#: a script that keeps the server busy for ARGV[1] loop steps (~6 ns each on the 2-core machine), then
#: answers ARGV[2]. Not a wait on ``TIME``: a script sees the server's clock as it was when it started
#: (the cached time), and the embedded store runs without the Lua count hook that used to refresh it
#: (``scowl.embedded.STORE_SETTINGS``), so such a wait would never end
SLOW = """local x = 0
for i = 1, tonumber(ARGV[1]) do x = x + 1 end
return ARGV[2]"""

#: SLOW's steps for a call that outlasts a 0.2 s timeout many times over (~1.8 s at 6 ns a step)
SLOW_STEPS = 300_000_000


def test_a_call_past_the_timeout_is_unavailable_and_the_next_call_gets_its_own_reply(redis_url):
    """The standalone client has no socket timeout; ``Store`` bounds each call itself (``_deadline``).

    A call the server answers only after the timeout fails as ``StoreUnavailable``
    (the API's 503). Its late reply must not reach the next call: the connection
    that waited for it is dropped, not given back to the pool.
    """
    async def go() -> tuple[str, list]:
        store = Store(redis_url, timeout_s=0.2)
        try:
            with pytest.raises(StoreUnavailable, match="no answer within the store timeout") as e:
                await store.run(SLOW, ["k"], [SLOW_STEPS, "late"])
            store.timeout_s = 30.0  # the next calls wait for the slow one to end (the server runs one at a time)
            after = [await store.run(SLOW, ["k"], [0, f"own {i}"]) for i in range(3)]
            return str(e.value), after
        finally:
            await store.close()

    message, after = asyncio.run(go())
    assert message.startswith("store unreachable")
    assert after == [b"own 0", b"own 1", b"own 2"]


def test_store_calls_send_without_a_task_per_command(redis_url):
    """Speed (issue 10): the standalone client has no socket timeout, so redis-py writes a command
    directly rather than through ``asyncio.wait_for`` (a task per command in Python 3.11)."""
    async def go() -> tuple:
        store = Store(redis_url, timeout_s=2.0)
        try:
            await store.run(SCRIPT, ["n"], [1, "x"])
            kwargs = store.client.connection_pool.connection_kwargs
            return kwargs.get("socket_timeout"), kwargs.get("socket_connect_timeout")
        finally:
            await store.close()

    assert asyncio.run(go()) == (None, 2.0)


def test_an_idle_connection_the_server_closed_is_replaced_not_failed(redis_url):
    """A connection the server closed while idle (a restart, a ``CLIENT KILL``, an idle timeout) is
    dropped before use: the next call runs on a new one and answers, no 503."""
    admin = redis.Redis.from_url(redis_url)

    async def go() -> list:
        store = Store(redis_url)
        try:
            first = await store.run(SCRIPT, ["n2"], [1, "a"])
            (conn,) = store._idle
            host, port = conn._writer.get_extra_info("sockname")[:2]
            assert admin.client_kill(f"{host}:{port}") is True
            await asyncio.sleep(0.2)  # the loop sees the connection's end
            second = await store.run(SCRIPT, ["n2"], [2, "b"])
            return [first, second]
        finally:
            await store.close()

    assert asyncio.run(go()) == [[2, b"a"], [3, b"b"]]
    assert admin.get("n2") == b"2"
    admin.close()


def test_a_script_call_cut_off_is_not_sent_again():
    """Exactness (SPEC §5.2, §4 ``_id``): a script call whose connection ends before its reply may have
    run; ``Store`` answers ``StoreUnavailable`` (the client retries, with its ``_id`` exactly once) and
    never sends it again itself. A guard: ``Store`` sends script calls on its own connections
    (``Store._execute``), without the retries a redis-py client can be configured with.

    The server here is a minimal RESP server: it answers the client's set-up commands and the mode
    probe, and closes the connection on every ``EVALSHA``, counting them.
    """
    import hiredis

    evalshas = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parser = hiredis.Reader()
        try:
            while data := await reader.read(65536):
                parser.feed(data)
                while (cmd := parser.gets()) is not False:
                    name = cmd[0].upper()
                    if name == b"EVALSHA":
                        evalshas.append(cmd)
                        writer.close()
                        return
                    if name == b"INFO":
                        body = b"# Cluster\r\ncluster_enabled:0\r\n"
                        writer.write(b"$%d\r\n%s\r\n" % (len(body), body))
                    else:
                        writer.write(b"+OK\r\n")
        finally:
            writer.close()

    async def go() -> str:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        store = Store(f"redis://127.0.0.1:{port}/0", timeout_s=5.0)
        try:
            with pytest.raises(StoreUnavailable) as e:
                await store.run(SCRIPT, ["n"], [1, "x"])
            return str(e.value)
        finally:
            await store.close()
            server.close()

    message = asyncio.run(go())
    assert message.startswith("store unreachable")
    assert len(evalshas) == 1


def test_every_store_client_speaks_resp2(redis_url):
    """The clients of serving, the writer and the embedded store name RESP2 (``storekeys.RESP_PROTOCOL``): the
    scripts' replies are decoded as RESP2, whatever redis-py's default (RESP3 from redis-py 8.2 on)."""
    from compiler.algebra.storekeys import RESP_PROTOCOL
    from writer.redisio import connect as writer_client

    assert RESP_PROTOCOL == 2

    async def served() -> bytes:
        store = Store(redis_url)
        try:
            await store.connect()
            return await store.client.execute_command("CLIENT", "INFO")
        finally:
            await store.close()

    assert b" resp=2 " in asyncio.run(served())
    assert " resp=2 " in writer_client(redis_url).execute_command("CLIENT", "INFO").decode()
