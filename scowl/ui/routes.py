"""The explorer's routes under ``/ui``: pages (Jinja2 + htmx), their fragments and JSON endpoints.

Pages (HTML):

* ``GET /ui``, ``/ui/topology`` -- every event and feature (:mod:`scowl.ui.topology`).
* ``GET /ui/feature/{event}/{name}`` -- one feature (lineage nodes link here).
* ``GET /ui/lineage`` -- the lineage graph (cytoscape).
* ``GET /ui/lookup?event=E`` -- a form per event type; ``POST
  /ui/lookup/{event}`` (htmx) answers a dry-run evaluation as a fragment.
* ``GET /ui/store`` -- per aggregate state: keys, bytes, coverage timeline,
  online start; ``GET /ui/store/states`` its fragment (refreshed by htmx).
* ``GET /ui/traffic`` -- live charts (uPlot) polling ``/ui/traffic.json``.
* ``GET|POST /ui/login``, ``POST /ui/logout`` -- the key cookie (:mod:`scowl.ui.auth`).

JSON (errors as ``{"error": {"code", "message"}}``, SPEC §4):
``GET /ui/lineage.json``, ``GET /ui/store.json``, ``GET /ui/traffic.json``.

None of them is in the OpenAPI document (the API's contract is SPEC §4).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from compiler.typesystem import format_time
from scowl.common import format_duration_s
from scowl.ui.auth import COOKIE, auth_required, require_ui_key, safe_next
from scowl.ui.storeview import axis_svg, short_time, state_json, time_domain, timeline_svg
from scowl.ui.topology import event_body, find_feature, lookup_fields
from serving.errors import ApiError
from serving.responses import json_response

HERE = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters["duration"] = format_duration_s
templates.env.filters["iso"] = format_time
templates.env.filters["short_time"] = short_time

#: Largest traffic averaging window a client may ask for (seconds).
MAX_WINDOW_S = 60.0

router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(require_ui_key)])
open_router = APIRouter(prefix="/ui", include_in_schema=False)


def _page(request: Request, name: str, active: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render template ``name`` with the layout's common context (the explorer's state, the active tab)."""
    ui = request.app.state.ui
    base = {"ui": ui, "active": active, "auth_on": auth_required(request.app),
            "logged_in": bool(request.cookies.get(COOKIE))}
    return templates.TemplateResponse(request, name, {**base, **context}, status_code=status_code)


def _not_found(request: Request, message: str):
    """404 ``not-found`` in the API's one error shape (SPEC §4: every error, pages' included)."""
    from serving.errors import error_response

    return error_response(404, "not-found", message)


# --------------------------------------------------------------------------- topology
@router.get("", response_class=HTMLResponse)
@router.get("/topology", response_class=HTMLResponse)
async def topology_page(request: Request):
    """Every event and feature: kind, type, definition, source ``file:line``, aggregate details, inline aggregates."""
    return _page(request, "topology.html", "topology", title="Topology")


@router.get("/feature/{event}/{name}", response_class=HTMLResponse)
async def feature_page(request: Request, event: str, name: str):
    """One feature: its definition, aggregate and writers, what it needs and what needs it (404 not-found error if unknown)."""
    ui = request.app.state.ui
    view = find_feature(ui.views, event, name)
    if view is None:
        return _not_found(request, f"no feature {name!r} in event {event!r}")
    parent = find_feature(ui.views, event, view.inline_of) if view.inline_of else None
    return _page(request, "feature.html", "topology", title=f"{event}.{view.label}", f=view, parent=parent)


# --------------------------------------------------------------------------- lineage
@router.get("/lineage", response_class=HTMLResponse)
async def lineage_page(request: Request):
    """The lineage graph; a click on a feature opens its page."""
    return _page(request, "lineage.html", "lineage", title="Lineage")


@router.get("/lineage.json")
async def lineage_json(request: Request):
    """The lineage graph as cytoscape elements (``scowl.ui.topology.lineage``)."""
    return json_response(request.app.state.ui.lineage)


