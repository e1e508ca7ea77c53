"""``scowl.client`` against a real served API (SPEC §4, §3.5; issue 13).

Each test runs the app of ``tests/client/topology`` (a ``ping`` event with a
time, a duration, a struct of them, an array of structs and an array of
tuples, and a query event ``lookup``) under a real uvicorn server
(``tests.serving.helpers.served``) over the session's Redis-protocol server
(``redis_url``, flushed per test), with an API key.

The tests of ``query`` / ``query_batch`` need the server's read-only mode
(``POST /event?dry_run``, ``?explain``).
"""

from __future__ import annotations

import socket
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
import redis

from compiler import compile_dir
from scowl.client import (
    Client,
    EnrichResult,
    ScowlError,
    Window,
    _error_from,
    decode_value,
    encode_time,
    parse_time,
)
from scowl.embedded import free_port
from serving.app import create_app
from serving.settings import Settings
from tests.serving.helpers import served

TOPOLOGY = Path(__file__).resolve().parent / "topology"
API_KEY = "client-test-key"
UTC = timezone.utc


def at(minute: int, second: int = 0) -> datetime:
    """2021-04-12T22:MM:SSZ, UTC-aware."""
    return datetime(2021, 4, 12, 22, minute, second, tzinfo=UTC)


def iso(minute: int, second: int = 0) -> str:
    return f"2021-04-12T22:{minute:02d}:{second:02d}.000Z"


#: Three pings of one user: ``at`` a minute before the event time, amounts 1, 2, 3.
PINGS = [
    {"_time": iso(m + 1), "at": iso(m), "amount": i + 1}
    for i, m in enumerate((0, 5, 10))
]


@pytest.fixture()
def server(redis_url):
    """The served topology (API key required); yields its base URL."""
    plan = compile_dir(TOPOLOGY).plan
    assert plan is not None
    app = create_app(plan, Settings(api_keys=API_KEY), redis_url=redis_url)
    with served(app) as url:
        yield url


@pytest.fixture()
def client(server):
    with Client(server, api_key=API_KEY) as c:
        yield c


def raw_post(server: str, path: str, body) -> httpx.Response:
    return httpx.post(f"{server}{path}", json=body, headers={"x-api-key": API_KEY}, timeout=10)


def expected_typed(raw: dict) -> dict:
    """The ping features of a raw JSON answer, decoded by hand (the types of topology/ping.scowl)."""
    f = raw["features"]

    def t(s):
        return None if s is None else datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)

    def d(x):
        return None if x is None else timedelta(seconds=x)

    def pair(p):
        return None if p is None else {"at": t(p["at"]), "since": d(p["since"])}

    return {
        "user": f["user"], "amount": f["amount"], "n": f["n"], "total": f["total"],
        "at": t(f["at"]), "prev": t(f["prev"]),
        "since": d(f["since"]), "gap": d(f["gap"]),
        "last_pair": pair(f["last_pair"]),
        "recent": [pair(p) for p in f["recent"]],
        "seen": [(t(a), u) for a, u in f["seen"]],
    }


def as_user(features: dict, user: str) -> dict:
    """``features`` of a ping with its user renamed (``user`` and the user inside ``seen``'s tuples)."""
    return {**features, "user": user, "seen": [(a, user) for a, _ in features["seen"]]}


