"""``writer.pitreads``: exact tile covers, and each strategy equals the quadratic oracle (SPEC §3.2, §3.3).

* :func:`cover_tiles` (hypothesis over ranges, ladders, negative times): the
  tiles are aligned, disjoint, cover ``[lo, hi)`` exactly, and are as few as
  ``compiler.algebra.windows.cover`` (the store's greedy cover) uses.
* Every function x the clauses that pick a strategy (tiles, ranks,
  recurrence), on a timeline with a hot global key, same-ms ties, events at
  tile and window boundaries and a gap of more than
  :data:`writer.pitreads.EPOCH_WINDOWS` windows: the values of the
  ``"sweep"`` method (the default, ``writer.sweep``, all aggregates of a
  stage in one batch) and of the ``"linear"`` method both equal
  ``method="join"`` (the direct form of the rule).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import compile_sources
from compiler.algebra.windows import cover
from tests.e2e.helpers import close
from writer.pitreads import EPOCH_WINDOWS, cover_tiles, ladder_ms
from writer.pointintime import PointInTime
from writer.sources import read_events

WINDOWS_S = (10, 600, 86_400, 30 * 86_400, 400 * 86_400)
LADDERS = [ladder_ms(w) for w in WINDOWS_S]


@settings(max_examples=8, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(range(len(LADDERS))), st.integers(-10**7, 10**7),
                          st.floats(-0.01, 1.01)), min_size=1, max_size=60))
def test_cover_tiles_is_exact_and_minimal(spark, cases):
    rows = []
    for i, (li, a, frac) in enumerate(cases):
        r = LADDERS[li][0]
        span = int(frac * WINDOWS_S[li] * 1000 / r)  # up to one window of resolution tiles
        rows.append((i, li, a * r, (a + span) * r))
    df = spark.createDataFrame(rows, "id long, li long, lo long, hi long")
    got: dict[int, list[tuple[int, int]]] = {i: [] for i, *_ in rows}
    for li, sizes in enumerate(LADDERS):
        part = cover_tiles(df.where(df.li == li).drop("li"), "lo", "hi", sizes)
        for row in part.collect():
            got[row["id"]].append((row["z"], row["i"]))
    for i, li, lo, hi in rows:
        sizes = LADDERS[li]
        tiles = sorted((t * z, (t + 1) * z) for z, t in got[i])
        assert all(z in sizes for z, _ in got[i])
        if hi <= lo:
            assert tiles == []
            continue
        assert tiles[0][0] == lo and tiles[-1][1] == hi
        assert all(a[1] == b[0] for a, b in zip(tiles, tiles[1:])), "gaps or overlaps"
        r = sizes[0]
        greedy = list(cover(lo // r, hi // r - 1, r // 1000, tuple(z // 1000 for z in sizes)))
        assert len(tiles) == len(greedy)


TOPOLOGY = """
event login
user := $.user as string?
ip := $.ip as string?
x := $.x as int?
f := $.f as float?
s := $.s as string?
a := $.a as time?
c_all := Count()
c_by := Count(by user last 10 minutes)
c_after := Count(by ip after a last 1 day)
c_lim := Count(by user last 90 seconds limit 3)
c_ex := Count(last 10 seconds exclusive)
sum_i := Sum(x by ip last 86401 seconds)
sum_f := Sum(f last 50 days)
sum_lim := Sum(x limit 2)
avg := Average(f by user last 1 hour)
mn := Min(s by ip last 10 minutes)
mx := Max(x after a last 1 day)
cu := CountUnique(user by ip last 10 minutes)
cu2 := CountUnique(x, s last 400 days)
cu_lim := CountUnique(s by ip limit 3)
hll := HyperLogLog(user, x last 1 day)
fst := First(x, s by ip last 10 minutes)
fst_after := First(s after a last 50 days)
fst_lim := First(x by user limit 2)
ft := FirstTime(by user last 1 day exclusive)
lt := Latest(x, s by ip last 90 seconds)
lt_ex := Latest(f by user exclusive)
ltt := LatestTime(after a last 1 day)
seq := Sequence(x by ip last 1 day limit 3)
seq_all := Sequence(s)
st := Set(s, x by user last 10 minutes)
dc := DecayedCount(last 10 seconds)
dsum := DecayedSum(f by user last 1 minute)
davg := DecayedAverage(x by ip last 10 seconds exclusive)

event check
user := $.user as string?
ip := $.ip as string?
a := $.a as time?
q_cnt := Count<login>(by ip as user last 10 minutes)
q_first := First<login>(x by user after a last 1 day)
q_seq := Sequence<login>(s last 90 seconds limit 4)
q_dec := DecayedSum<login>(x by user last 1 minute)
"""

T0 = 1_357_000_000_000


def _timeline(seed: int, n: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    t = T0
    for i in range(n):
        step = rng.choice([0, 0, 1, 999, 1000, 1001, 59_999, 60_000, 7_000, 250_000])
        if i == n // 2:
            step = EPOCH_WINDOWS * 60_000 * 3  # a silence of many decay windows (epoch carry)
        t += step
        ev = {"_type": rng.choice(["login"] * 4 + ["check"]), "_time": t,
              "user": rng.choice(["u1", "u2", "u3", None, ""]), "ip": rng.choice(["i1", "i2", None]),
              "a": rng.choice([None, t, t - 60_000, t - 90_000_000, t + 5, (t // 60_000) * 60_000])}
        if ev["_type"] == "login":
            ev.update(x=rng.choice([None, 1, 2, -3, 2**62]) if rng.random() < 0.05 else rng.choice([None, 1, 2, -3, 7]),
                      f=rng.choice([None, 0.5, 1e-3, -2.25, 10.0]), s=rng.choice([None, "a", "b", "ü", ""]))
        out.append(ev)
    return out


@pytest.mark.parametrize("method", ["sweep", "linear"])
def test_linear_strategies_equal_the_join_oracle(spark, tmp_path, method):
    """Every aggregate's value for every event equals the quadratic join's (floats within 1e-9)."""
    import orjson

    result = compile_sources({"t.scowl": TOPOLOGY})
    assert result.plan is not None, result.render()
    plan = result.plan
    events = _timeline(7, 700)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    raw = read_events(spark, [path]).cache()
    linear, oracle = PointInTime(raw, plan, method=method), PointInTime(raw, plan, method="join")
    if method == "sweep":  # the whole batch at once, as replay asks for it
        linear.prefetch({ev: [f.name for f in ep.features] for ev, ep in plan.events.items()})
    checked = 0
    for ev, ep in plan.events.items():
        for f in ep.features:
            if f.kind != "aggregate":
                continue
            a = dict(linear.values(ev, f.name).collect())
            b = dict(oracle.values(ev, f.name).collect())
            assert a.keys() == b.keys()
            bad = {k: (a[k], b[k]) for k in a if not close(_plain(a[k]), _plain(b[k]))}
            assert not bad, f"{ev}.{f.name}: {dict(list(bad.items())[:5])}"
            checked += len(a)
    assert checked > 700 * 20


def _plain(v):
    if hasattr(v, "asDict"):
        return {k: _plain(x) for k, x in v.asDict().items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def test_unknown_method_is_refused(spark):
    df = spark.createDataFrame([], "_type string, _time_ms long, _seq long, _raw string")
    with pytest.raises(ValueError, match="unknown point-in-time method"):
        PointInTime(df, compile_sources({"t.scowl": TOPOLOGY}).plan, method="fast")
