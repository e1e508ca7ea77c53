"""ASGI app factories for the benchmarks (run by uvicorn in a child process).

* ``scowl_app``: the real API for the topology in ``SCOWL_TOPOLOGY`` over
  ``SCOWL_REDIS_URL``.
* ``bare_app``: the floor -- FastAPI parsing the POST body with orjson and
  returning a constant.
"""

from __future__ import annotations

import os

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response


def scowl_app():
    """Return the scowl API for ``$SCOWL_TOPOLOGY`` (see module docstring)."""
    from compiler import compile_dir
    from serving.app import create_app
    from serving.settings import Settings

    result = compile_dir(os.environ["SCOWL_TOPOLOGY"])
    assert result.plan is not None, result.render()
    return create_app(result.plan, Settings())


def bare_app():
    """Return a FastAPI app whose ``POST /event`` parses the body and returns a constant."""
    app = FastAPI()

    @app.post("/event")
    async def event(request: Request):
        orjson.loads(await request.body())
        return Response(orjson.dumps({"ok": True}), media_type="application/json")

    return app
