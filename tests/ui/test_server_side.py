"""The explorer without a browser: its JSON endpoints, pages, lookup form, settings and auth (``TestClient``).

Also: the plan → view functions (definitions, lineage edges, the lookup
form's event), the traffic arithmetic (rates, ``histogram_quantile``), the
doctests of ``scowl.ui``, the vendored files against their README, and the
package data that ships them.
"""

from __future__ import annotations

import doctest
import fnmatch
import hashlib
import importlib
import math
import re
import signal
import tomllib

import httpx
import orjson
import pytest
from fastapi.testclient import TestClient

from scowl.ui import STATIC_DIR, install_ui
from scowl.ui.topology import event_body, event_views, find_feature, lookup_fields
from scowl.ui.traffic import TrafficSampler, histogram_quantile
from serving.app import create_app
from serving.settings import Settings
from tests.e2e.store_dump import dump_store
from tests.ui.helpers import (DAY_MS, DEC_1_MS, FLIGHTS, PAYMENTS, ROOT, compile_topology, feature_names,
                              flights_events, payments_events, record_backfill, ui_app)

UI_MODULES = ("scowl.ui", "scowl.ui.auth", "scowl.ui.routes", "scowl.ui.storeview", "scowl.ui.topology",
              "scowl.ui.traffic")


def _client(app) -> TestClient:
    return TestClient(app, follow_redirects=False)


