"""The merge algebra and tile layout of every aggregate (SPEC §1, §2.4, §3.2, §5).

One class per aggregate function, in the shape of Chronon's
``SimpleAggregator`` (``aggregator/.../base/SimpleAggregators.scala``):

* ``init() -> IR``                      empty partial aggregate
* ``update(ir, values, time_ms) -> IR`` add one counted write
* ``merge(a, b) -> IR``                 combine two partials (associative,
  commutative, ``init()`` is the identity)
* ``finalize(ir) -> value``             the feature value (run-time
  representation: time as int ms)
* ``encode(ir) -> list[str]`` / ``decode(raw) -> IR``  storage normalisation:
  the strings kept in Redis hash fields, one per component.

Redis layout of one (state, entity key) hash (name from
:func:`compiler.algebra.keys.redis_key`):

=================  ==========================================================
field              holds
=================  ==========================================================
``<L><i><c>``      tiled functions: component ``c`` of the partial aggregate
                   of tile ``i`` at level ``L`` (``s`` 1 s, ``m`` 1 min,
                   ``h`` 1 h, ``d`` 1 day; see ``windows.LEVEL_CODE``), e.g.
                   ``m22616640`` (Count) or ``h376944.s``/``h376944.c``
                   (Average).
``u<value tuple>`` ``CountUnique``: epoch ms of the latest write of that
                   value tuple (encoded as in ``keys.encode_value_tuple``).
``lt`` / ``lv``    ``Latest``/``LatestTime``: epoch ms and JSON object
                   ``{"v0": .., "v1": ..}`` of the latest counted write.
``_p``             event time (ms) at which the next pruning pass is due.
=================  ==========================================================

Tiled functions keep one partial per tile at every level of
``windows.levels_s(W)``; a read merges the tiles of ``windows.cover(...)``.
``CountUnique`` and ``Latest`` need no tiles: the latest write time per value
(resp. overall) decides membership in the window exactly when reads come in
event-time order.

The Lua script ``event.lua`` beside this module applies the same updates in
Redis; :func:`encode` of :func:`update` equals what the script stores, and the
Spark writer stores ``encode`` of its per-tile partials. Tests check all three
against a brute-force oracle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import orjson

from compiler.algebra.keys import encode_value_tuple
from compiler.algebra.windows import LEVEL_CODE


def _num(raw: bytes | str | None, type_name: str) -> Any:
    if raw is None:
        return None
    if isinstance(raw, bytes):
        raw = raw.decode()
    if type_name in ("int", "time"):
        try:
            return int(raw)
        except ValueError:  # written by HINCRBYFLOAT-free paths as "5.0"
            return int(float(raw))
    return float(raw)


def _decode_scalar(raw: bytes | str | None, type_name: str) -> Any:
    if raw is None:
        return None
    if type_name == "string":
        return raw.decode("utf-8") if isinstance(raw, bytes) else raw
    if type_name == "bool":
        return (raw.decode() if isinstance(raw, bytes) else raw) == "1"
    return _num(raw, type_name)


def _encode_scalar(value: Any, type_name: str) -> str:
    if type_name == "bool":
        return "1" if value else "0"
    if type_name == "float":
        return repr(float(value))
    if type_name in ("int", "time"):
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class AggregateOp:
    """Base of the per-function algebra.

    Attributes:
        value_types: types of the values written (plan ``StateSpec.value_types``).
    """

    value_types: tuple[str, ...]

    #: Whether the state is kept in tiles (else in ``u*``/``lt``/``lv`` fields).
    tiled: ClassVar[bool] = True
    #: Field-name suffixes of the IR components in a tile.
    components: ClassVar[tuple[str, ...]] = ("",)

    def init(self) -> Any:  # pragma: no cover - abstract
        """Return the empty partial aggregate."""
        raise NotImplementedError

    def update(self, ir: Any, values: Sequence[Any], time_ms: int) -> Any:  # pragma: no cover
        """Add one counted write (all ``values`` non-null) at ``time_ms``."""
        raise NotImplementedError

    def merge(self, a: Any, b: Any) -> Any:  # pragma: no cover
        """Combine two partial aggregates."""
        raise NotImplementedError

    def finalize(self, ir: Any) -> Any:  # pragma: no cover
        """Return the feature value of a (merged) partial aggregate."""
        raise NotImplementedError

    def encode(self, ir: Any) -> list[str]:  # pragma: no cover
        """Return the stored strings of a tile's partial, one per component."""
        raise NotImplementedError

    def decode(self, raw: Sequence[bytes | str | None]) -> Any:  # pragma: no cover
        """Inverse of :meth:`encode`; missing fields (``None``) mean ``init()``."""
        raise NotImplementedError

    # ------------------------------------------------ script argument builders
    def write_args(self, key_index: int, fields: Sequence[str], values: Sequence[Any], time_ms: int) -> list:
        """Return the ``event.lua`` ARGV tokens applying one write to tile ``fields``.

        Args:
            key_index: 1-based index of the Redis key in the script's KEYS.
            fields: tile field names (one per level, no component suffix).
            values: the write's values (non-null).
            time_ms: event time of the write.
        """
        raise NotImplementedError  # pragma: no cover