# ------------------------------------------------------------------ enrich
def test_enrich_is_typed_and_equals_the_raw_answer_decoded(server, client):
    # the same timeline for user "raw" (plain POST /event) and user "typed" (the client):
    # every aggregate is keyed by user, so both get the same values
    raws = []
    for ev in PINGS:
        r = raw_post(server, "/event", {"_type": "ping", "user": "raw", **ev})
        assert r.status_code == 200, r.text
        raws.append(r.json())
    typed = [client.enrich("ping", user="typed", **ev) for ev in PINGS]

    for raw, res in zip(raws, typed):
        assert isinstance(res, EnrichResult)
        assert res.features == as_user(expected_typed(raw), "typed")
        assert res.event_time == parse_time(raw["event_time"])
        assert res.errors == {} and res.explain is None
        assert res.raw["features"]["user"] == "typed"

    last = typed[-1]
    # a time feature is a UTC-aware datetime, a duration a timedelta (SPEC §3.5's encodings undone)
    assert last.event_time == at(11) and last.event_time.tzinfo is not None
    assert last["at"] == at(10)
    assert last["prev"] == at(6) and last["prev"].utcoffset() == timedelta(0)
    assert last["since"] == timedelta(minutes=1)
    assert last["gap"] == timedelta(minutes=5)
    assert last["n"] == 3 and last["total"] == 6 and isinstance(last["total"], int)
    assert last["last_pair"] == {"at": at(5), "since": timedelta(minutes=1)}
    assert last["recent"] == [{"at": at(m), "since": timedelta(minutes=1)} for m in (0, 5, 10)]
    assert last["seen"] == [(at(m), "typed") for m in (0, 5, 10)]
    assert typed[0]["prev"] is None and typed[0]["gap"] is None and typed[0]["last_pair"] is None


def test_time_arguments_datetime_naive_aware_iso_and_epoch_ms(client):
    naive = client.enrich("ping", user="u", at=datetime(2021, 4, 12, 22, 0), _time=datetime(2021, 4, 12, 22, 1))
    assert naive.event_time == at(1) and naive["at"] == at(0)   # naive = UTC
    plus2 = timezone(timedelta(hours=2))
    aware = client.enrich("ping", {"user": "u", "at": datetime(2021, 4, 13, 0, 2, tzinfo=plus2)},
                          _time=datetime(2021, 4, 13, 0, 3, 0, 999_999, tzinfo=plus2))
    assert aware.event_time == at(3, 0) + timedelta(milliseconds=999)   # microseconds truncated to ms
    assert aware["at"] == at(2) and aware["since"] == timedelta(seconds=60.999)
    epoch = client.enrich("ping", user="u", _time=int(at(4).timestamp() * 1000))
    assert epoch.event_time == at(4) and epoch["at"] is None and epoch["n"] == 3
    text = client.enrich("ping", user="u", _time="2021-04-12T22:05:00Z", _id="fixed-id")
    assert text.event_time == at(5) and text.event_id == "fixed-id" and text["n"] == 4


def test_the_event_dict_is_not_mutated_and_fields_win(client):
    ev = {"user": "x", "amount": 7, "_time": iso(0)}
    r = client.enrich("ping", ev, amount=8)
    assert ev == {"user": "x", "amount": 7, "_time": iso(0)}
    assert r["amount"] == 8 and r["total"] == 8
    with pytest.raises(ValueError, match="_type"):
        client.enrich("ping", {"_type": "lookup", "user": "x"})
    with pytest.raises(TypeError):
        client.enrich(42, user="x")
    with pytest.raises(ValueError):   # NaN is not JSON: refused before sending
        client.enrich("ping", user="x", amount=float("nan"))


def test_feature_errors_are_a_dict(client):
    r = client.enrich("ping", user="e", amount="bar", _time=iso(0))
    assert r["amount"] is None and set(r.errors) == {"amount"} and isinstance(r.errors["amount"], str)


# ------------------------------------------------------------------ batch
def test_enrich_batch_sumatra_shape_keeps_order_and_values(server, client):
    events = [dict(e, user="b") for e in PINGS]
    out = client.enrich_batch("ping", events)
    assert [r["n"] for r in out] == [1, 2, 3]
    assert [r["total"] for r in out] == [1, 3, 6]
    assert [r.event_time for r in out] == [at(1), at(6), at(11)]
    assert [r["prev"] for r in out] == [None, at(1), at(6)]
    assert all("_type" not in e for e in events)   # unlike the sumatra-sdk, the caller's dicts are left alone
    # the same as one event at a time (a second user, same timeline)
    single = [client.enrich("ping", dict(e, user="s")) for e in PINGS]
    for b, s in zip(out, single):
        assert as_user(b.features, "s") == s.features


