"""``GET /health``, ``/ready``, ``/topology``, ``/metrics`` (SPEC §4)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from serving.deps import StoreDep
from serving.errors import ApiError
from serving.metrics import CONTENT_TYPE, exposition
from serving.responses import json_response
from serving.schemas import ErrorBody, Health

router = APIRouter(tags=["meta"])


@router.get("/health", response_model=Health)
async def health():
    """Liveness: the process answers (``GET``; ``HEAD`` for checkers that send it: the same status, no body)."""
    return json_response({"status": "ok"})


@router.get("/ready", response_model=Health, responses={503: {"model": ErrorBody}})
async def ready(store: StoreDep):
    """Readiness: the store answers ``PING`` (docs/semantics.md §8); ``HEAD`` gives the same status, no body.

    Returns:
        ``{"status": "ready"}``.

    Raises:
        ApiError: 503 ``store-unavailable`` (the one error body, SPEC §4).
    """
    if await store.ping():
        return json_response({"status": "ready"})
    raise ApiError(503, "store-unavailable", "the store does not answer PING")


# HEAD of the probes, for health checkers that send it (uvicorn sends no body); out of the OpenAPI document,
# where it would repeat the GET operations
router.add_api_route("/health", health, methods=["HEAD"], include_in_schema=False)
router.add_api_route("/ready", ready, methods=["HEAD"], include_in_schema=False)


@router.get("/topology")
async def topology(request: Request):
    """Events, features, types, windows and resolutions of the served plan."""
    plan = request.app.state.plan
    events = {}
    for name, ev in sorted(plan.events.items()):
        feats = []
        for f in ev.outputs:
            d = _feature_entry(f)
            inline = ev.inline(f.name)
            if inline:
                d["inline_aggregates"] = [{**_feature_entry(x), "text": x.text} for x in inline]
            feats.append(d)
        events[name] = {"features": feats, "query_event": not ev.writes}
    return json_response({"events": events})


def _feature_entry(f) -> dict:
    """One feature of ``GET /topology``: name, type, kind and, for aggregates, window and state."""
    d = {"name": f.name, "type": f.type, "kind": f.kind}
    if f.aggregate is not None:
        a = f.aggregate
        d.update(
            function=a.function, scopes=list(a.scopes), window_s=a.window_s,
            resolution_s=a.resolution_s, limit=a.limit, exclusive=a.exclusive,
            definition_hash=a.definition_hash,
        )
    return d


@router.get("/metrics")
async def metrics():
    """Prometheus text exposition: the service's totals, whichever worker answers (``serving.metrics``)."""
    return Response(exposition(), media_type=CONTENT_TYPE)
