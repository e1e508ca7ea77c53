"""POST /event and /batch against a real Redis (SPEC §3, §4)."""

from __future__ import annotations

import pytest
import redis

from tests.serving.helpers import batch, client_for

LOGIN = """
event login
user := $.user as string
ip := $.ip as string?
price := $.price as float ? 0.0
count_all := Count()
count_ip := Count(by ip)
count_ip_user := Count(by ip, user)
uniq_users := CountUnique(user)
uniq_users_ip := CountUnique(user by ip)
sum_price := Sum(price)
sum_price_user := Sum(price by user)
sum_price_user_excl := Sum(price by user exclusive)
"""

EVENTS = [
    {"_type": "login", "_time": "2021-04-12T22:43:46Z", "user": "anna", "ip": "1.1.1.1", "price": 1.50},
    {"_type": "login", "_time": "2021-04-12T22:43:51Z", "user": "brad", "ip": "2.2.2.2", "price": 2.25},
    {"_type": "login", "_time": "2021-04-12T22:44:05Z", "user": "cela", "ip": "1.1.1.1", "price": 0.50},
    {"_type": "login", "_time": "2021-04-12T22:44:19Z", "user": "anna", "ip": "1.1.1.1", "price": 10.00},
]


def test_sumatra_worked_examples(redis_url):
    # SPEC §3.4
    with client_for(LOGIN, redis_url) as c:
        out = batch(c, EVENTS)
    col = lambda name: [f[name] for f in out]  # noqa: E731
    assert col("count_all") == [1, 2, 3, 4]
    assert col("count_ip") == [1, 1, 2, 3]
    assert col("count_ip_user") == [1, 1, 1, 2]
    assert col("uniq_users") == [1, 2, 3, 3]
    assert col("uniq_users_ip") == [1, 1, 2, 2]
    assert col("sum_price") == [1.5, 3.75, 4.25, 14.25]
    assert col("sum_price_user") == [1.5, 2.25, 0.5, 11.5]
    assert col("sum_price_user_excl") == [0.0, 0.0, 0.0, 1.5]
    assert out[0]["user"] == "anna" and out[0]["price"] == 1.5


def test_response_shape(redis_url):
    with client_for(LOGIN, redis_url) as c:
        r = c.post("/event", json={**EVENTS[0], "_id": "e1"})
    assert r.status_code == 200
    body = r.json()
    assert body["event_id"] == "e1"
    assert body["event_time"] == "2021-04-12T22:43:46.000Z"
    assert set(body["features"]) == {
        "user", "ip", "price", "count_all", "count_ip", "count_ip_user", "uniq_users", "uniq_users_ip",
        "sum_price", "sum_price_user", "sum_price_user_excl",
    }
    assert "errors" not in body


def test_idempotent_id(redis_url):
    with client_for(LOGIN, redis_url) as c:
        first = c.post("/event", json={**EVENTS[0], "_id": "same"}).json()["features"]
        again = c.post("/event", json={**EVENTS[0], "_id": "same"}).json()["features"]
        other = c.post("/event", json={**EVENTS[0], "_id": "other"}).json()["features"]
    assert first["count_all"] == 1
    assert again["count_all"] == 1      # answered, not written twice
    assert other["count_all"] == 2


def test_ids_that_differ_only_by_escapes_are_distinct(redis_url):
    """``a}`` and ``a%7D`` are two ids: each is written once (their markers must not share a key)."""
    with client_for(LOGIN, redis_url) as c:
        counts = [c.post("/event", json={**EVENTS[0], "_id": i}).json()["features"]["count_all"]
                  for i in ("a}", "a%7D", "a}", "a%257D", "a%7D")]
    assert counts == [1, 2, 2, 3, 3]


WINDOW = """
event e
k := $.k as string
n := Count(by k last 10 minutes)
n_excl := Count(by k last 10 minutes exclusive)
"""


def _t(ms: int) -> int:
    return 1_700_000_000_000 + ms


