"""JSON responses encoded with orjson (no per-response validation on the hot path)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import Response


def json_response(content: Any, status_code: int = 200) -> Response:
    """Return ``content`` as an ``application/json`` response encoded by orjson."""
    return Response(orjson.dumps(content), status_code=status_code, media_type="application/json")
