"""The Redis side of serving: one registered script call per round (SPEC §5.2).

``Store.run(script, keys, argv)`` runs one generated round script
(``compiler.algebra.lua``) with ``EVALSHA``, registered once per source
(redis-py's ``Script`` object loads it again after a ``NOSCRIPT`` error), so
an event costs one network round trip in the common case.

``Store.record_online`` keeps the *online-writer start times* in the hash
:data:`ONLINE_KEY` (named in ``compiler.algebra.storekeys``): per aggregate
state (field: definition hash), the earliest event time (epoch ms) the
online path has written into it. ``scowl backfill``
refuses a run window that would overwrite that time (SPEC §5.6) and ``scowl
status`` shows it (§6).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from compiler.algebra.script import online_min_script
from compiler.algebra.storekeys import ONLINE_KEY


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
        #: script source -> registered script (one per event type and round)
        self.scripts: dict[str, Any] = {}
        self.online_script = self.client.register_script(online_min_script())

    async def run(self, script: str, keys: Sequence[str], argv: Sequence[Any]) -> list:
        """Run a round script once.

        Args:
            script: the Lua source (``compiler.algebra.lua``); registered on first use.
            keys: Redis keys (KEYS).
            argv: the arguments (ARGV; see ``compiler.algebra.lua``).

        Returns:
            The script's reply (``[id flag, one result per read]``).

        Raises:
            StoreUnavailable: connection, timeout or server error. The script
                is atomic, so either all of its writes happened or none.
        """
        registered = self.scripts.get(script)
        if registered is None:
            registered = self.scripts[script] = self.client.register_script(script)
        try:
            return await registered(keys=keys, args=argv)
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
