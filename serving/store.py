"""The Redis side of serving: one script call per round (SPEC §5.2).

``Store.run(script, keys, argv)`` runs one generated round script
(``compiler.algebra.lua``) with ``EVALSHA``, so an event costs one network
round trip in the common case; after a ``NOSCRIPT`` error (the store
restarted or flushed its scripts: the call did not run) it is sent again
with ``EVAL``, which loads the script. Commands are packed by hiredis
(:class:`_HiredisPacking`). Tried and measured worse: pipelining the calls
of one event-loop iteration together (client-side auto-pipelining, as
ioredis does): batches of ~3.5 calls under ``wrk`` load, yet 10-15% fewer
events/s than one ``EVALSHA`` per call (redis-py's pipeline costs more per
call than it saves).

``Store.record_online`` keeps the *online-writer start times* in the hash
:data:`ONLINE_KEY` (named in ``compiler.algebra.storekeys``): per aggregate
state (field: definition hash), the earliest event time (epoch ms) the
online path has written into it. ``scowl backfill``
refuses a run window that would overwrite that time (SPEC §5.6) and ``scowl
status`` shows it (§6).
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

import hiredis
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from compiler.algebra.script import online_min_script
from compiler.algebra.storekeys import ONLINE_KEY


class _HiredisPacking:
    """Connection mixin: commands packed by hiredis's C packer.

    redis-py's synchronous client packs with hiredis when it is installed; its
    asyncio client joins Python bytes once per argument, which cost ~60 µs
    of a worker's CPU per 50-argument script call (``bench/serve.py``
    profile). Same bytes on the wire: hiredis encodes str (UTF-8), bytes,
    int and float (``repr``) as redis-py's ``Encoder`` does; anything else,
    and a command name holding a space (``"SCRIPT LOAD"``, which redis-py
    splits), goes to redis-py's own packer (and its ``DataError``).
    """

    def pack_command(self, *args: Any) -> list[bytes]:
        """Return the RESP bytes of one command (one chunk)."""
        if isinstance(args[0], str) and " " in args[0]:
            return super().pack_command(*args)  # type: ignore[misc]
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            return super().pack_command(*args)  # type: ignore[misc]


class StoreUnavailable(RuntimeError):
    """The store could not be reached or failed a command (the API answers 503)."""


class Store:
    """An asyncio Redis client with the event script registered.

    Args:
        url: ``redis://host:port/db`` (``SCOWL_REDIS_URL`` or the embedded server).
        timeout_s: socket timeout in seconds.
    """

    def __init__(self, url: str, timeout_s: float = 2.0):
        self.url = url
        self.client = aioredis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, decode_responses=False
        )
        pool = self.client.connection_pool
        pool.connection_class = type("HiredisPacking" + pool.connection_class.__name__,
                                     (_HiredisPacking, pool.connection_class), {})
        #: script source -> its SHA1 (one per event type and round)
        self.shas: dict[str, str] = {}
        self.online_script = self.client.register_script(online_min_script())

    async def run(self, script: str, keys: Sequence[str], argv: Sequence[Any]) -> list:
        """Run a round script once (``EVALSHA``; ``EVAL`` after a ``NOSCRIPT`` error).

        Args:
            script: the Lua source (``compiler.algebra.lua``).
            keys: Redis keys (KEYS).
            argv: the arguments (ARGV; see ``compiler.algebra.lua``).

        Returns:
            The script's reply (``[id flag, one result per read]``).

        Raises:
            StoreUnavailable: connection, timeout or server error. The script
                is atomic, so either all of its writes happened or none.
        """
        sha = self.shas.get(script)
        if sha is None:
            sha = self.shas[script] = hashlib.sha1(script.encode()).hexdigest()
        try:
            try:
                return await self.client.evalsha(sha, len(keys), *keys, *argv)
            except NoScriptError:  # the store restarted or flushed its scripts: this call did not run
                return await self.client.eval(script, len(keys), *keys, *argv)
        except (RedisConnectionError, RedisTimeoutError, OSError) as e:
            raise StoreUnavailable(f"store unreachable: {e}") from e
        except RedisError as e:
            raise StoreUnavailable(f"store error: {e}") from e

    async def record_online(self, starts: Mapping[str, int]) -> None:
        """Lower the online-writer start times of some states to ``starts`` (module docstring).

        Each field of :data:`ONLINE_KEY` becomes ``min(current, starts[h])``,
        atomically; one command for all of them.

        Args:
            starts: definition hash -> event time in epoch ms.

        Raises:
            StoreUnavailable: connection, timeout or server error.
        """
        args: list[Any] = []
        for h, ms in starts.items():
            args += [h, int(ms)]
        try:
            await self.online_script(keys=[ONLINE_KEY], args=args)
        except (RedisConnectionError, RedisTimeoutError, OSError) as e:
            raise StoreUnavailable(f"store unreachable: {e}") from e
        except RedisError as e:
            raise StoreUnavailable(f"store error: {e}") from e

    async def ping(self) -> bool:
        """Return whether the store answers ``PING``."""
        try:
            return bool(await self.client.ping())
        except (RedisError, OSError):
            return False

    async def close(self) -> None:
        """Close the connection pool."""
        await self.client.aclose()
