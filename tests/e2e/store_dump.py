"""Key-by-key images of a Redis store, to compare the states two runs leave (SPEC §5.6 idempotence)."""

from __future__ import annotations

import redis


def db_url(url: str, db: int) -> str:
    """Return ``url`` (``redis://host:port/N``) pointing at database ``db`` instead."""
    base, _, _ = url.rpartition("/")
    return f"{base}/{db}"


def dump_store(url: str) -> dict[bytes, tuple]:
    """Return ``{key: (type, content, has_ttl)}`` for every key of the database at ``url``.

    Content: a hash's ``{field: value}``, a sorted set's ``[(member, score)]``
    in order, a string's value. The backfill coverage hashes ``sc:cov:*``
    keep their field names (the intervals) only: their values are the
    wall-clock times of the runs.
    """
    client = redis.Redis.from_url(url)
    out: dict[bytes, tuple] = {}
    try:
        for key in client.scan_iter(count=1000):
            kind = client.type(key)
            if kind == b"hash":
                content = client.hgetall(key)
                if key.startswith(b"sc:cov:"):
                    content = sorted(content)
            elif kind == b"zset":
                content = client.zrange(key, 0, -1, withscores=True)
            elif kind == b"string":
                content = client.get(key)
            else:
                raise AssertionError(f"unexpected {kind!r} key {key!r}")
            out[key] = (kind, content, client.pttl(key) > 0)
    finally:
        client.close()
    return out


def diff_stores(a: dict, b: dict, limit: int = 5) -> str:
    """Describe (at most ``limit`` of) the differences between two :func:`dump_store` images."""
    lines = [f"only in first: {k!r}" for k in sorted(a.keys() - b.keys())[:limit]]
    lines += [f"only in second: {k!r}" for k in sorted(b.keys() - a.keys())[:limit]]
    lines += [f"differs: {k!r}: {a[k]!r} != {b[k]!r}"[:600] for k in sorted(a.keys() & b.keys()) if a[k] != b[k]][:limit]
    return "\n".join(lines)
