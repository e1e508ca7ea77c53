"""A round's KEYS and ARGV builder, generated once per round as straight-line Python (issue 10).

``serving.evaluate.EventProgram`` sends one script call per round; before
each call it lays out the round's slots: per read its state key (or ``""``
for a null entity key) and its ``after`` time, per write its state key and
encoded values (or ``""`` when the write's filter, a null value or a null key
stops it). Walking the round's slot objects per event cost ~110 µs per
event on the 70-state wide topology (``bench/serve.py``), ~11% of the
worker's CPU: loops, attribute chains, a list and a generator per write, and
a dict of encoded keys. :func:`round_builder` writes that walk out once per
round, in the manner of the generated Lua (:mod:`compiler.algebra.lua`,
sqlglot's per-target generators): feature names, definition hashes and key
texts are constants, each entity key is encoded once in a local, and each
slot is a few lines.

What a builder does, slot for slot, is what ``EventProgram._read_args`` and
``_write_args`` did (SPEC §2.4 write rules: a write happens only when its
``where`` is true and its key and values are non-null; a null key reads
null); ``tests/serving/test_roundargs.py`` holds every builder to a plain
reading of those rules over generated events.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from compiler.algebra.keys import GLOBAL_TAG, encode_key, redis_key_parts
from compiler.codegen.python import EvalError

#: ``build(env, t_ms, keys, argv, pending, written, skip_writes) -> None``: appends the round's slots (module docstring)
RoundBuilder = Callable[[dict, int, list, list, list, list, bool], None]


class _Unset:
    """The sentinel of an entity key not encoded yet in a builder call."""


def round_builder(reads_before: Sequence[Any], writes: Sequence[Any], reads_after: Sequence[Any],
                  arity: Callable[[Any], int]) -> tuple[RoundBuilder, str]:
    """Generate the KEYS/ARGV builder of one round.

    Args:
        reads_before: the round's exclusive reads (``serving.evaluate._Read``:
            ``feature``, ``spec.read_keys``, ``spec.after``,
            ``state.key_types``, ``state.definition_hash``), in slot order.
        writes: its writes (``serving.evaluate._Write``: ``where``,
            ``write.values``, ``write.keys``, ``state``, ``encode_values``).
        reads_after: its inclusive reads.
        arity: a write's number of ARGV elements (``LuaGenerator.write_arity``
            of its slot): ``0`` writes no value element.

    Returns:
        ``(build, source)``: the builder and its Python source (for reading
        and tests). ``build(env, t_ms, keys, argv, pending, written,
        skip_writes)`` appends to ``keys`` one element per slot (the state
        key, or ``""``), to ``argv`` each live read's ``after`` (``""`` when
        null; epoch ms) and each live write's values, to ``pending`` one
        ``(read, after ms or None)`` per live read, in slot order, and to
        ``written`` the definition hash of each write it lays out; a read
        with a null key sets its feature to ``None`` in ``env``.
        ``skip_writes``: every write slot is ``""`` (a repeated ``_id``, SPEC
        §4). It raises what a ``where`` raises other than ``EvalError``
        (which stops the write, as a null filter does).
    """
    ns: dict[str, Any] = {"encode_key": encode_key, "EvalError": EvalError, "_U": _Unset}
    lines = ["def build(env, t_ms, keys, argv, pending, written, skip_writes):",
             "    get = env.get"]
    memos: dict[tuple, str] = {}

    def key_local(names: Sequence[str], types: Sequence[str]) -> str:
        memo = (tuple(names), tuple(types))
        if memo not in memos:
            name = f"k{len(memos)}"
            memos[memo] = name
            ns[f"T{name}"] = tuple(types)
        return memos[memo]

    def encode(name: str, names: Sequence[str], indent: str) -> list[str]:
        """Lines that encode key local ``name`` on its first use (lazily, as the walk did)."""
        values = "".join(f"get({n!r}), " for n in names)
        return [f"{indent}if {name} is _U:",
                f"{indent}    {name} = encode_key(({values}), T{name})"]

    def key_text(name: str, definition_hash: str) -> str:
        # compiler.algebra.keys.redis_key, its constant parts folded into the code
        before, after = redis_key_parts(definition_hash)
        return f"{before!r} + ({name} or {GLOBAL_TAG!r}) + {after!r}"

    for r in list(reads_before) + list(reads_after):
        key_local(r.spec.read_keys, r.state.key_types)
    for w in writes:
        key_local(w.write.keys, w.state.key_types)
    for name in memos.values():
        lines.append(f"    {name} = _U")

    def read(i: int, r: Any, label: str) -> None:
        ns[f"{label}{i}"] = r
        k = key_local(r.spec.read_keys, r.state.key_types)
        lines.append(f"    # read {r.feature!r}")
        lines.extend(encode(k, r.spec.read_keys, "    "))
        lines.append(f"    if {k} is None:")
        lines.append(f"        env[{r.feature!r}] = None")
        lines.append("        keys.append('')")
        lines.append("    else:")
        lines.append(f"        keys.append({key_text(k, r.state.definition_hash)})")
        if r.spec.after is not None:
            lines.append(f"        a = get({r.spec.after!r})")
            lines.append("        argv.append('' if a is None else int(a))")
            lines.append(f"        pending.append(({label}{i}, a))")
        else:
            lines.append(f"        pending.append(({label}{i}, None))")

    for i, r in enumerate(reads_before):
        read(i, r, "B")
    if writes:
        lines.append("    if skip_writes:")
        lines.append(f"        keys.extend({[''] * len(writes)!r})")
        lines.append("    else:")
        for j, w in enumerate(writes):
            k = key_local(w.write.keys, w.state.key_types)
            ind = "        "
            lines.append(f"{ind}# write {w.state.definition_hash}")
            if w.where is not None:
                ns[f"F{j}"] = w.where
                lines += [f"{ind}try:", f"{ind}    ok = F{j}(env, t_ms) is True",
                          f"{ind}except EvalError:", f"{ind}    ok = False"]
            else:
                lines.append(f"{ind}ok = True")
            vs = [f"v{j}_{m}" for m in range(len(w.write.values))]
            if vs:
                lines.append(f"{ind}if ok:")
                for v, n in zip(vs, w.write.values):
                    lines.append(f"{ind}    {v} = get({n!r})")
                lines.append(f"{ind}    ok = " + " and ".join(f"{v} is not None" for v in vs))
            lines.append(f"{ind}if ok:")
            lines.extend(encode(k, w.write.keys, ind + "    "))
            lines.append(f"{ind}    ok = {k} is not None")
            lines.append(f"{ind}if ok:")
            lines.append(f"{ind}    keys.append({key_text(k, w.state.definition_hash)})")
            if arity(w) > 0:
                ns[f"E{j}"] = w.encode_values
                lines.append(f"{ind}    argv.extend(E{j}([{', '.join(vs)}]))")
            lines.append(f"{ind}    written.append({w.state.definition_hash!r})")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    keys.append('')")
    for i, r in enumerate(reads_after):
        read(i, r, "A")
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<scowl round arguments>", "exec"), ns)  # noqa: S102 - our own generated source
    return ns["build"], source