def test_window_boundaries(redis_url):
    # W = 600 s, r = 1 s (SPEC §3.2): a write exactly W old does not count,
    # one W - r old does; ties in the same millisecond count in arrival order.
    with client_for(WINDOW, redis_url) as c:
        out = batch(c, [
            {"_type": "e", "_time": _t(0), "k": "a"},
            {"_type": "e", "_time": _t(1_000), "k": "a"},
            {"_type": "e", "_time": _t(600_000), "k": "a"},          # first write exactly W old
            {"_type": "e", "_time": _t(600_999), "k": "a"},          # same tile as 600_000
            {"_type": "e", "_time": _t(600_999), "k": "a"},          # same ms: sees the one before
        ])
    assert [f["n"] for f in out] == [1, 2, 2, 3, 4]
    assert [f["n_excl"] for f in out] == [0, 1, 1, 2, 3]


def test_window_tile_tail(redis_url):
    # a write at s counts iff T(s) > T(t - W): a write 599.5 s old in the
    # tile of t - W does not count; one W - r old always does
    with client_for(WINDOW, redis_url) as c:
        out = batch(c, [
            {"_type": "e", "_time": _t(500), "k": "a"},
            {"_type": "e", "_time": _t(1_000), "k": "a"},
            {"_type": "e", "_time": _t(600_000), "k": "a"},  # t - W = 0: tile 0 (write at 500) excluded
            {"_type": "e", "_time": _t(601_000), "k": "a"},  # write at 1000 is exactly W old: excluded
        ])
    assert [f["n"] for f in out] == [1, 2, 2, 2]


def test_null_keys_read_null_and_write_nothing(redis_url):
    with client_for(LOGIN, redis_url) as c:
        out = batch(c, [
            {"_type": "login", "_time": "2021-04-12T22:43:46Z", "user": "anna"},           # ip missing (optional)
            {"_type": "login", "_time": "2021-04-12T22:43:47Z", "user": "anna", "ip": None},
            {"_type": "login", "_time": "2021-04-12T22:43:48Z", "user": "anna", "ip": "1.1.1.1"},
        ])
    assert [f["count_ip"] for f in out] == [None, None, 1]
    assert [f["count_ip_user"] for f in out] == [None, None, 1]
    assert [f["count_all"] for f in out] == [1, 2, 3]


CROSS = """
event weather
airport := $.airport as string
visib := $.visib as float?

event departure
origin := $.origin as string
visib_at_origin := Latest<weather>(visib by origin as airport last 3 hours)
obs_3h := Count<weather>(by origin as airport last 3 hours)
departures := Count(by origin)
"""


def test_cross_event_aggregate(redis_url):
    with client_for(CROSS, redis_url) as c:
        r = c.get("/topology").json()
        assert r["events"]["weather"]["query_event"] is False
        out = c.post("/batch", json=[
            {"_type": "weather", "_time": "2013-01-01T10:00:00Z", "airport": "JFK", "visib": 10},
            {"_type": "weather", "_time": "2013-01-01T11:00:00Z", "airport": "JFK", "visib": 2.5},
            {"_type": "weather", "_time": "2013-01-01T11:00:00Z", "airport": "LGA", "visib": 7},
            {"_type": "departure", "_time": "2013-01-01T11:30:00Z", "origin": "JFK"},
            {"_type": "departure", "_time": "2013-01-01T13:30:00Z", "origin": "JFK"},
            {"_type": "departure", "_time": "2013-01-01T15:00:00Z", "origin": "JFK"},
        ]).json()
    deps = [o["features"] for o in out[3:]]
    assert [d["visib_at_origin"] for d in deps] == [2.5, 2.5, None]
    assert [d["obs_3h"] for d in deps] == [2, 1, 0]
    assert [d["departures"] for d in deps] == [1, 2, 3]
    assert out[0]["features"] == {"airport": "JFK", "visib": 10.0}


LATEST = """
event flight
tail := $.tail as string
num := $.num as int
dest := $.dest as string
prev := Latest(num, dest by tail exclusive)
cur := Latest(num by tail)
prev_time := LatestTime(by tail exclusive)
lo := Min(dest by tail)
hi := Max(num by tail last 1 hour)
avg := Average(num by tail)
"""


