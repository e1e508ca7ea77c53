"""Shared helpers of the end-to-end tests: post events through the API, compare values."""

from __future__ import annotations

import math

import orjson
from fastapi.testclient import TestClient

from serving.app import create_app
from serving.settings import Settings


def close(a, b):
    """Equal, with floats within 1e-9 relative (SPEC §3.3), recursively in structs."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    return a == b


def post_all(plan, url, events):
    """POST ``events`` in order through ``/batch`` (500 a request); return the feature dicts."""
    app = create_app(plan, Settings(), redis_url=url)
    out = []
    with TestClient(app) as c:
        for i in range(0, len(events), 500):
            r = c.post("/batch", content=orjson.dumps(events[i : i + 500]), headers={"content-type": "application/json"})
            assert r.status_code == 200, r.text
            out.extend(x["features"] for x in r.json())
    return out
