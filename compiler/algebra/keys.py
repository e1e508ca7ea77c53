"""Entity-key encoding and Redis key names (SPEC §5.1, §5.4, §5.5).

A state of one (aggregate definition, entity key) lives in ONE Redis hash::

    sc:{<encoded entity key>}:<definition_hash>

* The ``{...}`` hash tag is the encoded entity key (:data:`GLOBAL_TAG` for
  a global state), so in Redis Cluster all aggregates of one entity value
  share a slot (one script call per slot), and one (aggregate, key) is
  always in one slot, its companion keys (``<key>:b``) included.
* ``definition_hash`` namespaces state by write-time definition (§5.4).

Component encoding (unambiguous, §5.5): each key component is typed and
strings are length-prefixed, components joined by ``|``:

========= ===================== ==========================
type      encoding              example
========= ===================== ==========================
string    ``s<len>:<text>``     ``'a|b'`` -> ``s3:a|b``
int       ``i<decimal>``        ``-5`` -> ``i-5``
time      ``t<epoch ms>``       ``t1357034220000``
bool      ``b1`` / ``b0``
float     ``f<repr(value)>``    ``f2.5``, ``f15000000.0``, ``f1e-05``
                                (Python ``repr``, ``-0.0`` as ``0.0``;
                                Spark's ``format_float_column``)
duration  ``d<seconds>``        ``d90.0`` (float seconds, as float)
========= ===================== ==========================

``<len>`` counts Unicode code points (Python ``len``, Spark ``length``). Then
``%``, ``{`` and ``}`` are percent-escaped so the hash tag is never cut short,
and an encoding longer than :data:`MAX_KEY_CHARS` is replaced by ``#`` plus
the first 40 hex digits of its SHA-256, which bounds key length. No encoded
component starts with ``#``, so hashed and plain encodings never collide.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

#: Longest plain encoding kept verbatim; longer ones are hashed (SPEC §5.5).
MAX_KEY_CHARS = 120

#: Prefix of every Redis key this project writes.
PREFIX = "sc:"


def encode_component(value: Any, type_name: str) -> str:
    """Encode one non-null key component of type ``type_name``.

    Args:
        value: run-time value (time as int ms).
        type_name: plan type name.

    Returns:
        The typed, unambiguous text (see the module table).

    Raises:
        ValueError: unsupported type.

    >>> encode_component("a|b", "string"), encode_component(-5, "int")
    ('s3:a|b', 'i-5')
    """
    if type_name == "string":
        return f"s{len(value)}:{value}"
    if type_name == "int":
        return f"i{int(value)}"
    if type_name == "time":
        return f"t{int(value)}"
    if type_name == "bool":
        return "b1" if value else "b0"
    if type_name in ("float", "duration"):
        x = float(value)
        if x == 0.0:
            x = 0.0  # -0.0 is the same key and value as 0.0 (Python's ==, Spark's grouping)
        return f"{'f' if type_name == 'float' else 'd'}{x!r}"
    raise ValueError(f"cannot use a value of type {type_name} as a key")


def escape(text: str) -> str:
    """Percent-escape ``%``, ``{`` and ``}`` (hash-tag safety) and bound the length.

    >>> escape("s3:{x}")
    's3:%7Bx%7D'
    """
    text = text.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
    if len(text) > MAX_KEY_CHARS:
        return "#" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]
    return text


def encode_key(values: Sequence[Any], types: Sequence[str]) -> str | None:
    """Encode an entity key (a tuple of components).

    Args:
        values: component values; the empty tuple is the global key.
        types: component type names, same length.

    Returns:
        The encoded key, or ``None`` if any component is null (SPEC §2.4:
        a null key writes nothing and reads null).

    >>> encode_key(("1.1.1.1", 7), ("string", "int")), encode_key((None,), ("string",))
    ('s7:1.1.1.1|i7', None)
    """
    parts = []
    for v, t in zip(values, types):
        if v is None:
            return None
        parts.append(encode_component(v, t))
    return escape("|".join(parts))


#: The hash tag of a global state (no entity key: the empty encoding). An
#: empty tag ``{}`` would make Redis Cluster hash the whole key, so a state's
#: companion keys (``<key>:b``, stream batch markers) could land in other
#: slots; no encoded key is ``_`` (components start with a type letter or ``#``).
GLOBAL_TAG = "_"


def redis_key_parts(definition_hash: str) -> tuple[str, str]:
    """Return the text of a state's Redis keys before and after the encoded entity key: ``("sc:{", "}:<hash>")``.

    :func:`redis_key` is ``before + (encoded key or GLOBAL_TAG) + after``;
    serving's generated argument builders (``serving.roundargs``) fold the
    two parts into their code once per state.

    >>> redis_key_parts("0123456789abcdef")
    ('sc:{', '}:0123456789abcdef')
    """
    return f"{PREFIX}{{", f"}}:{definition_hash}"


def redis_key(encoded_key: str, definition_hash: str) -> str:
    """Return the Redis hash name of one (state, entity key): ``sc:{<encoded key or _>}:<hash>``.

    >>> redis_key("s1:a", "0123456789abcdef"), redis_key("", "0123456789abcdef")
    ('sc:{s1:a}:0123456789abcdef', 'sc:{_}:0123456789abcdef')
    """
    before, after = redis_key_parts(definition_hash)
    return before + (encoded_key or GLOBAL_TAG) + after


#: Suffix of a state's second key: the sorted set of running totals in which online ``Count`` writes go
#: (``compiler.algebra.lua`` ``pc_write``), beside the tile ladder's hash under the state key itself.
RUNNING_SUFFIX = ":z"


def definition_hash_of(key: str) -> str:
    """Return the definition hash (SPEC §5.4) that a state key, or its running-totals key, is namespaced by.

    >>> definition_hash_of("sc:{s1:a}:0123456789abcdef"), definition_hash_of("sc:{s1:a}:0123456789abcdef:z")
    ('0123456789abcdef', '0123456789abcdef')
    """
    if key.endswith(RUNNING_SUFFIX):
        key = key[: -len(RUNNING_SUFFIX)]
    return key.rsplit(":", 1)[-1]


def encode_value_tuple(values: Sequence[Any], types: Sequence[str]) -> str:
    """Encode the value tuple of a ``CountUnique`` write as a field-name suffix.

    Same scheme as :func:`encode_key` (values are known non-null here).
    """
    return escape("|".join(encode_component(v, t) for v, t in zip(values, types)))
