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
========================== ===================================================

Neither name can collide with a state key: those always have ``{`` right
after the prefix.
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