def test_enrich_batch_mixed_types(client):
    out = client.enrich_batch([
        {"_type": "ping", "user": "m", "_time": iso(1)},
        ("ping", {"user": "m", "_time": iso(2)}),
        ("lookup", {"user": "m", "_time": iso(3)}),
        {"_type": "lookup", "user": "nobody", "_time": iso(3)},
    ])
    assert [r["n"] if "n" in r.features else r["pings"] for r in out] == [1, 2, 2, 0]
    assert out[2]["last_ping"] == at(2) and out[3]["last_ping"] is None
    with pytest.raises(ValueError, match="event 0 has no _type"):
        client.enrich_batch([{"user": "m"}])
    with pytest.raises(TypeError):
        client.enrich_batch(["ping"])


def test_track_and_track_batch(client):
    assert client.track("ping", user="t", _time=iso(0)) is None
    assert client.track_batch("ping", [{"user": "t", "_time": iso(1)}]) is None
    assert client.enrich("lookup", user="t", _time=iso(2))["pings"] == 2


# ------------------------------------------------------------------ query (needs ?dry_run on the server)
def test_query_stores_nothing_and_equals_the_enrich_that_follows(client, redis_url):
    client.enrich_batch("ping", [dict(e, user="q") for e in PINGS[:2]])
    store = redis.Redis.from_url(redis_url)
    try:
        size = store.dbsize()
        nxt = dict(PINGS[2], user="q", _id="next")
        first = client.query("ping", nxt)
        second = client.query("ping", nxt)
        assert store.dbsize() == size
    finally:
        store.close()
    assert first["n"] == second["n"] == 3   # inclusive: the queried event counts itself, once
    real = client.enrich("ping", nxt)      # the same _id: a dry run left no _id marker, so this one is written
    assert real["n"] == 3
    assert real.features == first.features == second.features
    assert real.event_time == first.event_time == at(11) and real.event_id == first.event_id == "next"
    # and it was written: the next event sees 4
    assert client.enrich("ping", user="q", _time=iso(20))["n"] == 4


def test_query_refuses_a_server_without_the_read_only_mode_and_posts_nothing(redis_url):
    """A server whose POST /event lacks ``dry_run`` (an older scowl) would store a "query": the client refuses first."""
    plan = compile_dir(TOPOLOGY).plan
    app = create_app(plan, Settings(api_keys=API_KEY), redis_url=redis_url)
    spec = app.openapi()
    for path in ("/event", "/batch"):
        op = spec["paths"][path]["post"]
        op["parameters"] = [p for p in op["parameters"] if p["name"] not in ("dry_run", "explain")]
    app.openapi_schema = spec  # what an older server documents
    store = redis.Redis.from_url(redis_url)
    try:
        with served(app) as url, Client(url, api_key=API_KEY) as c:
            for call in (lambda: c.query("ping", dict(PINGS[0], user="old")),
                         lambda: c.query_batch("ping", [dict(PINGS[0], user="old")])):
                with pytest.raises(ScowlError) as e:
                    call()
                assert e.value.code == "dry-run-unsupported" and e.value.status is None
                assert "nothing was sent" in e.value.message
            assert store.dbsize() == 0
            assert c.enrich("ping", dict(PINGS[0], user="old"))["n"] == 1  # enrich is not affected
    finally:
        store.close()


def test_query_on_a_query_event(client):
    client.enrich_batch("ping", [dict(e, user="l") for e in PINGS])
    r = client.query("lookup", user="l", _time=iso(30))
    assert r["pings"] == 3 and r["last_ping"] == at(11)


