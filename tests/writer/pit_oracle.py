"""The quadratic point-in-time oracle: each read joined to its key's writes (tests only; SPEC §3.2, §3.3).

``writer.pointintime.PointInTime`` sweeps (``writer.sweep`` with the Arrow
kernels of ``compiler.algebra.arrow``); :class:`JoinPointInTime` computes
the same values in the most direct form of the rule, with Spark built-ins and
one branch per function, independently of the algebra registry:

* one left outer join of reads to writes on ``(rk, bucket)``, the bucket
  being ``floor(time / W)`` (each write is duplicated into its bucket and
  the next, so a read meets the writes of its key from the last ``W`` to
  ``2 W``), a write counting iff ``s <= t`` and ``seq_w < seq`` (SPEC
  §3.3: it arrived before the read; or it is the
  reading event itself and the aggregate is inclusive), ``T(s) > T(t - W)``
  and, with ``after a``, ``T(s) > T(a)``; ``Decayed*`` join on ``rk`` alone;
* a ``row_number`` window for ``limit``;
* one aggregation per read (``count``, ``try_sum``, ``avg``, ``min``/``max``,
  ``count(distinct)`` of the encoded value tuple, ``max_by``/``min_by`` over
  ``(time, arrival)``, ``collect_list``/``collect_set`` sorted,
  ``exp``-weighted sums, and HyperLogLog registers with Ertl's estimate as
  higher-order column functions, :func:`hll_estimate_column`).

Work is quadratic in the events per key per window: for test timelines.
"""

from __future__ import annotations

import math

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from compiler.algebra.ops import HLL_M, HLL_Q
from compiler.algebra.spark import encode_tuple_column, hll_coupon_columns
from writer.features import StagedFeatureError
from writer.pointintime import PointInTime, _result, dependency_stages

#: Fixed iteration counts of the HyperLogLog series (Python stops at convergence,
#: which takes < 30 steps for ``HLL_P`` = 12; further steps leave the sums unchanged).
_HLL_SERIES_STEPS = 64


def _floordiv(col: Column, n: int) -> Column:
    """Exact ``floor(col / n)`` on longs (``n > 0``), for negative times too."""
    return F.call_function("div", col - F.pmod(col, F.lit(n).cast("long")), F.lit(n).cast("long"))


def _tile_start_after(col: Column, r_ms: int) -> Column:
    """The first ms of the tile after the one holding ``col``: ``(floor(col / r) + 1) * r``."""
    return col - F.pmod(col, F.lit(r_ms).cast("long")) + F.lit(r_ms).cast("long")


