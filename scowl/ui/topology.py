"""What the explorer shows of a plan: features with their definitions, the lineage graph, the lookup forms.

Everything here is a pure function of the compiled :class:`compiler.plan.Plan`
(and, where given, the topology's source text), so the pages and their tests
share one source of truth:

* :func:`event_views` -- per event, its named features (:class:`FeatureView`)
  with kind, type, definition in the language's own words, source
  ``file:line`` and, for aggregates, function, scopes, keys, filter,
  window, resolution, limit and definition hash; inline aggregates
  (SPEC §2.4) nested under the feature that contains them.
* :func:`lineage` -- the lineage graph as cytoscape elements: inputs →
  scalars → aggregates inside each event, and cross-event scopes as edges
  from the writer event's write-side features (keys, values, ``where``) to
  the reading event's aggregate.
* :func:`lookup_fields` / :func:`event_body` -- the form of one event type
  (one field per distinct input path, SPEC §2.2) and the JSON event built
  from a submitted form.

Source: SPEC §2 (language), §6 (``scowl plan``: aggregates report function,
scopes, window, resolution, limit, definition hash).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote

import orjson

from compiler.plan import EventPlan, Expr, Feature, InputSpec, Plan
from scowl.common import format_duration_s

#: URL prefix of the explorer.
UI_PREFIX = "/ui"

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# --------------------------------------------------------------------------- definitions
def input_text(spec: InputSpec, type_name: str) -> str:
    """Return an input's definition as written in Scowl (SPEC §2.2), without the feature name.

    Args:
        spec: the input's path and optionality.
        type_name: its declared type.

    Returns:
        E.g. ``"$.a.b[0] as int"``, ``"$.x as string?"``, ``"$['a b'] as int ? 0"``.

    >>> input_text(InputSpec(("a", "b", 0)), "int"), input_text(InputSpec(("x",), optional=True), "string")
    ('$.a.b[0] as int', '$.x as string?')
    >>> input_text(InputSpec(("a b",), default=0, has_default=True), "int")
    "$['a b'] as int ? 0"
    """
    text = "$" + "".join(_path_step(s) for s in spec.path) + f" as {type_name}"
    if spec.has_default:
        text += " ? " + _literal_text(spec.default, type_name)
    elif spec.optional:
        text += "?"
    return text


def path_text(path: tuple[str | int, ...]) -> str:
    """Return a JSON path as written in Scowl: ``("a", "b", 0)`` → ``"$.a.b[0]"`` (SPEC §2.2)."""
    return "$" + "".join(_path_step(s) for s in path)


def _path_step(step: str | int) -> str:
    if isinstance(step, int):
        return f"[{step}]"
    if _IDENT.match(step):
        return "." + step
    return "['" + step.replace("\\", "\\\\").replace("'", "\\'") + "']"


def _literal_text(value: Any, type_name: str) -> str:
    """A literal in Scowl text (``compiler.codegen.scowl``), ``repr`` if it has none."""
    from compiler.codegen import UnsupportedError
    from compiler.codegen.scowl import to_scowl

    try:
        return to_scowl(Expr("lit", type_name, value=value))
    except (UnsupportedError, TypeError, ValueError):
        return repr(value)


def expr_text(expr: Expr | None) -> str:
    """Return a scalar expression as Scowl text (``compiler.codegen.scowl.to_scowl``), ``"..."`` if it has none."""
    from compiler.codegen import UnsupportedError
    from compiler.codegen.scowl import to_scowl

    if expr is None:
        return "..."
    try:
        return to_scowl(expr)
    except UnsupportedError:
        return "..."


def aggregate_text(plan: Plan, ev: EventPlan, f: Feature) -> str:
    """Return an aggregate feature's definition in the language's syntax, ``last`` included (SPEC §2.4).

    ``compiler.codegen.scowl.aggregate_to_scowl`` with ``last``, e.g.
    ``"Latest<weather_obs>(visib by origin as airport last 3 hours)"``.
    """
    from compiler.codegen.scowl import aggregate_to_scowl

    return aggregate_to_scowl(plan, ev, f, with_last=True)


def definition_text(plan: Plan, ev: EventPlan, f: Feature) -> str:
    """Return a feature's definition (the right side of ``:=``) as Scowl text, from the plan.

    Inputs from their :class:`InputSpec`, scalars through
    ``compiler.codegen.scowl``, named aggregates by :func:`aggregate_text`,
    inline aggregates as their source text (:attr:`Feature.text`).
    """
    if f.kind == "input" and f.input is not None:
        return input_text(f.input, f.type)
    if f.kind == "aggregate":
        if f.inline_of is not None and f.text:
            return f.text
        return aggregate_text(plan, ev, f)
    return expr_text(f.expr)


def source_text(sources: Mapping[str, str], f: Feature) -> str | None:
    """Return the source text of ``f``'s span (whitespace runs collapsed), or ``None`` when unknown.

    Args:
        sources: topology file texts by the plan's file names (relative paths).
        f: the feature.
    """
    span = f.span
    if span is None or span.file not in sources:
        return None
    lines = sources[span.file].splitlines()
    if not 1 <= span.line <= len(lines) or span.end_line > len(lines):
        return None
    if span.line == span.end_line:
        text = lines[span.line - 1][span.col - 1: span.end_col - 1]
    else:
        part = [lines[span.line - 1][span.col - 1:], *lines[span.line: span.end_line - 1],
                lines[span.end_line - 1][: span.end_col - 1]]
        text = "\n".join(part)
    return " ".join(text.split()) or None


def read_sources(directory: str | Path | None) -> dict[str, str]:
    """Read every ``*.scowl`` file under ``directory`` by its ``/``-separated relative path (as spans name them).

    Args:
        directory: the topology directory (a single file is accepted); ``None`` gives ``{}``.

    Returns:
        ``{relative path: text}``; unreadable files are left out.
    """
    if directory is None:
        return {}
    root = Path(directory)
    files = [(root.name, root)] if root.is_file() else [(p.relative_to(root).as_posix(), p)
                                                         for p in root.rglob("*.scowl") if p.is_file()]
    out = {}
    for name, p in files:
        try:
            out[name] = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return out


# --------------------------------------------------------------------------- views
def feature_href(event: str, name: str) -> str:
    """Return the URL of a feature's page: ``/ui/feature/EVENT/NAME`` (``#`` of inline names escaped)."""
    return f"{UI_PREFIX}/feature/{quote(event, safe='')}/{quote(name, safe='')}"


