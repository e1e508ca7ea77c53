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
``u<value tuple>`` ``CountUnique`` keeps no hash: a sorted set at the same
                   key, one member ``u<value tuple>`` (encoded as in
                   ``keys.encode_value_tuple``) per tuple, scored by the
                   epoch ms of its latest write; a read is one ``ZCOUNT``
                   over the counted range, a write one ``ZADD GT`` and a
                   ``ZREMRANGEBYSCORE`` of what no later read counts.
``lt`` / ``lv``    ``Latest``/``LatestTime`` written by ``event.lua`` and
                   backfill's ``latest`` mode: epoch ms and JSON object
                   ``{"v0": .., "v1": ..}`` of the latest counted write.
                   The planner keeps ``Latest*`` states as write logs of
                   one (``registry.state_limit``), which late reads need.
``dt``/``dv``/``dw`` ``Decayed*``: reference time (ms), decayed sum of values
                   and decayed count, both weighed to ``dt`` (numbers as
                   ``%.17g`` text).
``_p``             event time (ms) at which the next pruning pass is due
                   (:func:`prune_every_ms` after the last one's start).
``_m``             tiled functions, written by serving's generated scripts:
                   the latest resolution tile index written (``T(s)`` of
                   the latest ``s``). A read whose ``T(t)`` is at least
                   ``_m`` merges a shorter cover (``windows.short_cover``);
                   stream writes and forced backfills drop the field (an
                   unforced backfill writes only before the online start),
                   and the next online write recomputes it from the tiles.
``_t``             serving's writes (tiled and ``Decayed*``): the latest
                   write time (ms). A read at ``t < _t`` is *late*.
``<R><b>``         serving's writes, for late reads (SPEC §3.3): the raw
                   entries of raw bucket ``b`` (``windows.raw_bucket_s``: the
                   resolution, at least 15 s; ``R`` its level code in upper
                   case: ``B``, ``M``, ``H``, ``D``), ``<ms> <length>
                   <payload>`` each, in arrival order; the payload is the
                   write's one-write tile text. Kept while a read up to the
                   allowed lateness ``L`` can need them. A bucket past
                   ~2 KB goes on in chunks (``lua.py``
                   ``raw_append``): the field then starts ``#<J> `` and
                   the later entries lie in ``<R><b>.1`` .. ``<R><b>.<J>``.
``<R><b>.p<k>``    the summary of closed chunk ``k`` (``lua.py``
                   ``raw_close``): ``<min> <max> <runmax> <plen> <clen>
                   <partial><cum>``, the least and greatest ms of its
                   entries, the greatest of chunks ``0..k``, and the
                   partial aggregates (``rf_<kind>``) of its entries and
                   of those of chunks ``0..k`` (``clen`` -1 and ``runmax``
                   2**53 where an earlier chunk has none). A late read
                   takes whole closed chunks by them (``raw_scan``).
``<R><b>.t``       ``Decayed*``, a raw bucket that has closed a chunk: the
                   decayed partial of all its entries (``<ms> <sum>
                   <count>``); late reads take earlier buckets whole.
``_r``             the lowest raw bucket that may remain.
``bt``/``bv``/``bw`` ``Decayed*``: the decayed sums of the writes before
                   raw bucket ``_r`` (the base of late reads).
=================  ==========================================================

**Late reads** (SPEC §3.3: a read counts only the writes up to its own
time). Every state keeps what reads up to ``L`` late need: tiles of
``W + r + L``, and a late tiled read merges the exact cover of the tiles
before its own resolution tile with that tile's raw entries up to ``t``.
``CountUnique`` keeps in its sorted set a raw member ``R<ms>:u<tuple>`` per
write (score ``ms + 2**50``) as long as its tuples: a late read counts the
tuples last seen in range, plus those written after ``t`` with a raw member
in range. ``Decayed*`` read late from the base
and the raw entries up to ``t``. Write logs keep every member of the last
``L`` and the ``n`` latest before it. ``compiler.algebra.lua`` generates
all of it.

Tiled functions keep one partial per tile at every level of
``windows.levels_s(W)``; a read merges the tiles of ``windows.cover(...)``:
``Count``, ``Sum``, ``Average`` (``.s``/``.c``), ``Min``, ``Max``, ``First``
and ``FirstTime`` (``<ms>\t<json>`` of the tile's earliest write) and
``HyperLogLog`` (sparse registers ``;slot:rho;slot:rho``).
``CountUnique`` needs no tiles: the latest write time per value decides
membership in the window exactly when reads come in event-time order (late
reads also use its raw members, below); ``Latest`` states are write logs of
one.

**Write logs.** A state with ``limit n`` (explicit, or ``Sequence``/``Set``'s
default 100) is not a hash but a sorted set at the same Redis key: one member
per write, score = event time (ms), member = 8-digit arrival rank among the
key's writes at that same millisecond, the time, ``:`` and the JSON object of
the values (``000000001500:{"v0":5}``; the time keeps members unique). So members order by (time, arrival), exactly as
SPEC §3.2 orders writes for ``limit``. Each write trims the log to the ``n``
latest members and drops members older than ``W + r``; a read takes the
``n`` latest members in the counted range (``ZREVRANGEBYSCORE .. LIMIT 0 n``)
and folds them, oldest first, through the function's ``update`` (:func:`fold`).
The ``n`` latest writes in a range that ends at the read time are the ``n``
latest overall restricted to the range, so the trimmed log is exact for reads
in event-time order; serving's writes keep every member of the last ``L``
(the allowed lateness) and the ``n`` latest before it, exact for reads up to
``L`` late.

**Decayed** aggregates keep O(1) state: with reference time ``dt`` the
stored sums are ``sum(v * exp(-(dt - s) / W))``; a write at ``s >= dt``
rescales them to ``s``, an older one adds its weight. A read at ``t``
multiplies by ``exp(-(t - dt) / W)`` (SPEC §2.4). The state expires
:data:`DECAY_HORIZON` windows after its last write, when every weight is
below ``exp(-40)``.

**HyperLogLog** registers (``m = 2**HLL_P``): the item is the encoded value
tuple (``keys.encode_value_tuple``); its MD5 digest (hex) gives the slot (the
first 3 hex digits) and ``rho`` = 53 minus the bit length of the next 13 hex
digits (52 bits), so 1..53. MD5 is a Spark built-in and in ``hashlib``, so
Spark and the server compute the same registers; the estimate is Ertl's
improved raw estimator over the merged registers (:func:`hll_estimate`).

The Lua script ``event.lua`` beside this module applies the same updates in
Redis; :func:`encode` of :func:`update` equals what the script stores, and the
Spark writer stores ``encode`` of its per-tile partials. Tests check all three
against a brute-force oracle.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Sequence

import orjson

from compiler.algebra.keys import encode_value_tuple
from compiler.algebra.windows import LEVEL_CODE
from compiler.typesystem import INT64_MAX, INT64_MIN


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
    """``Sum``: exact integer sum for int values, float sum otherwise. Empty 0 / 0.0.

    An int IR is a Python ``int`` of any size (never a double), stored as
    its decimal text (``common.lua`` ``int_add_text`` adds two exactly, so
    a tile keeps its total past 2**63); :meth:`finalize` gives ``None``
    when the total lies outside int64 (SPEC §3.5: int results are 64-bit;
    the replay kernel ``arrow._Sum`` and serving, which reports the error
    ``integer overflow``, agree). Float sums add doubles (``float_text``).
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
        if self.is_int and not INT64_MIN <= ir <= INT64_MAX:
            return None
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
        kind = "s" if t == "string" else "i" if t in ("int", "time") else "n"
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
    the window implies its latest one is too; the store's late reads also
    look at the raw members of the writes after the read (module docstring).
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

    def encode(self, ir):  # stored as one sorted-set member per tuple, see write_args
        raise TypeError("CountUnique state is stored as u<tuple> members of a sorted set, not tiles")

    def decode(self, raw):
        raise TypeError("CountUnique state is read by the U script op")

    def write_args(self, key_index, fields, values, time_ms):
        return ["SEEN", key_index, "u" + encode_value_tuple(values, self.value_types), int(time_ms)]


def _json_float(v: Any) -> Any:
    """``v``, or for a non-finite float the string Spark's ``to_json`` writes for it (orjson would write null)."""
    if type(v) is float and v - v != 0.0:  # inf - inf and nan - nan are NaN
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    return v


def values_json(values: Sequence[Any]) -> str:
    """The JSON object ``{"v0": .., "v1": ..}`` of a write's values (``lv``, logs, ``First`` tiles).

    Non-finite floats are the strings ``"Infinity"``, ``"-Infinity"`` and
    ``"NaN"``, as Spark's ``to_json`` writes them
    (``compiler.algebra.spark.values_json_column``), so :func:`_values_of_json`
    reads the value back (a float expression can give one: ``Float('1e400')``,
    docs/semantics.md §7.1), whichever engine wrote it.
    """
    return orjson.dumps({f"v{i}": _json_float(v) for i, v in enumerate(values)}).decode()


def _values_of_json(text: bytes | str | None, value_types: Sequence[str]) -> tuple:
    """Inverse of :func:`values_json` (floats back to ``float``; missing -> ``None``)."""
    obj = orjson.loads(text) if text not in (None, "", b"") else {}
    vals = []
    for i, typ in enumerate(value_types):
        v = obj.get(f"v{i}")
        if typ == "float" and v is not None:
            v = float(v)
        vals.append(v)
    return tuple(vals)


@dataclass(frozen=True)
class _PickOp(AggregateOp):
    """Shared code of ``Latest``/``First`` (and their ``*Time`` forms).

    IR: ``(time_ms, values)`` or ``None``. Finalize gives the value, a struct
    (dict keyed by ``names``) for several values, or the time (``time_only``).
    """

    names: tuple[str, ...] = ()
    time_only: bool = False

    def init(self):
        return None

    def wins(self, new_ms: int, old_ms: int) -> bool:  # pragma: no cover - abstract
        """Whether a write at ``new_ms`` replaces the pick at ``old_ms`` (later arrival)."""
        raise NotImplementedError

    def update(self, ir, values, time_ms):
        if ir is None or self.wins(time_ms, ir[0]):
            return (time_ms, tuple(values))
        return ir

    def merge(self, a, b):
        if a is None:
            return b
        if b is None:
            return a
        return b if self.wins(b[0], a[0]) else a

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
        """Return the JSON text of a write's values (``""`` for the ``*Time`` forms)."""
        return "" if self.time_only else values_json(values)


@dataclass(frozen=True)
class LatestOp(_PickOp):
    """``Latest`` (and ``LatestTime`` with no values): the latest counted write.

    Ties in time go to the later arrival (``>=``). Stored untiled as ``lt``
    (ms) and ``lv`` (JSON object ``{"v0": .., "v1": ..}``). Source: SPEC §2.4.
    """

    tiled: ClassVar[bool] = False

    def wins(self, new_ms: int, old_ms: int) -> bool:
        return new_ms >= old_ms

    def decode(self, raw):
        """``raw`` = ``[lt, lv]`` as read from the hash."""
        if raw[0] is None:
            return None
        t = _num(raw[0], "int")
        if self.time_only:
            return (t, ())
        return (t, _values_of_json(raw[1], self.value_types))

    def encode(self, ir):
        return [str(ir[0]), self.encode_values(ir[1])]

    def write_args(self, key_index, fields, values, time_ms):
        return ["LA", key_index, int(time_ms), self.encode_values(values)]


@dataclass(frozen=True)
class FirstOp(_PickOp):
    """``First`` (and ``FirstTime`` with no values): the earliest counted write.

    Tiled: each tile keeps ``<ms>\t<json>`` of its earliest write; ties in
    time go to the earlier arrival (a write replaces the tile's only if
    strictly earlier). Tiles are disjoint in time, so the merge of a cover is
    its first non-empty tile. Source: SPEC §2.4.
    """

    def wins(self, new_ms: int, old_ms: int) -> bool:
        return new_ms < old_ms

    def encode(self, ir):
        return [f"{int(ir[0])}\t{self.encode_values(ir[1])}"]

    def decode(self, raw):
        if raw[0] is None:
            return None
        text = raw[0].decode("utf-8") if isinstance(raw[0], bytes) else raw[0]
        t, _, j = text.partition("\t")
        if self.time_only:
            return (int(t), ())
        return (int(t), _values_of_json(j, self.value_types))

    def write_args(self, key_index, fields, values, time_ms):
        v = self.encode_values(values)
        out: list = []
        for f in fields:
            out += ["FI", key_index, f, int(time_ms), v]
        return out


@dataclass(frozen=True)
class SequenceOp(AggregateOp):
    """``Sequence``: the counted writes' values, oldest first (a write log only).

    IR: list of value tuples in (time, arrival) order. Finalize: list of
    values, or of structs (dicts keyed by ``names``) for several values.
    Source: SPEC §2.4 (``limit`` defaults to 100).
    """

    tiled: ClassVar[bool] = False
    names: tuple[str, ...] = ()

    def init(self):
        return []

    def update(self, ir, values, time_ms):
        return [*ir, tuple(values)]

    def merge(self, a, b):
        return [*a, *b]

    def finalize(self, ir):
        if len(self.value_types) == 1:
            return [v[0] for v in ir]
        return [dict(zip(self.names, v)) for v in ir]


@dataclass(frozen=True)
class SetOp(AggregateOp):
    """``Set``: the distinct values among the counted writes, sorted ascending.

    IR: frozenset of value tuples. Finalize: sorted list of values (strings by
    code point), or of tuples (lists in value order) for several values.
    Source: SPEC §2.4, §3.5.
    """

    tiled: ClassVar[bool] = False

    def init(self):
        return frozenset()

    def update(self, ir, values, time_ms):
        return ir | {tuple(values)}

    def merge(self, a, b):
        return a | b

    def finalize(self, ir):
        items = sorted(ir)
        if len(self.value_types) == 1:
            return [v[0] for v in items]
        return [list(v) for v in items]


#: Decayed state expires this many windows after its last write (weights < e^-40).
DECAY_HORIZON = 40


def prune_every_ms(window_s: int, resolution_s: int, lateness_ms: int = 0) -> int:
    """Return the event time (ms) between two pruning passes of a state (the ``_p`` field).

    A pass deletes the fields no read at the writing time minus the allowed
    lateness or later can use (tiles ending at or before ``t - W - r - L``,
    SPEC §5.3, §3.3), so a state keeps a range of ``K = W + r + L`` of tiles
    plus up to one period. The period is half that range: a pass walks the
    whole hash, so each field is visited about ``K / period + 1 = 3`` times
    over its life whatever ``L`` is, and memory is at most ``1.5 K`` of
    tiles. (Half the *window* made the passes over a 1 h state with the
    default hour of lateness walk each field 5 times, a 10 min one 15 times:
    ~13% of Valkey's CPU on the demo's departures, ``bench/lua_calls.py
    --events 40000``; a period of ``K`` saves ~7% more for a third more
    memory.)

    Args:
        window_s: the window ``W`` (seconds).
        resolution_s: its resolution ``r`` (seconds).
        lateness_ms: the allowed lateness ``L`` in ms (``SCOWL_ALLOWED_LATENESS``).

    Returns:
        ``max((W + r + L) / 2, r)`` in ms.
    """
    return max((window_s * 1000 + resolution_s * 1000 + lateness_ms) // 2, resolution_s * 1000)


def log_every_ms(lateness_ms: int) -> int:
    """Return the event time (ms) between two trims of a write log online (``Sequence``, ``Set``, ``Latest*``, ``limit``).

    A write log keeps every member of the last ``L`` and the ``n`` latest
    before it (``common.lua``'s ``log_trim``; SPEC §3.3, §5.3). The online
    scripts (``compiler.algebra.lua``'s ``log_write``) trim at the first write
    of each period of event time and at late writes, so a log holds at most
    the writes of one period more than that: with half ``L``, at most
    ``1.5 L`` of writes plus ``n``, the bound :func:`prune_every_ms` gives
    tiled states (and the ``n`` kept before ``t - L`` may be older than the
    window: they cost memory, never a value). With no allowed lateness a log
    keeps only ``n`` members and is trimmed at every write (0).

    Args:
        lateness_ms: the allowed lateness ``L`` in ms (``SCOWL_ALLOWED_LATENESS``).

    Returns:
        ``L // 2`` in ms; 0 (trim at every write) when ``L`` is 0.
    """
    return max(lateness_ms, 0) // 2


def _g17(x: float) -> str:
    """``%.17g`` text of a float, as ``event.lua`` stores decayed sums."""
    return "%.17g" % x


@dataclass(frozen=True)
class DecayedOp(AggregateOp):
    """``DecayedCount``/``DecayedSum``/``DecayedAverage``: exponentially decayed.

    A write of value ``v`` at ``s`` weighs ``exp(-(t - s) / W)`` in a read at
    ``t``, over all history (SPEC §2.4). IR ``(ref_ms, sum_v, sum_w)`` or
    ``None``: the decayed sums of values and of weights, both weighed at the
    reference time ``ref_ms`` (the latest write). Kept untiled in ``dt``,
    ``dv``, ``dw``. Finalize needs the read time: :meth:`value_at`.

    Attributes:
        kind: ``"count"``, ``"sum"`` or ``"average"``.
        window_ms: the decay constant ``W`` in ms.
    """

    tiled: ClassVar[bool] = False
    kind: str = "count"
    window_ms: int = 1

    def init(self):
        return None

    def update(self, ir, values, time_ms):
        v = float(values[0]) if self.kind != "count" else 1.0
        if ir is None:
            return (time_ms, v, 1.0)
        ref, sv, sw = ir
        if time_ms >= ref:
            f = math.exp(-(time_ms - ref) / self.window_ms)
            return (time_ms, sv * f + v, sw * f + 1.0)
        f = math.exp(-(ref - time_ms) / self.window_ms)
        return (ref, sv + v * f, sw + f)

    def merge(self, a, b):
        if a is None:
            return b
        if b is None:
            return a
        if b[0] > a[0]:
            a, b = b, a
        f = math.exp(-(a[0] - b[0]) / self.window_ms)
        return (a[0], a[1] + b[1] * f, a[2] + b[2] * f)

    def finalize(self, ir):
        raise TypeError("a decayed aggregate is finalized at a read time: use value_at")

    def value_at(self, ir, read_ms: int) -> float | None:
        """Return the feature value of ``ir`` read at ``read_ms``.

        The sums weigh ``exp(-(read_ms - ref) / W)``, and at most 1: a read
        before ``ref`` only meets sums weighed at a later time when its event
        is more than the allowed lateness late (the state's hash takes such
        writes, and every exact path returns sums at or before the read), and
        is then answered from what the store holds (SPEC §3.3): the sums as
        they stand at ``ref``. Weighing them back to ``read_ms`` would scale
        them by ``exp((ref - read_ms) / W)``, beyond every value written, and
        past ~709 W beyond a double (``OverflowError``).

        Args:
            ir: ``(ref_ms, sum_v, sum_w)`` or ``None``.
            read_ms: the read's event time in ms.

        Returns:
            float; ``0.0`` for an empty count/sum, ``None`` for an empty average.
        """
        if ir is None:
            return None if self.kind == "average" else 0.0
        ref, sv, sw = ir
        if self.kind == "average":
            return sv / sw if sw > 0 else None
        f = math.exp(-(read_ms - ref) / self.window_ms) if read_ms > ref else 1.0
        return (sw if self.kind == "count" else sv) * f

    def encode(self, ir):
        return [str(int(ir[0])), _g17(ir[1]), _g17(ir[2])]

    def decode(self, raw):
        """``raw`` = ``[dt, dv, dw]`` as read from the hash."""
        if raw[0] is None:
            return None
        return (_num(raw[0], "int"), _num(raw[1], "float") or 0.0, _num(raw[2], "float") or 0.0)

    def write_args(self, key_index, fields, values, time_ms):
        v = float(values[0]) if self.kind != "count" else 1.0
        return ["DE", key_index, int(time_ms), _g17(v), self.window_ms]


#: HyperLogLog precision: ``m = 2**HLL_P`` registers; standard error 1.04/sqrt(m) = 1.6%.
HLL_P = 12
HLL_M = 1 << HLL_P
#: Bits of the hash after the slot; register values are 1..HLL_Q + 1.
HLL_Q = 52


def hll_coupon(item: str) -> tuple[int, int]:
    """Return ``(slot, rho)`` of one item (module docstring; Spark twin in ``writer.tiles``).

    >>> hll_coupon("s1:a")
    (3642, 3)
    """
    h = hashlib.md5(item.encode("utf-8")).hexdigest()
    w = int(h[3:16], 16)
    return int(h[0:3], 16), HLL_Q + 1 - w.bit_length()


def _sigma(x: float) -> float:
    if x == 1.0:
        return math.inf
    y, z = 1.0, x
    while True:
        x *= x
        z_old = z
        z += x * y
        y += y
        if z == z_old:
            return z


def _tau(x: float) -> float:
    if x == 0.0 or x == 1.0:
        return 0.0
    y, z = 1.0, 1.0 - x
    while True:
        x = math.sqrt(x)
        z_old = z
        y *= 0.5
        z -= (1.0 - x) ** 2 * y
        if z == z_old:
            return z / 3.0


@functools.lru_cache(maxsize=None)
def _tau_of(saturated: int) -> float:
    """``_tau(1 - saturated / m)`` for ``saturated`` registers at ``HLL_Q + 1`` (one of ``m + 1`` values, kept)."""
    return _tau(1.0 - saturated / HLL_M)


@functools.lru_cache(maxsize=None)
def _sigma_of(zeros: int) -> float:
    """``_sigma(zeros / m)`` for ``zeros`` empty registers (one of ``m + 1`` values, kept)."""
    return _sigma(zeros / HLL_M)


def hll_estimate(registers: dict[int, int]) -> int:
    """Estimate the distinct count of merged HLL registers.

    The series ``_tau`` and ``_sigma`` depend only on the number of
    saturated and of empty registers, so their values are kept per count
    (``_tau_of``, ``_sigma_of``), and the halving steps above the largest
    register are skipped while the sum is 0.0 (``0.5 * (0.0 + 0)`` is
    0.0): the same double operations on the same values, the same result
    (the serving finisher of every ``HyperLogLog`` read; bench/HISTORY.md,
    twenty-seventh session).

    Args:
        registers: ``{slot: rho}`` for the non-zero registers (``rho`` in 1..53).

    Returns:
        The rounded estimate (0 for no registers).

    Source: O. Ertl, "New cardinality estimation algorithms for HyperLogLog
    sketches" (2017), Algorithm 6 (improved raw estimator; unbiased from 0 to
    ~2^64 without empirical bias tables).
    """
    if not registers:
        return 0
    return hll_estimate_of_values(registers.values())


def hll_estimate_of_values(rhos: Iterable[int]) -> int:
    """:func:`hll_estimate` of the registers whose non-zero values are ``rhos`` (any order; at least one).

    The estimate depends on their histogram only; serving keeps it per
    sorted tuple of values (``compiler.algebra.lua.hll_read_estimate``).

    Args:
        rhos: the non-zero register values (1..``HLL_Q + 1``).

    Returns:
        The rounded estimate, as :func:`hll_estimate` (same operations).
    """
    c = [0] * (HLL_Q + 2)
    n = 0
    for rho in rhos:
        c[rho] += 1
        n += 1
    c[0] = HLL_M - n
    return hll_estimate_counts(c)


def hll_estimate_counts(c: Sequence[int]) -> int:
    """:func:`hll_estimate` of the registers whose histogram is ``c``.

    Args:
        c: ``HLL_Q + 2`` ints: ``c[k]`` registers hold ``k`` (``c[0]``: the
            empty ones; at least one register non-zero).

    Returns:
        The rounded estimate, as :func:`hll_estimate` (same operations).
    """
    m = HLL_M
    z = m * _tau_of(c[HLL_Q + 1])
    top = HLL_Q
    if z == 0.0:
        while top > 0 and not c[top]:
            top -= 1
    for k in range(top, 0, -1):
        z = 0.5 * (z + c[k])
    z += m * _sigma_of(c[0])
    if z == 0.0:  # every register saturated: beyond what 64-bit hashes can tell apart
        return 2**63 - 1
    return min(int(round(m * m / (2.0 * math.log(2.0)) / z)), 2**63 - 1)


@dataclass(frozen=True)
class HyperLogLogOp(AggregateOp):
    """``HyperLogLog``: approximate distinct count of value tuples, mergeable tiles.

    IR: ``{slot: rho}`` (sparse registers; merge is the register-wise max).
    Stored per tile as ``;slot:rho;slot:rho`` (order free). Source: SPEC §2.4
    (standard error <= 2%: 1.6% at ``HLL_P`` = 12); Flajolet et al. (2007)
    for the registers, Ertl (2017) for the estimate.
    """

    def init(self):
        return {}

    def update(self, ir, values, time_ms):
        slot, rho = hll_coupon(encode_value_tuple(values, self.value_types))
        if ir.get(slot, 0) >= rho:
            return ir
        out = dict(ir)
        out[slot] = rho
        return out

    def merge(self, a, b):
        out = dict(a)
        for slot, rho in b.items():
            if out.get(slot, 0) < rho:
                out[slot] = rho
        return out

    def finalize(self, ir):
        return hll_estimate(ir)

    def encode(self, ir):
        return ["".join(f";{slot}:{rho}" for slot, rho in sorted(ir.items()))]

    def decode(self, raw):
        text = raw[0]
        if text is None:
            return {}
        if isinstance(text, bytes):
            text = text.decode()
        out: dict[int, int] = {}
        for part in text.split(";")[1:]:
            slot, _, rho = part.partition(":")
            s, r = int(slot), int(rho)
            if out.get(s, 0) < r:
                out[s] = r
        return out

    def write_args(self, key_index, fields, values, time_ms):
        slot, rho = hll_coupon(encode_value_tuple(values, self.value_types))
        out: list = []
        for f in fields:
            out += ["HM", key_index, f, slot, rho]
        return out


def fold(op: AggregateOp, writes: Sequence[tuple[int, Sequence[Any]]]) -> Any:
    """Fold counted writes through ``op.update`` and finalize (write-log reads).

    Args:
        op: the function's algebra (not ``Decayed*``).
        writes: ``(time_ms, values)`` in (time, arrival) order, oldest first.

    Returns:
        The feature value (run-time representation).
    """
    ir = op.init()
    for t, vals in writes:
        ir = op.update(ir, vals, t)
    return op.finalize(ir)


def log_member(rank: int, time_ms: int, values: Sequence[Any]) -> str:
    """Return the sorted-set member of one write in a write log (module docstring).

    Args:
        rank: arrival rank among the key's writes at the same ``time_ms`` (0-based).
        time_ms: event time of the write (also the member's score).
        values: the write's values.

    >>> log_member(0, 1500, [5, "a"])
    '000000001500:{"v0":5,"v1":"a"}'
    """
    return f"{rank:08d}{int(time_ms)}:{values_json(values)}"


def parse_log_member(member: bytes | str, value_types: Sequence[str]) -> tuple:
    """Return the value tuple of a write-log member (inverse of :func:`log_member`; :func:`log_member_parser`)."""
    return log_member_parser(value_types)(member)


def log_member_parser(value_types: Sequence[str]) -> Callable[[bytes | str], tuple]:
    """The parser of write-log members (inverse of :func:`log_member`) for one read slot's ``value_types``, made
    once (the serving finisher's form; :func:`parse_log_member` makes one per call).

    The values of :func:`_values_of_json` of the JSON after the member's
    ``:`` (bytes parsed as UTF-8 by orjson, no decoded copy), ``v<i>``
    looked up by keys made here, floats back to ``float``, a missing value
    ``None``.

    Args:
        value_types: the state's value types.

    Returns:
        ``member -> values tuple``.

    Raises:
        ValueError: (from the returned function) a member without ``:`` after its rank.
    """
    keys = tuple((f"v{i}", typ == "float") for i, typ in enumerate(value_types))

    def parse(member: bytes | str) -> tuple:
        colon = b":" if isinstance(member, bytes) else ":"
        payload = member[member.index(colon, 8) + 1:]
        obj = orjson.loads(payload) if payload else {}
        out = []
        for key, is_float in keys:
            v = obj.get(key)
            out.append(float(v) if is_float and v is not None else v)
        return tuple(out)

    return parse


def make_op(function: str, value_types: Sequence[str], value_names: Sequence[str] = (),
            window_s: int = 1) -> AggregateOp:
    """Return the algebra of ``function``: ``compiler.algebra.registry.make_op`` (arguments and errors there).

    Kept here for the callers that import the algebra from this module.
    """
    from compiler.algebra.registry import make_op as registry_make_op

    return registry_make_op(function, value_types, value_names, window_s)


def tile_field(size_s: int, index: int) -> str:
    """Return the hash field name of tile ``index`` at level ``size_s`` (no component suffix).

    >>> tile_field(60, 22616640)
    'm22616640'
    """
    return f"{LEVEL_CODE[size_s]}{index}"
