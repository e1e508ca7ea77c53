"""The Spark target of the aggregate algebra: per-function column forms (SPEC §2.4, §5.6).

One :class:`SparkAggregate` per function of ``compiler.algebra.registry``
(table :data:`SPARK`), used by the writer's jobs, which never branch on a
function name:

* backfill and stream tiles (``writer.tilepass``): :meth:`~SparkAggregate.tile`
  names the aggregation group, whether the state is tiled, and per stored
  component its field suffix, its merge op in ``event.lua`` and the
  aggregated column it comes from; :meth:`~SparkAggregate.write_columns`
  gives the columns one write contributes to that aggregation;
* ``Decayed*`` rows: :meth:`~SparkAggregate.decay_value`, the value a write
  adds to the decayed sums;
* replay (``writer.sweep``): :meth:`~SparkAggregate.sweep_columns`, the
  payload a write carries into the Arrow kernel
  (``compiler.algebra.arrow.KERNELS``), and :meth:`~SparkAggregate.result_type`;
* every read: :meth:`~SparkAggregate.empty`, the value of a read with no
  counted write (SPEC §2.4 table).

Also the Spark twins of the key and value encodings of
``compiler.algebra.keys`` and ``ops`` (:func:`encode_tuple_column`,
:func:`values_json_column`, :func:`hll_coupon_columns`): built-in column
functions only, no Python UDF (SPEC §5.6).

The aggregated columns of :meth:`~SparkAggregate.tile` (``writer.tilepass``
computes each with built-in aggregates): ``n`` count, ``sl`` exact int sum
(:func:`exact_long_sum`: a tile's total may leave int64),
``sd`` double sum, ``mnl``/``mxl`` int64 min/max, ``mnd``/``mxd`` double
min/max, ``mns``/``mxs`` string min/max, ``fi`` first ``ms\\tjson`` by (time,
arrival), ``la`` latest likewise, ``hms`` HyperLogLog registers
``;slot:rho..``, ``seen`` last-seen ms of a value tuple.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, DoubleType, LongType

from compiler.algebra.keys import GLOBAL_TAG, MAX_KEY_CHARS, PREFIX
from compiler.algebra.ops import HLL_Q
from compiler.typesystem import format_float_column

__all__ = ["SPARK", "SparkAggregate", "TileForm", "encode_component_column", "encode_tuple_column",
           "exact_long_sum", "hll_coupon_columns", "hll_rho_column", "values_json_column"]


def exact_long_sum(high: Column, low: Column) -> Column:
    """The exact sum of int64 values from the sums of their two halves, as a decimal of scale 0.

    An int ``Sum``'s tile keeps its exact total, which may lie outside int64
    (``ops.SumOp``; ``common.lua`` ``int_add_text``), where Spark's ``sum``
    of ``long`` fails the job under ANSI and ``try_sum`` loses the value.
    Each value ``v`` splits into ``v >> 32`` (signed, ``|.| <= 2^31``) and
    ``v & 0xFFFFFFFF`` (``[0, 2^32)``); both halves' ``long`` sums are exact
    for fewer than 2^31 values per group, and ``high * 2^32 + low`` is the
    total (``|.| < 2^95``: 29 digits).

    Args:
        high: ``sum(shiftright(v, 32))`` of a group (``long``; null: no value).
        low: ``sum(v & 0xFFFFFFFF)`` of the group (``long``).

    Returns:
        A ``decimal(31,0)`` column (its ``string`` cast is the canonical
        decimal text ``event.lua``'s ``I`` merge reads); null when ``high`` is.
    """
    return high.cast("decimal(20,0)") * F.lit(4294967296).cast("decimal(10,0)") + low.cast("decimal(20,0)")


# ------------------------------------------------------------------ encodings
def encode_component_column(col: Column, type_name: str) -> Column:
    """Spark twin of ``compiler.algebra.keys.encode_component`` (a non-null value).

    Raises:
        ValueError: a type that cannot be a key component (struct, array).
    """
    if type_name == "string":
        return F.concat(F.lit("s"), F.length(col).cast("string"), F.lit(":"), col)
    if type_name == "int":
        return F.concat(F.lit("i"), col.cast("long").cast("string"))
    if type_name == "time":
        return F.concat(F.lit("t"), col.cast("long").cast("string"))
    if type_name == "bool":
        return F.when(col, F.lit("b1")).otherwise(F.lit("b0"))
    if type_name in ("float", "duration"):
        # Python's repr (Spark's own cast prints 1.5E7 and 1.0E-5 where repr prints 15000000.0 and
        # 1e-05), -0.0 as 0.0
        x = col.cast("double")
        return F.concat(F.lit("f" if type_name == "float" else "d"),
                        format_float_column(F.when(x == F.lit(0.0), F.lit(0.0)).otherwise(x)))
    raise ValueError(f"cannot use a value of type {type_name} as a key")


def tuple_text_column(cols: Sequence[Column], types: Sequence[str]) -> Column:
    """The components' texts (:func:`encode_component_column`) joined by ``|``; ``''`` for no component.

    One-to-one on non-null key tuples of the given types (each text starts with its type's letter, and
    a string's with its length), before :func:`encode_tuple_column`'s escaping and length bound.
    """
    if not cols:
        return F.lit("")
    return F.concat_ws("|", *[encode_component_column(c, t) for c, t in zip(cols, types)])


def encode_tuple_column(cols: Sequence[Column], types: Sequence[str]) -> Column:
    """Spark twin of ``compiler.algebra.keys.encode_key`` for non-null components.

    Returns the escaped, length-bounded encoding (SPEC §5.5) of :func:`tuple_text_column`.
    """
    raw = tuple_text_column(cols, types)
    esc = F.replace(F.replace(F.replace(raw, F.lit("%"), F.lit("%25")), F.lit("{"), F.lit("%7B")), F.lit("}"), F.lit("%7D"))
    # characters are counted only when the bytes could be too many (no character takes less than a byte)
    long_key = (F.octet_length(esc) > MAX_KEY_CHARS) & (F.length(esc) > MAX_KEY_CHARS)
    return F.when(long_key, F.concat(F.lit("#"), F.substring(F.sha2(esc, 256), 1, 40))).otherwise(esc)


def redis_key_column(encoded: Column, n_keys: int, definition_hash: str) -> Column:
    """Spark twin of ``compiler.algebra.keys.redis_key``: ``sc:{<encoded key>}:<hash>``.

    Args:
        encoded: the encoded entity key (:func:`encode_tuple_column`).
        n_keys: number of key components (0: a global state, tag ``GLOBAL_TAG``).
        definition_hash: the state's definition hash.
    """
    tag = F.lit(GLOBAL_TAG) if n_keys == 0 else encoded
    return F.concat(F.lit(PREFIX + "{"), tag, F.lit("}:" + definition_hash))


def values_json_column(n: int, cols: Sequence[Column] | None = None) -> Column:
    """Spark twin of ``ops.values_json``: ``{"v0": .., ..}`` (``{}`` for no values).

    Args:
        n: number of values.
        cols: the value columns (default the columns ``v0 .. v<n-1>``).
    """
    if n == 0:
        return F.lit("{}")
    cols = [F.col(f"v{i}") for i in range(n)] if cols is None else cols
    return F.to_json(F.struct(*[c.alias(f"v{i}") for i, c in enumerate(cols)]))


def hll_coupon_columns(item: Column) -> tuple[Column, Column]:
    """Spark twin of ``ops.hll_coupon``: ``(slot, rho)`` (int columns) from the MD5 hex digest of ``item``.

    ``slot`` is the digest's first 3 hex digits; ``rho`` is one more than
    the leading zero bits of the next 13 (:func:`hll_rho_column`).
    """
    h = F.md5(item)
    slot = F.conv(F.substring(h, 1, 3), 16, 10).cast("int")
    return slot, hll_rho_column(F.substring(h, 4, HLL_Q // 4))


def hll_rho_column(digits: Column) -> Column:
    """HyperLogLog's ``rho`` of a ``HLL_Q``-bit word given as ``HLL_Q / 4`` lower-case hex digits: an int column.

    ``rho = HLL_Q + 1 - bit_length(word)``: one more than the word's leading
    zero bits (``HLL_Q + 1`` for zero), as ``ops.hll_coupon``. Counted from
    the text: 4 bits per leading ``0`` digit, then the leading zeros of the
    first other digit (``translate``d to them), without converting the word
    to a base-2 text (``conv(.., 16, 2)`` and its length were ~7% of a
    replay's sweep rows by JFR samples, 2026-11-30; a coupon of 3M items
    took 2.1 s against 4.5-5.0 s with ``conv``, warm).

    Args:
        digits: string column, ``HLL_Q / 4`` hex digits ``[0-9a-f]`` (an MD5 hex digest's slice).

    Returns:
        The int column ``rho`` in ``1 .. HLL_Q + 1``.

    Source: Flajolet et al., "HyperLogLog" (2007), ``rho``; ``compiler.algebra.ops.hll_coupon``.
    """
    rest = F.ltrim(digits, F.lit("0"))
    # the leading zero bits of the first other digit, by translating it: 1 -> 3, 2-3 -> 2, 4-7 -> 1, 8-f -> 0
    lead = F.translate(F.substring(rest, 1, 1), "123456789abcdef", "322111100000000").cast("int")
    zeros = F.lit(HLL_Q // 4) - F.octet_length(rest)  # leading 0 digits (hex digits are one byte each)
    return F.when(rest == F.lit(""), F.lit(HLL_Q + 1)).otherwise(zeros * F.lit(4) + lead + F.lit(1)).cast("int")


def _kind(type_name: str) -> str:
    """The extremum kind of ``event.lua``'s ``MIN:k``/``MAX:k`` ops: ``s`` string, ``i`` int64 text, ``n`` float."""
    return "s" if type_name == "string" else "i" if type_name in ("int", "time") else "n"


def _payload(vals: Sequence[Column], names: Sequence[str]) -> Column:
    """One value, or a struct of the values named after their features."""
    return vals[0] if len(vals) == 1 else F.struct(*[v.alias(n) for v, n in zip(vals, names)])


# -------------------------------------------------------------------- forms
@dataclass(frozen=True)
class TileForm:
    """How one state's writes become partials in ``writer.tilepass``.

    Attributes:
        group: its aggregation: ``"num"`` (fixed-width buffers: Spark's hash
            aggregate), ``"hll"`` (max rho per register, then the register
            text), ``"uniq"`` (last-seen time per value tuple) or ``"obj"``
            (string extrema, ``min_by``/``max_by``: a sort aggregate, so
            kept apart from the others).
        tiled: stored per tile (else one field per key or value tuple).
        components: ``(field suffix, merge op, aggregated column)`` per stored
            component (module docstring).
    """

    group: str
    tiled: bool
    components: tuple[tuple[str, str, str], ...]


class SparkAggregate:
    """The Spark forms of one aggregate function (module docstring). Subclasses override what applies.

    Arguments named ``types`` are the state's value types
    (``StateSpec.value_types``), ``vals`` the value columns in that order,
    ``names`` the value feature names.
    """

    def tile(self, types: Sequence[str]) -> TileForm | None:
        """The tile-pass form, or None when the state is kept otherwise (decayed sums, write logs)."""
        return None

    def write_columns(self, types: Sequence[str], vals: Sequence[Column]) -> dict[str, Column]:
        """The columns one counted write contributes to the tile pass's aggregation (beyond ``rk``, ``t``, ``seq``)."""
        return {}

    def decay_value(self, vals: Sequence[Column]) -> Column:
        """``Decayed*``: the value a write adds to the decayed sum (double).

        Raises:
            TypeError: not a decayed function.
        """
        raise TypeError(f"{type(self).__name__} has no decayed sums")

    def sweep_columns(self, types: Sequence[str], names: Sequence[str], vals: Sequence[Column]) -> dict[str, Column]:
        """The payload of a write for the replay kernel, by kernel column name (``x``, ``p``, ``u``, ``slot``, ``rho``)."""
        return {}

    def result_type(self, types: Sequence[str], payload: dict[str, DataType]) -> DataType:
        """The Spark type of the replay kernel's aggregate ``a`` (before the empty-window rule).

        Args:
            types: the value types.
            payload: the Spark types of :meth:`sweep_columns`' columns.
        """
        return LongType()

    def empty(self, types: Sequence[str]) -> Column | None:
        """The value of a read with no counted write (SPEC §2.4 table); None for null."""
        return None


class _Count(SparkAggregate):
    def tile(self, types):
        return TileForm("num", True, (("", "I", "n"),))

    def empty(self, types):
        return F.lit(0).cast("long")


def _int_sum(types: Sequence[str]) -> bool:
    return bool(types) and types[0] == "int"


class _Sum(SparkAggregate):
    def tile(self, types):
        return TileForm("num", True, (("", "I", "sl") if _int_sum(types) else ("", "F", "sd"),))

    def write_columns(self, types, vals):
        return {"vi": vals[0].cast("long")} if _int_sum(types) else {"vd": vals[0].cast("double")}

    def sweep_columns(self, types, names, vals):
        return {"x": vals[0].cast("long" if _int_sum(types) else "double")}

    def result_type(self, types, payload):
        return LongType() if _int_sum(types) else DoubleType()

    def empty(self, types):
        return F.lit(0).cast("long") if _int_sum(types) else F.lit(0.0)


class _Average(SparkAggregate):
    def tile(self, types):
        return TileForm("num", True, ((".s", "F", "sd"), (".c", "I", "n")))

    def write_columns(self, types, vals):
        return {"vd": vals[0].cast("double")}

    def sweep_columns(self, types, names, vals):
        # int values travel as int64 (the kernel sums them as doubles, as Spark's avg and the store do)
        return {"x": vals[0].cast("long" if _int_sum(types) else "double")}

    def result_type(self, types, payload):
        return DoubleType()


class _Extremum(SparkAggregate):
    prefix = ""  # "mn" / "mx"
    op = ""  # "MIN" / "MAX"

    def tile(self, types):
        kind = _kind(types[0])
        col = {"s": "s", "i": "l", "n": "d"}[kind]
        return TileForm("obj" if kind == "s" else "num", True, (("", f"{self.op}:{kind}", f"{self.prefix}{col}"),))

    def write_columns(self, types, vals):
        kind = _kind(types[0])
        if kind == "s":
            return {"vs": vals[0]}
        return {"vl": vals[0].cast("long")} if kind == "i" else {"vd": vals[0].cast("double")}

    def sweep_columns(self, types, names, vals):
        return {"p": vals[0]}

    def result_type(self, types, payload):
        return payload["p"]


class _Min(_Extremum):
    prefix, op = "mn", "MIN"


class _Max(_Extremum):
    prefix, op = "mx", "MAX"


class _Pick(SparkAggregate):
    """``First*``/``Latest*``: the values (or time) of one write, by (time, arrival)."""

    latest = False
    time_only = False

    def tile(self, types):
        if self.latest:
            return TileForm("obj", False, (("", "LA", "la"),))
        return TileForm("obj", True, (("", "FI", "fi"),))

    def write_columns(self, types, vals):
        # stored text: First's payload is the values' JSON ({} for none), Latest's "" for none
        n = 0 if self.time_only else len(types)
        return {"j": F.lit("") if n == 0 and self.latest else values_json_column(n, list(vals)[:n])}

    def sweep_columns(self, types, names, vals):
        return {} if self.time_only else {"p": _payload(vals, names)}

    def result_type(self, types, payload):
        return LongType() if self.time_only else payload["p"]


class _First(_Pick):
    pass


class _FirstTime(_Pick):
    time_only = True


class _Latest(_Pick):
    latest = True


class _LatestTime(_Pick):
    latest, time_only = True, True


class _HyperLogLog(SparkAggregate):
    def tile(self, types):
        return TileForm("hll", True, (("", "HMS", "hms"),))

    def write_columns(self, types, vals):
        slot, rho = hll_coupon_columns(encode_tuple_column(vals, types))
        return {"slot": slot, "rho": rho}

    def sweep_columns(self, types, names, vals):
        return self.write_columns(types, vals)

    def empty(self, types):
        return F.lit(0).cast("long")


class _CountUnique(SparkAggregate):
    def tile(self, types):
        return TileForm("uniq", False, (("", "SEEN", "seen"),))

    def write_columns(self, types, vals):
        return {"u": encode_tuple_column(vals, types)}

    def sweep_columns(self, types, names, vals):
        return self.write_columns(types, vals)

    def empty(self, types):
        return F.lit(0).cast("long")


class _Sequence(SparkAggregate):
    def sweep_columns(self, types, names, vals):
        return {"p": _payload(vals, names)}

    def result_type(self, types, payload):
        return ArrayType(payload["p"])

    def empty(self, types):
        return F.array()


class _Set(_Sequence):
    def sweep_columns(self, types, names, vals):
        # a tuple item is positional (_1, _2, ..): Set's items are not named after features
        return {"p": vals[0] if len(vals) == 1 else F.struct(*[v.alias(f"_{i + 1}") for i, v in enumerate(vals)])}


class _Decayed(SparkAggregate):
    counts = False  # DecayedCount: every write weighs 1.0
    empty_zero = True  # DecayedAverage: null

    def decay_value(self, vals):
        return F.lit(1.0) if self.counts else vals[0].cast("double")

    def sweep_columns(self, types, names, vals):
        return {} if self.counts else {"x": vals[0].cast("double")}

    def result_type(self, types, payload):
        return DoubleType()

    def empty(self, types):
        return F.lit(0.0) if self.empty_zero else None


class _DecayedCount(_Decayed):
    counts = True


class _DecayedSum(_Decayed):
    pass


class _DecayedAverage(_Decayed):
    empty_zero = False


#: The Spark target, by function name (``compiler.algebra.registry.REGISTRY``'s names).
SPARK: dict[str, SparkAggregate] = {
    "Count": _Count(), "Sum": _Sum(), "Average": _Average(), "Min": _Min(), "Max": _Max(),
    "First": _First(), "FirstTime": _FirstTime(), "Latest": _Latest(), "LatestTime": _LatestTime(),
    "HyperLogLog": _HyperLogLog(), "CountUnique": _CountUnique(), "Sequence": _Sequence(), "Set": _Set(),
    "DecayedCount": _DecayedCount(), "DecayedSum": _DecayedSum(), "DecayedAverage": _DecayedAverage(),
}