def feature_anchor(event: str, name: str) -> str:
    """Return the HTML id of a feature on the topology page: ``f-EVENT-NAME`` (``#`` → ``-``)."""
    return f"f-{event}-{name.replace('#', '-')}"


@dataclass
class WriterView:
    """How one writer event writes an aggregate's state (``compiler.plan.WriteSpec``), as text.

    Attributes:
        event: writer event type.
        keys: writer features forming the write key.
        values: writer features of the values.
        where: the filter as Scowl text, or ``None``.
    """

    event: str
    keys: list[str]
    values: list[str]
    where: str | None


@dataclass
class AggregateView:
    """The aggregate side of a feature, as shown (``compiler.plan.AggregateSpec`` and its state).

    Attributes:
        function, scopes, read_keys, value_names, window_s, resolution_s,
        limit, exclusive, after, definition_hash: as in ``AggregateSpec``.
        window, resolution: ``window_s`` / ``resolution_s`` as text (``1h``).
        where: the writers' filter as Scowl text (``None``: none; ``"..."``:
            writers filter differently, see ``writers``).
        writers: one :class:`WriterView` per writer event.
    """

    function: str
    scopes: list[str]
    read_keys: list[str]
    value_names: list[str]
    window_s: int
    resolution_s: int
    limit: int | None
    exclusive: bool
    after: str | None
    definition_hash: str
    window: str
    resolution: str
    where: str | None
    writers: list[WriterView]


