"""A round's generated KEYS/ARGV builder lays out what a plain walk of its slots lays out (``serving.roundargs``).

The oracle, :func:`plain_walk`, reads SPEC §2.4's write rules slot by slot
(the evaluator's own walk before the builders were generated): a read
appends its state key, or ``""`` and a null feature for a null entity key,
and its ``after`` time; a write appends its key and encoded values only
when its ``where`` is true (an ``EvalError`` counts as not true) and its
key and values are non-null. Every event type of the language test's
topologies (every function under every clause, the aggregates of aggregates
over several rounds) and the wide benchmark topology is evaluated on
seeded timelines with null and missing fields, and the later rounds'
aggregate inputs drawn at random (null included); both sides get the same
environment and must append the same keys, ARGV, pending reads and written
states, and leave the same environment, or raise the same error.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from compiler import compile_dir
from compiler.algebra.keys import encode_key, redis_key
from compiler.codegen.python import EvalError
from compiler.typesystem import parse_time
from serving.evaluate import EventProgram
from serving.roundargs import round_builder
from tests.serving.helpers import compile_text
from tests.serving.test_language import COMPOSITE, VALUES, timeline, topology

ROOT = Path(__file__).resolve().parents[2]


def plain_walk(rd, env: dict, t_ms: int, skip_writes: bool) -> tuple[list, list, list, list]:
    """The round's slots laid out one by one (module docstring); returns ``(keys, argv, pending, written)``."""
    keys: list = []
    argv: list = []
    pending: list = []
    written: list = []
    encoded: dict = {}

    def key_of(names, types):
        memo = (tuple(names), tuple(types))
        if memo not in encoded:
            encoded[memo] = encode_key([env.get(n) for n in names], types)
        return encoded[memo]

    def read(r) -> None:
        enc = key_of(r.spec.read_keys, r.state.key_types)
        if enc is None:
            env[r.feature] = None
            keys.append("")
            return
        keys.append(redis_key(enc, r.state.definition_hash))
        after = None
        if r.spec.after is not None:
            after = env.get(r.spec.after)
            argv.append("" if after is None else int(after))
        pending.append((r, after))

    def write(w) -> bool:
        if w.where is not None:
            try:
                if w.where(env, t_ms) is not True:
                    return False
            except EvalError:
                return False
        values = [env.get(n) for n in w.write.values]
        if any(v is None for v in values):
            return False
        enc = key_of(w.write.keys, w.state.key_types)
        if enc is None:
            return False
        keys.append(redis_key(enc, w.state.definition_hash))
        argv.extend(w.encode_values(values))
        written.append(w.state.definition_hash)
        return True

    for r in rd.reads_before:
        read(r)
    for w in rd.writes:
        if skip_writes or not write(w):
            keys.append("")
    for r in rd.reads_after:
        read(r)
    return keys, argv, pending, written


def _outcome(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the same error on both sides is what is compared
        return type(e), str(e)


def _programs(plan) -> list[EventProgram]:
    return [EventProgram(plan, name) for name in plan.events]


def _check(plan, events: list[dict], seed: int) -> int:
    """Compare builder and walk on every round of every event; return the slots compared."""
    rng = random.Random(seed)
    programs = {p.name: p for p in _programs(plan)}
    compared = 0
    for e in events:
        prog = programs.get(e["_type"])
        if prog is None:
            continue
        t_ms = e["_time"] if isinstance(e["_time"], int) else parse_time(e["_time"])
        env: dict = {}
        prog._eval_scalars(prog.by_stage[0], env, {}, t_ms, {k: v for k, v in e.items() if v != "missing"})
        for k, rd in enumerate(prog.rounds, start=1):
            for r in rd.reads_before + rd.reads_after:  # what earlier rounds read, drawn (null included)
                env.setdefault(r.feature, rng.choice([None, 0, 1, 2, 7, -3, t_ms - 60_000]))
            prog._eval_scalars([f for f in prog.by_stage[k - 1] if f.name not in env], env, {}, t_ms, e)
            skip = rng.random() < 0.1
            env_a, env_b = dict(env), dict(env)
            want = _outcome(lambda: plain_walk(rd, env_a, t_ms, skip))

            def built():
                out: tuple[list, list, list, list] = ([], [], [], [])
                rd.build(env_b, t_ms, *out, skip)
                return out

            got = _outcome(built)
            assert got == want, (prog.name, k, e)
            assert env_b == env_a
            compared += len(rd.reads_before) + len(rd.writes) + len(rd.reads_after)
    return compared


@pytest.mark.parametrize("fn", list(VALUES))
def test_the_builder_lays_out_every_clause_as_the_walk(fn):
    """Every function under every clause (null and missing keys and values, ``where`` filters that fail
    with errors, ``after`` null or set, global keys, two-component keys, skipped writes)."""
    text, _ = topology(fn)
    assert _check(compile_text(text), timeline(seed=7 + len(fn), n=300), seed=len(fn)) > 0


def test_the_builder_lays_out_later_rounds_as_the_walk():
    """Aggregates whose keys, values, filters and ``after`` are aggregates: several rounds per event."""
    plan = compile_text(COMPOSITE)
    assert any(len(p.rounds) > 1 for p in _programs(plan))
    assert _check(plan, timeline(seed=11, n=400), seed=3) > 0


def test_the_builder_lays_out_the_wide_topology_as_the_walk():
    """The 70-state benchmark topology, with each payload field left out now and then."""
    from bench.wide import wide_events

    plan = compile_dir(ROOT / "bench" / "topology_wide").plan
    rng = random.Random(5)
    events = [{k: (v if k.startswith("_") or rng.random() > 0.05 else "missing") for k, v in e.items()}
              for e in wide_events(300)]
    assert _check(plan, events, seed=5) == 300 * sum(
        len(rd.reads_before) + len(rd.writes) + len(rd.reads_after) for rd in EventProgram(plan, "txn").rounds)


def test_a_where_error_stops_the_write_and_other_errors_propagate():
    """``EvalError`` in a filter is a false filter (SPEC §2.4); any other exception is the caller's."""
    plan = compile_text("event e\nx := $.x as int?\nu := $.u as string?\n"
                        "n := Count(by u where 100 / x > 1)\n")
    prog = EventProgram(plan, "e")
    rd = prog.rounds[0]
    out: tuple[list, list, list, list] = ([], [], [], [])
    rd.build({"x": 0, "u": "a", "n": None}, 0, *out, False)
    assert out[0][len(rd.reads_before)] == "" and out[3] == []
    out = ([], [], [], [])
    rd.build({"x": 50, "u": "a"}, 0, *out, False)
    assert out[3] == [rd.writes[0].state.definition_hash]
    assert out[0][len(rd.reads_before)] == redis_key(encode_key(["a"], ["string"]), out[3][0])

    def boom(env, t_ms):
        raise KeyError("x")

    class W:
        where = staticmethod(boom)
        write = rd.writes[0].write
        state = rd.writes[0].state
        encode_values = rd.writes[0].encode_values

    build, source = round_builder([], [W()], [], lambda w: 0)
    with pytest.raises(KeyError):
        build({"u": "a"}, 0, [], [], [], [], False)
    assert "def build(" in source
