"""``scowl init DIR``: the starter project (scowl.starter) and what the command says about it.

* the command writes a topology that compiles and a timeline of the last 24
  hours, prints the next commands, never overwrites without ``--force`` and
  answers an unwritable place in one line;
* the starter's features take many values on its timeline, and they are
  the same online (``POST /batch`` on a real store), in replay (Spark) and
  in the reference (``tests.reference``): what a new user runs first holds
  the product's promise too.

Source: SPEC §3.3, §5.8, §6 (exit codes).
"""

from __future__ import annotations

import time

import orjson
import pyarrow.parquet as pq
import pytest

from compiler import compile_dir
from scowl.starter import EVENTS_FILE, SPAN_MS, TOPOLOGY, TOPOLOGY_FILE, starter_events
from tests.cli.test_cli import scowl
from tests.e2e.helpers import assert_values_equal, post_all
from tests.reference import reference_values
from tests.serving.helpers import compile_text
from writer.replay import run_replay

END_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _ms(iso: str) -> int:
    from compiler.typesystem import parse_time

    return parse_time(iso)


@pytest.mark.slow
def test_init_writes_a_project_every_command_takes(tmp_path):
    project = tmp_path / "my features"  # a space: the printed commands quote it
    before = time.time() * 1000
    r = scowl("init", str(project))
    after = time.time() * 1000
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    plan = compile_dir(project).plan
    assert plan is not None and sorted(plan.events) == ["login", "payment"]
    assert (project / TOPOLOGY_FILE).read_text() == TOPOLOGY
    lines = (project / EVENTS_FILE).read_bytes().splitlines()
    events = [orjson.loads(line) for line in lines]
    times = [_ms(e["_time"]) for e in events]
    assert times == sorted(times) and 800 <= len(events) <= 1500
    assert before - SPAN_MS <= times[0] and times[-1] < after - 8 * 60_000
    quoted = f"'{project}'"
    n = sum(len(ev.outputs) for ev in plan.events.values())
    assert r.stdout.splitlines()[:3] == [
        f"wrote {project / TOPOLOGY_FILE}: 2 event types, {n} features, {len(plan.states)} aggregate states",
        f"wrote {project / EVENTS_FILE}: {len(events):,} events, "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(times[0] / 1000))} to "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(times[-1] / 1000))} UTC",
        "next:",
    ]
    assert f"  scowl check {quoted}" in r.stdout.splitlines()
    assert f"scowl replay {quoted} --events '{project / EVENTS_FILE}' --out '{project / 'training'}'" in r.stdout
    assert f"scowl backfill {quoted} --events '{project / EVENTS_FILE}'" in r.stdout
    check = scowl("check", str(project))
    assert check.returncode == 0 and check.stdout.startswith("ok: 2 events, "), check.stderr


@pytest.mark.slow
def test_init_never_overwrites_without_force(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    (project / "notes.txt").write_text("mine")
    (project / TOPOLOGY_FILE).write_text("event e\nn := Count(last 1 hour)\n")
    r = scowl("init", str(project))
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr == f"error: {project / TOPOLOGY_FILE} already exists (--force overwrites it and {project}'s " \
                       f"other starter file)\n"
    assert (project / TOPOLOGY_FILE).read_text() == "event e\nn := Count(last 1 hour)\n"
    assert not (project / EVENTS_FILE).exists()  # nothing written
    forced = scowl("init", str(project), "--force")
    assert forced.returncode == 0, forced.stderr
    assert (project / TOPOLOGY_FILE).read_text() == TOPOLOGY and (project / EVENTS_FILE).exists()
    assert (project / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_init_where_a_file_stands_is_one_line(tmp_path):
    (tmp_path / "taken").write_text("a file, not a directory")
    r = scowl("init", str(tmp_path / "taken" / "p"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"error: cannot write the project in {tmp_path / 'taken' / 'p'}: "), r.stderr
    assert r.stderr.count("\n") == 1


def test_the_timeline_is_seeded_and_ends_before_its_end():
    a, b = starter_events(END_MS), starter_events(END_MS)
    assert a == b and starter_events(END_MS, seed=8) != a
    shifted = starter_events(END_MS + 3_600_000)
    assert [{k: v for k, v in e.items() if k != "_time"} for e in shifted] == \
           [{k: v for k, v in e.items() if k != "_time"} for e in a]
    times = [_ms(e["_time"]) for e in a]
    assert END_MS - SPAN_MS <= min(times) and max(times) < END_MS - 8 * 60_000


@pytest.fixture(scope="module")
def starter():
    plan = compile_text(TOPOLOGY)
    events = starter_events(END_MS)
    return plan, events, reference_values(plan, events)


def test_the_starter_features_take_many_values(starter):
    plan, events, expected = starter
    logins = [v for e, v in zip(events, expected) if e["_type"] == "login"]
    payments = [v for e, v in zip(events, expected) if e["_type"] == "payment"]
    assert max(v["domains_ip_10m"] for v in logins) >= 10  # the burst of one IP
    assert {v["new_ip"] for v in logins} == {True, False}
    assert sum(v["prev_ip"] is None for v in logins) < len(logins) / 4
    assert len({v["logins_user_1h"] for v in logins}) >= 3 and len({v["users_ip_1d"] for v in logins}) >= 3
    assert {v["big_payments_7d"] for v in payments} >= {0, 1}
    assert {v["cards_user_1d"] for v in payments} == {1, 2}
    assert sum(v["amount_vs_avg"] is None for v in payments) <= 40  # one first payment per user
    assert max(v["logins_user_1h"] for v in payments) >= 2


@pytest.mark.slow
def test_the_starter_online_and_in_replay_equals_the_reference(starter, spark, redis_url, tmp_path):
    plan, events, expected = starter
    online = post_all(plan, redis_url, events)
    assert_values_equal(online, expected, "online")
    path = tmp_path / EVENTS_FILE
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    run_replay(spark, plan, [path], tmp_path / "out")
    for ev in ("login", "payment"):
        rows = sorted(pq.read_table(tmp_path / "out" / ev).to_pylist(), key=lambda r: r["_seq"])
        assert len(rows) == sum(e["_type"] == ev for e in events)
        names = [f.name for f in plan.events[ev].outputs]
        assert_values_equal([{k: r[k] for k in names} for r in rows], [expected[r["_seq"]] for r in rows],
                            f"replay {ev}")
