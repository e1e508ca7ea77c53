"""A repeated ``_id`` is answered but written once, in every job (SPEC §4; issue 12, "_id everywhere").

A timeline of logins and purchases in which some events carry an ``_id``
and later events repeat those ids (same type or another, other payloads,
same millisecond or later) goes through

1. ``POST /batch`` on a fresh store and ``scowl replay``: every feature of
   every event agrees, repeats included (a repeat is answered from the
   store without its own write, so an inclusive aggregate does not count it);
2. ``scowl backfill``: the store equals the backfill of the same timeline
   without the repeats;
3. ``scowl stream``: with the repeats in one micro-batch, or repeating ids
   of an earlier micro-batch or of events the API recorded, the store equals
   the stream of the timeline without the repeats (batch markers aside).

Every kind of state is written: tiles (Count, Sum, HyperLogLog, Latest,
CountUnique), a write log (Sequence) and decayed sums, each also with a
``where`` filter (a repeat that passes the filter still writes nothing).
"""

from __future__ import annotations

import re

import os
import random

import orjson
import pyarrow.parquet as pq
import pytest

from compiler import compile_sources
from tests.e2e.helpers import close, login_purchase_events, login_purchase_topology, post_all
from tests.e2e.store_dump import assert_same_store, db_url, dump_store
from writer.redisio import connect

TOPOLOGY = login_purchase_topology("""
n_user := Count(by user last 1 hour)
sum_amount := Sum(amount by ip last 1 day)
ips := HyperLogLog(ip by user last 1 day)
last_ip := Latest(ip by user)
uniq := CountUnique(ip by user last 1 hour)
recent := Sequence(ip by user last 1 hour limit 3)
decayed := DecayedSum(amount by user last 1 hour)
all_events := Count<login, purchase>(by user last 1 day)
big := Count(by user where amount > 40 last 1 hour)
big_ips := Sequence(ip by user where amount > 40 last 1 hour limit 3)
big_decayed := DecayedSum(amount by ip where amount > 40 last 1 hour)
""", """
spent := Sum(total by user last 1 day)
logins := Count<login>(by user last 1 hour)
""")
START_MS = 1_704_067_200_000


def timeline() -> tuple[list[dict], list[dict]]:
    """``(events with repeats, the same without them)``: every 4th event has an ``_id``; 40 repeats."""
    rng = random.Random(5)
    base = login_purchase_events(400, seed=9, start_ms=START_MS, n_users=4, n_ips=3)
    for i, e in enumerate(base):
        if i % 4 == 0:
            e["_id"] = f"ev-{i}" if i % 8 else i  # string and integer ids
    out = []
    with_id = []
    for e in base:
        out.append(e)
        if "_id" in e:
            with_id.append(e)
        if with_id and rng.random() < 0.1:
            first = rng.choice(with_id)
            rep = dict(rng.choice(base[: len(out)]))  # any earlier payload, even another type's
            rep.update(_id=first["_id"], _time=e["_time"] + rng.choice([0, 0, 5]))
            out.append(rep)
    out.sort(key=lambda e: e["_time"])  # stable: a repeat stays after what it repeats at the same ms
    seen: set = set()
    clean = []
    for e in out:
        if "_id" in e and str(e["_id"]) in seen:
            continue
        if "_id" in e:
            seen.add(str(e["_id"]))
        clean.append(e)
    assert len(out) - len(clean) >= 20
    return out, clean


@pytest.fixture(scope="module")
def plan():
    result = compile_sources({"t.scowl": TOPOLOGY})
    assert result.plan is not None, result.render()
    return result.plan


def _write(path, events) -> None:
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")


def test_replay_equals_the_api_with_repeated_ids(spark, redis_url, plan, tmp_path):
    from writer.replay import run_replay

    events, clean = timeline()
    online = post_all(plan, redis_url, events)
    _write(tmp_path / "in.jsonl", events)
    report = run_replay(spark, plan, [tmp_path / "in.jsonl"], tmp_path / "out")
    assert sum(report.rows.values()) == len(events)
    replayed: dict[int, dict] = {}
    for ev in plan.events:
        for r in pq.read_table(tmp_path / "out" / ev).to_pylist():
            seq = r.pop("_seq")
            r.pop("_time")
            assert r.pop("_id") == (None if "_id" not in events[seq] else str(events[seq]["_id"]))
            replayed[seq] = r
    assert sorted(replayed) == list(range(len(events)))
    for i, want in enumerate(online):
        diffs = {k: (replayed[i].get(k), v) for k, v in want.items() if not close(replayed[i].get(k), v)}
        assert not diffs, f"event {i} {events[i]}: replay vs API {diffs}"
    # the first events of each id are answered as if the repeats were not there at all ...
    kept = {id(e) for e in clean}
    assert post_all(plan, db_url(redis_url, 1), clean) == [o for o, e in zip(online, events) if id(e) in kept]
    # ... and the repeats matter: written (no _id), they change answers
    stripped = [{k: v for k, v in e.items() if k != "_id"} for e in events]
    assert post_all(plan, db_url(redis_url, 2), stripped) != online