def _error(r, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code, body


# --------------------------------------------------------------------------- pages and JSON
@pytest.mark.parametrize("directory", [FLIGHTS, PAYMENTS], ids=["flights", "payments"])
def test_every_page_and_every_feature_page_answers(redis_url, directory):
    app = ui_app(directory, redis_url)
    plan = app.state.plan
    with _client(app) as c:
        for path in ("/ui", "/ui/topology", "/ui/lineage", "/ui/lookup", "/ui/store", "/ui/store/states",
                     "/ui/traffic", "/ui/login"):
            r = c.get(path)
            assert r.status_code == 200, (path, r.text[:300])
            assert r.headers["content-type"].startswith("text/html")
        for event, names in feature_names(plan).items():
            assert c.get(f"/ui/lookup?event={event}").status_code == 200
            for name in names:
                r = c.get(f"/ui/feature/{event}/{name.replace('#', '%23')}")
                assert r.status_code == 200, (event, name)
                assert f'data-feature="{name}"' in r.text
        _error(c.get("/ui/feature/nope/x"), 404, "not-found")
        _error(c.get("/ui/lookup?event=nope"), 404, "not-found")
        # not in the API's contract
        assert not any(p.startswith("/ui") for p in c.get("/openapi.json").json()["paths"])


def test_lineage_json_edges(redis_url):
    app = ui_app(PAYMENTS, redis_url)
    with _client(app) as c:
        r = c.get("/ui/lineage.json")
    assert r.status_code == 200
    g = r.json()
    nodes = {n["data"]["id"]: n for n in g["nodes"]}
    feats = {i for i, n in nodes.items() if n["data"]["kind"] != "event"}
    assert feats == {f"f:{e}:{f}" for e, fs in feature_names(app.state.plan).items() for f in fs}
    assert all("position" in nodes[i] for i in feats)
    edges = {(e["data"]["source"], e["data"]["target"], e["data"]["kind"]) for e in g["edges"]}
    # inside an event: inputs -> scalar -> its inline aggregates -> the scalar
    assert ("f:payment:amount", "f:payment:big", "dep") in edges
    assert ("f:payment:spend_vs_day#1", "f:payment:spend_vs_day", "dep") in edges
    # cross-event scopes: the writer's key and values into the reading aggregate
    assert ("f:login:user", "f:payment:logins_user_1d", "scope") in edges
    assert ("f:login:ip", "f:payment:ips_user_7d", "scope") in edges
    assert ("f:login:user", "f:payment:ips_user_7d", "scope") in edges
    assert ("f:payment:amount", "f:refund:refund_share#2", "scope") in edges
    assert ("f:payment:user", "f:refund:payments_user_1d", "scope") in edges
    assert not any(k == "scope" and s.split(":")[1] == t.split(":")[1] for s, t, k in edges)
    # writers stand left of their readers; every feature right of what it needs
    x = {i: nodes[i]["position"]["x"] for i in feats}
    assert max(x[i] for i in feats if i.startswith("f:login:")) < min(x[i] for i in feats if i.startswith("f:payment:"))
    for s, t, k in edges:
        if k == "dep":
            assert x[s] < x[t], (s, t)


def test_topology_views_definitions_and_sources():
    plan = compile_topology(PAYMENTS)
    views = event_views(plan)  # no sources: definitions printed from the plan
    card = find_feature(views, "payment", "card")
    assert card.definition == "$.cards[0] as string?" and card.kind == "input" and card.source == "payments.scowl:5"
    assert find_feature(views, "payment", "currency").definition == "$.payment.currency as string ? 'EUR'"
    assert find_feature(views, "login", "failed").definition == "$.failed as bool ? false"
    assert find_feature(views, "payment", "big").definition == "amount > 100"
    logins = find_feature(views, "payment", "ips_user_7d")
    assert logins.definition == "CountUnique<login>(ip by user last 7 days)"
    a = logins.aggregate
    assert (a.function, a.scopes, a.read_keys, a.window, a.resolution, a.limit) == \
        ("CountUnique", ["login"], ["user"], "7d", "1m", None)
    assert a.definition_hash in plan.states
    big = find_feature(views, "payment", "big_user_1d")
    assert big.aggregate.where == "big" and "where big" in big.definition
    assert find_feature(views, "payment", "last_card").aggregate.exclusive
    spend = find_feature(views, "payment", "spend_vs_day")
    assert [x.name for x in spend.inline] == ["spend_vs_day#1", "spend_vs_day#2"]
    assert spend.inline[0].definition == "Sum(amount by user last 1 hour)"
    assert spend.inline[0].inline_of == "spend_vs_day"
    assert "spend_vs_day#1" not in [v.name for v in views["payment"]]  # nested, not listed twice
    user = find_feature(views, "login", "user")
    assert ("payment", "logins_user_1d") in user.read_by and ("payment", "ips_user_7d") in user.read_by
    # with the sources, definitions are as written
    written = event_views(plan, {"payments.scowl": (PAYMENTS / "payments.scowl").read_text()})
    assert find_feature(written, "payment", "spend_vs_day").definition == \
        "Sum(amount by user last 1 hour) - Sum(amount by user last 1 day) / 24"


def test_flights_aggregate_definitions_name_window_and_keys():
    plan = compile_topology(FLIGHTS)
    views = event_views(plan)
    assert find_feature(views, "departure", "visib").definition == \
        "Latest<weather_obs>(visib by origin as airport last 3 hours)"
    assert find_feature(views, "departure", "recent_dests").definition == \
        "Sequence(dest by tailnum last 1 day limit 5)"
    assert find_feature(views, "departure", "first_dep_today").definition == \
        "FirstTime(by tailnum after midnight last 1 day)"
    assert find_feature(views, "departure", "late_arrivals_carrier_1d").definition == \
        "Count<arrival>(by carrier where arr_delay > 30 last 1 day)"


def test_lookup_form_fields_and_event_body():
    plan = compile_topology(PAYMENTS)
    ev = plan.events["payment"]
    fields = lookup_fields(ev)
    assert [(f.name, f.path_text, f.type, f.required, f.default) for f in fields] == [
        ("in.user", "$.user.id", "string", True, None),
        ("in.amount", "$.payment.amount", "float", True, None),
        ("in.currency", "$.payment.currency", "string", False, "'EUR'"),
        ("in.card", "$.cards[0]", "string", False, None),
    ]
    body = event_body(ev, {"in.user": "ann", "in.amount": "12", "in.currency": "", "in.card": "c1",
                           "_time": "1385856000000", "_json": '{"note": 1}'})
    assert body == {"note": 1, "user": {"id": "ann"}, "payment": {"amount": 12.0}, "cards": ["c1"],
                    "_type": "payment", "_time": 1385856000000}
    # what does not parse as its type stays a string: the evaluator's coercion reports it (SPEC §2.2)
    assert event_body(ev, {"in.amount": "lots"})["payment"] == {"amount": "lots"}
    login = plan.events["login"]
    assert event_body(login, {"in.failed": "true"})["failed"] is True
    with pytest.raises(ValueError):
        event_body(ev, {"_json": "[1]"})


def test_lookup_post_is_a_dry_run(redis_url):
    app = ui_app(PAYMENTS, redis_url)
    with _client(app) as c:
        assert c.post("/batch", json=payments_events(12)).status_code == 200
        before = dump_store(redis_url)
        form = {"_time": "2013-12-01T00:10:00Z", "in.user": "ann", "in.amount": "30", "in.card": "c"}
        r = c.post("/ui/lookup/payment", data=form)
        assert r.status_code == 200 and 'id="lookup-result"' in r.text, r.text[:500]
        assert dump_store(redis_url) == before
        body = event_body(app.state.plan.events["payment"], form)
        api = c.post("/event?dry_run&explain", json=body).json()
        for name, value in api["features"].items():
            assert f'data-json="{_attr(orjson.dumps(value).decode())}"' in r.text, name
        # bad input and an unknown type
        r = c.post("/ui/lookup/payment", data={"_time": "not a time", "in.user": "x"})
        assert r.status_code == 200 and 'id="lookup-error"' in r.text and "bad-time" in r.text
        _error(c.post("/ui/lookup/nope", data={}), 404, "unknown-type")
        assert dump_store(redis_url) == before


def _attr(text: str) -> str:
    """``text`` as Jinja2 escapes an attribute value."""
    return text.replace("&", "&amp;").replace('"', "&#34;").replace("'", "&#39;").replace("<", "&lt;").replace(">", "&gt;")


def test_store_json(redis_url):
    app = ui_app(FLIGHTS, redis_url)
    plan = app.state.plan
    record_backfill(redis_url, plan, [(DEC_1_MS - 5 * DAY_MS, DEC_1_MS - 3 * DAY_MS),
                                      (DEC_1_MS - 2 * DAY_MS, DEC_1_MS)])
    with _client(app) as c:
        assert c.post("/batch", json=flights_events(30)).status_code == 200
        r = c.get("/ui/store.json")
        assert r.status_code == 200, r.text
        states = {s["definition_hash"]: s for s in r.json()["states"]}
        page = c.get("/ui/store").text
    assert set(states) == set(plan.states)
    visib = states[plan.events["departure"].feature("visib").aggregate.definition_hash]
    assert visib["covered"] == [[DEC_1_MS - 5 * DAY_MS, DEC_1_MS - 3 * DAY_MS], [DEC_1_MS - 2 * DAY_MS, DEC_1_MS]]
    assert visib["gaps"] == [[DEC_1_MS - 3 * DAY_MS, DEC_1_MS - 2 * DAY_MS]]
    assert visib["online_since_ms"] == DEC_1_MS and visib["keys"] >= 1 and visib["bytes"] > 0
    assert visib["features"] == ["departure.visib"] and visib["function"] == "Latest"
    assert page.count('<rect class="covered"') == 2 * len(plan.states)
    assert page.count('<rect class="gap"') == len(plan.states)


def test_store_json_when_the_store_is_down():
    from scowl.embedded import free_port

    app = ui_app(PAYMENTS, f"redis://127.0.0.1:{free_port()}/0")
    with _client(app) as c:
        _error(c.get("/ui/store.json"), 503, "store-unavailable")
        r = c.get("/ui/store")
        assert r.status_code == 200 and 'id="store-error"' in r.text


def test_store_status_is_cached_and_read_in_a_thread(redis_url):
    import threading

    from scowl.ui.storeview import StoreStatusCache

    calls: list[str] = []

    def read(plan, url):
        calls.append(threading.current_thread().name)
        return []

    app = ui_app(PAYMENTS, redis_url)
    app.state.ui._store_cache = StoreStatusCache(app.state.plan, redis_url, ttl_s=60, read=read)
    with _client(app) as c:
        for _ in range(3):
            assert c.get("/ui/store.json").json()["states"] == []
    assert len(calls) == 1 and calls[0] != threading.main_thread().name


# --------------------------------------------------------------------------- traffic
def test_traffic_json_rates_and_quantiles(redis_url):
    app = ui_app(PAYMENTS, redis_url)
    app.state.ui.traffic.min_interval_s = 0.0
    with _client(app) as c:
        first = c.get("/ui/traffic.json").json()
        assert {r["event_type"] for r in first["event_types"]} >= {"login", "payment", "refund"}
        assert c.post("/batch", json=payments_events(30)).status_code == 200
        second = c.get("/ui/traffic.json?window=60").json()
        _error(c.get("/ui/traffic.json?window=0"), 400, "invalid-window")
        _error(c.get("/ui/traffic.json?window=61"), 400, "invalid-window")
        _error(c.get("/ui/traffic.json?window=x"), 422, "invalid-request")
    row = {r["event_type"]: r for r in second["event_types"]}["payment"]
    assert second["interval_s"] > 0
    assert row["events_per_s"] == pytest.approx(30 / second["interval_s"])
    assert 0 < row["p50_ms"] <= row["p99_ms"] <= 500
    assert row["events_total"] >= 30


def test_sampler_on_a_registry_of_its_own():
    from prometheus_client import CollectorRegistry, Counter, Histogram

    reg = CollectorRegistry()
    events = Counter("scowl_events_total", "", ["event_type"], registry=reg)
    late = Counter("scowl_late_events", "", ["event_type"], registry=reg)
    lat = Histogram("scowl_event_seconds", "", ["event_type"], buckets=(0.001, 0.01, 0.1), registry=reg)
    s = TrafficSampler(reg, min_interval_s=0.0)
    assert s.report(["a"], now=0.0)["event_types"][0]["events_per_s"] is None  # one snapshot: no interval yet
    for _ in range(8):
        events.labels("a").inc()
        lat.labels("a").observe(0.005)
    for _ in range(2):
        events.labels("a").inc()
        lat.labels("a").observe(0.05)
    late.labels("a").inc(4)
    rep = s.report(["a"], window_s=5, now=2.0)
    row = rep["event_types"][0]
    assert rep["interval_s"] == 2.0
    assert row["events_per_s"] == 5.0 and row["late_per_s"] == 2.0 and row["events_total"] == 10
    assert row["p50_ms"] == pytest.approx(1 + 9 * (5 - 0) / 8)   # within (1 ms, 10 ms]: rank 5 of 8
    assert row["p99_ms"] == pytest.approx(10 + 90 * (9.9 - 8) / 2)
    # nothing new for 10 s: rates fall to 0 over a 5 s window, quantiles have no event
    s.report(["a"], now=8.0)
    row = s.report(["a"], window_s=5, now=12.0)["event_types"][0]
    assert row["events_per_s"] == 0.0 and row["p50_ms"] is None


def test_histogram_quantile_edges():
    assert histogram_quantile(0.5, []) is None
    assert histogram_quantile(1.0, [(0.1, 4), (math.inf, 4)]) == 0.1
    assert histogram_quantile(0.99, [(0.1, 1), (0.2, 1), (math.inf, 5)]) == 0.2  # +Inf bucket: highest bound


# --------------------------------------------------------------------------- settings and auth
def test_ui_setting_off(redis_url, monkeypatch):
    monkeypatch.setenv("SCOWL_UI", "false")
    app = create_app(compile_topology(PAYMENTS), Settings(), redis_url=redis_url)
    assert install_ui(app, PAYMENTS) is False
    with _client(app) as c:
        _error(c.get("/ui"), 404, "not-found")
        _error(c.get("/ui/static/ui.css"), 404, "not-found")


def test_ui_is_open_without_ui_auth(redis_url):
    app = ui_app(PAYMENTS, redis_url, api_keys="k1")
    with _client(app) as c:
        assert c.get("/ui").status_code == 200 and c.get("/ui/store.json").status_code == 200
        _error(c.post("/event", json={"_type": "login", "user": {"id": "a"}, "ip": "1"}), 401, "unauthorized")


def test_ui_auth_header_cookie_and_login(redis_url):
    app = ui_app(PAYMENTS, redis_url, api_keys="k1,k2", ui_auth=True)
    with _client(app) as c:
        r = c.get("/ui/store?x=1")
        assert r.status_code == 303 and r.headers["location"] == "/ui/login?next=%2Fui%2Fstore%3Fx%3D1"
        _error(c.get("/ui/store.json"), 401, "unauthorized")
        _error(c.post("/ui/lookup/login", data={}), 401, "unauthorized")
        r = c.post("/ui/lookup/login", data={}, headers={"hx-request": "true"})
        _error(r, 401, "unauthorized")
        assert r.headers["hx-redirect"].startswith("/ui/login")
        assert c.get("/ui/login").status_code == 200 and c.get("/ui/static/ui.css").status_code == 200
        assert c.get("/ui/store.json", headers={"x-api-key": "k2"}).status_code == 200
        assert c.get("/ui/store.json", headers={"x-api-key": "k3"}).status_code == 401
        # the login form
        r = c.post("/ui/login", data={"api_key": "nope", "next": "/ui/store"})
        assert r.status_code == 303 and "set-cookie" not in r.headers
        assert r.headers["location"] == "/ui/login?next=%2Fui%2Fstore&rejected"
        page = c.get(r.headers["location"])
        assert page.status_code == 200 and "not accepted" in page.text and 'value="/ui/store"' in page.text
        assert "not accepted" not in c.get("/ui/login").text
        r = c.post("/ui/login", data={"api_key": "k1", "next": "/ui/lineage"})
        assert r.status_code == 303 and r.headers["location"] == "/ui/lineage"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith("scowl_api_key=k1;")
        assert all(a in cookie.lower() for a in ("httponly", "samesite=strict", "path=/ui"))
        c.cookies.set("scowl_api_key", "k1", path="/ui")
        assert c.get("/ui/lineage").status_code == 200
        assert c.get("/ui/store.json").status_code == 200
        # no open redirect
        for bad in ("https://evil.example/", "//evil.example/ui", "/uix", "/topology"):
            r = c.post("/ui/login", data={"api_key": "k1", "next": bad})
            assert r.headers["location"] == "/ui", bad
        r = c.post("/ui/logout")
        assert r.status_code == 303 and "scowl_api_key=" in r.headers["set-cookie"]


def test_auth_all_takes_the_cookie_under_ui_only(redis_url):
    app = ui_app(PAYMENTS, redis_url, api_keys="k1", auth_all=True)
    with _client(app) as c:
        # the explorer's own check answers /ui (a browser is sent to the login form, not a bare 401) ...
        r = c.get("/ui")
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
        assert c.get("/ui/login").status_code == 200 and c.get("/ui/static/ui.css").status_code == 200
        _error(c.get("/ui/traffic.json"), 401, "unauthorized")
        assert c.get("/ui", headers={"x-api-key": "k1"}).status_code == 200
        c.cookies.set("scowl_api_key", "k1", path="/")
        assert c.get("/ui").status_code == 200 and c.get("/ui/traffic.json").status_code == 200
        # ... every other path keeps SCOWL_AUTH_ALL's gate: the header, never the cookie
        _error(c.get("/topology"), 401, "unauthorized")
        _error(c.get("/metrics"), 401, "unauthorized")
        _error(c.post("/event", json={"_type": "login", "user": {"id": "a"}, "ip": "1"}), 401, "unauthorized")
        _error(c.get("/uix"), 401, "unauthorized")
        assert c.get("/health").status_code == 200
        assert c.get("/topology", headers={"x-api-key": "k1"}).status_code == 200


def test_worker_app_installs_the_explorer(redis_url, monkeypatch):
    """``scowl serve --workers N``: each worker's app (``worker_app``) has the explorer too."""
    import gc

    from scowl.commands.serve import worker_app

    monkeypatch.setenv("SCOWL_TOPOLOGY", str(PAYMENTS))
    monkeypatch.setenv("SCOWL_REDIS_URL", redis_url)
    hup = signal.getsignal(signal.SIGHUP)
    try:
        app = worker_app()
    finally:
        signal.signal(signal.SIGHUP, hup)
        gc.unfreeze()
    with _client(app) as c:
        r = c.get("/ui/topology")
        assert r.status_code == 200 and "payments.scowl:" in r.text
        # the definitions are the source text (the worker knows the topology directory)
        assert "Sum(amount by user last 1 hour) - Sum(amount by user last 1 day) / 24" in r.text


# --------------------------------------------------------------------------- shipping
def test_doctests_of_the_ui_modules():
    for name in UI_MODULES:
        result = doctest.testmod(importlib.import_module(name))
        assert result.failed == 0, name


def test_vendored_files_match_their_readme():
    vendor = STATIC_DIR / "vendor"
    readme = (vendor / "README.md").read_text()
    listed = dict((path, digest) for digest, path in re.findall(r"^([0-9a-f]{64})  (\S+)$", readme, re.M))
    on_disk = {p.relative_to(vendor).as_posix() for p in vendor.rglob("*") if p.is_file() and p.name != "README.md"}
    assert set(listed) == on_disk
    for path, digest in listed.items():
        assert hashlib.sha256((vendor / path).read_bytes()).hexdigest() == digest, path
    for lib in ("htmx", "uplot", "cytoscape"):
        assert (vendor / lib / "LICENSE").is_file()
    for name, version in (("htmx.org", "2.0.11"), ("uplot", "1.6.32"), ("cytoscape", "3.34.4")):
        assert re.search(rf"`{re.escape(name)}` \| {re.escape(version)} ", readme), name
    # the versions in the files themselves
    assert "v1.6.32" in (vendor / "uplot" / "uPlot.iife.min.js").read_text()[:200]


def test_package_data_ships_every_ui_file():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = conf["tool"]["setuptools"]["package-data"]["scowl"]
    ui = ROOT / "scowl" / "ui"
    files = [p.relative_to(ROOT / "scowl").as_posix() for d in ("templates", "static") for p in (ui / d).rglob("*")
             if p.is_file()]
    assert files
    for f in files:
        assert any(fnmatch.fnmatch(f, g) and f.count("/") == g.count("/") for g in globs), f
    deps = " ".join(conf["project"]["dependencies"])
    assert "jinja2" in deps and any(d.startswith("playwright") for d in conf["project"]["optional-dependencies"]["test"])


@pytest.mark.slow
def test_scowl_ui_command_serves_and_prints_its_url(tmp_path, redis_url):
    """``scowl ui --no-open``: the demo topology's explorer on a free port, its URL printed; stopped by SIGTERM."""
    import os
    import subprocess
    import sys
    import time

    env = {**os.environ, "SCOWL_REDIS_URL": redis_url, "SCOWL_HOME": str(tmp_path / "home"), "SCOWL_UI": "false"}
    log = tmp_path / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "scowl", "ui", "--no-open"], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            url = None
            while url is None:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                m = re.search(r"(http://127\.0\.0\.1:\d+/ui)", log.read_text())
                url = m.group(1) if m else None
                time.sleep(0.1)
            while True:  # the socket listens once printed, the app answers once started
                try:
                    r = httpx.get(f"{url}/topology", timeout=2)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, log.read_text()
                    time.sleep(0.1)
            assert r.status_code == 200 and "departures_1h" in r.text  # SCOWL_UI=false does not turn `scowl ui` off
            assert "scowl demo" in log.read_text()  # the empty store says how to fill it
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, log.read_text()


def test_without_a_package_manager_the_browser_tests_skip_loudly(monkeypatch, pytestconfig):
    """No chromium and no apt-get: a skip whose reason the terminal summary counts (tests/ui/conftest.py)."""
    from tests.ui import conftest

    monkeypatch.setattr(conftest.shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match=conftest.SKIP_PREFIX):
        conftest.install_chromium(pytestconfig)
