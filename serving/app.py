"""The FastAPI application (SPEC §4): ``create_app(plan, settings)``.

The lifespan connects the store, registers the event script and builds one
:class:`serving.evaluate.EventProgram` per event type. Every error, the
framework's own 404/405/422 and unexpected 500s included, is answered as
``{"error": {"code", "message"}}`` (:func:`serving.errors.install_error_handlers`).
"""

from __future__ import annotations

import gc
from contextlib import asynccontextmanager

from fastapi import FastAPI

from compiler.plan import Plan
from serving.deps import ApiKeys
from serving.errors import install_error_handlers
from serving.evaluate import Evaluator, OnlineStarts
from serving.fastpath import ScowlAPI
from serving.metrics import set_build_info
from serving.openapi import install_event_schemas
from serving.routes import events, meta
from serving.settings import Settings
from serving.store import Store, StoreUnavailable


def create_app(plan: Plan, settings: Settings | None = None, redis_url: str | None = None) -> FastAPI:
    """Build the API for a compiled plan.

    Args:
        plan: the compiled topology.
        settings: configuration (default: from the environment).
        redis_url: store URL overriding ``settings.redis_url`` (the CLI passes
            the embedded server's URL here).

    Returns:
        The FastAPI app (a :class:`serving.fastpath.ScowlAPI`: ``POST /event``
        skips routing and dependency injection); use it as an ASGI app or in
        ``TestClient``.

    Raises:
        ValueError: no store URL given at all.
        NotImplementedError: the plan uses an aggregate the store lacks.
    """
    settings = settings or Settings.load()
    url = redis_url or settings.redis_url
    if not url:
        raise ValueError("no store: set SCOWL_REDIS_URL or run through `scowl serve` (embedded store)")
    # Built eagerly so an unsupported plan fails before serving; the
    # lifespan attaches the store's script call.
    evaluator = Evaluator(plan, run=None, id_ttl_ms=settings.id_ttl_s * 1000, event_stream=settings.event_stream,
                          lateness_ms=settings.allowed_lateness * 1000, pipeline=settings.batch_pipeline,
                          event_stream_maxlen=settings.event_stream_maxlen)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        store = Store(url, timeout_s=settings.store_timeout_s,
                      on_mode=lambda cluster: setattr(evaluator, "cluster", cluster),
                      stream_maxlen=settings.event_stream_maxlen)
        try:
            await store.connect()  # standalone or cluster (SPEC §5.1)
            # libraries of earlier plans make every call's Lua garbage collection dearer (Store.retire_functions)
            await store.retire_functions(evaluator.scripts())
        except StoreUnavailable:
            pass  # down at start-up: /ready says so, and the next call asks again
        app.state.store = store
        evaluator.run = store.run
        evaluator.run_many = store.run_many
        evaluator.online = OnlineStarts(store.record_online)
        app.state.evaluator = evaluator
        try:
            yield
        finally:
            await store.close()

    version = installed_version()
    set_build_info(version, plan.dumps() + b"\n")  # what `scowl plan DIR --json` prints
    app = ScowlAPI(title="scowl", version=version, lifespan=lifespan)
    app.state.plan = plan
    app.state.settings = settings
    #: the store's URL (the embedded server's when the CLI passed one): for pages that read the store directly
    app.state.redis_url = url
    app.state.api_keys = ApiKeys(settings.key_set())
    install_error_handlers(app)
    app.include_router(events.router)
    app.include_router(meta.router)
    install_event_schemas(app, plan)
    return app


def installed_version(distribution: str = "scowl") -> str:
    """The installed version of ``distribution`` (``importlib.metadata``), or ``"0+unknown"`` when it is not
    installed (``/metrics``' ``scowl_build_info``, ``scowl --version``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "0+unknown"


def freeze_heap() -> None:
    """Exempt everything alive now (the compiled plan, the app, the evaluator) from the cyclic GC.

    Call once in a serving process, after the app is built. Python's oldest
    generation is collected now and then by walking every tracked object;
    with the plan and the framework loaded that took 40-60 ms, during which
    no request was answered (the p99 at 1k events/s went from 5-6 ms to
    10-25 ms in ``bench/serve.py``). ``gc.collect()`` first, so that only
    live objects are frozen; garbage made later is collected as before.

    Source: CPython ``gc.freeze`` (3.7+), written for pre-fork servers
    (Instagram's "Dismissing Python Garbage Collection", 2017).
    """
    gc.collect()
    gc.freeze()


def create_app_from_env() -> FastAPI:
    """ASGI factory for process managers: compile ``$SCOWL_TOPOLOGY`` and serve it.

    Use ``uvicorn --factory serving.app:create_app_from_env`` (several workers
    need a shared ``SCOWL_REDIS_URL``). Calls :func:`freeze_heap`: it is
    meant to run once per serving process.

    Raises:
        RuntimeError: ``SCOWL_TOPOLOGY`` unset or the topology has errors
            (the diagnostics are in the message).
    """
    import os

    from compiler import compile_dir

    topo = os.environ.get("SCOWL_TOPOLOGY")
    if not topo:
        raise RuntimeError("set SCOWL_TOPOLOGY to the topology directory")
    result = compile_dir(topo)
    if result.plan is None:
        raise RuntimeError(result.render())
    app = create_app(result.plan, Settings.load())
    freeze_heap()
    return app
