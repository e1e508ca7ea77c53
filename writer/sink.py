"""Pipelined writes of store-image rows to Redis from the executors (SPEC §5.6).

Rows come from ``writer.tiles.state_rows`` (columns ``rk``, ``field``,
``value``, ``mode``, ``ttl_ms``). Each executor partition opens one
connection and sends pipelines of :data:`BATCH` rows (no MULTI: each command
is atomic on its own, and every mode is idempotent, so a retried partition
converges to the same state):

* ``set``    -> ``HSET rk field value`` (a tile complete within the run window)
* ``seen``   -> ``event.lua`` op ``SEEN`` (keep the max last-seen ms)
* ``latest`` -> ``event.lua`` op ``LA`` (newer write wins)
* ``log``    -> write log (sorted set, ``ops.log_member`` layout): drop the
  members scored in the run window ``[start, end)``, add the run's members,
  keep the ``n`` highest (field ``<start>:<end>:<n>``, value a JSON list of
  ``{"t", "m"}``)

and ``PEXPIRE rk ttl_ms`` once per hash per pipeline.
"""

from __future__ import annotations

from typing import Iterable

BATCH = 2000


def write_partition(rows: Iterable, url: str) -> int:
    """Write one partition of rows; return how many were written.

    Args:
        rows: ``pyspark.sql.Row`` objects with the columns above.
        url: Redis URL.

    Raises:
        redis.RedisError: the store failed (Spark retries the task; writes are idempotent).
    """
    import orjson
    import redis

    from compiler.algebra.script import event_script

    client = redis.Redis.from_url(url, socket_timeout=60)
    script = client.register_script(event_script())
    n = 0
    pipe = client.pipeline(transaction=False)
    expiring: dict[str, int] = {}
    pending = 0

    def flush() -> None:
        nonlocal pipe, pending
        for rk, ttl in expiring.items():
            pipe.pexpire(rk, ttl)
        pipe.execute()
        expiring.clear()
        pipe = client.pipeline(transaction=False)
        pending = 0

    for row in rows:
        mode = row["mode"]
        if mode == "set":
            pipe.hset(row["rk"], row["field"], row["value"])
        elif mode == "seen":
            script(keys=[row["rk"]], args=["SEEN", 1, row["field"], row["value"]], client=pipe)
        elif mode == "latest":
            t, _, j = row["value"].partition("\t")
            script(keys=[row["rk"]], args=["LA", 1, t, j], client=pipe)
        elif mode == "log":
            start, end, keep = row["field"].split(":")
            pipe.zremrangebyscore(row["rk"], start, f"({end}")
            members = orjson.loads(row["value"])
            if members:
                pipe.zadd(row["rk"], {m["m"]: m["t"] for m in members})
            pipe.zremrangebyrank(row["rk"], 0, -(int(keep) + 1))
        else:  # pragma: no cover - rows come from state_rows
            raise ValueError(f"unknown row mode {mode}")
        expiring[row["rk"]] = int(row["ttl_ms"])
        n += 1
        pending += 1
        if pending >= BATCH:
            flush()
    flush()
    client.close()
    return n
