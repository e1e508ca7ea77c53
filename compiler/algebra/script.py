"""Access to the ``event.lua`` script source (SPEC §5.2).

The script is part of the storage layout (it applies the algebra's updates
inside Redis), so it lives beside ``ops.py``; serving and the writer both
register it from here.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files


@lru_cache(maxsize=1)
def event_script() -> str:
    """Return the Lua source of ``event.lua`` (its header documents KEYS/ARGV)."""
    return files("compiler.algebra").joinpath("event.lua").read_text(encoding="utf-8")
