"""Names of the store's bookkeeping keys, beside the state keys (SPEC §5.6, §6).

The state keys ``sc:{<entity key>}:<definition hash>`` are named by
:func:`compiler.algebra.keys.redis_key`. The keys below hold bookkeeping that
more than one layer reads or writes, so their names live with the storage
layout rather than in one of those layers:

========================== ===================================================
key                        holds
========================== ===================================================
``sc:online``              :data:`ONLINE_KEY`: hash of online-writer start
                           times; field = definition hash, value = the
                           earliest event time (epoch ms, decimal text) the
                           online path (the API, ``scowl stream``) wrote into
                           that state. Lowered only, by the Lua script of
                           :func:`compiler.algebra.script.online_min_script`;
                           ``scowl backfill`` refuses to overwrite it,
                           ``scowl status`` shows it.
``sc:cov:<definition       :func:`cov_key`: hash of the intervals a backfill
hash>``                    covered; field ``<start_ms>-<end_ms>`` (kept
                           merged), value: wall-clock ms of the latest run
                           (``writer.status.record_coverage``).
``sc:id:{<event id>}``     :func:`id_key`: the idempotency marker of an event
                           ``_id`` (SPEC §4), set by the event's own script
                           call; while it lives (``SCOWL_ID_TTL_S``) a
                           repeated ``_id`` is answered but not written.
========================== ===================================================

None of these names can collide with a state key: those always have ``{``
right after the prefix.
"""

from __future__ import annotations

from compiler.algebra.keys import PREFIX

#: Hash of online-writer start times (module table). Written by
#: ``serving.store.Store.record_online`` and ``writer.stream``; read by
#: ``writer.backfill`` and ``writer.status``.
ONLINE_KEY = f"{PREFIX}online"

#: Prefix of the per-state backfill coverage hashes (module table).
COVERAGE_PREFIX = f"{PREFIX}cov:"


def cov_key(definition_hash: str) -> str:
    """Return the name of the hash holding a state's backfilled intervals.

    Args:
        definition_hash: the state's namespace (16 hex digits, SPEC §5.4).

    Returns:
        ``sc:cov:<definition_hash>``.

    >>> cov_key("0123456789abcdef")
    'sc:cov:0123456789abcdef'
    """
    return f"{COVERAGE_PREFIX}{definition_hash}"


#: Prefix of the idempotency markers of event ids (module table).
ID_PREFIX = f"{PREFIX}id:"


#: How long the API and the stream remember an ``_id`` by default (seconds; ``SCOWL_ID_TTL_S``).
DEFAULT_ID_TTL_S = 86_400

#: The RESP version every scowl client speaks to the store (redis-py's ``protocol``). The scripts'
#: replies and their decoders (``compiler.algebra.lua``, ``serving.evaluate``, the writer's sinks) are
#: written and measured against RESP2, and RESP2 needs no ``HELLO`` per connection. redis-py 8.2 made
#: RESP3 its default (a ``HELLO 3`` on connect, RESP2 only after an error); naming the version keeps
#: every redis-py from 5.0 on speaking the same (thirty-fifth session: a fresh install took 8.2.0).
RESP_PROTOCOL = 2


def id_key(event_id: str) -> str:
    """Return the name of the idempotency marker of event id ``event_id`` (SPEC §4 ``_id``).

    The id is the key's hash tag (its own slot in a cluster), with ``%`` and
    ``}`` percent-encoded so that distinct ids never share a key and the tag
    ends where the id does.

    Args:
        event_id: the event's ``_id`` as text.

    Returns:
        ``sc:id:{<encoded id>}``.

    >>> id_key("t-3"), id_key("a}b"), id_key("a%7Db")
    ('sc:id:{t-3}', 'sc:id:{a%7Db}', 'sc:id:{a%257Db}')
    """
    return ID_PREFIX + "{" + event_id.replace("%", "%25").replace("}", "%7D") + "}"