class JoinPointInTime(PointInTime):
    """:class:`writer.pointintime.PointInTime` with every value computed by the join (module docstring)."""

    def _sweep_needs(self, needs: dict[str, list[str]]) -> None:
        for stage in dependency_stages(self.plan, needs):
            for ev, name in stage:
                if (ev, name) in self._cache:
                    continue
                feature = self.plan.events[ev].feature(name)
                spec = feature.aggregate
                state = self.plan.states[spec.definition_hash]
                self._active.append((ev, name))
                try:
                    reads, writes, inclusive = self._inputs(ev, feature)
                finally:
                    self._active.pop()
                agg = self._join_values(state.function, state, spec, reads, writes, inclusive,
                                        state.window_s * 1000, state.resolution_s * 1000, list(spec.value_names))
                result = _result(feature, state, F.col("r_rk").isNull(), F.col("a"), F.col("n"))
                df = agg.select(F.col("r_seq").alias("_seq"), result.alias("value"))
                self._cache[(ev, name)] = df.localCheckpoint(eager=True, storageLevel=self.storage)

    def _join_values(self, fn, state, spec, reads, writes, inclusive: bool, W: int, r: int, names) -> DataFrame:
        """Per-read aggregates by joining each read to its key's writes in the last ``2 W`` (quadratic).

        The straightforward form of the module docstring's rule, kept as an
        oracle for the sweep.

        Returns:
            ``r_seq``, ``r_rk``, ``a``, ``n``.
        """
        # SPEC §3.3: arrived before the read with a time <= its own (seq is the arrival order)
        earlier = (F.col("t") <= F.col("r_t")) & (F.col("seq") < F.col("r_seq"))
        if inclusive:
            earlier = earlier | (F.col("seq") == F.col("r_seq"))
        keyed = reads
        if fn.startswith("Decayed"):
            cond = (F.col("r_rk") == F.col("w_rk")) & earlier
        else:
            # bucket = floor(time / W): a counted write lies in the read's bucket or the one before
            keyed = keyed.withColumn("r_b", _floordiv(F.col("r_t"), W))
            wb = _floordiv(F.col("t"), W)
            writes = writes.withColumn("b", F.explode(F.array(wb, wb + F.lit(1))))
            lo = _tile_start_after(F.col("r_t") - F.lit(W), r)  # T(s) > T(t - W)
            cond = (F.col("r_rk") == F.col("w_rk")) & (F.col("r_b") == F.col("b")) & earlier & (F.col("t") >= lo)
            if spec.after:
                cond = cond & (F.col("r_a").isNull() | (F.col("t") >= _tile_start_after(F.col("r_a"), r)))
        # left outer: a read with no counted write (or a null key) keeps one row, all write columns null
        joined = keyed.join(writes, cond, "left")
        if state.limit is not None:
            latest = Window.partitionBy("r_seq", "r_rk").orderBy(F.col("t").desc(), F.col("seq").desc())
            joined = joined.withColumn("_k", F.row_number().over(latest)).where(F.col("_k") <= F.lit(state.limit))
        return self._aggregate(fn, state.value_types, names, W, joined)

    def _aggregate(self, fn: str, value_types, names, W: int, joined: DataFrame) -> DataFrame:
        """Group ``joined`` (reads with their counted writes) per read: ``r_seq``, ``r_rk``, ``a``, ``n``."""
        vals = [F.col(f"v{i}") for i in range(len(value_types))]
        value, _ = self._function(fn, value_types, names, vals, W, joined)
        if isinstance(value, DataFrame):  # HyperLogLog / DecayedAverage build their own grouping
            return value
        return joined.groupBy("r_seq", "r_rk").agg(value.alias("a"), F.count("seq").alias("n"))

    def _function(self, fn: str, value_types, names, vals: list[Column], W: int,
                  joined: DataFrame) -> tuple[Column | DataFrame, Column | None]:
        """The per-read aggregate of the counted writes and the empty-window value (SPEC §2.4 table).

        Args:
            fn: the function name.
            value_types, names: the state's value types and the value names.
            vals: the value columns ``v0..`` of ``joined``.
            W: the window in ms (the decay constant of ``Decayed*``).
            joined: reads left-joined to their counted writes (``r_seq``,
                ``r_rk``, ``r_t``, ``t``, ``seq``, ``v0..``; one all-null
                write row for a read with none).

        Returns:
            ``(aggregate column, empty-window value or None for null)``; for
            functions needing more than one grouping the first item is a
            DataFrame ``(r_seq, r_rk, a, n)`` (``n`` = counted writes).

        Raises:
            StagedFeatureError: an unknown function.
        """
        single = len(vals) == 1
        # the filler row of a read with no counted write has a null seq
        matched = F.col("seq").isNotNull()
        # (max_by/min_by skip rows whose ordering is null: filler rows never win)
        order = F.when(matched, F.struct(F.col("t"), F.col("seq")))

        def payload() -> Column:
            if single:
                return vals[0]
            return F.struct(*[v.alias(n) for v, n in zip(vals, names)])

        if fn == "Count":
            return F.count(F.col("seq")), F.lit(0).cast("long")
        if fn == "Sum":
            if value_types[0] == "int":
                return F.try_sum(vals[0].cast("long")), F.lit(0).cast("long")
            return F.sum(vals[0].cast("double")), F.lit(0.0)
        if fn == "Average":
            return F.avg(vals[0].cast("double")), None
        if fn == "Min":
            return F.min(vals[0]), None
        if fn == "Max":
            return F.max(vals[0]), None
        if fn == "CountUnique":
            return F.count_distinct(F.when(matched, encode_tuple_column(vals, value_types))), F.lit(0).cast("long")
        if fn in ("Latest", "LatestTime"):
            return F.max_by(F.col("t") if fn == "LatestTime" else F.when(matched, payload()), order), None
        if fn in ("First", "FirstTime"):
            return F.min_by(F.col("t") if fn == "FirstTime" else F.when(matched, payload()), order), None
        if fn == "Sequence":
            item = F.when(matched, F.struct(F.col("t"), F.col("seq"), payload().alias("p")))
            return F.transform(F.array_sort(F.collect_list(item)), lambda x: x.getField("p")), F.array()
        if fn == "Set":
            item = vals[0] if single else F.struct(*[v.alias(f"_{i + 1}") for i, v in enumerate(vals)])
            return F.array_sort(F.collect_set(F.when(matched, item))), F.array()
        if fn in ("DecayedCount", "DecayedSum"):
            weight = F.exp(-(F.col("r_t") - F.col("t")).cast("double") / F.lit(float(W)))
            v = weight if fn == "DecayedCount" else vals[0].cast("double") * weight
            return F.sum(v), F.lit(0.0)
        if fn == "DecayedAverage":
            # weights relative to the latest counted write (as the store keeps them): no 0/0 by underflow
            ref = F.max("t").over(Window.partitionBy("r_seq", "r_rk"))
            j = joined.withColumn("_w", F.exp(-(ref - F.col("t")).cast("double") / F.lit(float(W))))
            g = j.groupBy("r_seq", "r_rk").agg(
                (F.sum(vals[0].cast("double") * F.col("_w")) / F.sum("_w")).alias("a"), F.count("seq").alias("n"))
            return g, None
        if fn == "HyperLogLog":
            slot, rho = hll_coupon_columns(encode_tuple_column(vals, value_types))
            regs = joined.select("r_seq", "r_rk", F.when(matched, slot).alias("slot"),
                                 F.when(matched, rho).alias("rho"))
            regs = regs.groupBy("r_seq", "r_rk", "slot").agg(F.max("rho").alias("rho"), F.count("rho").alias("c"))
            g = regs.groupBy("r_seq", "r_rk").agg(F.collect_list("rho").alias("rhos"), F.sum("c").alias("n"))
            return g.select("r_seq", "r_rk", hll_estimate_column(F.col("rhos")).alias("a"), "n"), F.lit(0).cast("long")
        raise StagedFeatureError(f"aggregate function {fn} has no point-in-time implementation")


