"""Per-event feature evaluation: scalars in Python, aggregates from Redis tiles.

For each event type an :class:`EventProgram` is built once from the plan. It
schedules the event's aggregate reads and state writes into *rounds*; each
round is one call of ``event.lua`` (one network round trip). In the common
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

import time as _time
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

import orjson

from compiler.algebra.keys import encode_key, redis_key
from compiler.algebra.ops import (
    DECAY_HORIZON,
    AggregateOp,
    CountUniqueOp,
    DecayedOp,
    LatestOp,
    fold,
    make_op,
    parse_log_member,
    tile_field,
    values_json,
)
from compiler.algebra.storekeys import id_key
from compiler.algebra.windows import counted_range, levels_s, tile_index
from compiler.codegen.python import EvalError, compile_expr
from compiler.plan import AggregateSpec, EventPlan, Feature, Plan, StateSpec, WriteSpec
from compiler.typesystem import MAX_TIME_MS, MIN_TIME_MS, format_time, parse_time, read_input, to_json_value


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


#: Signature of the store call: ``(keys, argv) -> results`` (see ``event.lua``).
RunScript = Callable[[Sequence[str], Sequence[Any]], Awaitable[list]]

#: Signature of the online-start record: ``{definition hash: event time ms}`` -> None
#: (``serving.store.Store.record_online``: keeps the minimum per state).
RecordOnline = Callable[[dict[str, int]], Awaitable[None]]


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
    sizes: tuple[int, ...]
    key_types: tuple[str, ...]
    before_write: bool
    round: int = 1

    def __post_init__(self) -> None:
        # the static tail of the T op (resolution, sizes, component suffixes)
        comps = self.op.components
        self.tile_args = (self.state.resolution_s, len(self.sizes), *self.sizes, len(comps), *comps)


@dataclass
class _Write:
    state: StateSpec
    write: WriteSpec
    op: AggregateOp
    sizes: tuple[int, ...]
    where: Callable[[Any, int], Any] | None
    round: int = 1

    def __post_init__(self) -> None:
        window_ms = self.state.window_s * 1000
        res_ms = self.state.resolution_s * 1000
        # X op arguments: ttl W + r (SPEC §5.3), W, r, prune at most every W/4
        self.ttl_ms = window_ms + res_ms
        if isinstance(self.op, DecayedOp):
            self.ttl_ms = DECAY_HORIZON * window_ms
        self.log_args = (window_ms + res_ms, self.ttl_ms)
        self.prune_args = (window_ms, res_ms, max(window_ms // 4, res_ms))


@dataclass
class _Round:
    reads_before: list[_Read] = field(default_factory=list)
    writes: list[_Write] = field(default_factory=list)
    reads_after: list[_Read] = field(default_factory=list)


class EventProgram:
    """The compiled evaluation of one event type.

    Args:
        plan: the compiled plan.
        event: event type name (a key of ``plan.events``).

    Raises:
        NotImplementedError: the event uses an aggregate function the tile
            store does not implement (``compiler.algebra.ops.SUPPORTED``).
        ValueError: the aggregates' dependencies cannot be scheduled (a cycle
            the compiler should have rejected).
    """

    def __init__(self, plan: Plan, event: str):
        self.plan = plan
        self.event: EventPlan = plan.events[event]
        self.name = event
        self.features: tuple[Feature, ...] = self.event.features
        #: the features a response returns: the named ones (inline aggregates are computed, not returned)
        self.outputs: tuple[Feature, ...] = self.event.outputs
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
                sizes=levels_s(state.window_s),
                key_types=state.key_types,
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
                sizes=levels_s(state.window_s),
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
        self.first_write_round = min([w.round for w in self.writes.values()], default=0)
        self.by_stage: list[list[Feature]] = [[] for _ in range(n + 1)]
        for f in self.features:
            if f.kind != "aggregate":
                self.by_stage[stage[f.name]].append(f)

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
    ) -> tuple[dict[str, Any], dict[str, str]]:
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

        Returns:
            ``(values, errors)``: run-time values by feature name (plan order)
            and error messages by feature name.

        Raises:
            Whatever ``run`` or ``online.record`` raises (``serving.store.StoreUnavailable``).
        """
        env: dict[str, Any] = {}
        errors: dict[str, str] = {}
        self._eval_scalars(self.by_stage[0], env, errors, event_time_ms, payload)
        skip_writes = False
        for k, rd in enumerate(self.rounds, start=1):
            keys: list[str] = []
            key_index: dict[str, int] = {}

            def kidx(name: str) -> int:
                i = key_index.get(name)
                if i is None:
                    keys.append(name)
                    i = key_index[name] = len(keys)
                return i

            argv: list[Any] = []
            decoders: list[Callable[[Any], None]] = []
            if event_id is not None and k == self.first_write_round and not skip_writes:
                argv += ["ID", kidx(id_key(event_id)), id_ttl_ms]

                def _id_result(res: Any) -> None:
                    nonlocal skip_writes
                    if int(res) == 0:
                        skip_writes = True

                decoders.append(_id_result)
            if append is not None and k == self.first_write_round and not skip_writes:
                argv += ["XA", kidx(append[0]), append[1]]
            for r in rd.reads_before:
                self._read_args(r, env, event_time_ms, argv, decoders, kidx)
            written: list[str] = []
            if not skip_writes:
                for w in rd.writes:
                    if self._write_args(w, env, errors, event_time_ms, argv, kidx):
                        written.append(w.state.definition_hash)
            for r in rd.reads_after:
                self._read_args(r, env, event_time_ms, argv, decoders, kidx)
            if written and online is not None:
                await online.note(written, event_time_ms)
            if argv:
                results = await run(keys, argv)
                for dec, res in zip(decoders, results):
                    dec(res)
            self._eval_scalars(self.by_stage[k], env, errors, event_time_ms, payload)
        values = {f.name: env.get(f.name) for f in self.features}
        return values, errors

    def _read_args(self, r: _Read, env: dict, t_ms: int, argv: list, decoders: list, kidx) -> None:
        key_vals = [env.get(n) for n in r.spec.read_keys]
        enc = encode_key(key_vals, r.key_types)
        if enc is None:
            env[r.feature] = None
            return
        after_ms = env.get(r.spec.after) if r.spec.after else None
        lo, hi = counted_range(t_ms, r.state.window_s, after_ms)
        res_ms = r.state.resolution_s * 1000
        rk = kidx(redis_key(enc, r.state.definition_hash))
        op = r.op
        name = r.feature
        if r.state.limit is not None:
            argv += ["ZR", rk, lo * res_ms, t_ms, r.state.limit]
            vtypes = r.state.value_types

            def dec_z(res: Any) -> None:
                writes = [(int(float(res[j + 1])), parse_log_member(res[j], vtypes)) for j in range(len(res) - 2, -1, -2)]
                env[name] = fold(op, writes)

            decoders.append(dec_z)
            return
        if isinstance(op, DecayedOp):
            argv += ["R", rk, 3, "dt", "dv", "dw"]

            def dec_d(res: Any) -> None:
                env[name] = op.value_at(op.decode(res), t_ms)

            decoders.append(dec_d)
            return
        if isinstance(op, CountUniqueOp):
            argv += ["U", rk, lo * res_ms, t_ms]

            def dec_u(res: Any) -> None:
                env[name] = int(res) if lo <= hi else 0

            decoders.append(dec_u)
            return
        if isinstance(op, LatestOp):
            argv += ["R", rk, 2, "lt", "lv"]
            lo_ms = lo * res_ms

            def dec_l(res: Any) -> None:
                ir = op.decode(res)
                if ir is not None and not (lo_ms <= ir[0] <= t_ms):
                    ir = None
                env[name] = op.finalize(ir)

            decoders.append(dec_l)
            return
        argv += ["T", rk, lo, hi, *r.tile_args]
        nc = len(op.components)

        def dec_t(res: Any) -> None:
            ir = op.init()
            for j in range(0, len(res), nc):
                if any(x is not None for x in res[j : j + nc]):
                    ir = op.merge(ir, op.decode(res[j : j + nc]))
            env[name] = op.finalize(ir)

        decoders.append(dec_t)

    def _write_args(self, w: _Write, env: dict, errors: dict, t_ms: int, argv: list, kidx) -> bool:
        """Append the ops of one state write to ``argv``; return whether it writes (SPEC §2.4 write rules)."""
        spec = w.write
        if w.where is not None:
            try:
                ok = w.where(env, t_ms)
            except EvalError:
                ok = None
            if ok is not True:
                return False
        values = [env.get(n) for n in spec.values]
        if any(v is None for v in values):
            return False
        enc = encode_key([env.get(n) for n in spec.keys], w.state.key_types)
        if enc is None:
            return False
        rk = kidx(redis_key(enc, w.state.definition_hash))
        if w.state.limit is not None:
            argv += ["ZW", rk, t_ms, values_json(values), w.state.limit, t_ms - w.log_args[0], w.log_args[1]]
            return True
        fields = [tile_field(size, tile_index(t_ms, size)) for size in w.sizes] if w.op.tiled else []
        argv += w.op.write_args(rk, fields, values, t_ms)
        argv += ["X", rk, w.ttl_ms, t_ms, *w.prune_args]
        return True


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

    Raises:
        NotImplementedError: see :class:`EventProgram`.
    """

    def __init__(self, plan: Plan, run: RunScript | None, id_ttl_ms: int = 86_400_000,
                 record_online: RecordOnline | None = None, event_stream: str | None = None):
        self.plan = plan
        self.event_stream = event_stream
        self.run = run
        self.id_ttl_ms = id_ttl_ms
        self.online: OnlineStarts | None = OnlineStarts(record_online) if record_online is not None else None
        self.programs = {e: EventProgram(plan, e) for e in plan.events}

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

    async def process(self, body: Any, parsed: tuple[EventProgram, int, str | None] | None = None) -> dict[str, Any]:
        """Evaluate one event and return the response object of SPEC §4.

        Returns:
            ``{"event_id", "event_time", "features": {...}, "errors": {...}}``
            (``errors`` only when non-empty) with JSON-ready values (§3.5).

        Raises:
            BadEvent: invalid event (nothing written).
            serving.store.StoreUnavailable: the store failed.
        """
        prog, t_ms, event_id = parsed or self.parse(body)
        response_id = event_id if event_id is not None else uuid.uuid4().hex
        append = None
        if self.event_stream and prog.first_write_round:
            append = (self.event_stream, orjson.dumps({**body, "_time": t_ms, "_id": response_id}).decode())
        values, errors = await prog.evaluate(body, t_ms, self.run, event_id, self.id_ttl_ms, self.online, append)
        feats = {f.name: to_json_value(values[f.name], f.type) for f in prog.outputs}
        if errors and prog.inline_parent:
            errors = _errors_of_outputs(errors, prog.inline_parent)
        out: dict[str, Any] = {
            "event_id": response_id,
            "event_time": format_time(t_ms),
            "features": feats,
        }
        if errors:
            out["errors"] = errors
        return out



def _errors_of_outputs(errors: dict[str, Any], inline_parent: dict[str, str]) -> dict[str, Any]:
    """Errors keyed by output features: an inline aggregate's error is reported on the
    feature that contains it (unless that feature has its own). SPEC §2.4, §3.5."""
    out = {k: v for k, v in errors.items() if k not in inline_parent}
    for k, v in errors.items():
        if k in inline_parent:
            out.setdefault(inline_parent[k], v)
    return out
