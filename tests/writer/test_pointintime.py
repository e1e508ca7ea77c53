"""Point-in-time aggregate values in Spark equal what the online API returned (SPEC §2.4, §3.2, §3.3, §5.6).

A topology whose aggregates take other aggregates as values, keys, ``where``
inputs and ``after`` times (up to three stages deep, across two event
types) is run over a seeded random timeline of 1000 events with same-ms
ties, once through ``POST /batch`` (real Redis) and once through
``writer.pointintime``; every aggregate of every event must agree (floats
within 1e-9 relative, SPEC §3.3). Covered: Count, Sum, Average, Min, Max,
CountUnique, Latest (struct), LatestTime, First, FirstTime, Sequence with
limit, Set of tuples, DecayedSum and DecayedAverage of staged values, and
DecayedCount (in ``where``) and HyperLogLog (as a value) as staged inputs;
``after`` an aggregate time, ``exclusive``, a cross-event
``<login, purchase>`` scope, an aggregate as key and in ``where``, a struct
field of an aggregate as a value, null keys. Smaller tests: a cross-event
cycle is refused, ``with_features`` without a history refuses aggregates,
``lookback_ms``, and the Spark HyperLogLog estimate equals Python's.

Runtime: ~35-45 s on 2 cores (Spark's per-aggregate jobs dominate).
"""

from __future__ import annotations

import random

import orjson
import pytest

from compiler import compile_sources
from compiler.typesystem import parse_type, to_json_value
from tests.e2e.helpers import close, displaced, post_all
from writer.features import StagedFeatureError, with_features
from writer.pointintime import PointInTime, lookback_ms
from writer.sources import read_events

TOPOLOGY = """
event login
user := $.user as string
ip := $.ip as string?
amount := $.amount as float?
n_ip := Count(by ip last 1 hour)
n_user_ex := Count(by user last 2 hours exclusive)
busy := n_ip > 2
worst_user := Max(n_ip by user last 1 day)
sum_busy := Sum(n_ip by user where busy last 6 hours)
last_pair := Latest(n_ip, ip by user exclusive)
prev_n := last_pair.n_ip
first_worst := First(worst_user by ip last 2 hours)
uniq := CountUnique(n_ip, user by ip last 1 hour)
seq := Sequence(prev_n by user last 3 hours limit 4)
since := LatestTime(by ip last 1 day exclusive)
after_cnt := Count(by user after since last 1 day)
score := n_ip * 2
cross := Sum<login, purchase>(score by user last 1 day)
avg_amt := Average(amount by n_user_ex where busy last 1 hour)
set_n := Set(n_ip, ip by user last 1 day limit 5)
dec := DecayedCount(by user last 1 hour)
hll := HyperLogLog(user by ip last 1 day)
max_hll := Max(hll by user where dec > 1.5 last 1 day)

event purchase
user := $.user as string
total := $.total as int
n_p := Count(by user last 1 day)
score := n_p + total
spent := Sum<purchase>(score by user where n_p > 1 last 12 hours)
cross_p := Latest<login>(worst_user by user last 1 day)
min_s := Min(score by user last 1 day)
first_busy := FirstTime<login>(by user where busy last 6 hours)
d_avg := DecayedAverage<login>(n_ip by user last 1 hour)
d_sum := DecayedSum(score by user last 1 day)
"""

START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def make_events(n: int = 1000, seed: int = 11) -> list[dict]:
    """A timeline in event-time order with same-ms ties, null ips and a unicode/separator user."""
    rng = random.Random(seed)
    users = ["u0", "u1", "u2", "u3", "ü|{x}"]
    ips = ["10.0.0.1", "10.0.0.2", "10.0.0.3", None]
    t = START_MS
    out = []
    for _ in range(n):
        t += rng.choice([0, 0, 1, 1000, 60_000, 300_000, 900_000])
        if rng.random() < 0.8:
            out.append({"_type": "login", "_time": t, "user": rng.choice(users), "ip": rng.choice(ips),
                        "amount": rng.choice([None, round(rng.uniform(0, 100), 2)])})
        else:
            out.append({"_type": "purchase", "_time": t, "user": rng.choice(users), "total": rng.randint(1, 1000)})
    return out


def python_value(value, type_name: str):
    """A Spark result (Row structs, lists) as the Python run-time value of ``type_name``."""
    if value is None:
        return None
    kind, param = parse_type(type_name)
    if kind == "array":
        return [python_value(v, param) for v in value]
    if kind == "struct":
        return {name: python_value(value[name], t) for name, t in param}
    if kind == "tuple":
        return [python_value(value[i], t) for i, t in enumerate(param)]
    return value


@pytest.fixture(scope="module")
def plan():
    result = compile_sources({"t.scowl": TOPOLOGY})
    assert result.plan is not None, result.render()
    return result.plan


