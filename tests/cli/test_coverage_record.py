"""The backfill coverage record ``sc:cov:<hash>`` stays merged (SPEC §5.6, ``writer.status.record_coverage``)."""

from __future__ import annotations

import redis

from writer.status import cov_key, read_coverage, record_coverage


def test_coverage_record_is_kept_merged(redis_url):
    """Disjoint runs stay apart; a run filling the gap merges them into one field with its time; others keep theirs."""
    client = redis.Redis.from_url(redis_url)
    record_coverage(client, ["h1", "h2"], 0, 10, now_ms=100)
    record_coverage(client, ["h1"], 20, 30, now_ms=200)
    record_coverage(client, ["h1"], 50, 60, now_ms=300)
    assert read_coverage(client, ["h1", "h2", "h3"]) == {"h1": [(0, 10), (20, 30), (50, 60)], "h2": [(0, 10)], "h3": []}
    record_coverage(client, ["h1"], 10, 20, now_ms=400)
    assert client.hgetall(cov_key("h1")) == {b"0-30": b"400", b"50-60": b"300"}
    # an older record with touching fields (written before records were merged) is merged on the next run
    client.delete(cov_key("h2"))
    client.hset(cov_key("h2"), mapping={"0-5": 1, "5-9": 2, "40-41": 3})
    record_coverage(client, ["h2"], 60, 70, now_ms=500)
    assert client.hgetall(cov_key("h2")) == {b"0-9": b"2", b"40-41": b"3", b"60-70": b"500"}