def hll_estimate_column(rhos: Column) -> Column:
    """Spark twin of ``compiler.algebra.ops.hll_estimate`` over the non-zero registers.

    Args:
        rhos: ``array<int>`` of the register values (1..``HLL_Q + 1``) of the
            non-empty slots (each slot once).

    Returns:
        ``bigint``: the rounded estimate, 0 for no registers (null beyond
        64 bits, where Python's int keeps growing: near-saturated
        registers, over ~2^63 distinct values). The series
        ``sigma``/``tau`` run a fixed :data:`_HLL_SERIES_STEPS` steps (Python
        stops once a step leaves the sum unchanged; the terms only shrink
        after that, so the extra steps leave it unchanged too), with the same
        double operations in the same order -- except that Python squares
        with ``** 2`` (C ``pow``) and this with a product, which can differ
        in the last bit; the rounding to an int absorbs that unless the
        estimate sits on a .5 boundary -- and rounding is half-even like
        Python's ``round``.

    Source: O. Ertl (2017), Algorithm 6, as in ``ops.hll_estimate``.
    """
    m = float(HLL_M)
    steps = F.sequence(F.lit(1), F.lit(_HLL_SERIES_STEPS))

    def count_of(k: int) -> Column:
        # a one-parameter lambda: F.filter passes the index to a second parameter
        return F.size(F.filter(rhos, lambda x: x == F.lit(k))).cast("double")

    counts = [count_of(k) for k in range(HLL_Q + 2)]
    c0 = F.lit(m) - F.size(rhos).cast("double")
    # tau(x), x = 1 - c[Q + 1] / m
    tx = F.lit(1.0) - counts[HLL_Q + 1] / F.lit(m)
    tau_acc = F.aggregate(
        steps,
        F.struct(tx.alias("x"), F.lit(1.0).alias("y"), (F.lit(1.0) - tx).alias("z")),
        lambda acc, _i: F.struct(
            F.sqrt(acc["x"]).alias("x"),
            (acc["y"] * F.lit(0.5)).alias("y"),
            (acc["z"] - _square(F.lit(1.0) - F.sqrt(acc["x"])) * (acc["y"] * F.lit(0.5))).alias("z"),
        ),
    )
    tau = F.when((tx == F.lit(0.0)) | (tx == F.lit(1.0)), F.lit(0.0)).otherwise(tau_acc["z"] / F.lit(3.0))
    z = F.lit(m) * tau
    for k in range(HLL_Q, 0, -1):
        z = F.lit(0.5) * (z + counts[k])
    # sigma(x), x = c0 / m (< 1 whenever there is a register)
    sx = c0 / F.lit(m)
    sigma_acc = F.aggregate(
        steps,
        F.struct(sx.alias("x"), F.lit(1.0).alias("y"), sx.alias("z")),
        lambda acc, _i: F.struct(
            (acc["x"] * acc["x"]).alias("x"),
            (acc["y"] + acc["y"]).alias("y"),
            (acc["z"] + (acc["x"] * acc["x"]) * acc["y"]).alias("z"),
        ),
    )
    z = z + F.lit(m) * sigma_acc["z"]
    est = F.lit(m * m / (2.0 * math.log(2.0))) / z
    return F.when(F.size(rhos) == F.lit(0), F.lit(0).cast("long")).otherwise(F.bround(est, 0).try_cast("long"))


def _square(x: Column) -> Column:
    """``x * x`` (Python's ``x ** 2``, see :func:`hll_estimate_column`)."""
    return x * x