@pytest.mark.parametrize("late", [False, True], ids=["in-order", "late"])
def test_point_in_time_equals_online(late, spark, redis_url, redis_cluster, plan, tmp_path):
    """Replay (point-in-time, Spark) = online on a single server = online on a 3-master cluster (SPEC §5.1).

    ``late``: the same timeline in an arrival order where events are up to
    the allowed lateness (an hour) late (SPEC §3.3): replay takes arrival
    order from the input's order (``_seq``), as the API from the requests'.
    """
    events = make_events()
    if late:
        events = displaced(events, seed=5)
        assert sum(1 for a, b in zip(events, events[1:]) if a["_time"] > b["_time"]) > 100
    online = post_all(plan, redis_url, events)
    assert post_all(plan, redis_cluster.url, events) == online
    path = tmp_path / "timeline.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    raw = read_events(spark, [path])
    pit = PointInTime(raw, plan)
    aggregates = {ev: [f for f in ep.features if f.kind == "aggregate"] for ev, ep in plan.events.items()}
    pit.prepare({ev: [f.name for f in feats] for ev, feats in aggregates.items()})
    checked = 0
    try:
        for ev, feats in sorted(aggregates.items()):
            positions = [i for i, e in enumerate(events) if e["_type"] == ev]
            for f in feats:
                rows = sorted(pit.values(ev, f.name).collect())  # by _seq: file order
                assert len(rows) == len(positions), f"{ev}.{f.name}"
                for i, row in zip(positions, rows):
                    got = to_json_value(python_value(row["value"], f.type), f.type)
                    want = online[i][f.name]
                    assert close(want, got), f"event {i} {events[i]}: {ev}.{f.name} online {want!r}, Spark {got!r}"
                    checked += 1
    finally:
        pit.release()
    assert checked == sum(len(feats) * sum(e["_type"] == ev for e in events) for ev, feats in aggregates.items())
    # the timeline exercises what it claims to: ties, null keys, non-trivial staged values
    assert sum(1 for a, b in zip(events, events[1:]) if a["_time"] == b["_time"]) > (30 if late else 100)
    assert any((o.get("first_worst") or 0) > 3 for o in online) and any(o.get("max_hll") for o in online)
    assert any(o.get("n_ip") is None for o in online) and any(o.get("seq") for o in online)


CYCLE = """
event a
k := $.k as string
x := Count<b>(by k where y > 0)

event b
k := $.k as string
y := Count<a>(by k where x > 0)
"""


def test_cross_event_cycle_is_refused(spark, tmp_path):
    result = compile_sources({"c.scowl": CYCLE})
    assert result.plan is not None, result.render()
    path = tmp_path / "c.jsonl"
    path.write_text('{"_type": "a", "_time": 1, "k": "p"}\n{"_type": "b", "_time": 2, "k": "p"}\n')
    pit = PointInTime(read_events(spark, [path]), result.plan)
    with pytest.raises(StagedFeatureError, match=r"a\.x -> b\.y -> a\.x"):
        pit.values("a", "x")
    assert lookback_ms(result.plan, "a", ["x"]) is None


def test_with_features_needs_a_history_for_aggregates(spark, plan):
    df = spark.createDataFrame([(1, 0, '{"user": "u"}')], "_time_ms long, _seq long, _raw string")
    with pytest.raises(StagedFeatureError, match="n_ip, worst_user are aggregates"):
        with_features(df, plan.events["login"], ["score", "worst_user"])
    # stage-0 features need no history
    assert "f_user" in with_features(df, plan.events["login"], ["user"]).columns


def test_lookback(plan):
    hour, day = 3_600_000, 86_400_000
    assert lookback_ms(plan, "login", ["user", "ip"]) == 0
    assert lookback_ms(plan, "login", ["n_ip"]) == hour + 1000
    # worst_user (1 day, r = 1 min) over n_ip (1 hour, r = 1 s)
    assert lookback_ms(plan, "login", ["worst_user"]) == day + 60_000 + hour + 1000
    assert lookback_ms(plan, "login", ["max_hll"]) is None  # a Decayed* filter input: all history


def test_hll_estimate_column_matches_python(spark):
    from compiler.algebra.ops import HLL_M, HLL_Q, hll_estimate
    from tests.writer.pit_oracle import hll_estimate_column

    rng = random.Random(3)
    cases = [{}]
    for n in (1, 2, 7, 100, 1000, 3000, HLL_M):
        slots = rng.sample(range(HLL_M), n)
        cases.append({s: min(HLL_Q + 1, 1 + int(rng.expovariate(0.7))) for s in slots})
    cases.append({s: 30 for s in range(HLL_M)})  # ~2^42 distinct values
    df = spark.createDataFrame([(i, list(c.values())) for i, c in enumerate(cases)], "i int, rhos array<int>")
    got = dict(df.select("i", hll_estimate_column(df["rhos"]).alias("e")).collect())
    assert got == {i: hll_estimate(c) for i, c in enumerate(cases)}


def test_prepare_computes_each_type_once_and_reports_the_first_error(spark, plan, tmp_path, monkeypatch):
    """prepare plans every type's stage-0 frame and computes it in a thread of its own: settle() leaves each
    one computed (a checkpoint: later jobs read its blocks), and a type whose frame cannot be built fails
    prepare itself with that error, the other types' jobs finished before release frees anything."""
    import writer.pointintime as pitmod

    path = tmp_path / "e.jsonl"
    path.write_text("\n".join(orjson.dumps(e).decode() for e in make_events(200)) + "\n")
    events = read_events(spark, [path])
    pit = PointInTime(events, plan)
    pit.prepare({"login": ["user", "ip", "score"], "purchase": ["user", "total", "score"]})
    pit.settle()
    for ev in ("login", "purchase"):
        frame = pit.frame(ev, ["user"])
        assert frame._jdf.queryExecution().logical().rdd().isCheckpointed()
    assert pit.frame("purchase", ["score"]).count() == sum(e["_type"] == "purchase" for e in make_events(200))
    pit.release()

    real = pitmod.with_features

    def failing(df, event, names, staged=None):
        if event.name == "purchase":
            raise ValueError("purchase cannot be built")
        return real(df, event, names, staged)

    monkeypatch.setattr(pitmod, "with_features", failing)
    pit = PointInTime(events, plan)
    with pytest.raises(ValueError, match="purchase cannot be built"):
        pit.prepare({"login": ["user"], "purchase": ["user"]})
    pit.release()
    assert pit._pending == []
