"""``writer.tilepass``: all states in one pass give the rows the per-state oracle gives state by state.

The per-state forms in ``tests/writer/tile_oracle.py`` (``state_rows`` for
backfill, ``merge_rows`` for stream micro-batches: one ``groupBy`` and one
branch per function, what backfill and stream ran before the one pass, held
to the online path by the consistency tests) are the oracle; the one-pass
forms must produce the same store image, row for row:

* :func:`writer.tilepass.state_rows_all` (one row per key, its fields
  gathered) equals the union of ``state_rows`` over the merged-tile states
  (same ``rk``, ``field``, stored text, ``mode`` and ``ttl_ms``), for a run
  window inside the timeline (tiles before the cutoff ``end - W - r`` left
  out, writes before the start left out);
* the stream's Arrow pass (the per-event-type ``tile_oracle.write_rows``,
  which ``tests/stream/test_batch_features.py`` equates with
  :func:`writer.tilepass.batch_write_rows`, then
  ``compiler.algebra.arrowtiles.merge_ops`` per partition: one item per key,
  its merge ops gathered) equals the union of ``merge_rows`` over every
  state, each key's time being the latest of its rows (double texts compared
  as numbers to 1e-12: Java's and Python's formatting differ, and so may the
  order of a float sum).

Timeline and topology: ``tests/writer/test_pit_oracle.py`` (every function and
clause, same-ms ties, hot keys), plus extrema and averages over the value
types it leaves out.
"""

from __future__ import annotations

import math

import orjson
import pytest

from compiler import compile_sources
from tests.writer.test_pit_oracle import TOPOLOGY, _timeline
from tests.writer.tile_oracle import merge_rows, state_rows
from writer.sources import read_events, valid
from tests.writer.tile_oracle import write_rows
from writer.tilepass import form, state_rows_all, tile_specs
from writer.tiles import feature_frames
from writer.writes import writes_of_state

EXTRA = """
event login
a2 := $.a as time?
mn_t := Min(a2 by ip last 1 hour)
mx_f := Max(f by user last 10 minutes)
mn_f := Min(f by ip last 1 hour)
mn_i := Min(x last 50 days)
avg_i := Average(x by ip last 1 day)
"""


@pytest.fixture(scope="module")
def frames(spark, tmp_path_factory):
    result = compile_sources({"t.scowl": TOPOLOGY, "x.scowl": EXTRA})
    assert result.plan is not None, result.render()
    plan = result.plan
    events = _timeline(11, 900)
    # x is 2**62 now and then: int Sum tiles past int64 (exact: exact_long_sum, exact_int_sums)
    assert any(e.get("x") == 2**62 for e in events)
    path = tmp_path_factory.mktemp("tilepass") / "t.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    raw = read_events(spark, [path]).where(valid(list(plan.events))).cache()
    states = sorted(plan.states.values(), key=lambda s: s.definition_hash)
    fr = {ev: df.cache() for ev, df in feature_frames(raw, plan, states).items()}
    times = sorted(e["_time"] for e in events)
    yield plan, states, fr, times
    for df in fr.values():
        df.unpersist()
    raw.unpersist()


def test_every_merged_tile_function_has_a_form(frames):
    _, states, _, _ = frames
    together = {st.function for st in states if form(st) is not None}
    # (Latest*: write logs of one, registry.state_limit)
    assert together == {"Count", "Sum", "Average", "Min", "Max", "CountUnique", "HyperLogLog", "First",
                        "FirstTime"}
    assert all(form(st) is None for st in states if st.limit is not None or st.function.startswith("Decayed"))


