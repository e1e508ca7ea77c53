"""Per-event feature evaluation: scalars in Python, aggregates from Redis tiles.

For each event type an :class:`EventProgram` is built once from the plan. It
schedules the event's aggregate reads and state writes into *rounds*; each
round is one call of a Lua script generated for that round from the plan
(:mod:`compiler.algebra.lua`: constants in the script, only the event's keys,
time and values in its arguments; one network round trip). In the common
case -- no aggregate whose key, value or filter depends on another aggregate
of the same event -- there is exactly one round (SPEC §5.2).

Inside a round the script runs, in order: the idempotency check, the reads of
``exclusive`` aggregates, the event's own writes, then the inclusive reads.
So an inclusive read sees the event's own contribution and an exclusive one
does not (SPEC §3.3), and each (aggregate, key) update is atomic.

Before a round that writes a state at an event time earlier than any this
process has written into that state, :class:`OnlineStarts` lowers the state's
online-writer start time in the store (``serving.store.ONLINE_KEY``; backfill
refuses to overwrite time the online path wrote, SPEC §5.6): one extra command
for a state's first write in a process and for each new earliest time, none in
the common case.

Source: SPEC §2.4 (write rules), §3.2 (window rule), §3.3, §4, §5.2.
"""

from __future__ import annotations

import asyncio
import time as _time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, NamedTuple, Sequence

import orjson

from compiler.algebra.lua import LuaGenerator, ReadSlot, RoundSpec, WriteSlot
from compiler.algebra.ops import AggregateOp, DecayedOp, make_op
from compiler.algebra.storekeys import id_key
from compiler.algebra.windows import ALLOWED_LATENESS_S, counted_range
from compiler.codegen.python import EvalError, compile_expr
from compiler.plan import AggregateSpec, EventPlan, Feature, Plan, StateSpec, WriteSpec
from compiler.typesystem import (MAX_TIME_MS, MIN_TIME_MS, format_time, json_encoder, parse_time, read_input,
                                 to_json_value)
from serving.metrics import LATE_EVENTS, OUT_OF_ORDER_EVENTS
from serving.roundargs import RoundBuilder, round_builder
from serving.store import PipelineBroken, StoreUnavailable


class BadEvent(ValueError):
    """The request body is not a valid event (SPEC §4: 4xx, nothing written).

    Attributes:
        code: short machine-readable reason (``missing-type``, ``unknown-type``, ...).
        message: human-readable explanation.
    """

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


#: Signature of the store call (``serving.store.Store.run``): ``(script source,
#: keys, argv, layout) -> results``; the script is a round's generated Lua
#: (``compiler.algebra.lua`` documents KEYS/ARGV), the layout its slots'
#: argument counts and kinds (``_Round.layout``).
RunScript = Callable[[str, Sequence[str], Sequence[Any], Sequence[tuple[int, bool]]], Awaitable[list]]

#: The Lua target of the algebra (stateless).
LUA = LuaGenerator()

#: Bits of a round's reply flag (``compiler.algebra.lua``): bit 0 the ``_id``
#: flag; LATE: a state held a write later than the event; BEYOND: more than
#: the allowed lateness later (SPEC §3.3).
LATE, BEYOND = 2, 4

#: Signature of the online-start record: ``{definition hash: event time ms}`` -> None
#: (``serving.store.Store.record_online``: keeps the minimum per state).
RecordOnline = Callable[[dict[str, int]], Awaitable[None]]


class BatchInterrupted(StoreUnavailable):
    """The store failed during :meth:`Evaluator.process_batch` (the API's 503, SPEC §4).

    Each event's call is atomic; what the batch left is said by index:
    events before ``done_before`` were processed, those from ``done_before``
    to ``unsure_to`` may have been (their calls were sent, their replies
    lost; none when ``unsure_to < done_before``), later ones were not.

    Attributes:
        message: the store's error.
        failed: index of the event whose call (or online-start record) failed.
        done_before: events before this index were processed.
        unsure_to: last index that may have been processed.
    """

    def __init__(self, message: str, failed: int, done_before: int, unsure_to: int):
        super().__init__(message)
        self.message, self.failed, self.done_before, self.unsure_to = message, failed, done_before, unsure_to

    def describe(self) -> str:
        """The 503 message: ``event <i>: <error> (...)`` saying which events were processed."""
        if self.unsure_to < self.done_before:
            what = (f"events before index {self.done_before} were processed; "
                    f"{'it and ' if self.failed == self.done_before else ''}later ones were not")
        else:
            span = (f"event {self.done_before} may have been" if self.unsure_to == self.done_before
                    else f"events {self.done_before} to {self.unsure_to} may have been")
            what = f"events before index {self.done_before} were processed, {span}; later ones were not"
        return f"event {self.failed}: {self.message} ({what})"


