"""Round scripts run as Valkey functions (``FCALL``), and as scripts where the store refuses them (SPEC §5.1, §5.2).

``serving.store.Store`` loads each generated round script as a function
library (``compiler.algebra.script.as_function``: the prelude runs once, at
load) and calls it with ``FCALL``. Checked against the session's real
server, through the API:

* events run as functions (``FCALL`` counted by the server, no ``EVALSHA``),
  and give the features that the same events give on a store that refuses
  functions (an ACL user without ``FUNCTION``/``FCALL``), where the store
  falls back to ``EVALSHA``;
* after ``FUNCTION FLUSH`` (what a restart without persistence leaves) the
  next event loads its library again and runs once, for ``/event`` and for
  pipelined ``/batch``.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import redis

from tests.e2e.helpers import LOGIN_EVERY_FUNCTION, PURCHASE_AGGREGATES, login_purchase_events, login_purchase_topology
from tests.e2e.store_dump import db_url, dump_store
from tests.serving.helpers import client_for

TOPOLOGY = login_purchase_topology(LOGIN_EVERY_FUNCTION, PURCHASE_AGGREGATES)


def _calls(client: redis.Redis) -> dict[str, int]:
    """Calls per command so far (``INFO commandstats``), by lower-case command name."""
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in client.info("commandstats").items()}


def _post_each(c, events) -> list:
    out = []
    for ev in events:
        r = c.post("/event", json=ev)
        assert r.status_code == 200, r.text
        out.append(r.json()["features"])
    return out


def _events() -> list[dict]:
    events = login_purchase_events(80, seed=5, start_ms=1_700_000_000_000)
    assert len(events) == 80
    return events


def test_events_run_as_functions_and_answer_as_scripts_do(redis_url):
    admin = redis.Redis.from_url(redis_url)
    events = _events()
    admin.config_resetstat()
    with client_for(TOPOLOGY, db_url(redis_url, 2)) as c:
        as_functions = _post_each(c, events)
    calls = _calls(admin)
    # EVALSHA only for the online-writer start times (Store.record_online: a few per run)
    assert calls.get("fcall", 0) >= len(events) and calls.get("evalsha", 0) < len(events) / 8
    libraries = [lib[b"library_name"] if isinstance(lib, dict) else dict(zip(lib[::2], lib[1::2]))[b"library_name"]
                 for lib in admin.execute_command("FUNCTION", "LIST")]
    assert any(name.startswith(b"scowl_") for name in libraries)
    functions_store = dump_store(db_url(redis_url, 2))

    # a user the ACL denies functions: the store runs the same scripts with EVALSHA
    admin.execute_command("ACL", "SETUSER", "nofunctions", "on", ">pw", "~*", "&*", "+@all",
                          "-function", "-fcall", "-fcall_ro")
    try:
        parts = urlsplit(db_url(redis_url, 3))
        url = urlunsplit(parts._replace(netloc=f"nofunctions:pw@{parts.hostname}:{parts.port}"))
        admin.config_resetstat()
        with client_for(TOPOLOGY, url) as c:
            as_scripts = _post_each(c, events)
        calls = _calls(admin)
        assert calls.get("evalsha", 0) >= len(events) and calls.get("fcall", 0) == 0
    finally:
        admin.execute_command("ACL", "DELUSER", "nofunctions")
    assert as_scripts == as_functions
    assert dump_store(db_url(redis_url, 3)) == functions_store
    admin.close()


def test_a_function_flush_is_survived_by_events_and_batches(redis_url):
    admin = redis.Redis.from_url(redis_url)
    events = _events()
    with client_for(TOPOLOGY, db_url(redis_url, 4), batch_pipeline=8) as c:
        got = _post_each(c, events[:20])
        admin.function_flush()
        got += _post_each(c, events[20:40])  # Function not found: loaded again, run once
        admin.function_flush()
        r = c.post("/batch", json=events[40:])  # the pipeline loads its libraries first
        assert r.status_code == 200, r.text
        got += [x["features"] for x in r.json()]
    with client_for(TOPOLOGY, db_url(redis_url, 5)) as c:
        want = _post_each(c, events)
    assert got == want
    assert dump_store(db_url(redis_url, 4)) == dump_store(db_url(redis_url, 5))
    admin.close()
