"""The algebra registry: every aggregate function has every target, and they agree (compiler.algebra.registry).

* The registry, the language's aggregate table (``compiler.functions``), the
  Spark target (``compiler.algebra.spark.SPARK``) and the Arrow target
  (``compiler.algebra.arrow.KERNELS``) name the same functions: a function
  added to one and not the others fails here.
* Each function, over each value type its signature accepts (one per kind),
  goes through every target on the same four writes and a read: the Lua
  target (a generated write script, then a generated read script, in the
  test Redis; ``compiler.algebra.lua``) finalized by the Python target
  (``ops``), and the replay path (the Spark target's sweep payload
  computed by Spark, swept by the Arrow kernel, the empty-window value from
  the Spark target). Both must equal the Python target's fold of the writes
  the window counts (``ops.fold``; ``Decayed*`` weighed to the read time).
"""

from __future__ import annotations

import math
import uuid

import pyarrow as pa
import pytest
import redis

from compiler.algebra.arrow import KERNELS
from compiler.algebra.lua import LuaGenerator, ReadSlot, RoundSpec, WriteSlot
from compiler.algebra.ops import DecayedOp, fold
from compiler.algebra.registry import REGISTRY, STORAGE_KINDS, definition, expiry_ms, make_op, storage_of
from compiler.algebra.spark import SPARK
from compiler.functions import AGGREGATES

GEN = LuaGenerator()
T0 = 1_700_000_000_000
WINDOW_S = 600

#: one value per type kind, four writes (two with the same value: distinct counts differ from counts)
SAMPLES = {
    "int": [3, -7, 3, 12],
    "float": [0.5, -2.25, 0.5, 10.0],
    "string": ["b", "a", "b", "ü"],
    "time": [T0 - 5, T0 + 9, T0 - 5, T0],
    "bool": [True, False, True, True],
    "duration": [1.5, 0.25, 1.5, 60.0],
}
TIMES = [T0 + 1_000, T0 + 61_000, T0 + 62_500, T0 + 300_000]
READ_T = T0 + 480_000  # all four writes inside the 600 s window


def cases():
    out = []
    for name, sig in sorted(AGGREGATES.items()):
        arity = 0 if sig.min_values == 0 else 1
        for t in sorted(sig.value_types) if arity else ["-"]:
            if t not in SAMPLES and t != "-":
                continue
            out.append(pytest.param(name, () if t == "-" else (t,), id=f"{name}-{t}"))
    return out


def test_registry_language_and_targets_name_the_same_functions():
    assert set(REGISTRY) == set(AGGREGATES), "a language aggregate without a registry entry, or the reverse"
    assert set(SPARK) == set(REGISTRY), "the Spark target misses or adds a function"
    assert set(KERNELS) == set(REGISTRY), "the Arrow target misses or adds a function"
    for d in REGISTRY.values():
        assert d.storage in STORAGE_KINDS and d.expiry in ("window", "decay")
        assert d.components and all(isinstance(c, str) for c in d.components)
    with pytest.raises(NotImplementedError, match="not implemented"):
        definition("Median")


def test_storage_kind_and_expiry_follow_the_entry():
    class State:  # the StateSpec fields the registry reads
        def __init__(self, function, limit=None):
            self.function, self.limit, self.window_s, self.resolution_s = function, limit, 600, 1

    assert storage_of(State("Count")) == "tiles" and storage_of(State("Count", limit=3)) == "log"
    assert storage_of(State("Sequence", limit=100)) == "log" and storage_of(State("DecayedSum")) == "decayed"
    assert expiry_ms(State("Count")) == 601_000
    assert expiry_ms(State("DecayedCount")) > 600_000 * 10
    assert REGISTRY["Average"].components == (".s", ".c")
    for name, d in REGISTRY.items():  # the Python target stores the components the registry declares
        if d.storage == "tiles":
            types = ("float",) if AGGREGATES[name].min_values else ()
            assert make_op(name, types, ("v",) * len(types), 60).components == d.components, name


@pytest.fixture()
def client(redis_url):
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


def _lua_value(client, op, limit):
    w = WriteSlot(op, WINDOW_S, 1, limit)
    r = ReadSlot(op, WINDOW_S, 1, limit)
    key = f"t:{{{uuid.uuid4().hex}}}"
    write = client.register_script(GEN.script(RoundSpec("w", writes=(w,))))
    for t, v in zip(TIMES, _writes(op.value_types)):
        write(keys=["", "", key], args=[t, "", "", *GEN.write_values(w, v)])
    res = client.eval(GEN.script(RoundSpec("r", reads_after=(r,))), 3, "", "", key, READ_T, "", "")
    assert res[0] == 1
    return GEN.finisher(r)(res[1], READ_T, None)


