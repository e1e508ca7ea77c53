"""An input given twice in an event's JSON reads as its last value in every engine (docs/semantics.md §5).

The API parses bodies with orjson, which keeps the last value of a repeated
key. Spark's ``try_parse_json`` (the writer's input parse) rejects such an
object unless ``spark.sql.variant.allowDuplicateKeys`` is set, and a rejected
object read every input as missing. The same JSON lines go through
``POST /event`` (the raw bytes, in order, on a fresh store) and through
``scowl.training_set`` on the test session and on a session built without
the setting (the writer sets it on the session it is given): every feature
of every event agrees, and the repeated inputs read as their last values.
"""

from __future__ import annotations

import orjson
import pytest
from fastapi.testclient import TestClient

import scowl
from compiler import compile_sources
from serving.app import create_app
from serving.settings import Settings

TOPOLOGY = """
event e
k := $.k as string
x := $.x as int ? 0
tag := $.meta.tag as string?
n := Count(by k last 1 hour)
total := Sum(x by k last 1 hour)
last_tag := Latest(tag by k)
"""

#: raw JSON lines: repeated input keys (top level and nested), repeated envelope keys, and plain events
LINES = [
    '{"_type": "e", "_time": 1000, "k": "a", "k": "b", "x": 1, "x": 5, "meta": {"tag": "p", "tag": "q"}}',
    '{"_type": "e", "_time": 2000, "k": "b", "x": 2}',
    '{"_type": "e", "_time": 3000, "k": "a", "x": 7, "meta": {"tag": "r"}, "meta": {"tag": "s"}}',
    '{"_type": "x", "_type": "e", "_time": 4000, "k": "a", "x": 1, "x": 2, "x": 3}',
    '{"_type": "e", "_time": 5000, "k": "b", "k": "a", "x": 4}',
]


def _api(plan, url: str) -> list[dict]:
    app = create_app(plan, Settings(), redis_url=url)
    out = []
    with TestClient(app) as c:
        for line in LINES:
            r = c.post("/event", content=line.encode(), headers={"content-type": "application/json"})
            assert r.status_code == 200, r.text
            out.append(r.json()["features"])
    return out


def _replay(plan, path, spark) -> list[dict]:
    rows = scowl.training_set(plan, str(path), spark).orderBy("_seq").collect()
    return [{f: r[f] for f in ("k", "x", "tag", "n", "total", "last_tag")} for r in rows]


@pytest.fixture
def plan():
    return compile_sources({"t.scowl": TOPOLOGY}).plan


def test_repeated_input_keys_read_as_last_value_in_api_and_replay(plan, redis_url, spark, tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    api = _api(plan, redis_url)
    got = _replay(plan, path, spark)
    want = [{f: a[f] for f in ("k", "x", "tag", "n", "total", "last_tag")} for a in api]
    assert got == want
    # the last values, not the first nor missing
    assert [(r["k"], r["x"], r["tag"]) for r in got] == [
        ("b", 5, "q"), ("b", 2, None), ("a", 7, "s"), ("a", 3, None), ("a", 4, None)]
    assert [r["total"] for r in got] == [5, 7, 7, 10, 14]


def test_the_writer_sets_duplicate_keys_on_a_session_without_it(plan, spark, tmp_path):
    """A caller's session without the setting gets it from the writer (before any frame is analysed)."""
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    key = "spark.sql.variant.allowDuplicateKeys"
    previous = spark.conf.get(key)
    spark.conf.set(key, "false")
    try:
        got = _replay(plan, path, spark)
        assert spark.conf.get(key) == "true"
    finally:
        spark.conf.set(key, previous)
    assert [(r["k"], r["x"], r["tag"]) for r in got][:1] == [("b", 5, "q")]