def test_query_explain_is_typed(client):
    client.enrich_batch("ping", [dict(e, user="x") for e in PINGS])
    r = client.query("ping", user="x", _time=iso(30), explain=True)
    assert r["n"] == 4
    assert r.explain is not None
    n = r.explain["n"]
    assert n.function == "Count" and n.key == ["x"] and n.writes == 4 and isinstance(n.state, str)
    # 30 days at 1-minute resolution (SPEC §3.2): from the first whole tile after t - W, to t
    assert n.window == Window(start=at(31) - timedelta(days=30), end=at(30), resolution_s=60)
    assert n.window.start.tzinfo is not None
    assert r.explain["recent"].window.start == at(31) - timedelta(days=1)
    assert r.explain["total"].function == "Sum" and r.explain["total"].writes is None   # Sum keeps no count
    assert r.explain["n"].raw["window"]["from"] == "2021-03-13T22:31:00.000Z"
    assert set(r.explain) <= set(r.features)
    # a null key reads nothing: no key, no window
    nokey = client.query("ping", _time=iso(30), explain=True)
    assert nokey["n"] is None and "user" in nokey.errors
    assert nokey.explain["n"].key is None and nokey.explain["n"].window is None


def test_query_batch_evaluates_each_event_alone(client, redis_url):
    client.enrich("ping", user="qb", _time=iso(0))
    out = client.query_batch("ping", [{"user": "qb", "_time": iso(m)} for m in (1, 2, 3)], explain=True)
    assert [r["n"] for r in out] == [2, 2, 2]   # nothing stored between them
    assert [r.explain["n"].writes for r in out] == [2, 2, 2]
    assert client.query("ping", user="qb", _time=iso(4))["n"] == 2


# ------------------------------------------------------------------ topology
def test_topology_and_feature_types(client):
    topo = client.topology()
    assert set(topo["events"]) == {"ping", "lookup"}
    assert topo["events"]["lookup"]["query_event"] is True
    assert client.topology() is topo   # cached
    types = client.feature_types("ping")
    assert types["prev"] == "time" and types["gap"] == "duration"
    assert types["recent"] == "array<struct{at:time,since:duration}>"
    assert types["seen"] == "array<tuple{time,string}>"
    with pytest.raises(ScowlError) as info:
        client.feature_types("nope")
    assert info.value.code == "unknown-type"


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("key", ["wrong-key", None])
def test_a_wrong_or_missing_api_key_raises_401(server, redis_url, key):
    with Client(server, api_key=key) as c:
        with pytest.raises(ScowlError) as info:
            c.enrich("ping", user="a")
        assert info.value.status == 401 and info.value.code == "unauthorized"
        assert info.value.message and str(info.value).startswith("401 unauthorized: ")
        with pytest.raises(ScowlError) as info:
            c.enrich_batch("ping", [{"user": "a"}])
        assert info.value.status == 401
        with pytest.raises(ScowlError) as info:
            c.query("ping", user="a")
        assert info.value.status == 401
    store = redis.Redis.from_url(redis_url)
    assert store.dbsize() == 0
    store.close()


def test_unknown_event_type_raises_400_unknown_type(client):
    with pytest.raises(ScowlError) as info:
        client.enrich("nope", user="a")
    assert (info.value.status, info.value.code) == (400, "unknown-type")
    assert "nope" in info.value.message
    with pytest.raises(ScowlError) as info:
        client.enrich_batch([("ping", {"user": "a"}), ("nope", {})])
    assert (info.value.status, info.value.code) == (400, "unknown-type")
    assert info.value.message.startswith("event 1:")


def test_a_bad_time_raises_400_bad_time(client):
    with pytest.raises(ScowlError) as info:
        client.enrich("ping", user="a", _time="yesterday")
    assert (info.value.status, info.value.code) == (400, "bad-time")


def test_server_down_raises_scowl_error():
    port = free_port()   # nothing listens there
    with Client(f"http://127.0.0.1:{port}", timeout=2) as c:
        with pytest.raises(ScowlError) as info:
            c.enrich("ping", user="a")
    err = info.value
    assert err.status is None and err.code == "connection-failed"
    assert f"127.0.0.1:{port}" in err.message and str(err).startswith("connection-failed: ")


