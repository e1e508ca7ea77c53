"""``POST /batch`` sends runs of one-call events pipelined (``Evaluator.process_batch``, ``Store.run_many``).

Pipelining must change nothing a client can see: each event sees exactly
the writes of the events before it, as when the events are posted one by
one to ``/event``. Checked here against ``/event`` one by one, on a fresh
database each, with chunks of 4 (so batches span several chunks):

* responses (features, errors, ``explain``, a given ``_id``) and the whole
  store image, for a topology whose events all make one script call and for
  one where ``login`` makes two (an aggregate keyed by an aggregate: sent
  one at a time between pipelined runs), with late events and repeated
  ``_id`` s inside a batch;
* dry-run batches;
* a batch after ``SCRIPT FLUSH`` (the chunk loads its scripts itself);
* the 503 message of an interrupted batch (:class:`BatchInterrupted`).
"""

from __future__ import annotations

import pytest
import redis

from serving.evaluate import BatchInterrupted
from tests.e2e.helpers import (LOGIN_EVERY_FUNCTION, PURCHASE_AGGREGATES, displaced, login_purchase_events,
                               login_purchase_topology)
from tests.e2e.store_dump import assert_same_store, db_url, dump_store
from tests.serving.helpers import client_for, compile_text

TOPOLOGIES = {
    "one-call": login_purchase_topology(LOGIN_EVERY_FUNCTION, PURCHASE_AGGREGATES),
    # `again` is keyed by an aggregate of the same event: login makes two script calls
    "mixed": login_purchase_topology(LOGIN_EVERY_FUNCTION + "mirror := Latest(user by user last 1 hour)\n"
                                                            "again := Count(by mirror as user last 1 hour)\n",
                                     PURCHASE_AGGREGATES),
}
T0 = 1_700_000_000_000


def _events(n: int, seed: int) -> list[dict]:
    """Seeded events up to an hour late, every 7th with an ``_id``, and copies of some of those later on."""
    events = displaced(login_purchase_events(n, seed=seed, start_ms=T0), seed=seed)
    for i in range(0, len(events), 7):
        events[i] = {**events[i], "_id": f"id-{i}"}
    for i in range(21, len(events), 37):  # a repeated _id, in the same batch or a later one
        events.insert(i, dict(events[i - 14 - i % 7]) if "_id" in events[i - 14 - i % 7] else events[i])
    return events


def _comparable(resp: dict, event: dict) -> dict:
    """A response without its generated ``event_id`` (kept when the event gave one)."""
    out = dict(resp)
    if "_id" not in event:
        out.pop("event_id")
    return out


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_a_pipelined_batch_answers_and_stores_as_events_posted_one_by_one(redis_url, name):
    text = TOPOLOGIES[name]
    events = _events(400, seed=11)
    piped_url, one_url = db_url(redis_url, 2), db_url(redis_url, 3)
    with client_for(text, piped_url, batch_pipeline=4) as c:
        store = c.app.state.store
        chunks = []
        run_many = store.run_many

        async def counted(calls):
            chunks.append(len(calls))
            return await run_many(calls)

        store.run_many = counted
        c.app.state.evaluator.run_many = counted
        got = []
        for i in range(0, len(events), 50):
            r = c.post("/batch?explain", json=events[i:i + 50])
            assert r.status_code == 200, r.text
            got += r.json()
    with client_for(text, one_url) as c:
        want = []
        for ev in events:
            r = c.post("/event?explain", json=ev)
            assert r.status_code == 200, r.text
            want.append(r.json())
    assert chunks and max(chunks) == 4  # pipelined, in chunks of 4 calls
    if name == "mixed":
        assert sum(chunks) < len(events)  # logins went one at a time
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert _comparable(a, events[i]) == _comparable(b, events[i]), (i, events[i])
    plan = compile_text(text)
    assert_same_store(dump_store(piped_url), dump_store(one_url), plan)


def test_a_pipelined_dry_run_batch_answers_as_dry_runs_one_by_one(redis_url):
    text = TOPOLOGIES["mixed"]
    events = _events(120, seed=5)
    with client_for(text, redis_url, batch_pipeline=3) as c:
        for ev in events[:60]:
            assert c.post("/event", json=ev).status_code == 200
        before = dump_store(redis_url)
        r = c.post("/batch?dry_run", json=events[60:])
        assert r.status_code == 200, r.text
        one = [c.post("/event?dry_run", json=ev).json() for ev in events[60:]]
        assert dump_store(redis_url) == before  # nothing stored
    for i, (a, b) in enumerate(zip(r.json(), one)):
        assert _comparable(a, events[60 + i]) == _comparable(b, events[60 + i]), i


def test_a_batch_after_script_flush_loads_its_scripts(redis_url):
    text = TOPOLOGIES["one-call"]
    events = _events(60, seed=2)
    with client_for(text, db_url(redis_url, 4), batch_pipeline=8) as c:
        first = c.post("/batch", json=events[:30])
        assert first.status_code == 200, first.text
        redis.Redis.from_url(redis_url).script_flush()
        second = c.post("/batch", json=events[30:])
        assert second.status_code == 200, second.text
        got = first.json() + second.json()
    with client_for(text, db_url(redis_url, 5)) as c:
        want = [c.post("/event", json=ev).json() for ev in events]
    assert [g["features"] for g in got] == [w["features"] for w in want]


@pytest.mark.parametrize("failed, done_before, unsure_to, message", [
    (3, 3, 2, "event 3: store unreachable (events before index 3 were processed; it and later ones were not)"),
    (9, 8, 7, "event 9: store unreachable (events before index 8 were processed; later ones were not)"),
    (5, 5, 5, "event 5: store unreachable (events before index 5 were processed, event 5 may have been; "
              "later ones were not)"),
    (5, 4, 11, "event 5: store unreachable (events before index 4 were processed, events 4 to 11 may have "
               "been; later ones were not)"),
])
def test_an_interrupted_batch_says_which_events_were_processed(failed, done_before, unsure_to, message):
    e = BatchInterrupted("store unreachable", failed, done_before, unsure_to)
    assert e.describe() == message
