"""ASGI app factories for the benchmarks (run by uvicorn in a child process).

* ``scowl_app``: the real API for the topology in ``SCOWL_TOPOLOGY`` over
  ``SCOWL_REDIS_URL``.
* ``bare_app``: the floor -- FastAPI parsing the POST body with orjson and
  returning a constant (``/batch``: one per event of the array).
"""

from __future__ import annotations

import os

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response


def scowl_app():
    """Return the scowl API for ``$SCOWL_TOPOLOGY`` (``serving.app.create_app_from_env``)."""
    from serving.app import create_app_from_env

    return create_app_from_env()


def bare_app():
    """Return a FastAPI app whose ``POST /event`` parses the body and returns a constant (``/batch``: one per event)."""
    app = FastAPI()

    @app.post("/event")
    async def event(request: Request):
        orjson.loads(await request.body())
        return Response(orjson.dumps({"ok": True}), media_type="application/json")

    @app.post("/batch")
    async def batch(request: Request):
        events = orjson.loads(await request.body())
        return Response(orjson.dumps([{"features": {"ok": True}} for _ in events]), media_type="application/json")

    return app
