"""``POST /event`` and ``POST /batch`` (SPEC §4): thin handlers over the evaluator."""

from __future__ import annotations

import time

import orjson
from fastapi import APIRouter, Request
from serving.responses import json_response

from serving.deps import ApiKey, EvaluatorDep
from serving.errors import ApiError
from serving.evaluate import BadEvent
from serving.metrics import EVENT_LATENCY, EVENTS, STORE_ERRORS
from serving.schemas import ErrorBody, EventResponse
from serving.store import StoreUnavailable

router = APIRouter(tags=["events"], dependencies=[ApiKey])

_ERRORS = {400: {"model": ErrorBody}, 401: {"model": ErrorBody}, 413: {"model": ErrorBody}, 503: {"model": ErrorBody}}


async def read_json(request: Request):
    """Read and parse the request body.

    Raises:
        ApiError: 413 ``body-too-large``, 400 ``malformed-json``.
    """
    limit = request.app.state.settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "body-too-large", f"request body larger than {limit} bytes")
    body = await request.body()
    if len(body) > limit:
        raise ApiError(413, "body-too-large", f"request body larger than {limit} bytes")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise ApiError(400, "malformed-json", f"request body is not valid JSON: {e}") from None


def _select(resp: dict, features: bool | None, exports: bool | None) -> dict:
    # With no exported subset defined yet, either flag returns all features
    # (SPEC §4); both false drops them.
    if features is False and exports is False:
        resp = dict(resp)
        resp.pop("features", None)
    return resp


async def _process(evaluator, body, parsed, index: int | None = None) -> dict:
    """Evaluate one validated event, counting it in the metrics.

    Raises:
        ApiError: 503 ``store-unavailable`` (with ``processed`` = ``index`` in a batch).
    """
    start = time.perf_counter()
    try:
        resp = await evaluator.process(body, parsed)
    except StoreUnavailable as e:
        STORE_ERRORS.inc()
        if index is None:
            raise ApiError(503, "store-unavailable", str(e)) from None
        raise ApiError(503, "store-unavailable", f"event {index}: {e}", processed=index) from None
    EVENTS.labels(parsed[0].name).inc()
    EVENT_LATENCY.observe(time.perf_counter() - start)
    return resp


@router.post("/event", response_model=EventResponse, responses=_ERRORS)
async def post_event(request: Request, evaluator: EvaluatorDep, features: bool | None = None, exports: bool | None = None):
    """Evaluate one event's features and record its contribution."""
    body = await read_json(request)
    try:
        parsed = evaluator.parse(body)
    except BadEvent as e:
        raise ApiError(400, e.code, e.message) from None
    resp = await _process(evaluator, body, parsed)
    return json_response(_select(resp, features, exports))


@router.post("/batch", response_model=list[EventResponse], responses=_ERRORS)
async def post_batch(request: Request, evaluator: EvaluatorDep, features: bool | None = None, exports: bool | None = None):
    """Evaluate a JSON array of events in order; all are validated before any is written."""
    body = await read_json(request)
    if not isinstance(body, list):
        raise ApiError(400, "not-an-array", "/batch takes a JSON array of events")
    if len(body) > request.app.state.settings.max_batch:
        raise ApiError(413, "batch-too-large", f"at most {request.app.state.settings.max_batch} events per batch")
    parsed = []
    for i, ev in enumerate(body):
        try:
            parsed.append(evaluator.parse(ev))
        except BadEvent as e:
            raise ApiError(400, e.code, f"event {i}: {e.message}", index=i) from None
    out = []
    for i, (ev, p) in enumerate(zip(body, parsed)):
        resp = await _process(evaluator, ev, p, index=i)
        out.append(_select(resp, features, exports))
    return json_response(out)
