"""The real ``sumatra-sdk`` client, unchanged, against ``scowl serve`` (SPEC §4, §3.4).

``scowl serve`` runs as a real subprocess over the test store; the SDK's
``SDKClient`` is configured only through its constructor (``api_uri``,
``api_key``). It posts ``/event?exports`` and ``/batch?exports`` (a bare
flag) with an ``x-api-key`` header; ``enrich_batch`` sends no content type.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

sumatra = pytest.importorskip("sumatra", reason="sumatra-sdk is in the test extra")

pytestmark = pytest.mark.slow   # a `scowl serve` subprocess per test (tests/conftest.py's slow tier)

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "sdk-test-key"

LOGIN = """
event login
user := $.user as string
ip := $.ip as string
price := $.price as float
count_ip := Count(by ip)
uniq_users_ip := CountUnique(user by ip)
sum_price_user := Sum(price by user)
"""

# SPEC §3.4: the login example and its prices.
EVENTS = [
    {"_time": "2021-04-12T22:43:46Z", "user": "anna", "ip": "1.1.1.1", "price": 1.50},
    {"_time": "2021-04-12T22:43:51Z", "user": "brad", "ip": "2.2.2.2", "price": 2.25},
    {"_time": "2021-04-12T22:44:05Z", "user": "cela", "ip": "1.1.1.1", "price": 0.50},
    {"_time": "2021-04-12T22:44:19Z", "user": "anna", "ip": "1.1.1.1", "price": 10.00},
]
EXPECTED = {
    "count_ip": [1, 1, 2, 3],
    "uniq_users_ip": [1, 1, 2, 2],
    "sum_price_user": [1.5, 2.25, 0.5, 11.5],
}
EVENT_TIMES = ["2021-04-12T22:43:46.000Z", "2021-04-12T22:43:51.000Z",
               "2021-04-12T22:44:05.000Z", "2021-04-12T22:44:19.000Z"]


def _events():
    """Fresh copies (the SDK writes ``_type`` into the dicts it is given)."""
    return [dict(e) for e in EVENTS]


@pytest.fixture()
def server(tmp_path, redis_url):
    """Run ``scowl serve`` on the LOGIN topology with an API key; yield its base URL.

    The process is always terminated (then killed if it lingers) on teardown.
    """
    from scowl.embedded import free_port

    topo = tmp_path / "topology"
    topo.mkdir()
    (topo / "login.scowl").write_text(LOGIN)
    port = free_port()
    env = {**os.environ, "SCOWL_REDIS_URL": redis_url, "SCOWL_API_KEYS": API_KEY, "SCOWL_HOME": str(tmp_path / "home")}
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "scowl", "serve", str(topo), "--port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"scowl serve exited with {proc.returncode}:\n{(tmp_path / 'serve.log').read_text()}")
            try:
                if httpx.get(f"{base}/health", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"scowl serve not healthy after 60 s:\n{(tmp_path / 'serve.log').read_text()}")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _columns(responses):
    return {name: [r["features"][name] for r in responses] for name in EXPECTED}


def test_enrich_one_event_at_a_time(server):
    client = sumatra.SDKClient(api_uri=server, api_key=API_KEY)
    out = [client.enrich("login", _id=f"e{i}", **ev) for i, ev in enumerate(_events())]
    assert _columns(out) == EXPECTED
    assert [r["event_id"] for r in out] == ["e0", "e1", "e2", "e3"]
    assert [r["event_time"] for r in out] == EVENT_TIMES
    assert out[3]["features"]["user"] == "anna" and out[3]["features"]["ip"] == "1.1.1.1"
    assert all("errors" not in r for r in out)


def test_enrich_batch(server):
    client = sumatra.SDKClient(api_uri=server, api_key=API_KEY)
    out = client.enrich_batch("login", _events())
    assert len(out) == 4
    assert _columns(out) == EXPECTED
    assert [r["event_time"] for r in out] == EVENT_TIMES
    # the batch was written: a further event sees all four
    again = client.enrich("login", **{**EVENTS[0], "_time": "2021-04-12T22:45:00Z"})
    assert again["features"]["count_ip"] == 4
    assert again["features"]["sum_price_user"] == 13.0


def test_sync_async_and_datetime_share_state(server):
    # enrich with a datetime (the SDK sends isoformat()), then the async calls.
    evs = _events()
    evs[0]["_time"] = datetime(2021, 4, 12, 22, 43, 46, tzinfo=timezone.utc)
    client = sumatra.SDKClient(api_uri=server, api_key=API_KEY)
    first = client.enrich("login", **evs[0])

    async def rest():
        async with sumatra.SDKClient(api_uri=server, api_key=API_KEY) as ac:
            second = await ac.enrich_async("login", **evs[1])
            tail = await ac.enrich_batch_async("login", evs[2:])
        return [second, *tail]

    out = [first, *asyncio.run(rest())]
    assert _columns(out) == EXPECTED
    assert out[0]["event_time"] == EVENT_TIMES[0]


def test_wrong_key_is_a_401_json_error(server, redis_url):
    import redis

    client = sumatra.SDKClient(api_uri=server, api_key="not-the-key")
    with pytest.raises(httpx.HTTPStatusError) as info:
        client.enrich("login", **EVENTS[0])
    resp = info.value.response
    assert resp.status_code == 401
    assert resp.json() == {"error": {"code": "unauthorized", "message": resp.json()["error"]["message"]}}
    assert isinstance(resp.json()["error"]["message"], str) and resp.json()["error"]["message"]
    with pytest.raises(httpx.HTTPStatusError) as info:
        client.enrich_batch("login", _events())
    assert info.value.response.status_code == 401
    store = redis.Redis.from_url(redis_url)
    assert store.dbsize() == 0   # nothing written by refused calls
    store.close()
