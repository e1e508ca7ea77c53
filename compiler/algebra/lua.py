"""The Lua target of the algebra: one generated script per event type and round (SPEC §5.2).

``event.lua`` is an interpreter: every event sends a flat op list (opcodes,
field names, tile sizes, component suffixes, TTLs), ~500 arguments for a
flights departure, and the script walks it. This module generates, once per
(event type, round) from the plan, a straight-line script in which all of
that is constant, the way sqlglot generates SQL per dialect. Per event the
script receives only what varies:

* ``KEYS``: ``[id key or "", stream key or "", one Redis key per slot]``,
  where the slots are the round's reads before its writes, its writes, and
  its reads after them, in :class:`RoundSpec` order. An empty key skips its
  slot (a null entity key, a write whose filter or values rule it out, or a
  write after a repeated ``_id``); so does a placeholder ``{<hash tag>}``:
  in a Redis Cluster an event's keys span several hash slots, and each
  script call carries the keys of one slot, the others replaced by a
  placeholder in that slot (SPEC §5.1; ``serving.store.Store.run``). A
  cluster call's ``KEYS[2]`` is always its placeholder (the caller appends
  the event to the stream itself), and the script tests slot keys for a
  placeholder only in such a call.
* ``ARGV``: ``[t_ms, id ttl_ms or "", stream event JSON or ""]`` followed,
  for every non-skipped slot in order, by the slot's own arguments: a read
  with ``after`` takes the after time (epoch ms, ``""`` for null); a write
  takes :meth:`LuaGenerator.write_values` of its values.

The reply is ``[flag, one result per non-skipped read]``: bit 0 of the flag
is ``1`` (new or no id) or ``0`` (seen: the writes were skipped); bits 1-2
say the event was late (below). Reads of
``Count``, ``Sum``, ``Average``, ``Min``, ``Max`` and ``First`` merge their
tile cover inside the script and return one partial aggregate
(:meth:`LuaGenerator.decode_read` turns it into the IR of ``ops``), so
neither the field list nor the tiles cross the network. A ``Sum`` or an
``Average`` returns the two running totals' members it needs as stored
(``<ms>|<payload>``), beside the ladder's merged partial, and the worker
takes their payloads out (``_payload``) and subtracts them (``fsum`` of the
partials, ``_window_sum``): parsing and subtracting partials cost the
script 2-3 µs per read, and the workers scale out where the store does not
(``bench/lua_calls.py --per-slot departure``: its three ``Average`` reads
5.1, 4.4 and 4.1 µs against 6.9, 7.5 and 6.2; taking the payloads out,
1.1% of a departure's Lua instructions under valgrind, bench/HISTORY.md,
twenty-third session).

The stored layout and every update are those of ``event.lua`` and ``ops``
(same field names and texts), so backfill, stream and online writes keep
meeting in one store; a float tile sum is added as doubles in Lua and
stored as ``%.17g`` (exactly ``ops`` ``update``), as the stream's merges
(``event.lua``'s ``MF`` op) do. Merges are exact: float sums add
the same doubles in the same (time) order as ``ops.*.merge`` (Lua numbers
are IEEE doubles, ``%.17g`` round-trips them); integer sums are added in
Lua only while every term and partial sum stays below 2**53, and are
otherwise returned as their field texts for Python to add exactly (a total
outside int64 reads as null with the error ``integer overflow``).

Reads merge the *short* cover (:func:`windows.short_cover`) when no write
lies in a tile after the read's (the ``_m`` field, the latest resolution
tile written, is at most ``T(t)``; always so when events arrive in time
order): the tiles of the cover's trailing edge and middle, then whole tiles
of the last level through ``T(t)``, ~40% fewer fields than the exact
:func:`windows.cover`, which they fall back to otherwise. Tiled writes read
and write every level, ``_p`` and ``_m`` in one ``HMGET`` and one ``HSET``
(int sums added as decimal texts, exact past 2**53 and 2**63: a tile keeps
its exact total and a read whose total leaves int64 is null, SPEC §3.5).

Late events (SPEC §3.3; ``RoundSpec.lateness_ms``, the allowed lateness
``L``): every state keeps what a read up to ``L`` late needs, in its own key
(``ops``' module docstring has the fields): tiles of ``W + r + L``; tiled
writes append a raw entry to their raw bucket's field (in the same
``HMGET``/``HSET``; a bucket past ~2 KB goes on in further fields, so a
write on a hot key copies at most two such chunks, not its bucket, and a
chunk that fills is closed with a summary: its time range and partial
aggregates, ``raw_close``) and ``_t``, the latest write time; a read at
``t < _t`` merges the exact cover of the tiles before ``T(t)`` with the raw
entries of tile ``T(t)`` up to ``t``, taking closed chunks wholly inside
that range by their partials (``raw_scan``: it parses only the open chunk
and those that straddle ``t``, so its cost follows how late it is, not the
bucket's size: ``bench/hotkey.py --late-ms``). ``CountUnique`` keeps raw and older-write members
in its sorted set, ``Decayed*`` a base and raw tiles, write logs every
member of the last ``L`` and the ``n`` latest before it. The reply's first
element adds 2 when a state held a later write than ``t`` and 6 when one more
than ``L`` later (``serving.evaluate`` counts them).

Online ``Count``, ``Sum``, ``Average``, ``First*`` and ``Decayed*`` writes
keep *running members* instead (issue 10: a tiled write touched ~13 fields,
a read ~12-40), in a sorted set beside the state's hash, ``<state key>:z``
(:data:`compiler.algebra.keys.RUNNING_SUFFIX`), scored by event time: one
member per write (``Count``: the zero-padded number of writes up to it,
``pc_*``) or per event time (``Sum``, ``Average``: ``<ms>|<total>``, an exact
decimal text for int sums, the exact sum as non-overlapping partials
``<p1> <p2> ..`` for floats (Shewchuk's expansion, ``ex_add``),
``<count> <p1> ..`` for ``Average``, ``rs_*``; ``Decayed*``: the decayed
sums weighed at that time, ``dr_*``), or per tile its earliest write
(``First*``, ``fi_*``). A read is the difference of two lookups, the newest
member at or before ``t`` and the newest at or before the end of tile
``lo - 1``, whatever the window (one lookup for ``First*`` and
``Decayed*``; the first needs none after the same call's own write in
time order, which made the newest member: ``ZT``); a write in time order
adds or replaces one member; a late
write adds its value to every member after it (at most ``L`` times its
key's rate) and needs no raw entries, since the members themselves are per
write within ``L`` (older ones are thinned to one per tile, ``pc_thin``).
A write more than ``L`` late would shift up to the whole window's members:
``Count``, ``Sum`` and ``Average`` write it into the tile ladder of the
state's hash instead (``zr_write`` returns ``'L'``; ``_ladder_write``, the
path ``HyperLogLog`` takes), ``Decayed*`` into the hash's decayed sums, and
reads add the hash as they add backfill's.
The hash under the state key keeps the tile ladder that backfill and the
stream write (``writer.tilepass``, ``event.lua``) and that online writes
made before this layout: a read adds its cover when the hash exists
(``EXISTS``), so the two engines' writes, disjoint events, are counted once
each. The reads of a round ask first, with one ``EXISTS`` of all their keys,
whether any of their hashes exists, and each asks for its own only then
(``LuaGenerator._ladder_check``: a departure made 13 ``EXISTS`` calls, ~3% of
its Valkey CPU). ``bench/lua_ab.py`` against the ladder on the demo: 0.544x of Valkey's
CPU per call (bench/HISTORY.md, ninth session).

Online ``Min`` and ``Max`` writes keep a monotonic deque in the same sorted
set (``mx_*``; ``bench/lua_ab.py``: 0.897x the CPU per call before them): members
``<ms>|<value>``, scored by event time while no later write is as good, and
by the time of a later one that is (plus 2^50) once popped, kept while a
read up to ``L`` late can see them. A write in time order pops the members
it is as good as and appends itself (one lookup, one ``ZADD``); a read in
time order takes the first member from tile ``lo`` on; a late read adds
the popped members still alive at its time. ``HyperLogLog`` keeps the
ladder online: a sliding register-wise max needs, for reads up to ``L``
late, each register's writes since ``t - L`` and the newest one before it
(not done).

What a call's Lua costs (issue 10: most of a script call's Valkey CPU is its
Lua, bench/HISTORY.md): a number passed to ``redis.call`` is printed by the
server, as an integer when it is one (``ll2string``, exact for every ms and
offset time here, below 2^53), far cheaper than ``string.format('%d')`` in
Lua, so only texts that Lua itself needs (field names, members, exclusive
``(`` bounds) are formatted; a field name is one ``string.format('m%d',
..)``, not a concatenation; a running write passes its values to
``zr_write``'s ``own`` and ``shift`` as arguments, not in closures made
per write; ``ex_parse`` splits with plain finds, not a ``gmatch``
iterator; a read's first tile is ``T(t) - W / r + 1`` where ``r`` divides
``W``, no floor; ``zr_thin`` and the pruning periods skip their floors for
writes two tiles or a period apart; a ``HyperLogLog`` write stops at the
first level whose register is already as large (``u_hll``: every coarser
tile holds that one's writes); texts of one or two doubles are one
``string.format`` (``ex_text``, ``dr_text``, ``rs_add``), ``ex_add``
compares magnitudes without ``math.abs`` calls, a running write reads the
newest member's payload in place (``rs_add``'s ``k``), and a ``Min``/``Max``
write parses its value once and takes a deque member's time from its score
(``mx_pop``). Together -16.1% of a departure's Lua instructions under
valgrind, -15.2% of a wide event's
(bench/HISTORY.md, twenty-fourth session).

Source: SPEC §3.2 (window rule, via :func:`windows.counted_range` and
:func:`windows.cover`, reproduced here in Lua), §3.3 (exclusive reads before
the event's writes; arrival order and late events), §5.2, §5.3 (expiry and
pruning).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from math import fsum
from operator import itemgetter
from typing import Any, Callable, Sequence

import numpy as np

from compiler.algebra.keys import encode_value_tuple
from compiler.algebra.ops import (
    DECAY_HORIZON,
    HLL_M,
    HLL_Q,
    AggregateOp,
    AverageOp,
    CountOp,
    CountUniqueOp,
    DecayedOp,
    FirstOp,
    HyperLogLogOp,
    LatestOp,
    MaxOp,
    MinOp,
    SequenceOp,
    SetOp,
    SumOp,
    _encode_scalar,
    _g17,
    _num,
    fold,
    log_every_ms,
    prune_every_ms,
    hll_coupon,
    hll_estimate_counts,
    hll_estimate_of_values,
    log_member_parser,
    values_json,
)
from compiler.algebra.script import CALL_MARKER, code_names, common_script, shake, top_level_names
from compiler.algebra.windows import ALLOWED_LATENESS_S, LEVEL_CODE, counted_range, levels_s, raw_bucket_s
from compiler.runtime import EvalError, check_int


#: Hoisted constants kept in Lua locals (the rest go to the table ``K``); the
#: prelude's locals and these stay under Lua's 200 locals per function.
MAX_LOCAL_CONSTS = 100


_HLL_REGISTER = re.compile(rb";(\d+):(\d+)")
#: the shortest tile text kept parsed (~8 registers): shorter ones are parsed at each read. Caching only texts
#: of 256 bytes or more (twenty-seventh session) left the demo's 1-day HyperLogLog reads (~10 tiles of ~125
#: bytes) to ``np.fromstring`` at every read, ~26 of their ~50 µs (bench/HISTORY.md, thirty-first session)
_HLL_CACHED_BYTES = 64
#: a read's tile texts from this many bytes on are merged as register arrays (:func:`hll_read_estimate`)
_HLL_DENSE_BYTES = 512
#: tile texts of at least :data:`_HLL_CACHED_BYTES`, parsed into one array of their ``slot, rho`` pairs (closed
#: tiles come back on every read of their window; a dict of bytes and numpy arrays is one the cyclic GC does not
#: track, so its size costs no collection time), and the bytes they hold (texts and arrays): past
#: :data:`_HLL_ARRAYS_MAX_BYTES` the cache starts over (a key's open tile is a new text at each write)
_HLL_ARRAYS: dict[bytes, np.ndarray] = {}
_HLL_ARRAYS_HELD = [0]
_HLL_ARRAYS_MAX_BYTES = 64 << 20
#: the bytes an entry of :data:`_HLL_ARRAYS` holds beyond its text and its array's data (objects, dict slot)
_HLL_ENTRY_BYTES = 200
#: sparse reads' estimates kept, by their sorted register values (:func:`_hll_sparse_estimate`): ~0.5 KB each at most
_HLL_ESTIMATES_KEPT = 8192


def _hll_arrays(raw: bytes) -> np.ndarray:
    """The ``slot, rho, slot, rho, ..`` int64 array of one tile text ``";slot:rho;.."`` (parsed by numpy's text
    reader, ``np.fromstring`` with a separator: 6x faster than ``int`` per number; where a NumPy lacks it, by
    ``int``), from :data:`_HLL_ARRAYS` for texts of :data:`_HLL_CACHED_BYTES` or more."""
    long = len(raw) >= _HLL_CACHED_BYTES
    got = _HLL_ARRAYS.get(raw) if long else None
    if got is not None:
        return got
    if len(raw) <= 1:
        return np.zeros(0, np.int64)
    numbers = raw[1:].replace(b":", b";")
    try:
        got = np.fromstring(numbers, dtype=np.int64, sep=";")
    except (AttributeError, TypeError):
        got = np.array(list(map(int, numbers.split(b";"))), dtype=np.int64)
    if long:
        size = got.nbytes + len(raw) + _HLL_ENTRY_BYTES
        if _HLL_ARRAYS_HELD[0] + size > _HLL_ARRAYS_MAX_BYTES:
            _HLL_ARRAYS.clear()
            _HLL_ARRAYS_HELD[0] = 0
        _HLL_ARRAYS[raw] = got
        _HLL_ARRAYS_HELD[0] += size
    return got


#: a read slot's parsed write-log members kept (:func:`log_member_values`); past it the slot's cache starts over
_LOG_MEMBERS_KEPT = 4096
#: value types whose parsed values are immutable, so one tuple may serve every read that returns the member
_ATOMIC_VALUES = (str, int, float, bool, type(None))


def log_member_values(value_types: Sequence[str]) -> Callable[[bytes | str], tuple]:
    """The write-log member parser of one read slot (``ops.log_member_parser``), with the members it parsed kept.

    A log read returns the same members at every read of its key until they
    leave the window (a wide-topology event parsed ~90 members, 90% of them
    seen before: bench/HISTORY.md, twenty-eighth session), and a member's
    text fixes its values (``ops.log_member``: rank, time and values' JSON),
    so a member's values are parsed once: up to :data:`_LOG_MEMBERS_KEPT`
    members per slot (then the cache starts over; ~1 MB per slot at most for
    members of ~60 bytes), values of immutable types only (a tuple holding a
    list or dict is parsed at each read, as no caller may then change a
    shared one).

    Args:
        value_types: the state's value types.

    Returns:
        ``member (bytes or str) -> values tuple``; raises ``ValueError`` as ``ops.log_member_parser``'s parser.
    """
    parse = log_member_parser(value_types)
    kept: dict[bytes | str, tuple] = {}
    get = kept.get
    atomic = _ATOMIC_VALUES

    def values(member: bytes | str) -> tuple:
        got = get(member)
        if got is not None:
            return got
        got = parse(member)
        for v in got:
            if not isinstance(v, atomic):
                return got
        if len(kept) >= _LOG_MEMBERS_KEPT:
            kept.clear()
        kept[member] = got
        return got

    return values


def hll_merge(texts: Sequence[bytes | str]) -> dict[int, int]:
    """Merge sparse HyperLogLog tile texts (``";slot:rho;slot:rho"``) register-wise by max.

    Texts shorter than ``_HLL_CACHED_BYTES`` are parsed at each read, longer
    ones once per process (:func:`_hll_arrays`: a window's closed tiles come
    back unchanged on every read); the merge sorts all ``(slot, rho)``
    pairs by ``rho`` so that ``dict`` keeps each slot's largest, both in C.

    Args:
        texts: the tiles' texts as the script returns them (bytes; str accepted).

    Returns:
        ``{slot: rho}`` of the non-zero registers (``ops.HyperLogLogOp``'s IR).
    """
    pairs: list[tuple[int, int]] = []
    for raw in texts:
        if isinstance(raw, str):
            raw = raw.encode()
        if len(raw) < _HLL_CACHED_BYTES:
            pairs += [(int(a), int(b)) for a, b in _HLL_REGISTER.findall(raw)]
        else:
            v = _hll_arrays(raw)
            pairs += zip(v[0::2].tolist(), v[1::2].tolist())
    pairs.sort(key=itemgetter(1))
    return dict(pairs)


#: ``ops.hll_estimate_of_values`` kept per sorted tuple of register values (:func:`hll_read_estimate`'s sparse
#: reads): a wide-topology event's sparse reads repeat one of a few thousand such tuples (90% of 16,700 reads after
#: 5,500), and the estimate took ~4.4 of a read's ~9.4 µs (bench/HISTORY.md, thirty-second session)
_hll_sparse_estimate = lru_cache(maxsize=_HLL_ESTIMATES_KEPT)(hll_estimate_of_values)


def hll_read_estimate(texts: Sequence[bytes | str]) -> int:
    """The estimate of a ``HyperLogLog`` read from its tiles' texts: ``hll_estimate(hll_merge(texts))``.

    Reads whose texts are short (most: a key's few registers) merge as
    :func:`hll_merge` does, and their estimate is kept per sorted register
    values (:func:`_hll_sparse_estimate`). From ``_HLL_DENSE_BYTES`` on, the
    texts become arrays of their ``slot, rho`` pairs (:func:`_hll_arrays`), the register
    array is their ``np.maximum.at``, and the histogram of its non-empty
    registers (``np.bincount``), with the empty ones as the rest, goes to
    ``ops.hll_estimate_counts``: the same histogram, so the same estimate.
    A key's open tiles are new texts at every write; parsing them in Python
    took most of the wide topology's ``HyperLogLog`` reads (bench/HISTORY.md,
    twenty-seventh session).

    Args:
        texts: the tiles' texts as the script returns them (bytes; str accepted).

    Returns:
        The rounded estimate (0 for no registers).

    Source: ``ops.hll_estimate`` (Ertl 2017); SPEC §2.4 (HyperLogLog).
    """
    raws = [t.encode() if isinstance(t, str) else t for t in texts]
    if sum(map(len, raws)) < _HLL_DENSE_BYTES:
        registers = hll_merge(raws)
        return _hll_sparse_estimate(tuple(sorted(registers.values()))) if registers else 0
    pairs = np.concatenate([_hll_arrays(raw) for raw in raws])
    registers = np.zeros(HLL_M, dtype=np.int64)
    np.maximum.at(registers, pairs[0::2], pairs[1::2])
    # the histogram of the non-empty registers (a few hundred: bincount over all 4,096 took ~11 µs), and the
    # empty ones counted as the rest
    full = registers[registers > 0]
    if full.size == 0:
        return 0
    counts = np.bincount(full, minlength=HLL_Q + 2)
    counts[0] = HLL_M - full.size
    return hll_estimate_counts(counts.tolist())


def _floats(texts: Sequence[bytes]) -> list[float]:
    """The doubles of a running total's partials (``rs_add``'s ``'<p1> <p2> ..'``, split)."""
    return [float(x) for x in texts]


def _window_sum(a: list[float], b: list[float]) -> float:
    """The window's float sum from two running totals' partials: ``a`` (newest at or before the read) minus ``b``
    (before the window), each an exact sum as non-overlapping partials (Shewchuk's expansion, ``rs_add``),
    rounded once (``math.fsum``: correctly rounded); an empty list is an empty total. Where ``fsum`` raises
    (``inf - inf``, a partial past the doubles) the result is what the script's ``ex_diff`` gave before the
    workers took this over (a NaN or an infinity): ``b``'s partials subtracted from ``a``'s expansion by
    ``ex_add``'s two-sum steps, then the partials added from the largest."""
    try:
        return fsum(a + [-x for x in b])
    except (ValueError, OverflowError):
        pass
    ps = list(a)
    for x in b:
        x, i = -x, 0
        for y in ps:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo != 0:
                ps[i] = lo
                i += 1
            x = hi
        del ps[i:]
        ps.append(x)
    out = 0.0
    for x in reversed(ps):
        out += x
    return out


def _payload(member: bytes | None) -> bytes | None:
    """The payload of a running-totals member ``b'<ms>|<payload>'`` (``rs_range``'s), ``None`` for ``None``.

    >>> _payload(b"1700000000000|2 5.5"), _payload(None)
    (b'2 5.5', None)
    """
    return None if member is None else member[member.index(b"|") + 1:]


def _int_sum_read(res: list) -> int:
    """The exact total of an int ``Sum`` read from its script result (``rs_isum``).

    Args:
        res: ``[a, b, *tiles]``: the running totals' members at the read
            time and before the window's first tile (``b'<ms>|<decimal
            text>'``, ``None`` for none), then the ladder's tiles (decimal
            texts).

    Returns:
        ``a - b + sum(tiles)`` exactly (a Python int: past int64 too; the
        finisher's ``check_int`` makes that an overflow, SPEC §3.5). Texts
        are read as ``Count``'s are (``ops._num``: a tile written as
        ``"5.0"`` reads 5).
    """
    a, b = _payload(res[0]), _payload(res[1])
    return (_num(a, "int") or 0) - (_num(b, "int") or 0) + sum(_num(x, "int") for x in res[2:])


def _decayed_read(op: DecayedOp, res: Any) -> tuple[int, float, float] | None:
    """The ``Decayed*`` partial ``(ms, decayed sum, decayed weight)`` of a read's script result (``dr_read``).

    Args:
        op: the read's ``DecayedOp`` (its ``decode`` takes the list form).
        res: the online member ``b'<ms>|<sum> <weight>'`` itself (no ladder
            hash: the store returns it unparsed), or the list ``[ms, sum,
            weight]`` of texts (merged with a ladder hash; ``None`` x 3: no
            write).

    Returns:
        The partial, or ``None`` when nothing was written.
    """
    if isinstance(res, bytes):
        bar = res.index(b"|")
        sv, sw = res[bar + 1:].split(b" ")
        return int(res[:bar]), float(sv), float(sw)
    return op.decode(res)


def _float_sum_read(res: list) -> float:
    """A float ``Sum`` read's IR from the script's ``[a, b, ladder]`` (the running totals' members, whose payloads
    :func:`_payload` takes, and the tile ladder's ``%.17g`` sum, each ``None`` when absent): the window's exact
    sum rounded once, plus the ladder's."""
    a, b, x = _payload(res[0]), _payload(res[1]), res[2]
    s = _window_sum(_floats(a.split()) if a is not None else [], _floats(b.split()) if b is not None else [])
    return s + float(x) if x is not None else s


def _average_read(res: list) -> tuple[float, int]:
    """An ``Average`` read's IR ``(sum, count)`` from ``[a, b, ladder sum, ladder count]`` (members whose
    payloads are ``'<count> <p1> ..'``, each split once; each ``None`` when absent), as :func:`_float_sum_read`."""
    a, b, xs, xc = _payload(res[0]), _payload(res[1]), res[2], res[3]
    pa = a.split() if a is not None else [b"0"]
    pb = b.split() if b is not None else [b"0"]
    s, c = _window_sum(_floats(pa[1:]), _floats(pb[1:])), int(pa[0]) - int(pb[0])
    if xs is not None:
        s += float(xs)
        c += int(xc)
    return s, c


@dataclass(frozen=True)
class ReadSlot:
    """One aggregate read of a round.

    Attributes:
        op: the function's algebra (``ops.make_op``).
        window_s: the window ``W`` (seconds).
        resolution_s: the resolution ``r`` (seconds).
        limit: ``limit n`` (a write-log read) or ``None``.
        has_after: the read has an ``after`` time (one ARGV element).
    """

    op: AggregateOp
    window_s: int
    resolution_s: int
    limit: int | None = None
    has_after: bool = False


@dataclass(frozen=True)
class WriteSlot:
    """One state write of a round.

    Attributes:
        op: the function's algebra.
        window_s, resolution_s, limit: as in :class:`ReadSlot`.
    """

    op: AggregateOp
    window_s: int
    resolution_s: int
    limit: int | None = None


@dataclass(frozen=True)
class RoundSpec:
    """The slots of one round, in script order (module docstring).

    Attributes:
        name: label written into the script's header (event type and round).
        reads_before: reads that run before the writes (``exclusive`` reads
            of a state the event writes).
        writes: the round's state writes.
        reads_after: the other reads (they see the event's own writes).
        lateness_ms: the allowed lateness ``L`` in ms (SPEC §3.3,
            ``SCOWL_ALLOWED_LATENESS``): states keep what reads up to ``L``
            late need (module docstring).
        dry: a dry run (the API's read-only mode, ``POST /event?dry_run``):
            the script saves each key it writes (``DUMP`` and ``PTTL``)
            before the writes and puts it back (``RESTORE ... REPLACE``, or
            ``DEL`` if it did not exist) after the reads, inside the same
            atomic call. The reads see the event's own writes exactly as a
            real call would, and the store ends as it was: no client ever
            sees the written state.
        stream_maxlen: the event stream's cap (``SCOWL_EVENT_STREAM_MAXLEN``):
            the script's ``XADD`` trims the stream to about this many entries
            (``MAXLEN ~``: whole macro nodes, so it may keep up to one node,
            ~100 entries, more); ``None``: no cap.
    """

    name: str
    reads_before: tuple[ReadSlot, ...] = ()
    writes: tuple[WriteSlot, ...] = ()
    reads_after: tuple[ReadSlot, ...] = ()
    lateness_ms: int = ALLOWED_LATENESS_S * 1000
    dry: bool = False
    stream_maxlen: int | None = None


# Functions of every generated script, after common.lua (shared with event.lua).
_PRELUDE = r"""
local EXACT = 9007199254740992

-- whether a KEYS entry names a key: '' skips its slot, and so does a
-- placeholder '{<hash tag>}' (a Redis Cluster call passes one in the call's
-- slot for every slot of the round it does not carry; state keys start 'sc:')
local function live(k)
  return k ~= '' and string.byte(k, 1) ~= 123
end

-- Late events (SPEC §3.3). late_flag: 2 when a state read or written holds a
-- write after t, 6 when one is more than LATE (the allowed lateness, ms)
-- after t; added to the reply's first element.
local late_flag = 0
-- raw tiles deleted at once (book)
local RAW_BATCH = 4
local function note_late(last_ms, t)
  if last_ms > t then
    if last_ms - t > LATE then late_flag = 6 elseif late_flag == 0 then late_flag = 2 end
  end
end

-- Whether a write at t (ms) is its state's first in a pruning period of every ms of event time,
-- its state's newest write before it having been at prev: the writes that drop what no read at
-- t - LATE or later can use (zr_horizon, mx_write, cu_write, log_write)
local function prune_due(t, prev, every)
  return t - prev >= every or math.floor(t / every) ~= math.floor(prev / every)
end

-- Raw entries of a raw bucket (tiled states: book; Decayed* hashes written before dr_write), kept
-- for late reads: '<ms> <length> <payload>' each, in arrival order, in chunks of
-- about RAW_CHUNK bytes, so that a write copies at most two chunks, not its
-- bucket: on a key written 200 times a second a write would otherwise copy the
-- ~200 KB of a 1-minute-resolution state's 60 s bucket, and up to ~12 MB of a
-- 1-hour state's 1-hour bucket by the hour's end (bench/hotkey.py). Field f (the
-- bucket's name) holds the first chunk; once it is full the writes go to f.1,
-- then f.2, ..., and the first chunk's text starts with '#<J> ', J the last
-- chunk. Entries stay in arrival order (chunk 0, 1, .., J).
-- A chunk k that fills is closed with its summary in field f.p<k> (raw_close):
-- the least and greatest ms of its entries, the greatest ms of chunks 0..k, and
-- the partial aggregates (rf_<kind>) of its entries and of those of chunks
-- 0..k (the latter only while it stays within RAW_CHUNK bytes: a HyperLogLog's
-- registers outgrow it). A late read (raw_scan) walks the summaries back from the last closed
-- chunk and stops at the first chunk k whose chunks 0..k all lie in its range
-- (it takes their partial) or all before it: it parses only the open chunk and
-- the closed ones that straddle its range, and reads one summary per chunk
-- that arrived after its range began: O(lateness x rate), not O(bucket)
-- (bench/hotkey.py --late-ms).
-- The pruning pass deletes chunks and summaries as any field of the bucket's
-- index (dead_tiles: '.<j>' and '.p<k>' are suffixes); raw_hdel deletes buckets by name.
local RAW_CHUNK = 2048

-- the raw bucket text of chunk 0 (without its header) and the last chunk j (0: none)
local function raw_head(text)
  if string.byte(text, 1) ~= 35 then return text, 0 end  -- '#'
  local sp = string.find(text, ' ', 2, true)
  return string.sub(text, sp + 1), tonumber(string.sub(text, 2, sp - 1))
end

-- Decayed: (ref ms, sum, count) merged with a partial (ms, v, weight c) (common.lua decay_sums)
local function dmerge(acc, ms, v, w, c)
  c = c or 1
  if not acc then return { ms, v, c } end
  local t, sv, sw = decay_sums(acc[1], acc[2], acc[3], ms, v, c, w)
  return { t, sv, sw }
end

-- Calls each(ms, ms text, payload) for the raw entries of text, in order.
local function raw_entries(text, each)
  local find, sub = string.find, string.sub
  local i, len = 1, #text
  while i <= len do
    local s1 = find(text, ' ', i, true)
    local s2 = find(text, ' ', s1 + 1, true)
    local mt = sub(text, i, s1 - 1)
    local e = s2 + tonumber(sub(text, s1 + 1, s2 - 1))
    each(tonumber(mt), mt, sub(text, s2 + 1, e))
    i = e + 1
  end
end

-- Partial aggregates of raw entries, one function per kind of state that keeps the tile
-- ladder online (HyperLogLog, and Count, Sum and Average writes more than L late; the others
-- keep running members only): rf_<kind>(text, acc, arg)
-- returns the partial of the entries of partial acc (a text; nil: none) and then those of
-- text, as a text, which reads as the entries would: one more tile of the read's merge
-- (raw_range). (A script makes a closure per local function it keeps, on every call, so it
-- keeps only its own.)
-- Count and int Sum: the exact sum (int_add_text)
local function rf_int(text, acc)
  raw_entries(text, function(ms, mt, p) acc = int_add_text(acc, p) end)
  return acc
end

-- float Sum: the double sum in arrival order, as %.17g (as a tile's, float_text)
local function rf_float(text, acc)
  local x = acc and tonumber(acc)
  raw_entries(text, function(ms, mt, p) x = x and x + tonumber(p) or tonumber(p) end)
  return string.format('%.17g', x)
end

-- Average: '<sum> <count>'
local function rf_avg(text, acc)
  local x, c = nil, 0
  if acc then
    local sp = string.find(acc, ' ', 1, true)
    x, c = tonumber(string.sub(acc, 1, sp - 1)), tonumber(string.sub(acc, sp + 1))
  end
  raw_entries(text, function(ms, mt, p)
    x = x and x + tonumber(p) or tonumber(p)
    c = c + 1
  end)
  return string.format('%.17g', x) .. ' ' .. string.format('%d', c)
end

-- HyperLogLog: the registers ';slot:rho..' (register-wise max)
local function rf_hll(text, acc)
  local regs, order, parts = {}, {}, {}
  if acc then max_registers(regs, order, acc) end
  raw_entries(text, function(ms, mt, p) max_registers(regs, order, p) end)
  for i = 1, #order do parts[i] = ';' .. order[i] .. ':' .. string.format('%d', regs[order[i]]) end
  return table.concat(parts)
end

-- the Decayed partial { ms, sum, count } of a text '<ms> <sum> <count>' (nil: nil)
local function dpartial(text)
  if not text then return nil end
  local s1 = string.find(text, ' ', 1, true)
  local s2 = string.find(text, ' ', s1 + 1, true)
  return { tonumber(string.sub(text, 1, s1 - 1)), tonumber(string.sub(text, s1 + 1, s2 - 1)),
           tonumber(string.sub(text, s2 + 1)) }
end


-- A closed chunk's summary (field f.p<k>): '<min> <max> <runmax> <plen> <clen> <partial><cum>',
-- runmax the greatest ms of chunks 0..k and cum the partial of their entries (clen -1: none,
-- past RAW_CHUNK bytes here or at an earlier chunk); for a bucket whose earlier chunks have
-- no summary (chunked before summaries were kept) runmax is 2^53 and there is no cum. Returns min, max, runmax, partial, cum (false: none), or nil for none.
local function raw_summary(text)
  if not text then return nil end
  local find, sub = string.find, string.sub
  local s1 = find(text, ' ', 1, true)
  local s2 = find(text, ' ', s1 + 1, true)
  local s3 = find(text, ' ', s2 + 1, true)
  local s4 = find(text, ' ', s3 + 1, true)
  local s5 = find(text, ' ', s4 + 1, true)
  local e = s5 + tonumber(sub(text, s3 + 1, s4 - 1))
  local cl = tonumber(sub(text, s4 + 1, s5 - 1))
  return tonumber(sub(text, 1, s1 - 1)), tonumber(sub(text, s1 + 1, s2 - 1)), tonumber(sub(text, s2 + 1, s3 - 1)),
         sub(text, s5 + 1, e), cl >= 0 and sub(text, e + 1)
end

-- Closes chunk j of bucket field f of key (full: its text; head: chunk 0's, without
-- header): appends to args (n entries used) its summary (raw_summary; partials by
-- rf, arg), the first chunk with header '#<j + 1> ' and the new chunk j + 1 holding
-- entry e. Returns the new n and the partial of chunks 0..j (nil: unknown).
local function raw_close(key, args, n, f, head, j, full, e, rf, arg)
  local fmt = string.format
  local lo, hi = EXACT, -EXACT
  raw_entries(full, function(ms)
    if ms < lo then lo = ms end
    if ms > hi then hi = ms end
  end)
  local part = rf(full, nil, arg)
  local run, cum = hi, part
  if j > 0 then
    local _, _, prun, _, pcum = raw_summary(redis.call('HGET', key, f .. '.p' .. fmt('%d', j - 1)))
    if prun then
      if prun > run then run = prun end
      cum = pcum and rf(full, pcum, arg)
    else
      run, cum = EXACT, false
    end
  end
  if cum and #cum > RAW_CHUNK then cum = false end
  args[n + 1] = f .. '.p' .. fmt('%d', j)
  args[n + 2] = fmt('%d', lo) .. ' ' .. fmt('%d', hi) .. ' ' .. fmt('%d', run) .. ' ' .. #part .. ' '
                .. (cum and #cum or -1) .. ' ' .. part .. (cum or '')
  local js = fmt('%d', j + 1)
  args[n + 3], args[n + 4] = f, '#' .. js .. ' ' .. head
  args[n + 5], args[n + 6] = f .. '.' .. js, e
  return n + 6, cum or nil
end

-- Appends to args (n entries used) the writes that add one raw entry to bucket
-- field f of key, given cur, f's text (false: none); returns the new n, and when
-- the entry closed a chunk (raw_close, partials by rf and arg) the partial of the
-- closed chunks (nil: none or unknown).
local function raw_append(key, args, n, cur, f, ts, payload, rf, arg)
  local e = ts .. ' ' .. #payload .. ' ' .. payload
  if not cur then
    args[n + 1], args[n + 2] = f, e
    return n + 2
  end
  if string.byte(cur, 1) ~= 35 then  -- '#': one chunk so far
    if #cur < RAW_CHUNK then
      args[n + 1], args[n + 2] = f, cur .. e
      return n + 2
    end
    return raw_close(key, args, n, f, cur, 0, cur, e, rf, arg)
  end
  local head, j = raw_head(cur)
  local last = f .. '.' .. string.format('%d', j)
  local text = redis.call('HGET', key, last)
  if not text or #text < RAW_CHUNK then
    args[n + 1], args[n + 2] = last, (text or '') .. e
    return n + 2
  end
  return raw_close(key, args, n, f, head, j, text, e, rf, arg)
end

-- What a late read takes of bucket field f of key (text: its first chunk) for
-- the entries with lo_ms <= ms <= hi_ms, every entry of the bucket being at or
-- after lo_ms when whole: a list, in arrival order, of { partial } (of whole
-- closed chunks, rf_<kind>) and { chunk text } (to be filtered entry by entry).
-- It walks the closed chunks' summaries back from the last (8 a call), stopping
-- at a chunk k whose chunks 0..k lie wholly before lo_ms (runmax < lo_ms) or,
-- when whole, wholly at or before hi_ms (their cumulative partial); of the
-- chunks it passes, one wholly inside the range gives its partial, one wholly
-- outside nothing, and the others (and chunks without a summary) their text.
local function raw_scan(key, f, text, lo_ms, hi_ms, whole)
  local head, j = raw_head(text)
  if j == 0 then return { { false, head } } end
  local fmt = string.format
  local items, parse = {}, { j }  -- items: back to front; parse: chunk numbers whose text is needed
  local k = j - 1
  while k >= 0 do
    local names = {}
    for i = 0, math.min(7, k) do names[i + 1] = f .. '.p' .. fmt('%d', k - i) end
    local got = redis.call('HMGET', key, unpack(names))
    local stop = false
    for i = 1, #got do
      local mn, mx, run, part, cum = raw_summary(got[i])
      if not mn then
        parse[#parse + 1] = k
        items[#items + 1] = k
      elseif run < lo_ms then
        stop = true
      elseif whole and run <= hi_ms and cum then
        items[#items + 1] = { cum }
        stop = true
      elseif mn >= lo_ms and mx <= hi_ms then
        items[#items + 1] = { part }
      elseif mx >= lo_ms and mn <= hi_ms then
        parse[#parse + 1] = k
        items[#items + 1] = k
      end
      k = k - 1
      if stop then break end
    end
    if stop then break end
  end
  -- the texts of the chunks to parse (chunk 0 is head), in one HMGET
  local names, texts = {}, { [0] = head }
  for i = 1, #parse do if parse[i] > 0 then names[#names + 1] = f .. '.' .. fmt('%d', parse[i]) end end
  if #names > 0 then
    local got = redis.call('HMGET', key, unpack(names))
    local m = 0
    for i = 1, #parse do
      if parse[i] > 0 then m = m + 1; texts[parse[i]] = got[m] end
    end
  end
  local out = {}
  for i = #items, 1, -1 do
    local it = items[i]
    if type(it) == 'table' then out[#out + 1] = { it[1] }
    elseif texts[it] then out[#out + 1] = { false, texts[it] } end
  end
  if texts[j] then out[#out + 1] = { false, texts[j] } end
  return out
end

-- HDEL raw buckets of key by name (names: their first chunks), with their further chunks
-- and summaries (named by the first chunks' texts, firsts: read here unless given), and
-- with field <name><extra> of each when extra is given (Decayed: '.t', written by decay_write before dr_write).
local function raw_hdel(key, names, firsts, extra)
  firsts = firsts or redis.call('HMGET', key, unpack(names))
  local n = #names
  if extra then
    for i = 1, n do names[n + i] = names[i] .. extra end
  end
  n = #names
  for i = 1, #firsts do
    local text = firsts[i]
    if text and string.byte(text, 1) == 35 then
      local f = names[i]
      local _, j = raw_head(text)
      for k = 1, j do
        names[n + 1], names[n + 2] = f .. '.' .. string.format('%d', k), f .. '.p' .. string.format('%d', k - 1)
        n = n + 2
      end
    end
  end
  hdel_all(key, names)
end

-- Appends to out the tile texts of the raw entries in text with lo_ms <= ms <=
-- hi_ms, each as a one-write tile of the function: its payload ('1' for a
-- Count), for kind 'a' (Average) the pair payload, '1', for kind 'f' (First)
-- '<ms>\t<payload>'.
local function raw_tiles(out, text, lo_ms, hi_ms, kind)
  local find, sub = string.find, string.sub
  local i, len = 1, #text
  local k = #out
  while i <= len do
    local s1 = find(text, ' ', i, true)
    local s2 = find(text, ' ', s1 + 1, true)
    local ms = tonumber(sub(text, i, s1 - 1))
    local e = s2 + tonumber(sub(text, s1 + 1, s2 - 1))
    if ms >= lo_ms and ms <= hi_ms then
      local p = sub(text, s2 + 1, e)
      if kind == 'a' then
        out[k + 1], out[k + 2] = p, '1'
        k = k + 2
      elseif kind == 'f' then
        out[k + 1] = sub(text, i, s1 - 1) .. '\t' .. p
        k = k + 1
      else
        out[k + 1] = p
        k = k + 1
      end
    end
    i = e + 1
  end
end

-- Appends to out the tiles (raw_tiles) of the entries with lo_ms <= ms <= hi_ms
-- of bucket field f of key (text: its first chunk; whole: no entry of the
-- bucket is before lo_ms), in arrival order, the partials of closed chunks
-- that lie wholly inside the range as single tiles (raw_scan; for kind 'a'
-- two, the sum and the count).
local function raw_range(out, key, f, text, lo_ms, hi_ms, kind, whole)
  local items = raw_scan(key, f, text, lo_ms, hi_ms, whole)
  for i = 1, #items do
    local it = items[i]
    if it[1] == false then
      raw_tiles(out, it[2], lo_ms, hi_ms, kind)
    elseif kind == 'a' then
      local sp = string.find(it[1], ' ', 1, true)
      out[#out + 1] = string.sub(it[1], 1, sp - 1)
      out[#out + 1] = string.sub(it[1], sp + 1)
    else  -- ('' too: a Min or Max of strings may be the empty string; of numbers the read skips it)
      out[#out + 1] = it[1]
    end
  end
end

-- CountUnique beside its tuples u<tuple> (scored by last-seen ms, in (-HALF,
-- HALF)) keeps, for late reads, one raw member 'R<ms>:u<tuple>' per write at
-- ms + OFF, as long as the tuples (no read at or after t - LATE counts an
-- older one). One sorted set, one key: the ranges never meet (|ms| < 2^49).
local OFF, HALF = 1125899906842624, 562949953421312

-- The CountUnique keys an in-order write of this call made newest (its raw member, at the call's
-- t, tops the set), so that a read in the same call needs no lookup of the newest (cu_read). Reset
-- by every call.
local CT = {}

-- a CountUnique write of member u at t (text ts); cutoff: no read at or after t - LATE uses a time
-- before it, dropped once a period (every ms of event time, as zr_horizon: memory only) from the
-- newest raw member's time on (the first member from the top: raw members score above tuples)
local function cu_write(key, u, t, ts, cutoff, every)
  local top = redis.call('ZREVRANGE', key, 0, 0, 'WITHSCORES')
  local prev = top[2] and top[2] - OFF
  -- (one ZADD: GT only keeps u's later time; the raw member is new, or the same at the same score)
  redis.call('ZADD', key, 'GT', ts, u, t + OFF, 'R' .. ts .. ':' .. u)
  if prev and prune_due(t, prev, every) then
    redis.call('ZREMRANGEBYSCORE', key, -HALF, cutoff)
    redis.call('ZREMRANGEBYSCORE', key, HALF, cutoff + OFF)
  end
  if not prev or prev <= t then CT[key] = true end
end

-- the tuple of a raw member 'R<ms>:u<tuple>'
local function cu_tuple(mem)
  return string.sub(mem, string.find(mem, ':', 2, true) + 1)
end

-- number of CountUnique tuples with a write in [lo_ms, t]: those last seen
-- there (ZCOUNT); for a late read (the latest raw member after t), also each
-- tuple written after t with a raw member in [lo_ms, t].
local function cu_read(key, lo_ms, t, ts)
  local fmt = string.format
  local n = redis.call('ZCOUNT', key, lo_ms, ts)
  if CT[key] then return n end  -- this call's write at t is the newest
  local top = redis.call('ZREVRANGE', key, 0, 0, 'WITHSCORES')
  local last_ms = top[2] and tonumber(top[2]) - OFF
  if not last_ms or last_ms <= t then return n end
  note_late(last_ms, t)
  local inside = {}
  local early = redis.call('ZRANGEBYSCORE', key, lo_ms + OFF, t + OFF)
  for i = 1, #early do inside[cu_tuple(early[i])] = true end
  local later = redis.call('ZRANGEBYSCORE', key, '(' .. fmt('%d', t + OFF), '+inf')
  local done = {}
  for i = 1, #later do
    local u = cu_tuple(later[i])
    if not done[u] then
      done[u] = true
      if inside[u] then n = n + 1 end
    end
  end
  return n
end

-- fold the raw entries of text (ms <= hi_ms) into acc (a late read parses them: one loop, no table per entry)
local function dfold(acc, text, hi_ms, w)
  local find, sub = string.find, string.sub
  local t0, sv, sw
  if acc then t0, sv, sw = acc[1], acc[2], acc[3] end
  local i, len = 1, #text
  while i <= len do
    local s1 = find(text, ' ', i, true)
    local s2 = find(text, ' ', s1 + 1, true)
    local ms = tonumber(sub(text, i, s1 - 1))
    local e = s2 + tonumber(sub(text, s1 + 1, s2 - 1))
    if ms <= hi_ms then
      local v = tonumber(sub(text, s2 + 1, e))
      if t0 then t0, sv, sw = decay_sums(t0, sv, sw, ms, v, 1, w) else t0, sv, sw = ms, v, 1 end
    end
    i = e + 1
  end
  if not t0 then return acc end
  return { t0, sv, sw }
end

-- fold the raw entries (ms <= hi_ms) of Decayed raw tile f of key (text: its
-- first chunk) into acc: closed chunks as their partials where raw_scan can.
local function decay_chunks(acc, key, f, text, hi_ms, w)
  local items = raw_scan(key, f, text, -EXACT * 1024, hi_ms, true)
  for i = 1, #items do
    local it = items[i]
    if it[1] == false then
      acc = dfold(acc, it[2], hi_ms, w)
    else
      local p = dpartial(it[1])
      acc = dmerge(acc, p[1], p[2], w, p[3])
    end
  end
  return acc
end

-- raw tile fields of a Decayed hash (code byte rb; their first chunks) with their indices, ascending
local function draw_fields(key, rb, below)
  local names = redis.call('HKEYS', key)
  local out = {}
  for i = 1, #names do
    local f = names[i]
    if string.byte(f, 1) == rb and not string.find(f, '.', 3, true) then  -- first chunks (raw_append)
      local q = tonumber(string.sub(f, 2))
      if q and (not below or q < below) then out[#out + 1] = { q, f } end
    end
  end
  table.sort(out, function(x, y) return x[1] < y[1] end)
  return out
end

-- the names of the Decayed raw tiles low .. below - 1 of key (first chunks): built from
-- their indices when named, else those present (draw_fields: one HKEYS)
local function draw_names(key, rawcode, low, below, named)
  local names = {}
  if named then
    for i = low, below - 1 do names[#names + 1] = rawcode .. string.format('%d', i) end
  else
    local raw = draw_fields(key, string.byte(rawcode), below)
    for i = 1, #raw do names[i] = raw[i][2] end
  end
  return names
end

-- Merges into acc (a Decayed partial or nil) the raw tiles names of key, their entries up
-- to hi_ms: by their totals (<tile>.t) where kept, else by their entries (decay_chunks);
-- extra, a further field, comes in the same HMGET. Returns acc, whether a tile held entries,
-- and the HMGET's reply (the tiles' first chunks, their totals, then extra's text).
local function decay_tiles(acc, key, names, hi_ms, w, extra)
  local m = #names
  local want = {}
  for i = 1, m do want[i], want[m + i] = names[i], names[i] .. '.t' end
  if extra then want[2 * m + 1] = extra end
  local got = redis.call('HMGET', key, unpack(want))
  local any = false
  for i = 1, m do
    if got[m + i] then
      local p = dpartial(got[m + i])
      acc, any = dmerge(acc, p[1], p[2], w, p[3]), true
    elseif got[i] then
      acc, any = decay_chunks(acc, key, names[i], got[i], hi_ms, w), true
    end
  end
  return acc, any, got
end

-- A Decayed read at t: dt/dv/dw; for a late read (dt > t) within the allowed
-- lateness, the base and the raw entries up to t, weighed to the latest of them.
local function decay_read(key, t, w, res, rawcode)
  local cur = redis.call('HMGET', key, 'dt', 'dv', 'dw', '_r', 'bt', 'bv', 'bw')
  if not cur[1] or tonumber(cur[1]) <= t then return { cur[1], cur[2], cur[3] } end
  local last_ms = tonumber(cur[1])
  note_late(last_ms, t)
  local q = math.floor(t / res)
  -- beyond the allowed lateness, or written before raw entries were kept: what the store holds
  if not cur[4] or q < math.floor((last_ms - LATE) / res) then return { cur[1], cur[2], cur[3] } end
  -- the base holds the writes before raw tile _r, the raw tiles every later one: those
  -- before tile q whole (by their totals where kept), tile q by its entries up to t.
  -- The tiles are named from _r to q - 1 when the hash has more fields than twice
  -- their number (a hot key's chunks and summaries: HKEYS would list them all), else
  -- found by HKEYS (a key written rarely has few of them)
  local acc = cur[5] and { tonumber(cur[5]), tonumber(cur[6]), tonumber(cur[7]) }
  local fmt = string.format
  local low = tonumber(cur[4])
  local names = draw_names(key, rawcode, low, q, redis.call('HLEN', key) > 2 * (q - low))
  local rawq = rawcode .. fmt('%d', q)
  local _, got
  acc, _, got = decay_tiles(acc, key, names, t, w, rawq)
  if got[2 * #names + 1] then acc = decay_chunks(acc, key, rawq, got[2 * #names + 1], t, w) end
  if not acc then return { false, false, false } end
  return { fmt('%d', acc[1]), fmt('%.17g', acc[2]), fmt('%.17g', acc[3]) }
end

-- The values of a read's cover fields: the short cover (common.lua cover with
-- up) when no write lies in a tile after hi (the state's latest written
-- resolution tile _m, second to last field, is at most hi) nor after t (its
-- latest write time _t, the last field), else the exact cover; a late read
-- (_t > t) takes tile hi from its raw entries (raw_tiles).
-- Covers depend only on (window, components, lo, hi): reads that share a window
-- and components pass the same slot, and a slot's short (CV) and exact (CX)
-- covers are kept as {lo, hi, fields} from call to call (a function library's
-- upvalues; _CROSS_CALL_CACHES): the calls of one finest tile reuse them
-- (bench/HISTORY.md, twenty-first session: 6.6% of a wide event's Lua).
local CV, CX = {}, {}
local function slot_cover(memo, slot, lo, hi, r, sizes, codes, comps, up)
  local m = slot and memo[slot]
  if m and m[1] == lo and m[2] == hi then return m[3] end
  local fields = cover(lo, hi, r, sizes, codes, comps, up)
  if slot then memo[slot] = {lo, hi, fields} end
  return fields
end
local function tiles(key, lo, hi, r, sizes, codes, comps, slot, t, rawcode, rsize, kind)
  local short = slot_cover(CV, slot, lo, hi, r, sizes, codes, comps, true)
  local n = #short
  if n == 0 then return {} end
  local v = redis.call('HMGET', key, unpack(short))
  local tt, m = v[n], v[n - 1]
  v[n] = nil
  v[n - 1] = nil
  if tt then
    local x = tonumber(tt)
    if x > t then
      -- a late read (SPEC §3.3): writes after t lie in tile hi or later. Count the exact
      -- cover of lo..hi-1 and, of tile hi, the raw entries up to t (in its raw bucket):
      -- within the allowed lateness they are complete from raw bucket _r on. Else the
      -- exact cover below: _m absent (a stream or forced backfill wrote since, no raw
      -- entries), or a bucket before _r (tile hi holds no online write: backfilled ones).
      note_late(x, t)
      local bh = math.floor(hi * r / rsize)  -- tile hi's raw bucket
      if m and bh >= math.floor((x - LATE) / rsize) then
        local rawf = rawcode .. string.format('%d', bh)
        local rr = redis.call('HMGET', key, '_r', rawf)
        if rr[1] and bh >= tonumber(rr[1]) then
          local out = hmget(key, cover(lo, hi - 1, r, sizes, codes, comps, false))
          if rr[2] then raw_range(out, key, rawf, rr[2], hi * r, t, kind, hi * r == bh * rsize) end
          return out
        end
      end
    end
  end
  if m and tonumber(m) <= hi then return v end
  return hmget(key, slot_cover(CX, slot, lo, hi, r, sizes, codes, comps, false))
end

-- counted range of resolution tiles (windows.counted_range); after: text or ''
local function range(t, w, r, after)
  local lo = math.floor((t - w) / r) + 1
  if after ~= nil and after ~= '' then
    local a = math.floor(tonumber(after) / r) + 1
    if a > lo then lo = a end
  end
  return lo, math.floor(t / r)
end

-- integer sum of tile texts; the texts themselves when a double could round
local function sum_int(v)
  local s = 0
  for i = 1, #v do
    local x = v[i]
    if x then
      local n = tonumber(x)
      s = s + n
      if n >= EXACT or n <= -EXACT or s >= EXACT or s <= -EXACT then
        local raw = {}
        for k = 1, #v do if v[k] then raw[#raw + 1] = v[k] end end
        return raw
      end
    end
  end
  return s
end

local function sum_float(v)
  local s = 0.0
  for i = 1, #v do
    local x = v[i]
    if x then s = s + tonumber(x) end
  end
  return string.format('%.17g', s)
end

local function average(v)
  local s, c = 0.0, 0
  for i = 1, #v, 2 do
    local x, y = v[i], v[i + 1]
    if x then s = s + tonumber(x) end
    if y then c = c + tonumber(y) end
  end
  return { string.format('%.17g', s), c }
end

-- the extreme tile text (kind n/i/s; better(a, b): a replaces b)
local function extreme(v, kind, want_less)
  local best = false
  for i = 1, #v do
    local x = v[i]
    if x and (kind == 's' or x ~= '') then
      if not best then
        best = x
      elseif want_less then
        if less(x, best, kind) then best = x end
      elseif less(best, x, kind) then
        best = x
      end
    end
  end
  return best
end

local function first_of(v)
  local best, best_ms = false, nil
  for i = 1, #v do
    local x = v[i]
    if x then
      local ms = tonumber(string.match(x, '^%-?%d+'))
      if not best or ms < best_ms then best, best_ms = x, ms end
    end
  end
  return best
end

local function present(v)
  local out, n = {}, 0
  for i = 1, #v do
    local x = v[i]
    if x then
      n = n + 1
      out[n] = x
    end
  end
  return out
end

-- A write-log write (Sequence, Set, Latest*, any limit n) of json at ms (text), as event.lua's
-- log_add with common.lua's trim (keep_ms: W + r + L, ttl_ms: W + r), but the trim runs once per
-- `every` ms of event time (log_every_ms: L / 2; 0: every write), not every write: the newest
-- member (its time and rank) is one lookup, and a write in time order in the same period as the
-- newest adds its member and PEXPIREs. A late write trims as log_trim. The first in-order write of
-- a period keeps what log_trim keeps but for the members before t - W - r - L among the n latest
-- before t - L (at most n: memory only), with one command where the newest member was more than
-- L before (a sparse key: ZREMRANGEBYRANK by rank alone), and a key's first write trims nothing.
-- Reads take the n latest members in their window, so a member a trim would have dropped is never
-- read; the set keeps at most the writes of one more period, and n more members, than common.lua's
-- trim keeps (issue 10: a log write made ZREVRANGEBYSCORE, ZADD, ZREMRANGEBYSCORE, ZCOUNT and
-- PEXPIRE, 14.7 of them per wide-topology event; a departure's three logs, keyed by aircraft and
-- written hours apart, trimmed with four commands at every write).
-- The write logs this call's write created (the key's first write: its member, at the call's t,
-- is the only one), so that a read of one in the same call needs no lookup (log_read; ZF's
-- reason). Reset by every call.
local LF = {}

-- The n latest members of write log key from ms lms to t (text ts), with their scores, newest
-- first: ZREVRANGEBYSCORE .. WITHSCORES LIMIT 0 n, or the one member of a log this call created
local function log_read(key, t, ts, lms, n)
  local f = LF[key]
  if f and lms <= t then return { f, ts } end
  return redis.call('ZREVRANGEBYSCORE', key, ts, lms, 'WITHSCORES', 'LIMIT', 0, n)
end

local function log_write(key, ms, json, n, keep_ms, ttl_ms, every)
  local t = ms - 0
  local top = redis.call('ZREVRANGE', key, 0, 0, 'WITHSCORES')
  local prev = top[2] and top[2] - 0
  local rank = 0
  if prev and prev >= t then
    if prev == t then rank = rank_after(top[1]) else rank = next_rank(key, ms) end
  end
  local m = (rank == 0 and '00000000' or string.format('%08d', rank)) .. ms .. ':' .. json
  redis.call('ZADD', key, ms, m)
  if not prev then LF[key] = m end
  if prev and prev > t then
    log_trim(key, ms, n, string.format('%d', t - keep_ms), ttl_ms, LATE)
    return
  end
  if prev and (every <= 0 or prune_due(t, prev, every)) then
    -- the first in-order write of a period: keep every member at or after t - L and the n latest
    -- before (the members before t - W - r - L among those n cost memory only: no read reaches them)
    if prev < t - LATE then  -- this write is the only member at or after t - L
      redis.call('ZREMRANGEBYRANK', key, 0, -(n + 2))
    else
      keep_n_before(key, t - LATE, n)
    end
  end
  redis.call('PEXPIRE', key, ttl_ms)
end

-- One step of a tiled state's pruning pass: HSCAN from cursor c (COUNT
-- fields), delete the tile fields that end at or before cutoff (raw tiles,
-- upper-case codes: before rawcut; common.lua dead_tiles); returns the
-- next cursor ('0': the pass is over). A pass is
-- spread over the writes that follow its start, one step each, so no call
-- walks a whole hash (a 7-day state keyed by an airport holds ~30k fields).
-- NOVALUES (Valkey 8, Redis 7.4) leaves the values out; an older server
-- answers without it.
local PRUNE_STEP = 256
local function prune_step(key, c, cutoff, rawcut)
  local res = redis.pcall('HSCAN', key, c, 'COUNT', PRUNE_STEP, 'NOVALUES')
  local step = 1
  if res.err then
    res = redis.call('HSCAN', key, c, 'COUNT', PRUNE_STEP)
    step = 2
  end
  hdel_all(key, dead_tiles(res[2], step, cutoff, rawcut))
  return res[1]
end

-- The latest written resolution tile (_m) of a state that lacks it: the
-- largest tile index among its fields of the resolution's level code rcode
-- (a byte); -2^53 for none. Stream writes and forced backfills drop _m.
local function max_tile(key, rcode)
  local names = redis.call('HKEYS', key)
  local m = -EXACT
  for j = 1, #names do
    local f = names[j]
    if string.byte(f, 1) == rcode then
      local idx = tonumber(string.sub(f, 2)) or tonumber(string.sub(f, 2, -3))
      if idx and idx > m then m = idx end
    end
  end
  return m, #names
end

-- Bookkeeping of a tiled write at t (text ts) into resolution tile q, given
-- res, the raw bucket size (ms), and cur, the current texts of '_p', '_m', '_c', '_t', '_r' and of
-- raw tile field rawf (false: absent): appends to args (n entries used)
-- * the raised '_m' and '_t' (the latest written resolution tile and ms);
-- * the write's raw entry (raw_append: in chunks) to rawf, its raw bucket (compiler.
--   algebra.windows.raw_bucket_s: the resolution, at least 15 s; its level code in
--   upper case, then floor(t / res)), kept while a read within the allowed
--   lateness LATE can need it: floor(t / res) >= floor((_t - LATE) / res);
--   '_r' is the lowest raw bucket that may remain; older ones are deleted by name (raw_hdel) once
--   RAW_BATCH of them are due (one HDEL for many writes) if the key's previous
--   write lies less than a bucket before this one, else (a key written more
--   rarely than once a bucket: most of the named buckets would not exist, and
--   naming them cost ~9% of a flights departure's Valkey CPU) or when more than
--   8 * RAW_BATCH are due, by the next pruning pass (at most one raw bucket per
--   write waits for it, beside the tiles the write made);
-- * the next '_p' when a pruning pass is due (every `every` ms of event time:
--   it starts one, or lets the one under way go on), and the pass's next
--   cursor '_c' after one prune_step (dropped when the pass ends);
-- returns the new n.
local function book(key, args, n, cur, q, t, ts, every, cutoff, rcode, res, rawcode, rawf, entry, rf, arg)
  local p, m, c, tt, r0 = cur[1], cur[2], cur[3], cur[4], cur[5]
  local fmt = string.format
  local mq = m and tonumber(m)
  local fields = 1  -- (the hash's fields, when max_tile counts them: 0, a key's first write)
  if not mq then mq, fields = max_tile(key, rcode) end
  if not m or q > mq then
    args[n + 1] = '_m'
    args[n + 2] = q > mq and q or mq
    n = n + 2
  end
  local last_ms = t
  if tt and tonumber(tt) > t then
    last_ms = tonumber(tt)
    note_late(last_ms, t)
  else
    args[n + 1] = '_t'
    args[n + 2] = ts
    n = n + 2
  end
  local qh = math.floor((last_ms - LATE) / res)
  local low = r0 and tonumber(r0)
  if low and qh - low >= RAW_BATCH then
    -- by name only for a key written at least once a bucket, whose named buckets mostly exist
    if qh - low <= 8 * RAW_BATCH and tt and t - tonumber(tt) < res then
      local dead = {}
      for i = low, qh - 1 do dead[#dead + 1] = rawcode .. fmt('%d', i) end
      raw_hdel(key, dead)
    end
    low = qh
  end
  local rq = math.floor(t / res)
  if rq >= qh then
    n = raw_append(key, args, n, cur[6], rawf, ts, entry, rf, arg)
    if not low or rq < low then low = rq end
  end
  if low and low ~= (r0 and tonumber(r0)) then
    args[n + 1] = '_r'
    args[n + 2] = low
    n = n + 2
  end
  local cursor = c
  if not p or t >= tonumber(p) then
    args[n + 1] = '_p'
    args[n + 2] = t + every
    n = n + 2
    cursor = cursor or '0'
  end
  if cursor and fields > 0 then  -- (an empty hash has nothing to prune)
    local nxt = prune_step(key, cursor, cutoff, last_ms - LATE)
    if nxt ~= '0' then
      args[n + 1] = '_c'
      args[n + 2] = nxt
      n = n + 2
    elseif c then
      redis.call('HDEL', key, '_c')
    end
  end
  return n
end

-- One read-modify-write of a tiled state written at t into resolution tile q:
-- HMGET the bookkeeping fields and the level fields fs, new texts from
-- update(cur, i, x, y, z) (nil: unchanged; false: unchanged, and so are the
-- fields after it, coarser levels: u_hll), then one HSET with the bookkeeping
local function rmw(key, fs, t, ts, q, rcode, every, cutoff, res, rawcode, rawf, entry, rf, arg, update, x, y, z)
  local cur = redis.call('HMGET', key, '_p', '_m', '_c', '_t', '_r', rawf, unpack(fs))
  local args, n = {}, 0
  for i = 1, #fs do
    local new = update(cur[i + 6], i, x, y, z)
    if new then
      args[n + 1] = fs[i]
      args[n + 2] = new
      n = n + 2
    elseif new == false then
      break
    end
  end
  n = book(key, args, n, cur, q, t, ts, every, cutoff, rcode, res, rawcode, rawf, entry, rf, arg)
  if n > 0 then redis.call('HSET', key, unpack(args)) end
end

-- Count states written online keep running totals (SPEC §3.2, §3.3), not the tile ladder:
-- a sorted set z = <state key> .. ':z' holds one member per write, scored by its event time
-- (ms), whose text is the number of the state's writes up to it (by time, then arrival),
-- zero-padded to PC_PAD digits so that members of one score sort by arrival. A read at t
-- counts (newest member at or before t) - (newest member at or before the end of tile
-- T(t - W), or of T(a) with after a): two lookups whatever the window, exact for reads up
-- to any lateness while per-write members remain, in time order or not. A write in time
-- order adds one member; a late write adds one to every member after it (at most L x its
-- rate), then its own. Members of tiles that ended before t - L are thinned to the newest
-- of each tile (pc_thin: reads up to L late and every window edge see the same totals), and
-- once a pruning period (every ms of event time) those no read at t - L can use are
-- dropped but the newest of them. The tile ladder's hash under the state key itself holds
-- what backfill and the stream write (and what online writes left before this layout):
-- reads add its cover when it exists (pc_read's caller).
local PC_PAD = '%015d'
local function zrem_all(z, dead)
  for i = 1, #dead, 500 do
    redis.call('ZREM', z, unpack(dead, i, math.min(i + 499, #dead)))
  end
end

-- ZADD of score/member pairs, in calls of at most 500 pairs (Lua's unpack limit)
local function zadd_all(z, adds)
  local n = #adds
  if n <= 1000 then
    redis.call('ZADD', z, unpack(adds))
    return
  end
  for i = 1, n, 1000 do redis.call('ZADD', z, unpack(adds, i, math.min(i + 999, n))) end
end

-- of resolution tiles lo..hi (size r ms), keep only each tile's newest member (first: its
-- first, Min/Max's deque, whose first member of a tile is the tile's best)
local function pc_thin(z, lo, hi, r, first)
  local ms = redis.call('ZRANGEBYSCORE', z, lo * r, hi * r + r - 1,
                        'WITHSCORES')
  local dead, floor = {}, math.floor
  for i = 1, #ms - 2, 2 do
    if floor(tonumber(ms[i + 1]) / r) == floor(tonumber(ms[i + 3]) / r) then
      dead[#dead + 1] = first and ms[i + 2] or ms[i]
    end
  end
  if #dead > 0 then zrem_all(z, dead) end
end

-- After an in-order write at t whose state's newest member was at prev (nil: none): thin the
-- tiles (size r ms) that ended before t - L since prev, on a key written at least once a
-- tile (pc_thin, first as there)
local function zr_thin(z, t, prev, r, first)
  -- (two tiles or more apart: T(t) - T(prev) >= 2, no floors needed to say so)
  if not prev or t - prev >= 2 * r then return end
  local floor = math.floor
  local a, b = floor((prev - LATE) / r), floor((t - LATE) / r)
  if b > a and floor(t / r) - floor(prev / r) <= 1 then pc_thin(z, a, b - 1, r, first) end
end

-- What an in-order write of this call left newest in sorted set z, at the call's t, so that a
-- read of z in the same call (the reads after the writes) needs no lookup for it: the member
-- it added to running members (zr_write), true for a Min/Max deque (mx_write) and a First's
-- newest-write mark (fi_write). Reset by every call.
local ZT = {}
-- The sorted sets of running members an in-order write of this call created (the key's first
-- write: its member at t, the call's t, is the only one), so that a read of one in the same call
-- needs no lookup before t (zr_before): a key's first write is common where keys are many and
-- sparse (bench/HISTORY.md, twenty-ninth session). Reset by every call.
local ZF = {}

-- The newest member of running members z at or before t (text ts), noting a later one
-- (note_late): its text and ms, or nil
--
-- (Numeric texts the scripts made or the store scored are read as `x - 0`, not tonumber(x): Lua
-- 5.1's tonumber parses a string twice with strtod (lua_isnumber, then lua_tonumber), arithmetic
-- once, and `- 0` keeps every double, -0.0 and NaN included; tonumber stays where a text may be
-- empty or nil. bench/HISTORY.md, twenty-eighth session: strtod was 8% of a wide call's instructions.)
local function zr_at(z, t, ts)
  local own = ZT[z]
  if own then return own, t end
  local top = redis.call('ZREVRANGE', z, 0, 0, 'WITHSCORES')
  if not top[1] then return nil end
  local ms = top[2] - 0
  if ms <= t then return top[1], ms end
  note_late(ms, t)
  local at = redis.call('ZREVRANGEBYSCORE', z, ts, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return at[1], at[2] and at[2] - 0
end

-- the newest member of z at or before ms x (a number), or nil
local function zr_before(z, x)
  local f = ZF[z]
  if f and x < f then return nil end  -- this call created z: its one member is at f
  return redis.call('ZREVRANGEBYSCORE', z, x, '-inf', 'LIMIT', 0, 1)[1]
end

-- A write at t (text ts) into running members z. own(m, ms, x1, x2, x3, x4) is the write's
-- member given the newest member m at or before t (ms its time; nil: none); shift(m, ms, x1,
-- x2, x3, x4) a later member with the write added (x1..x4: the write's own values, passed on,
-- so that a write makes no closures); per_ms: one member per event time (one at t is
-- replaced), else one per write. Returns the newest member's ms before an in-order write (nil: none), false for a
-- late one, and 'L' for one more than L late, which it leaves to the caller: shifting every
-- later member would cost up to the whole window's members, where the tile ladder in the
-- state's hash, which reads add, takes it at the cost of any write (the generated code).
local function zr_write(z, t, ts, own, shift, per_ms, x1, x2, x3, x4)
  local top = redis.call('ZREVRANGE', z, 0, 0, 'WITHSCORES')
  local prev = top[2] and top[2] - 0
  if prev and prev > t then
    ZT[z] = nil
    note_late(prev, t)
    if prev - t > LATE then return 'L' end
    local at = redis.call('ZREVRANGEBYSCORE', z, ts, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    local later = redis.call('ZRANGEBYSCORE', z, '(' .. ts, '+inf', 'WITHSCORES')
    local am = at[2] and at[2] - 0
    local old, new = {}, {}
    if per_ms and am == t then old[1] = at[1] end
    for i = 1, #later, 2 do
      old[#old + 1] = later[i]
      new[#new + 1] = later[i + 1]
      new[#new + 1] = shift(later[i], later[i + 1], x1, x2, x3, x4)
    end
    if #old > 0 then zrem_all(z, old) end
    new[#new + 1] = ts
    new[#new + 1] = own(at[1], am, x1, x2, x3, x4)
    zadd_all(z, new)
    return false
  end
  if per_ms and prev == t then redis.call('ZREM', z, top[1]) end
  local m = own(top[1], prev, x1, x2, x3, x4)
  redis.call('ZADD', z, ts, m)
  ZT[z] = m
  if not prev then ZF[z] = t end
  return prev
end

-- After a write at t whose state's newest member was at prev (zr_write's result; false: a late
-- write, nothing to do): with thin, thin the tiles (size r ms) that ended before t - L since
-- prev on a key written at least once a tile (pc_thin); once a period (every ms of event
-- time) drop the members no read at t - L or later can use but the newest of them: those
-- before the end of tile T(t - L - w) (w the window).
local function zr_horizon(z, t, prev, r, w, every, thin)
  -- (a key's first write, prev nil, left it this write's member alone: nothing to drop or thin)
  if not prev or prev == 'L' then return end
  local floor = math.floor
  if thin then zr_thin(z, t, prev, r, false) end
  if prune_due(t, prev, every) then
    local edge = (floor((t - LATE - w) / r) + 1) * r - 1
    local base = redis.call('ZREVRANGEBYSCORE', z, edge, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if base[2] then redis.call('ZREMRANGEBYSCORE', z, '-inf', '(' .. base[2]) end
  end
end

local function pc_own(m) return string.format(PC_PAD, (m and m - 0 or 0) + 1) end
local function pc_shift(m) return string.format(PC_PAD, m + 1) end

-- A Count write at t (text ts) into state key: resolution r, window w, pruning period
-- every, expiry ttl (ms, text). Returns true for a write more than L late (zr_write: the
-- caller writes it into the ladder)
local function pc_write(key, t, ts, r, w, every, ttl)
  local z = key .. ':z'
  local prev = zr_write(z, t, ts, pc_own, pc_shift, false)
  zr_horizon(z, t, prev, r, w, every, true)
  redis.call('PEXPIRE', z, ttl)
  return prev == 'L'
end

-- The online writes a Count read at t (text ts) counts: those of resolution tiles lo..hi
-- (size r ms) at or before t
local function pc_read(key, t, ts, lo, hi, r)
  if lo > hi then return 0 end
  local z = key .. ':z'
  local a = zr_at(z, t, ts)
  if not a then return 0 end
  local b = zr_before(z, lo * r - 1)
  return a - (b and b - 0 or 0)
end

-- Sum and Average states written online keep running totals too, one member of <key>:z
-- per event time: '<ms>|<total>' scored ms, the total of the writes up to that ms (by time;
-- writes of one ms are all counted or none, SPEC §3.2's s <= t). Kinds: 'i' an int Sum (the
-- total an exact decimal text: int_add_text), 'f' a float Sum ('<p1> <p2> ..', the exact sum
-- of the doubles as non-overlapping partials, Shewchuk's expansion as Python's math.fsum
-- keeps it: usually one or two), 'a' an Average ('<count> <p1> <p2> ..'). A window's float sum
-- is the difference of two totals, exact before its one rounding: a double-double total
-- (the ninth session's '<hi> <lo>', still read as two partials) lost a window's sum far
-- below ~2^-106 of the total (a window of 4.6e-203 after a total of 16.6 read 0.0). Writes
-- and reads as pc_write and pc_read (same thinning, pruning and lateness), a write at an ms
-- that has a member replaces it.

-- adds double x to the partials ps (a list of doubles whose sum is exact), in place, keeping
-- the sum exact: each step an error-free two-sum (Shewchuk 1997; Python's msum recipe)
local function ex_add(ps, x)
  local n, i = #ps, 0
  for j = 1, n do
    local y = ps[j]
    -- |x| < |y| (no math.abs calls; the same as theirs for NaN, infinities and -0)
    if (x < 0 and -x or x) < (y < 0 and -y or y) then x, y = y, x end
    local hi = x + y
    local lo = y - (hi - x)
    if lo ~= 0 then
      i = i + 1
      ps[i] = lo
    end
    x = hi
  end
  for j = n, i + 2, -1 do ps[j] = nil end
  ps[i + 1] = x
  return ps
end

-- the partials of a payload text from character k on (' '-separated doubles, as ex_text
-- writes them; plain finds: no iterator closure, no pattern matching)
local function ex_parse(p, k)
  local ps, n = {}, 0
  local e = string.find(p, ' ', k, true)
  while e do
    if e > k then
      n = n + 1
      ps[n] = string.sub(p, k, e - 1) - 0
    end
    k = e + 1
    e = string.find(p, ' ', k, true)
  end
  if k <= #p then ps[n + 1] = string.sub(p, k) - 0 end
  return ps
end

-- the partials as text ('%.17g' round-trips each)
local function ex_text(ps)
  local n = #ps
  if n == 1 then return string.format('%.17g', ps[1]) end  -- (the usual: one format, no table)
  if n == 2 then return string.format('%.17g %.17g', ps[1], ps[2]) end
  local out = {}
  for j = 1, #ps do out[j] = string.format('%.17g', ps[j]) end
  return table.concat(out, ' ')
end

-- the payload of a member '<ms>|<payload>' (nil: nil)
local function rs_payload(m)
  if not m then return nil end
  return string.sub(m, string.find(m, '|', 1, true) + 1)
end

-- the payload of kind plus value v (text), given the text p holding the total's payload from its
-- character k on (default 1): p nil is an empty total
local function rs_add(kind, p, v, k)
  k = k or 1
  if kind == 'i' then return int_add_text(p and string.sub(p, k), v) end
  local x = v - 0
  if kind == 'a' then
    local c, ps = 0, {}
    if p then
      local s1 = string.find(p, ' ', k, true)
      c, ps = string.sub(p, k, s1 - 1) - 0, ex_parse(p, s1 + 1)
    end
    ps = ex_add(ps, x)
    if #ps == 1 then return string.format('%d %.17g', c + 1, ps[1]) end
    return string.format('%d', c + 1) .. ' ' .. ex_text(ps)
  end
  return ex_text(ex_add(p and ex_parse(p, k) or {}, x))
end

-- a Sum or Average write's member at ts (text) of kind and value v (text) after member m (zr_write's
-- own), and a later member m at ms with the write added (its shift)
-- (the payload read in place, from after the member's '|': no substring of it)
local function rs_own(m, _, ts, kind, v)
  return ts .. '|' .. rs_add(kind, m, v, m and string.find(m, '|', 1, true) + 1)
end
local function rs_shift(m, ms, _, kind, v)
  return ms .. '|' .. rs_add(kind, m, v, string.find(m, '|', 1, true) + 1)
end

-- A Sum or Average write of value v (text) at t (text ts): as pc_write
local function rs_write(key, kind, v, t, ts, r, w, every, ttl)
  local z = key .. ':z'
  local prev = zr_write(z, t, ts, rs_own, rs_shift, true, ts, kind, v)
  zr_horizon(z, t, prev, r, w, every, true)
  redis.call('PEXPIRE', z, ttl)
  return prev == 'L'
end

-- The members '<ms>|<payload>' (newest at or before t, newest at or before the end of tile
-- lo - 1) of a Sum or Average read at t (text ts) of tiles lo..hi (size r ms); nil for none.
-- As stored: the workers take the payloads out (read_decoder's _payload), not the store (issue 10)
local function rs_range(key, t, ts, lo, hi, r)
  if lo > hi then return nil, nil end
  local z = key .. ':z'
  local a = zr_at(z, t, ts)
  if not a then return nil, nil end
  return a, zr_before(z, lo * r - 1)
end

-- an int Sum read: the running totals' members a and b as stored (texts; false: none), then the
-- ladder's tiles x (sum_int: a number or a list of texts); the worker subtracts and adds them
-- exactly (read_decoder's int_sum_read), not the store (issue 10)
local function rs_isum(a, b, x)
  local out = { a or false, b or false }
  if type(x) == 'table' then
    for i = 1, #x do out[i + 2] = x[i] end
  elseif x and x ~= 0 then
    out[3] = string.format('%d', x)
  end
  return out
end

-- First and FirstTime written online: one member of <key>:z per written resolution tile,
-- the tile's earliest write '<ms>\t<payload>' (the first to arrive on ties, as first_text),
-- scored by its ms. A read at t takes the first member from the start of tile lo on, if it
-- lies at or before t: no write of tile T(t) after t can be earlier than the tile's earliest,
-- so this is exact at any lateness. The member '~' holds the newest write's ms plus FI_OFF
-- (2^50 ms, past any time a read names) for the late-event flag (note_late).
local FI_OFF = 1125899906842624
-- The members First writes of this call created keys with (the key's first write: its member is the
-- only tile member), so that a read in the same call needs no lookup (fi_read; ZF's reason). Reset
-- by every call.
local FF = {}

-- what no read at t - L or later counts: tiles before T(t - L - W) + 1, dropped when a write
-- makes a tile's member (the bound moves by whole tiles, with T(t) when L + W is a multiple of
-- r): pruning is memory only, since reads take members from tile lo on
local function fi_prune(z, t, r, w)
  redis.call('ZREMRANGEBYSCORE', z, '-inf', '(' .. string.format('%d', (math.floor((t - LATE - w) / r) + 1) * r))
end

-- a First write that did not find '~' among the first two members from its tile on (fi_write): two
-- later tiles hold writes, so it is late
local function fi_late(z, t, ts, json, r, w)
  if redis.call('ZADD', z, 'GT', 'CH', t + FI_OFF, '~') == 0 then
    note_late(tonumber(redis.call('ZSCORE', z, '~')) - FI_OFF, t)
  else
    ZT[z] = true  -- '~' is t + FI_OFF
  end
  local q0 = math.floor(t / r) * r
  local cur = redis.call('ZRANGEBYSCORE', z, q0, q0 + r - 1, 'WITHSCORES', 'LIMIT', 0, 1)
  if not cur[2] or tonumber(cur[2]) > t then
    if cur[1] then redis.call('ZREM', z, cur[1]) end
    redis.call('ZADD', z, ts, ts .. '\t' .. json)
  end
  if not cur[1] then fi_prune(z, t, r, w) end
end

-- A First write at t (text ts) of json: one lookup of tile T(t)'s earliest member and the mark '~'
-- after it (a live key always holds '~', above every tile member), then one ZADD of the raised
-- mark and of the write where it is the tile's earliest, as fi_late does it in three to five
-- commands (bench/HISTORY.md, twenty-ninth session). Pruning as there: when a write makes a tile's
-- member, but for a key's first write (nothing to drop)
local function fi_write(key, t, ts, json, r, w, ttl)
  local z = key .. ':z'
  local q0 = math.floor(t / r) * r
  local got = redis.call('ZRANGEBYSCORE', z, q0, '+inf', 'WITHSCORES', 'LIMIT', 0, 2)
  local cur, mark = nil, nil  -- tile q0's earliest member (its index in got); '~''s ms
  for i = 1, #got, 2 do
    if got[i] == '~' then mark = got[i + 1] - FI_OFF elseif got[i + 1] - 0 < q0 + r then cur = i end
  end
  if #got > 0 and not mark then
    fi_late(z, t, ts, json, r, w)
  else
    local adds = {}
    if not mark or mark < t then
      adds[1], adds[2] = t + FI_OFF, '~'
      ZT[z] = true  -- '~' is t + FI_OFF
    else
      note_late(mark, t)
    end
    if not cur or got[cur + 1] - 0 > t then
      if cur then redis.call('ZREM', z, got[cur]) end
      local m = ts .. '\t' .. json
      adds[#adds + 1] = ts
      adds[#adds + 1] = m
      if not mark then FF[z] = m end
    end
    if #adds > 0 then redis.call('ZADD', z, unpack(adds)) end
    if mark and not cur then fi_prune(z, t, r, w) end
  end
  redis.call('PEXPIRE', z, ttl)
end

-- the earliest online write a First read at t (text ts) of tiles lo..hi (size r ms) counts, or nil
local function fi_read(key, t, ts, lo, hi, r)
  if lo > hi then return nil end
  local z = key .. ':z'
  local f = FF[z]
  if f and lo * r <= t then return f end  -- this call created the key: its one member, at t
  if not ZT[z] then  -- else this call's write made '~' t + FI_OFF: nothing later
    local s = redis.call('ZSCORE', z, '~')
    if not s then return nil end
    note_late(tonumber(s) - FI_OFF, t)
  end
  return redis.call('ZRANGEBYSCORE', z, lo * r, ts, 'LIMIT', 0, 1)[1]
end

-- the earlier of an online First a and the ladder's b (false: none; b on ties: it was written first)
local function fi_pick(a, b)
  if not a then return b or false end
  if not b then return a end
  if tonumber(string.match(a, '^%-?%d+')) < tonumber(string.match(b, '^%-?%d+')) then return a end
  return b
end

-- Min and Max states written online keep a monotonic deque with popped members (SPEC §3.2,
-- §3.3), not the tile ladder, in <key>:z. A write is alive for a read at time x from its
-- own time u until ng, the time of a later write at least as good (Max: >=; Min: <=; the
-- earliest one for writes in time order; none while there is none). The extreme of a read
-- at t over tiles lo.. is the best member alive at t with u in [lo, t]: a write that a later
-- one in [u, t] is as good as is not needed. Members '<u>|<value>' (one per event time: of
-- two at one ms the worse is dropped) are scored u while alive at every later time (the
-- deque: values strictly worse as u grows, its last member the newest write), and
-- ng + MX_OFF once popped, kept while a read up to L late can see them (ng > t - L). A
-- write in time order pops the deque's members it is as good as (they are rescored: one
-- ZADD with its own member) and appends itself; a read in time order takes the deque's
-- first member from tile lo on: two lookups whatever the window. A late write at t is
-- popped at once by the deque's first member after t if that is as good, else pops the
-- deque's members before t it is as good as (mx_late); a late read at t adds the popped
-- members with ng > t (about the deque at t and L x the key's rate). Deque members of
-- tiles that ended before t - L are thinned to each tile's first (its best: reads up to L
-- late take such tiles whole).
local MX_OFF = 1125899906842624
-- The deques this call's in-order write saw whole (fewer than the 4 members mx_write fetches; an
-- empty one: the key's first write), so that a read of one in the same call needs no lookup
-- (mx_read; ZF's reason): { the members and scores fetched, newest first; how many of them the
-- write popped; its value }. Reset by every call.
local MF = {}
local MX_SPLIT = '562949953421312'  -- 2^49: deque scores (event times) below, popped ones above
local MX_BELOW = '(' .. MX_SPLIT  -- the deque's scores: below MX_SPLIT

local function mx_parse(m)
  local p = string.find(m, '|', 1, true)
  return tonumber(string.sub(m, 1, p - 1)), string.sub(m, p + 1)
end

-- a is at least as good as b (want_less: Min)
local function mx_ge(a, b, kind, want_less)
  if want_less then return not less(b, a, kind) end
  return not less(a, b, kind)
end

-- Pops the deque's members that v (at t) is as good as, newest first, from the batch b
-- (ZREVRANGEBYSCORE .. WITHSCORES LIMIT 0 4 of z) on, fetching the members before it as
-- needed: appends each to adds rescored toff (t + MX_OFF), or removes one at t itself.
-- Returns false if a member at t is better than v (v then changes nothing).
local function mx_pop(z, b, v, t, toff, adds, kind, want_less)
  local vc = kind == 'n' and tonumber(v) or v  -- (less's tonumber of a number: no parse per comparison)
  while true do
    for i = 1, #b, 2 do
      -- a deque member's score is its time (the batch holds no popped member)
      local u = b[i + 1] - 0
      if not mx_ge(vc, rs_payload(b[i]), kind, want_less) then return u ~= t end
      if u == t then
        redis.call('ZREM', z, b[i])
      else
        adds[#adds + 1] = toff
        adds[#adds + 1] = b[i]
      end
    end
    if #b < 8 then return true end
    b = redis.call('ZREVRANGEBYSCORE', z, '(' .. b[8], '-inf', 'WITHSCORES', 'LIMIT', 0, 4)
  end
end

-- A late Min/Max write of v (text) at t (text ts) into z, before the deque's newest member.
-- Its ng may be any later write at least as good, not only the earliest: a member alive for
-- longer is harmless where a later one as good is alive too (a read takes the best). So the
-- deque's first member after t, the best of all later writes, decides: v is popped at its
-- time, or v is alive from t on and pops the deque's members before t it is as good as.
local function mx_late(z, v, t, ts, kind, want_less)
  local ng, adds = nil, {}
  local d = redis.call('ZRANGEBYSCORE', z, ts, MX_BELOW, 'LIMIT', 0, 2)
  for i = 1, #d do
    local u, x = mx_parse(d[i])
    if u == t then
      if mx_ge(x, v, kind, want_less) then return end  -- as good, at the same time: nothing changes
      redis.call('ZREM', z, d[i])
    else
      if mx_ge(x, v, kind, want_less) then ng = u end
      break
    end
  end
  if ng then
    adds[1] = ng + MX_OFF
  else
    local before = redis.call('ZREVRANGEBYSCORE', z, '(' .. ts, '-inf', 'WITHSCORES', 'LIMIT', 0, 4)
    mx_pop(z, before, v, t, t + MX_OFF, adds, kind, want_less)
    adds[#adds + 1] = ts
  end
  adds[#adds + 1] = ts .. '|' .. v
  zadd_all(z, adds)
end

-- A Min/Max write of v (text) at t (text ts): kind n/i/s, resolution r, window w, pruning
-- period every, expiry ttl (ms, text)
local function mx_write(key, v, t, ts, kind, want_less, r, w, every, ttl)
  local z = key .. ':z'
  local fmt, floor = string.format, math.floor
  local tail = redis.call('ZREVRANGEBYSCORE', z, MX_BELOW, '-inf', 'WITHSCORES', 'LIMIT', 0, 4)
  local prev = tail[2] and tail[2] - 0
  if prev and prev > t then
    note_late(prev, t)
    mx_late(z, v, t, ts, kind, want_less)
  else
    local adds = {}
    if mx_pop(z, tail, v, t, t + MX_OFF, adds, kind, want_less) then
      -- (before a write after the deque's newest member, mx_pop pops and adds, and this write
      -- comes last: the deque is what it did not pop, then this write)
      if #tail < 8 and (not prev or prev < t) then MF[z] = { tail, #adds / 2, v } end
      adds[#adds + 1] = ts
      adds[#adds + 1] = ts .. '|' .. v
    end
    if #adds > 0 then zadd_all(z, adds) end
    ZT[z] = true  -- the deque's newest member is at t (this write's, or a better one of that ms)
    zr_thin(z, t, prev, r, true)
    -- (prev nil: the deque was empty, so the key was, as every write leaves a member in the deque;
    -- its first write has nothing to drop)
    if prev and prune_due(t, prev, every) then
      -- what no read at t - L or later uses: deque tiles before T(t - L - w) + 1, popped with ng <= t - L
      redis.call('ZREMRANGEBYSCORE', z, '-inf', '(' .. fmt('%d', (floor((t - LATE - w) / r) + 1) * r))
      redis.call('ZREMRANGEBYSCORE', z, MX_SPLIT, t - LATE + MX_OFF)
    end
  end
  redis.call('PEXPIRE', z, ttl)
end

-- The online writes' extreme for a Min/Max read at t (text ts) of tiles lo..hi (size r ms), or nil
local function mx_read(key, t, ts, lo, hi, r, kind, want_less)
  if lo > hi then return nil end
  local z = key .. ':z'
  local d = MF[z]
  if d and lo * r <= t then  -- this call's write saw the deque whole: its first member from tile lo on
    -- (thinning keeps each tile's first member, and pruning only tiles before lo)
    local tail, lms = d[1], lo * r
    for i = #tail - 1, 2 * d[2] + 1, -2 do  -- the members it did not pop, oldest first
      if tail[i + 1] - 0 >= lms then return rs_payload(tail[i]) end
    end
    return d[3]
  end
  local n = t  -- this call's write left the deque's newest member at t (mx_write: ZT)
  if not ZT[z] then
    local top = redis.call('ZREVRANGEBYSCORE', z, MX_BELOW, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if not top[2] then return nil end
    n = top[2] - 0
  end
  local lms = lo * r
  local a = redis.call('ZRANGEBYSCORE', z, lms, ts, 'LIMIT', 0, 1)[1]
  local best = nil
  if a then
    local _, x = mx_parse(a)
    best = x
  end
  if n > t then  -- late: the popped members alive at t
    note_late(n, t)
    local p = redis.call('ZRANGEBYSCORE', z, '(' .. string.format('%d', t + MX_OFF), '+inf')
    for i = 1, #p do
      local u, x = mx_parse(p[i])
      if u >= lms and u <= t and (not best or not mx_ge(best, x, kind, want_less)) then best = x end
    end
  end
  return best
end

-- the better of an online extreme a (nil: none) and the ladder's b (false: none)
local function mx_pick(a, b, kind, want_less)
  if not a then return b or false end
  if b and not mx_ge(a, b, kind, want_less) then return b end
  return a
end

-- Decayed* states written online: one member of <key>:z per event time, '<ms>|<sv> <sw>'
-- scored ms, the decayed sums of values and weights of every write up to that ms, weighed at
-- it (decay_sums, the recurrence of event.lua's decay_merge). A read at t takes the newest member at or
-- before t, exact at any lateness while the members remain; a late write merges itself into
-- every later member. Once a period (every ms of event time) the members before the newest
-- one at or before t - L are dropped: a read up to L late needs no older one.
local function dr_sums(m)
  local p = rs_payload(m)
  local sp = string.find(p, ' ', 1, true)
  return string.sub(p, 1, sp - 1) - 0, string.sub(p, sp + 1) - 0
end

local function dr_text(ms, sv, sw)
  return string.format('%s|%.17g %.17g', ms, sv, sw)
end

-- a Decayed write's member at t (text ts) of value x (decay constant w) after member m at ms
-- (zr_write's own), and a later member m at ms with the write merged in (its shift)
local function dr_own(m, ms, t, ts, x, w)
  if not m then return dr_text(ts, x, 1) end
  local pv, pw = dr_sums(m)
  local _, sv, sw = decay_sums(ms, pv, pw, t, x, 1, w)
  return dr_text(ts, sv, sw)
end
local function dr_shift(m, ms, t, _, x, w)
  local sv, sw = dr_sums(m)
  local _, nv, nw = decay_sums(tonumber(ms), sv, sw, t, x, 1, w)
  return dr_text(ms, nv, nw)
end

-- A Decayed write of value v (text) at t (text ts): decay constant w, pruning period every, expiry ttl (ms)
local function dr_write(key, t, ts, v, w, every, ttl)
  local z = key .. ':z'
  local x = v - 0
  -- a read up to L late needs no member before the newest one at or before t - L
  local prev = zr_write(z, t, ts, dr_own, dr_shift, true, t, ts, x, w)
  zr_horizon(z, t, prev, 1, 0, every, false)
  redis.call('PEXPIRE', z, ttl)
  if prev == 'L' then  -- more than L late: into the hash's decayed sums (dr_read adds them)
    decay_merge(key, ts, x, 1, w)
    redis.call('PEXPIRE', key, ttl)
  end
end

-- A Decayed read at t (text ts): the online members' partial { ms, sv, sw } at t merged with
-- the ladder hash's (decay_read: backfill and the stream), as texts ({ false x 3 }: none);
-- lx: how many of the reads' ladder hashes exist (0: none, this one's neither). Without a
-- ladder hash, the online member '<ms>|<sv> <sw>' itself: the worker parses it (the finisher's
-- decayed_read), not the store (issue 10)
local function dr_read(key, t, ts, w, res, rawcode, lx)
  local acc = nil
  local m, ms = zr_at(key .. ':z', t, ts)
  if not (lx > 0 and redis.call('EXISTS', key) == 1) then return m or { false, false, false } end
  if m then
    local sv, sw = dr_sums(m)
    acc = { ms, sv, sw }
  end
  local b = decay_read(key, t, w, res, rawcode)
  if b[1] then
    if not acc then return b end
    local tm, sv, sw = decay_sums(acc[1], acc[2], acc[3], tonumber(b[1]), tonumber(b[2]), tonumber(b[3]), w)
    acc = { tm, sv, sw }
  end
  if not acc then return { false, false, false } end
  return { string.format('%d', acc[1]), string.format('%.17g', acc[2]), string.format('%.17g', acc[3]) }
end

-- the update functions rmw applies (common.lua's, with the field's index)
-- (HyperLogLog: common.lua's hll_set, the write's pattern ';<slot>:' made once; its false stops rmw)
local function u_hll(cur, i, pat, rho, r) return hll_set(cur, pat, rho, r) end
local function u_count(cur) return string.format('%d', (tonumber(cur) or 0) + 1) end
local function u_isum(cur, i, v) return int_add_text(cur, v) end
local function u_float(cur, i, v) return float_text(cur, v) end
local function u_average(cur, i, v)
  if i % 2 == 1 then return float_text(cur, v) end
  return string.format('%d', (tonumber(cur) or 0) + 1)
end

"""


def _lua_str(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _lua_list(items: Sequence[Any]) -> str:
    return "{" + ", ".join(_lua_str(x) if isinstance(x, str) else str(x) for x in items) + "}"


def _raw_code(resolution_s: int) -> str:
    """The letter of a state's raw bucket fields: the level code of ``windows.raw_bucket_s`` in upper case (B, M, H, D)."""
    return LEVEL_CODE[raw_bucket_s(resolution_s)].upper()


def _extreme_kind(op: AggregateOp) -> str:
    t = op.value_types[0]
    return "s" if t == "string" else "i" if t in ("int", "time") else "n"


@dataclass
class _Script:
    """Accumulates the generated lines and the hoisted constants of one script."""

    consts: dict[str, str] = field(default_factory=dict)

    def const(self, text: str) -> str:
        """Return the name of a local holding ``text`` (a Lua expression), declared once."""
        name = self.consts.get(text)
        if name is None:
            n = len(self.consts)
            # Lua allows 200 locals per function: past MAX_LOCAL_CONSTS, a table entry
            name = self.consts[text] = f"c{n}" if n < MAX_LOCAL_CONSTS else f"K[{n}]"
        return name


#: Library functions the generated code calls most, each read once per call into a top-level local
#: (a function library's upvalue; ``_G`` and field lookups per use otherwise, ``luaH_get`` ~5% of
#: a departure's Valkey CPU in ``perf``). Set at the start of a call, not at load: a library's top
#: level sees no ``redis.call`` (nor ``string``) in Valkey 8.
_CACHED_GLOBALS = (("redis.call", "R_call"), ("string.format", "S_format"), ("string.find", "S_find"),
                   ("string.sub", "S_sub"), ("string.byte", "S_byte"), ("math.floor", "M_floor"),
                   ("tonumber", "G_tonumber"))
_CACHED = dict(_CACHED_GLOBALS)
#: a call of a cached global (not a field of another table: ``x.tonumber(`` stays)
_GLOBAL_CALL = re.compile(r"(?<![\w.])(" + "|".join(re.escape(g) for g, _ in _CACHED_GLOBALS) + r")\(")

#: At most this many upvalues (prelude names and hoisted constant tables) for a round's code: Lua
#: 5.1 allows a function 60, and a function library wraps the code in one (``script.as_function``).
MAX_HOISTED_UPVALUES = 58
_IDENT = re.compile(r"[A-Za-z_]")
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'")


#: Top-level locals of the prelude that hold one call's state, with the statement that sets
#: each anew at the start of a call (after :data:`CALL_MARKER`; as a function library's
#: upvalues they would otherwise carry over from one call to the next).
_PER_CALL_STATE = (("late_flag", "late_flag = 0"), ("ZT", "ZT = {}"), ("ZF", "ZF = {}"), ("LF", "LF = {}"),
                   ("MF", "MF = {}"), ("FF", "FF = {}"), ("CT", "CT = {}"))

#: Top-level locals of the prelude that code inside functions fills and that are kept from one call to
#: the next on purpose: memos of pure functions, each entry a function of its key alone (``tiles``'
#: covers by slot, checked against their ``lo`` and ``hi``), so a call finds in them what it would
#: compute. One entry per slot of the script: bounded. Under ``EVALSHA`` the prelude runs per call and
#: they start empty each time.
_CROSS_CALL_CACHES = ("CV", "CX")


class LuaGenerator:
    """Generates the per-round scripts and the Python side of their calling convention.

    One method per algebra class for each of: the read code, the write code,
    the write's ARGV values and the decoding of a read's result (like
    sqlglot's per-expression generator methods). Stateless.
    """

    # ------------------------------------------------------------ script text
    def script(self, spec: RoundSpec) -> str:
        """Return the Lua source of one round (module docstring for KEYS/ARGV/reply).

        Args:
            spec: the round's slots.

        Raises:
            NotImplementedError: a slot whose function has no Lua target.
        """
        s = _Script()
        body: list[str] = []
        slot = 2  # KEYS index of the last fixed key
        body += self._ladder_check(spec.reads_before, slot + 1, "LB")
        for r in spec.reads_before:
            slot += 1
            body += self._read(s, r, slot, "LB")
        if spec.writes and spec.dry:
            first = slot + 1
            body += ["local saved = {}",
                     f"for i = {first}, {first + len(spec.writes) - 1} do",
                     "  if live(KEYS[i]) then",
                     "    for _, k in ipairs({ KEYS[i], KEYS[i] .. ':z' }) do",
                     "      saved[#saved + 1] = { k, redis.call('DUMP', k), redis.call('PTTL', k) }",
                     "    end",
                     "  end",
                     "end"]
        if spec.writes:
            body.append("if not skip then")
            for w in spec.writes:
                slot += 1
                body += ["  " + line for line in self._write(s, w, slot, spec.lateness_ms)]
            body.append("end")
        body += self._ladder_check(spec.reads_after, slot + 1, "LA")
        for r in spec.reads_after:
            slot += 1
            body += self._read(s, r, slot, "LA")
        if spec.writes and spec.dry:
            body += ["for i = #saved, 1, -1 do",
                     "  local k, dump, pttl = saved[i][1], saved[i][2], saved[i][3]",
                     "  if dump then",
                     "    redis.call('RESTORE', k, pttl > 0 and pttl or 0, dump, 'REPLACE')",
                     "  else",
                     "    redis.call('DEL', k)",
                     "  end",
                     "end"]
        head = [
            "local t = tonumber(ARGV[1])",
            "local ts = ARGV[1]",
            "local a = 4",
            "local out = { 1 }",
            "local o = 1",
            "local skip = false",
            # a cluster call (serving.store.split_by_slot) passes its slot's placeholder as KEYS[2] too
            "local CL = string.byte(KEYS[2], 1) == 123",
            "if ARGV[2] ~= '' and live(KEYS[1]) then",
            "  if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[2]) then skip = true; out[1] = 0 end",
            "end",
            "if ARGV[3] ~= '' and live(KEYS[2]) and not skip then redis.call('XADD', KEYS[2], "
            + ("" if spec.stream_maxlen is None else f"'MAXLEN', '~', {int(spec.stream_maxlen)}, ")
            + "'*', 'event', ARGV[3]) end",
        ]
        code = "\n".join(head + body)
        # the shared functions this round's code can reach (script.shake: each one costs a closure per call)
        prelude = shake(common_script() + f"\nlocal LATE = {int(spec.lateness_ms)}\n" + _PRELUDE,
                        code + "\n" + "\n".join(s.consts) + "\nlate_flag")
        # state the prelude keeps for one call, set anew by each (a Valkey function's prelude runs once)
        resets = [line for name, line in _PER_CALL_STATE if re.search(rf"^local {name}\b", prelude, re.M)]
        # constant tables (tile sizes, level codes, components) before the marker: a function library
        # makes them once, at load (script.as_function), within Lua's 60 upvalues of its function
        upvalues = len(code_names("\n".join([code, *resets, "late_flag"])) & top_level_names(prelude)) \
            + len(_CACHED_GLOBALS)
        static, consts = [], ["local K = {}"]
        for text, name in s.consts.items():
            if (not name.startswith("K[") and text.startswith("{") and not _IDENT.search(_STRING.sub("", text))
                    and upvalues < MAX_HOISTED_UPVALUES):
                static.append(f"local {name} = {text}")
                upvalues += 1
            else:
                consts.append(f"{'' if name.startswith('K[') else 'local '}{name} = {text}")
        main = "\n".join(head + consts + body + ["out[1] = out[1] + late_flag", "return out", ""])
        names = ", ".join(local for _, local in _CACHED_GLOBALS)
        text = "\n".join([f"local {names}", prelude, *static, CALL_MARKER,
                          f"if not {_CACHED_GLOBALS[0][1]} then {names} = {', '.join(g for g, _ in _CACHED_GLOBALS)} end",
                          *resets, main])
        text = _GLOBAL_CALL.sub(lambda m: _CACHED[m.group(1)] + "(", text)
        return f"-- generated by compiler.algebra.lua for {spec.name}: do not edit (see that module)\n" + text

    @staticmethod
    def _live(key: str) -> str:
        """Return the Lua condition that slot key ``key`` names a state: not ``''``, nor, in a cluster call
        (``CL``: its ``KEYS[2]`` is its slot's placeholder), a placeholder ``{<hash tag>}``.

        ``live()`` inline: a call per slot was ~4% of a wide event's Lua instructions (valgrind).
        """
        return f"{key} ~= '' and not (CL and string.byte({key}, 1) == 123)"

    @staticmethod
    def _checks_ladder(r: ReadSlot) -> bool:
        """Whether read ``r`` adds its state's tile ladder hash when that exists (running members beside it)."""
        return r.limit is None and isinstance(r.op, (CountOp, SumOp, AverageOp, MinOp, MaxOp, FirstOp, DecayedOp))

    def _ladder_check(self, reads: Sequence[ReadSlot], first: int, var: str) -> list[str]:
        """Lua lines setting ``var`` to how many of ``reads``' ladder hashes exist: one ``EXISTS`` of all their keys.

        A state written only online keeps running members and no hash (module
        docstring); while none of a group's hashes exists (``var`` is 0), its
        reads skip an ``EXISTS`` each (issue 10: ~12 commands of a flights
        departure's ~93). Skipped slots' keys (``''``, a cluster placeholder
        ``{<tag>}`` in the call's slot) name no state, so they count 0.

        Args:
            reads: the group's reads, in script order.
            first: the KEYS index of the first of them.
            var: the Lua local to set.
        """
        keys = [f"KEYS[{first + j}]" for j, r in enumerate(reads) if self._checks_ladder(r)]
        if not keys:
            return []
        # Lua 5.1 keeps a call's arguments in at most ~250 registers: one EXISTS per 100 keys
        calls = [f"R_call('EXISTS', {', '.join(keys[i:i + 100])})" for i in range(0, len(keys), 100)]
        return [f"local {var} = {' + '.join(calls)}"]

    def _read(self, s: _Script, r: ReadSlot, k: int, lx: str = "1") -> list[str]:
        key = f"KEYS[{k}]"
        w_ms, r_ms = r.window_s * 1000, r.resolution_s * 1000
        lines = [f"if {self._live(key)} then"]
        if r.has_after:
            lines += ["  local after = ARGV[a]", "  a = a + 1",
                      f"  local lo, hi = range(t, {w_ms}, {r_ms}, after)"]
        else:
            # range(t, w, r) inline, its hi a per-call local of the resolution (shared with the writes' q): no
            # call per read. (A local per window too overflowed Lua 5.1's registers in a round of every window.)
            hi = s.const(f"math.floor(t / {r_ms})")
            if w_ms % r_ms == 0:  # T(t - W) = T(t) - W / r exactly: no floor per read
                lines += [f"  local lo, hi = {hi} - {w_ms // r_ms - 1}, {hi}"]
            else:
                lines += [f"  local lo, hi = math.floor((t - {w_ms}) / {r_ms}) + 1, {hi}"]
        lines += ["  o = o + 1"]
        expr = self._read_expr(s, r, key, lx)
        lines += ["  " + x for x in expr]
        lines += ["end"]
        return lines

    def _cover(self, s: _Script, r: ReadSlot, key: str) -> str:
        """Return a Lua expression reading the read's tile cover (``HMGET``).

        Reads without ``after`` that share a window and components share
        one cover, computed on first use and kept in ``CV`` (``CX``: the exact
        one) from call to call while its ``lo`` and ``hi`` stay
        (:data:`_CROSS_CALL_CACHES`).
        A late read takes the tile of its own time from the raw entries
        (``tiles`` in the prelude, SPEC §3.3).
        """
        sizes = levels_s(r.window_s)
        sz = s.const(_lua_list([x * 1000 for x in sizes]))
        codes = s.const(_lua_list([LEVEL_CODE[x] for x in sizes]))
        comps = s.const(_lua_list(list(r.op.components)))
        slot = "nil" if r.has_after else s.const(f"'{r.window_s}:{','.join(r.op.components)}'")
        raw = _raw_code(r.resolution_s)
        kind = "a" if isinstance(r.op, AverageOp) else "f" if isinstance(r.op, FirstOp) else ""
        return (f"tiles({key}, lo, hi, {r.resolution_s * 1000}, {sz}, {codes}, {comps}, {slot}, t, '{raw}', "
                f"{raw_bucket_s(r.resolution_s) * 1000}, '{kind}')")

    def _read_expr(self, s: _Script, r: ReadSlot, key: str, lx: str = "1") -> list[str]:
        """Lua lines computing read ``r`` of ``key`` into ``out[o]``; ``lx``: a Lua expression, 0 when no
        ladder hash of the read's group exists (:meth:`_ladder_check`), so its ``EXISTS`` is skipped."""
        op = r.op
        has = f"{lx} > 0 and redis.call('EXISTS', {key}) == 1"
        r_ms = r.resolution_s * 1000
        if r.limit is not None:
            return [f"out[o] = log_read({key}, t, ts, lo * {r_ms}, {int(r.limit)})"]
        if isinstance(op, DecayedOp):
            rsize = raw_bucket_s(r.resolution_s) * 1000
            return [f"out[o] = dr_read({key}, t, ts, {op.window_ms}, {rsize}, '{_raw_code(r.resolution_s)}', {lx})"]
        if isinstance(op, CountUniqueOp):
            return [f"if lo <= hi then out[o] = cu_read({key}, lo * {r_ms}, t, ts) else out[o] = 0 end"]
        if isinstance(op, LatestOp):
            return [f"out[o] = redis.call('HMGET', {key}, 'lt', 'lv')"]
        cov = self._cover(s, r, key)
        if isinstance(op, CountOp):  # running totals of online writes, plus the ladder's tiles if any (pc_read)
            return [f"local n = pc_read({key}, t, ts, lo, hi, {r_ms})",
                    f"if {has} then",
                    f"  local x = sum_int({cov})",
                    "  if type(x) == 'table' then x[#x + 1] = string.format('%d', n); n = x else n = n + x end",
                    "end",
                    "out[o] = n"]
        if isinstance(op, (SumOp, AverageOp)):  # running totals of online writes, plus the ladder's (rs_range)
            lines = [f"local a, b = rs_range({key}, t, ts, lo, hi, {r_ms})",
                     "local x = nil",
                     f"if {has} then x = "
                     f"{'sum_int' if isinstance(op, SumOp) and op.is_int else 'sum_float' if isinstance(op, SumOp) else 'average'}({cov}) end"]
            # the members themselves: the workers take their payloads and subtract them (read_decoder), not the
            # store (issue 10)
            if isinstance(op, AverageOp):
                return lines + ["out[o] = { a or false, b or false, x and x[1] or false, x and x[2] or false }"]
            if op.is_int:
                return lines + ["out[o] = rs_isum(a, b, x)"]
            return lines + ["out[o] = { a or false, b or false, x or false }"]
        if isinstance(op, (MinOp, MaxOp)):  # the online deque's best, and the ladder's if any (mx_read)
            args = f"'{_extreme_kind(op)}', {'true' if isinstance(op, MinOp) else 'false'}"
            return [f"local a = mx_read({key}, t, ts, lo, hi, {r_ms}, {args})",
                    f"if {has} then a = mx_pick(a, extreme({cov}, {args}), {args}) end",
                    "out[o] = a or false"]
        if isinstance(op, FirstOp):  # the online tiles' earliest writes, and the ladder's if any (fi_read)
            return [f"local a = fi_read({key}, t, ts, lo, hi, {r_ms})",
                    f"if {has} then a = fi_pick(a, first_of({cov})) end",
                    "out[o] = a or false"]
        if isinstance(op, HyperLogLogOp):
            return [f"out[o] = present({cov})"]
        raise NotImplementedError(f"no Lua read for {type(op).__name__}")

    def _write(self, s: _Script, w: WriteSlot, k: int, lateness_ms: int) -> list[str]:
        op = w.op
        key = f"KEYS[{k}]"
        window_ms, res_ms = w.window_s * 1000, w.resolution_s * 1000
        n = self.write_arity(w)
        lines = [f"if {self._live(key)} then"]
        lines += [f"  local v{j} = ARGV[a + {j - 1}]" for j in range(1, n + 1)]
        if n:
            lines.append(f"  a = a + {n}")
        body: list[str] = []
        # what reads at times >= t - L can use: T(s) > T(t - L - W) - 1 (SPEC §3.2, §3.3, §5.3)
        keep_ms = window_ms + res_ms + lateness_ms
        if w.limit is not None:
            body.append(f"log_write({key}, ts, v1, {int(w.limit)}, {keep_ms}, {window_ms + res_ms}, "
                        f"{log_every_ms(lateness_ms)})")
            return lines + ["  " + x for x in body] + ["end"]
        ttl_ms = DECAY_HORIZON * window_ms if isinstance(op, DecayedOp) else window_ms + res_ms
        # prune fields no read at time >= t - L can use once a prune_every_ms
        every, cutoff = prune_every_ms(w.window_s, w.resolution_s, lateness_ms), f"t - {keep_ms}"
        # running members in the state's sorted set <key>:z (module docstring): the call sets its expiry
        # a Count, Sum or Average write more than L late goes into the ladder (zr_write)
        # (its field names inline, not hoisted: every call would compute them, for a rare branch)
        ladder = (["  " + x for x in self._ladder_write(s, w, key, every, cutoff, ttl_ms, hoist=False)] + ["end"]
                  if isinstance(op, (CountOp, SumOp, AverageOp)) else [])
        if isinstance(op, CountOp):  # running counts, one member per write (pc_write)
            body.append(f"if pc_write({key}, t, ts, {res_ms}, {window_ms}, {every}, '{ttl_ms}') then")
            return lines + ["  " + x for x in body + ladder] + ["end"]
        if isinstance(op, (SumOp, AverageOp)):  # running totals, one member per event time (rs_write)
            kind = "a" if isinstance(op, AverageOp) else "i" if op.is_int else "f"
            body.append(f"if rs_write({key}, '{kind}', v1, t, ts, {res_ms}, {window_ms}, {every}, '{ttl_ms}') then")
            return lines + ["  " + x for x in body + ladder] + ["end"]
        if isinstance(op, FirstOp):  # the earliest write of each tile (fi_write)
            body.append(f"fi_write({key}, t, ts, v1, {res_ms}, {window_ms}, '{ttl_ms}')")
            return lines + ["  " + x for x in body] + ["end"]
        if isinstance(op, (MinOp, MaxOp)):  # a monotonic deque with popped members (mx_write)
            kind, want = _extreme_kind(op), "true" if isinstance(op, MinOp) else "false"
            body.append(f"mx_write({key}, v1, t, ts, '{kind}', {want}, {res_ms}, {window_ms}, {every}, '{ttl_ms}')")
            return lines + ["  " + x for x in body] + ["end"]
        if isinstance(op, DecayedOp):  # the decayed sums at each event time (dr_write), pruned every L / 2
            body.append(f"dr_write({key}, t, ts, v1, {op.window_ms}, {max(lateness_ms // 2, 1000)}, '{ttl_ms}')")
            return lines + ["  " + x for x in body] + ["end"]
        # the tile ladder in the state's hash: HyperLogLog; CountUnique and Latest* their own fields
        if isinstance(op, HyperLogLogOp):
            body += self._ladder_write(s, w, key, every, cutoff, ttl_ms)
            return lines + ["  " + x for x in body] + ["end"]
        if isinstance(op, CountUniqueOp):
            body.append(f"cu_write({key}, v1, t, ts, t - {keep_ms}, {every})")
        elif isinstance(op, LatestOp):
            body.append(f"latest({key}, ts, v1)")
        else:
            raise NotImplementedError(f"no Lua write for {type(op).__name__}")
        body.append(f"redis.call('PEXPIRE', {key}, '{ttl_ms}')")  # a string: Lua numbers print as %.17g
        return lines + ["  " + x for x in body] + ["end"]

    def _ladder_write(self, s: _Script, w: WriteSlot, key: str, every: int, cutoff: str, ttl_ms: int,
                      hoist: bool = True) -> list[str]:
        """Lua lines writing ``w`` into the tile ladder of its state's hash (``rmw``: every level, raw entries, pruning).

        Online writes of ``HyperLogLog`` and those of ``Count``, ``Sum`` and
        ``Average`` more than ``L`` late (module docstring) take this path.

        Args:
            hoist: field names and tile indexes as script-level locals
                (:meth:`_Script.const`, computed once per call and shared by
                slots), else inline in the lines (a branch seldom taken).

        Raises:
            NotImplementedError: a function with no tile update.
        """
        op = w.op
        const = s.const if hoist else (lambda text: f"({text})")
        fields = [const(f"string.format('{LEVEL_CODE[size]}%d', math.floor(t / {size * 1000}))")
                  for size in levels_s(w.window_s)]
        entry = "v1"  # the write's raw entry: its one-write tile text (raw_tiles)
        rf = "rf_int, nil"  # the partial of a closed chunk of its raw entries (rf_<kind>, its arg)
        if isinstance(op, HyperLogLogOp):
            rmw, entry, rf = "u_hll, ';' .. v1 .. ':', v2, tonumber(v2)", "';' .. v1 .. ':' .. v2", "rf_hll, nil"
        elif isinstance(op, CountOp):
            rmw, entry = "u_count", "'1'"
        elif isinstance(op, SumOp) and op.is_int:  # int sums: exact text addition (past 2^53 and 2^63)
            rmw = "u_isum, v1"
        elif isinstance(op, SumOp):
            rmw, rf = "u_float, v1", "rf_float, nil"
        elif isinstance(op, AverageOp):
            fields = [const(f"{f} .. '{c}'") for f in fields for c in (".s", ".c")]
            rmw, rf = "u_average, v1", "rf_avg, nil"
        else:
            raise NotImplementedError(f"no Lua tile update for {type(op).__name__}")
        res_ms = w.resolution_s * 1000
        q = const(f"math.floor(t / {res_ms})")
        raw, rsize = _raw_code(w.resolution_s), raw_bucket_s(w.resolution_s) * 1000
        rawf = const(f"string.format('{raw}%d', math.floor(t / {rsize}))")
        book = (f"t, ts, {q}, {ord(LEVEL_CODE[w.resolution_s])}, {every}, {cutoff}, {rsize}, "
                f"'{raw}', {rawf}, {entry}, {rf}")
        return [f"rmw({key}, {{{', '.join(fields)}}}, {book}, {rmw})",
                f"redis.call('PEXPIRE', {key}, '{ttl_ms}')"]  # a string: Lua numbers print as %.17g

    # ------------------------------------------------------- Python side
    def write_arity(self, w: WriteSlot) -> int:
        """Return how many ARGV elements a (non-skipped) write of ``w`` takes."""
        if w.limit is not None:
            return 1
        if isinstance(w.op, CountOp):
            return 0
        if isinstance(w.op, HyperLogLogOp):
            return 2
        return 1

    def write_values(self, w: WriteSlot, values: Sequence[Any]) -> list:
        """Return the ARGV elements of one write of non-null ``values`` (in slot order).

        Args:
            w: the write slot.
            values: the write's values (run-time representation), all non-null.

        Returns:
            ``write_arity(w)`` strings/ints, as the generated code reads them.
        """
        return self.value_encoder(w)(values)

    def value_encoder(self, w: WriteSlot) -> Callable[[Sequence[Any]], list]:
        """Return the function ``values -> ARGV elements`` of :meth:`write_values` for one slot.

        Chosen once per slot (serving keeps one per write), so an event pays
        no dispatch on the function's class.

        Raises:
            NotImplementedError: a function with no Lua target.
        """
        op = w.op
        if w.limit is not None:
            return lambda values: [values_json(values)]
        if isinstance(op, CountOp):
            return lambda values: []
        if isinstance(op, SumOp):
            if op.is_int:
                return lambda values: [str(int(values[0]))]
            return lambda values: [repr(float(values[0]))]
        if isinstance(op, AverageOp):
            return lambda values: [repr(float(values[0]))]
        if isinstance(op, (MinOp, MaxOp)):
            vtype = op.value_types[0]
            return lambda values: [_encode_scalar(values[0], vtype)]
        if isinstance(op, (FirstOp, LatestOp)):
            return lambda values: [op.encode_values(values)]
        if isinstance(op, HyperLogLogOp):
            return lambda values: list(hll_coupon(encode_value_tuple(values, op.value_types)))
        if isinstance(op, CountUniqueOp):
            return lambda values: ["u" + encode_value_tuple(values, op.value_types)]
        if isinstance(op, DecayedOp):
            if op.kind == "count":
                return lambda values: [_g17(1.0)]
            return lambda values: [_g17(float(values[0]))]
        raise NotImplementedError(f"no Lua write for {type(op).__name__}")

    def finisher(self, r: ReadSlot) -> Callable[[Any, int, int | None], Any]:
        """Return the function turning the script's result for read ``r`` into the feature value.

        Chosen once per read slot (not per event). The function takes
        ``(result, read time ms, after time ms or None)``; tiled reads
        finalize :meth:`decode_read`, write logs fold their members (SPEC
        §3.2's ``limit``), ``Decayed*`` weigh to the read time, ``Latest``
        checks its time against the counted range.

        The function raises ``compiler.runtime.EvalError`` (``integer
        overflow``, from ``check_int``) for an int ``Sum`` whose exact total
        lies outside int64: the feature is null with that error (SPEC §3.5),
        as replay's kernel gives null (``arrow._Sum``).
        """
        op = r.op
        int_sum = isinstance(op, SumOp) and op.is_int
        if r.limit is not None:
            parse = log_member_values(op.value_types)
            if isinstance(op, (SequenceOp, SetOp)):
                # their update ignores the write's time and only collects the value tuples: the members'
                # values, oldest first, are the IR as fold builds it (a list; a set), and no score is
                # parsed (the wide topology's eight Sequence and Set reads: bench/HISTORY.md, thirtieth session)
                collect = list if isinstance(op, SequenceOp) else frozenset
                finalize = op.finalize

                def log_values(res: Any, t_ms: int, after_ms: int | None) -> Any:
                    return finalize(collect([parse(res[j]) for j in range(len(res) - 2, -1, -2)]))

                return log_values
            if isinstance(op, (LatestOp, FirstOp)):
                # a pick: fold keeps the last write in (time, arrival) order for Latest (>=), the first for
                # First (<); the reply lists the members newest first, so it is the reply's first member or
                # its last, alone parsed (the wide topology's Latest*/First* log reads: bench/HISTORY.md,
                # thirty-first session)
                newest = isinstance(op, LatestOp)
                finalize = op.finalize

                def log_pick(res: Any, t_ms: int, after_ms: int | None) -> Any:
                    if not res:
                        return finalize(None)
                    j = 0 if newest else len(res) - 2
                    return finalize((int(float(res[j + 1])), parse(res[j])))

                return log_pick
            if isinstance(op, CountUniqueOp):
                # the distinct value tuples among the members: fold's dict of their encodings, whose times
                # finalize (len) does not read; each member's encoding kept, as its parsed values are
                types = op.value_types

                @lru_cache(maxsize=_LOG_MEMBERS_KEPT)
                def encoding(member: bytes | str) -> str:
                    return encode_value_tuple(parse(member), types)

                def log_distinct(res: Any, t_ms: int, after_ms: int | None) -> Any:
                    return len({encoding(res[j]) for j in range(0, len(res), 2)})

                return log_distinct

            def log(res: Any, t_ms: int, after_ms: int | None) -> Any:
                writes = [(int(float(res[j + 1])), parse(res[j])) for j in range(len(res) - 2, -1, -2)]
                v = fold(op, writes)
                if v is None and int_sum:  # SumOp.finalize: null only for a total outside int64
                    raise EvalError("integer overflow")
                return v

            return log
        if int_sum:
            exact = self.read_decoder(r)
            return lambda res, t_ms, after_ms: check_int(exact(res))
        if isinstance(op, DecayedOp):
            return lambda res, t_ms, after_ms: op.value_at(_decayed_read(op, res), t_ms)
        if isinstance(op, CountUniqueOp):
            return lambda res, t_ms, after_ms: int(res)
        if isinstance(op, LatestOp):
            res_ms = r.resolution_s * 1000

            def latest(res: Any, t_ms: int, after_ms: int | None) -> Any:
                ir = op.decode(res)
                if ir is not None:
                    lo, _ = counted_range(t_ms, r.window_s, after_ms)
                    if not (lo * res_ms <= ir[0] <= t_ms):
                        ir = None
                return op.finalize(ir)

            return latest
        if isinstance(op, HyperLogLogOp):
            return lambda res, t_ms, after_ms: hll_read_estimate(res)
        decode, finalize = self.read_decoder(r), op.finalize
        return lambda res, t_ms, after_ms: finalize(decode(res))

    def write_counter(self, r: ReadSlot) -> Callable[[Any], int] | None:
        """Return the function ``result -> number of writes the read counted``, or ``None`` if its state cannot tell.

        The read-only mode's explanation (``POST /event?dry_run&explain``)
        reports it. States that hold the count: ``Count`` (its value),
        ``Average`` (its count component) and write logs (``limit n``,
        ``Sequence``, ``Set``, ``Latest*``: the members returned, at most
        ``n``). The others (``Sum``, ``Min``, ``Max``, ``First*``,
        ``CountUnique``, ``HyperLogLog``, ``Decayed*``) keep no count of
        writes: ``None``.
        """
        op = r.op
        if r.limit is not None:
            return lambda res: len(res) // 2
        if isinstance(op, CountOp):
            return self.read_decoder(r)
        if isinstance(op, AverageOp):
            return lambda res: _average_read(res)[1]
        return None

    def decode_read(self, r: ReadSlot, res: Any) -> Any:
        """Return the IR (``ops`` partial aggregate) of a merged tiled read's result.

        Only for tiled reads without ``limit`` (``Count``, ``Sum``,
        ``Average``, ``Min``, ``Max``, ``First``, ``HyperLogLog``); the others
        return what ``event.lua`` returned and keep their own decoding.

        Args:
            r: the read slot.
            res: the script's result for it (int, bytes, list or None).
        """
        return self.read_decoder(r)(res)

    def read_decoder(self, r: ReadSlot) -> Callable[[Any], Any]:
        """Return the function ``result -> IR`` of :meth:`decode_read` for one slot (chosen once).

        Raises:
            NotImplementedError: not a merged tiled read.
        """
        op = r.op
        if isinstance(op, SumOp) and op.is_int:
            return _int_sum_read
        if isinstance(op, CountOp):
            def exact_int(res: Any) -> int:
                if isinstance(res, list):  # beyond 2**53: the tiles' texts, added exactly here
                    return sum(_num(x, "int") for x in res)
                return int(res)

            return exact_int
        if isinstance(op, SumOp):
            return _float_sum_read
        if isinstance(op, AverageOp):
            return _average_read
        if isinstance(op, (MinOp, MaxOp, FirstOp)):
            return lambda res: op.decode([res])
        if isinstance(op, HyperLogLogOp):
            return hll_merge
        raise NotImplementedError(f"no merged Lua read for {type(op).__name__}")
