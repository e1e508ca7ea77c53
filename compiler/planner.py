"""Checked topology -> :class:`~compiler.plan.Plan` (SPEC §1, §2.4, §3.2, §5.4).

For every event the features come out in dependency order (computed by
:mod:`compiler.check`). Every aggregate feature gets an
:class:`~compiler.plan.AggregateSpec` (read side) and points at a
:class:`~compiler.plan.StateSpec` (write side) keyed by its
*definition hash*.

Definition hash (SPEC §5.4)
---------------------------
``sha256`` (first 16 hex chars) of the canonical JSON (sorted keys, compact)
of::

    {"function": F, "window_s": W, "limit": L,
     "value_types": [...], "key_types": [...],
     "writers": {EVENT: {"keys": [canon...], "values": [canon...], "where": expr | null}, ...}}

where ``canon`` is a feature's *canonical digest*: sha256 of its definition
with every feature reference replaced by the referenced feature's digest (a
Merkle form of "inline the definition recursively", which keeps documents
shallow however long a chain of features is):

* input -- ``["input", path, type, optional, default]``
* scalar -- its expression: ``["lit", type, value]``,
  ``["op", op, type, [args]]``, ``["call", name, type, [args]]``,
  ``["list", type, [items]]``, a reference replaced by its digest;
* aggregate -- ``["agg", definition_hash, [read-key canon...], window_s,
  exclusive, after canon | null]``.

Feature names never enter the hash, so renaming keeps state; writer event
names do (they say who writes). Read-side settings (``exclusive``, read key
names, ``after``) are not part of the write definition, so aggregates that
differ only there share one state. A definition that reaches itself across
events (legal at run time, since each event reads state written earlier)
is cut with ``["recursive", event, feature]``.

Source: SPEC §5.4; plan shapes in ``compiler/plan.py``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from compiler.algebra.registry import layout_of, state_limit
from compiler.algebra.windows import resolution_s
from compiler.check import CheckedTopology, FeatureInfo, stable_topo
from compiler.plan import AggregateSpec, EventPlan, Expr, Feature, Plan, StateSpec, WriteSpec

__all__ = ["build_plan", "definition_hash_of", "Planner"]


def build_plan(topology: CheckedTopology) -> Plan:
    """Build the plan of a checked topology that has no diagnostics.

    Args:
        topology: result of :func:`compiler.check.check` with no errors.

    Returns:
        The :class:`~compiler.plan.Plan`: events sorted by name, features in
        dependency order, states by definition hash.

    Source: SPEC §1, §5.4.
    """
    return Planner(topology).build()


def definition_hash_of(document: Any) -> str:
    """First 16 hex chars of sha256 over the canonical JSON of ``document``.

    >>> definition_hash_of({"b": 1, "a": [1.0, "x"]}) == definition_hash_of({"a": [1.0, "x"], "b": 1})
    True
    """
    return _digest(document)[:16]


def _digest(document: Any) -> str:
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Planner:
    """Canonical forms, definition hashes and plan assembly for one topology."""

    def __init__(self, topology: CheckedTopology):
        self.events = topology.events
        self._canon: dict[tuple[str, str], Any] = {}
        self._hash: dict[tuple[str, str], str] = {}
        self._active: set[tuple[str, str]] = set()

    # ----------------------------------------------------------- canonical
    def canonical(self, event: str, name: str) -> Any:
        """Canonical digest of feature ``name`` of ``event`` (see module docstring)."""
        key = (event, name)
        if key in self._canon:
            return self._canon[key]
        if key in self._active:
            return ["recursive", event, name]
        self._active.add(key)
        try:
            f = self.events[event].features[name]
            if f.kind == "input":
                i = f.input
                out: Any = ["input", list(i.path), f.type, i.optional, i.default]
            elif f.kind == "scalar":
                out = self.canonical_expr(f.expr, event)
            else:
                a = f.agg
                out = ["agg", self.definition_hash(f), [self.canonical(event, k) for k in a.read_keys],
                       a.window_s, a.exclusive, self.canonical(event, a.after) if a.after else None]
            out = _digest(out)
        finally:
            self._active.discard(key)
        self._canon[key] = out
        return out

    def canonical_expr(self, e: Expr | None, event: str) -> Any:
        """Canonical form of an expression evaluated in ``event``."""
        if e is None:
            return None
        if e.kind == "lit":
            return ["lit", e.type, e.value]
        if e.kind == "ref":
            return self.canonical(event, e.name)
        args = [self.canonical_expr(a, event) for a in e.args]
        if e.kind == "list":
            return ["list", e.type, args]
        return [e.kind, e.op, e.type, args]

    def definition(self, f: FeatureInfo) -> dict[str, Any]:
        """The write-time definition document of aggregate ``f``."""
        a = f.agg
        writers = {}
        for w in sorted(a.scopes):
            writers[w] = {
                "keys": [self.canonical(w, k) for k in a.write_keys],
                "values": [self.canonical(w, v) for v in a.values],
                "where": self.canonical_expr(a.where.get(w), w),
            }
        doc = {
            "function": a.function,
            "window_s": a.window_s,
            "limit": state_limit(a.function, a.limit),
            "value_types": list(a.value_types),
            "key_types": list(a.key_types),
            "writers": writers,
        }
        layout = layout_of(a.function, a.limit)
        if layout > 1:  # a new storage layout is a new namespace (SPEC §5.4); layout 1 adds nothing
            doc["layout"] = layout
        return doc

    def definition_hash(self, f: FeatureInfo) -> str:
        """Definition hash of aggregate ``f`` (memoised)."""
        key = ("#hash", f.event + "." + f.name)
        memo = (f.event, f.name)
        if memo in self._hash:
            return self._hash[memo]
        if key in self._active:
            return f"recursive:{f.event}.{f.name}"
        self._active.add(key)
        try:
            h = definition_hash_of(self.definition(f))
        finally:
            self._active.discard(key)
        self._hash[memo] = h
        return h

    # ---------------------------------------------------------------- build
    def _prepare(self) -> None:
        """Compute every canonical digest in dependency order (across events), so that
        computing one rarely recurses into another."""
        graph: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for ev_name, ev in self.events.items():
            for name, f in ev.features.items():
                deps = [(ev_name, d) for d in f.deps]
                if f.kind == "aggregate" and f.agg is not None:
                    a = f.agg
                    for w in a.scopes:
                        need = set(a.write_keys) | set(a.values)
                        if a.where.get(w) is not None:
                            need |= a.where[w].refs()
                        deps.extend((w, d) for d in sorted(need) if d in self.events[w].features)
                graph[(ev_name, name)] = deps
        for ev_name, name in stable_topo(graph):
            self.canonical(ev_name, name)

    def build(self) -> Plan:
        """Assemble the :class:`~compiler.plan.Plan`."""
        self._prepare()
        states: dict[str, StateSpec] = {}
        event_features: dict[str, list[Feature]] = {}
        for ev_name in sorted(self.events):
            ev = self.events[ev_name]
            feats: list[Feature] = []
            for name in ev.order:
                f = ev.features[name]
                if f.kind == "input":
                    feats.append(Feature(name, f.type, "input", input=f.input, deps=f.deps, span=f.span))
                elif f.kind == "scalar":
                    feats.append(Feature(name, f.type, "scalar", expr=f.expr, deps=f.deps, span=f.span))
                elif f.kind == "aggregate":
                    a = f.agg
                    h = self.definition_hash(f)
                    r = resolution_s(a.window_s)
                    spec = AggregateSpec(
                        function=a.function, scopes=tuple(sorted(a.scopes)), read_keys=a.read_keys,
                        value_names=a.values, window_s=a.window_s, resolution_s=r, limit=a.limit,
                        exclusive=a.exclusive, after=a.after, definition_hash=h,
                    )
                    feats.append(Feature(name, f.type, "aggregate", aggregate=spec, deps=f.deps, span=f.span,
                                         inline_of=f.inline_of, text=f.text))
                    if h not in states:
                        states[h] = StateSpec(
                            definition_hash=h, function=a.function, window_s=a.window_s, resolution_s=r,
                            limit=state_limit(a.function, a.limit), value_types=a.value_types,
                            key_types=a.key_types,
                            writes={w: WriteSpec(w, a.write_keys, a.values, a.where.get(w))
                                    for w in sorted(a.scopes)},
                        )
            event_features[ev_name] = feats
        writes: dict[str, set[str]] = {ev: set() for ev in event_features}
        for h, s in states.items():
            for w in s.writes:
                writes.setdefault(w, set()).add(h)
        events = {
            ev: EventPlan(ev, tuple(feats), tuple(sorted(writes.get(ev, ()))))
            for ev, feats in event_features.items()
        }
        return Plan(events=events, states={h: states[h] for h in sorted(states)})