# --------------------------------------------------------------------------- lookup
@router.get("/lookup", response_class=HTMLResponse)
async def lookup_page(request: Request, event: str | None = None):
    """A dry-run form for one event type (``?event=``; default: the one with the most features)."""
    plan = request.app.state.plan
    if not plan.events:
        return _not_found(request, "the topology has no event type")
    if event is None:
        event = max(sorted(plan.events), key=lambda e: len(plan.events[e].outputs))
    if event not in plan.events:
        return _not_found(request, f"no event type {event!r}")
    ev = plan.events[event]
    return _page(request, "lookup.html", "lookup", title=f"Lookup: {event}", event=event,
                 fields=lookup_fields(ev), events=sorted(plan.events))


async def _form(request: Request) -> dict[str, str]:
    """The request's URL-encoded form (``application/x-www-form-urlencoded``, htmx's default), last value wins.

    Raises:
        ApiError: 413 ``body-too-large`` above ``SCOWL_MAX_BODY_BYTES``.
    """
    limit = request.app.state.settings.max_body_bytes
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limit:
            raise ApiError(413, "body-too-large", f"request body larger than {limit} bytes")
    return dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))


@router.post("/lookup/{event}", response_class=HTMLResponse)
async def lookup_submit(request: Request, event: str):
    """Evaluate the submitted form as a dry run with explain; answer the result fragment.

    The event is built by ``scowl.ui.topology.event_body`` and evaluated by
    ``app.state.evaluator.process(body, dry_run=True, explain=True)``:
    nothing is stored (counted in ``scowl_dry_runs_total``). The fragment
    shows each feature's value and error, and for aggregates the window
    counted (from, to, resolution; "all history" and the decay time for
    ``Decayed*``) and the writes counted (``—`` when the state cannot tell). Bad input or an unavailable store is shown in the
    fragment (status 200, so htmx swaps it in).
    """
    from serving.evaluate import BadEvent
    from serving.metrics import DRY_RUNS
    from serving.store import StoreUnavailable

    plan = request.app.state.plan
    if event not in plan.events:
        raise ApiError(404, "unknown-type", f"unknown event type {event!r}")
    form = await _form(request)
    ev = plan.events[event]
    error = resp = body = elapsed_ms = None
    try:
        body = event_body(ev, form)
        evaluator = request.app.state.evaluator
        parsed = evaluator.parse(body)
        t0 = time.perf_counter()
        resp = await evaluator.process(body, parsed, dry_run=True, explain=True)
        elapsed_ms = (time.perf_counter() - t0) * 1000
        DRY_RUNS.labels(event).inc()
    except ValueError as e:  # BadEvent is a ValueError too
        error = f"{e.code}: {e.message}" if isinstance(e, BadEvent) else str(e)
    except StoreUnavailable as e:
        error = f"store unavailable: {e}"
    rows = _result_rows(request.app.state.ui, event, resp) if resp is not None else []
    return _page(request, "lookup_result.html", "lookup", event=event, body=body, resp=resp, rows=rows,
                 error=error, elapsed_ms=elapsed_ms,
                 body_json=orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() if body is not None else "",
                 resp_json=orjson.dumps(resp, option=orjson.OPT_INDENT_2).decode() if resp is not None else "")


def _result_rows(ui, event: str, resp: dict) -> list[dict[str, Any]]:
    """One row per output feature of a dry-run response (inline aggregates under their parent).

    Each row: ``view`` (``FeatureView``), ``value`` (JSON text), ``error``,
    ``explain`` (the feature's explain entry or ``None``) and ``inline``
    (the inline aggregates' views).
    """
    feats = resp.get("features", {})
    errors = resp.get("errors", {}) or {}
    explain = resp.get("explain", {}) or {}
    rows = []
    for v in ui.views.get(event, []):
        rows.append({"view": v, "value": orjson.dumps(feats.get(v.name)).decode(), "error": errors.get(v.name),
                     "explain": explain.get(v.name), "inline": v.inline})
    return rows


# --------------------------------------------------------------------------- store
async def _store_states(request: Request):
    """``(states, age_s, error)`` from the app's store status cache; ``error`` is a message when the store failed."""
    import redis

    try:
        states, age = await request.app.state.ui.store_cache(request.app).get()
        return states, age, None
    except (redis.RedisError, OSError) as e:
        return [], 0.0, f"store unavailable: {e}"