@dataclass
class FeatureView:
    """One feature as the explorer shows it.

    Attributes:
        event: its event type.
        name: feature name (``parent#k`` for an inline aggregate).
        label: what to call it: the name, or an inline aggregate's source text.
        kind: ``input`` / ``scalar`` / ``aggregate``.
        type: result type name.
        definition: the right side of ``:=`` (source text when known, else
            :func:`definition_text`).
        source: ``file:line`` of its definition, or ``None``.
        deps: features of the same event it needs.
        used_by: features of the same event that need it.
        read_by: ``(event, feature)`` of aggregates of other events whose
            state this feature is written into (cross-event scopes).
        aggregate: the aggregate side, or ``None``.
        inline: the inline aggregates of this feature (SPEC §2.4).
        inline_of: the feature that contains this one, or ``None``.
        href: URL of its page; anchor: its HTML id on the topology page.
    """

    event: str
    name: str
    label: str
    kind: str
    type: str
    definition: str
    source: str | None
    deps: list[str]
    used_by: list[str] = field(default_factory=list)
    read_by: list[tuple[str, str]] = field(default_factory=list)
    aggregate: AggregateView | None = None
    inline: list["FeatureView"] = field(default_factory=list)
    inline_of: str | None = None
    href: str = ""
    anchor: str = ""


def _aggregate_view(plan: Plan, f: Feature) -> AggregateView | None:
    a = f.aggregate
    if a is None:
        return None
    state = plan.states.get(a.definition_hash)
    writers = []
    if state is not None:
        for ev_name, w in sorted(state.writes.items()):
            writers.append(WriterView(ev_name, list(w.keys), list(w.values),
                                      None if w.where is None else expr_text(w.where)))
    filters = {w.where for w in writers}
    where = None if filters in (set(), {None}) else (filters.pop() if len(filters) == 1 else "...")
    return AggregateView(
        function=a.function, scopes=list(a.scopes), read_keys=list(a.read_keys), value_names=list(a.value_names),
        window_s=a.window_s, resolution_s=a.resolution_s, limit=a.limit, exclusive=a.exclusive, after=a.after,
        definition_hash=a.definition_hash, window=format_duration_s(a.window_s),
        resolution=format_duration_s(a.resolution_s), where=where, writers=writers,
    )


def _readers(plan: Plan) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """``{(writer event, writer feature): [(reading event, aggregate feature), ..]}`` over cross-event scopes."""
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for ev in plan.events.values():
        for f in ev.features:
            if f.aggregate is None:
                continue
            state = plan.states.get(f.aggregate.definition_hash)
            if state is None:
                continue
            for writer, w in state.writes.items():
                if writer == ev.name:
                    continue
                for name in sorted(w.deps()):
                    out.setdefault((writer, name), []).append((ev.name, f.name))
    return out


def event_views(plan: Plan, sources: Mapping[str, str] | None = None) -> dict[str, list[FeatureView]]:
    """Return, per event type (sorted), its named features in plan order, inline aggregates nested.

    Args:
        plan: the compiled plan.
        sources: topology file texts by relative path (:func:`read_sources`);
            when a feature's file is there, its definition is its source text.

    Returns:
        ``{event: [FeatureView, ..]}``; a feature's inline aggregates are in
        its ``inline`` list, not in the event's list.
    """
    sources = sources or {}
    readers = _readers(plan)
    out: dict[str, list[FeatureView]] = {}
    for name in sorted(plan.events):
        ev = plan.events[name]
        used: dict[str, list[str]] = {}
        for f in ev.features:
            for d in f.deps:
                used.setdefault(d, []).append(f.name)
        views: dict[str, FeatureView] = {}
        for f in ev.features:
            src = source_text(sources, f)
            if src is not None and f.inline_of is None and ":=" in src:
                src = src.split(":=", 1)[1].strip()
            views[f.name] = FeatureView(
                event=name, name=f.name, label=(f.text or f.name) if f.inline_of else f.name,
                kind=f.kind, type=f.type, definition=src or definition_text(plan, ev, f),
                source=f"{f.span.file}:{f.span.line}" if f.span is not None else None,
                deps=list(f.deps), used_by=used.get(f.name, []), read_by=readers.get((name, f.name), []),
                aggregate=_aggregate_view(plan, f), inline_of=f.inline_of,
                href=feature_href(name, f.name), anchor=feature_anchor(name, f.name),
            )
        for f in ev.features:
            if f.inline_of is not None and f.inline_of in views:
                views[f.inline_of].inline.append(views[f.name])
        out[name] = [views[f.name] for f in ev.features if f.inline_of is None]
    return out


