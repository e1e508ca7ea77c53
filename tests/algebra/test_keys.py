"""Entity-key encoding and Redis key names (SPEC §5.1, §5.4, §5.5)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from compiler.algebra.keys import GLOBAL_TAG, MAX_KEY_CHARS, encode_key, redis_key

component = st.one_of(
    st.tuples(st.text(), st.just("string")),
    st.tuples(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.just("int")),
    st.tuples(st.booleans(), st.just("bool")),
)


@given(st.lists(component, max_size=3), st.lists(component, max_size=3))
def test_encoding_is_injective(a, b):
    ea = encode_key([v for v, _ in a], [t for _, t in a])
    eb = encode_key([v for v, _ in b], [t for _, t in b])
    if a != b:
        assert ea != eb
    else:
        assert ea == eb


@given(st.lists(component, max_size=4))
def test_encoding_is_bounded_and_tag_safe(comps):
    enc = encode_key([v for v, _ in comps], [t for _, t in comps])
    assert len(enc) <= max(MAX_KEY_CHARS, 41)
    assert "{" not in enc and "}" not in enc
    key = redis_key(enc, "0123456789abcdef")
    # the hash tag is exactly the encoded entity key (GLOBAL_TAG for the global one: never empty, so
    # Redis Cluster hashes the tag and a state's companion keys share its slot, SPEC §5.1)
    assert key[key.index("{") + 1 : key.index("}")] == (enc or GLOBAL_TAG) != ""


def test_separators_braces_unicode_do_not_collide():
    pairs = [
        (("a|b",), ("string",)), (("a", "b"), ("string", "string")),
        (("{x}",), ("string",)), (("%7Bx%7D",), ("string",)),
        (("5",), ("string",)), ((5,), ("int",)),
        (("",), ("string",)), ((), ()),
        (("ü",), ("string",)), (("u",), ("string",)),
    ]
    encs = [encode_key(v, t) for v, t in pairs]
    assert len(set(encs)) == len(encs)


def test_null_component_means_no_key():
    assert encode_key(("a", None), ("string", "string")) is None
    assert encode_key(("",), ("string",)) == "s0:"
