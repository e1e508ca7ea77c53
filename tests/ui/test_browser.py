"""The feature explorer in a real browser (Debian's chromium, Playwright): every page, a lookup, a lineage click.

Two topologies, each served by a real uvicorn server over the session's
Redis-protocol server, each in a database of its own (as ``scowl serve``
does, explorer installed): the
demo's ``examples/flights`` and ``tests/ui/payments`` (nested input paths,
defaults, cross-event scopes into an inline aggregate). Each store holds
two recorded backfill intervals with a gap between them and the online
writes of a batch of events. Every page is loaded and shot as a PNG under
the test's ``tmp_path``; the checks are on what the page shows, against
the plan and the API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx
import orjson
import pytest
import redis

from tests.e2e.store_dump import db_url, dump_store
from tests.serving.helpers import served
from tests.ui.helpers import (DAY_MS, DEC_1_MS, FLIGHTS, PAYMENTS, feature_names, flights_events, payments_events,
                              record_backfill, ui_app)

#: The explorer's pages (path under /ui).
PAGES = ("topology", "lineage", "lookup", "store", "traffic")


@dataclass
class Server:
    """A served topology: base URL, plan, store URL."""

    base: str
    plan: object
    redis_url: str


def _fresh_db(redis_server: str, db: int) -> str:
    """The URL of database ``db`` of the session's server, emptied (each served topology has its own)."""
    url = db_url(redis_server, db)
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url


def _serve(redis_server: str, db: int, directory, events: list[dict]):
    url = _fresh_db(redis_server, db)
    app = ui_app(directory, url)
    plan = app.state.plan
    record_backfill(url, plan, [(DEC_1_MS - 20 * DAY_MS, DEC_1_MS - 12 * DAY_MS),
                                         (DEC_1_MS - 10 * DAY_MS, DEC_1_MS)])
    with served(app) as base:
        r = httpx.post(f"{base}/batch", content=orjson.dumps(events), headers={"content-type": "application/json"},
                       timeout=60)
        assert r.status_code == 200, r.text
        yield Server(base, plan, url)


@pytest.fixture(scope="module")
def flights(redis_server):
    """The demo topology served with the explorer, its store seeded (module docstring)."""
    yield from _serve(redis_server, 2, FLIGHTS, flights_events())


@pytest.fixture(scope="module")
def payments(redis_server):
    """The second topology served with the explorer, its store seeded."""
    yield from _serve(redis_server, 3, PAYMENTS, payments_events())


@pytest.fixture(params=["flights", "payments"])
def server(request) -> Server:
    """Each served topology in turn."""
    return request.getfixturevalue(request.param)


def _goto(page, url: str) -> None:
    resp = page.goto(url)
    assert resp is not None and resp.status == 200, (url, resp and resp.status)


def test_every_page_loads_and_shows_every_feature(server: Server, page, shot):
    plan = server.plan
    names = feature_names(plan)
    for name in PAGES:
        _goto(page, f"{server.base}/ui/{name}")
        assert page.locator(f'header nav a.active[href="/ui/{name}"]').count() == 1
        if name == "lineage":
            page.wait_for_selector('#cy[data-ready="1"]')
        if name == "traffic":
            page.wait_for_function("() => +document.body.dataset.trafficPolls >= 2", timeout=10_000)
        shot(name)

    # topology: one row per feature (inline aggregates under their parent), every name in the text
    _goto(page, f"{server.base}/ui/topology")
    rows = page.locator("tr.feature").evaluate_all(
        "els => els.map(e => [e.closest('section').id.slice(2), e.dataset.feature, e.dataset.inlineOf || null])")
    assert sorted((e, f) for e, f, _ in rows) == sorted((e, f) for e, fs in names.items() for f in fs)
    inline = {(e, f): p for e, f, p in rows if p}
    assert inline == {(e, f.name): f.inline_of for e, ev in plan.events.items() for f in ev.features if f.inline_of}
    text = page.inner_text("main")
    for fs in names.values():
        for f in fs:
            assert f in text, f
    for h in plan.states:  # every aggregate's definition hash is listed
        assert h in text

    # lineage: a node per feature, linked to its page, and the cross-event scopes as edges
    _goto(page, f"{server.base}/ui/lineage")
    page.wait_for_selector('#cy[data-ready="1"]')
    nodes = page.evaluate("() => scowlCy.nodes('[href]').map(n => [n.data('event'), n.data('name'), n.data('href')])")
    assert sorted((e, n) for e, n, _ in nodes) == sorted((e, f) for e, fs in names.items() for f in fs)
    assert all(h.startswith("/ui/feature/") for _, _, h in nodes)
    scopes = page.evaluate("() => scowlCy.edges('[kind = \"scope\"]').length")
    assert scopes > 0

    # store: a row per state, each with its coverage strip: two backfilled intervals, one gap
    _goto(page, f"{server.base}/ui/store")
    states = page.locator("tr[data-state]").evaluate_all(
        "els => els.map(e => [e.dataset.state, e.querySelectorAll('rect.covered').length, "
        "e.querySelectorAll('rect.gap').length, e.querySelector('td.online').textContent.trim()])")
    assert sorted(s for s, *_ in states) == sorted(plan.states)
    assert all(c == 2 and g == 1 for _, c, g, _ in states), states
    assert any(o != "never" for *_, o in states)  # the seeded events wrote online

    # traffic: the four charts draw, the table counts this process's events
    _goto(page, f"{server.base}/ui/traffic")
    page.wait_for_function("() => +document.body.dataset.trafficPolls >= 2", timeout=10_000)
    assert page.locator(".uplot canvas").count() == 4
    totals = page.locator("tr[data-event-type]").evaluate_all(
        "els => els.map(e => [e.dataset.eventType, e.querySelector('.events_total').textContent])")
    assert sorted(e for e, _ in totals) == sorted(plan.events)
    assert sum(int(t.replace(",", "")) for _, t in totals) > 0


