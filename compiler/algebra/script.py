"""Access to the Lua script sources beside this module (SPEC §5.2, §5.6).

The scripts are part of the storage layout (they apply the algebra's
updates and the bookkeeping of :mod:`compiler.algebra.storekeys` inside
Redis), so they live beside ``ops.py``; serving and the writer both register
them from here.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files


@lru_cache(maxsize=1)
def common_script() -> str:
    """Return ``common.lua``: the Lua functions shared by ``event.lua`` and the
    generated round scripts (``compiler.algebra.lua``), which both start with it."""
    return files("compiler.algebra").joinpath("common.lua").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def event_script() -> str:
    """Return the Lua source of ``event.lua`` (its header documents KEYS/ARGV), after ``common.lua``."""
    return common_script() + files("compiler.algebra").joinpath("event.lua").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def online_min_script() -> str:
    """Return the Lua source of ``online_min.lua``: lower fields of ``sc:online`` to given times.

    KEYS[1] is the hash (:data:`compiler.algebra.storekeys.ONLINE_KEY`),
    ARGV is ``field, ms, field, ms, ...``; each field becomes
    ``min(current, ms)`` (epoch ms), so re-running it changes nothing. Its
    header documents the same.
    """
    return files("compiler.algebra").joinpath("online_min.lua").read_text(encoding="utf-8")
