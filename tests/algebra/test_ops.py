"""Merge algebra laws and tiles-vs-oracle (SPEC §2.4, §3.2), with hypothesis."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.algebra.ops import make_op, tile_field
from compiler.algebra.windows import counted_range, cover, levels_s, resolution_s, tile_index
from tests.algebra.oracle import aggregate, counts

FUNCS = [
    ("Count", ("int",)),
    ("Sum", ("int",)),
    ("Sum", ("float",)),
    ("Average", ("float",)),
    ("Min", ("int",)),
    ("Max", ("string",)),
    ("Min", ("time",)),
]

values_for = {
    "int": st.integers(min_value=-(2**62), max_value=2**62),
    "float": st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).map(lambda x: round(x, 3)),
    "string": st.text(max_size=4),
    "time": st.integers(min_value=0, max_value=2 * 10**12),
}


def close(a, b):
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


@settings(max_examples=60)
@given(data=st.data(), fi=st.integers(min_value=0, max_value=len(FUNCS) - 1))
def test_merge_laws(data, fi):
    fn, types = FUNCS[fi]
    op = make_op(fn, types)
    xs = [data.draw(st.lists(values_for[types[0]], max_size=5)) for _ in range(3)]
    irs = []
    for vals in xs:
        ir = op.init()
        for v in vals:
            ir = op.update(ir, (v,), 0)
        irs.append(ir)
    a, b, c = irs
    fin = op.finalize
    assert close(fin(op.merge(op.merge(a, b), c)), fin(op.merge(a, op.merge(b, c))))
    assert close(fin(op.merge(a, b)), fin(op.merge(b, a)))
    assert close(fin(op.merge(op.init(), a)), fin(a))
    # storage round trip (empty partials are never stored)
    if xs[0]:
        assert close(fin(op.decode(op.encode(a))), fin(a))


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    fi=st.integers(min_value=0, max_value=len(FUNCS) - 1),
    w=st.sampled_from([5, 600, 3600, 2 * 86400]),
)
def test_tiles_equal_oracle(data, fi, w):
    fn, types = FUNCS[fi]
    op = make_op(fn, types)
    r = resolution_s(w)
    base = 1_600_000_000_000
    span = 3 * w * 1000
    writes = sorted(
        data.draw(st.lists(st.tuples(st.integers(0, span), values_for[types[0]]), max_size=30)),
        key=lambda x: x[0],
    )
    writes = [(base + s, (v,)) for s, v in writes]
    t = base + data.draw(st.integers(0, span))
    # online tiles: every write updates one tile per level (only writes up to t, in order)
    tiles: dict[str, object] = {}
    for s, vals in writes:
        if s > t:
            continue
        for size in levels_s(w):
            f = tile_field(size, tile_index(s, size))
            tiles[f] = op.update(tiles.get(f, op.init()), vals, s)
    lo, hi = counted_range(t, w)
    ir = op.init()
    for size, idx in cover(lo, hi, r, levels_s(w)):
        f = tile_field(size, idx)
        if f in tiles:
            ir = op.merge(ir, op.decode(op.encode(tiles[f])))
    expected = aggregate(fn, [(s, v) for s, v in writes if counts(s, t, w, r)])
    assert close(op.finalize(ir), expected)


def test_lua_cover_matches_python(redis_url):
    """event.lua's T op reads exactly the fields of windows.cover (same order)."""
    import random
    import re

    import redis

    from compiler.algebra.script import event_script

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    script = client.register_script(event_script())
    rng = random.Random(3)
    for _ in range(300):
        w = rng.choice([1, 7, 600, 3600, 3 * 3600, 86400, 7 * 86400, 30 * 86400])
        r = resolution_s(w)
        sizes = levels_s(w)
        t = rng.randint(-10**11, 2 * 10**12)
        lo, hi = counted_range(t, w)
        fields = [tile_field(size, idx) + c for size, idx in cover(lo, hi, r, sizes) for c in ("", ".x")]
        client.delete("h")
        if fields:
            client.hset("h", mapping={f: f for f in fields})
        got = script(keys=["h"], args=["T", 1, lo, hi, r, len(sizes), *sizes, 2, "", ".x"])[0]
        assert got == fields, (w, t)


def test_event_lua_prune_drops_exactly_the_tiles_ending_by_the_cutoff(redis_url):
    """event.lua's X op (the stream's prune, common.lua dead_tiles): when due, it deletes every tile field
    (any level, with or without a component suffix, negative indices too) that ends at or before
    ms - W - r, and ``_m``; it keeps later tiles, serving's raw tiles (upper-case codes), bookkeeping and
    Decayed fields; it sets the next ``_p`` and the TTL (SPEC §5.3)."""
    import random
    import re

    import redis

    from compiler.algebra.script import event_script
    from compiler.algebra.windows import LEVEL_CODE

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    script = client.register_script(event_script())
    rng = random.Random(11)
    size_of = {code: s * 1000 for s, code in LEVEL_CODE.items()}
    for _ in range(60):
        w, r = rng.choice([(600, 1), (3600, 1), (86400, 60), (7 * 86400, 60)])
        ms = rng.choice([rng.randint(-10**11, 10**11), rng.randint(10**12, 2 * 10**12)])
        cutoff = ms - w * 1000 - r * 1000
        fields = {"_p": str(ms - rng.randint(0, 10**6)), "_m": "5", "_t": "7", "dt": "1", "dv": "2.5", "bw": "3"}
        for _ in range(rng.randint(0, 300)):
            code = rng.choice(list(size_of))
            size = size_of[code]
            idx = cutoff // size + rng.randint(-40, 40)
            fields[f"{code}{idx}{rng.choice(['', '.s', '.c'])}"] = "1"
            fields[f"{code.upper()}{idx}"] = "r"  # a raw tile of serving's: never the stream's to prune
        client.delete("h")
        client.hset("h", mapping=fields)
        script(keys=["h"], args=["X", 1, 86_400_000, ms, w * 1000, r * 1000, 1000])
        left = client.hgetall("h")
        def dead(f: str) -> bool:
            m = re.fullmatch(r"([a-z])(-?\d+)(\.[sc])?", f)
            return bool(m) and m.group(1) in size_of and (int(m.group(2)) + 1) * size_of[m.group(1)] <= cutoff

        expected = {f for f in fields if not dead(f)}  # _p: the pass was due
        expected.discard("_m")
        assert set(left) == expected, sorted(set(left) ^ expected)[:10]
        assert left["_p"] == str(ms + 1000) and 0 < client.pttl("h") <= 86_400_000
