"""Aggregates inside expressions (SPEC §2.4) on every engine, against the reference.

Sumatra's own examples -- ``Sum(..) - Sum(..)``, ``Days(EventTime() -
LatestTime<other>(..))``, ``DecayedSum(..) / DecayedCount(..)``,
``Count(.. exclusive) = 0`` -- and aggregates in the other expression
positions (``If``/``Coalesce`` arguments, string concatenation, ``and``,
a filter over a feature that holds inline aggregates, i.e. an aggregate over
aggregates) compile to unnamed aggregate features and give, for a seeded
three-day timeline:

* online (``POST /batch``) the values of :mod:`tests.reference` for the
  plan, and the reference values of the *same topology written with named
  features* (so the lifting itself is checked against plain semantics);
* in replay (Spark), the same values, with exactly the named features as
  columns;
* after a backfill of the first day and a half, the same values online for
  the rest;
* after a stream job over the first part (a topology without the aggregate
  over aggregates, which stream refuses), the same values online for the rest;
* ``scowl status``'s state listing names the feature that contains each
  inline aggregate.

Floats are compared within 1e-9 relative (SPEC §3.3).
"""

from __future__ import annotations

import orjson
import pyarrow.parquet as pq
import pytest
import redis

from tests.e2e.helpers import close, login_purchase_events, post_all, stream_chunks
from tests.reference import reference_values
from tests.serving.helpers import compile_text
from writer.backfill import run_backfill
from writer.replay import run_replay
from writer.status import state_features, store_status

pytestmark = pytest.mark.slow

INPUTS = """\
event login
user := $.user as string
ip := $.ip as string?
amount := $.amount as float?
items := $.items as int ? 0
"""

PURCHASE = """
event purchase
user := $.user as string
total := $.total as int
"""

#: Aggregates inside expressions. ``month_money`` is the named twin of the
#: first aggregate of ``past_money`` (they must share one state).
INLINE = """\
past_money := Sum(amount by user, ip last 30 days) - Sum(amount by user, ip last 6 hours)
month_money := Sum(amount by user, ip last 30 days)
days_since := Days(EventTime() - LatestTime<purchase>(by user))
ratio := DecayedSum(amount by user last 1 hour) / DecayedCount(by user last 1 hour)
is_new := Count(by user exclusive) = 0
fresh_ip := ip is not null and Count(by ip last 1 day exclusive) = 0
share := If(Count(by ip last 1 hour) > 0, Float(Count(by user, ip last 1 hour)) / Count(by ip last 1 hour), null)
recent := Coalesce(Latest(ip by user exclusive), 'none') + '/' + String(Len(Set(ip by user last 2 hours)))
spread := Max(amount by ip last 6 hours) - Min(amount by ip last 6 hours)
gap_s := Seconds(EventTime() - FirstTime(by user last 1 day))
twice := Sum(items by user last 10 minutes) + Sum(items by user last 10 minutes)
"""

#: The same features with every aggregate named (what the lifting must mean).
NAMED = """\
pm_30 := Sum(amount by user, ip last 30 days)
pm_6 := Sum(amount by user, ip last 6 hours)
past_money := pm_30 - pm_6
month_money := Sum(amount by user, ip last 30 days)
lt_p := LatestTime<purchase>(by user)
days_since := Days(EventTime() - lt_p)
ds := DecayedSum(amount by user last 1 hour)
dc := DecayedCount(by user last 1 hour)
ratio := ds / dc
n_user := Count(by user exclusive)
is_new := n_user = 0
n_ip_1d := Count(by ip last 1 day exclusive)
fresh_ip := ip is not null and n_ip_1d = 0
n_ip_1h := Count(by ip last 1 hour)
n_pair := Count(by user, ip last 1 hour)
share := If(n_ip_1h > 0, Float(n_pair) / n_ip_1h, null)
lat := Latest(ip by user exclusive)
ips := Set(ip by user last 2 hours)
recent := Coalesce(lat, 'none') + '/' + String(Len(ips))
mx := Max(amount by ip last 6 hours)
mn := Min(amount by ip last 6 hours)
spread := mx - mn
ft := FirstTime(by user last 1 day)
gap_s := Seconds(EventTime() - ft)
s10 := Sum(items by user last 10 minutes)
twice := s10 + s10
"""

#: An aggregate over a feature that holds inline aggregates (dependency stages, SPEC §5.6).
STAGED = """\
big := past_money > 60
n_big := Count(by user where big last 1 day)
"""

START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
SPLIT_MS = START_MS + 86_400_000 + 13 * 3_600_000 + 4_321  # not on a tile boundary
INLINE_NAMES = [line.split(" := ")[0] for line in INLINE.splitlines()]


@pytest.fixture(scope="module")
def plan():
    return compile_text(INPUTS + INLINE + STAGED + PURCHASE)


@pytest.fixture(scope="module")
def events():
    return login_purchase_events(2500, 31, START_MS)


@pytest.fixture(scope="module")
def expected(plan, events):
    return reference_values(plan, events)


def _assert_equal(got: list[dict], want: list[dict], events: list[dict], what: str) -> None:
    assert len(got) == len(want), what
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.keys() == b.keys(), f"{what}: event {i}: {sorted(a)} != {sorted(b)}"
        diffs = {k: (a[k], b[k]) for k in a if not close(a[k], b[k])}
        assert not diffs, f"{what}: event {i} ({events[i]}): {diffs}"