def find_feature(views: Mapping[str, list[FeatureView]], event: str, name: str) -> FeatureView | None:
    """Return the view of feature ``name`` of ``event`` (inline aggregates included), or ``None``."""
    for v in views.get(event, ()):
        if v.name == name:
            return v
        for x in v.inline:
            if x.name == name:
                return x
    return None


# --------------------------------------------------------------------------- lineage
#: Preset layout (px): gap between dependency columns, row height, most rows in one column before it
#: wraps into another, gap between events.
COLUMN_GAP_PX = 60
ROW_PX = 36
MAX_ROWS = 12
EVENT_GAP_PX = 110


def _writers_of(plan: Plan) -> dict[str, set[str]]:
    """``{reading event: {writer events of its cross-event aggregates}}`` (the reading event itself left out)."""
    out: dict[str, set[str]] = {e: set() for e in plan.events}
    for ev in plan.events.values():
        for f in ev.features:
            st = plan.states.get(f.aggregate.definition_hash) if f.aggregate else None
            for writer in (st.writes if st else ()):
                if writer != ev.name and writer in plan.events:
                    out[ev.name].add(writer)
    return out


def event_levels(plan: Plan) -> dict[str, int]:
    """Return each event's column in the lineage graph: 0 for an event that reads no other event's
    writes, else one more than the highest of its writers (a cycle of scopes is cut where it closes).

    Args:
        plan: the compiled plan.

    Returns:
        ``{event: level}``.
    """
    writers = _writers_of(plan)
    level: dict[str, int] = {}

    def _visit(e: str, path: frozenset[str]) -> int:
        if e in level:
            return level[e]
        ws = [w for w in writers[e] if w not in path]
        lv = 1 + max((_visit(w, path | {e}) for w in sorted(ws)), default=-1)
        level[e] = lv
        return lv

    for e in sorted(plan.events):
        _visit(e, frozenset())
    return level


def _label_width_px(label: str) -> int:
    return max(60, min(330, int(len(label) * 6.6) + 20))


def _event_block(ev: EventPlan) -> tuple[list[tuple[Feature, str, float, float]], float, float]:
    """Lay out one event's features: ``([(feature, label, x, y)], width, height)`` relative to its corner.

    Columns by dependency depth (inputs 0, else one right of the deepest
    dependency, at least 1); a column longer than :data:`MAX_ROWS` wraps
    into several.
    """
    depth: dict[str, int] = {}
    for f in ev.features:  # dependency order
        ds = [depth[d] for d in f.deps if d in depth]
        depth[f.name] = 0 if f.kind == "input" else max(1, 1 + max(ds, default=0))
    columns: dict[int, list[Feature]] = {}
    for f in ev.features:
        columns.setdefault(depth[f.name], []).append(f)
    placed: list[tuple[Feature, str, float, float]] = []
    x = 0.0
    height = 0.0
    for col in sorted(columns):
        feats = columns[col]
        for start in range(0, len(feats), MAX_ROWS):
            chunk = feats[start:start + MAX_ROWS]
            labels = [_node_label(f) for f in chunk]
            width = max(_label_width_px(lab) for lab in labels)
            for i, (f, lab) in enumerate(zip(chunk, labels)):
                placed.append((f, lab, x + width / 2, i * ROW_PX))
            height = max(height, len(chunk) * ROW_PX)
            x += width + COLUMN_GAP_PX
    return placed, max(x - COLUMN_GAP_PX, 0.0), height