class OnlineStarts:
    """This process's earliest written event time per state, mirrored in the store (module docstring).

    Args:
        record: the store call that lowers the stored times (``Store.record_online``).
    """

    def __init__(self, record: RecordOnline):
        self.record = record
        #: definition hash -> earliest event time (epoch ms) recorded by this process
        self.earliest: dict[str, int] = {}

    async def note(self, hashes: Sequence[str], t_ms: int) -> None:
        """Record ``t_ms`` for the states in ``hashes`` that this process has not yet written that early.

        Called before the writes are sent, so the store never holds an online
        write earlier than its recorded start (a failed write leaves an
        earlier-than-needed time: backfill is then only more cautious).

        Args:
            hashes: definition hashes the event is about to write.
            t_ms: the event time (epoch ms).

        Raises:
            Whatever ``record`` raises (``serving.store.StoreUnavailable``).
        """
        earliest = self.earliest
        due = {h: t_ms for h in hashes if t_ms < earliest.get(h, MAX_TIME_MS + 1)}
        if due:
            await self.record(due)
            for h, ms in due.items():
                if ms < earliest.get(h, MAX_TIME_MS + 1):
                    earliest[h] = ms


@dataclass
class _Read:
    feature: str
    spec: AggregateSpec
    state: StateSpec
    op: AggregateOp
    before_write: bool
    round: int = 1

    def __post_init__(self) -> None:
        self.slot = ReadSlot(self.op, self.state.window_s, self.state.resolution_s, self.state.limit,
                             self.spec.after is not None)
        #: (script result, read time ms, after ms) -> feature value
        self.finish = LUA.finisher(self.slot)
        #: script result -> writes counted, or None (the read-only mode's explanation)
        self.count_writes = LUA.write_counter(self.slot)


@dataclass
class _Write:
    state: StateSpec
    write: WriteSpec
    op: AggregateOp
    where: Callable[[Any, int], Any] | None
    round: int = 1

    def __post_init__(self) -> None:
        self.slot = WriteSlot(self.op, self.state.window_s, self.state.resolution_s, self.state.limit)
        #: non-null values -> the write's ARGV elements
        self.encode_values = LUA.value_encoder(self.slot)


@dataclass
class _Round:
    reads_before: list[_Read] = field(default_factory=list)
    writes: list[_Write] = field(default_factory=list)
    reads_after: list[_Read] = field(default_factory=list)
    #: the generated Lua source of the round (compiler.algebra.lua)
    script: str = ""
    #: per KEYS slot after the two fixed keys: (ARGV elements it takes when its key is live, whether it
    #: is a read), for a Redis Cluster call split by hash slot (serving.store.Store.run)
    layout: tuple[tuple[int, bool], ...] = ()
    #: lays out the round's KEYS and ARGV for one event (serving.roundargs.round_builder)
    build: RoundBuilder | None = None

    def compile(self, name: str, lateness_ms: int, dry: bool = False, stream_maxlen: int | None = None) -> "_Round":
        """Set :attr:`layout` and :attr:`script` from the round's slots (``compiler.algebra.lua``); return self."""
        self.layout = (tuple((int(r.slot.has_after), True) for r in self.reads_before)
                       + tuple((LUA.write_arity(w.slot), False) for w in self.writes)
                       + tuple((int(r.slot.has_after), True) for r in self.reads_after))
        self.script = LUA.script(RoundSpec(
            name=name,
            reads_before=tuple(r.slot for r in self.reads_before),
            writes=tuple(w.slot for w in self.writes),
            reads_after=tuple(r.slot for r in self.reads_after),
            lateness_ms=lateness_ms,
            dry=dry,
            stream_maxlen=stream_maxlen,
        ))
        self.build, _ = round_builder(self.reads_before, self.writes, self.reads_after,
                                      lambda w: LUA.write_arity(w.slot))
        return self


@dataclass
class _Call:
    """One round's script call of one event: its KEYS and ARGV, and the reads waiting on its reply."""

    rd: _Round
    keys: list
    argv: list
    #: (read, after ms) per live read, in reply order
    pending: list
    #: the call carries the event's ``_id`` (its flag says whether the writes were skipped)
    use_id: bool


@dataclass
class _Begun:
    """An event evaluated up to its one script call (:meth:`EventProgram.begin`)."""

    payload: dict
    t_ms: int
    env: dict
    errors: dict
    #: the call to send, ``None`` when the event needs none
    call: _Call | None


class _Pending(NamedTuple):
    """An event of a pipelined chunk (``Evaluator.process_batch``): its batch index, program, response id, first half."""

    index: int
    prog: "EventProgram"
    response_id: str
    begun: _Begun