def test_plan_lists_inline_aggregates_under_scalar_features(plan):
    ep = plan.events["login"]
    assert [f.name for f in ep.outputs][:5] == ["user", "ip", "amount", "items", "past_money"]
    assert not any("#" in f.name for f in ep.outputs)
    kinds = {f.name: f.kind for f in ep.outputs}
    for name in INLINE_NAMES:
        assert kinds[name] == ("aggregate" if name == "month_money" else "scalar"), name
    assert [f.text for f in ep.inline("past_money")] == [
        "Sum(amount by user, ip last 30 days)", "Sum(amount by user, ip last 6 hours)"]
    assert [f.aggregate.function for f in ep.inline("ratio")] == ["DecayedSum", "DecayedCount"]
    assert [f.aggregate.scopes for f in ep.inline("days_since")] == [("purchase",)]
    # an inline aggregate shares its state with the identical named one, and with an identical inline one
    month = ep.feature("month_money").aggregate.definition_hash
    assert ep.inline("past_money")[0].aggregate.definition_hash == month
    a, b = ep.inline("twice")
    assert a.aggregate.definition_hash == b.aggregate.definition_hash
    named = compile_text(INPUTS + NAMED + STAGED + PURCHASE)
    assert set(plan.states) == set(named.states)
    # JSON: the parent stays a scalar and lists them; a round trip keeps the order valid
    doc = plan.to_json()["events"]["login"]["features"]
    entry = next(d for d in doc if d["name"] == "ratio")
    assert entry["kind"] == "scalar"
    assert [x["function"] for x in entry["inline_aggregates"]] == ["DecayedSum", "DecayedCount"]
    assert all(x["kind"] == "aggregate" and x["inline_of"] == "ratio" for x in entry["inline_aggregates"])
    assert not any(d["name"].startswith("ratio#") for d in doc)
    again = type(plan).from_json(plan.to_json())
    assert [f.name for f in again.events["login"].features] == [f.name for f in ep.features]


def test_online_equals_reference_and_named_features(plan, events, expected, redis_url):
    named = compile_text(INPUTS + NAMED + STAGED + PURCHASE)
    plain = reference_values(named, events)
    outputs = [{k: v[k] for k in w} for v, w in zip(plain, expected)]
    _assert_equal(expected, outputs, events, "reference: inline vs named")
    # the values are not trivial
    login = [v for v in expected if "past_money" in v]
    assert sum(v["is_new"] is True for v in login) >= 10
    assert len({v["past_money"] for v in login}) > 100
    assert sum(v["n_big"] > 0 for v in login) > 50
    assert sum(v["days_since"] is not None for v in login) > 500
    _assert_equal(post_all(plan, redis_url, events), expected, events, "online")


def test_replay_equals_reference(spark, plan, events, expected, tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    run_replay(spark, plan, [path], tmp_path / "out")
    for ev in ("login", "purchase"):
        table = pq.read_table(tmp_path / "out" / ev).to_pylist()
        names = [f.name for f in plan.events[ev].outputs]
        assert list(table[0]) == ["_seq", "_time"] + names
        rows = sorted(table, key=lambda r: r["_seq"])
        got = [{k: r[k] for k in names} for r in rows]
        want = [expected[r["_seq"]] for r in rows]
        _assert_equal(got, want, [events[r["_seq"]] for r in rows], f"replay {ev}")


def test_backfill_then_online_equals_reference(spark, plan, events, expected, redis_url, tmp_path):
    history = [e for e in events if e["_time"] < SPLIT_MS]
    assert 500 < len(history) < len(events) - 300
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in history) + b"\n")
    run_backfill(spark, plan, [path], redis_url, start_ms=START_MS, end_ms=SPLIT_MS)
    live = post_all(plan, redis_url, events[len(history):])
    _assert_equal(live, expected[len(history):], events[len(history):], "backfill then online")
    # status names the feature that contains each inline aggregate
    listed = [name for names in state_features(plan).values() for name in names]
    assert "login.past_money: Sum(amount by user, ip last 6 hours)" in listed
    assert "login.days_since: LatestTime<purchase>(by user)" in listed
    month = plan.events["login"].feature("month_money").aggregate.definition_hash
    assert state_features(plan)[month] == [
        "login.past_money: Sum(amount by user, ip last 30 days)", "login.month_money"]
    status = {s.definition_hash: s for s in store_status(plan, redis_url)}
    assert status[month].keys > 0 and status[month].covered


def test_stream_then_online_equals_reference(spark, events, redis_url, tmp_path):
    plan = compile_text(INPUTS + INLINE + PURCHASE)
    expected = reference_values(plan, events)
    history = [e for e in events if e["_time"] < SPLIT_MS]
    half = len(history) // 2
    report = stream_chunks(spark, plan, redis_url, [history[:half], history[half:]], tmp_path)
    assert report.totals["events"] == len(history) and report.late == 0
    assert redis.Redis.from_url(redis_url).dbsize() > 0
    live = post_all(plan, redis_url, events[len(history):])
    _assert_equal(live, expected[len(history):], events[len(history):], "stream then online")
