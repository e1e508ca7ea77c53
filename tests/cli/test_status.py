"""``scowl status``: coverage, gaps and store size per aggregate state (SPEC §5.6, §6)."""

from __future__ import annotations

import os

import orjson

from compiler import compile_dir, compile_sources
from tests.cli.test_cli import scowl
from writer.backfill import run_backfill
from writer.status import merge_intervals, store_status

TOPOLOGY = """
event login
user := $.user as string
n_user := Count(by user last 1 hour)
seq_user := Sequence(user by user limit 2)
"""

def status_lines(tmp_path, redis_url: str, columns: str = "80") -> list[str]:
    """``scowl status`` of a topology directory holding :data:`TOPOLOGY` over ``redis_url``: its output lines
    (exit 0 asserted)."""
    topo = tmp_path / "topo"
    topo.mkdir(exist_ok=True)
    (topo / "t.scowl").write_text(TOPOLOGY)
    r = scowl("status", str(topo), env={**os.environ, "SCOWL_REDIS_URL": redis_url, "COLUMNS": columns})
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


DAY = 86_400_000
START = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def test_merge_intervals_reports_gaps():
    """Touching intervals merge; holes between them are gaps."""
    assert merge_intervals([]) == ([], [])
    assert merge_intervals([(10, 20), (0, 5), (5, 8), (15, 30)]) == ([(0, 8), (10, 30)], [(8, 10)])


def test_status_after_two_disjoint_backfills(spark, store_url, tmp_path):
    """Two backfill runs with a hole between them: two covered intervals, one gap, keys and bytes counted;
    on a single server and on a 3-master cluster named by one node (SPEC §5.1: keys of every node)."""
    redis_url = store_url
    plan = compile_sources({"t.scowl": TOPOLOGY}).plan
    events = [{"_type": "login", "_time": START + i * 3_600_000, "user": f"u{i % 3}"} for i in range(72)]
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    run_backfill(spark, plan, [path], redis_url, start_ms=START, end_ms=START + DAY)
    run_backfill(spark, plan, [path], redis_url, start_ms=START + 2 * DAY, end_ms=START + 3 * DAY)
    states = store_status(plan, redis_url)
    assert len(states) == 2
    for s in states:
        assert s.covered == [(START, START + DAY), (START + 2 * DAY, START + 3 * DAY)], s
        assert s.gaps == [(START + DAY, START + 2 * DAY)]
        assert s.keys >= 1 and s.bytes > 0
    # the 30-day write log keeps all three users; the 1-hour Count only what a read after the end can use
    assert {s.function: s.keys for s in states}["Sequence"] == 3
    assert sorted(f for s in states for f in s.features) == ["login.n_user", "login.seq_user"]

    lines = status_lines(tmp_path, redis_url, columns="200")
    i = lines.index("login.seq_user")
    assert lines[i + 1].startswith("  Sequence limit 2, window 30d, resolution 1m, state ")
    assert lines[i + 2:i + 6] == ["  backfilled 2024-01-01T00:00:00.000Z .. 2024-01-02T00:00:00.000Z",
                                  "  backfilled 2024-01-03T00:00:00.000Z .. 2024-01-04T00:00:00.000Z",
                                  "  gap 2024-01-02T00:00:00.000Z .. 2024-01-03T00:00:00.000Z",
                                  "  online: never"]
    assert lines[i + 6].endswith(" bytes") and lines[i + 6].startswith("  3 keys, ")
    assert "login.n_user" in lines


