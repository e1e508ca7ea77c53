"""``POST /event`` as a plain ASGI handler: the hot path without routing or dependency injection.

FastAPI's routing, dependency resolution and middleware stack cost about a
fifth of the worker's CPU per event on the demo topology (py-spy under
``bench/serve.py`` load). :class:`ScowlAPI` answers ``POST /event`` itself,
before any of that, with exactly the behaviour of the FastAPI route
(:func:`serving.routes.events.post_event`, which stays for OpenAPI and for
paths under a ``root_path``): the same API-key check, query flags, body
limit, JSON parsing, evaluation, metrics, response and error bodies
(``{"error": {"code", "message"}}``, SPEC §4). Everything else goes to
FastAPI unchanged.

Source: SPEC §4; the ASGI 3.0 HTTP message spec (``http.request`` /
``http.response.start`` / ``http.response.body``).
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl

import orjson
from fastapi import FastAPI

from serving.deps import OPEN_PATHS, parse_flag
from serving.errors import ApiError, error_body
from serving.evaluate import BadEvent
from serving.metrics import count_error
from serving.routes.events import _process, _select

logger = logging.getLogger("scowl.serving")

_JSON_HEADERS = [(b"content-type", b"application/json")]


def _header(scope, name: bytes) -> str | None:
    """The value of header ``name`` (lower-case bytes) of an ASGI scope, or ``None``."""
    for k, v in scope["headers"]:
        if k == name:
            return v.decode("latin-1")
    return None


async def _answer(send, status: int, payload) -> None:
    """Send one JSON response (``payload`` encoded with orjson)."""
    body = orjson.dumps(payload)
    await send({"type": "http.response.start", "status": status,
                "headers": [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class _Disconnected(Exception):
    """The client went away before its body arrived (nothing to answer)."""


class ScowlAPI(FastAPI):
    """The FastAPI app with ``POST /event`` answered by :meth:`post_event_fast` (module docstring).

    Attributes:
        fast_path: answer ``POST /event`` here (default); ``False`` routes it
            through FastAPI like every other request (tests compare the two).
    """

    fast_path: bool = True
    #: path prefixes whose routes check the API key themselves (``scowl.ui``: the header or a login cookie):
    #: ``SCOWL_AUTH_ALL``'s header gate lets requests for ``P`` and ``P/...`` through to them
    self_checked_prefixes: tuple[str, ...] = ()

    async def __call__(self, scope, receive, send) -> None:
        """ASGI entry point: ``POST /event`` on the fast path, anything else through FastAPI.

        With ``SCOWL_AUTH_ALL`` (``Settings.auth_all``) and keys set, a
        request to any path but ``serving.deps.OPEN_PATHS`` and
        :attr:`self_checked_prefixes` without an accepted ``x-api-key`` is
        answered 401 here.
        """
        if scope["type"] == "http":
            if self.fast_path and scope["path"] == "/event" and scope["method"] == "POST" \
                    and getattr(self.state, "evaluator", None) is not None:
                await self.post_event_fast(scope, receive, send)
                return
            settings = getattr(self.state, "settings", None)
            if settings is not None and settings.auth_all and scope["path"] not in OPEN_PATHS \
                    and not self._self_checked(scope["path"]) \
                    and not self.state.api_keys.accepts(_header(scope, b"x-api-key")):
                count_error(401, "unauthorized")
                await _answer(send, 401, error_body("unauthorized", "missing or wrong x-api-key header"))
                return
        await super().__call__(scope, receive, send)

    def _self_checked(self, path: str) -> bool:
        """Whether ``path`` is under one of :attr:`self_checked_prefixes` (the prefix itself or below it)."""
        return any(path == p or path.startswith(p + "/") for p in self.self_checked_prefixes)

    async def post_event_fast(self, scope, receive, send) -> None:
        """Answer one ``POST /event`` (same contract as ``serving.routes.events.post_event``).

        Args:
            scope, receive, send: the ASGI HTTP connection.

        Errors are answered, never raised: 400/401/413/503 as
        :class:`serving.errors.ApiError` bodies, anything unexpected as 500
        ``internal-error`` (logged with its traceback).
        """
        try:
            status, payload = 200, await self._event(scope, receive)
        except _Disconnected:
            return
        except ApiError as e:
            status, payload = e.status, error_body(e.code, e.message)
        except Exception:  # noqa: BLE001 - the API answers every failure in its error shape
            logger.exception("POST /event failed")
            status, payload = 500, error_body("internal-error", "internal server error")
        if status != 200:
            count_error(status, payload["error"]["code"])
        await _answer(send, status, payload)

    async def _event(self, scope, receive) -> dict:
        state = self.state
        api_key = declared = None
        for name, value in scope["headers"]:
            if name == b"x-api-key":
                api_key = value.decode("latin-1")
            elif name == b"content-length":
                declared = value
        if not state.api_keys.accepts(api_key):
            raise ApiError(401, "unauthorized", "missing or wrong x-api-key header")
        features = exports = dry_run = explain = None
        qs = scope.get("query_string") or b""
        if qs:
            flags: dict[str, str] = {}
            for k, v in parse_qsl(qs.decode("latin-1"), keep_blank_values=True):
                flags[k] = v  # repeated: the last one counts, as in FastAPI
            features = parse_flag("features", flags.get("features"))
            exports = parse_flag("exports", flags.get("exports"))
            dry_run = parse_flag("dry_run", flags.get("dry_run"))
            explain = parse_flag("explain", flags.get("explain"))
        limit = state.settings.max_body_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, "body-too-large", f"request body larger than {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, "body-too-large", f"request body larger than {limit} bytes")
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise ApiError(400, "malformed-json", f"request body is not valid JSON: {e}") from None
        evaluator = state.evaluator
        try:
            parsed = evaluator.parse(body)
        except BadEvent as e:
            raise ApiError(400, e.code, e.message) from None
        resp = await _process(evaluator, body, parsed, dry_run=bool(dry_run), explain=bool(explain))
        return _select(resp, features, exports)
