"""The API's one error shape and the handlers that produce it (SPEC §4).

Every error the service answers, the framework's own included, has the body
``{"error": {"code": <string>, "message": <string>}}`` and nothing else:

* :class:`ApiError` raised by the routes and dependencies (its own codes:
  ``malformed-json``, ``unknown-type``, ``unauthorized``, ``invalid-flag``,
  ``store-unavailable`` ...);
* Starlette's ``HTTPException``, which the router raises for an unknown path
  (404 ``not-found``) and a wrong method (405 ``method-not-allowed``, with its
  ``Allow`` header kept);
* FastAPI's ``RequestValidationError`` (422 ``invalid-request``), the message
  naming each offending location, never echoing the input;
* any other exception: 500 ``internal-error`` with a fixed message (no
  exception text, no traceback; the server still logs it).

Codes are lower-case words joined by ``-``, like the rest of the API's codes.
:func:`install_error_handlers` registers all four on an app.
"""

from __future__ import annotations

from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from serving.metrics import count_error
from serving.responses import json_response

#: Stable codes for the statuses the framework raises by itself; any other
#: status gets its HTTP reason phrase in the same form (see :func:`status_code_name`).
HTTP_CODES: dict[int, str] = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    413: "body-too-large",
    415: "unsupported-media-type",
    422: "invalid-request",
    429: "too-many-requests",
    500: "internal-error",
    503: "unavailable",
}

#: Most characters of a validation message (the list of failing locations).
_MAX_MESSAGE = 1000


class ApiError(Exception):
    """An error answered as ``{"error": {"code", "message"}}`` with HTTP ``status`` (SPEC §4).

    Args:
        status: HTTP status (4xx for bad input, 503 for an unavailable store).
        code: short machine-readable reason, lower-case words joined by ``-``.
        message: explanation for a person (put positions such as a batch
            index here: the body carries no other fields).
    """

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def error_body(code: str, message: str) -> dict:
    """Return the error body ``{"error": {"code": code, "message": message}}`` (SPEC §4)."""
    return {"error": {"code": code, "message": message}}


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    """Return a JSON error response of the one shape (SPEC §4).

    Args:
        status: HTTP status.
        code: machine-readable reason.
        message: explanation for a person.
        headers: extra response headers (e.g. ``Allow`` on a 405).

    Returns:
        An ``application/json`` response with body :func:`error_body`,
        counted in ``scowl_error_responses_total`` (``serving.metrics``).
    """
    count_error(status, code)
    resp = json_response(error_body(code, message), status_code=status)
    if headers:
        resp.headers.update(headers)
    return resp


def status_code_name(status: int) -> str:
    """Return the error code for an HTTP ``status`` raised outside the routes.

    Args:
        status: any HTTP status.

    Returns:
        ``HTTP_CODES[status]`` when listed, else the reason phrase in code form
        (``"Im a teapot"`` → ``"im-a-teapot"``), else ``"http-<status>"``.
    """
    if status in HTTP_CODES:
        return HTTP_CODES[status]
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return f"http-{status}"
    return "-".join("".join(ch for ch in word if ch.isalnum()) for word in phrase.lower().split())


async def api_error_handler(request: Request, exc: ApiError) -> Response:
    """Render an :class:`ApiError` as ``exc.status`` with ``{"error": {"code", "message"}}``."""
    return error_response(exc.status, exc.code, exc.message)


async def http_exception_handler(request: Request, exc: StarletteHTTPException) -> Response:
    """Render a Starlette/FastAPI ``HTTPException`` (router 404/405 included) in the one shape.

    Args:
        request: the request (its method and path go into 404/405 messages).
        exc: the exception; its ``headers`` (e.g. ``Allow``) are kept.

    Returns:
        The JSON error response; for 204/304 (which may carry no body) an
        empty response of that status.
    """
    status = exc.status_code
    if status in (204, 304):
        return Response(status_code=status, headers=exc.headers)
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    detail = exc.detail if isinstance(exc.detail, str) else ""
    if status == 404 and detail in ("", phrase):
        message = f"no such endpoint: {request.method} {request.url.path}"
    elif status == 405 and detail in ("", phrase):
        allowed = _allowed_methods(request) or (exc.headers or {}).get("Allow") or (exc.headers or {}).get("allow")
        message = f"method {request.method} not allowed on {request.url.path}"
        if allowed:
            message += f" (allowed: {allowed})"
            exc.headers = {**{k: v for k, v in (exc.headers or {}).items() if k.lower() != "allow"}, "Allow": allowed}
    else:
        message = detail or phrase or f"HTTP {status}"
    return error_response(status, status_code_name(status), message, headers=exc.headers)


#: The order of methods in an ``Allow`` header.
_METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(request: Request) -> str:
    """The methods the app answers on ``request``'s path, as an ``Allow`` header value.

    Starlette's 405 names the methods of the first route matching the path
    only, in a set's order; a path served by several routes (``GET`` and
    ``HEAD`` of ``/health``) has them all here, in :data:`_METHOD_ORDER`:
    each method is tried against the app's routes (``Route.matches``, what
    the router itself asks).

    Returns:
        E.g. ``"GET, HEAD"``; ``""`` when no route answers the path.
    """
    router = getattr(request.app, "router", None)
    routes = getattr(router, "routes", ())
    allowed = []
    for method in _METHOD_ORDER:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in routes):
            allowed.append(method)
    return ", ".join(allowed)


def _loc(loc) -> str:
    return ".".join(str(part) for part in loc) or "request"


async def validation_error_handler(request: Request, exc: RequestValidationError) -> Response:
    """Render FastAPI's request validation failure as 422 ``invalid-request``.

    The message lists ``location: reason`` for each failure (e.g.
    ``query.n: Input should be a valid integer ...``); the offending input is
    not echoed.
    """
    parts = []
    for err in exc.errors():
        msg = err.get("msg", "invalid") if isinstance(err, dict) else str(err)
        loc = err.get("loc", ()) if isinstance(err, dict) else ()
        parts.append(f"{_loc(loc)}: {msg}")
    message = "; ".join(parts) or "invalid request"
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 3] + "..."
    return error_response(422, HTTP_CODES[422], message)


async def internal_error_handler(request: Request, exc: Exception) -> Response:
    """Answer an unexpected exception as 500 ``internal-error`` (no exception text in the body).

    Starlette calls this from its outermost middleware and re-raises the
    exception afterwards, so the server (uvicorn) still logs the traceback.
    """
    return error_response(500, HTTP_CODES[500], "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers above on ``app`` (SPEC §4: every error in one shape).

    Args:
        app: the FastAPI app to configure (modified in place).
    """
    app.add_exception_handler(ApiError, api_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_exception_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(Exception, internal_error_handler)
