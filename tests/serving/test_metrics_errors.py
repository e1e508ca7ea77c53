"""What ``GET /metrics`` tells an operator about errors and the served plan (serving.metrics).

* ``scowl_error_responses_total{status, code}``: every answer with the error
  body (SPEC §4), on the ``POST /event`` fast path and through FastAPI alike:
  bad input, a wrong key, unknown paths and methods, an unreachable store.
* ``scowl_feature_errors_total{event_type, feature}``: each feature of a
  recorded event's ``errors``; dry runs are not counted, as in
  ``scowl_events_total``.
* ``scowl_build_info{version, plan}``: the digest of the plan the process serves.

Counters live in the test process and other tests add to them, so each test
compares a scrape before and after its own requests.
"""

from __future__ import annotations

import hashlib

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from serving.app import create_app
from serving.settings import Settings
from tests.serving.helpers import compile_text

TOPO = """
event login
user := $.user as string
ip := $.ip as string
amount := $.amount as float
n_user := Count(by user last 1 hour)
big := amount > 10
sum_ip := Sum(amount by ip last 1 day)

event lookup
user := $.user as string
n := Count<login>(by user last 1 hour)
"""

KEY = {"x-api-key": "k1"}


def _samples(client: TestClient, name: str) -> dict[tuple, float]:
    """The samples of metric ``name`` in a scrape of ``/metrics``, by their labels' values (sorted by label name)."""
    text = client.get("/metrics").text
    out: dict[tuple, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(v for _, v in sorted(s.labels.items()))] = s.value
    return out


def _delta(before: dict, after: dict) -> dict:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "fastapi-route"])
def test_error_responses_are_counted_by_status_and_code(redis_url, fast):
    app = create_app(compile_text(TOPO), Settings(api_keys="k1", max_body_bytes=2048), redis_url=redis_url)
    app.fast_path = fast
    ev = {"_type": "login", "user": "u", "ip": "i", "amount": 1.0}
    with TestClient(app) as c:
        before = _samples(c, "scowl_error_responses_total")
        sent = [
            c.post("/event", content=b"{nope", headers=KEY),
            c.post("/event", content=b"{nope", headers=KEY),
            c.post("/event", json={"_type": "signup"}, headers=KEY),
            c.post("/event", json=ev, headers={"x-api-key": "wrong"}),
            c.post("/event", json={**ev, "user": "x" * 4000}, headers=KEY),
            c.post("/event?features=maybe", json=ev, headers=KEY),
            c.post("/batch", json={"not": "a list"}, headers=KEY),
            c.get("/nowhere"),
            c.delete("/event", headers=KEY),
            c.post("/event", json=ev, headers=KEY),  # answered 200: not an error
        ]
        after = _samples(c, "scowl_error_responses_total")
    assert [r.status_code for r in sent] == [400, 400, 400, 401, 413, 400, 400, 404, 405, 200]
    # labels sorted by name: (code, status)
    assert _delta(before, after) == {
        ("malformed-json", "400"): 2, ("unknown-type", "400"): 1, ("unauthorized", "401"): 1,
        ("body-too-large", "413"): 1, ("invalid-flag", "400"): 1, ("not-an-array", "400"): 1,
        ("not-found", "404"): 1, ("method-not-allowed", "405"): 1,
    }


def test_an_unreachable_store_is_counted_as_store_unavailable():
    from scowl.embedded import free_port

    app = create_app(compile_text(TOPO), Settings(store_timeout_s=0.5),
                     redis_url=f"redis://127.0.0.1:{free_port()}/0")
    with TestClient(app) as c:
        before = _samples(c, "scowl_error_responses_total")
        r = c.post("/event", json={"_type": "login", "user": "u", "ip": "i", "amount": 1.0})
        ready = c.get("/ready")
        after = _samples(c, "scowl_error_responses_total")
    assert r.status_code == 503 and ready.status_code == 503
    assert _delta(before, after) == {("store-unavailable", "503"): 2}


def test_feature_errors_are_counted_per_feature_of_recorded_events(redis_url):
    app = create_app(compile_text(TOPO), Settings(), redis_url=redis_url)
    with TestClient(app) as c:
        before = _samples(c, "scowl_feature_errors_total")
        events_before = _samples(c, "scowl_events_total")
        missing = c.post("/event", json={"_type": "login", "user": "u", "ip": "i"}).json()
        wrong = c.post("/batch", json=[{"_type": "login", "user": "u", "ip": "i", "amount": "ten"},
                                       {"_type": "login", "user": "u", "ip": "i", "amount": 3.5}]).json()
        dry = c.post("/event?dry_run", json={"_type": "login", "user": "v", "ip": "j"}).json()
        fine = c.post("/event", json={"_type": "lookup", "user": "u"}).json()
        after = _samples(c, "scowl_feature_errors_total")
        events_after = _samples(c, "scowl_events_total")
    assert "amount" in missing["errors"] and "amount" in wrong[0]["errors"] and "errors" not in wrong[1]
    assert "amount" in dry["errors"] and "errors" not in fine
    expected: dict[tuple, float] = {}
    for resp in (missing, wrong[0]):  # labels sorted by name: (event_type, feature)
        for feature in resp["errors"]:
            expected[("login", feature)] = expected.get(("login", feature), 0) + 1
    assert _delta(before, after) == expected
    assert expected[("login", "amount")] == 2
    assert _delta(events_before, events_after) == {("login",): 3, ("lookup",): 1}


def test_build_info_names_the_version_and_the_served_plan(redis_url):
    plan = compile_text(TOPO)
    other = compile_text(TOPO + "\nn_all := Count(last 1 hour)\n")
    digest = hashlib.sha256(plan.dumps() + b"\n").hexdigest()[:16]  # what `scowl plan --json` prints
    assert digest != hashlib.sha256(other.dumps() + b"\n").hexdigest()[:16]
    create_app(other, Settings(), redis_url=redis_url)
    app = create_app(plan, Settings(), redis_url=redis_url)
    with TestClient(app) as c:
        info = _samples(c, "scowl_build_info")
        version = c.get("/openapi.json").json()["info"]["version"]
    assert info == {(digest, version): 1.0}  # the plan built last, alone; labels (plan, version)
    assert version and version != "0+unknown"


def test_metrics_text_parses_and_names_every_family(redis_url):
    app = create_app(compile_text(TOPO), Settings(), redis_url=redis_url)
    with TestClient(app) as c:
        c.post("/event", json={"_type": "login", "user": "u", "ip": "i"})
        c.post("/event", content=b"[", headers={"content-type": "application/json"})
        names = {f.name for f in text_string_to_metric_families(c.get("/metrics").text)}
    assert {"scowl_events", "scowl_event_seconds", "scowl_store_errors", "scowl_error_responses",
            "scowl_feature_errors", "scowl_build_info", "scowl_late_events"} <= names