def test_no_answer_raises_a_timeout_scowl_error():
    with socket.socket() as sock:   # accepts connections (the backlog) and never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        with Client(f"http://127.0.0.1:{sock.getsockname()[1]}", timeout=0.3) as c:
            with pytest.raises(ScowlError) as info:
                c.topology()
    assert info.value.status is None and info.value.code == "timeout"


def test_a_non_api_error_body_keeps_its_status():
    req = httpx.Request("POST", "http://h/event")
    err = _error_from(httpx.Response(502, text="<html>bad gateway</html>", request=req))
    assert (err.status, err.code) == (502, "http-502") and "bad gateway" in err.message
    err = _error_from(httpx.Response(503, json={"error": {"code": "store-unavailable", "message": "m"}}, request=req))
    assert (err.status, err.code, err.message) == (503, "store-unavailable", "m")


def test_close_and_context_manager(server):
    c = Client(server + "/", api_key=API_KEY)
    assert c.url == server and "client-test-key" not in repr(c)
    with c as same:
        assert same is c
        assert same.topology()["events"]
    assert c._http.is_closed
    c.close()   # idempotent


# ------------------------------------------------------------------ pure helpers
def test_encode_time():
    assert encode_time(datetime(2013, 1, 1, 10, 17)) == "2013-01-01T10:17:00.000Z"
    assert encode_time(datetime(2013, 1, 1, 5, 17, 0, 5_999, tzinfo=timezone(timedelta(hours=-5)))) == \
        "2013-01-01T10:17:00.005Z"
    assert encode_time(datetime(2013, 1, 1).date()) == "2013-01-01T00:00:00.000Z"
    assert encode_time(datetime(9, 1, 1)) == "0009-01-01T00:00:00.000Z"


@pytest.mark.parametrize(("value", "type_name", "want"), [
    ("2013-01-01T10:17:00.000Z", "time", datetime(2013, 1, 1, 10, 17, tzinfo=UTC)),
    ("0000-01-01T00:00:00.000Z", "time", "0000-01-01T00:00:00.000Z"),   # outside Python's years: unchanged
    (1.5, "duration", timedelta(seconds=1.5)),
    (3, "duration", timedelta(seconds=3)),
    (1e300, "duration", 1e300),   # beyond timedelta: unchanged
    (None, "time", None),
    ([None, "2013-01-01T00:00:00Z"], "array<time>", [None, datetime(2013, 1, 1, tzinfo=UTC)]),
    ([[1.0, "a"]], "array<tuple{duration,string}>", [(timedelta(seconds=1), "a")]),
    ({"t": "2013-01-01T00:00:00.000Z", "x": 1}, "struct{t:time}", {"t": datetime(2013, 1, 1, tzinfo=UTC), "x": 1}),
    ({"a": [2.0]}, "struct{a:array<duration>}", {"a": [timedelta(seconds=2)]}),
    (5, "int", 5),
    ("2013-01-01T00:00:00.000Z", "string", "2013-01-01T00:00:00.000Z"),
    ("x", "mystery<type>", "x"),
    ("not a time", "time", "not a time"),
    ("not a list", "array<time>", "not a list"),
    (True, "duration", True),
])
def test_decode_value(value, type_name, want):
    assert decode_value(value, type_name) == want


def test_the_type_spelling_is_the_compilers():
    from compiler.typesystem import parse_type

    from scowl.client import _parse_type

    for t in ("time", "array<time>", "tuple{time,string}", "tuple<int,float>",
              "struct{a:int,b:array<time>}", "array<struct{at:time,since:duration}>",
              "struct{a:struct{b:tuple{time,duration}},c:string}"):
        assert _parse_type(t) == parse_type(t), t


def test_the_module_doctests_hold():
    import doctest

    import scowl.client

    failed, tried = doctest.testmod(scowl.client)
    assert tried >= 4 and failed == 0
