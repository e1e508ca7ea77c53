"""API fuzz: requests generated from the service's own OpenAPI schema (schemathesis) (SPEC §4; issue 12).

A real ``uvicorn`` server (in a thread of the test process, on a free
loopback port) serves a topology with every input type (bool, int, float, string, time), an aggregate and a
query event, with an API key set, over the session's real store. Schemathesis
reads ``/openapi.json`` from it and, per operation, sends schema-conforming
and schema-violating requests (positive and negative data generation), with
and without the key. Every answer must be:

* below 500, except a genuine ``503 store-unavailable`` (the store is up
  here, so none is expected);
* JSON for every error status, in the one error shape
  ``{"error": {"code", "message"}}`` (SPEC §4);
* free of any Python traceback text.
"""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.serving.helpers import compile_text, served

TOPOLOGY = """
event login
user := $.user as string
ip := $.ip as string?
amount := $.amount as float?
n := $.n as int?
ok := $.ok as bool?
at := $.at as time?
tags := $.tags as string?
city := $.geo.city as string
zip := $.geo.zip as int?
count_user := Count(by user last 1 hour)
sum_amount := Sum(amount by ip last 1 day)
last_ok := Latest(ok by user)

event check
user := $.user as string
logins := Count<login>(by user last 1 day)
"""
KEY = "fuzz-key"


@pytest.fixture(scope="module")
def server(redis_server):
    from serving.app import create_app
    from serving.settings import Settings

    app = create_app(compile_text(TOPOLOGY), Settings(api_keys=KEY, max_batch=50), redis_url=redis_server)
    with served(app) as url:
        yield url


@pytest.fixture(scope="module")
def api_schema(server):
    return schemathesis.openapi.from_url(f"{server}/openapi.json")


def _check(case, with_key: bool, seen: Counter) -> None:
    resp = case.call(headers={"x-api-key": KEY} if with_key else {})
    seen[(case.method, case.path, resp.status_code)] += 1
    text = resp.text
    where = f"{case.method} {case.formatted_path} -> {resp.status_code}: {text[:300]}"
    assert "Traceback (most recent call last)" not in text, where
    assert resp.status_code < 500, where
    ctype = resp.headers.get("content-type") or ""
    ctype = ctype[0] if isinstance(ctype, list) and ctype else ctype  # schemathesis keeps header lists
    if resp.status_code >= 400 and str(ctype).startswith("application/json"):
        body = resp.json()
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, where


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_no_server_error_and_no_traceback(api_schema, mode):
    """Schemathesis cases of every operation (pytest 9 does not run its plugin: its strategies, driven here)."""
    from hypothesis import given
    from hypothesis import strategies as st
    from hypothesis.errors import Unsatisfiable
    from schemathesis.generation import GenerationMode

    generation = GenerationMode.POSITIVE if mode == "positive" else GenerationMode.NEGATIVE
    ran = 0
    seen: Counter = Counter()
    for result in api_schema.get_all_operations():
        op = result.ok()
        try:
            strategy = op.as_strategy(generation_mode=generation)
        except Exception:  # noqa: BLE001 - no negative form of an operation without inputs
            continue

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=strategy, with_key=st.booleans())
        def run(case, with_key):
            _check(case, with_key, seen)

        try:
            run()
        except Unsatisfiable:  # a negative form of an operation with no inputs to violate
            assert generation is GenerationMode.NEGATIVE, op.label
            continue
        ran += 1
    assert ran >= (6 if generation is GenerationMode.POSITIVE else 2)
    statuses = {(p, code) for (_, p, code) in seen}
    if generation is GenerationMode.POSITIVE:  # the schema leads to events the API evaluates, and refuses
        assert {("/event", 200), ("/batch", 200), ("/event", 401)} <= statuses, sorted(seen.items())
    else:
        assert ("/event", 400) in statuses or ("/event", 422) in statuses, sorted(seen.items())


def test_the_schema_documents_each_event_type(server):
    doc = httpx.get(f"{server}/openapi.json", headers={"x-api-key": KEY}).json()
    assert {"/event", "/batch", "/topology", "/health", "/ready", "/metrics"} <= set(doc["paths"])
    body = doc["paths"]["/event"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/Event"}
    batch = doc["paths"]["/batch"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert batch == {"type": "array", "items": body}
    variants = {v["title"]: v for v in doc["components"]["schemas"]["Event"]["oneOf"]}
    assert set(variants) == {"login", "check"}
    login = variants["login"]
    assert login["required"] == ["_type", "user", "geo"]
    geo = login["properties"]["geo"]
    assert geo["required"] == ["city"] and set(geo["properties"]) == {"city", "zip"}
    assert login["properties"]["_type"] == {"type": "string", "enum": ["login"]}
    assert login["properties"]["n"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert login["properties"]["ok"]["anyOf"][0] == {"type": "boolean"}
    assert variants["check"]["required"] == ["_type", "user"]
