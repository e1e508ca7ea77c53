"""``POST /event`` and ``POST /batch`` (SPEC §4): thin handlers over the evaluator.

Query flags ``features`` and ``exports`` take every form Sumatra's clients
send (the ``sumatra-sdk`` posts ``/event?exports`` and ``/batch?exports``):
bare (``?exports``) or empty (``?exports=``) means true, and so do ``true``,
``1``, ``yes``, ``on``; ``false``, ``0``, ``no``, ``off`` mean false (any
case). Another value is a 400 ``invalid-flag``, answered before the body is
read, so nothing is written. See :func:`serving.deps.parse_flag` and
:func:`_select` for what the flags select.
"""

from __future__ import annotations

import time

import orjson
from fastapi import APIRouter, Request
from serving.responses import json_response

from serving.deps import ApiKey, DryRunFlag, EvaluatorDep, ExplainFlag, ExportsFlag, FeaturesFlag
from serving.errors import ApiError
from serving.evaluate import BadEvent, BatchInterrupted
from serving.metrics import DRY_RUNS, EVENT_LATENCY, EVENTS, STORE_ERRORS, count_feature_errors
from serving.schemas import ErrorBody, EventResponse
from serving.store import StoreUnavailable

router = APIRouter(tags=["events"], dependencies=[ApiKey])

_ERRORS = {status: {"model": ErrorBody} for status in (400, 401, 413, 422, 500, 503)}


async def read_json(request: Request):
    """Read and parse the request body (any content type: the SDK's batch call sends none).

    Returns:
        The parsed JSON value.

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
    """Apply the query flags to one event's response (SPEC §4).

    Args:
        resp: the evaluator's response (``event_id``, ``event_time``,
            ``features``, maybe ``errors``).
        features: the parsed ``features`` flag (``None``: absent).
        exports: the parsed ``exports`` flag (``None``: absent).

    Returns:
        ``resp`` unchanged unless both flags are explicitly false, then a copy
        without ``features``. With no exported subset defined in Scowl,
        either flag returns all features, and an absent flag counts as true
        (both are the default).
    """
    if features is False and exports is False:
        resp = dict(resp)
        resp.pop("features", None)
    return resp


async def _process(evaluator, body, parsed, dry_run: bool = False, explain: bool = False) -> dict:
    """Evaluate one validated event, counting it in the metrics.

    Args:
        evaluator: the app's evaluator.
        body: the event's JSON object.
        parsed: ``evaluator.parse(body)``.
        dry_run: the read-only mode (``?dry_run``): nothing stored, counted
            in ``scowl_dry_runs_total`` instead of the event metrics.
        explain: add the ``explain`` object (``?explain``,
            ``serving.evaluate.EventProgram.explain``).

    Returns:
        The event's response dict.

    Raises:
        ApiError: 503 ``store-unavailable``.
    """
    start = time.perf_counter()
    try:
        resp = await evaluator.process(body, parsed, dry_run, explain)
    except StoreUnavailable as e:
        STORE_ERRORS.inc()
        raise ApiError(503, "store-unavailable", str(e)) from None
    if dry_run:
        DRY_RUNS.labels(parsed[0].name).inc()
    else:
        EVENTS.labels(parsed[0].name).inc()
        EVENT_LATENCY.labels(parsed[0].name).observe(time.perf_counter() - start)
        count_feature_errors(parsed[0].name, resp)
    return resp


@router.post("/event", response_model=EventResponse, responses=_ERRORS)
async def post_event(request: Request, evaluator: EvaluatorDep, features: FeaturesFlag, exports: ExportsFlag,
                     dry_run: DryRunFlag, explain: ExplainFlag):
    """Evaluate one event's features and record its contribution (docs/semantics.md §8).

    With ``?dry_run`` nothing is recorded: the read-only mode answers the
    values the event would get now. ``?explain`` adds, per aggregate, the
    window it counted and the writes counted.

    Body: one JSON object with ``_type`` and optional ``_time`` / ``_id``.

    Returns:
        ``{"event_id", "event_time", "features", "errors"?}`` (``features``
        left out only with both flags false, see :func:`_select`).

    Raises:
        ApiError: 400 (``invalid-flag``, ``malformed-json``, ``missing-type``,
            ``unknown-type``, ``bad-time``, ``not-an-object`` ...), 401
            ``unauthorized``, 413 ``body-too-large``, 503 ``store-unavailable``.
    """
    body = await read_json(request)
    try:
        parsed = evaluator.parse(body)
    except BadEvent as e:
        raise ApiError(400, e.code, e.message) from None
    resp = await _process(evaluator, body, parsed, dry_run=bool(dry_run), explain=bool(explain))
    return json_response(_select(resp, features, exports))


@router.post("/batch", response_model=list[EventResponse], responses=_ERRORS)
async def post_batch(request: Request, evaluator: EvaluatorDep, features: FeaturesFlag, exports: ExportsFlag,
                     dry_run: DryRunFlag, explain: ExplainFlag):
    """Evaluate a JSON array of events in order; all are validated before any is written (docs/semantics.md §8).

    Each event sees exactly the writes of the events before it, as if they
    were posted one by one to ``/event``; runs of events of one script call
    each are sent to the store pipelined (``Evaluator.process_batch``).

    With ``?dry_run`` each event is evaluated alone against the store as it
    is (nothing is stored, so an event does not see the batch's earlier
    events); ``?explain`` as in :func:`post_event`.

    Returns:
        The list of responses of :func:`post_event`, in input order.

    Raises:
        ApiError: as :func:`post_event` (an invalid event's message starts
            ``event <index>:``), plus 400 ``not-an-array`` and 413
            ``batch-too-large``; a 503's message says which events were
            processed, which may have been, and that later ones were not
            (``serving.evaluate.BatchInterrupted``).
    """
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
            raise ApiError(400, e.code, f"event {i}: {e.message}") from None
    out = []
    last = time.perf_counter()
    try:
        async for i, resp in evaluator.process_batch(list(zip(body, parsed)), bool(dry_run), bool(explain)):
            name = parsed[i][0].name
            if dry_run:
                DRY_RUNS.labels(name).inc()
            else:
                now = time.perf_counter()
                EVENTS.labels(name).inc()
                EVENT_LATENCY.labels(name).observe(now - last)  # the event's share of the batch's time
                last = now
                count_feature_errors(name, resp)
            out.append(_select(resp, features, exports))
    except BatchInterrupted as e:
        STORE_ERRORS.inc()
        raise ApiError(503, "store-unavailable", e.describe()) from None
    return json_response(out)