def _writes(types):
    return [tuple(SAMPLES[t][i] for t in types) for i in range(len(TIMES))]


def _replay_value(spark, function, types, names, limit):
    from pyspark.sql import functions as F

    from writer.sweep import SweepSpec, sweep_table

    form = SPARK[function]
    ddl = {"int": "long", "float": "double", "string": "string", "time": "long", "bool": "boolean",
           "duration": "double"}
    schema = ", ".join(["t long", "seq long"] + [f"v{i} {ddl[t]}" for i, t in enumerate(types)])
    rows = [(t, i, *v) for i, (t, v) in enumerate(zip(TIMES, _writes(types)))]
    df = spark.createDataFrame(rows, schema)
    payload = form.sweep_columns(types, names, [F.col(f"v{i}") for i in range(len(types))])
    writes = df.select("t", "seq", *[c.alias(k) for k, c in payload.items()]).toArrow()
    n = writes.num_rows
    cols = {"rk": pa.array(["k"] * (n + 1)), "t": pa.array([*TIMES, READ_T], pa.int64()),
            "seq": pa.array(list(range(n + 1)), pa.int64()), "role": pa.array([0] * n + [1], pa.int8()),
            "ra": pa.nulls(n + 1, pa.int64())}
    for k in payload:
        col = writes.column(k).combine_chunks()
        cols[k] = pa.concat_arrays([col, pa.nulls(1, col.type)])
    spec = SweepSpec(function, WINDOW_S * 1000, 1000, limit, False, bool(types) and types[0] == "int")
    out = sweep_table(pa.table(cols), spec).to_pylist()[0]
    if out["n"] == 0:
        empty = form.empty(types)
        return None if empty is None else spark.range(1).select(empty).first()[0]
    return out["a"]


def _plain(v):
    if hasattr(v, "asDict"):
        return tuple(_plain(x) for x in v.asDict().values())
    if isinstance(v, dict):
        return tuple(_plain(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


@pytest.mark.parametrize("function,types", cases())
def test_every_target_gives_the_python_fold(spark, client, function, types):
    names = tuple(f"n{i}" for i in range(len(types)))
    op = make_op(function, types, names, WINDOW_S)
    limit = AGGREGATES[function].default_limit
    writes = list(zip(TIMES, _writes(types)))
    if isinstance(op, DecayedOp):
        ir = None
        for t, v in writes:
            ir = op.update(ir, v, t)
        want = op.value_at(ir, READ_T)
    else:
        want = fold(op, writes)
    lua = _lua_value(client, op, limit)
    replay = _replay_value(spark, function, types, names, limit)
    if isinstance(want, float):
        assert math.isclose(lua, want, rel_tol=1e-12) and math.isclose(replay, want, rel_tol=1e-9), (lua, replay, want)
    else:
        assert _plain(lua) == _plain(want), (lua, want)
        assert _plain(replay) == _plain(want), (replay, want)


def test_spark_hll_coupon_is_the_python_coupon(spark):
    """``hll_coupon_columns`` (Spark) gives ``ops.hll_coupon``'s (slot, rho) for every item, and
    ``hll_rho_column`` the rho of every leading-zero pattern (the all-zero word included)."""
    import random

    from pyspark.sql import functions as F

    from compiler.algebra.ops import HLL_Q, hll_coupon
    from compiler.algebra.spark import hll_coupon_columns, hll_rho_column

    rng = random.Random(3)
    items = [f"s{i}:{rng.random()}" for i in range(20000)] + ["", "é", "s1:a"]
    slot, rho = hll_coupon_columns(F.col("item"))
    got = spark.createDataFrame([(x,) for x in items], "item string").select(
        "item", slot.alias("slot"), rho.alias("rho")).collect()
    assert {r["item"]: (r["slot"], r["rho"]) for r in got} == {x: hll_coupon(x) for x in items}

    words = [0, 1, 2, 3, (1 << HLL_Q) - 1] + [1 << b for b in range(HLL_Q)] + [(1 << b) | 1 for b in range(HLL_Q)]
    words += [rng.getrandbits(rng.randrange(1, HLL_Q + 1)) for _ in range(2000)]
    texts = [format(w, f"0{HLL_Q // 4}x") for w in words]
    got = spark.createDataFrame([(t,) for t in texts], "digits string").select(
        "digits", hll_rho_column(F.col("digits")).alias("rho")).collect()
    assert {r["digits"]: r["rho"] for r in got} == {t: HLL_Q + 1 - int(t, 16).bit_length() for t in texts}
