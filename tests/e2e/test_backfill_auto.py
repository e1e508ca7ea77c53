"""``scowl backfill --auto``, the online-overlap refusal and Parquet input (SPEC §5.6, §6).

* Two disjoint backfills ``[a, b)`` and ``[c, d)``, then ``--auto`` (the CLI):
  it computes exactly ``[b, c)``, says so, shows each phase's progress;
  ``scowl status`` then shows one covered interval and no gaps, and the
  store equals one clean backfill of ``[a, d)`` key by key (float sums to
  1e-9 relative, everything else exactly: ``store_dump.diff_stores``).
* A window that would overwrite what the online path wrote is refused with
  a message naming the features and the time (before Spark starts, from the
  CLI), unless ``--force``; ``--auto`` stops where the online writes begin.
* Backfilling the same events from Parquet gives the same store as from JSONL.

Windows are 7 days or longer, over 4 days of events: every tile a run
writes is still within reach of a read after the last run, so the stores of
several runs and of one run are equal key by key (a shorter window leaves,
after several runs, tiles that the last run would not have emitted: equal
reads, different keys).
"""

from __future__ import annotations

import os
import random

import orjson
import pandas as pd
import pytest
import redis

from compiler import compile_sources
from compiler.algebra.storekeys import ONLINE_KEY
from compiler.typesystem import format_time
from scowl import cli
from typer.testing import CliRunner
from tests.cli.test_cli import scowl
from tests.e2e.helpers import post_all
from tests.e2e.store_dump import assert_same_store, db_url, dump_store
from writer.backfill import OnlineOverlapError, run_auto_backfill, run_backfill
from writer.status import store_status

TOPOLOGY = """
event login
user := $.user as string
ip := $.ip as string?
amount := $.amount as float?
items := $.items as int ? 0
n_user := Count(by user last 7 days)
items_ip := Sum(items by ip last 7 days)
avg_user := Average(amount by user)
first_ip := First(ip, items by user last 7 days)
uniq := CountUnique(user by ip last 7 days)
last_ip := Latest(ip by user)
hll := HyperLogLog(user last 7 days)
seq := Sequence(ip by user limit 3)
d_sum := DecayedSum(items by user last 1 day)
busy_ip := Count(by ip where n_user > 40 last 7 days)
"""

DAY = 86_400_000
A = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def iso(ms: int) -> str:
    return format_time(ms)