def lineage(plan: Plan) -> dict[str, Any]:
    """Return the lineage graph of ``plan`` as cytoscape.js elements with preset positions.

    Nodes: one compound node per event (``id`` ``e:EVENT``) holding one node
    per feature (``id`` ``f:EVENT:NAME``), placed in columns by dependency
    depth (inputs in column 0, then each feature right of its deepest
    dependency), so inputs → scalars → aggregates read left to right.
    Events stand in columns too (:func:`event_levels`): an event whose
    aggregates read other events' writes stands right of those writers.
    Edges: ``dep`` from each dependency to the feature (SPEC §2.1), and
    ``scope`` for a cross-event aggregate: from each write-side feature of
    the writer event (keys, values, ``where`` references) to the reading
    event's aggregate, or from the writer event itself when the write uses
    no feature (``Count<e>()``).

    Args:
        plan: the compiled plan.

    Returns:
        ``{"nodes": [{"data": {...}, "position": {"x", "y"}}], "edges": [{"data": {...}}]}``;
        feature nodes carry ``event``, ``name``, ``label``, ``kind``, ``type``,
        ``inline`` (bool), ``width`` and ``href`` (:func:`feature_href`);
        edges ``source``, ``target``, ``kind`` (``dep`` / ``scope``) and, for
        ``scope``, ``state`` (definition hash) and ``function``.
    """
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    levels = event_levels(plan)
    x0 = 0.0
    for lv in sorted(set(levels.values())):
        y0 = 0.0
        widest = 0.0
        for name in sorted(e for e in plan.events if levels[e] == lv):
            ev = plan.events[name]
            placed, width, height = _event_block(ev)
            nodes.append({"data": {"id": f"e:{name}", "label": name, "kind": "event", "event": name}})
            for f, lab, x, y in placed:
                nodes.append({
                    "data": {
                        "id": f"f:{name}:{f.name}", "parent": f"e:{name}", "event": name, "name": f.name,
                        "label": lab, "kind": f.kind, "type": f.type, "inline": f.inline_of is not None,
                        "width": _label_width_px(lab), "href": feature_href(name, f.name),
                    },
                    "position": {"x": x0 + x, "y": y0 + y},
                })
            for f in ev.features:
                for d in f.deps:
                    edges.append({"data": {"id": f"d:{name}:{d}>{f.name}", "source": f"f:{name}:{d}",
                                           "target": f"f:{name}:{f.name}", "kind": "dep"}})
            y0 += max(height, ROW_PX) + EVENT_GAP_PX
            widest = max(widest, width)
        x0 += widest + EVENT_GAP_PX * 1.5
    for name in sorted(plan.events):
        for f in plan.events[name].features:
            st = plan.states.get(f.aggregate.definition_hash) if f.aggregate else None
            if st is None:
                continue
            for writer, w in sorted(st.writes.items()):
                if writer == name or writer not in plan.events:
                    continue
                sources = [f"f:{writer}:{x}" for x in sorted(w.deps())] or [f"e:{writer}"]
                for src in sources:
                    edges.append({"data": {"id": f"s:{src}>{name}:{f.name}", "source": src,
                                           "target": f"f:{name}:{f.name}", "kind": "scope",
                                           "state": st.definition_hash, "function": st.function}})
    return {"nodes": nodes, "edges": edges}


def _node_label(f: Feature) -> str:
    if f.inline_of is not None:
        text = f.text or f.name
        return text if len(text) <= 48 else text[:47] + "…"
    return f.name


