"""The feature explorer: ``/ui`` pages of ``scowl serve`` (issue 13).

Server-rendered pages (Jinja2 templates under ``templates/``, htmx for the
lookup form and the store refresh) over the served plan, the store and the
service's own metrics; cytoscape draws the lineage graph and uPlot the
traffic charts. The scripts are vendored under ``static/vendor/`` (versions
and sources in its README): no build step, no network.

* Topology: every event and feature, definitions with ``file:line``,
  aggregate details, inline aggregates under their feature; a page per feature.
* Lineage: inputs → scalars → aggregates, cross-event scopes as edges.
* Lookup: a form per event type, evaluated as a dry run with explain
  (``POST /event?dry_run&explain`` semantics: nothing stored).
* Store: per state keys, bytes, backfill coverage and gaps, online start.
* Traffic: events/s, p50/p99, late events per event type, live.

:func:`install_ui` adds it to an app built by ``serving.app.create_app``;
``scowl serve`` (one worker or several) and ``scowl ui`` call it. Settings:
``SCOWL_UI`` (on by default), ``SCOWL_UI_AUTH`` (see :mod:`scowl.ui.auth`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI

__all__ = ["install_ui", "UIState", "STATIC_DIR"]

#: The explorer's static files (style sheet, scripts, vendored libraries).
STATIC_DIR = Path(__file__).resolve().parent / "static"


@dataclass
class UIState:
    """What the explorer keeps per app (``app.state.ui``).

    Attributes:
        views: ``scowl.ui.topology.event_views`` of the plan.
        lineage: ``scowl.ui.topology.lineage`` of the plan.
        sources: topology file texts by relative path (empty when unknown).
        traffic: the metrics sampler (``scowl.ui.traffic.TrafficSampler``).
        counts: ``{"events", "features", "inputs", "scalars", "aggregates",
            "inline", "states"}`` of the plan.
    """

    views: dict[str, list]
    lineage: dict[str, Any]
    sources: dict[str, str]
    traffic: Any
    counts: dict[str, int]
    _store_cache: Any = field(default=None, repr=False)

    def store_cache(self, app: FastAPI):
        """The app's ``scowl.ui.storeview.StoreStatusCache`` (made on first use, over ``app.state.redis_url``)."""
        if self._store_cache is None:
            from scowl.ui.storeview import StoreStatusCache

            self._store_cache = StoreStatusCache(app.state.plan, app.state.redis_url)
        return self._store_cache


def _counts(plan) -> dict[str, int]:
    feats = [f for ev in plan.events.values() for f in ev.features]
    named = [f for f in feats if f.inline_of is None]
    return {
        "events": len(plan.events), "features": len(named),
        "inputs": sum(f.kind == "input" for f in named), "scalars": sum(f.kind == "scalar" for f in named),
        "aggregates": sum(f.kind == "aggregate" for f in named),
        "inline": sum(f.inline_of is not None for f in feats), "states": len(plan.states),
    }


def install_ui(app: FastAPI, topology_dir: str | Path | None = None) -> bool:
    """Mount the explorer on ``app`` under ``/ui`` when ``app.state.settings.ui`` is true (``SCOWL_UI``).

    Adds the pages and JSON endpoints (``scowl.ui.routes``), the static files
    at ``/ui/static``, the login redirect, and ``app.state.ui``
    (:class:`UIState`). With ``SCOWL_AUTH_ALL`` and keys set, ``/ui``
    requests are routed around ``ScowlAPI``'s header-only gate to the
    explorer's own check, which takes the key from the header or the login
    cookie (``scowl.ui.auth.route_ui_around_auth_all``).

    Args:
        app: an app of ``serving.app.create_app`` (``app.state.plan``,
            ``settings``, ``api_keys``, ``redis_url``; ``evaluator`` and
            ``store`` once its lifespan runs).
        topology_dir: the topology directory, so that definitions are shown
            as written (else they are printed from the plan).

    Returns:
        Whether the explorer was installed (``False`` with ``SCOWL_UI=false``
        or when it already is).
    """
    if not app.state.settings.ui or getattr(app.state, "ui", None) is not None:
        return False
    from fastapi.staticfiles import StaticFiles

    from scowl.ui import routes
    from scowl.ui.auth import LoginRequired, login_required_handler, route_ui_around_auth_all
    from scowl.ui.topology import event_views, lineage, read_sources
    from scowl.ui.traffic import TrafficSampler

    plan = app.state.plan
    sources = read_sources(topology_dir)
    app.state.ui = UIState(views=event_views(plan, sources), lineage=lineage(plan), sources=sources,
                           traffic=TrafficSampler(), counts=_counts(plan))
    app.include_router(routes.open_router)
    app.include_router(routes.router)
    app.mount("/ui/static", StaticFiles(directory=str(STATIC_DIR)), name="ui-static")
    app.add_exception_handler(LoginRequired, login_required_handler)
    if app.state.settings.auth_all and app.state.api_keys:
        route_ui_around_auth_all(app)
    return True