def test_latest_min_max_average(redis_url):
    with client_for(LATEST, redis_url) as c:
        out = batch(c, [
            {"_type": "flight", "_time": "2013-01-01T10:00:00.250Z", "tail": "N1", "num": 10, "dest": "ORD"},
            {"_type": "flight", "_time": "2013-01-01T11:30:00Z", "tail": "N1", "num": 3, "dest": "ATL"},
            {"_type": "flight", "_time": "2013-01-01T11:45:00Z", "tail": "N1", "num": 7, "dest": "Ölands"},
        ])
    assert [f["prev"] for f in out] == [None, {"num": 10, "dest": "ORD"}, {"num": 3, "dest": "ATL"}]
    assert [f["cur"] for f in out] == [10, 3, 7]
    assert [f["prev_time"] for f in out] == [None, "2013-01-01T10:00:00.250Z", "2013-01-01T11:30:00.000Z"]
    assert [f["lo"] for f in out] == ["ORD", "ATL", "ATL"]
    assert [f["hi"] for f in out] == [10, 3, 7]   # the 10 is 1.5 h old at the second event
    assert [f["avg"] for f in out] == [10.0, 6.5, 20 / 3]


def test_bad_input_is_4xx_and_writes_nothing(redis_url):
    store = redis.Redis.from_url(redis_url)
    with client_for(LOGIN, redis_url, max_body_bytes=2048) as c:
        cases = [
            (c.post("/event", content=b"{not json", headers={"content-type": "application/json"}), 400, "malformed-json"),
            (c.post("/event", json={"user": "x"}), 400, "missing-type"),
            (c.post("/event", json={"_type": "nope"}), 400, "unknown-type"),
            (c.post("/event", json={"_type": "login", "_time": "yesterday", "user": "x"}), 400, "bad-time"),
            (c.post("/event", json=[1]), 400, "not-an-object"),
            (c.post("/event", json={"_type": "login", "_time": 10**17, "user": "x"}), 400, "bad-time"),
            (c.post("/event", json={"_type": "login", "user": "x" * 5000}), 413, "body-too-large"),
            (c.post("/batch", json=[EVENTS[0], {"_type": "nope"}]), 400, "unknown-type"),
            (c.post("/batch", json={"_type": "login"}), 400, "not-an-array"),
        ]
        for resp, status, code in cases:
            assert resp.status_code == status, resp.text
            assert resp.json()["error"]["code"] == code
    assert store.dbsize() == 0


def test_api_key(redis_url):
    with client_for(LOGIN, redis_url, api_keys="k1,k2") as c:
        assert c.post("/event", json=EVENTS[0]).status_code == 401
        assert c.post("/event", json=EVENTS[0], headers={"x-api-key": "bad"}).status_code == 401
        assert c.post("/event", json=EVENTS[0], headers={"x-api-key": "k2"}).status_code == 200
        assert c.get("/health").status_code == 200


def test_store_unavailable_is_503():
    from scowl.embedded import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"
    with client_for(LOGIN, url, store_timeout_s=0.5) as c:
        r = c.post("/event", json=EVENTS[0])
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "store-unavailable"
        assert c.get("/ready").status_code == 503


def test_meta_endpoints(redis_url):
    with client_for(LOGIN, redis_url) as c:
        assert c.get("/ready").json() == {"status": "ready"}
        topo = c.get("/topology").json()
        feats = {f["name"]: f for f in topo["events"]["login"]["features"]}
        assert feats["count_ip"]["window_s"] == 30 * 86400
        assert feats["count_ip"]["resolution_s"] == 60
        c.post("/event", json=EVENTS[0])
        assert b"scowl_events_total" in c.get("/metrics").content


def test_required_input_missing_records_error(redis_url):
    with client_for(LOGIN, redis_url) as c:
        r = c.post("/event", json={"_type": "login", "_time": "2021-04-12T22:43:46Z"}).json()
    assert r["features"]["user"] is None
    assert "user" in r["errors"]
    # a null write key writes nothing; the global Count still counts the event
    assert r["features"]["count_all"] == 1
    assert r["features"]["sum_price_user"] is None