class EventProgram:
    """The compiled evaluation of one event type.

    Args:
        plan: the compiled plan.
        event: event type name (a key of ``plan.events``).
        lateness_ms: the allowed lateness ``L`` (ms, SPEC §3.3): the generated
            scripts keep what reads up to ``L`` late need.
        stream_maxlen: the event stream's cap (``SCOWL_EVENT_STREAM_MAXLEN``,
            entries, approximate): the scripts' ``XADD`` trims to it; ``None``: none.

    Raises:
        NotImplementedError: the event uses an aggregate function the tile
            store does not implement (``compiler.algebra.registry.REGISTRY``).
        ValueError: the aggregates' dependencies cannot be scheduled (a cycle
            the compiler should have rejected).
    """

    def __init__(self, plan: Plan, event: str, lateness_ms: int = ALLOWED_LATENESS_S * 1000,
                 stream_maxlen: int | None = None):
        self.plan = plan
        self.lateness_ms = lateness_ms
        self.stream_maxlen = stream_maxlen
        self.event: EventPlan = plan.events[event]
        self.name = event
        self.features: tuple[Feature, ...] = self.event.features
        #: the features a response returns: the named ones (inline aggregates are computed, not returned)
        self.outputs: tuple[Feature, ...] = self.event.outputs
        #: ``(name, encoder or None)`` per output: its values' JSON form (``compiler.typesystem.json_encoder``)
        self.output_encoders: tuple[tuple[str, Callable[[Any], Any] | None], ...] = tuple(
            (f.name, json_encoder(f.type)) for f in self.outputs)
        #: inline aggregate name -> the feature that contains it (SPEC §2.4)
        self.inline_parent: dict[str, str] = {f.name: f.inline_of for f in self.features if f.inline_of}
        self.scalars: dict[str, Callable[[Any, int], Any]] = {
            f.name: compile_expr(f.expr) for f in self.features if f.kind == "scalar" and f.expr is not None
        }
        self.reads: dict[str, _Read] = {}
        for f in self.features:
            if f.kind != "aggregate":
                continue
            spec = f.aggregate
            assert spec is not None
            state = plan.states[spec.definition_hash]
            writes_it = event in state.writes
            self.reads[f.name] = _Read(
                feature=f.name,
                spec=spec,
                state=state,
                op=make_op(state.function, state.value_types, spec.value_names, state.window_s),
                before_write=spec.exclusive and writes_it,
            )
        self.writes: dict[str, _Write] = {}
        for h in self.event.writes:
            state = plan.states[h]
            w = state.writes[event]
            self.writes[h] = _Write(
                state=state,
                write=w,
                op=make_op(state.function, state.value_types, window_s=state.window_s),
                where=None if w.where is None else compile_expr(w.where),
            )
        self._schedule()

    # ------------------------------------------------------------ scheduling
    def _schedule(self) -> None:
        """Assign each feature a stage and each read/write a round (module docstring)."""
        feats = {f.name: f for f in self.features}
        stage: dict[str, int] = {}

        def st(name: str) -> int:
            return stage.get(name, 0)

        for _ in range(4 * len(self.features) + 8):
            changed = False
            for f in self.features:
                if f.kind == "aggregate":
                    r = self.reads[f.name]
                    deps = list(r.spec.read_keys) + ([r.spec.after] if r.spec.after else [])
                    rnd = max([st(d) for d in deps], default=0) + 1
                    h = r.spec.definition_hash
                    if h in self.writes and not r.before_write:
                        rnd = max(rnd, self.writes[h].round)
                    new = rnd
                    if r.round != rnd:
                        r.round = rnd
                        changed = True
                elif f.kind == "scalar":
                    new = max([st(d) for d in f.deps if d in feats], default=0)
                else:
                    new = 0
                if stage.get(f.name) != new:
                    stage[f.name] = new
                    changed = True
            for h, w in self.writes.items():
                rnd = max([st(d) for d in w.write.deps()], default=0) + 1
                for r in self.reads.values():
                    if r.spec.definition_hash == h and r.before_write:
                        rnd = max(rnd, r.round)
                if w.round != rnd:
                    w.round = rnd
                    changed = True
            if not changed:
                break
        else:
            raise ValueError(f"cannot schedule the aggregates of event {self.name}: dependency cycle")
        self.stage = stage
        n = max([r.round for r in self.reads.values()] + [w.round for w in self.writes.values()], default=0)
        self.rounds = [_Round() for _ in range(n)]
        for r in self.reads.values():
            rd = self.rounds[r.round - 1]
            (rd.reads_before if r.before_write else rd.reads_after).append(r)
        for w in self.writes.values():
            self.rounds[w.round - 1].writes.append(w)
        for k, rd in enumerate(self.rounds, start=1):
            rd.compile(f"event {self.name}, round {k}", self.lateness_ms, stream_maxlen=self.stream_maxlen)
        self.first_write_round = min([w.round for w in self.writes.values()], default=0)
        self._dry_rounds: list[_Round] | None = None
        self.by_stage: list[list[Feature]] = [[] for _ in range(n + 1)]
        for f in self.features:
            if f.kind != "aggregate":
                self.by_stage[stage[f.name]].append(f)

    def dry_rounds(self) -> list[_Round]:
        """Return the rounds of a dry run (the API's read-only mode), built on first use.

        Round ``k`` of a dry run holds its reads and the writes of rounds
        ``1..k`` (an inclusive read in round ``k`` may read a state the event
        wrote in an earlier round), in a script that puts every key it wrote
        back as it was (:class:`compiler.algebra.lua.RoundSpec` ``dry``). So
        each read sees exactly what it sees in a real call, and nothing is
        left written.
        """
        if self._dry_rounds is None:
            self._dry_rounds = [
                _Round(reads_before=rd.reads_before, reads_after=rd.reads_after,
                       writes=sorted((w for w in self.writes.values() if w.round <= k), key=lambda w: w.round)
                       ).compile(f"event {self.name}, round {k} (dry run)", self.lateness_ms, dry=True)
                for k, rd in enumerate(self.rounds, start=1)
            ]
        return self._dry_rounds

    def explain(self, env: dict[str, Any], counted: dict[str, Any], t_ms: int) -> dict[str, dict[str, Any]]:
        """Return, per aggregate feature of the response, what its read counted.

        Args:
            env: the evaluated features (``evaluate``'s values).
            counted: feature name -> writes counted (``None``: the state
                cannot tell, see ``LuaGenerator.write_counter``); a feature
                absent from it was not read (null key).
            t_ms: the event time (epoch ms).

        Returns:
            ``{feature: {"function", "state", "key", "window", "writes"}}``:
            ``key`` the entity key's values (``None``: a null key, nothing
            read), ``window`` ``{"from", "to", "resolution_s"}``: the counted
            range of SPEC §3.2 (from the start of its first resolution tile
            to the event time, ``after`` applied; ISO times; ``None`` with a
            null key) -- for ``Decayed*``, which weigh all history,
            ``"from": None`` and ``"decay_s": W`` --, ``writes`` the number
            of writes counted or ``None``.
        """
        out: dict[str, dict[str, Any]] = {}
        for f in self.outputs:
            r = self.reads.get(f.name)
            if r is None:
                continue
            spec = r.spec
            entry: dict[str, Any] = {"function": spec.function, "state": spec.definition_hash,
                                     "key": None, "window": None, "writes": None}
            if f.name in counted:
                entry["key"] = [to_json_value(env.get(n), t) for n, t in zip(spec.read_keys, r.state.key_types)]
                if isinstance(r.op, DecayedOp):  # all history, weighed by exp(-(t - s) / W) (SPEC §2.3)
                    entry["window"] = {"from": None, "to": format_time(t_ms), "resolution_s": r.state.resolution_s,
                                       "decay_s": r.state.window_s}
                else:
                    after = env.get(spec.after) if spec.after is not None else None
                    lo, _ = counted_range(t_ms, r.state.window_s, after)
                    res_ms = r.state.resolution_s * 1000
                    entry["window"] = {"from": format_time(max(lo * res_ms, MIN_TIME_MS)), "to": format_time(t_ms),
                                       "resolution_s": r.state.resolution_s}
                entry["writes"] = counted[f.name]
            out[f.name] = entry
        return out

    # ------------------------------------------------------------ evaluation
    def _eval_scalars(self, feats: list[Feature], env: dict, errors: dict, t_ms: int, payload: dict) -> None:
        for f in feats:
            if f.kind == "input":
                value, err = read_input(payload, f.input, f.type)
                env[f.name] = value
                if err is not None:
                    errors[f.name] = err
            else:
                try:
                    env[f.name] = self.scalars[f.name](env, t_ms)
                except EvalError as e:
                    env[f.name] = None
                    errors[f.name] = str(e)

    async def evaluate(
        self,
        payload: dict,
        event_time_ms: int,
        run: RunScript,
        event_id: str | None = None,
        id_ttl_ms: int = 86_400_000,
        online: OnlineStarts | None = None,
        append: tuple[str, str] | None = None,
        cluster: bool = False,
        dry_run: bool = False,
        counted: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], dict[str, str], int]:
        """Evaluate every feature of one event and record its writes.

        Args:
            payload: the event object (``_type`` etc. included).
            event_time_ms: the event time ``t`` (epoch ms).
            run: the store's script call (``serving.store.Store.run``).
            event_id: idempotency key; a repeated id is answered, not written.
            id_ttl_ms: how long an id is remembered.
            online: where the states' online-writer start times are kept
                (module docstring); ``None``: not recorded.
            append: ``(stream key, event JSON)``: append the event to that
                Redis stream (``XA`` op, in the same script call as its first
                writes, so only if they happen: not for a repeated ``_id``);
                ``None``, or an event type that writes nothing: not appended.
            cluster: the store is a Redis Cluster: every round that writes
                carries the ``_id`` (each of its per-slot calls keeps its own
                marker, ``serving.store.Store.run``), not only the first.
            dry_run: the read-only mode: the same values, nothing stored
                (:meth:`dry_rounds`); ``event_id``, ``online`` and ``append``
                are then ignored.
            counted: a dict to fill with feature name -> writes counted by
                each aggregate read (:meth:`explain`); ``None``: not kept.

        Returns:
            ``(values, errors, late)``: run-time values by feature name (plan
            order), error messages by feature name, and the event's lateness
            (SPEC §3.3): ``0`` in time order, :data:`LATE` when a state it
            read or wrote held a later write, ``LATE | BEYOND`` when one more
            than the allowed lateness later (its values are then what the
            store still holds).

        Raises:
            Whatever ``run`` or ``online.record`` raises (``serving.store.StoreUnavailable``).
        """
        env: dict[str, Any] = {}
        errors: dict[str, str] = {}
        self._eval_scalars(self.by_stage[0], env, errors, event_time_ms, payload)
        skip_writes = False
        late = 0
        rounds = self.rounds
        if dry_run:
            rounds, event_id, online, append = self.dry_rounds(), None, None, None
        for k, rd in enumerate(rounds, start=1):
            call = await self._prepare(k, rd, env, event_time_ms, event_id, id_ttl_ms, online, append, cluster,
                                       dry_run, skip_writes)
            if call is not None:
                results = await run(rd.script, call.keys, call.argv, rd.layout)
                flag = self._finish(call, results, env, errors, event_time_ms, counted)
                late |= flag & (LATE | BEYOND)
                if call.use_id and not flag & 1 and not cluster:  # (a cluster's calls decide per slot)
                    skip_writes = True
            self._eval_scalars(self.by_stage[k], env, errors, event_time_ms, payload)
        values = {f.name: env.get(f.name) for f in self.features}
        return values, errors, late

    @property
    def single_round(self) -> bool:
        """Whether an event of this type makes at most one script call (no dependency stages, SPEC §5.2).

        Such events can be sent pipelined (:meth:`begin`, :meth:`end`):
        nothing an event sends depends on a reply to an earlier call.
        """
        return len(self.rounds) <= 1

    async def begin(
        self,
        payload: dict,
        event_time_ms: int,
        event_id: str | None = None,
        id_ttl_ms: int = 86_400_000,
        online: OnlineStarts | None = None,
        append: tuple[str, str] | None = None,
        dry_run: bool = False,
        cluster: bool = False,
    ) -> "_Begun":
        """The first half of :meth:`evaluate` for a :attr:`single_round` type: everything before its call.

        Evaluates the stage-0 features, records the online-writer starts
        (``online``, before the call is sent) and returns the round's call
        (``None`` when the event makes none) for the caller to send, in
        order with others (``Evaluator.process_batch``; on a cluster the
        store splits each call by slot, ``serving.store.Store.run_many``).

        Args:
            payload, event_time_ms, event_id, id_ttl_ms, online, append,
                dry_run, cluster: as :meth:`evaluate`.

        Returns:
            A :class:`_Begun` to pass to :meth:`end` with the call's reply.

        Raises:
            ValueError: the type is not :attr:`single_round`.
            Whatever ``online.note`` raises (``serving.store.StoreUnavailable``).
        """
        if not self.single_round:
            raise ValueError(f"event {self.name} makes more than one script call: use evaluate()")
        env: dict[str, Any] = {}
        errors: dict[str, str] = {}
        self._eval_scalars(self.by_stage[0], env, errors, event_time_ms, payload)
        call = None
        if self.rounds:
            rd = self.dry_rounds()[0] if dry_run else self.rounds[0]
            if dry_run:
                event_id, online, append = None, None, None
            call = await self._prepare(1, rd, env, event_time_ms, event_id, id_ttl_ms, online, append, cluster,
                                       dry_run, False)
        return _Begun(payload, event_time_ms, env, errors, call)

    def end(self, begun: "_Begun", results: list | None,
            counted: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, str], int]:
        """The second half of :meth:`evaluate`: finish a :meth:`begin` with its call's reply.

        Args:
            begun: what :meth:`begin` returned.
            results: the reply of ``begun.call`` (``None`` when it is ``None``).
            counted: as :meth:`evaluate`.

        Returns:
            ``(values, errors, late)`` as :meth:`evaluate`.
        """
        env, errors, t_ms, late = begun.env, begun.errors, begun.t_ms, 0
        if begun.call is not None:
            late = self._finish(begun.call, results, env, errors, t_ms, counted) & (LATE | BEYOND)
        if self.rounds:
            self._eval_scalars(self.by_stage[1], env, errors, t_ms, begun.payload)
        values = {f.name: env.get(f.name) for f in self.features}
        return values, errors, late

    async def _prepare(self, k: int, rd: _Round, env: dict, t_ms: int, event_id: str | None, id_ttl_ms: int,
                       online: OnlineStarts | None, append: tuple[str, str] | None, cluster: bool, dry_run: bool,
                       skip_writes: bool) -> "_Call | None":
        """Build round ``k``'s script call (keys, ARGV) and record its online-writer starts.

        Returns:
            The call, or ``None`` when the round needs none (no live read,
            nothing written, no ``_id`` or stream entry to record).
        """
        first = k == self.first_write_round and not skip_writes
        use_id = event_id is not None and (first or (cluster and bool(rd.writes)))
        use_stream = first and append is not None
        keys: list[str] = [id_key(event_id) if use_id else "", append[0] if use_stream else ""]  # type: ignore[index, arg-type]
        argv: list[Any] = [t_ms, id_ttl_ms if use_id else "", append[1] if use_stream else ""]  # type: ignore[index]
        pending: list[tuple[_Read, int | None]] = []
        written: list[str] = []
        rd.build(env, t_ms, keys, argv, pending, written, skip_writes)  # type: ignore[misc]
        if written and online is not None:
            await online.note(written, t_ms)
        if pending or ((written or use_id or use_stream) and not dry_run):
            return _Call(rd, keys, argv, pending, use_id)
        return None

    @staticmethod
    def _finish(call: "_Call", results: list, env: dict, errors: dict, t_ms: int,
                counted: dict[str, Any] | None) -> int:
        """Set the values of a call's reads from its reply; return the reply's flag (module ``LATE``, ``BEYOND``)."""
        flag = int(results[0])
        for (r, after_ms), res in zip(call.pending, results[1:]):
            try:
                env[r.feature] = r.finish(res, t_ms, after_ms)
            except EvalError as e:  # an int Sum beyond int64: null with its error (SPEC §3.5)
                env[r.feature] = None
                errors[r.feature] = str(e)
            if counted is not None:
                counted[r.feature] = None if r.count_writes is None else r.count_writes(res)
        return flag


