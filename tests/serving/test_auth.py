"""API keys: rotation by listing several, a comparison with every key, and ``SCOWL_AUTH_ALL`` (docs/semantics.md §8.5).

* ``SCOWL_API_KEYS=old,new`` accepts both; dropping ``old`` refuses it with
  401, on the fast path (``POST /event``) and the FastAPI routes alike.
* ``serving.deps.ApiKeys`` compares a presented key with every accepted key
  (``hmac.compare_digest`` over SHA-256 digests, counted here): which key
  matched, or how much of one, does not change the work done.
* Without ``SCOWL_AUTH_ALL`` only ``/event`` and ``/batch`` need the key; with
  it every path but ``/health`` and ``/ready`` does, ``/metrics``,
  ``/topology``, ``/openapi.json``, ``/docs`` and unknown paths included.
"""

from __future__ import annotations

import hmac

import pytest

from serving.deps import ApiKeys
from tests.serving.helpers import client_for

LOGIN = """
event login
user := $.user as string
n := Count(by user)
"""
EVENT = {"_type": "login", "_time": "2021-04-12T22:43:46Z", "user": "anna"}
GUARDED = ["/metrics", "/topology", "/openapi.json", "/docs", "/no-such-path"]


def test_rotation_accepts_every_listed_key_and_refuses_a_dropped_one(redis_url):
    with client_for(LOGIN, redis_url, api_keys="old-key, new-key") as c:
        for key in ("old-key", "new-key"):
            assert c.post("/event", json=EVENT, headers={"x-api-key": key}).status_code == 200
            assert c.post("/batch", json=[EVENT], headers={"x-api-key": key}).status_code == 200
    with client_for(LOGIN, redis_url, api_keys="new-key") as c:
        for path, body in (("/event", EVENT), ("/batch", [EVENT])):
            r = c.post(path, json=body, headers={"x-api-key": "old-key"})
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", r.text
        assert c.post("/event", json=EVENT, headers={"x-api-key": "new-key"}).json()["features"]["n"] == 5


@pytest.mark.parametrize("given,accepted", [
    ("k-one", True), ("k-two-longer", True), ("k-on", False), ("k-one ", False), ("", False), (None, False),
    ("K-ONE", False), ("ü", False),
])
def test_every_key_is_compared_whatever_matches(monkeypatch, given, accepted):
    keys = ApiKeys(["k-one", "k-two-longer", "third"])
    calls = []
    real = hmac.compare_digest

    def counting(a, b):
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    assert keys.accepts(given) is accepted
    assert len(calls) == 3, "stopped comparing at a match"
    assert all(a == b == 32 for a, b in calls), "compared raw keys of different lengths, not digests"


def test_no_key_configured_accepts_anything():
    keys = ApiKeys([])
    assert not keys and keys.accepts(None) and keys.accepts("whatever")


def test_metrics_and_topology_are_open_unless_auth_all(redis_url):
    with client_for(LOGIN, redis_url, api_keys="k1") as c:
        assert c.get("/metrics").status_code == 200
        assert c.get("/topology").status_code == 200
        assert c.post("/event", json=EVENT).status_code == 401


def test_auth_all_guards_every_path_but_health_and_ready(redis_url):
    with client_for(LOGIN, redis_url, api_keys="k1,k2", auth_all=True) as c:
        for path in GUARDED:
            r = c.get(path)
            assert r.status_code == 401, (path, r.status_code)
            assert r.json() == {"error": {"code": "unauthorized", "message": "missing or wrong x-api-key header"}}
            assert c.get(path, headers={"x-api-key": "wrong"}).status_code == 401
        assert c.get("/metrics", headers={"x-api-key": "k2"}).status_code == 200
        assert "login" in c.get("/topology", headers={"x-api-key": "k1"}).text
        assert c.get("/openapi.json", headers={"x-api-key": "k1"}).status_code == 200
        assert c.get("/no-such-path", headers={"x-api-key": "k1"}).status_code == 404
        assert c.get("/health").status_code == 200 and c.get("/ready").status_code == 200
        assert c.post("/event", json=EVENT).status_code == 401
        assert c.post("/event", json=EVENT, headers={"x-api-key": "k1"}).status_code == 200


def test_auth_all_from_the_environment(monkeypatch):
    from serving.settings import Settings

    monkeypatch.setenv("SCOWL_AUTH_ALL", "true")
    monkeypatch.setenv("SCOWL_API_KEYS", "a,b")
    s = Settings()
    assert s.auth_all is True and s.key_set() == {"a", "b"}
