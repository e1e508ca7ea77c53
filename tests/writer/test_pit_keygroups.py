"""Key groups (Chronon CHIP-11 rows shared by aggregates) equal the join oracle on skewed, disordered timelines.

``writer.pointintime.PointInTime`` sweeps every aggregate of a stage whose
state has the same key types over shared rows, one per (event, key value)
(``writer.sweep.sweep_group``). These tests hold it to
``tests/writer/pit_oracle.JoinPointInTime`` (each read joined to its key's
writes: the direct form of SPEC §3.2/§3.3) on generated timelines where

* one key value (``JFK``) holds at least 30% of the events, and several
  aggregates are global (one key for all events);
* one event reads and writes the same group under different key expressions
  (``by dest as origin``: read by ``dest``, written by ``origin``; the rows
  of one event then differ by key, and ``origin == dest`` puts two rows of
  one event on one key value), and a cross-event scope reads by one key and
  is written by two event types;
* times tie to the millisecond, sit on tile and window boundaries, and about
  one event in eight arrives late (a time before an earlier arrival's:
  SPEC §3.3's arrival order), some by more than the window;
* keys are null now and then (the read is null, the write is dropped), and
  ``where``, ``after``, ``limit``, ``exclusive``, ``Decayed*`` and struct and
  list payloads are all present in the shared groups.

Also: the payments bench topology (9 aggregates: 7 by user, 1 by merchant,
1 global) makes 3 key groups (by user, by merchant, global), one row per
event each; a group holds one read key expression per event type; and the
sweep's key text groups key tuples as the store's encoded keys do.
"""

from __future__ import annotations

import random

import orjson
import pytest

from compiler import compile_sources
from tests.writer.test_pit_oracle import replay_equals_join
from writer.pointintime import PointInTime
from writer.sources import read_events

TOPOLOGY = """
event dep
origin := $.origin as string?
dest := $.dest as string?
x := $.x as int?
f := $.f as float?
a := $.a as time?
busy := x > 2
all_c := Count(last 10 minutes)
all_ex := Count(last 10 seconds exclusive)
all_lt := Latest(dest last 1 hour)
all_seq := Sequence(x last 1 hour limit 3)
o_cnt := Count(by origin last 10 minutes)
o_sum := Sum(x by origin where busy last 1 hour)
o_max := Max(f by origin last 1 hour exclusive)
o_cu := CountUnique(dest by origin last 1 day limit 4)
o_seq := Sequence(dest by origin last 10 minutes limit 3)
o_first := First(x, dest by origin after a last 1 day)
o_avg := Average(f by origin last 90 seconds)
o_dec := DecayedSum(f by origin last 1 minute)
d_in := Count(by dest as origin last 1 hour)
d_lt := Latest(x by dest as origin last 10 minutes)
d_lt_ex := LatestTime(by dest as origin last 1 day exclusive)
od := Count(by origin, dest last 1 hour)
od_set := Set(x by origin, dest last 1 day limit 5)

event arr
dest := $.dest as string?
origin := $.origin as string?
a := $.a as time?
q_in := Count<dep>(by dest as origin last 1 hour)
q_both := Count<dep, arr>(by origin last 10 minutes)
q_first := FirstTime<dep>(by dest as origin after a last 1 day)
q_all := Count<dep>(last 1 minute)
arr_n := Count(by dest last 1 hour exclusive)
"""

T0 = 1_357_000_000_000
AIRPORTS = ["JFK"] * 8 + ["LGA", "EWR", "BOS", "SFO", "é|{x}", "", None]