def _store_context(states) -> dict[str, Any]:
    domain = time_domain(states)
    return {"states": states, "axis": axis_svg(domain), "strips": {s.definition_hash: timeline_svg(s, domain)
                                                                   for s in states}}


@router.get("/store", response_class=HTMLResponse)
async def store_page(request: Request):
    """Per aggregate state: keys, bytes, backfill coverage with gaps (timeline), online-writer start."""
    states, age, error = await _store_states(request)
    return _page(request, "store.html", "store", title="Store", age=age, error=error, **_store_context(states))


@router.get("/store/states", response_class=HTMLResponse)
async def store_fragment(request: Request):
    """The store page's table alone (htmx refreshes it every few seconds)."""
    states, age, error = await _store_states(request)
    return _page(request, "store_states.html", "store", age=age, error=error, **_store_context(states))


@router.get("/store.json")
async def store_json(request: Request):
    """Per aggregate state: ``scowl.ui.storeview.state_json`` (``{"states": [...], "age_s"}``).

    Raises:
        ApiError: 503 ``store-unavailable``.
    """
    states, age, error = await _store_states(request)
    if error is not None:
        raise ApiError(503, "store-unavailable", error)
    return json_response({"states": [state_json(s) for s in states], "age_s": round(age, 3)})


# --------------------------------------------------------------------------- traffic
@router.get("/traffic", response_class=HTMLResponse)
async def traffic_page(request: Request):
    """Live events/s, p50/p99 latency and late events per event type (uPlot charts, polled)."""
    return _page(request, "traffic.html", "traffic", title="Traffic", events=sorted(request.app.state.plan.events))


@router.get("/traffic.json")
async def traffic_json(request: Request, window: float = 5.0):
    """The traffic of the last ``window`` seconds (``scowl.ui.traffic.TrafficSampler.report``) and the wall time.

    Raises:
        ApiError: 400 ``invalid-window`` unless ``0 < window <= 60``.
    """
    if not 0 < window <= MAX_WINDOW_S:
        raise ApiError(400, "invalid-window", f"window must be in (0, {MAX_WINDOW_S:g}] seconds, got {window:g}")
    report = request.app.state.ui.traffic.report(sorted(request.app.state.plan.events), window_s=window)
    return json_response({"time": time.time(), "window_s": window, **report})


# --------------------------------------------------------------------------- login
@open_router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, next: str | None = None, rejected: str | None = None):
    """The login form: one field for an API key (sets the ``scowl_api_key`` cookie); ``rejected``: say the last key was not accepted."""
    message = None
    if rejected is not None:
        message = ("that key is not accepted" if request.app.state.api_keys
                   else "this server has no API keys: nothing to log in to")
    return _page(request, "login.html", "", title="Log in", next=safe_next(next), message=message)


@open_router.post("/login", response_class=HTMLResponse)
async def login_submit(request: Request):
    """Check the posted ``api_key``; if accepted, set the cookie and go to ``next`` (303), else back to the form (303).

    A refused key goes back to ``/ui/login?next=…&rejected`` (post/redirect/get),
    which says so: no error status, since every error the service answers
    has the JSON error body (SPEC §4) and this one is for a person.

    The cookie (``scowl.ui.auth``): ``HttpOnly``, ``SameSite=Strict``,
    ``Path=/ui``, ``Secure`` over HTTPS, for the browser session.
    """
    form = await _form(request)
    key = form.get("api_key", "")
    target = safe_next(form.get("next"))
    if not request.app.state.api_keys or not request.app.state.api_keys.accepts(key):
        from urllib.parse import quote

        return RedirectResponse(f"/ui/login?next={quote(target, safe='')}&rejected", status_code=303)
    resp = RedirectResponse(target, status_code=303)
    resp.set_cookie(COOKIE, key, httponly=True, samesite="strict", path="/ui",
                    secure=request.url.scheme == "https")
    return resp


@open_router.post("/logout")
async def logout(request: Request):
    """Remove the cookie and go to the login form (303)."""
    resp = RedirectResponse("/ui/login", status_code=303)
    resp.delete_cookie(COOKIE, path="/ui")
    return resp

