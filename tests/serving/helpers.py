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


@contextmanager
def served(app, log_level: str = "error"):
    """Run ``app`` with a real uvicorn server in a thread on a free loopback port; yield its base URL.

    Returns once ``GET /ready`` answers 200 (the lifespan ran and the store
    answers), and stops the server on exit.

    Raises:
        AssertionError: the server was not ready within 30 s.
    """
    import threading
    import time

    import httpx
    import uvicorn

    from scowl.embedded import free_port

    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level=log_level, lifespan="on"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not become ready in 30 s"
            time.sleep(0.05)
        yield url
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
