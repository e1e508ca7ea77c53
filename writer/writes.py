"""The counted writes of a state, per writer event (SPEC §2.4 write rules), with Spark built-ins.

Shared by the tile jobs (``writer.tiles``, ``writer.tilepass``) and the
point-in-time reads (``writer.pointintime``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from compiler.algebra.spark import encode_tuple_column, redis_key_column
from compiler.plan import StateSpec
from writer.sources import counted

__all__ = ["writes_of_state"]


def writes_of_state(frames: dict[str, DataFrame], state: StateSpec) -> DataFrame:
    """Return the counted writes of one state: ``rk``, ``t`` (ms), ``seq``, ``v0..vn``.

    Applies SPEC §2.4's write rules per writer event: the ``where`` filter
    (null is false), non-null values, non-null key components; and leaves out
    the events that repeat an earlier ``_id`` (SPEC §4, ``_repeat`` of
    ``writer.sources.mark_repeated_ids``).

    Args:
        frames: output of :func:`feature_frames`.
        state: the state.
    """
    from compiler.codegen.spark import compile_column

    parts = []
    for ev, w in sorted(state.writes.items()):
        df = frames[ev]
        cond = counted(df)
        if w.where is not None:
            cols = {n: F.col(f"f_{n}") for n in w.where.refs()}
            cond = cond & F.coalesce(compile_column(w.where, cols, F.col("_time_ms")), F.lit(False))
        for n in list(w.values) + list(w.keys):
            cond = cond & F.col(f"f_{n}").isNotNull()
        df = df.where(cond)
        key = encode_tuple_column([F.col(f"f_{k}") for k in w.keys], state.key_types)
        rk = redis_key_column(key, len(state.key_types), state.definition_hash)
        parts.append(
            df.select(
                rk.alias("rk"),
                F.col("_time_ms").alias("t"),
                F.col("_seq").alias("seq"),
                *[F.col(f"f_{n}").alias(f"v{i}") for i, n in enumerate(w.values)],
            )
        )
    out = parts[0]
    for f in parts[1:]:
        out = out.unionByName(f)
    return out