def test_feature_pages_from_the_topology(flights: Server, page, shot):
    _goto(page, f"{flights.base}/ui/topology")
    page.click('a[href="/ui/feature/departure/visib"]')
    page.wait_for_url(re.compile(r".*/ui/feature/departure/visib$"))
    assert page.get_attribute("#feature-title", "data-feature") == "visib"
    main = page.inner_text("main")
    for text in ("Latest", "weather_obs", "3h", "1s", flights.plan.events["departure"].feature("visib").aggregate.definition_hash):
        assert text in main, text
    shot("feature-visib")
    page.click('a[href="/ui/feature/weather_obs/airport"]')  # the writer's key, from the writers table
    page.wait_for_url(re.compile(r".*/ui/feature/weather_obs/airport$"))
    assert "departure.visib" in page.inner_text("main")  # written into the reading aggregate's state


def _shown(page) -> dict[str, object]:
    """The lookup result's features: ``{name: value}`` from each row's ``data-json``."""
    pairs = page.locator("#lookup-result tr[data-feature] td.value").evaluate_all(
        "els => els.map(e => [e.closest('tr').dataset.feature, e.dataset.json])")
    return {name: orjson.loads(value) for name, value in pairs}


def test_lookup_through_the_form_equals_the_dry_run_api_and_writes_nothing(flights: Server, page, shot):
    _goto(page, f"{flights.base}/ui/lookup?event=departure")
    values = {"_time": "2013-12-01T01:30:00Z", "in.carrier": "UA", "in.flight": "1545", "in.tailnum": "N101",
              "in.origin": "EWR", "in.dest": "IAH", "in.dep_delay": "12.5"}
    for name, value in values.items():
        page.fill(f'[name="{name}"]', value)
    before = dump_store(flights.redis_url)
    page.click("#lookup-submit")
    page.wait_for_selector("#lookup-result")
    shot("lookup-result")
    assert dump_store(flights.redis_url) == before  # nothing written

    body = orjson.loads(page.locator("#lookup-body").text_content())
    assert body == {"_type": "departure", "_time": "2013-12-01T01:30:00Z", "carrier": "UA", "flight": 1545,
                    "tailnum": "N101", "origin": "EWR", "dest": "IAH", "dep_delay": 12.5}
    api = httpx.post(f"{flights.base}/event?dry_run&explain", json=body, timeout=30)
    assert api.status_code == 200, api.text
    expected = api.json()
    assert dump_store(flights.redis_url) == before
    shown = _shown(page)
    assert shown == expected["features"]
    assert shown["departures_1h"] > 0 and shown["visib"] is not None  # the seeded store answered

    # per aggregate: the window counted and the writes counted, as the API explains them
    rows = page.locator("#lookup-result tr[data-feature]").evaluate_all(
        "els => els.map(e => [e.dataset.feature, (e.querySelector('td.window') || {}).textContent || '', "
        "(e.querySelector('td.writes') || {}).textContent || ''])")
    explained = expected["explain"]
    assert explained
    for name, window, writes in rows:
        x = explained.get(name)
        if x is None:
            continue
        assert x["window"]["to"] in window, (name, window)
        if x["window"]["from"] is None:  # Decayed*: all history, weighed by age
            assert "all history" in window and x["window"].get("decay_s"), (name, window)
        else:
            assert x["window"]["from"] in window, (name, window)
        assert writes.strip() == ("—" if x["writes"] is None else str(x["writes"])), (name, writes)

    # what the lookup showed is what posting the event for real then answers (and that one is written)
    real = httpx.post(f"{flights.base}/event", json=body, timeout=30)
    assert real.status_code == 200, real.text
    assert real.json()["features"] == shown
    assert dump_store(flights.redis_url) != before


