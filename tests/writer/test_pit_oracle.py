"""The sweep equals the quadratic join oracle on every function and clause (SPEC §3.2, §3.3).

Every function x clause (window, ``after``, ``limit``, ``exclusive``, cross-
event scopes), on a timeline with a hot global key, same-ms ties, events at
tile and window boundaries and a gap of more than
:data:`compiler.algebra.arrow.EPOCH_WINDOWS` windows: the values of
``writer.pointintime.PointInTime`` (``writer.sweep`` with the Arrow kernels,
all aggregates of a stage in one batch, as replay asks for them) equal
``tests/writer/pit_oracle.JoinPointInTime`` (each read joined to its key's
writes: the direct form of the rule).
"""

from __future__ import annotations

import random

from compiler import compile_sources
from compiler.algebra.arrow import EPOCH_WINDOWS
from tests.e2e.helpers import close
from tests.writer.pit_oracle import JoinPointInTime
from writer.pointintime import PointInTime
from writer.sources import read_events

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


def replay_equals_join(spark, plan, events: list[dict], path) -> int:
    """Assert that every aggregate of every event of ``events`` (written to ``path``) has the same value
    in the sweep (``PointInTime``, all aggregates prefetched in one batch, as replay does) and in the
    quadratic join oracle (floats within 1e-9); return how many values were compared."""
    import orjson

    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    raw = read_events(spark, [path]).cache()
    swept, oracle = PointInTime(raw, plan), JoinPointInTime(raw, plan)
    swept.prefetch({ev: [f.name for f in ep.features] for ev, ep in plan.events.items()})  # one batch, as replay
    checked = 0
    for ev, ep in plan.events.items():
        for f in ep.features:
            if f.kind != "aggregate":
                continue
            a = dict(swept.values(ev, f.name).collect())
            b = dict(oracle.values(ev, f.name).collect())
            assert a.keys() == b.keys(), f"{ev}.{f.name}: rows differ"
            bad = {k: (a[k], b[k]) for k in a if not close(_plain(a[k]), _plain(b[k]))}
            assert not bad, f"{ev}.{f.name}: {dict(list(bad.items())[:5])}"
            checked += len(a)
    raw.unpersist()
    return checked


def test_sweep_equals_the_join_oracle(spark, tmp_path):
    """Every aggregate's value for every event equals the quadratic join's (floats within 1e-9)."""
    result = compile_sources({"t.scowl": TOPOLOGY})
    assert result.plan is not None, result.render()
    assert replay_equals_join(spark, result.plan, _timeline(7, 700), tmp_path / "t.jsonl") > 700 * 20


def _plain(v):
    if hasattr(v, "asDict"):
        return {k: _plain(x) for k, x in v.asDict().items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v
