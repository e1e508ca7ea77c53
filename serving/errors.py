"""The API's one error type and its JSON rendering (SPEC §4)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response
from serving.responses import json_response


class ApiError(Exception):
    """An error answered as ``{"error": {"code", "message"}}`` with ``status``.

    Args:
        status: HTTP status (4xx for bad input, 503 for an unavailable store).
        code: short machine-readable reason.
        message: explanation for a person.
    """

    def __init__(self, status: int, code: str, message: str, **extra):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra


async def api_error_handler(request: Request, exc: ApiError) -> Response:
    """Render an :class:`ApiError`."""
    return json_response({"error": {"code": exc.code, "message": exc.message, **exc.extra}}, status_code=exc.status)