def make_events(n: int = 2400, seed: int = 3) -> list[dict]:
    """``n`` logins over ``[A, A + 4 days)``, the first at ``A`` exactly, some sharing a time."""
    rng = random.Random(seed)
    times = sorted([A] + [A + rng.randrange(4 * DAY) // 1000 * 1000 for _ in range(n - 1)])
    return [{"_type": "login", "_time": t, "user": f"u{rng.randrange(20)}",
             "ip": rng.choice([f"10.0.0.{i}" for i in range(6)] + [None]),
             "amount": rng.choice([None, round(rng.uniform(0, 100), 2)]), "items": rng.randint(-3, 9)}
            for t in times]


def write_jsonl(path, events) -> None:
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")


@pytest.fixture(scope="module")
def plan():
    result = compile_sources({"t.scowl": TOPOLOGY})
    assert result.plan is not None, result.render()
    return result.plan


@pytest.fixture()
def topo(tmp_path):
    d = tmp_path / "topo"
    d.mkdir()
    (d / "t.scowl").write_text(TOPOLOGY)
    return d


def cli_env(url: str, home) -> dict:
    return {**os.environ, "SCOWL_REDIS_URL": url, "SCOWL_HOME": str(home), "COLUMNS": "250",
            "SCOWL_DRIVER_MEMORY": "1g", "SCOWL_SHUFFLE_PARTITIONS": "2"}


def run_cli_in_process(monkeypatch, url: str, home, *args: str):
    """``scowl ARGS`` in this process (Spark: the test session, already started); returns the click result."""
    for k, v in cli_env(url, home).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(cli.console, "width", 250)
    return CliRunner().invoke(cli.app, list(args))


def test_auto_fills_exactly_the_gap(spark, redis_url, plan, topo, tmp_path, monkeypatch):
    """Backfill [a, b) and [c, d); --auto fills [b, c) only; one covered interval; equal to one run of [a, d)."""
    events = make_events()
    path = tmp_path / "e.jsonl"
    write_jsonl(path, events)
    b, c, d = A + DAY, A + 2 * DAY, A + 4 * DAY
    run_backfill(spark, plan, [path], redis_url, start_ms=A, end_ms=b)
    run_backfill(spark, plan, [path], redis_url, start_ms=c, end_ms=d)
    for s in store_status(plan, redis_url):
        assert s.covered == [(A, b), (c, d)] and s.gaps == [(b, c)], s

    r = run_cli_in_process(monkeypatch, redis_url, tmp_path, "backfill", str(topo), "--events", str(path), "--auto")
    assert r.exit_code == 0, (r.output, r.exception)
    out = " ".join(r.output.split())
    assert f"auto: input events span [{iso(A)}, {iso(events[-1]['_time'] + 1)})" in out
    assert f"auto: missing [{iso(b)}, {iso(c)}) for all states" in out
    assert out.count("auto: missing") == 1
    assert f"backfilled [{iso(b)}, {iso(c)}): {sum(b <= e['_time'] < c for e in events)} events" in out
    # progress of every phase: the input, the dependency stage (busy_ip needs n_user), the features, tiles, coverage
    for phase in ("backfill: reading events", "backfill run 1/1: dependency stage 1: aggregate values",
                  "backfill run 1/1: feature columns per event type", "backfill run 1/1: tiles per aggregate state",
                  "backfill run 1/1: recording coverage"):
        assert phase in out, (phase, out)
    assert f"{len(plan.states)}/{len(plan.states)}" in out

    states = store_status(plan, redis_url)
    for s in states:
        assert s.covered == [(A, d)] and s.gaps == [], s
    r = scowl("status", str(topo), env=cli_env(redis_url, tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(f"{iso(A)} .. {iso(d)}") == len(plan.states)
    assert iso(b) not in r.stdout and iso(c) not in r.stdout  # no gap, no split interval

    clean = db_url(redis_url, 1)
    run_backfill(spark, plan, [path], clean, start_ms=A, end_ms=d)
    three_runs, one_run = dump_store(redis_url), dump_store(clean)
    assert len(one_run) > 2 * len(plan.states)
    assert_same_store(three_runs, one_run, plan)  # float sums within 1e-9 (store_dump), all else exact

    # nothing is missing any more: nothing is written
    again = run_auto_backfill(spark, plan, [path], redis_url)
    assert again.missing == [] and again.runs == []
    assert dump_store(redis_url) == three_runs


def test_auto_without_coverage_fills_the_input_span(spark, redis_url, plan, tmp_path):
    """No coverage: --auto backfills the whole span of the input, widened to whole tiles."""
    events = [e for e in make_events(400) if e["_time"] >= A + DAY + 3_600_000]
    path = tmp_path / "e.jsonl"
    write_jsonl(path, events)
    report = run_auto_backfill(spark, plan, [path], redis_url)
    span = (events[0]["_time"], events[-1]["_time"] + 1)
    assert report.span == span
    assert report.missing == [(*span, frozenset(plan.states))]
    assert [run.window for run in report.runs] == [(A + DAY, span[1])]  # start widened down to the day tile
    assert {s.definition_hash: s.covered for s in store_status(plan, redis_url)} == {
        h: [(A + DAY, span[1])] for h in plan.states}


def test_end_inside_backfilled_time_is_widened_to_the_tile(spark, redis_url, plan, tmp_path):
    """Re-running an earlier part of covered time with an end mid-tile rewrites that tile whole, never truncates it."""
    events = make_events(800)
    path = tmp_path / "e.jsonl"
    write_jsonl(path, events)
    run_backfill(spark, plan, [path], redis_url, start_ms=A, end_ms=A + 3 * DAY)
    before = dump_store(redis_url)
    report = run_backfill(spark, plan, [path], redis_url, start_ms=A, end_ms=A + DAY + 5 * 3_600_000)
    assert report.window == (A, A + 2 * DAY) and report.widened
    after = dump_store(redis_url)
    assert_same_store(after, before, plan)


def hashes(plan, *names):
    feats = {f.name: f for f in plan.events["login"].features}
    return [feats[n].aggregate.definition_hash for n in names]


def test_online_overlap_is_refused_unless_forced(spark, redis_url, tmp_path):
    """After online writes from c + 6 h: a window past c is refused (CLI: exit 1, before Spark); up to c is fine."""
    topology = TOPOLOGY.replace("d_sum := DecayedSum(items by user last 1 day)\n", "")
    plan = compile_sources({"t.scowl": topology}).plan
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(topology)
    events = make_events(1200)
    c = A + 2 * DAY
    online_from = c + 6 * 3_600_000
    history = [e for e in events if e["_time"] < c]
    live = [e for e in events if e["_time"] >= online_from]
    path = tmp_path / "e.jsonl"
    write_jsonl(path, events)

    run_backfill(spark, plan, [path], redis_url, start_ms=A, end_ms=c)
    post_all(plan, redis_url, live[:50])
    online = {k.decode(): int(v) for k, v in redis.Redis.from_url(redis_url).hgetall(ONLINE_KEY).items()}
    n_user, seq, busy = hashes(plan, "n_user", "seq", "busy_ip")
    assert online[n_user] == online[seq] == live[0]["_time"] >= online_from
    before = dump_store(redis_url)

    with pytest.raises(OnlineOverlapError) as err:
        run_backfill(spark, plan, [path], redis_url, start_ms=A, end_ms=c + DAY)
    msg = str(err.value)
    assert "login.n_user" in msg and "login.seq" in msg and iso(live[0]["_time"]) in msg
    assert f"at or before {iso(c)}" in msg and "--force" in msg
    assert n_user in {h for h, _ in err.value.conflicts}
    # even an end inside the online writes' day tile overwrites that tile: refused
    with pytest.raises(OnlineOverlapError):
        run_backfill(spark, plan, [path], redis_url, start_ms=A, end_ms=c + 3_600_000)
    assert dump_store(redis_url) == before

    r = scowl("backfill", str(topo), "--events", str(path), "--start", iso(A), "--end", iso(c + DAY),
              env=cli_env(redis_url, tmp_path))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "refusing to backfill" in r.stderr and "login.n_user" in r.stderr
    assert "starting Spark" not in r.stdout  # refused before Spark starts
    assert dump_store(redis_url) == before

    # up to c: allowed, and re-running it changes no state
    run_backfill(spark, plan, [path], redis_url, start_ms=A + DAY, end_ms=c)
    after = dump_store(redis_url)
    assert_same_store({k: v for k, v in after.items() if not k.startswith(b"sc:cov:")},
                      {k: v for k, v in before.items() if not k.startswith(b"sc:cov:")}, plan)

    # --auto stops where the online writes begin: tile states at c (the day tile), the write log at the first write
    report = run_auto_backfill(spark, plan, [path], redis_url)
    assert report.held_back[n_user] == c and report.held_back[seq] == live[0]["_time"]
    assert all(s >= c and e <= live[0]["_time"] and n_user not in hs for s, e, hs in report.missing)
    assert any(seq in hs for _, _, hs in report.missing)

    # --force overwrites, and status shows the online-writer start time; the tiles it rewrote may lie
    # after the latest tile serving wrote, so their hashes drop serving's _m (writer/sink.py)
    marked = [k for k, (kind, content, _) in before.items() if kind == b"hash" and b"_m" in content]
    assert marked
    run_backfill(spark, plan, [path], redis_url, start_ms=A, end_ms=c + DAY, force=True)
    client = redis.Redis.from_url(redis_url)
    assert not any(client.hexists(k, "_m") for k in marked)
    status = {s.definition_hash: s for s in store_status(plan, redis_url)}
    assert status[n_user].online_since == live[0]["_time"] and status[n_user].covered[-1][1] == c + DAY
    assert status[busy].online_since == online.get(busy)
    r = scowl("status", str(topo), env=cli_env(redis_url, tmp_path))
    assert r.returncode == 0 and iso(live[0]["_time"]) in r.stdout and "online since" in r.stdout


def test_decayed_state_written_online_refuses_any_window(spark, redis_url, tmp_path):
    """A Decayed* state is one value over all history: once the online path wrote it, every run would replace it."""
    plan = compile_sources({"t.scowl": "event login\nuser := $.user as string\n"
                                       "n := Count(by user last 7 days)\nd := DecayedCount(by user last 1 hour)\n"}).plan
    events = make_events(300)
    path = tmp_path / "e.jsonl"
    write_jsonl(path, events)
    post_all(plan, redis_url, [{"_type": "login", "_time": A + 10 * DAY, "user": "u1"}])
    with pytest.raises(OnlineOverlapError, match="Decayed"):
        run_backfill(spark, plan, [path], redis_url, start_ms=A, end_ms=A + DAY)
    n, d = hashes(plan, "n", "d")
    report = run_auto_backfill(spark, plan, [path], redis_url)
    assert report.held_back == {d: None}
    assert [hs for _, _, hs in report.missing] == [frozenset({n})]
    assert not redis.Redis.from_url(redis_url).exists(f"sc:cov:{d}")


def test_parquet_input_gives_the_same_store_as_jsonl(spark, redis_url, plan, tmp_path):
    """The same events as JSONL and as Parquet (typed columns, timestamps) backfill to identical stores."""
    events = make_events(1500, seed=11)
    write_jsonl(tmp_path / "e.jsonl", events)
    df = pd.DataFrame(events)
    df["_time"] = pd.to_datetime(df["_time"], unit="ms", utc=True).astype("datetime64[ms, UTC]")
    (tmp_path / "pq").mkdir()
    df.to_parquet(tmp_path / "pq" / "part-0.parquet", index=False)
    run_backfill(spark, plan, [tmp_path / "e.jsonl"], redis_url, start_ms=A + DAY // 2)
    pq_url = db_url(redis_url, 1)
    run_backfill(spark, plan, [tmp_path / "pq"], pq_url, start_ms=A + DAY // 2)
    from_jsonl, from_parquet = dump_store(redis_url), dump_store(pq_url)
    assert len(from_jsonl) > 2 * len(plan.states)
    assert_same_store(from_jsonl, from_parquet, plan)
