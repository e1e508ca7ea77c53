"""The plan: the one contract between the compiler and the rest (SPEC §1).

The compiler turns a topology (every ``*.scowl`` file of a directory) into a
:class:`Plan`. Serving, the Spark jobs and ``scowl plan --json`` read only the
plan, never the AST.

Shapes
------
* :class:`Expr` -- a typed scalar expression tree (the IR both code
  generators consume, SPEC §5.10). Values at run time:

  ========== ==================================================
  type       Python value
  ========== ==================================================
  ``bool``   ``bool``
  ``int``    ``int`` (64-bit semantics)
  ``float``  ``float``
  ``string`` ``str``
  ``time``   ``int`` -- UTC epoch **milliseconds**
  ``duration`` ``float`` -- **seconds**
  ``null``   ``None`` (type of the bare ``null`` literal)
  ========== ==================================================

  Aggregate results add ``struct{a:int,b:string}`` (Python ``dict`` keyed
  by field name; Spark ``struct`` with those field names),
  ``tuple{int,string}`` (Python ``list``/``tuple``; Spark ``struct`` read
  by position) and ``array<T>`` (Python ``list``; Spark ``array``).

  Taking them apart (SPEC §2.3 ``.`` and ``[]``):

  * ``Expr("op", T, op="field", args=(x, Expr("lit", "string", value=NAME)))``
    -- field ``NAME`` of struct ``x`` (type ``T``); null if ``x`` is null.
    The name is a literal argument (not ``value``) so it takes part in
    ``to_json`` and in definition hashes like any other operand.
  * ``Expr("op", T, op="index", args=(x, i))`` -- on ``array<T>`` with an
    int ``i``: item ``i``, 0-based, negative counts from the end (``-1`` is
    the last); null if ``x`` or ``i`` is null or ``i`` is out of range. On a
    ``tuple{...}``, ``i`` is an int literal ``0 <= i < n`` (the checker
    folds and normalises it) and ``T`` is that component's type.

* :class:`Feature` -- one feature of one event, kind ``input`` / ``scalar`` /
  ``aggregate``; an event's features are listed in dependency order.
* :class:`StateSpec` -- the *write-time* definition of an aggregate state,
  keyed by its ``definition_hash`` (SPEC §5.4). Several aggregate features may
  share one state (same function, window, values, keys and filter), and every
  event type in the scope writes it.
* :class:`AggregateSpec` -- the *read-time* side of one aggregate feature:
  which reading-event features form the key, window, ``exclusive``.

Source: SPEC §1, §2.4, §5.4, §6 (``scowl plan --json``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import orjson

FeatureKind = Literal["input", "scalar", "aggregate"]

#: Scalar type names used in :attr:`Expr.type` and :attr:`Feature.type`.
SCALAR_TYPES = ("bool", "int", "float", "string", "time", "duration", "null")

#: Binary/unary operator names used in ``Expr(kind="op")`` (SPEC §2.3).
OPERATORS = (
    "neg", "bitnot",                       # unary - ~
    "mul", "div", "floordiv", "mod",       # * / // %
    "add", "sub",                          # + -
    "shl", "shr", "bitand", "bitxor", "bitor",
    "eq", "ne", "match", "lt", "gt", "le", "ge",   # = != ~= < > <= >=
    "in", "not_in",                        # args: [needle, list-expr]
    "is_null", "is_not_null",
    "not", "and", "or",
    "field",                               # x.name: args [struct, string literal name]
    "index",                               # x[i]: args [array or tuple, int index]
)


@dataclass(frozen=True)
class Span:
    """A source range: ``file`` and 1-based ``line:col-end_line:end_col`` (end exclusive col)."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}-{self.end_line}:{self.end_col}"


