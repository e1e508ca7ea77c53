"""Helpers for API tests: compile a topology from text and run a TestClient over it."""

from __future__ import annotations

from contextlib import contextmanager

from fastapi.testclient import TestClient

from compiler import compile_sources
from serving.app import create_app
from serving.settings import Settings


def compile_text(text: str, name: str = "main.scowl"):
    """Compile one file's text; fail the test with the rendered diagnostics on error."""
    result = compile_sources({name: text})
    assert result.plan is not None, result.render()
    return result.plan


@contextmanager
def client_for(text: str, redis_url: str, **settings):
    """Yield a ``TestClient`` over the API for topology ``text``."""
    plan = compile_text(text)
    app = create_app(plan, Settings(**settings), redis_url=redis_url)
    with TestClient(app) as client:
        yield client


def batch(client, events):
    """POST /batch and return the list of feature dicts (asserting 200)."""
    r = client.post("/batch", json=events)
    assert r.status_code == 200, r.text
    return [resp["features"] for resp in r.json()]
