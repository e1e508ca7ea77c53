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
  pipelined ``/batch``;
* an app's start-up deletes the ``scowl_*`` libraries its plan does not use
  (``Store.retire_functions``: they make every call's Lua garbage collection
  dearer) and leaves other libraries alone; a running app whose libraries
  were retired loads them again and answers as before.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import redis

from tests.e2e.helpers import LOGIN_EVERY_FUNCTION, PURCHASE_AGGREGATES, login_purchase_events, login_purchase_topology
from tests.e2e.store_dump import db_url, dump_store
from compiler.algebra.script import as_function
from serving.evaluate import Evaluator
from tests.serving.helpers import client_for, compile_text

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

    # users the ACL denies functions, or only calling them: the store runs the same scripts with EVALSHA
    for db, denied in ((3, ("-function", "-fcall", "-fcall_ro")), (9, ("-fcall", "-fcall_ro"))):
        admin.execute_command("ACL", "SETUSER", "nofunctions", "reset", "on", ">pw", "~*", "&*", "+@all", *denied)
        try:
            parts = urlsplit(db_url(redis_url, db))
            url = urlunsplit(parts._replace(netloc=f"nofunctions:pw@{parts.hostname}:{parts.port}"))
            admin.config_resetstat()
            with client_for(TOPOLOGY, url) as c:
                as_scripts = _post_each(c, events)
            calls = _calls(admin)
            assert calls.get("evalsha", 0) >= len(events) and calls.get("fcall", 0) == 0
        finally:
            admin.execute_command("ACL", "DELUSER", "nofunctions")
        assert as_scripts == as_functions
        assert dump_store(db_url(redis_url, db)) == functions_store
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


def test_start_up_retires_the_libraries_of_other_plans_and_their_users_load_them_again(redis_url):
    admin = redis.Redis.from_url(redis_url)
    admin.function_flush()
    events = _events()
    other = login_purchase_topology(LOGIN_EVERY_FUNCTION + "again := Count(by user last 2 hours)\n",
                                    PURCHASE_AGGREGATES)

    def names() -> set[bytes]:
        return {dict(zip(lib[::2], lib[1::2]))[b"library_name"] if isinstance(lib, list) else lib[b"library_name"]
                for lib in admin.execute_command("FUNCTION", "LIST")}

    admin.execute_command("FUNCTION", "LOAD", "#!lua name=mine\nredis.register_function('mine', function() return 1 end)")
    with client_for(TOPOLOGY, db_url(redis_url, 6)) as first:
        got = _post_each(first, events[:10])
        first_libraries = {n for n in names() if n.startswith(b"scowl_")}
        assert first_libraries
        second_plan = {as_function(x)[0].encode() for x in Evaluator(compile_text(other), run=None).scripts()}
        assert first_libraries - second_plan  # the login scripts differ
        with client_for(other, db_url(redis_url, 7)) as second:  # its start-up retires the first plan's
            assert names() == (first_libraries & second_plan) | {b"mine"}  # not scowl's: left alone
            _post_each(second, events[:10])
            got += _post_each(first, events[10:20])  # Function not found: loaded again, each event run once
            assert first_libraries <= names()
    with client_for(TOPOLOGY, db_url(redis_url, 8)) as c:
        want = _post_each(c, events[:20])
    assert got == want
    assert dump_store(db_url(redis_url, 6)) == dump_store(db_url(redis_url, 8))
    admin.close()
