"""``tests.e2e.store_dump.diff_stores``: float sums compare to 1e-9, everything else exactly, both sides shown."""

from __future__ import annotations

import pytest

from tests.e2e.store_dump import assert_same_store, diff_stores, float_sum_fields
from tests.serving.helpers import compile_text

TOPOLOGY = """
event login
user := $.user as string
amount := $.amount as float?
items := $.items as int ? 0
s_amount := Sum(amount by user last 7 days)
s_items := Sum(items by user last 7 days)
avg := Average(amount by user last 7 days)
lo := Min(amount by user last 7 days)
d := DecayedSum(amount by user last 1 day)
seq := Sequence(amount by user limit 3)
"""


@pytest.fixture(scope="module")
def plan():
    return compile_text(TOPOLOGY)


@pytest.fixture(scope="module")
def keys(plan):
    feats = {f.name: f for f in plan.events["login"].features}
    return {n: f"sc:{{s2:u1}}:{feats[n].aggregate.definition_hash}".encode()
            for n in ("s_amount", "s_items", "avg", "lo", "d", "seq")}


def image(keys, **fields):
    """A dump_store image: one hash per state name in ``fields`` ({field: value}), expiring."""
    return {keys[n]: (b"hash", content, True) for n, content in fields.items()}


def test_float_sum_fields_follow_the_layout(plan, keys):
    preds = float_sum_fields(plan)
    h = {n: k.rpartition(b":")[2] for n, k in keys.items()}
    assert preds[h["s_amount"]](b"h376944") and preds[h["s_amount"]](b"d15706") and not preds[h["s_amount"]](b"_p")
    assert preds[h["avg"]](b"m22616640.s") and not preds[h["avg"]](b"m22616640.c")
    assert preds[h["d"]](b"dv") and preds[h["d"]](b"dw") and not preds[h["d"]](b"dt")
    assert h["s_items"] not in preds and h["lo"] not in preds and h["seq"] not in preds


def test_float_sums_within_tolerance_are_equal(plan, keys):
    a = image(keys, s_amount={b"h1": b"34.019999999999996", b"_p": b"5"},
              avg={b"h1.s": b"0.30000000000000004", b"h1.c": b"3"}, d={b"dt": b"7", b"dv": b"1.0000000000000002",
                                                                       b"dw": b"2.0"})
    b = image(keys, s_amount={b"h1": b"34.02", b"_p": b"5"}, avg={b"h1.s": b"0.3", b"h1.c": b"3"},
              d={b"dt": b"7", b"dv": b"1.0", b"dw": b"2.0000000000000004"})
    assert diff_stores(a, b, plan) == ""
    assert_same_store(a, b, plan)
    # without the plan every field is exact
    assert "34.019999999999996" in diff_stores(a, b) and "34.02" in diff_stores(a, b)


def test_beyond_tolerance_or_exact_fields_differ_showing_both_sides(plan, keys):
    many = {f"h{i}".encode(): f"{i}.5".encode() for i in range(200)}  # a long key: the old diff cut it at 600 chars
    a = image(keys, s_amount={**many, b"h199": b"34.02"}, s_items={b"h1": b"1000000000001"},
              lo={b"h1": b"0.30000000000000004"}, avg={b"h1.s": b"1.0", b"h1.c": b"3"})
    b = image(keys, s_amount={**many, b"h199": b"34.0200001"}, s_items={b"h1": b"1000000000000"},
              lo={b"h1": b"0.3"}, avg={b"h1.s": b"1.0", b"h1.c": b"4"})
    diff = diff_stores(a, b, plan)
    assert "b'h199': b'34.02' != b'34.0200001'" in diff, diff  # only the differing field, both sides
    assert "h198" not in diff, diff
    assert "b'1000000000001' != b'1000000000000'" in diff  # int sum: exact, however close
    assert "b'0.30000000000000004' != b'0.3'" in diff  # Min keeps a written value: exact
    assert "b'h1.c': b'3' != b'4'" in diff and "h1.s" not in diff
    with pytest.raises(AssertionError, match="stores differ"):
        assert_same_store(a, b, plan)


def test_keys_types_expiry_and_missing_fields(plan, keys):
    a = {**image(keys, s_items={b"h1": b"1"}), b"sc:cov:x": (b"hash", [b"0-5"], False),
         keys["seq"]: (b"zset", [(b"00000000" + b"5:{}", 5.0)], True)}
    b = {**image(keys, s_items={b"h1": b"1", b"h2": b"2"}), b"sc:online": (b"hash", {}, False),
         keys["seq"]: (b"zset", [(b"00000000" + b"5:{}", 6.0)], False)}
    diff = diff_stores(a, b, plan)
    assert "only in first: b'sc:cov:x'" in diff and "only in second: b'sc:online'" in diff
    assert "b'h2': <missing> != b'2'" in diff
    assert "ttl=True != b'zset'/ttl=False" in diff
    b[keys["seq"]] = (b"zset", [(b"000000005:{}", 6.0)], True)
    assert "score 5.0 != 6.0" in diff_stores(a, b, plan)


def test_bare_contents_as_the_stream_dumps(plan, keys):
    a = {keys["avg"]: {b"h1.s": b"0.1", b"h1.c": b"1"}, keys["seq"]: [(b"m", 1.0)]}
    b = {keys["avg"]: {b"h1.s": b"0.10000000000000002", b"h1.c": b"1"}, keys["seq"]: [(b"m", 1.0)]}
    assert diff_stores(a, b, plan) == ""
    b[keys["avg"]] = {b"h1.s": b"0.2", b"h1.c": b"1"}
    assert "b'h1.s': b'0.1' != b'0.2'" in diff_stores(a, b, plan)