@dataclass(frozen=True)
class CountOp(AggregateOp):
    """``Count``: number of counted writes. IR ``int``; empty 0. Source: SPEC §2.4."""

    def init(self) -> int:
        return 0

    def update(self, ir: int, values: Sequence[Any], time_ms: int) -> int:
        return ir + 1

    def merge(self, a: int, b: int) -> int:
        return a + b

    def finalize(self, ir: int) -> int:
        return ir

    def encode(self, ir: int) -> list[str]:
        return [str(ir)]

    def decode(self, raw: Sequence[bytes | str | None]) -> int:
        return _num(raw[0], "int") or 0

    def write_args(self, key_index, fields, values, time_ms):
        out: list = []
        for f in fields:
            out += ["I", key_index, f, 1]
        return out


@dataclass(frozen=True)
class SumOp(AggregateOp):
    """``Sum``: exact int64 sum for int values, float sum otherwise. Empty 0 / 0.0.

    Int sums use ``HINCRBY`` (never a double); float sums ``HINCRBYFLOAT``.
    Source: SPEC §2.4, §3.5.
    """

    @property
    def is_int(self) -> bool:
        """Whether the value (and so the result) is an int."""
        return self.value_types[0] == "int"

    def init(self):
        return 0 if self.is_int else 0.0

    def update(self, ir, values, time_ms):
        return ir + (int(values[0]) if self.is_int else float(values[0]))

    def merge(self, a, b):
        return a + b

    def finalize(self, ir):
        return ir

    def encode(self, ir):
        return [str(ir) if self.is_int else repr(float(ir))]

    def decode(self, raw):
        v = _num(raw[0], "int" if self.is_int else "float")
        return self.init() if v is None else v

    def write_args(self, key_index, fields, values, time_ms):
        out: list = []
        if self.is_int:
            v = int(values[0])
            for f in fields:
                out += ["I", key_index, f, v]
        else:
            v = repr(float(values[0]))
            for f in fields:
                out += ["F", key_index, f, v]
        return out


@dataclass(frozen=True)
class AverageOp(AggregateOp):
    """``Average``: IR ``(sum: float, count: int)``; finalize ``sum / count``, empty null.

    Source: SPEC §2.4; Chronon ``Average`` (struct IR of sum and count).
    """

    components: ClassVar[tuple[str, ...]] = (".s", ".c")

    def init(self):
        return (0.0, 0)

    def update(self, ir, values, time_ms):
        return (ir[0] + float(values[0]), ir[1] + 1)

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])

    def finalize(self, ir):
        return None if ir[1] == 0 else ir[0] / ir[1]

    def encode(self, ir):
        return [repr(float(ir[0])), str(ir[1])]

    def decode(self, raw):
        s = _num(raw[0], "float")
        c = _num(raw[1], "int")
        return (s or 0.0, c or 0)

    def write_args(self, key_index, fields, values, time_ms):
        out: list = []
        v = repr(float(values[0]))
        for f in fields:
            out += ["F", key_index, f + ".s", v, "I", key_index, f + ".c", 1]
        return out


@dataclass(frozen=True)
class _ExtremumOp(AggregateOp):
    """Shared code of ``Min``/``Max``: IR the extreme value or ``None``."""

    opcode: ClassVar[str] = ""

    def better(self, a: Any, b: Any) -> bool:  # pragma: no cover - abstract
        """Whether ``a`` should replace ``b``."""
        raise NotImplementedError

    def init(self):
        return None

    def update(self, ir, values, time_ms):
        v = values[0]
        if self.value_types[0] == "float":
            v = float(v)
        return v if ir is None or self.better(v, ir) else ir

    def merge(self, a, b):
        if a is None:
            return b
        if b is None:
            return a
        return b if self.better(b, a) else a

    def finalize(self, ir):
        return ir

    def encode(self, ir):
        if ir is None:
            raise ValueError("an empty Min/Max partial is never stored")
        return [_encode_scalar(ir, self.value_types[0])]

    def decode(self, raw):
        if raw[0] in ("", b"") and self.value_types[0] != "string":
            return None
        return _decode_scalar(raw[0], self.value_types[0])

    def write_args(self, key_index, fields, values, time_ms):
        t = self.value_types[0]
        kind = "s" if t == "string" else "n"
        v = _encode_scalar(values[0], t)
        out: list = []
        for f in fields:
            out += [self.opcode, key_index, f, v, kind]
        return out


@dataclass(frozen=True)
class MinOp(_ExtremumOp):
    """``Min`` over int, float, string (code point order) or time. Empty null. SPEC §2.4."""

    opcode: ClassVar[str] = "MIN"

    def better(self, a, b):
        return a < b


@dataclass(frozen=True)
class MaxOp(_ExtremumOp):
    """``Max`` over int, float, string (code point order) or time. Empty null. SPEC §2.4."""

    opcode: ClassVar[str] = "MAX"

    def better(self, a, b):
        return a > b