class Evaluator:
    """Turns request bodies into responses (SPEC §4) for every event type of a plan.

    Args:
        plan: the compiled plan.
        run: the store's script call; may be set later (``None`` until then).
        id_ttl_ms: how long ``_id`` idempotency keys are remembered (ms).
        record_online: the store call keeping the states' online-writer start
            times (``serving.store.Store.record_online``); ``None``: not kept.
            May be set later through :attr:`online`.
        event_stream: a Redis stream key (``SCOWL_EVENT_STREAM``): every
            accepted event that writes state is appended to it (field
            ``event``: the body with the resolved ``_time`` in epoch ms and
            its ``_id``) for ``scowl stream --source redis:KEY`` (SPEC §5.7);
            ``None``: nothing appended.
        event_stream_maxlen: ``SCOWL_EVENT_STREAM_MAXLEN``: each append
            trims the stream to about this many entries (``XADD ... MAXLEN
            ~``); ``None``: the stream keeps every entry until its reader
            trims it (``scowl stream --trim-source``).
        lateness_ms: the allowed lateness (ms, SPEC §3.3,
            ``SCOWL_ALLOWED_LATENESS``); late events are counted in
            ``scowl_out_of_order_events_total`` and, beyond it, in
            ``scowl_late_events_total`` (``serving.metrics``).
        pipeline: events per pipelined chunk of :meth:`process_batch`
            (0: one at a time); pipelined only once :attr:`run_many` is set.

    Raises:
        NotImplementedError: see :class:`EventProgram`.
    """

    def __init__(self, plan: Plan, run: RunScript | None, id_ttl_ms: int = 86_400_000,
                 record_online: RecordOnline | None = None, event_stream: str | None = None,
                 lateness_ms: int = ALLOWED_LATENESS_S * 1000, pipeline: int = 64,
                 event_stream_maxlen: int | None = None):
        self.plan = plan
        self.event_stream = event_stream
        self.run = run
        self.id_ttl_ms = id_ttl_ms
        self.online: OnlineStarts | None = OnlineStarts(record_online) if record_online is not None else None
        #: the store is a Redis Cluster (set by the app once the store says so; SPEC §5.1)
        self.cluster = False
        self.programs = {e: EventProgram(plan, e, lateness_ms, event_stream_maxlen) for e in plan.events}
        #: the store's pipelined call (``serving.store.Store.run_many``; ``None``: :meth:`process_batch`
        #: sends one event at a time)
        self.run_many: Callable[[Sequence[tuple[str, Sequence[str], Sequence[Any], Sequence[tuple[int, bool]]]]],
                                Awaitable[list]] | None = None
        #: events per pipelined chunk of :meth:`process_batch` (``SCOWL_BATCH_PIPELINE``; 0: none)
        self.pipeline = pipeline

    def scripts(self) -> list[str]:
        """Return the Lua source of every round script this evaluator may run: each event type's
        rounds and their dry-run rounds (``serving.store.Store.retire_functions`` keeps these)."""
        out: list[str] = []
        for program in self.programs.values():
            out += [rd.script for rd in program.rounds] + [rd.script for rd in program.dry_rounds()]
        return out

    def parse(self, body: Any) -> tuple[EventProgram, int, str | None]:
        """Validate an event object; return its program, event time (ms) and ``_id``.

        Raises:
            BadEvent: not an object, missing/unknown ``_type``, bad ``_time`` or ``_id``.
        """
        if not isinstance(body, dict):
            raise BadEvent("not-an-object", "an event must be a JSON object")
        etype = body.get("_type")
        if etype is None:
            raise BadEvent("missing-type", "the event has no _type")
        if not isinstance(etype, str) or etype not in self.programs:
            known = ", ".join(sorted(self.programs))
            raise BadEvent("unknown-type", f"unknown event type {etype!r}; known types: {known}")
        raw_time = body.get("_time")
        if raw_time is None:
            t_ms = int(_time.time() * 1000)
        else:
            if isinstance(raw_time, bool):
                raise BadEvent("bad-time", f"_time must be ISO-8601 or epoch ms, got {raw_time!r}")
            try:
                t_ms = parse_time(raw_time)
            except (ValueError, TypeError, OverflowError):
                raise BadEvent("bad-time", f"_time must be ISO-8601 or epoch ms, got {raw_time!r}") from None
            if not MIN_TIME_MS <= t_ms <= MAX_TIME_MS:
                raise BadEvent("bad-time", f"_time {raw_time!r} is outside years 0000-9999")
        event_id = body.get("_id")
        if event_id is not None:
            if isinstance(event_id, bool) or not isinstance(event_id, (str, int)):
                raise BadEvent("bad-id", "_id must be a string or an integer")
            event_id = str(event_id)
        return self.programs[etype], t_ms, event_id

    async def process(self, body: Any, parsed: tuple[EventProgram, int, str | None] | None = None,
                      dry_run: bool = False, explain: bool = False) -> dict[str, Any]:
        """Evaluate one event and return the response object of SPEC §4.

        Args:
            body: the event object.
            parsed: ``self.parse(body)`` if already done.
            dry_run: the read-only mode (``POST /event?dry_run``): the values
                a real call would answer now, with nothing stored -- no
                state, no ``_id`` marker, no event-stream entry, no
                online-start record, no late-event count
                (:meth:`EventProgram.dry_rounds`).
            explain: add ``"explain"``: per aggregate feature, its entity key,
                the window it counted and the writes counted
                (:meth:`EventProgram.explain`).

        Returns:
            ``{"event_id", "event_time", "features": {...}, "errors": {...}}``
            (``errors`` only when non-empty) with JSON-ready values (§3.5),
            and ``"explain"`` when asked for.

        Raises:
            BadEvent: invalid event (nothing written).
            serving.store.StoreUnavailable: the store failed.
        """
        prog, t_ms, event_id = parsed or self.parse(body)
        response_id, append = self._ids(prog, body, t_ms, event_id, dry_run)
        counted: dict[str, Any] | None = {} if explain else None
        values, errors, late = await prog.evaluate(body, t_ms, self.run, event_id, self.id_ttl_ms, self.online,
                                                   append, self.cluster, dry_run, counted)
        return self._response(prog, t_ms, response_id, values, errors, late, dry_run, counted)

    async def process_batch(self, items: Sequence[tuple[Any, tuple[EventProgram, int, str | None]]],
                            dry_run: bool = False, explain: bool = False) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """Evaluate events in order, as :meth:`process` one after the other would; yield ``(index, response)``.

        Runs of consecutive events whose type makes one script call
        (:attr:`EventProgram.single_round`) are sent pipelined, in chunks of
        :attr:`pipeline` events on one connection (``run_many``,
        ``serving.store.Store.run_many``): the store runs each call in
        order, so every event sees exactly the writes of the events before
        it, as when posted one by one; the next chunk's calls are built
        while the store runs this chunk's, and sent once its replies are
        in. On a Redis Cluster the store splits each call by slot and sends
        each node its calls of the chunk at once, a slot's calls in order
        (``serving.store.Store._run_many_split``). Any other event (dependency
        stages) or ``pipeline`` 0 goes through :meth:`process`.

        Args:
            items: ``(body, self.parse(body))`` per event, in order.
            dry_run, explain: as :meth:`process`.

        Yields:
            ``(index into items, response)``, in order, as each event is done.

        Raises:
            BatchInterrupted: the store failed (its attributes say which
                events were processed; those were yielded, except events
                of a chunk whose replies were lost).
            BadEvent: as :meth:`process`.
        """
        i, n = 0, len(items)
        chunk = self.pipeline if self.run_many is not None else 0
        while i < n:
            if chunk <= 0 or not items[i][1][0].single_round:
                try:
                    yield i, await self.process(items[i][0], items[i][1], dry_run, explain)
                except StoreUnavailable as e:
                    raise BatchInterrupted(str(e), i, i, i - 1) from e
                i += 1
                continue
            j = i
            while j < n and items[j][1][0].single_round:
                j += 1
            async for out in self._pipelined(items, i, j, chunk, dry_run, explain):
                yield out
            i = j

    async def _pipelined(self, items, lo: int, hi: int, chunk: int, dry_run: bool,
                         explain: bool) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """:meth:`process_batch` for ``items[lo:hi]``, all :attr:`EventProgram.single_round` (see there)."""
        assert self.run_many is not None

        async def build(a: int, b: int) -> list[_Pending]:
            out = []
            for k in range(a, b):
                body, (prog, t_ms, event_id) = items[k]
                response_id, append = self._ids(prog, body, t_ms, event_id, dry_run)
                try:
                    begun = await prog.begin(body, t_ms, event_id, self.id_ttl_ms, self.online, append, dry_run,
                                             self.cluster)
                except StoreUnavailable as e:  # online.note: nothing of events a..k was sent
                    raise BatchInterrupted(str(e), k, a, a - 1) from e
                out.append(_Pending(k, prog, response_id, begun))
            return out

        def send(evs: list[_Pending]):
            calls = [(c.rd.script, c.keys, c.argv, c.rd.layout) for c in (e.begun.call for e in evs) if c is not None]
            return asyncio.ensure_future(self.run_many(calls)) if calls else None

        def finished(evs: list[_Pending], replies: list):
            for e, reply in zip(evs, replies):
                counted: dict[str, Any] | None = {} if explain else None
                values, errors, late = e.prog.end(e.begun, reply, counted)
                yield e.index, self._response(e.prog, e.begun.t_ms, e.response_id, values, errors, late, dry_run,
                                              counted)

        starts = list(range(lo, hi, chunk)) + [hi]
        evs = await build(starts[0], starts[1])
        sent = send(evs)
        await asyncio.sleep(0)  # let the chunk's calls go out before the next chunk is built
        for a, b in zip(starts[1:], starts[2:] + [None]):
            nxt = None
            if b is not None:
                try:
                    nxt = await build(a, b)  # while the store runs this chunk
                except BatchInterrupted:
                    # nothing of the next chunk was sent: this one's events are done once its replies are in
                    for out in finished(evs, await self._replies(sent, evs)):
                        yield out
                    raise
            replies = await self._replies(sent, evs)
            if nxt is not None:
                sent = send(nxt)
                await asyncio.sleep(0)  # the next chunk goes out while this one's events are finished
            for out in finished(evs, replies):
                yield out
            evs = nxt

    @staticmethod
    async def _replies(sent, evs: list[_Pending]) -> list:
        """Each event's reply (``None`` for an event without a call) of one sent chunk.

        Raises:
            BatchInterrupted: the chunk failed after ``done`` calls (``serving.store.PipelineBroken``).
        """
        try:
            got = await sent if sent is not None else []
        except PipelineBroken as e:
            called = [ev.index for ev in evs if ev.begun.call is not None]
            raise BatchInterrupted(str(e.cause), called[e.done], called[e.done], called[-1]) from e.cause
        it = iter(got)
        return [next(it) if ev.begun.call is not None else None for ev in evs]

    def _ids(self, prog: EventProgram, body: Any, t_ms: int, event_id: str | None,
             dry_run: bool) -> tuple[str, tuple[str, str] | None]:
        """The response's ``event_id`` and the event-stream entry (``(key, JSON)`` or ``None``) of one event."""
        response_id = event_id if event_id is not None else uuid.uuid4().hex
        append = None
        if self.event_stream and prog.first_write_round and not dry_run:
            append = (self.event_stream, orjson.dumps({**body, "_time": t_ms, "_id": response_id}).decode())
        return response_id, append

    def _response(self, prog: EventProgram, t_ms: int, response_id: str, values: dict, errors: dict, late: int,
                  dry_run: bool, counted: dict | None) -> dict[str, Any]:
        """The response object of one evaluated event (:meth:`process`); counts a late event."""
        if late and not dry_run:
            OUT_OF_ORDER_EVENTS.labels(prog.name).inc()
            if late & BEYOND:
                LATE_EVENTS.labels(prog.name).inc()
        feats = {}
        for name, encode in prog.output_encoders:
            v = values[name]
            feats[name] = v if encode is None or v is None else encode(v)
        if errors and prog.inline_parent:
            errors = _errors_of_outputs(errors, prog.inline_parent)
        out: dict[str, Any] = {
            "event_id": response_id,
            "event_time": format_time(t_ms),
            "features": feats,
        }
        if errors:
            out["errors"] = errors
        if counted is not None:
            out["explain"] = prog.explain(values, counted, t_ms)
        return out


def _errors_of_outputs(errors: dict[str, Any], inline_parent: dict[str, str]) -> dict[str, Any]:
    """Errors keyed by output features: an inline aggregate's error is reported on the
    feature that contains it (unless that feature has its own). SPEC §2.4, §3.5."""
    out = {k: v for k, v in errors.items() if k not in inline_parent}
    for k, v in errors.items():
        if k in inline_parent:
            out.setdefault(inline_parent[k], v)
    return out