@pytest.mark.parametrize("cut", [(0.0, 1.0), (0.3, 0.55)])
def test_state_rows_all_equals_state_rows(frames, cut):
    _, states, fr, times = frames
    start, end = times[int(cut[0] * (len(times) - 1))], times[int(cut[1] * (len(times) - 1))] + 1
    together = [st for st in states if form(st) is not None]
    got = state_rows_all(fr, together, start, end, key_partitions=3)
    assert got.rdd.getNumPartitions() == 3
    rows = got.collect()
    assert len({r["rk"] for r in rows}) == len(rows), "a key's fields in two rows"
    new = {(r["rk"], r["kv"][i], r["kv"][i + 1], r["mode"], r["ttl_ms"]) for r in rows
           for i in range(0, len(r["kv"]), 2)}
    assert len(new) == sum(len(r["kv"]) // 2 for r in rows), "a field written twice"
    old = set()
    for st in together:
        old |= {(r["rk"], r["field"], r["value"], r["mode"], r["ttl_ms"])
                for r in state_rows(writes_of_state(fr, st), st, end, start).collect()}
    assert new == old
    assert len(old) > 500
    # g indexes the states given
    by_hash = {st.definition_hash: g for g, st in enumerate(together)}
    assert all(r["g"] == by_hash[r["rk"].rsplit(":", 1)[1]] for r in rows)


def _normal(mode: str, value) -> object:
    """A merge op's value with its numbers as numbers (double texts differ: Java's vs Python's repr)."""
    if mode == "ZM":
        return orjson.loads(value) if isinstance(value, str) else value
    if mode in ("F", "MIN:n", "MAX:n"):
        return float(value)
    if mode == "DM":
        ms, v, w = value.split("\t")
        return int(ms), float(v), float(w)
    return value


def _close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def test_arrow_merge_ops_equal_merge_rows(frames):
    """The stream's Arrow pass (``write_rows`` + ``arrowtiles.merge_ops``) gives the per-state oracle's ops."""
    import pyarrow as pa

    from compiler.algebra.arrowtiles import merge_ops

    _, states, fr, _ = frames
    specs = tile_specs(states)

    def ops_of(batches):
        table = pa.Table.from_batches(list(batches))
        out = [(rk, orjson.dumps(ops).decode(), t) for rk, ops, t in merge_ops(table, specs)]
        yield pa.RecordBatch.from_pydict({"rk": [o[0] for o in out], "ops": [o[1] for o in out],
                                          "t": [o[2] for o in out]},
                                         schema=pa.schema([("rk", pa.string()), ("ops", pa.string()),
                                                           ("t", pa.int64())]))

    rows = write_rows(fr, states, 3)
    assert rows.rdd.getNumPartitions() == 3
    got = rows.mapInArrow(ops_of, "rk string, ops string, t long").collect()
    assert len({r["rk"] for r in got}) == len(got), "a key's ops in two partitions"
    want: dict[str, list] = {}
    latest: dict[str, int] = {}
    for st in states:
        for w in merge_rows(writes_of_state(fr, st), st).collect():
            want.setdefault(w["rk"], []).append((w["mode"], w["field"], w["value"]))
            latest[w["rk"]] = max(latest.get(w["rk"], w["t"]), w["t"])
    assert {r["rk"]: r["t"] for r in got} == latest
    n_ops = 0
    for r in got:
        new = sorted(((mode, field, _normal(mode, value)) for mode, field, value in orjson.loads(r["ops"])),
                     key=lambda o: (o[0], o[1]))
        old = sorted(((mode, field, _normal(mode, value)) for mode, field, value in want[r["rk"]]),
                     key=lambda o: (o[0], o[1]))
        assert [o[:2] for o in new] == [o[:2] for o in old], r["rk"]
        assert all(_close(a[2], b[2]) for a, b in zip(new, old)), (r["rk"], new, old)
        n_ops += len(new)
    assert n_ops > 1000
    assert {mode for r in got for mode, _, _ in orjson.loads(r["ops"])} >= {
        "I", "F", "MIN:n", "MIN:i", "MIN:s", "MAX:n", "MAX:i", "FI", "HMS", "SEEN", "DM", "ZM"}


def test_merge_ops_leave_out_the_tiles_no_late_read_counts(frames, redis_url):
    """``merge_ops(.., lateness_ms=L)`` (the stream's): each key's ops without ``L`` minus exactly the tiles
    ending at or before ``t - W - r - L`` (``t``: the key's latest write); merged into a fresh store by
    ``event.lua`` (its ``X`` pruning pass then due), both op lists leave the same store."""
    import redis

    from compiler.algebra.arrowtiles import merge_ops
    from compiler.algebra.script import event_script
    from compiler.algebra.windows import ALLOWED_LATENESS_S, LEVEL_CODE
    from tests.e2e.store_dump import db_url, dump_store
    from writer.sink import merge_call, merge_params

    _, states, fr, _ = frames
    specs = tile_specs(states)
    by_hash = {st.definition_hash: st for st in states}
    size_of = {code: size for size, code in LEVEL_CODE.items()}
    late = ALLOWED_LATENESS_S * 1000
    table = write_rows(fr, states, 1).toArrow()
    every = {rk: (ops, t) for rk, ops, t in merge_ops(table, specs)}
    live = {rk: (ops, t) for rk, ops, t in merge_ops(table, specs, late)}
    assert live.keys() == every.keys()
    dropped = 0
    for rk, (ops, t) in every.items():
        st = by_hash[rk.rsplit(":", 1)[1]]
        cut = t - st.window_s * 1000 - st.resolution_s * 1000 - late

        def dead(op) -> bool:
            mode, field, _ = op
            tile = field.partition(".")[0]
            code, rest = tile[:1], tile[1:]
            return (form(st) is not None and form(st).tiled and mode not in ("SEEN", "LA", "DM", "ZM")
                    and code in size_of and (int(rest) + 1) * size_of[code] * 1000 <= cut)

        assert live[rk] == ([op for op in ops if not dead(op)], t), rk
        dropped += sum(map(dead, ops))
    assert dropped > 100  # the timeline spans days; its windows are minutes to hours

    params, source = merge_params(states), event_script()
    urls = [db_url(redis_url, 9), db_url(redis_url, 10)]
    for url, ops_of in zip(urls, (every, live)):
        client = redis.Redis.from_url(url)
        client.flushdb()
        run = client.register_script(source)
        for rk, (ops, t) in ops_of.items():
            keys, args = merge_call(rk, ops, t, params, "_b:test", 0)
            run(keys=keys, args=args)
        client.close()
    stores = [dump_store(url) for url in urls]
    assert stores[0] == stores[1]
    assert len(stores[0]) == len(every) + sum(1 for rk in every if merge_call(rk, [], 0, params, "m", 0)[0][1:])
    for url in urls:
        redis.Redis.from_url(url).flushdb()
