"""Key-by-key images of a Redis store, to compare the states two runs leave (SPEC §5.6 idempotence).

Two runs over the same events leave the same keys, types, expiries, ints,
strings, sorted-set members and scores, byte for byte; but a float *sum*
(``Sum`` of floats, ``Average``'s ``.s``, ``Decayed*``'s ``dv``/``dw``) is
added up in an order that depends on how Spark split the rows into
partitions and in which order their partial sums met, so two runs can differ
in its last bits (``34.019999999999996`` against ``34.02``). :func:`diff_stores`
compares exactly that kind of field -- and only it, as the plan says which
fields hold one (:func:`float_sum_fields`, from the layout in
``compiler/algebra/ops.py``) -- at :data:`FLOAT_REL_TOL`, and everything else
exactly.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

import redis

from compiler.algebra.ops import AverageOp, DecayedOp, SumOp, make_op
from compiler.algebra.windows import ALLOWED_LATENESS_S, LEVEL_CODE
from compiler.plan import Plan

#: Relative tolerance of float sums (SPEC §3.3's 1e-9, as ``tests.e2e.helpers.close``).
FLOAT_REL_TOL = 1e-9
#: Absolute tolerance of float sums near zero (as ``tests.e2e.helpers.close``).
FLOAT_ABS_TOL = 1e-12

_TILE = "[" + "".join(sorted(LEVEL_CODE.values())) + "]-?[0-9]+"


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

    A Redis Cluster's image holds the keys of every primary (SPEC §5.1).

    Raises:
        AssertionError: a key of another type (list, set, stream).
    """
    from writer.redisio import is_cluster

    if not is_cluster(url):
        return _dump_node(redis.Redis.from_url(url))
    cluster = redis.RedisCluster.from_url(url)
    out: dict[bytes, tuple] = {}
    try:
        for node in cluster.get_primaries():
            part = _dump_node(redis.Redis(host=node.host, port=node.port))
            assert not set(part) & set(out)
            out.update(part)
    finally:
        cluster.close()
    return out


def _dump_node(client: redis.Redis) -> dict[bytes, tuple]:
    """:func:`dump_store` of one server's keys (closes ``client``)."""
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


def float_sum_fields(plan: Plan) -> dict[bytes, Callable[[bytes], bool]]:
    """Return, per definition hash (ASCII bytes), which hash fields of its state keys hold float sums.

    From the layout of ``compiler/algebra/ops.py``: the tile fields of a
    ``Sum`` over a non-int value (``<level><index>``), the ``.s`` component
    of ``Average`` tiles, and ``dv``/``dw`` of ``Decayed*``. States with none
    (``Count``, int ``Sum``, ``Min``/``Max``, ``First``/``Latest``,
    ``CountUnique``, ``HyperLogLog``, write logs) are left out.

    Args:
        plan: the compiled plan the store was written for.

    Returns:
        ``{definition hash: predicate on a field name}``.
    """
    out: dict[bytes, Callable[[bytes], bool]] = {}
    for h, state in plan.states.items():
        if state.limit is not None:
            continue  # a write log: sorted set of exact members and times
        op = make_op(state.function, state.value_types, window_s=state.window_s)
        if isinstance(op, SumOp) and not op.is_int:
            out[h.encode()] = re.compile(f"{_TILE}".encode()).fullmatch
        elif isinstance(op, AverageOp):
            out[h.encode()] = re.compile(rf"{_TILE}\.s".encode()).fullmatch
        elif isinstance(op, DecayedOp):
            out[h.encode()] = {b"dv", b"dw"}.__contains__
    return out


def _state_hash(key: bytes) -> bytes | None:
    """The definition hash of a state key ``sc:{<entity key>}:<hash>``, else ``None``."""
    if key.startswith(b"sc:{"):
        return key.rpartition(b":")[2]
    return None


def _close_floats(a: bytes, b: bytes) -> bool:
    """Whether two stored float texts are within :data:`FLOAT_REL_TOL` (texts that are not floats: never)."""
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isclose(x, y, rel_tol=FLOAT_REL_TOL, abs_tol=FLOAT_ABS_TOL)


