"""Replay in arrival order equals the reference on a late timeline, for every function (SPEC §3.3, §5.8).

SPEC §3.3: "Replaying the same events in the same arrival order through the
API or through Spark replay gives identical feature values"; arrival order
offline is the input's order (``_seq``). A timeline of the language tests
(``tests.serving.test_language.timeline``: ties, window-boundary echoes,
null keys, ``after`` times) is displaced so that events arrive up to the
allowed lateness (an hour) late, written as JSONL in that order and replayed
with :func:`writer.replay.run_replay`; every feature of every event must
equal the brute-force reference (:mod:`tests.reference`, which processes
the list in order under the arrival rule), for every aggregate function
under ``by``, ``last``, ``limit``, ``after``, ``exclusive``, a filter and
cross-event scopes. ``tests/serving/test_language.py`` holds the API to
the same reference on such timelines.
"""

from __future__ import annotations

import orjson
import pyarrow.parquet as pq

from compiler import compile_sources
from tests.e2e.helpers import displaced
from tests.reference import reference_values
from tests.serving.test_language import QUERY_INPUTS, VALUES, WRITER_INPUTS, _allowed, _call, agree, timeline
from writer.replay import run_replay

#: Clauses of the common aggregates on ``login``, and the cross-event ones (reading event, scope, clause).
CLAUSES = ["by user last 10 minutes", "by ip where flag last 90 seconds limit 3", "by user after a last 1 day",
           "last 10 seconds exclusive"]
CROSS = [("buy", "login, buy", "by user last 1 day"), ("check", "login", "by ip as user last 90 seconds")]


def _topology() -> str:
    """Every function (its first value list) under :data:`CLAUSES` and :data:`CROSS`."""
    per_event: dict[str, list[str]] = {"login": [], "buy": [], "check": []}
    for fn, values in VALUES.items():
        for clause in CLAUSES:
            if _allowed(fn, clause):
                per_event["login"].append(_call(fn, "", values[0], clause))
        for event, scope, clause in CROSS:
            if _allowed(fn, clause):
                per_event[event].append(_call(fn, scope, values[0], clause))
    lines = {ev: [f"f{ev[0]}{i} := {text}" for i, text in enumerate(texts)] for ev, texts in per_event.items()}
    return ("event login\n" + WRITER_INPUTS + "\n".join(lines["login"])
            + "\n\nevent buy\n" + WRITER_INPUTS + "\n".join(lines["buy"])
            + "\n\nevent check\n" + QUERY_INPUTS + "\n".join(lines["check"]) + "\n")


def test_replay_of_a_late_timeline_equals_the_reference(spark, tmp_path):
    text = _topology()
    result = compile_sources({"t.scowl": text})
    assert result.plan is not None, result.render()
    plan = result.plan
    events = displaced(timeline(seed=3, n=600), seed=9)
    path = tmp_path / "late.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    report = run_replay(spark, plan, [path], tmp_path / "out")
    assert report.rejected == 0
    rows: dict[int, dict] = {}
    for ev in plan.events:
        if (tmp_path / "out" / ev).exists():
            rows.update({r["_seq"]: r for r in pq.read_table(tmp_path / "out" / ev).to_pylist()})
    assert sorted(rows) == list(range(len(events)))
    want = reference_values(plan, events)
    problems = []
    late = 0
    latest = None
    for i, (e, w) in enumerate(zip(events, want)):
        t = rows[i]["_time"]
        late += latest is not None and t < latest
        latest = t if latest is None or t > latest else latest
        for f in plan.events[e["_type"]].features:
            if f.kind != "aggregate":
                continue
            if not agree(f.aggregate.function, w[f.name], rows[i][f.name]):
                problems.append(f"event {i} {f.name} [{f.text or ''}]: reference {w[f.name]!r}, replay {rows[i][f.name]!r}")
    assert late > 100  # the timeline is late where it claims to be
    assert not problems, f"{len(problems)} mismatches:\n" + "\n".join(problems[:60])