def test_lookup_builds_nested_paths(payments: Server, page):
    _goto(page, f"{payments.base}/ui/lookup?event=payment")
    page.fill('[name="_time"]', "2013-12-01T00:15:00Z")
    page.fill('[name="in.user"]', "ann")
    page.fill('[name="in.amount"]', "250")
    page.fill('[name="in.card"]', "card-x")
    page.click("#lookup-submit")
    page.wait_for_selector("#lookup-result")
    body = orjson.loads(page.locator("#lookup-body").text_content())
    assert body == {"_type": "payment", "_time": "2013-12-01T00:15:00Z", "user": {"id": "ann"},
                    "payment": {"amount": 250.0}, "cards": ["card-x"]}
    expected = httpx.post(f"{payments.base}/event?dry_run", json=body, timeout=30).json()["features"]
    shown = _shown(page)
    assert shown == expected
    assert shown["currency"] == "EUR" and shown["big"] is True and shown["logins_user_1d"] > 0


def _click_node(page, node_id: str) -> None:
    """Click a lineage node where cytoscape drew it (a real mouse click on the canvas)."""
    page.wait_for_selector('#cy[data-ready="1"]')
    box = page.evaluate(
        """id => { const n = scowlCy.getElementById(id); const p = n.renderedPosition();
                   const r = document.getElementById('cy').getBoundingClientRect();
                   return {x: r.left + p.x, y: r.top + p.y, w: r.width, h: r.height}; }""", node_id)
    assert 0 < box["x"] < 1400 and 0 < box["y"] < 900, box  # drawn inside the viewport
    page.mouse.click(box["x"], box["y"])


def test_clicking_a_lineage_node_opens_its_feature(flights: Server, page, shot):
    _goto(page, f"{flights.base}/ui/lineage")
    _click_node(page, "f:departure:visib")
    page.wait_for_url(re.compile(r".*/ui/feature/departure/visib$"))
    assert page.get_attribute("#feature-title", "data-feature") == "visib"
    shot("after-lineage-click")


def test_clicking_an_inline_aggregate_node(payments: Server, page):
    _goto(page, f"{payments.base}/ui/lineage")
    _click_node(page, "f:refund:refund_share#2")
    page.wait_for_url(re.compile(r".*/ui/feature/refund/refund_share%232$"))
    assert page.get_attribute("#feature-title", "data-feature") == "refund_share#2"
    assert "Sum<payment>(amount by user last 7 days)" in page.inner_text("main")


def test_login_under_auth_all(redis_server, page, shot):
    """With SCOWL_AUTH_ALL and a key: the explorer sends the browser to its login form; the cookie it sets
    opens /ui (and only /ui: the API still wants the header)."""
    app = ui_app(PAYMENTS, _fresh_db(redis_server, 4), api_keys="ui-key", auth_all=True)
    with served(app) as base:
        _goto(page, f"{base}/ui/store")
        assert re.search(r"/ui/login\?next=%2Fui%2Fstore$", page.url), page.url
        shot("login")
        page.fill("#api_key", "wrong")
        page.click("form.login button")
        assert "that key is not accepted" in page.inner_text("main")
        page.fill("#api_key", "ui-key")
        page.click("form.login button")
        page.wait_for_url(re.compile(r".*/ui/store$"))
        assert page.locator("tr[data-state]").count() == len(app.state.plan.states)
        cookie = next(c for c in page.context.cookies() if c["name"] == "scowl_api_key")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
        _goto(page, f"{base}/ui/lineage")
        page.wait_for_selector('#cy[data-ready="1"]')
        assert httpx.get(f"{base}/topology", cookies={"scowl_api_key": "ui-key"}).status_code == 401
        assert httpx.get(f"{base}/topology", headers={"x-api-key": "ui-key"}).status_code == 200