def _diff_content(a: Any, b: Any, is_float: Callable[[bytes], bool] | None, limit: int) -> list[str]:
    """The differences between two contents of one key, one string each (empty: equal).

    Hash fields are compared one by one (a field :func:`float_sum_fields`
    names at :data:`FLOAT_REL_TOL`), sorted sets by member and score, other
    contents (strings, ``sc:cov:*`` field lists) as wholes.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for f in sorted(a.keys() | b.keys()):
            x, y = a.get(f), b.get(f)
            if x == y or (x is not None and y is not None and is_float is not None and is_float(f)
                          and _close_floats(x, y)):
                continue
            out.append(f"{f!r}: {x!r} != {y!r}" if x is not None and y is not None
                       else f"{f!r}: {'<missing>' if x is None else repr(x)} != "
                            f"{'<missing>' if y is None else repr(y)}")
        return out[:limit] + ([f"... {len(out) - limit} more fields"] if len(out) > limit else [])
    if a == b:
        return []
    if isinstance(a, list) and isinstance(b, list) and all(isinstance(m, tuple) for m in a + b):
        sa, sb = dict(a), dict(b)
        out = [f"member {m!r}: score {sa.get(m, '<missing>')!r} != {sb.get(m, '<missing>')!r}"
               for m in sorted(sa.keys() | sb.keys()) if sa.get(m) != sb.get(m)]
        if not out:
            out = ["same members and scores in another order"]
        return out[:limit] + ([f"... {len(out) - limit} more members"] if len(out) > limit else [])
    return [f"{a!r} != {b!r}"]


def diff_stores(a: dict, b: dict, plan: Plan | None = None, limit: int = 5) -> str:
    """Describe the differences between two store images; ``""`` when they are equal.

    Equal means: the same keys; per key the same type, expiry presence and
    content, where a float-sum field (:func:`float_sum_fields` of ``plan``)
    may differ by :data:`FLOAT_REL_TOL` relative; without ``plan`` every
    field compares exactly. Each differing key is shown with only its
    differing fields, both sides in full.

    Args:
        a, b: images by :func:`dump_store` (``{key: (type, content, has_ttl)}``)
            or bare contents (``{key: {field: value}}`` for hashes,
            ``{key: [(member, score)]}`` for sorted sets), both of one kind.
        plan: the plan the stores were written for, or ``None``.
        limit: at most this many keys per kind of difference, and fields per key.

    Returns:
        One line per difference (``only in first/second``, ``differs``), with
        a count line when some were left out.
    """
    floats = float_sum_fields(plan) if plan is not None else {}
    lines = []
    only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
    lines += [f"only in first: {k!r}: {a[k]!r}"[:300] for k in only_a[:limit]]
    lines += [f"only in second: {k!r}: {b[k]!r}"[:300] for k in only_b[:limit]]
    differing = 0
    for k in sorted(a.keys() & b.keys()):
        x, y = a[k], b[k]
        if isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y) == 3:
            if x[0] != y[0] or x[2] != y[2]:
                found = [f"type/expiry {x[0]!r}/ttl={x[2]} != {y[0]!r}/ttl={y[2]}"]
            else:
                found = _diff_content(x[1], y[1], floats.get(_state_hash(k) or b""), limit)
        else:
            found = _diff_content(x, y, floats.get(_state_hash(k) or b""), limit)
        if found:
            differing += 1
            if differing <= limit:
                lines.append(f"differs: {k!r}:\n    " + "\n    ".join(found))
    if len(only_a) > limit or len(only_b) > limit or differing > limit:
        lines.append(f"({len(only_a)} keys only in first, {len(only_b)} only in second, {differing} differ)")
    return "\n".join(lines)


def assert_same_store(a: dict, b: dict, plan: Plan | None = None) -> None:
    """Assert :func:`diff_stores` finds no difference.

    Raises:
        AssertionError: with the differences as the message.
    """
    diff = diff_stores(a, b, plan)
    if diff:
        raise AssertionError(f"stores differ:\n{diff}")


def live_part(dump: dict, plan: Plan, now_ms: int, lateness_s: int = ALLOWED_LATENESS_S) -> dict:
    """A store image (:func:`dump_store`) without what pruning may or may not have removed yet.

    Pruning walks a hash with ``HSCAN`` a few hundred fields per write, in the
    hash table's order, which depends on the server's random hash seed: two
    servers given the same writes prune in another order. Left out: the scan
    cursor ``_c``, the tile fields that end before ``now - W - r - L`` (no
    read at or after ``now - L`` uses them, SPEC 5.3, §3.3; ``L`` the allowed
    lateness) and the raw tiles of late reads (upper-case level codes) that
    end before ``now - L``.
    """
    size_of = {code: s * 1000 for s, code in LEVEL_CODE.items()}
    size_of.update({code.upper(): s * 1000 for s, code in LEVEL_CODE.items()})
    out = {}
    for key, (kind, content, ttl) in dump.items():
        state = plan.states.get(key.rsplit(b":", 1)[-1].decode()) if key.startswith(b"sc:{") else None
        if kind == b"hash" and state is not None:
            cutoff = now_ms - (state.window_s + state.resolution_s + lateness_s) * 1000
            kept = {}
            for f, v in content.items():
                name = f.decode()
                size = size_of.get(name[:1])
                idx = name[1:].split(".")[0]
                cut = now_ms - lateness_s * 1000 if name[:1].isupper() else cutoff
                if name == "_c" or (size and idx.lstrip("-").isdigit() and (int(idx) + 1) * size <= cut):
                    continue
                kept[f] = v
            content = kept
        out[key] = (kind, content, ttl)
    return out
