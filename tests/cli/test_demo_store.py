"""``scowl demo`` keeps its store and, on a re-run, removes only what it stored for its own topology."""

from __future__ import annotations

from pathlib import Path

import redis

from compiler import compile_sources
from compiler.algebra.keys import definition_hash_of
from scowl.demo import clear_plan_state, next_steps
from tests.e2e.helpers import post_all
from writer.status import ONLINE_KEY, cov_key, record_coverage

DEMO = "event pay\nuser := $.user as string\nn := Count(by user last 1 hour)\ns := Sum(n by user)\n"
OTHER = "event pay\nuser := $.user as string\nm := Count(by user last 2 hours)\n"


def test_clear_plan_state_removes_only_that_plans_states(redis_url):
    """State keys, coverage records and online-start fields of the plan go; another plan's data stay, untouched."""
    demo, other = compile_sources({"d.scowl": DEMO}).plan, compile_sources({"o.scowl": OTHER}).plan
    events = [{"_type": "pay", "user": f"u{i % 4}"} for i in range(20)]  # at server time: nothing expires
    post_all(demo, redis_url, events)
    post_all(other, redis_url, events)
    client = redis.Redis.from_url(redis_url)
    record_coverage(client, sorted(demo.states) + sorted(other.states), 0, 10, now_ms=1)
    kept = {k: client.dump(k) for k in client.keys("*") if definition_hash_of(k.decode()) not in demo.states}
    kept.pop(ONLINE_KEY.encode())
    assert len(kept) == 4 + 1  # other's 4 users and its coverage record
    removed = clear_plan_state(redis_url, demo)
    assert removed == 2 * 4 + 2  # two states of 4 users each, two coverage records
    assert {k: client.dump(k) for k in client.keys("*") if k != ONLINE_KEY.encode()} == kept
    assert set(client.hkeys(ONLINE_KEY)) == {h.encode() for h in other.states}
    assert not any(client.exists(cov_key(h)) for h in demo.states)
    assert clear_plan_state(redis_url, demo) == 0


def test_next_steps_name_the_store_the_data_and_the_commands(tmp_path, monkeypatch):
    """Paths under the current directory are relative; the replay command takes both files, one --events each."""
    monkeypatch.chdir(tmp_path)
    home = Path(".scowl")
    lines = next_steps(home, tmp_path / "examples" / "flights", home / "demo" / "h.jsonl", home / "demo" / "l.jsonl")
    assert lines[0] == "The demo's store is kept under .scowl/store; its events are in .scowl/demo/h.jsonl and .scowl/demo/l.jsonl."
    assert "  scowl status examples/flights" in lines and "  scowl serve examples/flights" in lines
    assert "      --events .scowl/demo/h.jsonl --events .scowl/demo/l.jsonl \\" in lines
    assert lines[-2] == "  scowl init my-features"  # then a project of one's own
    other = next_steps(tmp_path / "h2", Path("/elsewhere/flights"), tmp_path / "h2" / "demo" / "h.jsonl",
                       tmp_path / "h2" / "demo" / "l.jsonl")
    assert "  SCOWL_HOME=h2 scowl status /elsewhere/flights" in other
    assert "  SCOWL_HOME=h2 scowl ui /elsewhere/flights" in other
    assert "  scowl explain /elsewhere/flights departure.departures_1h" in other
    external = next_steps(home, tmp_path / "t", home / "h", home / "l", external_store=True)
    assert external[0].startswith("The demo's store is kept in SCOWL_REDIS_URL;")
    assert "  scowl status t" in external