@dataclass(frozen=True)
class CountUniqueOp(AggregateOp):
    """``CountUnique``: exact distinct count of value tuples in the window.

    IR: ``{encoded value tuple: latest write time ms}``. A tuple counts for a
    read iff its latest write time lies in the counted range -- exact for
    reads in event-time order (SPEC §3.3), since any write of the tuple in
    the window implies its latest one is too.
    """

    tiled: ClassVar[bool] = False

    def init(self):
        return {}

    def update(self, ir, values, time_ms):
        k = encode_value_tuple(values, self.value_types)
        out = dict(ir)
        if out.get(k, -math.inf) < time_ms:
            out[k] = time_ms
        return out

    def merge(self, a, b):
        out = dict(a)
        for k, t in b.items():
            if out.get(k, -math.inf) < t:
                out[k] = t
        return out

    def finalize(self, ir):
        return len(ir)

    def count_in(self, ir: dict[str, int], lo_ms: int, hi_ms: int) -> int:
        """Number of tuples whose latest write time is in ``[lo_ms, hi_ms]``."""
        return sum(1 for t in ir.values() if lo_ms <= t <= hi_ms)

    def encode(self, ir):  # stored as one field per tuple, see write_args
        raise TypeError("CountUnique state is stored as u<tuple> fields, not tiles")

    def decode(self, raw):
        raise TypeError("CountUnique state is read by the U script op")

    def write_args(self, key_index, fields, values, time_ms):
        return ["SEEN", key_index, "u" + encode_value_tuple(values, self.value_types), int(time_ms)]


@dataclass(frozen=True)
class LatestOp(AggregateOp):
    """``Latest`` (and ``LatestTime`` with no values): the latest counted write.

    IR: ``(time_ms, values)`` or ``None``; ties in time go to the later
    arrival (``>=``). Stored as ``lt`` (ms) and ``lv`` (JSON object
    ``{"v0": .., "v1": ..}``). Finalize gives the value, a struct (dict keyed
    by ``names``) for several values, or the time for ``LatestTime``.
    Source: SPEC §2.4.
    """

    tiled: ClassVar[bool] = False
    names: tuple[str, ...] = ()
    time_only: bool = False

    def init(self):
        return None

    def update(self, ir, values, time_ms):
        if ir is None or time_ms >= ir[0]:
            return (time_ms, tuple(values))
        return ir

    def merge(self, a, b):
        if a is None:
            return b
        if b is None:
            return a
        return b if b[0] >= a[0] else a

    def finalize(self, ir):
        if ir is None:
            return None
        if self.time_only:
            return ir[0]
        vals = ir[1]
        if len(vals) == 1:
            return vals[0]
        return dict(zip(self.names, vals))

    def encode_values(self, values: Sequence[Any]) -> str:
        """Return the ``lv`` JSON text of a write's values."""
        return orjson.dumps({f"v{i}": v for i, v in enumerate(values)}).decode()

    def decode(self, raw):
        """``raw`` = ``[lt, lv]`` as read from the hash."""
        if raw[0] is None:
            return None
        t = _num(raw[0], "int")
        if self.time_only:
            return (t, ())
        obj = orjson.loads(raw[1]) if raw[1] is not None else {}
        vals = []
        for i, typ in enumerate(self.value_types):
            v = obj.get(f"v{i}")
            if typ == "float" and v is not None:
                v = float(v)
            vals.append(v)
        return (t, tuple(vals))

    def encode(self, ir):
        return [str(ir[0]), "" if self.time_only else self.encode_values(ir[1])]

    def write_args(self, key_index, fields, values, time_ms):
        return ["LA", key_index, int(time_ms), "" if self.time_only else self.encode_values(values)]


#: Functions the storage layer implements, by name.
SUPPORTED = ("Count", "Sum", "Average", "Min", "Max", "CountUnique", "Latest", "LatestTime")


def make_op(function: str, value_types: Sequence[str], value_names: Sequence[str] = ()) -> AggregateOp:
    """Return the algebra of ``function`` over values of ``value_types``.

    Raises:
        NotImplementedError: a function of SPEC §2.4 the storage layer does not
            implement yet (see :data:`SUPPORTED`).
    """
    vt = tuple(value_types)
    if function == "Count":
        return CountOp(vt)
    if function == "Sum":
        return SumOp(vt)
    if function == "Average":
        return AverageOp(vt)
    if function == "Min":
        return MinOp(vt)
    if function == "Max":
        return MaxOp(vt)
    if function == "CountUnique":
        return CountUniqueOp(vt)
    if function == "Latest":
        return LatestOp(vt, names=tuple(value_names))
    if function == "LatestTime":
        return LatestOp(vt, time_only=True)
    raise NotImplementedError(
        f"aggregate function {function} is not implemented by the tile store yet "
        f"(supported: {', '.join(SUPPORTED)})"
    )


def tile_field(size_s: int, index: int) -> str:
    """Return the hash field name of tile ``index`` at level ``size_s`` (no component suffix).

    >>> tile_field(60, 22616640)
    'm22616640'
    """
    return f"{LEVEL_CODE[size_s]}{index}"