# --------------------------------------------------------------------------- lookup
@dataclass
class LookupField:
    """One field of an event type's lookup form: one distinct input path (SPEC §2.2).

    Attributes:
        name: the form field's name (``in.<first feature reading the path>``).
        path: the JSON path steps.
        path_text: the path as written (``$.a.b[0]``).
        type: the input type (of the first feature reading the path).
        features: the input features that read this path.
        required: a feature reads it as required (no ``?``, no default).
        default: the default's text, or ``None``.
    """

    name: str
    path: tuple[str | int, ...]
    path_text: str
    type: str
    features: list[str]
    required: bool
    default: str | None


def lookup_fields(ev: EventPlan) -> list[LookupField]:
    """Return the form fields of event type ``ev``: one per distinct input path, in plan order."""
    out: dict[tuple[str | int, ...], LookupField] = {}
    for f in ev.features:
        if f.kind != "input" or f.input is None:
            continue
        spec = f.input
        fld = out.get(spec.path)
        required = not spec.optional and not spec.has_default
        default = _literal_text(spec.default, f.type) if spec.has_default else None
        if fld is None:
            out[spec.path] = LookupField(f"in.{f.name}", spec.path, path_text(spec.path), f.type, [f.name],
                                         required, default)
        else:
            fld.features.append(f.name)
            fld.required = fld.required or required
    return list(out.values())


def _typed(text: str, type_name: str) -> Any:
    """A form value as the JSON value an event would carry: numbers for int/float, booleans for bool,
    epoch ms for an all-digit time; anything that does not parse stays a string (the evaluator's
    coercion then reports it, SPEC §2.2)."""
    t = text.strip()
    if type_name in ("int", "float"):
        if type_name == "int":
            try:
                return int(t)
            except ValueError:
                pass
        try:
            v = float(t)
        except ValueError:
            return t
        return v if math.isfinite(v) else t
    if type_name == "bool":
        low = t.lower()
        return True if low == "true" else False if low == "false" else t
    if type_name == "time" and re.fullmatch(r"-?\d+", t):
        return int(t)
    return text


def _put(body: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    """Set ``value`` at JSON ``path`` in ``body``, creating objects and arrays (padded with null) on the way."""
    node: Any = body
    for i, step in enumerate(path):
        last = i == len(path) - 1
        nxt: Any = value if last else ([] if isinstance(path[i + 1], int) else {})
        if isinstance(step, int):
            if not isinstance(node, list):
                return
            while len(node) <= step:
                node.append(None)
            if last or node[step] is None:
                node[step] = nxt
            node = node[step]
        else:
            if not isinstance(node, dict):
                return
            if last or step not in node:
                node[step] = nxt
            node = node[step]


def event_body(ev: EventPlan, form: Mapping[str, str]) -> dict[str, Any]:
    """Build the JSON event of a submitted lookup form.

    Args:
        ev: the event type.
        form: the form's fields: ``in.<feature>`` per :func:`lookup_fields`
            entry, ``_time`` (ISO-8601 or epoch ms; empty: the server's
            clock), ``_json`` (an extra JSON object merged first, optional).

    Returns:
        ``{"_type": ev.name, "_time"?: ..., <payload>}``; an empty field is
        left out (a missing input), every other one typed by :func:`_typed`.

    Raises:
        ValueError: ``_json`` is not a JSON object.
    """
    body: dict[str, Any] = {}
    extra = (form.get("_json") or "").strip()
    if extra:
        try:
            parsed = orjson.loads(extra)
        except orjson.JSONDecodeError as e:
            raise ValueError(f"extra JSON is not valid: {e}") from None
        if not isinstance(parsed, dict):
            raise ValueError("extra JSON must be an object")
        body.update(parsed)
    for fld in lookup_fields(ev):
        raw = form.get(fld.name)
        if raw is None or raw.strip() == "":
            continue
        _put(body, fld.path, _typed(raw, fld.type))
    body["_type"] = ev.name
    t = (form.get("_time") or "").strip()
    if t:
        body["_time"] = int(t) if re.fullmatch(r"-?\d+", t) else t
    return body
