"""The registry of aggregate functions: what each one stores and where its targets are (SPEC §2.4, §5).

One :class:`AggregateDef` per function of the language's aggregate table
(``compiler.functions.AGGREGATES``, which holds the signature, result type
and documentation). An entry declares what every engine must agree on:

* ``storage``: how a state of the function is kept (``compiler.algebra.ops``'
  module docstring has the Redis layout):

  ==========  ===============================================================
  ``tiles``   one partial per tile at every level of ``windows.levels_s(W)``
  ``seen``    a sorted set: member ``u<value tuple>``, score its last-seen
              ms (``CountUnique``: a read is one ``ZCOUNT``)
  ``latest``  ``lt`` -> ``<ms>\\t<json>`` of the latest write (``Latest*``)
  ``decayed`` ``dt``/``dv``/``dw``: O(1) decayed sums (``Decayed*``)
  ``log``     a sorted set of the ``n`` latest writes (``Sequence``, ``Set``;
              any function with ``limit n``, see :func:`storage_of`)
  ==========  ===============================================================

* ``components``: the field suffixes of one stored partial (``Average``:
  ``.s`` sum and ``.c`` count; ``""`` for one);
* ``expiry``: ``window`` (a state expires ``W + r`` after its last write,
  SPEC §5.3) or ``decay`` (``ops.DECAY_HORIZON`` windows: every weight is
  below ``exp(-40)`` by then);
* ``layout``: the version of the storage layout, in the definition hash
  when above 1 (SPEC §5.4: a store written under an older layout is never
  read as the new one; see :func:`layout_of`);
* ``python``: the Python target, the algebra object (``ops.AggregateOp``:
  init / update / merge / finalize / encode, Chronon's ``SimpleAggregator``
  shape) built from the state's value types, value names and window.

The other targets are tables keyed by the same names, one module per
engine, in the way sqlglot keeps one generator per dialect:

* Lua (serving's generated scripts and the stream writer's ``event.lua``):
  ``compiler.algebra.lua.LuaGenerator`` dispatches on the Python target's
  class (read, write, argument encoder and result decoder per class);
* Spark (backfill and stream tiles, replay inputs and empty values):
  ``compiler.algebra.spark.SPARK``;
* Arrow/numpy (the replay sweep's per-function kernel, run in Spark's
  vectorised ``mapInArrow`` batches): ``compiler.algebra.arrow.KERNELS``.

``tests/algebra/test_registry.py`` fails when a registered function lacks
one of them, or a target names a function the registry does not know.
``docs/adding-an-aggregate.md`` walks a new function through every target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from compiler.algebra import ops

__all__ = ["AggregateDef", "LOG_OF_ONE", "REGISTRY", "definition", "expiry_ms", "layout_of", "make_op", "state_limit",
           "storage_of"]

STORAGE_KINDS = ("tiles", "seen", "latest", "decayed", "log")


@dataclass(frozen=True)
class AggregateDef:
    """One aggregate function's storage contract and Python target (module docstring).

    Attributes:
        name: the function name (SPEC §2.4 table), e.g. ``"Average"``.
        storage: one of :data:`STORAGE_KINDS`, without ``limit``.
        components: field suffixes of one stored partial (tiles only).
        expiry: ``"window"`` (``W + r`` ms) or ``"decay"``
            (``ops.DECAY_HORIZON * W`` ms), SPEC §5.3.
        python: ``(value_types, value_names, window_ms) -> ops.AggregateOp``.
        layout: storage layout version (1: as first released).
    """

    name: str
    storage: str
    components: tuple[str, ...]
    expiry: str
    python: Callable[[tuple[str, ...], tuple[str, ...], int], ops.AggregateOp]
    layout: int = 1


def _def(name: str, storage: str, python, components: tuple[str, ...] = ("",), expiry: str = "window",
         layout: int = 1) -> AggregateDef:
    assert storage in STORAGE_KINDS and expiry in ("window", "decay")
    return AggregateDef(name, storage, components, expiry, python, layout)


#: Every aggregate function the engines implement, by name.
REGISTRY: dict[str, AggregateDef] = {d.name: d for d in (
    _def("Count", "tiles", lambda vt, names, w: ops.CountOp(vt)),
    _def("Sum", "tiles", lambda vt, names, w: ops.SumOp(vt)),
    _def("Average", "tiles", lambda vt, names, w: ops.AverageOp(vt), components=(".s", ".c")),
    _def("Min", "tiles", lambda vt, names, w: ops.MinOp(vt)),
    _def("Max", "tiles", lambda vt, names, w: ops.MaxOp(vt)),
    _def("First", "tiles", lambda vt, names, w: ops.FirstOp(vt, names=names)),
    _def("FirstTime", "tiles", lambda vt, names, w: ops.FirstOp(vt, names=names, time_only=True)),
    _def("HyperLogLog", "tiles", lambda vt, names, w: ops.HyperLogLogOp(vt)),
    # layout 2: a sorted set (1: a hash of u<tuple> fields, read by a scan of all of them)
    _def("CountUnique", "seen", lambda vt, names, w: ops.CountUniqueOp(vt), layout=2),
    _def("Latest", "latest", lambda vt, names, w: ops.LatestOp(vt, names=names)),
    _def("LatestTime", "latest", lambda vt, names, w: ops.LatestOp(vt, names=names, time_only=True)),
    _def("Sequence", "log", lambda vt, names, w: ops.SequenceOp(vt, names=names)),
    _def("Set", "log", lambda vt, names, w: ops.SetOp(vt)),
    _def("DecayedCount", "decayed", lambda vt, names, w: ops.DecayedOp(vt, kind="count", window_ms=w),
         expiry="decay"),
    _def("DecayedSum", "decayed", lambda vt, names, w: ops.DecayedOp(vt, kind="sum", window_ms=w), expiry="decay"),
    _def("DecayedAverage", "decayed", lambda vt, names, w: ops.DecayedOp(vt, kind="average", window_ms=w),
         expiry="decay"),
)}


def definition(function: str) -> AggregateDef:
    """Return the registry entry of ``function``.

    Raises:
        NotImplementedError: a function the engines do not implement.
    """
    try:
        return REGISTRY[function]
    except KeyError:
        raise NotImplementedError(
            f"aggregate function {function} is not implemented (supported: {', '.join(REGISTRY)})") from None


def make_op(function: str, value_types: Sequence[str], value_names: Sequence[str] = (),
            window_s: int = 1) -> ops.AggregateOp:
    """Return the Python target (the algebra) of ``function`` over values of ``value_types``.

    Args:
        function: aggregate function name (SPEC §2.4).
        value_types: the value types (plan ``StateSpec.value_types``).
        value_names: the value feature names (struct field names).
        window_s: the window ``W`` in seconds (the decay constant of ``Decayed*``).

    Raises:
        NotImplementedError: a function not in :data:`REGISTRY`.
    """
    return definition(function).python(tuple(value_types), tuple(value_names), int(window_s) * 1000)


#: Functions whose states are write logs of one write without a ``limit``: a
#: read late by up to the allowed lateness needs the latest write before its
#: own time, not only the latest one (SPEC §3.3); ``limit 1`` keeps exactly
#: that (``ops``' write logs), and gives the same values.
LOG_OF_ONE = frozenset({"Latest", "LatestTime"})


def state_limit(function: str, limit: int | None) -> int | None:
    """Return the write-log length a state of ``function`` with ``limit`` keeps.

    ``limit`` itself; ``1`` for :data:`LOG_OF_ONE` without one; ``None``: not a write log.
    The planner puts it into the state (``StateSpec.limit``) and its definition document.
    """
    if limit is None and function in LOG_OF_ONE:
        return 1
    return limit


def storage_of(state) -> str:
    """How a state (``compiler.plan.StateSpec``) is stored: ``"log"`` with a ``limit``, else its function's kind."""
    return "log" if state.limit is not None else definition(state.function).storage


def layout_of(function: str, limit: int | None) -> int:
    """Return the storage layout version of a state of ``function`` (with ``limit``, a write log: 1).

    The planner puts it into the state's definition document when above 1,
    so a layout change moves the state to a new namespace (SPEC §5.4) and
    the definition hashes of every other state stay as they were. A
    function not in :data:`REGISTRY` has layout 1 (the checker reports it).
    """
    d = REGISTRY.get(function)
    return 1 if d is None or limit is not None else d.layout


def expiry_ms(state) -> int:
    """Time-to-live in ms of a state's Redis key after its latest write (SPEC §5.3)."""
    w = state.window_s * 1000
    if definition(state.function).expiry == "decay":
        return ops.DECAY_HORIZON * w
    return w + state.resolution_s * 1000
