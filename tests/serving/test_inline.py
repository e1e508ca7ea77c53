"""Aggregates inside expressions through the API (SPEC §2.4, §3.4, §4): values, response shape, /topology.

The SPEC §3.4 login example with its aggregates written inside
expressions: hand-computed values, and the reference evaluator on a longer
timeline. Inline aggregates are computed but never returned.
"""

from __future__ import annotations

from tests.e2e.helpers import close, login_purchase_events
from tests.reference import reference_values
from tests.serving.helpers import batch, client_for, compile_text

LOGIN = """
event login
user := $.user as string
ip := $.ip as string
price := $.price as float
others_on_ip := Count(by ip) - Count(by ip, user)
is_new_user := Count(by user exclusive) = 0
share := Float(Count(by ip, user)) / Count(by ip)
spent_before := Sum(price by user) - price
label := If(CountUnique(user by ip) > 1, 'shared', 'single') + ':' + String(Count())
"""

EVENTS = [
    {"_type": "login", "_time": "2021-04-12T22:43:46Z", "user": "anna", "ip": "1.1.1.1", "price": 1.5},
    {"_type": "login", "_time": "2021-04-12T22:43:51Z", "user": "brad", "ip": "2.2.2.2", "price": 2.25},
    {"_type": "login", "_time": "2021-04-12T22:44:05Z", "user": "cela", "ip": "1.1.1.1", "price": 0.5},
    {"_type": "login", "_time": "2021-04-12T22:44:19Z", "user": "anna", "ip": "1.1.1.1", "price": 10.0},
]


def test_sumatra_login_example_with_inline_aggregates(redis_url):
    with client_for(LOGIN, redis_url) as c:
        got = batch(c, EVENTS)
        topo = c.get("/topology").json()["events"]["login"]["features"]
    # Count(by ip) 1,1,2,3; Count(by ip, user) 1,1,1,2; Sum(price by user) 1.5,2.25,0.5,11.5 (SPEC §3.4)
    assert [f["others_on_ip"] for f in got] == [0, 0, 1, 1]
    assert [f["is_new_user"] for f in got] == [True, True, True, False]
    assert [f["share"] for f in got] == [1.0, 1.0, 0.5, 2 / 3]
    assert [f["spent_before"] for f in got] == [0.0, 0.0, 0.0, 1.5]
    assert [f["label"] for f in got] == ["single:1", "single:2", "shared:3", "shared:4"]
    names = ["user", "ip", "price", "others_on_ip", "is_new_user", "share", "spent_before", "label"]
    assert all(list(f) == names for f in got)
    assert [d["name"] for d in topo] == names
    share = next(d for d in topo if d["name"] == "share")
    assert share["kind"] == "scalar"
    assert [(x["kind"], x["function"], x["text"]) for x in share["inline_aggregates"]] == [
        ("aggregate", "Count", "Count(by ip, user)"), ("aggregate", "Count", "Count(by ip)")]
    # the inline Count(by ip) of `share` is the state of `others_on_ip`'s first one
    others = next(d for d in topo if d["name"] == "others_on_ip")
    assert share["inline_aggregates"][1]["definition_hash"] == others["inline_aggregates"][0]["definition_hash"]


def test_inline_aggregates_equal_the_reference(redis_url):
    text = """
event login
user := $.user as string
ip := $.ip as string?
amount := $.amount as float?
items := $.items as int ? 0
trend := Average(amount by user last 1 hour) - Average(amount by user last 1 day)
days_since := Days(EventTime() - LatestTime<purchase>(by user))
quiet := Count(by ip last 10 minutes exclusive) = 0 or ip is null
mix := Coalesce(Latest(ip by user exclusive), '?') + String(Max(items by ip last 1 hour))

event purchase
user := $.user as string
total := $.total as int
"""
    plan = compile_text(text)
    events = login_purchase_events(400, 5, 1_704_067_200_000)
    want = reference_values(plan, events)
    with client_for(text, redis_url) as c:
        got = batch(c, events)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.keys() == b.keys()
        assert all(close(a[k], b[k]) for k in a), (i, events[i], a, b)
    assert len({f["trend"] for f in got if "trend" in f}) > 50
