"""A brute-force reference evaluator of a whole compiled plan (SPEC §2.4, §3).

It answers: given a plan and a timeline of events, what feature values must
the API return for each event? It is written straight from the SPEC and is
meant to be obviously right, not fast: it keeps every event's full feature
environment and recomputes each aggregate from the list of all earlier
writes. It shares no code with ``compiler.algebra`` or ``serving``; it uses
only the plan model (:mod:`compiler.plan`), the scalar engine
(:func:`compiler.codegen.python.compile_expr`, for scalar features and
``where`` filters), :func:`compiler.typesystem.read_input` (inputs),
:func:`compiler.typesystem.parse_time` (``_time``) and
:func:`compiler.typesystem.to_json_value` (output encoding).

Semantics implemented (SPEC section in brackets):

* event time ``t`` from ``_time`` (ISO-8601 or epoch ms) [§3.1]; events are
  processed in list (arrival) order; equal times are ordered by arrival
  [§3.1]. The list need not be in time order: a late event sees only the
  writes that arrived before it with ``s <= t`` ("never later ones", §3.3);
* features of one event in plan order (dependency order) [§2.1]; a write
  by an event uses the values, keys and ``where`` of that event's own
  environment, including its aggregates [§2.4 Values];
* the writes of an aggregate read at ``t``: every earlier event of a scope
  type, plus the reading event itself when its type is in the scope and the
  aggregate is not ``exclusive`` [§3.3]; a write counts iff its ``where`` is
  true (null or an evaluation error: false), all its values are non-null,
  all its key components are non-null and equal the read key [§2.4, §3.5],
  and the window rule holds: ``T(s) > T(t - W)``, ``s <= t`` and, with
  ``after a`` (``a`` non-null), ``T(s) > T(a)``, ``T(x) = floor(x / r)``
  [§3.2]; then ``limit n`` keeps the ``n`` latest by (time, arrival) [§3.2];
* a null read key gives null [§2.4 by];
* the functions of the §2.4 table. ``Decayed*`` use all history with
  ``s <= t`` (no window, no limit), weight ``exp(-(t - s) / W)``, ``W`` in
  ms; ``HyperLogLog`` returns the EXACT distinct count (the tests compare
  with a tolerance).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from compiler.codegen.python import EvalError, compile_expr
from compiler.plan import Plan, StateSpec
from compiler.typesystem import parse_time, read_input, to_json_value


@dataclass(frozen=True)
class Write:
    """One write of one state by one event (before any filtering by a read).

    Attributes:
        time_ms: the writer's event time ``s``.
        arrival: the writer's position in the timeline (0-based).
        key: the write key tuple (may hold ``None``).
        values: the value tuple (may hold ``None``).
        passes_where: the ``where`` filter is true (``True`` when no filter).
    """

    time_ms: int
    arrival: int
    key: tuple
    values: tuple
    passes_where: bool


class Reference:
    """Evaluates a plan over a timeline, one event at a time (module docstring).

    Args:
        plan: the compiled plan.
    """

    def __init__(self, plan: Plan):
        self.plan = plan
        self._compiled: dict[int, Any] = {}
        #: every processed event: (event type, time ms, full env)
        self.history: list[tuple[str, int, dict[str, Any]]] = []
        #: (definition hash, key tuple) -> the eligible writes, in (time, arrival) order
        self._by_key: dict[tuple[str, tuple], list[Write]] = {}
        #: the same keys -> the writes' times (for bisection)
        self._times: dict[tuple[str, tuple], list[int]] = {}

    # ----------------------------------------------------------- scalars
    def _fn(self, expr):
        f = self._compiled.get(id(expr))
        if f is None:
            f = self._compiled[id(expr)] = (expr, compile_expr(expr))
        return f[1]

    # ----------------------------------------------------------- writes
    def _write_of(self, state: StateSpec, etype: str, t_ms: int, arrival: int, env: dict) -> Write:
        """The write event ``(etype, t_ms, env)`` makes to ``state`` (SPEC §2.4)."""
        w = state.writes[etype]
        ok = True
        if w.where is not None:
            try:
                ok = self._fn(w.where)(env, t_ms) is True
            except EvalError:
                ok = False
        return Write(
            time_ms=t_ms,
            arrival=arrival,
            key=tuple(env.get(k) for k in w.keys),
            values=tuple(env.get(v) for v in w.values),
            passes_where=ok,
        )

    def _record(self, etype: str, t_ms: int, arrival: int, env: dict) -> None:
        """File the writes of a processed event under (state, key) (SPEC §2.4).

        Only writes that can ever count are kept: ``where`` true, all values
        and key components non-null. Grouping by key is the key-equality
        rule; each list is in (time, arrival) order.
        """
        for h, state in self.plan.states.items():
            if etype not in state.writes:
                continue
            w = self._write_of(state, etype, t_ms, arrival, env)
            if _eligible(w):
                # keep (time, arrival) order: after every write of the same or an earlier time
                times = self._times.setdefault((h, w.key), [])
                i = bisect.bisect_right(times, t_ms)
                times.insert(i, t_ms)
                self._by_key.setdefault((h, w.key), []).insert(i, w)

    # ----------------------------------------------------------- one aggregate
    def _aggregate(self, feature, etype: str, t_ms: int, env: dict) -> Any:
        spec = feature.aggregate
        state = self.plan.states[spec.definition_hash]
        read_key = tuple(env.get(k) for k in spec.read_keys)
        if any(k is None for k in read_key):
            return None  # SPEC §2.4: a null read key returns null
        writes = self._by_key.get((spec.definition_hash, read_key), [])
        times = self._times.get((spec.definition_hash, read_key), [])
        if etype in state.writes and not spec.exclusive:  # SPEC §3.3: inclusive read
            own = self._write_of(state, etype, t_ms, len(self.history), env)
            if _eligible(own) and own.key == read_key:
                i = bisect.bisect_right(times, t_ms)
                writes, times = writes[:i] + [own] + writes[i:], times[:i] + [t_ms] + times[i:]
        # ``writes`` is in (time, arrival) order
        fn = spec.function
        window_ms = spec.window_s * 1000
        upto = bisect.bisect_right(times, t_ms)  # s <= t
        if fn.startswith("Decayed"):
            return _decayed(fn, writes[:upto], t_ms, window_ms)
        # SPEC §3.2 with r the resolution and T(x) = floor(x / r):
        #   T(s) > T(t - W)  <=>  s >= (T(t - W) + 1) * r
        #   T(s) > T(a)      <=>  s >= (T(a) + 1) * r     (a null a: no filter)
        r = spec.resolution_s * 1000
        lo_ms = ((t_ms - window_ms) // r + 1) * r
        after = env.get(spec.after) if spec.after else None
        if after is not None:
            lo_ms = max(lo_ms, (after // r + 1) * r)
        counted = writes[bisect.bisect_left(times, lo_ms) : upto]  # oldest first
        if spec.limit is not None:
            counted = counted[-spec.limit :]  # the n latest by (time, arrival)
        return _apply(fn, counted, spec.value_names, state.value_types)

    # ----------------------------------------------------------- one event
    def process(self, body: dict) -> tuple[dict[str, Any], dict[str, str]]:
        """Evaluate one event and record it; return ``(json features, errors)``."""
        etype = body["_type"]
        t_ms = parse_time(body["_time"])
        ep = self.plan.events[etype]
        env: dict[str, Any] = {}
        errors: dict[str, str] = {}
        for f in ep.features:
            if f.kind == "input":
                value, err = read_input(body, f.input, f.type)
                env[f.name] = value
                if err is not None:
                    errors[f.name] = err
            elif f.kind == "scalar":
                try:
                    env[f.name] = self._fn(f.expr)(env, t_ms)
                except EvalError as e:
                    env[f.name] = None
                    errors[f.name] = str(e)
            else:
                env[f.name] = self._aggregate(f, etype, t_ms, env)
        self._record(etype, t_ms, len(self.history), env)
        self.history.append((etype, t_ms, env))
        return {f.name: to_json_value(env[f.name], f.type) for f in ep.outputs}, errors


def _eligible(w: Write) -> bool:
    """``where`` true and every value and key component non-null (SPEC §2.4)."""
    return w.passes_where and all(v is not None for v in w.values) and all(k is not None for k in w.key)


def _apply(fn: str, counted: list[Write], names, value_types) -> Any:
    """Apply a §2.4 function to the counted writes, oldest first by (time, arrival)."""
    if fn == "Count":
        return len(counted)
    vals = [w.values for w in counted]
    one = len(value_types) == 1

    def item(v):
        return v[0] if one else dict(zip(names, v))

    if fn == "CountUnique":
        return len(set(vals))
    if fn == "HyperLogLog":
        return len(set(vals))  # exact; the tests allow the sketch's error
    if fn == "Sum":
        if value_types[0] == "int":  # exact; beyond int64 null (SPEC §3.5: int results are 64-bit)
            total = sum(v[0] for v in vals)
            return total if -(2**63) <= total < 2**63 else None
        return _fsum(float(v[0]) for v in vals) if vals else 0.0
    if fn == "Average":
        return _fsum(float(v[0]) for v in vals) / len(vals) if vals else None
    if fn == "Min":
        return min((v[0] for v in vals), default=None)
    if fn == "Max":
        return max((v[0] for v in vals), default=None)
    if fn in ("Latest", "LatestTime", "First", "FirstTime"):
        if not counted:
            return None
        # ``counted`` is oldest first by (time, arrival): Latest takes the last
        # (same time: the later arrival), First the first (the earlier arrival)
        w = counted[-1] if fn.startswith("Latest") else counted[0]
        return w.time_ms if fn.endswith("Time") else item(w.values)
    if fn == "Sequence":
        return [item(v) for v in vals]
    if fn == "Set":
        distinct = sorted(set(vals))
        return [v[0] if one else list(v) for v in distinct]
    raise ValueError(f"reference: unknown function {fn}")


def _fsum(xs) -> float:
    """The correctly rounded sum of floats, IEEE at the edges: an exact sum beyond the
    largest double is an infinity of its sign, ``inf + -inf`` and NaN are NaN."""
    xs = list(xs)
    if any(math.isnan(x) for x in xs) or (math.inf in xs and -math.inf in xs):
        return math.nan
    if math.inf in xs or -math.inf in xs:
        return math.inf if math.inf in xs else -math.inf
    try:
        return math.fsum(xs)
    except OverflowError:  # the exact sum lies beyond 1.8e308
        return math.inf if sum(Fraction(x) for x in xs) > 0 else -math.inf


def _decayed(fn: str, writes: list[Write], t_ms: int, window_ms: int) -> float | None:
    """``Decayed*`` over all history with ``s <= t`` (SPEC §2.4)."""
    if fn == "DecayedCount":
        return math.fsum(math.exp(-(t_ms - w.time_ms) / window_ms) for w in writes)
    if fn == "DecayedSum":
        return _fsum(float(w.values[0]) * math.exp(-(t_ms - w.time_ms) / window_ms) for w in writes)
    if fn == "DecayedAverage":
        if not writes:
            return None
        # weights relative to the latest write: the same ratio, never 0/0 by underflow
        ref = max(w.time_ms for w in writes)
        ws = [math.exp(-(ref - w.time_ms) / window_ms) for w in writes]
        return _fsum(float(w.values[0]) * x for w, x in zip(writes, ws)) / math.fsum(ws)
    raise ValueError(fn)


def reference_run(plan: Plan, events: list[dict]) -> tuple[list[dict], list[dict]]:
    """Return ``(features, errors)``: per event, the JSON features dict and the errors dict."""
    ref = Reference(plan)
    feats, errs = [], []
    for body in events:
        f, e = ref.process(body)
        feats.append(f)
        errs.append(e)
    return feats, errs


def reference_values(plan: Plan, events: list[dict]) -> list[dict]:
    """Per event, in order, the JSON-encoded features dict the API must return (SPEC §4)."""
    return reference_run(plan, events)[0]


def reference_run_text(text: str, events: list[dict]) -> tuple[list[dict], list[dict]]:
    """:func:`reference_run` over the topology ``text`` (one file); picklable, for a worker process."""
    from compiler import compile_sources

    result = compile_sources({"main.scowl": text})
    assert result.plan is not None, result.render()
    return reference_run(result.plan, events)
