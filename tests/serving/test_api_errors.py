"""Query-flag forms and the one error body of every error (SPEC §4).

Flags ``features`` / ``exports`` of ``POST /event`` and ``/batch``: bare or
empty means true, also ``true``/``false``/``1``/``0``/``yes``/``no``/``on``/
``off`` in any case; anything else is 400 ``invalid-flag`` and writes nothing.
Every error answer, the framework's 404/405/422 and unexpected 500s
included, is exactly ``{"error": {"code": str, "message": str}}``.
"""

from __future__ import annotations

import pytest
import redis
from fastapi import Body, HTTPException
from fastapi.testclient import TestClient

from serving.app import create_app
from serving.deps import parse_flag
from serving.errors import ApiError, status_code_name
from serving.settings import Settings
from tests.serving.helpers import client_for, compile_text

LOGIN = """
event login
user := $.user as string
ip := $.ip as string
n := Count()
n_ip := Count(by ip)
"""

EVENT = {"_type": "login", "_time": "2021-04-12T22:43:46Z", "user": "anna", "ip": "1.1.1.1"}


def assert_error(resp, status: int, code: str) -> str:
    """Assert ``resp`` is ``status`` with exactly ``{"error": {"code": code, "message": <non-empty str>}}``.

    Returns:
        The message.
    """
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code, body
    message = body["error"]["message"]
    assert isinstance(message, str) and message
    assert "Traceback" not in resp.text
    return message


# -- query flags ---------------------------------------------------------------

@pytest.mark.parametrize(("raw", "expected"), [
    (None, None),
    ("", True), (" ", True),
    ("true", True), ("True", True), ("TRUE", True), ("1", True), ("yes", True), ("Yes", True), ("on", True),
    ("false", False), ("False", False), ("FALSE", False), ("0", False), ("no", False), ("NO", False), ("off", False),
])
def test_parse_flag_forms(raw, expected):
    assert parse_flag("features", raw) is expected


@pytest.mark.parametrize("raw", ["maybe", "2", "-1", "truee", "y", "n", "null"])
def test_parse_flag_rejects(raw):
    with pytest.raises(ApiError) as info:
        parse_flag("features", raw)
    assert (info.value.status, info.value.code) == (400, "invalid-flag")
    assert "features" in info.value.message


# Query strings and whether the response carries ``features``: either flag
# true returns them, an absent flag counts as true, only both false drops them.
FLAG_FORMS = [
    ("", True),
    ("?exports", True),
    ("?features", True),
    ("?features=", True),
    ("?exports=", True),
    ("?features=true", True),
    ("?features=True", True),
    ("?exports=1", True),
    ("?exports=yes", True),
    ("?features&exports", True),
    ("?features=false", True),            # exports absent: the default, true
    ("?exports=0", True),
    ("?features=false&exports", True),    # bare exports is true
    ("?features=false&exports=", True),   # empty exports is true
    ("?features=0&exports=True", True),
    ("?exports=false&features", True),    # bare features is true
    ("?features=false&exports=false", False),
    ("?features=0&exports=0", False),
    ("?features=False&exports=NO", False),
    ("?features=off&exports=false", False),
]


def test_event_flag_forms(redis_url):
    with client_for(LOGIN, redis_url) as c:
        for i, (query, with_features) in enumerate(FLAG_FORMS):
            r = c.post(f"/event{query}", json={**EVENT, "_id": f"e{i}"})
            assert r.status_code == 200, (query, r.text)
            body = r.json()
            assert body["event_id"] == f"e{i}", query
            assert body["event_time"] == "2021-04-12T22:43:46.000Z", query
            if with_features:
                # every event is written whatever the flags: the counts go on
                assert body["features"] == {"user": "anna", "ip": "1.1.1.1", "n": i + 1, "n_ip": i + 1}, query
            else:
                assert "features" not in body, query


def test_batch_flag_forms(redis_url):
    with client_for(LOGIN, redis_url) as c:
        written = 0
        for query, with_features in FLAG_FORMS:
            r = c.post(f"/batch{query}", json=[EVENT, EVENT])
            assert r.status_code == 200, (query, r.text)
            out = r.json()
            assert len(out) == 2
            if with_features:
                assert [o["features"]["n"] for o in out] == [written + 1, written + 2], query
            else:
                assert all("features" not in o and o["event_time"] for o in out), query
            written += 2


@pytest.mark.parametrize("path", ["/event", "/batch"])
@pytest.mark.parametrize("query", ["?features=maybe", "?exports=2", "?features=true&exports=nope"])
def test_invalid_flag_is_400_and_writes_nothing(redis_url, path, query):
    body = EVENT if path == "/event" else [EVENT]
    with client_for(LOGIN, redis_url) as c:
        message = assert_error(c.post(path + query, json=body), 400, "invalid-flag")
    assert "features" in message or "exports" in message
    store = redis.Redis.from_url(redis_url)
    assert store.dbsize() == 0
    store.close()


def test_flags_documented_as_query_parameters(redis_url):
    with client_for(LOGIN, redis_url) as c:
        spec = c.get("/openapi.json").json()
    for path in ("/event", "/batch"):
        params = {p["name"]: p for p in spec["paths"][path]["post"]["parameters"] if p["in"] == "query"}
        assert set(params) == {"features", "exports", "dry_run", "explain"}
        assert all("bare or empty means true" in p["description"] for p in params.values())
        assert "store nothing" in params["dry_run"]["description"]


# -- error bodies --------------------------------------------------------------

