"""``scowl plan DIR [--json]`` (SPEC §6): the compiled plan, as a listing or as JSON.

The listing does not depend on the terminal's width (nothing is truncated,
nothing is wrapped by scowl) and reads the same through a pipe. Per event,
one line per named feature: name, type, kind; an aggregate adds its state
(definition hash, SPEC §5.4) and, on a second line, its definition in the
language's own words with the window and resolution (SPEC §2.4, §3.2):

    event departure: 7 inputs, 4 scalars, 20 aggregates
      origin         string  input
      departures_1h  int     aggregate  state 30b863a1c2d3e4f5
        Count(by origin), window 1h, resolution 1s

An aggregate written inside a scalar feature (an *inline aggregate*, SPEC
§2.4) is listed beneath that feature, indented, under its source text.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from compiler.plan import EventPlan, Feature, Plan
from scowl.common import compile_topology, console, format_duration_s, plural

#: Widest name and type column before a longer value just pushes its own line.
MAX_NAME_WIDTH = 28
MAX_TYPE_WIDTH = 10


def plan(
    directory: Path = typer.Argument(..., metavar="DIR", help="Topology directory (its *.scowl files)."),
    json: bool = typer.Option(False, "--json", help="Print the plan as JSON (shape: docs/semantics.md and README) instead of the listing."),
) -> None:
    """Print the compiled plan: features, kinds, aggregates.

    Per event, its features with their type and kind.
    Each aggregate shows its definition (function, scopes, values, by keys,
    as write keys, after, limit, exclusive), window, resolution and state
    (the definition hash that namespaces its data in the store). Aggregates
    written inside a scalar feature are listed beneath it.
    """
    p = compile_topology(directory)
    if json:
        sys.stdout.write(p.dumps().decode() + "\n")
        return
    for line in plan_lines(p):
        console.print(line, highlight=False)


def plan_lines(p: Plan) -> list[str]:
    """Return the listing of ``scowl plan`` (module docstring), one string per line.

    Args:
        p: the compiled plan.

    Returns:
        The lines, events in name order, a blank line between events.
    """
    out: list[str] = []
    for name in sorted(p.events):
        if out:
            out.append("")
        out.extend(event_lines(p, p.events[name]))
    return out


def event_lines(p: Plan, ev: EventPlan) -> list[str]:
    """Return the lines of one event of the listing (module docstring).

    Args:
        p: the plan (for the states' write keys).
        ev: the event.

    Returns:
        A header line, then per named feature one line (two for an
        aggregate), each followed by the lines of its inline aggregates.
    """
    named = ev.outputs
    kinds = [f.kind for f in named]
    counts = ", ".join(plural(kinds.count(k), k)
                       for k in ("input", "scalar", "aggregate") if k in kinds)
    lines = [f"event {ev.name}: {counts or 'no features'}"]
    name_w = min(MAX_NAME_WIDTH, max((len(f.name) for f in named), default=0))
    type_w = min(MAX_TYPE_WIDTH, max((len(f.type) for f in named), default=0))
    for f in named:
        lines.extend(_feature_lines(p, ev, f, f.name, "  ", name_w, type_w))
        for inner in ev.inline(f.name):
            label = inner.text or inner.name
            lines.extend(_feature_lines(p, ev, inner, label, "    ", len(label), len(inner.type)))
    return lines


def _feature_lines(p: Plan, ev: EventPlan, f: Feature, label: str, indent: str, name_w: int, type_w: int) -> list[str]:
    """One line for ``f`` (``label``, type, kind[, state]); an aggregate adds its definition line."""
    head = f"{indent}{label:<{name_w}}  {f.type:<{type_w}}  {f.kind}"
    a = f.aggregate
    if a is None:
        return [head.rstrip()]
    return [f"{head}  state {a.definition_hash}",
            f"{indent}  {aggregate_call(p, ev, f)}, window {format_duration_s(a.window_s)}, "
            f"resolution {format_duration_s(a.resolution_s)}"]


def aggregate_call(p: Plan, ev: EventPlan, f: Feature) -> str:
    """Return an aggregate feature's definition in the language's syntax, without ``last`` (SPEC §2.4).

    ``compiler.codegen.scowl.aggregate_to_scowl``, e.g.
    ``"Latest<weather_obs>(visib by origin as airport)"``.
    """
    from compiler.codegen.scowl import aggregate_to_scowl

    return aggregate_to_scowl(p, ev, f)
