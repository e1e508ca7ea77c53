"""SPEC §3.2: resolution rule and exact multi-resolution covers (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.algebra.windows import counted_range, cover, levels_s, resolution_s, short_cover, tile_index
from tests.algebra.oracle import counts


def test_resolution_examples():
    # W/1000 >= r and r divides W, largest of 1s/1m/1h/1d; else 1 s
    assert resolution_s(1) == 1
    assert resolution_s(600) == 1            # 10 minutes
    assert resolution_s(3600) == 1           # 1 hour: 3.6 s < 1 min
    assert resolution_s(60_000) == 60        # 1000 minutes
    assert resolution_s(86400) == 60         # 1 day
    assert resolution_s(7 * 86400) == 60     # 604.8 < 3600
    assert resolution_s(30 * 86400) == 60    # 2592 < 3600
    assert resolution_s(3_600_000) == 3600   # 1000 hours
    assert resolution_s(3_600_060) == 60     # 1 h does not divide
    assert resolution_s(1000 * 86400) == 86400
    assert resolution_s(60_001) == 1         # 1 min does not divide


@given(st.integers(min_value=1, max_value=400 * 86400))
def test_resolution_rule(w):
    r = resolution_s(w)
    assert r in (1, 60, 3600, 86400)
    assert r == 1 or (r * 1000 <= w and w % r == 0)
    for bigger in (60, 3600, 86400):
        if bigger > r:
            assert not (bigger * 1000 <= w and w % bigger == 0)


@settings(max_examples=300)
@given(
    w=st.sampled_from([1, 59, 600, 3600, 3 * 3600, 86400, 7 * 86400, 30 * 86400, 2_000_000]),
    t=st.integers(min_value=-10**12, max_value=2 * 10**12),
)
def test_cover_is_exact_and_small(w, t):
    r = resolution_s(w)
    lo, hi = counted_range(t, w)
    tiles = list(cover(lo, hi, r, levels_s(w)))
    # disjoint, contiguous, aligned, covering exactly [lo*r, (hi+1)*r)
    pos = lo * r
    for size, idx in tiles:
        assert idx * size == pos
        pos += size
    assert pos == (hi + 1) * r
    # the ladder's steps bound each edge: 4+2+3+4+2+3+3+5 finer tiles
    assert len(tiles) <= 2 * 26 + w // 86400 + 1


@settings(max_examples=300)
@given(
    w=st.sampled_from([1, 59, 600, 3600, 3 * 3600, 86400, 7 * 86400, 30 * 86400, 2_000_000]),
    t=st.integers(min_value=-10**12, max_value=2 * 10**12),
)
def test_short_cover_is_the_cover_with_its_descent_rounded_up(w, t):
    r, sizes = resolution_s(w), levels_s(w)
    lo, hi = counted_range(t, w)
    exact, short = list(cover(lo, hi, r, sizes)), short_cover(lo, hi, r, sizes)
    # contiguous and aligned from lo*r, ending in the tile that holds hi's end
    pos = lo * r
    for size, idx in short:
        assert idx * size == pos
        pos += size
    last = short[-1][0]
    assert (hi + 1) * r <= pos < (hi + 1) * r + last
    # the same climb as the exact cover, then only tiles of the level it reached
    climb = [x for x in exact if x in short]
    assert short[:len(climb)] == climb and all(size == last for size, _ in short[len(climb):])
    assert len(short) <= len(exact) + 1


@settings(max_examples=300)
@given(
    w=st.sampled_from([1, 2, 600, 3600, 86400, 30 * 86400]),
    t=st.integers(min_value=0, max_value=2 * 10**12),
    ds=st.integers(min_value=-5, max_value=40 * 86400 * 1000),
)
def test_counted_range_matches_rule(w, t, ds):
    s = t - ds
    r = resolution_s(w)
    lo, hi = counted_range(t, w)
    in_range = lo <= tile_index(s, r) <= hi and s <= t
    assert in_range == counts(s, t, w, r)


def test_boundaries():
    # W = 10 min, r = 1 s: exactly W old never counts; W - r old always does
    w, t = 600, 1_000_000_000_000
    r = resolution_s(w)
    assert not counts(t - w * 1000, t, w, r)
    assert counts(t - (w - r) * 1000, t, w, r)
    assert counts(t, t, w, r)
    assert not counts(t + 1, t, w, r)