def timeline(seed: int, n: int) -> list[dict]:
    """``n`` events: a hot airport, ties, boundaries, late arrivals, null keys (module docstring)."""
    rng = random.Random(seed)
    out = []
    t = T0
    for _ in range(n):
        t += rng.choice([0, 0, 1, 999, 1000, 1001, 59_999, 60_000, 7_000, 250_000])
        when = t
        if rng.random() < 0.125:  # late: before events that already arrived
            when = t - rng.choice([1, 1000, 60_000, 400_000, 700_000, 4_000_000])
        ev = {"_type": rng.choice(["dep"] * 3 + ["arr"]), "_time": when,
              "origin": rng.choice(AIRPORTS), "dest": rng.choice(AIRPORTS),
              "a": rng.choice([None, when, when - 60_000, when - 90_000_000, (when // 60_000) * 60_000])}
        if ev["_type"] == "dep":
            ev.update(x=rng.choice([None, 1, 2, 3, -3, 7]), f=rng.choice([None, 0.5, 1e-3, -2.25, 10.0]))
        out.append(ev)
    return out


@pytest.mark.parametrize("seed", [3, 11])
def test_key_groups_equal_the_join_oracle(spark, tmp_path, seed):
    """Every aggregate of every event equals the quadratic join's, with a hot key (>= 30%) and global keys."""
    result = compile_sources({"t.scowl": TOPOLOGY})
    assert result.plan is not None, result.render()
    plan = result.plan
    events = timeline(seed, 600)
    for key in ("origin", "dest"):
        assert sum(e[key] == "JFK" for e in events) >= 0.3 * len(events)
    assert sum(e["_time"] < max(x["_time"] for x in events[:i]) for i, e in enumerate(events) if i) > 30
    assert replay_equals_join(spark, plan, events, tmp_path / "t.jsonl") >= 600 * 4


def test_payments_topology_shares_rows_per_key_group(spark, tmp_path):
    """The bench topology's 9 aggregates make 3 key groups, each with one row per event: by user (7), by
    merchant (1: the same key types, but another read key of the same event type) and global (1)."""
    from pathlib import Path

    from compiler import compile_dir

    plan = compile_dir(Path(__file__).resolve().parents[2] / "bench" / "topology").plan
    rng = random.Random(5)
    events = [{"_type": "txn", "_time": T0 + 1000 * i, "user": rng.choice(["u1", "u2", None]),
               "merchant": rng.choice(["m1", "m2"]), "amount": rng.choice([5.0, 150.0]), "country": "US"}
              for i in range(50)]
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    pit = PointInTime(read_events(spark, [path]), plan)
    todo = sorted(("txn", f.name) for f in plan.events["txn"].features if f.kind == "aggregate")
    groups = pit._key_groups(todo)
    assert sorted(len(members) for _, _, members in groups) == [1, 1, 7]

    def read_keys(members):
        return [tuple(plan.events[todo[g][0]].feature(todo[g][1]).aggregate.read_keys) for g in members]

    assert sorted(sorted(set(read_keys(members))) for _, _, members in groups) == [[()], [("merchant",)], [("user",)]]
    for frame, _, members in groups:
        # one row per event (null-key users included: they read null)
        assert frame.count() == 50, read_keys(members)
    pit.release()


def test_key_groups_have_one_read_key_per_event_type():
    """Aggregates of one key type share a group unless an event type reads them by another key expression:
    then each event has at most one read row per group (its values need no gathering, SPEC §5.8)."""
    from writer.pointintime import _read_key_groups

    result = compile_sources({"t.scowl": TOPOLOGY})
    plan = result.plan
    todo = [(ev, f.name) for ev in sorted(plan.events) for f in plan.events[ev].features if f.kind == "aggregate"]
    info = [(ev, plan.events[ev].feature(n).aggregate,
             plan.states[plan.events[ev].feature(n).aggregate.definition_hash]) for ev, n in todo]
    groups = _read_key_groups(info)
    assert sorted(g for _, members in groups for g in members) == list(range(len(todo)))
    reads = []
    for key_types, members in groups:
        by_type: dict[str, set] = {}
        for g in members:
            ev, spec, state = info[g]
            assert tuple(state.key_types) == key_types
            by_type.setdefault(ev, set()).add(tuple(spec.read_keys))
        assert all(len(keys) == 1 for keys in by_type.values()), by_type
        reads.append({ev: next(iter(keys)) for ev, keys in by_type.items()})
    # arr's aggregates by dest share the group of dep's by origin (both read one string key); dep's by dest
    # and arr's by origin need a second; the pair key and the global key a group each
    assert reads == [{"arr": ("dest",), "dep": ("origin",)}, {"arr": ("origin",), "dep": ("dest",)},
                     {"arr": (), "dep": ()}, {"dep": ("origin", "dest")}], reads


def test_sweep_key_groups_tuples_as_the_store_key_does(spark):
    """Two key tuples have the same sweep key exactly when they have the same store key (SPEC §5.5): separators,
    escaped characters, -0.0 and 0.0, long keys, each key type."""
    from pyspark.sql import functions as F

    from compiler.algebra.spark import encode_tuple_column
    from writer.pointintime import _sweep_key_column

    long = "x" * 130
    cases = {
        ("string",): [("a",), ("a|b",), ("{a}",), ("%7Ba%7D",), ("",), (long,), (long + "y",), ("é",)],
        ("string", "string"): [("a", "b|c"), ("a|b", "c"), ("a", "b"), ("", "a"), ("a", ""), ("{", "}")],
        ("float", "int"): [(0.0, 1), (-0.0, 1), (1.5, 1), (1.5, 2), (1e-05, 0), (15000000.0, 0)],
        ("bool", "time", "duration"): [(True, 5, 0.0), (False, 5, -0.0), (True, 6, 2.5)],
    }
    ddl = {"string": "string", "float": "double", "int": "bigint", "bool": "boolean", "time": "bigint",
           "duration": "double"}
    for types, rows in cases.items():
        schema = ", ".join(f"c{i} {ddl[t]}" for i, t in enumerate(types))
        df = spark.createDataFrame(rows, schema)
        cols = [F.col(f"c{i}") for i in range(len(types))]
        got = df.select(_sweep_key_column(cols, types).alias("k"),
                        encode_tuple_column(cols, types).alias("s")).collect()
        for x in got:
            for y in got:
                assert (x.k == y.k) == (x.s == y.s), (types, x, y)
        assert len({x.s for x in got}) < len(rows) if types[0] == "float" else len({x.s for x in got}) == len(rows)