def test_status_with_unreachable_store_is_a_user_error(tmp_path):
    """A store that does not answer: exit 1 with a message, no traceback."""
    (tmp_path / "t.scowl").write_text(TOPOLOGY)
    r = scowl("status", str(tmp_path), env={**os.environ, "SCOWL_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "store unavailable" in r.stderr


def test_status_names_inline_aggregates_by_their_feature_and_text(redis_url, tmp_path):
    """An aggregate inside a scalar feature (SPEC §2.4) is listed as ``event.parent: <its text>``; the listing is
    one block per state that never depends on the terminal's width."""
    (tmp_path / "t.scowl").write_text("event pay\nuser := $.user as string\namount := $.amount as int\n"
                                      "past_money := Sum(amount by user last 30 days) - Sum(amount by user last 2 days)\n"
                                      "n := Count(by user last 90 seconds)\n")
    plan = compile_dir(tmp_path).plan
    h = {a.text or a.name: a.aggregate.definition_hash for a in plan.events["pay"].features if a.aggregate}
    r = scowl("status", str(tmp_path), env={**os.environ, "SCOWL_REDIS_URL": redis_url, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].startswith("  server ") and lines[2].startswith("  persistence ")  # (the test below)
    assert lines[:1] + lines[3:] == [
        f"store {redis_url}: 3 aggregate states",
        "",
        "pay.n",
        f"  Count, window 90s, resolution 1s, state {h['n']}",
        "  backfilled: never",
        "  online: never",
        "  0 keys, 0 bytes",
        "",
        "pay.past_money: Sum(amount by user last 2 days)",
        f"  Sum, window 2d, resolution 1m, state {h['Sum(amount by user last 2 days)']}",
        "  backfilled: never",
        "  online: never",
        "  0 keys, 0 bytes",
        "",
        "pay.past_money: Sum(amount by user last 30 days)",
        f"  Sum, window 30d, resolution 1m, state {h['Sum(amount by user last 30 days)']}",
        "  backfilled: never",
        "  online: never",
        "  0 keys, 0 bytes",
    ]


def test_status_shows_the_event_stream(store_url, tmp_path):
    """With ``SCOWL_EVENT_STREAM`` set, ``scowl status`` ends with the stream's block: entries (and all ever
    appended), bytes, the append times of its first and last entries, and its cap; empty when it does not
    exist. On one server and on a cluster named by one node."""
    from writer.redisio import connect
    from writer.status import StreamStatus, stream_status

    (tmp_path / "t.scowl").write_text(TOPOLOGY)
    assert stream_status(store_url, "ev") == StreamStatus("ev")  # no such key
    client = connect(store_url)
    for i in range(5):
        client.xadd("ev", {"event": orjson.dumps({"_type": "login", "user": f"u{i}"})}, id=f"{START + i * 1000}-0")
    client.xtrim("ev", maxlen=3, approximate=False)
    got = stream_status(store_url, "ev")
    assert (got.entries, got.added, got.first_ms, got.last_ms) == (3, 5, START + 2000, START + 4000)
    assert got.bytes > 0
    env = {**os.environ, "SCOWL_REDIS_URL": store_url, "SCOWL_EVENT_STREAM": "ev",
           "SCOWL_EVENT_STREAM_MAXLEN": "1000", "COLUMNS": "80"}
    r = scowl("status", str(tmp_path), env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith(
        "\nevent stream ev (SCOWL_EVENT_STREAM)\n"
        f"  3 entries (5 appended in all), {got.bytes:,} bytes\n"
        "  appended 2024-01-01T00:00:02.000Z .. 2024-01-01T00:00:04.000Z\n"
        "  capped at about 1,000 entries (SCOWL_EVENT_STREAM_MAXLEN)\n"), r.stdout
    client.delete("ev")
    del env["SCOWL_EVENT_STREAM_MAXLEN"]
    r = scowl("status", str(tmp_path), env=env)
    assert r.stdout.endswith("\nevent stream ev (SCOWL_EVENT_STREAM)\n  empty\n"
                             "  no cap: trimmed only by its reader (scowl stream --trim-source) or by hand\n"), r.stdout
    client.close()


def test_status_lists_the_stream_checkpoints_of_scowl_home(redis_url, tmp_path):
    """``scowl stream`` (its default checkpoint, under ``SCOWL_HOME/checkpoints``) then ``scowl status``: a block
    per checkpoint with its source, its totals and its last batch (its id, time and watermark); a directory there
    that is no checkpoint is left out; none at all, no block."""
    import time

    from scowl.commands.status import checkpoint_lines
    from writer.status import checkpoint_status

    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    env = {**os.environ, "SCOWL_REDIS_URL": redis_url, "SCOWL_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    r = scowl("status", str(topo), env=env, cwd=tmp_path)
    assert r.returncode == 0 and "stream checkpoints" not in r.stdout, r.stdout
    src = tmp_path / "in"
    src.mkdir()
    events = [{"_type": "login", "_time": START + i * 60_000, "user": f"u{i % 3}"} for i in range(30)]
    (src / "a.jsonl").write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\nnot json\n")
    before = int(time.time() * 1000)
    r = scowl("stream", str(topo), "--source", f"dir:{src}", "--available-now", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (tmp_path / "home" / "checkpoints" / "not-a-checkpoint").mkdir()
    r = scowl("status", str(topo), env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    at = lines.index(f"stream checkpoints under {tmp_path / 'home' / 'checkpoints'}")
    (ck,) = checkpoint_status(tmp_path / "home" / "checkpoints")
    assert (ck.source, ck.batches, ck.events, ck.late, ck.invalid, ck.last_batch) == (f"dir:{src}", 1, 30, 0, 1, 0)
    assert ck.max_time_ms == START + 29 * 60_000 and ck.watermark_ms is None
    assert before <= ck.last_batch_ms <= int(time.time() * 1000)
    name = os.path.basename(ck.path)
    assert lines[at + 1:at + 3] == [f"  {name} (dir:{src})", "    1 batch: 30 events, 0 late, 1 invalid set aside"]
    assert lines[at + 3].startswith("    last batch 0 started ") and lines[at + 3].endswith(" ago); watermark none")
    assert len(lines) == at + 4  # the not-a-checkpoint directory is not listed
    # the age and a watermark, with a clock of the test's
    ck.watermark_ms = START
    assert checkpoint_lines(tmp_path, [ck], now_ms=ck.last_batch_ms + 250_000)[3] == (
        f"    last batch 0 started {_iso(ck.last_batch_ms)} (4m10s ago); watermark 2024-01-01T00:00:00.000Z")


def _iso(ms: int) -> str:
    from compiler.typesystem import format_time

    return format_time(ms)


def test_status_says_what_the_server_is_and_what_a_restart_of_it_keeps(redis_url, redis_cluster, tmp_path):
    """The lines under ``store``: software, uptime, memory, and persistence as a restart sees it: the test
    store (no append-only file, no snapshots), a store with an append-only file fsynced always, a snapshot
    schedule (from a ``ServerStatus``), and a 3-master cluster."""
    import re

    from scowl.commands.status import server_lines
    from tests.store_server import StoreServer
    from writer.status import ServerStatus, server_status

    lines = status_lines(tmp_path, redis_url)
    assert re.fullmatch(r"  server Valkey \d+\.\d+\.\d+, up \d+[smhd]\S*; memory [\d,.]+ MB, no maxmemory "
                        r"\(policy \S+\)", lines[1]), lines[1]
    assert lines[2] == ("  persistence none while it runs (no append-only file, no snapshot schedule): a crash loses "
                        "every state written since it started (the embedded store saves when scowl stops it)")
    server = StoreServer(tmp_path / "aof")
    (tmp_path / "aof").mkdir()
    server.start()
    try:
        aof = server_status(server.url)
        assert aof.aof_fsync == "always" and aof.primaries == 1
        assert server_lines(aof)[1] == "  persistence append-only file, fsync always: a restart keeps every write"
    finally:
        server.stop()
    snap = ServerStatus("Redis 7.2.4", 1, 7_385, 81_900_000, 1_000_000_000, "noeviction", None, "3600 1 300 100",
                        1_000_000)
    assert server_lines(snap, now_s=1_000_000 + 330) == [
        "  server Redis 7.2.4, up 2h3m; memory 81.9 MB, of maxmemory 1,000.0 MB (policy noeviction)",
        "  persistence snapshots (save 3600 1 300 100), the last 5m ago: a restart loses what was written since "
        "the last one"]
    cluster = server_status(redis_cluster.url)
    assert cluster.primaries == redis_cluster.masters
    assert f"({redis_cluster.masters} primaries)" in server_lines(cluster)[0]
