"""Access to the Lua script sources beside this module (SPEC §5.2, §5.6).

The scripts are part of the storage layout (they apply the algebra's
updates and the bookkeeping of :mod:`compiler.algebra.storekeys` inside
Redis), so they live beside ``ops.py``; serving and the writer both register
them from here.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from importlib.resources import files

#: a top-level ``local`` statement of a Lua prelude (``local function f(``, ``local a, b =``)
_TOP_LOCAL = re.compile(r"^local\s+(?:function\s+([A-Za-z_]\w*)|([A-Za-z_][\w\s,]*?)\s*=)", re.M)
_NAME = re.compile(r"[A-Za-z_]\w*")
#: a Lua string literal (kept) or a ``--`` comment to the end of its line (dropped) by :func:`code_names`
_STRING_OR_COMMENT = re.compile(r"""'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|--[^\n]*""")


def code_names(text: str) -> set[str]:
    """Return the names Lua code ``text`` uses outside comments (string contents count): a comment
    naming a function must not keep it, and its closure, in every script (:func:`shake`)."""
    code = _STRING_OR_COMMENT.sub(lambda m: "" if m.group(0).startswith("--") else m.group(0), text)
    return set(_NAME.findall(code))


def top_level_names(prelude: str) -> set[str]:
    """Return the names the top-level ``local`` statements of Lua source ``prelude`` define."""
    return set().union(*(names for names, _ in _chunks(prelude)))


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


def _chunks(prelude: str) -> list[tuple[frozenset[str], str]]:
    """Split Lua source into top-level ``local`` statements, each with the comment lines above it.

    Returns:
        ``[(names the chunk defines, its text)]`` in source order; text
        before the first statement is a chunk defining nothing.
    """
    starts = [m.start() for m in _TOP_LOCAL.finditer(prelude)]
    out: list[tuple[frozenset[str], str]] = []
    bounds = [0, *starts, len(prelude)]
    for a, b in zip(bounds, bounds[1:]):
        text = prelude[a:b]
        m = _TOP_LOCAL.match(text)
        names: frozenset[str] = frozenset()
        if m:
            names = frozenset([m.group(1)] if m.group(1) else [n.strip() for n in m.group(2).split(",")])
        out.append((names, text))
    # a chunk's trailing comment lines document the next statement: move them down with it
    moved: list[tuple[frozenset[str], str]] = []
    carry = ""
    for names, text in out:
        text = carry + text
        lines = text.split("\n")
        k = len(lines)
        while k > 0 and (lines[k - 1].startswith("--") or lines[k - 1] == ""):
            k -= 1
        carry = "\n".join(lines[k:])
        moved.append((names, "\n".join(lines[:k]) + ("\n" if k else "")))
    if carry:
        moved.append((frozenset(), carry))
    return moved


def shake(prelude: str, body: str) -> str:
    """Return ``prelude`` without the top-level ``local`` statements that ``body`` cannot reach.

    A generated round script (``compiler.algebra.lua``) starts with the
    shared functions of ``common.lua`` and the generator's prelude, ~60
    functions, and Redis runs the whole script per call: each ``local
    function`` makes a new closure every time (~8 µs of Valkey CPU per call
    for all of them, ``bench/lua_calls.py``; an arrival's call is ~40 µs).
    This keeps a statement only if a name it defines appears in ``body`` or
    in a kept statement (transitively; Lua locals are reached by name only,
    so nothing reachable is dropped), in source order. Tree shaking, as a
    bundler does.

    Args:
        prelude: Lua source made of top-level ``local`` statements and comments.
        body: the code that runs after it.

    Returns:
        The kept statements, in their order.
    """
    chunks = _chunks(prelude)
    wanted = code_names(body)
    keep = [False] * len(chunks)
    changed = True
    while changed:
        changed = False
        for i, (names, text) in enumerate(chunks):
            if not keep[i] and (not names or names & wanted):
                keep[i] = True
                wanted |= code_names(text)
                changed = True
    return "".join(text for (names, text), k in zip(chunks, keep) if k)


#: The line of a generated round script (``compiler.algebra.lua``) after which its code runs once
#: per call; what precedes it (the prelude's functions and constants) a function library runs once,
#: at load (:func:`as_function`).
CALL_MARKER = "-- once per call:"


@lru_cache(maxsize=256)
def as_function(script: str) -> tuple[str, str]:
    """Return a generated round script as a Valkey/Redis 7 function library: ``(function name, library source)``.

    ``EVALSHA`` runs a whole script per call, its prelude too: every ``local
    function`` makes a new closure and every constant table a new table,
    ~11 µs of Valkey CPU per call for a flights departure (its script with
    no live slot against ``return 1``), ~6% of its call. A library's
    top level runs once, at ``FUNCTION LOAD``; each ``FCALL`` runs only the
    function it registers (``bench/lua_ab.py``: 0.935x the Valkey CPU per
    demo call; with the constant tables hoisted before the marker and the
    most used library functions read once per call into locals,
    ``compiler.algebra.lua``, 0.950x of that). So the prelude (everything before the script's
    ``CALL_MARKER`` line, ``compiler.algebra.lua``) becomes the library's
    top level, and the rest the body of the function, whose ``KEYS`` and
    ``ARGV`` are its two parameters (``FCALL name numkeys key.. arg..``
    passes them as ``EVALSHA`` does). The library and its function are
    named after the script's SHA-1, so a name always stands for one source
    and loading it again is a no-op (``Library .. already exists``).

    Args:
        script: a script of ``LuaGenerator.script`` (it holds the marker line).

    Returns:
        ``(name, source)``: the name for ``FCALL`` and for the library's
        ``#!lua name=`` header, and the source for ``FUNCTION LOAD``.

    Raises:
        ValueError: ``script`` has no marker line (not a generated round script).

    Source: Redis 7 functions (``FUNCTION LOAD``, ``FCALL``; Valkey 8 the same).
    """
    head, marker, body = script.partition(f"\n{CALL_MARKER}\n")
    if not marker:
        raise ValueError(f"not a generated round script: no {CALL_MARKER!r} line")
    name = "scowl_" + hashlib.sha1(script.encode()).hexdigest()
    return name, "".join([f"#!lua name={name}\n", head, "\nlocal function call(KEYS, ARGV)\n", body,
                          f"\nend\nredis.register_function('{name}', call)\n"])