def test_framework_404_and_405(redis_url):
    with client_for(LOGIN, redis_url) as c:
        m = assert_error(c.get("/nope"), 404, "not-found")
        assert "/nope" in m
        assert_error(c.post("/events", json=EVENT), 404, "not-found")
        assert_error(c.get("/event/1"), 404, "not-found")

        r = c.get("/event")
        m = assert_error(r, 405, "method-not-allowed")
        assert "GET" in m and r.headers["allow"] == "POST"
        r = c.post("/health")
        assert_error(r, 405, "method-not-allowed")
        assert r.headers["allow"] == "GET, HEAD"
        assert_error(c.delete("/batch"), 405, "method-not-allowed")
        assert_error(c.put("/topology"), 405, "method-not-allowed")


def test_api_errors_have_exactly_code_and_message(redis_url):
    with client_for(LOGIN, redis_url, api_keys="k1", max_body_bytes=2048) as c:
        key = {"x-api-key": "k1"}
        assert_error(c.post("/event", json=EVENT), 401, "unauthorized")
        assert_error(c.post("/event", json=EVENT, headers={"x-api-key": "k2"}), 401, "unauthorized")
        assert_error(c.post("/event", content=b"{nope", headers=key), 400, "malformed-json")
        assert_error(c.post("/event", json={"user": "x"}, headers=key), 400, "missing-type")
        assert_error(c.post("/event", json={**EVENT, "user": "x" * 5000}, headers=key), 413, "body-too-large")
        m = assert_error(c.post("/batch", json=[EVENT, {"_type": "nope"}], headers=key), 400, "unknown-type")
        assert m.startswith("event 1:")
        assert_error(c.post("/batch", json=EVENT, headers=key), 400, "not-an-array")
    store = redis.Redis.from_url(redis_url)
    assert store.dbsize() == 0
    store.close()


def test_store_unavailable_is_503_in_the_one_shape():
    from scowl.embedded import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"
    with client_for(LOGIN, url, store_timeout_s=0.5) as c:
        m = assert_error(c.post("/batch", json=[EVENT, EVENT]), 503, "store-unavailable")
        assert_error(c.get("/ready"), 503, "store-unavailable")
        assert c.get("/health").json() == {"status": "ok"}
        # HEAD, as some health checkers send it: the same status, no body
        assert (c.head("/ready").status_code, c.head("/ready").content) == (503, b"")
        assert (c.head("/health").status_code, c.head("/health").content) == (200, b"")
    assert m.startswith("event 0:")


def test_a_store_out_of_memory_is_503_and_writes_nothing(redis_url):
    """A store past its ``maxmemory`` refuses every write: ``POST /event`` and ``/batch`` answer 503
    ``store-unavailable`` saying so, without the script's SHA and Lua line; nothing is written; once the
    store has room the same event is taken."""
    store = redis.Redis.from_url(redis_url)
    store.flushdb()
    with client_for(LOGIN, redis_url) as c:
        assert c.post("/event", json=EVENT).status_code == 200
        keys = sorted(store.keys())
        store.config_set("maxmemory", "1")
        try:
            for r in (c.post("/event", json={**EVENT, "user": "brad"}), c.post("/batch", json=[EVENT])):
                m = assert_error(r, 503, "store-unavailable")
                assert "store out of memory" in m and "nothing of this event was written" in m, m
                assert "script" not in m and "@user" not in m, m
            assert sorted(store.keys()) == keys
        finally:
            store.config_set("maxmemory", "0")
        assert c.post("/event", json={**EVENT, "user": "brad"}).json()["features"]["n"] == 2
    store.flushdb()
    store.close()


@pytest.fixture()
def probe_client(redis_url):
    """The real app for LOGIN plus probe routes that raise what the routes never do."""
    app = create_app(compile_text(LOGIN), Settings(), redis_url=redis_url)

    @app.get("/probe/int")
    async def probe_int(n: int):
        return {"n": n}

    @app.post("/probe/body")
    async def probe_body(n: int = Body(embed=True)):
        return {"n": n}

    @app.get("/probe/http/{status}")
    async def probe_http(status: int, detail: str | None = None):
        raise HTTPException(status_code=status, detail=detail)

    @app.get("/probe/crash")
    async def probe_crash():
        raise RuntimeError("secret internal detail")

    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_request_validation_is_422(probe_client):
    m = assert_error(probe_client.get("/probe/int?n=abcxyz"), 422, "invalid-request")
    assert "query.n" in m and "abcxyz" not in m
    m = assert_error(probe_client.get("/probe/int"), 422, "invalid-request")
    assert "query.n" in m
    m = assert_error(probe_client.post("/probe/body", content=b"{bad", headers={"content-type": "application/json"}),
                     422, "invalid-request")
    assert "body" in m
    assert_error(probe_client.post("/probe/body", json={"n": "x"}), 422, "invalid-request")
    assert probe_client.get("/probe/int?n=3").json() == {"n": 3}


def test_http_exceptions(probe_client):
    assert assert_error(probe_client.get("/probe/http/403?detail=go%20away"), 403, "forbidden") == "go away"
    assert assert_error(probe_client.get("/probe/http/418"), 418, "im-a-teapot") == "I'm a Teapot"
    assert_error(probe_client.get("/probe/http/429"), 429, "too-many-requests")
    assert_error(probe_client.get("/probe/http/404?detail=gone"), 404, "not-found")
    assert probe_client.get("/probe/http/304").content == b""


def test_unexpected_exception_is_500_without_details(probe_client):
    r = probe_client.get("/probe/crash")
    assert assert_error(r, 500, "internal-error") == "internal server error"
    assert "secret" not in r.text and "RuntimeError" not in r.text


def test_status_code_names():
    assert status_code_name(404) == "not-found"
    assert status_code_name(405) == "method-not-allowed"
    assert status_code_name(422) == "invalid-request"
    assert status_code_name(502) == "bad-gateway"
    assert status_code_name(599) == "http-599"