@dataclass(frozen=True)
class Expr:
    """A typed scalar expression node (the IR of SPEC §5.10).

    Attributes:
        kind: ``"lit"`` (``value``), ``"ref"`` (``name`` of a feature of the same
            event), ``"op"`` (``op`` in :data:`OPERATORS`, ``args``), ``"call"``
            (``op`` = built-in function name as written in SPEC §2.3 with its
            canonical spelling, e.g. ``"Len"`` for ``Length``; ``args``),
            ``"list"`` (a literal list, right side of ``in``; ``args``).
        type: result type name (see module docstring).
        op: operator or function name.
        value: literal value, already in run-time representation (time ms,
            duration seconds).
        name: referenced feature name.
        args: child expressions.
    """

    kind: Literal["lit", "ref", "op", "call", "list"]
    type: str
    op: str | None = None
    value: Any = None
    name: str | None = None
    args: tuple["Expr", ...] = ()

    def refs(self) -> set[str]:
        """Return the names of all features this expression references."""
        out: set[str] = set()
        stack = [self]
        while stack:
            node = stack.pop()
            if node.kind == "ref" and node.name is not None:
                out.add(node.name)
            stack.extend(node.args)
        return out

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-able dict (omits empty attributes)."""
        d: dict[str, Any] = {"kind": self.kind, "type": self.type}
        if self.op is not None:
            d["op"] = self.op
        if self.kind == "lit":
            d["value"] = self.value
        if self.name is not None:
            d["name"] = self.name
        if self.args:
            d["args"] = [a.to_json() for a in self.args]
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Expr":
        """Inverse of :meth:`to_json`."""
        return Expr(
            kind=d["kind"],
            type=d["type"],
            op=d.get("op"),
            value=d.get("value"),
            name=d.get("name"),
            args=tuple(Expr.from_json(a) for a in d.get("args", ())),
        )


@dataclass(frozen=True)
class InputSpec:
    """How an input feature reads the event payload (SPEC §2.2).

    Attributes:
        path: JSON path steps after ``$``: ``$.a.b[0]`` is ``["a", "b", 0]``.
        optional: ``as T?`` -- null when missing, no error.
        default: ``as T ? literal`` -- the literal (run-time representation),
            used when missing or null; ``None`` when no default.
        has_default: whether a default was given (``default`` may be a falsy value).
    """

    path: tuple[str | int, ...]
    optional: bool = False
    default: Any = None
    has_default: bool = False


@dataclass(frozen=True)
class Feature:
    """One feature of an event.

    Attributes:
        name: feature name, unique within the event.
        type: result type name.
        kind: ``input`` / ``scalar`` / ``aggregate``.
        input: for inputs.
        expr: for scalars.
        aggregate: for aggregates, the read-time spec.
        deps: names of features of the same event this one needs to be
            evaluated (for aggregates: read keys, the ``after`` feature, and,
            when the event itself writes the aggregate's state, the features
            that write needs).
        span: where it is defined.
        inline_of: for an *inline aggregate* (an aggregate written inside a
            scalar feature's expression, SPEC §2.4): the name of the scalar
            feature that contains it. Such a feature is unnamed in the
            source; its ``name`` is ``"<parent>#<k>"`` (``k`` = 1, 2, ... in
            source order), which no user name can take. It is evaluated like
            any aggregate feature on every engine but is not an output: API
            responses and replay columns leave it out, and ``scowl plan``
            lists it under its parent. ``None`` for every named feature.
        text: for an inline aggregate, its source text as written
            (whitespace collapsed), e.g. ``"Sum(amount by a last 30 days)"``.
    """

    name: str
    type: str
    kind: FeatureKind
    input: InputSpec | None = None
    expr: Expr | None = None
    aggregate: "AggregateSpec | None" = None
    deps: tuple[str, ...] = ()
    span: Span | None = None
    inline_of: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class WriteSpec:
    """How one writer event type writes one state (SPEC §2.4).

    Attributes:
        event: writer event type.
        keys: writer feature names forming the write key, in ``by`` order
            (empty for the global key).
        values: writer feature names of the values, in order (empty for
            ``Count()``/``LatestTime()``).
        where: filter over writer features, or ``None``; null counts as false.
    """

    event: str
    keys: tuple[str, ...]
    values: tuple[str, ...]
    where: Expr | None = None

    def deps(self) -> set[str]:
        """Writer features this write needs."""
        out = set(self.keys) | set(self.values)
        if self.where is not None:
            out |= self.where.refs()
        return out


@dataclass(frozen=True)
class StateSpec:
    """The write-time definition of one aggregate state (SPEC §5.4).

    Attributes:
        definition_hash: 16 hex chars; sha256 over the canonical write-time
            definition (function, window, limit, value types, and per writer
            event the *definitions* -- not names -- of keys, values and filter,
            with feature references inlined recursively). Renaming a feature
            keeps the hash; changing a definition changes it.
        function: aggregate function name (``Count``, ``Sum``, ...).
        window_s: window ``W`` in seconds.
        resolution_s: resolution ``r`` in seconds (SPEC §3.2).
        limit: ``limit n`` or ``None``.
        value_types: types of the values, in order.
        key_types: types of the key components, in order.
        writes: one :class:`WriteSpec` per writer event type (the scope).
    """

    definition_hash: str
    function: str
    window_s: int
    resolution_s: int
    limit: int | None
    value_types: tuple[str, ...]
    key_types: tuple[str, ...]
    writes: dict[str, WriteSpec]


@dataclass(frozen=True)
class AggregateSpec:
    """The read-time side of one aggregate feature.

    Attributes:
        function: aggregate function name.
        scopes: writer event types (sorted); ``[reading event]`` for a common aggregate.
        read_keys: reading-event feature names forming the lookup key.
        value_names: value feature names as written (struct field names for
            multi-value ``Latest``).
        window_s, resolution_s, limit: as in :class:`StateSpec`.
        exclusive: the reading event's own contribution is left out.
        after: name of a ``time`` feature of the reading event, or ``None``.
        definition_hash: the :class:`StateSpec` it reads.
    """

    function: str
    scopes: tuple[str, ...]
    read_keys: tuple[str, ...]
    value_names: tuple[str, ...]
    window_s: int
    resolution_s: int
    limit: int | None
    exclusive: bool
    after: str | None
    definition_hash: str


@dataclass(frozen=True)
class EventPlan:
    """All features of one event type, in dependency order, and the states it writes.

    Attributes:
        name: event type.
        features: features in an order where each comes after its ``deps``.
        writes: definition hashes of the states this event type writes
            (deduplicated, sorted).
    """

    name: str
    features: tuple[Feature, ...]
    writes: tuple[str, ...] = ()

    @property
    def outputs(self) -> tuple[Feature, ...]:
        """The named features (inputs included), in dependency order: what the API and
        replay return for this event. Inline aggregates (:attr:`Feature.inline_of`) are left out."""
        return tuple(f for f in self.features if f.inline_of is None)

    def inline(self, parent: str) -> tuple[Feature, ...]:
        """The inline aggregates of feature ``parent``, in source order (empty if none)."""
        return tuple(f for f in self.features if f.inline_of == parent)

    def feature(self, name: str) -> Feature:
        """Return the feature called ``name``; raises ``KeyError``."""
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(name)


@dataclass(frozen=True)
class Plan:
    """A compiled topology.

    Attributes:
        events: event plans by event type.
        states: aggregate states by definition hash.
    """

    events: dict[str, EventPlan]
    states: dict[str, StateSpec] = field(default_factory=dict)

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        """Return the ``scowl plan --json`` document (SPEC §6).

        Shape: ``{"events": {EVENT: {"features": [{"name", "type", "kind",
        ...}], "writes": [hash, ...]}}, "states": {hash: {...}}}``; aggregate
        features also carry ``function``, ``scopes``, ``window_s``,
        ``resolution_s``, ``limit``, ``definition_hash`` and the rest of
        :class:`AggregateSpec`. A scalar feature that contains aggregates
        (SPEC §2.4) keeps ``"kind": "scalar"`` and lists them, each a full
        aggregate entry with ``"inline_of"`` and ``"text"``, under
        ``"inline_aggregates"``; they are not entries of ``features``.
        """
        events: dict[str, Any] = {}
        for ev in sorted(self.events):
            ep = self.events[ev]
            feats = []
            inline: dict[str, list[dict[str, Any]]] = {}
            for f in ep.features:
                d = _feature_json(f)
                if f.inline_of is not None:
                    inline.setdefault(f.inline_of, []).append(d)
                    continue
                if f.name in inline:
                    d["inline_aggregates"] = inline[f.name]
                feats.append(d)
            events[ev] = {"features": feats, "writes": list(ep.writes)}
        states: dict[str, Any] = {}
        for h in sorted(self.states):
            s = self.states[h]
            states[h] = {
                "definition_hash": s.definition_hash,
                "function": s.function,
                "window_s": s.window_s,
                "resolution_s": s.resolution_s,
                "limit": s.limit,
                "value_types": list(s.value_types),
                "key_types": list(s.key_types),
                "writes": {
                    e: {
                        "event": w.event,
                        "keys": list(w.keys),
                        "values": list(w.values),
                        "where": None if w.where is None else w.where.to_json(),
                    }
                    for e, w in sorted(s.writes.items())
                },
            }
        return {"events": events, "states": states}

    def dumps(self) -> bytes:
        """Return :meth:`to_json` as indented JSON bytes."""
        return orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2)

    @staticmethod
    def from_json(doc: dict[str, Any]) -> "Plan":
        """Inverse of :meth:`to_json` (spans are not restored)."""
        states: dict[str, StateSpec] = {}
        for h, s in doc.get("states", {}).items():
            states[h] = StateSpec(
                definition_hash=s["definition_hash"],
                function=s["function"],
                window_s=s["window_s"],
                resolution_s=s["resolution_s"],
                limit=s["limit"],
                value_types=tuple(s["value_types"]),
                key_types=tuple(s["key_types"]),
                writes={
                    e: WriteSpec(
                        event=w["event"],
                        keys=tuple(w["keys"]),
                        values=tuple(w["values"]),
                        where=None if w["where"] is None else Expr.from_json(w["where"]),
                    )
                    for e, w in s["writes"].items()
                },
            )
        events: dict[str, EventPlan] = {}
        for ev, e in doc["events"].items():
            feats = []
            for d in e["features"]:
                # an inline aggregate comes right before the feature that contains it:
                # its own needs are needs of that feature, so the order stays valid
                feats.extend(_feature_from_json(x) for x in d.get("inline_aggregates", ()))
                feats.append(_feature_from_json(d))
            events[ev] = EventPlan(name=ev, features=tuple(feats), writes=tuple(e.get("writes", ())))
        return Plan(events=events, states=states)


def _feature_json(f: Feature) -> dict[str, Any]:
    """One feature's ``scowl plan --json`` entry, without inline aggregates (see :meth:`Plan.to_json`)."""
    d: dict[str, Any] = {"name": f.name, "type": f.type, "kind": f.kind}
    if f.input is not None:
        d["input"] = {
            "path": list(f.input.path),
            "optional": f.input.optional,
            "default": f.input.default,
            "has_default": f.input.has_default,
        }
    if f.expr is not None:
        d["expr"] = f.expr.to_json()
    if f.aggregate is not None:
        a = asdict(f.aggregate)
        for k in ("scopes", "read_keys", "value_names"):
            a[k] = list(a[k])
        d.update(a)
    if f.inline_of is not None:
        d["inline_of"] = f.inline_of
        d["text"] = f.text
    d["deps"] = list(f.deps)
    if f.span is not None:
        d["span"] = str(f.span)
    return d


def _feature_from_json(d: dict[str, Any]) -> Feature:
    """Inverse of :func:`_feature_json` (the span is not restored)."""
    inp = None
    if "input" in d:
        i = d["input"]
        inp = InputSpec(tuple(i["path"]), i["optional"], i["default"], i["has_default"])
    agg = None
    if d["kind"] == "aggregate":
        kw = {k: d[k] for k in AggregateSpec.__dataclass_fields__}
        for k in ("scopes", "read_keys", "value_names"):
            kw[k] = tuple(kw[k])
        agg = AggregateSpec(**kw)
    return Feature(
        name=d["name"],
        type=d["type"],
        kind=d["kind"],
        input=inp,
        expr=Expr.from_json(d["expr"]) if "expr" in d else None,
        aggregate=agg,
        deps=tuple(d.get("deps", ())),
        inline_of=d.get("inline_of"),
        text=d.get("text"),
    )
