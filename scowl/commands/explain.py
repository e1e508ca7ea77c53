"""``scowl explain DIR FEATURE [--json]``: one feature's definition, plan entry, state and lineage.

FEATURE is ``event.feature`` (an inline aggregate, SPEC §2.4, by its plan
name ``event.parent#k``), or a bare feature name when exactly one event has
it; an unknown or ambiguous name is a user error (exit 1) listing the close
matches. The listing is plain text that does not depend on the terminal's
width (as ``scowl plan`` and ``scowl status``), one block per section::

    departure.delayed_3h: aggregate int
      defined at departures.scowl:17
        delayed_3h := Count(by origin where delayed last 3 hours)

    plan
      kind             aggregate
      type             int
      function         Count
      ...
      definition hash  2d769fcdd2d64cc6

    state 2d769fcdd2d64cc6
      storage          tiles: one partial per tile at every level
      tile sizes       1s, 5s, 15s, 1m, 5m, 15m, 1h
      ttl              3h1s after the last write (W + r)
      written by       departure: key origin (string), where delayed
      read by          departure.delayed_3h

    upstream
      departure.origin (key, write key): input string := $.origin as string
      departure.delayed (where): scalar bool := dep_delay > 15
        departure.dep_delay (uses): input float := $.dep_delay as float?

    downstream
      (no feature depends on it)

Lineage is a tree of ``event.feature (roles): kind type := definition``
lines, two spaces deeper per level. Upstream: what the feature is computed
from -- a scalar ``uses`` the features its expression names; an aggregate
reads its state under its ``key`` (and ``after``) features of the reading
event, and the state is written by each scope event from that event's
``write key``, ``value`` and ``where`` features (so a cross-event
aggregate's upstream holds the writer event's features). Downstream: the
features computed from it, in any event, by the same roles (a feature of one
event written into a state that an aggregate of another event reads is
upstream of that aggregate). A feature already shown in the tree is shown
again with ``(see above)`` and not expanded twice.

``--json`` prints the same as one JSON object: ``event``, ``feature``,
``kind``, ``type``, ``definition`` (``file``, ``line``, ``span``,
``source``, ``text``), ``inline_of``, ``plan`` (the feature's entry of
``scowl plan --json``, SPEC §6), ``state`` (the state's entry of ``scowl
plan --json`` plus ``storage``, ``tile_sizes_s``, ``ttl_s``, ``read_by``;
``null`` but for aggregates), ``upstream`` and ``downstream`` (lists of
nodes ``{event, feature, kind, type, roles, definition, repeated,
children}``).

Sources: SPEC §2.4 (aggregates, scopes, keys), §3.2 (window, resolution),
§5.3 (state expiry ``W + r``), §5.4 (definition hash), §6.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any

import typer

from compiler.plan import EventPlan, Feature, Plan
from scowl.common import UserError, console, format_duration_s

#: Width of the labels of the ``plan`` and ``state`` sections (the longest, ``inline aggregates``, and 2 spaces).
LABEL_WIDTH = 19

#: What each storage kind of ``compiler.algebra.registry`` keeps, in a few words (its module docstring).
STORAGE_TEXT = {
    "tiles": "one partial per tile at every level",
    "seen": "a sorted set of the distinct value tuples, scored by last-seen time",
    "latest": "the latest write",
    "decayed": "O(1) exponentially decayed sums",
    "log": "a sorted set of the {n} latest writes",
}

#: A lineage node: (event type, feature name).
Node = tuple[str, str]


def explain(
    directory: Path = typer.Argument(..., metavar="DIR", help="Topology directory (its *.scowl files)."),
    feature: str = typer.Argument(..., metavar="FEATURE",
                                  help="event.feature, or a feature name that only one event has."),
    json: bool = typer.Option(False, "--json", help="Print the explanation as one JSON object instead of text."),
) -> None:
    """Explain one feature: definition, plan entry, state and lineage.

    Prints where the feature is defined (file:line and its source text), its
    plan entry (kind, type; for aggregates function, scopes, keys, window,
    resolution, limit, exclusive, after and definition hash), for aggregates
    the state it reads (storage, tile sizes, time to live, which events
    write it with which keys, values and filter), and its lineage: the
    features it is computed from (upstream) and the features computed from
    it (downstream), across events too.
    """
    result = _compile(directory)
    plan = result.plan
    ev, f = resolve_feature(plan, feature)
    doc = explain_doc(plan, result.sources, ev, f)
    if json:
        import orjson

        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    for line in explain_lines(doc):
        console.print(line, highlight=False)


def _compile(directory: Path):
    """Compile ``directory`` as ``scowl.common.compile_topology`` does, keeping the sources (for the definitions).

    Raises:
        UserError: not a directory.
        typer.Exit: the topology has errors (exit 1, diagnostics on stderr).
    """
    from compiler import compile_dir

    if not directory.is_dir():
        raise UserError(f"{directory}: not a directory")
    result = compile_dir(directory)
    if result.plan is None:
        sys.stderr.write(result.render().rstrip("\n") + "\n")
        raise typer.Exit(1)
    return result


def resolve_feature(plan: Plan, text: str) -> tuple[EventPlan, Feature]:
    """Find the feature ``text`` names: ``event.feature``, or a bare name unique across events.

    Args:
        plan: the compiled plan.
        text: ``event.feature`` (``event.parent#k`` for an inline aggregate) or ``feature``.

    Returns:
        ``(event plan, feature)``.

    Raises:
        UserError: unknown event or feature, or a bare name several events
            have; the message lists the candidates or close matches.
    """
    qualified = [f"{e}.{f.name}" for e in sorted(plan.events) for f in plan.events[e].features]
    if "." in text:
        event, _, name = text.partition(".")
        if event not in plan.events:
            raise UserError(f"unknown event {event!r} in {text!r}{_close(event, sorted(plan.events))}; "
                            f"the topology has the events {', '.join(sorted(plan.events))}")
        ep = plan.events[event]
        try:
            return ep, ep.feature(name)
        except KeyError:
            raise UserError(f"event {event} has no feature {name!r}{_close(text, qualified)}") from None
    hits = [(plan.events[e], f) for e in sorted(plan.events) for f in plan.events[e].features if f.name == text]
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise UserError(f"feature {text!r} is ambiguous: {len(hits)} events have it; name one of "
                        f"{', '.join(f'{ep.name}.{f.name}' for ep, f in hits)}")
    names = sorted({f.name for e in plan.events.values() for f in e.features})
    close = difflib.get_close_matches(text, names, n=5, cutoff=0.6)
    matches = [q for name in close for q in qualified if q.split(".", 1)[1] == name]  # closest first
    hint = f" (did you mean {', '.join(matches[:8])}?)" if matches else ""
    raise UserError(f"unknown feature {text!r}{hint}; name it as event.feature (`scowl plan DIR` lists them)")


def _close(word: str, candidates: list[str]) -> str:
    """``" (did you mean a, b?)"`` with the close matches of ``word``, or ``""``."""
    close = difflib.get_close_matches(word, candidates, n=5, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


# --------------------------------------------------------------------------- the document


def explain_doc(plan: Plan, sources: dict[str, str], ep: EventPlan, f: Feature) -> dict[str, Any]:
    """Return everything ``scowl explain`` shows about feature ``f`` of event ``ep``, as JSON-able data.

    Args:
        plan: the compiled plan.
        sources: file name (as in spans) -> source text (``compiler.CompileResult.sources``).
        ep: the feature's event.
        f: the feature.

    Returns:
        The ``--json`` document (module docstring).
    """
    doc: dict[str, Any] = {
        "event": ep.name,
        "feature": f.name,
        "kind": f.kind,
        "type": f.type,
        "definition": _definition(sources, f),
        "inline_of": f.inline_of,
        "plan": plan_entry(plan, ep.name, f.name),
        "state": None,
    }
    if f.aggregate is not None:
        doc["state"] = state_doc(plan, f.aggregate.definition_hash)
    lineage = Lineage(plan, sources)
    doc["upstream"] = lineage.tree((ep.name, f.name), upstream=True)
    doc["downstream"] = lineage.tree((ep.name, f.name), upstream=False)
    return doc


def plan_entry(plan: Plan, event: str, name: str) -> dict[str, Any]:
    """Return the entry of feature ``event.name`` in ``scowl plan --json`` (an inline aggregate's from its parent).

    Raises:
        KeyError: no such feature.
    """
    for d in plan.to_json()["events"][event]["features"]:
        if d["name"] == name:
            return d
        for inner in d.get("inline_aggregates", ()):
            if inner["name"] == name:
                return inner
    raise KeyError(f"{event}.{name}")


def state_doc(plan: Plan, definition_hash: str) -> dict[str, Any]:
    """Return a state's ``scowl plan --json`` entry with its storage, tile sizes, time to live and readers.

    Added keys: ``storage`` (``compiler.algebra.registry.storage_of``),
    ``tile_sizes_s`` (``compiler.algebra.windows.levels_s`` of the window
    for tiled storage, else ``[]``), ``ttl_s`` (``registry.expiry_ms`` / 1000:
    ``W + r``, or the decay horizon for ``Decayed*``, SPEC §5.3), ``ttl_rule``
    (``"W + r"`` or ``"40 W"``) and
    ``read_by`` (``event.feature`` of every aggregate feature reading it).
    """
    from compiler.algebra.ops import DECAY_HORIZON
    from compiler.algebra.registry import definition, expiry_ms, storage_of
    from compiler.algebra.windows import levels_s

    state = plan.states[definition_hash]
    doc = dict(plan.to_json()["states"][definition_hash])
    storage = storage_of(state)
    doc["storage"] = storage
    doc["tile_sizes_s"] = list(levels_s(state.window_s)) if storage == "tiles" else []
    doc["ttl_s"] = expiry_ms(state) // 1000
    doc["ttl_rule"] = "W + r" if definition(state.function).expiry == "window" else f"{DECAY_HORIZON} W"
    doc["read_by"] = [f"{e}.{f.name}" for e in sorted(plan.events) for f in plan.events[e].features
                      if f.aggregate is not None and f.aggregate.definition_hash == definition_hash]
    return doc


def _definition(sources: dict[str, str], f: Feature) -> dict[str, Any] | None:
    """The feature's source location and text (``None`` without a span: a plan read back from JSON)."""
    if f.span is None:
        return None
    s = f.span
    lines = sources.get(s.file, "").splitlines()
    source = lines[s.line - 1:s.end_line]
    return {"file": s.file, "line": s.line, "span": str(s), "source": source,
            "text": f.text if f.inline_of else _rhs(span_text(sources, f))}


def span_text(sources: dict[str, str], f: Feature) -> str | None:
    """The exact source text of ``f``'s span, or ``None`` when unknown."""
    if f.span is None or f.span.file not in sources:
        return None
    s = f.span
    lines = sources[s.file].splitlines()
    if s.end_line > len(lines):
        return None
    if s.line == s.end_line:
        return lines[s.line - 1][s.col - 1:s.end_col - 1]
    parts = [lines[s.line - 1][s.col - 1:], *lines[s.line:s.end_line - 1], lines[s.end_line - 1][:s.end_col - 1]]
    return "\n".join(parts)


def _rhs(text: str | None) -> str | None:
    """The definition after ``:=`` on one line: comments dropped, whitespace collapsed."""
    if text is None:
        return None
    _, sep, rhs = text.partition(":=")
    body = rhs if sep else text
    return " ".join(" ".join(_strip_comment(line) for line in body.splitlines()).split())


def _strip_comment(line: str) -> str:
    """``line`` without a ``--`` comment (a ``--`` inside a quoted string is kept)."""
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif line.startswith("--", i):
            return line[:i]
        i += 1
    return line


# --------------------------------------------------------------------------- lineage


class Lineage:
    """The dependency graph of a plan's features, across events (module docstring: roles).

    Args:
        plan: the compiled plan.
        sources: the topology's sources (for the definitions shown in nodes).
    """

    def __init__(self, plan: Plan, sources: dict[str, str]):
        self.plan = plan
        self.sources = sources
        self._up: dict[Node, list[tuple[Node, list[str]]]] = {}
        down: dict[Node, dict[Node, list[str]]] = {}
        for ev in sorted(plan.events):
            for f in plan.events[ev].features:
                edges = self.inputs_of(ev, f)
                self._up[(ev, f.name)] = edges
                for node, roles in edges:
                    down.setdefault(node, {})[(ev, f.name)] = roles
        self._down = {k: list(v.items()) for k, v in down.items()}

    def inputs_of(self, event: str, f: Feature) -> list[tuple[Node, list[str]]]:
        """The direct upstream of feature ``f`` of ``event``: ``[(node, roles)]`` in definition order.

        Roles: ``uses`` (a scalar's expression names it), ``key`` / ``after``
        (an aggregate's read side), ``write key`` / ``value`` / ``where``
        (a feature of a scope event that writes the aggregate's state).

        Source: SPEC §2.4 (``by k as w``, values and ``where`` of the writers).
        """
        edges: dict[Node, list[str]] = {}

        def add(node: Node, role: str) -> None:
            roles = edges.setdefault(node, [])
            if role not in roles:
                roles.append(role)

        ep = self.plan.events[event]
        order = {x.name: i for i, x in enumerate(ep.features)}
        if f.kind == "scalar" and f.expr is not None:
            for name in sorted(f.expr.refs(), key=lambda n: order.get(n, len(order))):
                add((event, name), "uses")
        elif f.kind == "aggregate" and f.aggregate is not None:
            a = f.aggregate
            for k in a.read_keys:
                add((event, k), "key")
            if a.after:
                add((event, a.after), "after")
            state = self.plan.states.get(a.definition_hash)
            for wev, w in sorted(state.writes.items()) if state is not None else ():
                for k in w.keys:
                    add((wev, k), "write key")
                for v in w.values:
                    add((wev, v), "value")
                if w.where is not None:
                    worder = {x.name: i for i, x in enumerate(self.plan.events[wev].features)}
                    for r in sorted(w.where.refs(), key=lambda n: worder.get(n, len(worder))):
                        add((wev, r), "where")
        return list(edges.items())

    def tree(self, root: Node, upstream: bool) -> list[dict[str, Any]]:
        """The lineage of ``root`` as nested nodes (``--json`` shape), upstream or downstream.

        A node already expanded elsewhere in the tree (or on the current
        path: a cross-event cycle of aggregates) is listed with
        ``"repeated": true`` and no children.
        """
        seen: set[Node] = {root}

        def children(node: Node) -> list[dict[str, Any]]:
            out = []
            for child, roles in (self._up.get(node, []) if upstream else self._down.get(node, [])):
                entry = self.node(child, roles)
                if child in seen:
                    entry["repeated"] = True
                    out.append(entry)
                    continue
                seen.add(child)
                entry["children"] = children(child)
                out.append(entry)
            return out

        return children(root)

    def node(self, node: Node, roles: list[str]) -> dict[str, Any]:
        """One lineage node: ``event``, ``feature``, ``kind``, ``type``, ``roles``, ``definition`` (one line)."""
        ev, name = node
        f = self.plan.events[ev].feature(name)
        return {"event": ev, "feature": name, "kind": f.kind, "type": f.type, "roles": list(roles),
                "definition": definition_text(self.sources, f), "repeated": False, "children": []}


def definition_text(sources: dict[str, str], f: Feature) -> str:
    """A feature's definition on one line: its source after ``:=``, else rebuilt from the plan.

    An inline aggregate gives its own source text (``Feature.text``); without
    sources an input gives ``$.path as T[?]``, a scalar its expression
    (``compiler.codegen.scowl.to_scowl``), an aggregate its call as ``scowl
    plan`` shows it.
    """
    if f.inline_of is not None and f.text:
        return f.text
    text = _rhs(span_text(sources, f))
    if text:
        return text
    if f.input is not None:
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in f.input.path)
        return f"{path} as {f.type}{'?' if f.input.optional else ''}"
    if f.expr is not None:
        from compiler.codegen.scowl import to_scowl

        return to_scowl(f.expr)
    if f.aggregate is not None:
        return f"{f.aggregate.function}(...)"
    return ""


# --------------------------------------------------------------------------- text


def explain_lines(doc: dict[str, Any]) -> list[str]:
    """Return the text listing (module docstring) of an :func:`explain_doc` document, one string per line."""
    out = [f"{doc['event']}.{doc['feature']}: {doc['kind']} {doc['type']}"]
    d = doc["definition"]
    if d is not None:
        where = f"{d['file']}:{d['line']}"
        if doc["inline_of"]:
            out.append(f"  defined at {where}, inside {doc['event']}.{doc['inline_of']}: {d['text']}")
        else:
            out.append(f"  defined at {where}")
        out.extend(f"    {line.rstrip()}" for line in d["source"])
    out += ["", "plan"]
    out.extend(_pair(k, v) for k, v in _plan_rows(doc))
    if doc["state"] is not None:
        out += ["", f"state {doc['state']['definition_hash']}"]
        out.extend(_pair(k, v) for k, v in _state_rows(doc["state"]))
    for title, key, empty in (("upstream", "upstream", "(none: computed from the event alone)"),
                              ("downstream", "downstream", "(no feature depends on it)")):
        out += ["", title]
        out.extend(_tree_lines(doc[key], "  ") or [f"  {empty}"])
    return out


def _pair(label: str, value: str) -> str:
    return f"  {label:<{LABEL_WIDTH}}{value}".rstrip()


def _plan_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``plan`` section: kind and type, then per kind the input path, expression or aggregate fields."""
    p = doc["plan"]
    rows = [("kind", p["kind"]), ("type", p["type"])]
    if p["kind"] == "input":
        i = p["input"]
        path = "$" + "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in i["path"])
        rows += [("path", path), ("optional", _yes(i["optional"])),
                 ("default", _literal(i["default"]) if i["has_default"] else "none")]
    elif p["kind"] == "scalar":
        from compiler.codegen.scowl import to_scowl
        from compiler.plan import Expr

        rows.append(("expression", to_scowl(Expr.from_json(p["expr"]))))
        for i, a in enumerate(p.get("inline_aggregates", ())):
            rows.append(("inline aggregates" if i == 0 else "", f"{a['name']} := {a['text']}"))
    else:
        if doc["state"] is not None:
            writers = {ev: w["keys"] for ev, w in doc["state"]["writes"].items()}
        else:
            writers = {}
        keys = []
        for i, k in enumerate(p["read_keys"]):
            written = sorted({ks[i] for ks in writers.values() if i < len(ks) and ks[i] != k})
            keys.append(k + (f" (written as {'|'.join(written)})" if written else ""))
        common = p["scopes"] == [doc["event"]]
        rows += [
            ("function", p["function"]),
            ("scopes", ", ".join(p["scopes"]) + (" (common aggregate)" if common else " (cross-event)")),
            ("keys", ", ".join(keys) or "none (one global key)"),
            ("values", ", ".join(p["value_names"]) or "none"),
            ("window", _seconds(p["window_s"])),
            ("resolution", _seconds(p["resolution_s"])),
            ("limit", str(p["limit"]) if p["limit"] is not None else "none"),
            ("exclusive", _yes(p["exclusive"])),
            ("after", p["after"] or "none"),
            ("definition hash", p["definition_hash"]),
        ]
    if p.get("deps"):
        rows.append(("needs", ", ".join(p["deps"])))
    return rows


def _state_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``state`` section: storage, tile sizes, time to live, writers, readers."""
    storage = s["storage"]
    what = STORAGE_TEXT[storage].format(n=s["limit"])
    if storage == "log" and s["limit"] == 1:
        what = "a sorted set of the latest write"
    rows = [("storage", f"{storage}: {what}"),
            ("tile sizes", ", ".join(format_duration_s(t) for t in s["tile_sizes_s"]) or "none (not tiled)")]
    rows.append(("ttl", f"{format_duration_s(s['ttl_s'])} after the last write ({s['ttl_rule']})"))
    for i, (ev, w) in enumerate(sorted(s["writes"].items())):
        parts = []
        keys = [f"{k} ({t})" for k, t in zip(w["keys"], s["key_types"])]
        parts.append(f"key {', '.join(keys)}" if keys else "global key")
        if w["values"]:
            vals = [f"{v} ({t})" for v, t in zip(w["values"], s["value_types"])]
            parts.append(f"value{'s' if len(vals) > 1 else ''} {', '.join(vals)}")
        if w["where"] is not None:
            parts.append(f"where {_where_text(w['where'])}")
        rows.append(("written by" if i == 0 else "", f"{ev}: {', '.join(parts)}"))
    rows.append(("read by", ", ".join(s["read_by"])))
    return rows


def _tree_lines(nodes: list[dict[str, Any]], indent: str) -> list[str]:
    out = []
    for n in nodes:
        line = f"{indent}{n['event']}.{n['feature']} ({', '.join(n['roles'])}): {n['kind']} {n['type']}"
        if n["definition"]:
            line += f" := {n['definition']}"
        if n["repeated"]:
            line += " (see above)"
        out.append(line)
        out.extend(_tree_lines(n["children"], indent + "  "))
    return out


def _where_text(where: dict[str, Any]) -> str:
    from compiler.codegen import UnsupportedError
    from compiler.codegen.scowl import to_scowl
    from compiler.plan import Expr

    try:
        return to_scowl(Expr.from_json(where))
    except UnsupportedError:
        return "..."


def _seconds(s: int) -> str:
    """``3h (10,800 s)``; ``45s`` when the compact form is in seconds already."""
    text = format_duration_s(s)
    return text if text.endswith("s") and text[:-1].isdigit() else f"{text} ({s:,} s)"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)
