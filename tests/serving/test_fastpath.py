"""``POST /event`` answers the same on the ASGI fast path as through FastAPI's route (serving.fastpath).

Each request of a list -- good events, every flag form, every 4xx of the
route, a wrong API key -- is sent to a fresh store twice: once with
:attr:`ScowlAPI.fast_path` on, once off. Status, content type and body must
be equal (``_id`` fixes the event ids), and so must what the store holds.
"""

from __future__ import annotations

import orjson
import redis
from fastapi.testclient import TestClient

from serving.app import create_app
from serving.settings import Settings
from tests.serving.helpers import compile_text

TOPO = """
event login
user := $.user as string
ip := $.ip as string
amount := $.amount as float?
n_user := Count(by user last 1 hour)
sum_ip := Sum(amount by ip last 1 day)
avg_ip := Average(amount by ip last 10 minutes exclusive)
"""

KEY = {"x-api-key": "k1"}


def _requests():
    ev = {"_type": "login", "_time": "2021-04-12T22:43:46Z", "user": "anna", "ip": "1.1.1.1", "amount": 2.5}
    out = []
    for i in range(4):
        out.append(("/event", orjson.dumps({**ev, "_id": f"e{i}", "_time": 1618267426000 + 1000 * i}), KEY))
    out += [
        ("/event?features", orjson.dumps({**ev, "_id": "f1"}), KEY),
        ("/event?features=false&exports=0", orjson.dumps({**ev, "_id": "f2"}), KEY),
        ("/event?exports=maybe", orjson.dumps({**ev, "_id": "f3"}), KEY),
        ("/event?exports=1&exports=off&features=no", orjson.dumps({**ev, "_id": "f4"}), KEY),
        ("/event", orjson.dumps({**ev, "_id": "e0"}), KEY),  # repeated id: answered, not written
        ("/event", b"{not json", KEY),
        ("/event", b"[1, 2]", KEY),
        ("/event", orjson.dumps({"user": "x"}), KEY),
        ("/event", orjson.dumps({"_type": "nope"}), KEY),
        ("/event", orjson.dumps({**ev, "_time": "yesterday"}), KEY),
        ("/event", orjson.dumps({**ev, "_id": True}), KEY),
        ("/event", orjson.dumps({**ev, "user": "x" * 5000}), KEY),
        ("/event", orjson.dumps({**ev, "_id": "w1"}), {"x-api-key": "wrong"}),
        ("/event", orjson.dumps({**ev, "_id": "w2"}), {}),
        ("/event", orjson.dumps({**ev, "_id": "n1", "amount": None}), KEY),
    ]
    return out


def _run(redis_url: str, fast: bool) -> tuple[list, dict]:
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    app = create_app(compile_text(TOPO), Settings(api_keys="k1", max_body_bytes=4096), redis_url=redis_url)
    app.fast_path = fast
    answers = []
    with TestClient(app) as c:
        for path, body, headers in _requests():
            r = c.post(path, content=body, headers=headers)
            answers.append((path, r.status_code, r.headers["content-type"], r.json()))
    store = {}
    for k in sorted(client.keys("sc:{*")):
        kind = client.type(k)
        store[k] = client.hgetall(k) if kind == b"hash" else kind
    return answers, store


def test_fast_path_answers_and_writes_like_the_route(redis_url):
    fast_answers, fast_store = _run(redis_url, fast=True)
    slow_answers, slow_store = _run(redis_url, fast=False)
    for fast, slow in zip(fast_answers, slow_answers):
        assert fast == slow
    assert len(fast_answers) == len(slow_answers) == len(_requests())
    statuses = [a[1] for a in fast_answers]
    assert statuses.count(200) == 9 and {400, 401, 413} <= set(statuses)
    assert fast_store == slow_store and fast_store


def test_fast_path_counts_the_event_in_metrics(redis_url):
    from serving.metrics import EVENTS

    app = create_app(compile_text(TOPO), Settings(), redis_url=redis_url)
    before = EVENTS.labels("login")._value.get()
    with TestClient(app) as c:
        r = c.post("/event", json={"_type": "login", "user": "u", "ip": "i"})
        assert r.status_code == 200 and r.json()["features"]["n_user"] == 1
    assert EVENTS.labels("login")._value.get() == before + 1
