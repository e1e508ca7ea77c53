"""The starter project ``scowl init DIR`` writes: a topology to edit and a timeline to run it on.

Feast (``feast init``) and Tecton (``tecton init``) start a user's own
repository with a small example that runs as it is; this is scowl's. Two
files:

* :data:`TOPOLOGY_FILE` (``features.scowl``): a fraud topology of two event
  types, ``login`` and ``payment``, whose features show the clauses a new
  user reaches for first (``by`` keys, ``where``, ``exclusive``, a window per
  feature, an aggregate written by another event type, an aggregate inside
  an expression, the README's "distinct email domains that logged in from
  this IP in the last 10 minutes");
* :data:`EVENTS_FILE` (``events.jsonl``): a seeded timeline of those events
  (Sumatra's format: one JSON object per line with ``_type``, ``_time``, the
  payload) over the :data:`SPAN_MS` before a given time, with a burst of
  logins of many domains from one IP (what ``domains_ip_10m`` is for), so
  every feature takes more than one value.

The events end before the time they are made for, so ``scowl backfill`` of
them, then ``scowl serve`` with events at the server's clock, reads them in
every window of a day or more.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

import orjson

from compiler.typesystem import format_time, parse_time

__all__ = ["EVENTS_FILE", "SPAN_MS", "TOPOLOGY", "TOPOLOGY_FILE", "Starter", "starter_events", "write_starter"]

#: The topology file's name in the project directory.
TOPOLOGY_FILE = "features.scowl"
#: The timeline's name in the project directory.
EVENTS_FILE = "events.jsonl"
#: The timeline's span, in ms: the 24 hours before the time it is made for.
SPAN_MS = 24 * 3_600_000

#: The starter topology (SPEC §2; README "A short Scowl guide").
TOPOLOGY = """\
-- A starting topology written by `scowl init`: edit it, then `scowl check` this directory.
-- The language: README "A short Scowl guide"; every built-in and aggregate: docs/reference.md.

event login
user := $.user as string                       -- input: JSON path and type
ip := $.ip as string
email := $.email as string
domain := Lower(Split(email, '@')[-1])          -- scalar expression

logins_user_1h := Count(by user last 1 hour)
domains_ip_10m := CountUnique(domain by ip last 10 minutes)   -- distinct email domains from this IP
users_ip_1d := CountUnique(user by ip last 1 day)
new_ip := Count(by user, ip last 30 days exclusive) = 0       -- first login of this user from this IP
prev_ip := Latest(ip by user last 7 days exclusive)           -- the user's login before this one

event payment
user := $.user as string
card := $.card as string
amount := $.amount as float

spent_user_1d := Sum(amount by user last 1 day)
big_payments_7d := Count(by user where amount > 500 last 7 days)
avg_amount_30d := Average(amount by user last 30 days exclusive)
amount_vs_avg := amount / avg_amount_30d                      -- null until the user has paid before
cards_user_1d := CountUnique(card by user last 1 day)
logins_user_1h := Count<login>(by user last 1 hour)           -- written by login events
"""

#: Users, IPs and email domains the timeline draws from.
_USERS = 40
_IPS = 25
_DOMAINS = ("example.com", "mail.example", "corp.example", "post.example", "web.example")
#: The burst: ``_BURST`` logins a few seconds apart from one IP, each with a fresh user and domain.
_BURST = 12
_BURST_IP = "203.0.113.7"


@dataclass(frozen=True)
class Starter:
    """What :func:`write_starter` wrote.

    Attributes:
        topology: path of the topology file.
        events: path of the timeline.
        n_events: events in the timeline.
        first_ms: the first event's time, epoch ms.
        last_ms: the last event's time, epoch ms.
    """

    topology: Path
    events: Path
    n_events: int
    first_ms: int
    last_ms: int


def starter_events(end_ms: int, seed: int = 7) -> list[dict]:
    """The starter timeline: logins and payments over the :data:`SPAN_MS` before ``end_ms``, in time order.

    About 1,000 events: each of 40 users logs in a few times a day from one
    or two usual IPs (now and then another), and pays after some logins
    (log-normal amounts, one in ~25 over 500, one of two cards mostly);
    an hour before the end, one IP logs in 12 users of 12 domains within
    a minute.

    Args:
        end_ms: epoch ms after the last event (the last is more than 8
            minutes before it).
        seed: the random seed (the same seed and ``end_ms`` give the same
            events).

    Returns:
        Event dicts (``_type``, ``_time`` as ``YYYY-MM-DDTHH:MM:SS.mmmZ``,
        the payload), sorted by time.
    """
    rng = random.Random(seed)
    start_ms = end_ms - SPAN_MS
    timed: list[tuple[int, dict]] = []
    for u in range(_USERS):
        user = f"user{u:02d}"
        home = [f"10.0.{u % 7}.{1 + (u * 3) % _IPS}", f"10.1.{u % 5}.{1 + (u * 7) % _IPS}"]
        email = f"{user}@{_DOMAINS[u % len(_DOMAINS)]}"
        cards = [f"card-{u:02d}a", f"card-{u:02d}b"]
        for _ in range(rng.randint(4, 24)):
            t = rng.randrange(start_ms, end_ms - 600_000)
            ip = rng.choice(home) if rng.random() < 0.9 else f"198.51.100.{rng.randint(1, 254)}"
            timed.append((t, {"_type": "login", "user": user, "ip": ip, "email": email.upper() if rng.random() < 0.1
                              else email}))
            for k in range(rng.choice((0, 0, 1, 1, 2))):
                amount = round(math.exp(rng.gauss(3.5, 1.2)), 2)
                card = cards[0] if rng.random() < 0.8 else cards[1]
                timed.append((t + 30_000 * (k + 1) + rng.randint(0, 20_000),
                              {"_type": "payment", "user": user, "card": card, "amount": amount}))
    burst_ms = end_ms - 3_600_000 + rng.randint(0, 600_000)
    for i in range(_BURST):
        timed.append((burst_ms + 4_000 * i, {"_type": "login", "user": f"guest{i:02d}", "ip": _BURST_IP,
                                             "email": f"guest{i:02d}@burst{i:02d}.example"}))
    timed.sort(key=lambda p: p[0])
    return [{"_type": ev["_type"], "_time": format_time(t), **{k: v for k, v in ev.items() if k != "_type"}}
            for t, ev in timed]


def write_starter(directory: Path, now_ms: int, force: bool = False) -> Starter:
    """Write the starter project into ``directory`` (created with its parents if missing).

    Args:
        directory: the project directory.
        now_ms: the time the timeline ends at (epoch ms; its last event is
            more than 8 minutes before).
        force: overwrite :data:`TOPOLOGY_FILE` and :data:`EVENTS_FILE` if
            they exist (other files are never touched).

    Returns:
        A :class:`Starter`.

    Raises:
        FileExistsError: a file to write exists and ``force`` is false (its
            path is the error's ``filename``); nothing was written.
        OSError: the directory cannot be made or written.
    """
    topology = directory / TOPOLOGY_FILE
    events_path = directory / EVENTS_FILE
    if not force:
        for path in (topology, events_path):
            if path.exists():
                raise FileExistsError(17, "exists", str(path))
    events = starter_events(now_ms)
    directory.mkdir(parents=True, exist_ok=True)
    topology.write_text(TOPOLOGY)
    events_path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    return Starter(topology, events_path, len(events), parse_time(events[0]["_time"]),
                   parse_time(events[-1]["_time"]))