def test_backfill_writes_a_repeated_id_once(spark, redis_url, plan, tmp_path):
    from writer.backfill import run_backfill

    events, clean = timeline()
    _write(tmp_path / "all.jsonl", events)
    _write(tmp_path / "clean.jsonl", clean)
    end = max(e["_time"] for e in events) + 1
    run_backfill(spark, plan, [tmp_path / "all.jsonl"], redis_url, start_ms=START_MS, end_ms=end)
    other = db_url(redis_url, 2)
    run_backfill(spark, plan, [tmp_path / "clean.jsonl"], other, start_ms=START_MS, end_ms=end)
    assert_same_store(dump_store(redis_url), dump_store(other), plan)


def _without_markers(dump: dict) -> dict:
    """A store image without the stream's batch markers (``_b:<stream id>`` fields, id claims' values)."""
    out = {}
    for key, (kind, content, ttl) in dump.items():
        if kind == b"string" and key.startswith(b"sc:id:") and content.startswith(b"_b:"):
            content = b"claimed by a stream batch " + content.rsplit(b":", 1)[1]
        if kind == b"hash":
            content = {f: v for f, v in content.items() if not f.startswith(b"_b:")}
            if not content:
                continue
        out[key] = (kind, content, ttl)
    return out


def test_stream_writes_a_repeated_id_once(spark, redis_url, plan, tmp_path):
    from writer.stream import run_stream

    events, clean = timeline()
    for name, evs in (("all", events), ("clean", clean)):
        (tmp_path / name).mkdir()
        _write(tmp_path / name / "batch.jsonl", evs)
    other = db_url(redis_url, 3)
    a = run_stream(spark, plan, redis_url, f"dir:{tmp_path / 'all'}", tmp_path / "ck-all", available_now=True)
    b = run_stream(spark, plan, other, f"dir:{tmp_path / 'clean'}", tmp_path / "ck-clean", available_now=True)
    assert [r.events for r in a.batches] == [len(events)] and [r.events for r in b.batches] == [len(clean)]
    assert_same_store(_without_markers(dump_store(redis_url)), _without_markers(dump_store(other)), plan)


def test_stream_leaves_out_ids_of_earlier_batches_and_of_the_api(spark, redis_url, store_url, plan, tmp_path):
    """Ids claimed by an earlier micro-batch, or recorded by the API, are repeats in a later batch; also
    when the API and the stream run on a 3-master cluster (the API's per-slot id markers aside)."""
    from writer.stream import run_stream

    events, clean = timeline()
    half = len(events) // 2
    early = {id(e) for e in events[:half]}
    via_api = [e for e in events[:half] if "_id" in e][:3]  # recorded by the API first
    skip = {id(e) for e in via_api}
    for name, evs in (("all", events), ("clean", clean)):
        (tmp_path / name).mkdir()
        _write(tmp_path / name / "a.jsonl", [e for e in evs if id(e) in early and id(e) not in skip])
        _write(tmp_path / name / "b.jsonl", [e for e in evs if id(e) not in early])
        os.utime(tmp_path / name / "a.jsonl", (1_700_000_000, 1_700_000_000))  # the file source goes by mtime
        os.utime(tmp_path / name / "b.jsonl", (1_700_000_100, 1_700_000_100))
    other = db_url(redis_url, 3)
    connect(other).flushdb()
    for url in (store_url, other):
        post_all(plan, url, via_api)
    a = run_stream(spark, plan, store_url, f"dir:{tmp_path / 'all'}", tmp_path / "ck-all", available_now=True,
                   max_files_per_trigger=1)
    b = run_stream(spark, plan, other, f"dir:{tmp_path / 'clean'}", tmp_path / "ck-clean", available_now=True,
                   max_files_per_trigger=1)
    assert len(a.batches) == len(b.batches) == 2
    # the second half repeats ids of the first (and of the API's events): without the claims it would write them
    kept = {id(e) for e in clean}
    first_ids = {str(x["_id"]) for x in events[:half] if "_id" in x}
    assert sum(str(e["_id"]) in first_ids for e in events[half:] if "_id" in e and id(e) not in kept) >= 3
    per_slot = re.compile(rb"^sc:id:\{[^}]*\}:[0-9a-f]{12}:")  # a cluster API's markers, one per slot and round
    ours = {k: v for k, v in dump_store(store_url).items() if not per_slot.match(k)}
    assert_same_store(_without_markers(ours), _without_markers(dump_store(other)), plan)
