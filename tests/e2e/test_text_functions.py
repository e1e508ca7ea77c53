"""Keys and values made by the text built-ins (``Split``, ``Trim``, ``Replace``, ``Lower``) on every engine.

The README's first example, "distinct email domains that logged in from
this IP in the last 10 minutes", needs the domain of an email: ``Split(email,
'@')[-1]``. A seeded login timeline with messy emails (case, padding, dots in
the local part, no ``@``, several ``@``, empty parts, a null email) gives:

* online (``POST /batch``, a real store) the values of :mod:`tests.reference`
  (which runs the Python scalar engine over the plan);
* in replay (Spark's built-ins: ``split`` of the quoted separator, ``trim``
  with a character set, ``replace``), the same values, an ``array<string>``
  feature as a Parquet list;
* after a backfill of the first part, the same values online for the rest;
* by hand, for a few events, what the features must be.

Source: SPEC §2.3 (built-ins "at least"; identical on both engines, §5.10), §2.4, §5.6, §5.8.
"""

from __future__ import annotations

import random

import orjson
import pyarrow.parquet as pq
import pytest

from tests.e2e.helpers import assert_values_equal, post_all
from tests.reference import reference_values
from tests.serving.helpers import compile_text
from writer.backfill import run_backfill
from writer.replay import run_replay

pytestmark = pytest.mark.slow

TOPOLOGY = """\
event login
ip := $.ip as string
email := $.email as string?
parts := Split(email, '@')
domain := Lower(Trim(parts[-1]))
local := Replace(Lower(Trim(parts[0])), '.', '')
domains_10m := CountUnique(domain by ip last 10 minutes)
logins_by_local_1h := Count(by local last 1 hour)
domains_by_local_1d := Set(domain by local last 1 day)
"""

START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
SPLIT_MS = START_MS + 3 * 3_600_000 + 1_234  # not on a tile boundary

#: Emails as users type them: the same mailbox in several spellings, odd shapes too.
EMAILS = [
    "Ann.Lee@Mail.example.com", " ann.lee@mail.example.com\t", "annlee@MAIL.example.com",
    "bob@corp.example", "Bob@Corp.Example ", "b.o.b@corp.example",
    "carol@a@b.example", "no-at-sign", "@only-domain.example", "trailing@", "", "dave@xn--bcher-kva.example",
    "émile@café.example", "ÉMILE@CAFÉ.EXAMPLE",
]


def _events(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out, t = [], START_MS
    for _ in range(n):
        t += rng.randint(1_000, 40_000)
        ev = {"_type": "login", "_time": t, "ip": f"10.0.0.{rng.randint(1, 5)}"}
        if rng.random() < 0.95:
            ev["email"] = rng.choice(EMAILS)
        out.append(ev)
    return out


@pytest.fixture(scope="module")
def plan():
    return compile_text(TOPOLOGY)


@pytest.fixture(scope="module")
def events():
    return _events(900, 7)


@pytest.fixture(scope="module")
def expected(plan, events):
    return reference_values(plan, events)


def _assert_equal(got: list[dict], want: list[dict], what: str) -> None:
    """The same features (names included) with equal values, event by event (``assert_values_equal``)."""
    assert [sorted(g) for g in got] == [sorted(w) for w in want], what
    assert_values_equal(got, want, what)


def test_the_features_are_what_the_functions_say(plan, expected, events):
    by_email = {}
    for ev, v in zip(events, expected):
        by_email.setdefault(ev.get("email"), v)
    assert by_email[" ann.lee@mail.example.com\t"]["parts"] == [" ann.lee", "mail.example.com\t"]
    for email in ("Ann.Lee@Mail.example.com", " ann.lee@mail.example.com\t", "annlee@MAIL.example.com"):
        assert (by_email[email]["domain"], by_email[email]["local"]) == ("mail.example.com", "annlee"), email
    assert by_email["carol@a@b.example"]["parts"] == ["carol", "a", "b.example"]
    assert (by_email["no-at-sign"]["domain"], by_email["no-at-sign"]["local"]) == ("no-at-sign", "no-at-sign")
    assert by_email["trailing@"]["parts"] == ["trailing", ""] and by_email["trailing@"]["domain"] == ""
    assert by_email[""]["parts"] == [""]
    assert by_email["ÉMILE@CAFÉ.EXAMPLE"]["domain"] == "café.example"
    assert by_email[None]["parts"] is None and by_email[None]["domain"] is None
    # the distinct domains per IP are not trivial, and spellings of one domain count once
    counts = [v["domains_10m"] for v in expected]
    assert max(counts) >= 5 and len(set(counts)) >= 4
    assert all(c <= len({"mail.example.com", "corp.example", "b.example", "no-at-sign", "only-domain.example", "",
                         "xn--bcher-kva.example", "café.example"}) for c in counts)


def test_online_equals_reference(plan, events, expected, redis_url):
    _assert_equal(post_all(plan, redis_url, events), expected, "online")


def test_replay_equals_reference(spark, plan, events, expected, tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    run_replay(spark, plan, [path], tmp_path / "out")
    table = pq.read_table(tmp_path / "out" / "login")
    assert str(table.schema.field("parts").type) == "list<element: string>"
    rows = sorted(table.to_pylist(), key=lambda r: r["_seq"])
    names = [f.name for f in plan.events["login"].outputs]
    got = [{k: r[k] for k in names} for r in rows]
    _assert_equal(got, [expected[r["_seq"]] for r in rows], "replay")


def test_backfill_then_online_equals_reference(spark, plan, events, expected, redis_url, tmp_path):
    history = [e for e in events if e["_time"] < SPLIT_MS]
    assert 100 < len(history) < len(events) - 100
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in history) + b"\n")
    run_backfill(spark, plan, [path], redis_url, start_ms=START_MS, end_ms=SPLIT_MS)
    live = post_all(plan, redis_url, events[len(history):])
    _assert_equal(live, expected[len(history):], "backfill then online")
