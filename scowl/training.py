"""Training sets as a library call: ``scowl replay`` on the caller's SparkSession (SPEC §3.3, §5.8, §6).

For notebooks and pipelines that already hold a ``SparkSession``::

    import scowl

    df = scowl.training_set("examples/flights", "events.jsonl", spark, event_type="departure")
    df.groupBy("origin").avg("departures_1h").show()
    pdf = df.to_pandas()                            # small results: times as datetime64[ms, UTC]
    pdf = scowl.to_pandas(df.where("departures_1h > 10"))   # the same for a derived DataFrame

:func:`training_set` gives the point-in-time correct training set of one
event type: the values ``scowl replay`` writes to ``OUTDIR/EVENT/`` (the
same code, ``writer.replay``: each event sees the events before it in
arrival order, SPEC §3.3), with the same columns -- ``_seq``, ``_time``,
``_id`` (when any event of the type has one) and one per named feature,
encoded as the API encodes them (SPEC §3.5, §5.8) -- as a computed
``pyspark.sql.DataFrame`` instead of Parquet (nothing is written to disk;
the rows live in a ``localCheckpoint`` on the executors, in ``_seq`` order,
freed when the DataFrame is garbage-collected). :func:`training_sets` gives
several event types from one read of the input.

Inputs (``events``), in arrival order:

* paths: a ``str`` / ``os.PathLike`` or a list of them -- JSONL or Parquet
  files, globs or directories, exactly as ``scowl replay --events`` takes them;
* a list (any iterable) of event dicts ``{"_type", "_time", payload...}``
  (Sumatra's timeline format, SPEC §5.6): ``_seq`` is the position in the list;
  ``datetime`` / ``pandas.Timestamp`` values are written as ISO-8601 (naive
  means UTC, SPEC §3.1), numpy scalars as numbers;
* a ``pandas.DataFrame``, one row per event (columns ``_type``, ``_time``
  and the payload fields; a missing value -- ``NaN``, ``None``, ``NaT`` -- is a
  missing field, as in a Parquet file); ``_seq`` is the row position;
* a Spark ``DataFrame`` with those columns, read as a Parquet file is
  (``writer.sources.events_from_frame``); ``_seq`` is Spark's row order
  (``orderBy`` it first when that matters).

Invalid records (no known ``_type`` or no parseable ``_time``) are skipped
with a ``warnings.warn`` saying how many, as ``scowl replay`` notes them.

Pandas: the DataFrame returned has a ``to_pandas()`` method for small
results, and :func:`to_pandas` is the same as a function, for DataFrames
derived from it: the result stays a genuine ``pyspark.sql.DataFrame`` (not
a wrapper or a subclass that Spark's own methods would turn back into a
plain DataFrame), with the method set on that one object. Each column carries its plan type in Spark's column metadata
(``{"scowl_type": "time"}``), which ``select``, ``where``, ``join`` and
``alias`` keep, so ``to_pandas`` converts any DataFrame derived from a
training set: ``time`` columns (``_time`` included) to
``datetime64[ms, UTC]``, ``duration`` columns to ``timedelta64[ns]``, ints to
the nullable ``Int64`` (exact beyond 2^53, SPEC §3.5) and bools to
``boolean``.

No per-row Python function runs in Spark: in-memory events are rendered to
JSON on the driver, before Spark reads them; everything else is the replay's
built-in column expressions and vectorised sweeps (SPEC §5.6, §5.8).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import pandas
    from pyspark.sql import DataFrame, SparkSession

    from compiler import Diagnostic
    from compiler.plan import EventPlan, Plan

__all__ = ["TopologyError", "to_pandas", "training_set", "training_sets"]

#: Key of the column metadata holding a column's plan type (``"time"``, ``"int"``, ``"struct{a:int}"``, ...).
TYPE_METADATA_KEY = "scowl_type"

#: Plan types of the columns every training set has besides the features (SPEC §6 ``scowl replay``).
FIXED_COLUMNS = {"_seq": "int", "_time": "time", "_id": "string"}


class TopologyError(ValueError):
    """The topology does not compile.

    ``str(error)`` is the compiler's rendering (file, ``line:col``, code,
    message, source line and caret per diagnostic, SPEC §2.5).

    Attributes:
        diagnostics: the ``compiler.Diagnostic`` objects, sorted by file and position.
    """

    def __init__(self, message: str, diagnostics: "list[Diagnostic]"):
        super().__init__(message)
        self.diagnostics = diagnostics


def training_set(
    topology: "str | os.PathLike[str] | Plan",
    events: Any,
    spark: "SparkSession | None" = None,
    *,
    event_type: str | None = None,
    master: str | None = None,
) -> "DataFrame":
    """Return the point-in-time training set of one event type as a computed Spark DataFrame (module docstring).

    The values are those of ``scowl replay DIR --events ... --types EVENT``
    (SPEC §5.8): for each input event of ``event_type``, every feature as the
    online API would have returned it had the events been posted in input
    order to a fresh store (SPEC §3.3).

    Args:
        topology: the topology directory (its ``*.scowl`` files, SPEC §2.1),
            or an already compiled ``compiler.plan.Plan``.
        events: the events, in arrival order: path(s), a list of dicts, a
            ``pandas.DataFrame`` or a Spark ``DataFrame`` (module docstring);
            a path ``"redis:KEY"`` is that Redis stream of ``SCOWL_REDIS_URL``
            (e.g. the API's ``SCOWL_EVENT_STREAM``), exported in its order
            to ``SCOWL_HOME/exports/`` first (``scowl.inputs``).
        spark: the session to run on. ``None``: the Spark DataFrame's own
            session if ``events`` is one, else the one ``scowl replay`` uses
            (``writer.session.get_spark``: gets the active session or creates
            ``master``'s with UTC time zone and UI off). Either way the
            writer sets ``spark.sql.variant.allowDuplicateKeys`` on it for
            good (``writer.session.configure``: a key given twice reads as
            its last value, as in the API).
        event_type: the event type whose rows to return. ``None``: the only
            event type of the input that has features; with several, a
            ``ValueError`` lists them.
        master: Spark master URL when a session is created (default
            ``SCOWL_SPARK_MASTER`` or ``local[*]``, SPEC §5.9).

    Returns:
        A ``pyspark.sql.DataFrame``, one row per event of ``event_type``
        (none if the input has none), in ``_seq`` order, columns ``_seq``
        (long, 0-based position in the input), ``_time`` (string,
        ``YYYY-MM-DDTHH:MM:SS.mmmZ``), ``_id`` (string, only when some event
        of the type has one) and one per named feature in plan order:
        ``time`` as ISO-8601 strings, ``duration`` as float seconds, ints as
        longs, structs keyed by the value names, arrays as arrays (SPEC §3.5,
        §5.8). Each column's plan type is in its metadata (:func:`to_pandas`).

    Raises:
        TopologyError: (a ``ValueError``) the topology has errors; carries the diagnostics.
        ValueError: ``event_type`` is not an event type of the topology; or
            it is ``None`` and the input holds several event types with
            features (the message lists them); or the input has no valid event.
        TypeError: ``events`` is none of the accepted forms, or an event
            dict holds a value with no JSON form.
        writer.sources.SourceError: (a ``ValueError``) an input path matches nothing, or a file
            cannot be read (a ``.parquet`` file without a readable footer, a ``.gz``/``.bz2`` file
            that does not decompress: ``writer.sources.estimate_events``).
        writer.features.StagedFeatureError: (a ``NotImplementedError``)
            aggregates that depend on each other across event types in a
            cycle, which replay cannot stage (as ``scowl replay``).

    Source: SPEC §3.3, §5.8, §6 (``scowl replay``).
    """
    plan = _plan(topology)
    if event_type is not None:
        _check_types(plan, [event_type])
    return _with_to_pandas(_run(plan, events, spark, master, [event_type] if event_type else None, pick_one=True)[0][1])


def training_sets(
    topology: "str | os.PathLike[str] | Plan",
    events: Any,
    spark: "SparkSession | None" = None,
    *,
    event_types: Sequence[str] | None = None,
    master: str | None = None,
) -> "dict[str, DataFrame]":
    """Return the training sets of several event types from one read of the input (:func:`training_set`).

    ``scowl replay`` as a library call: the datasets it writes to
    ``OUTDIR/EVENT/``, as computed Spark DataFrames.

    Args:
        topology: the topology directory or a compiled ``compiler.plan.Plan``.
        events: the events, in arrival order (module docstring).
        spark: the session (``None``: see :func:`training_set`).
        event_types: the event types to return (default: every event type
            of the topology with events in the input, as ``scowl replay``
            without ``--types``). A listed type without events gives an
            empty DataFrame.
        master: Spark master URL when a session is created.

    Returns:
        Event type -> DataFrame (columns and order as :func:`training_set`),
        in the order of ``event_types``, else sorted by name.

    Raises:
        The errors of :func:`training_set` (an unknown name in ``event_types``: ``ValueError``).

    Source: SPEC §5.8, §6 (``scowl replay``).
    """
    plan = _plan(topology)
    if event_types is not None:
        event_types = [event_types] if isinstance(event_types, str) else list(event_types)
        _check_types(plan, event_types)
    return {ev: _with_to_pandas(df) for ev, df in _run(plan, events, spark, master, event_types or None, pick_one=False)}


def _with_to_pandas(df: "DataFrame") -> "DataFrame":
    """Give ``df`` a ``to_pandas()`` method (:func:`to_pandas` on it); ``df`` stays a plain ``pyspark.sql.DataFrame``.

    Only this object has it: a DataFrame derived from it (``select``,
    ``where``, ...) is Spark's own; call ``scowl.to_pandas(derived)`` on it.
    """
    import types

    df.to_pandas = types.MethodType(to_pandas, df)  # type: ignore[attr-defined]
    return df


def to_pandas(df: "DataFrame") -> "pandas.DataFrame":
    """Collect a (small) training set DataFrame to pandas with typed times and durations.

    Columns are converted by the plan type in their metadata (set by
    :func:`training_set`, kept by Spark through ``select``/``where``/``join``):
    ``time`` (``_time`` included) ISO-8601 strings -> ``datetime64[ms, UTC]``
    (years 0000-9999; null -> ``NaT``), ``duration`` float seconds ->
    ``timedelta64[ns]`` (``timedelta64[ms]`` when beyond its ±292 years;
    null -> ``NaT``). Every top-level long column becomes pandas' nullable
    ``Int64`` (exact 64-bit ints, SPEC §3.5; ``_seq`` stays ``int64``) and
    every boolean column ``boolean``; floats stay ``float64`` (null -> NaN),
    strings ``object``; structs become dicts and arrays numpy arrays (nested
    times stay ISO strings). A column without metadata gets only the
    Int64/boolean mapping.

    Args:
        df: a Spark DataFrame, typically from :func:`training_set` (all of
            it is collected to the driver: ``limit`` or ``sample`` first
            when it is large).

    Returns:
        A ``pandas.DataFrame`` with the same columns, in the DataFrame's row order.

    Source: SPEC §3.1 (times are UTC ms, durations seconds), §3.5 (encodings).
    """
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    types = {f.name: (f.metadata or {}).get(TYPE_METADATA_KEY) for f in df.schema.fields}
    mapper = {pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}.get
    out = df.toArrow().to_pandas(types_mapper=mapper)
    for name, t in types.items():
        if name not in out.columns:
            continue
        if t == "time":
            text = out[name].astype(object)
            text = [None if v is None or v is pd.NA else str(v).rstrip("Z") for v in text]
            out[name] = pd.Series(np.array(text, dtype="datetime64[ms]"), index=out.index).dt.tz_localize("UTC")
        elif t == "duration":
            seconds = out[name].astype("float64")
            try:
                out[name] = pd.to_timedelta(seconds, unit="s")
            except (OverflowError, pd.errors.OutOfBoundsTimedelta):
                out[name] = pd.Series(np.round(seconds.to_numpy() * 1000).astype("timedelta64[ms]"), index=out.index)
    if "_seq" in out.columns and str(out["_seq"].dtype) == "Int64" and not out["_seq"].isna().any():
        out["_seq"] = out["_seq"].astype("int64")
    return out


# ----------------------------------------------------------------------------- internals


def _plan(topology: "str | os.PathLike[str] | Plan") -> "Plan":
    """Compile ``topology`` (or return it when it is a ``Plan``); raise :class:`TopologyError` on diagnostics."""
    from compiler import compile_dir
    from compiler.plan import Plan

    if isinstance(topology, Plan):
        return topology
    if not isinstance(topology, (str, os.PathLike)):
        raise TypeError(f"topology: expected a directory path or a compiler.plan.Plan, got {type(topology).__name__}")
    result = compile_dir(Path(topology))
    if result.plan is None:
        from scowl.common import plural

        raise TopologyError(f"topology {topology} has {plural(len(result.diagnostics), 'error')}:\n"
                            f"{result.render().rstrip()}",
                            result.diagnostics)
    return result.plan


def _check_types(plan: "Plan", types: Sequence[str]) -> None:
    """Raise ``ValueError`` naming the types of ``types`` the topology does not have (and close matches)."""
    import difflib

    for t in types:
        if not isinstance(t, str) or t not in plan.events:
            close = difflib.get_close_matches(str(t), list(plan.events), n=3)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise ValueError(f"unknown event type {t!r}{hint}; the topology has {', '.join(sorted(plan.events))}")


def _run(plan: "Plan", events: Any, spark: "SparkSession | None", master: str | None, types: list[str] | None,
         pick_one: bool) -> "list[tuple[str, DataFrame]]":
    """Read ``events``, choose the types, replay them; return ``[(event type, annotated DataFrame)]``."""
    from pyspark.sql import DataFrame

    from writer.replay import prepare_events, replay_frames

    if spark is None:
        if isinstance(events, DataFrame):
            spark = events.sparkSession
        else:
            from writer.session import get_spark

            spark = get_spark(master)
    raw, renumber = _raw_events(spark, events)
    prepared = prepare_events(plan, raw, renumber=renumber)
    try:
        if prepared.rejected:
            from scowl.common import plural

            warnings.warn(f"{plural(prepared.rejected, 'invalid record')} skipped (each event needs a known _type and a "
                          "parseable _time)", stacklevel=3)
        if types is None:
            types = sorted(t for t in plan.events if t in prepared.present)
            if pick_one:
                types = [_only_type(plan, prepared.present)]
        frames = replay_frames(plan, prepared, types)
    finally:
        prepared.release()
    return [(ev, _annotate(df, plan.events[ev])) for ev, df in frames.items()]


def _only_type(plan: "Plan", present: dict[str, int]) -> str:
    """The one event type of the input with features, else a ``ValueError`` listing them."""
    with_features = [t for t in sorted(present) if t in plan.events and plan.events[t].outputs]
    if len(with_features) == 1:
        return with_features[0]
    listed = ", ".join(f"{t} ({present[t]:,} events)" for t in with_features)
    raise ValueError(f"the events hold {len(with_features)} event types with features: {listed}; choose one with "
                     "event_type=..., or use scowl.training_sets() for all of them")


def _annotate(df: "DataFrame", ep: "EventPlan") -> "DataFrame":
    """``df`` with each column's plan type in its metadata (:data:`TYPE_METADATA_KEY`)."""
    from pyspark.sql import functions as F

    types = {**FIXED_COLUMNS, **{f.name: f.type for f in ep.outputs}}
    return df.select(*[F.col(f"`{c}`").alias(c, metadata={TYPE_METADATA_KEY: types[c]}) if c in types
                       else F.col(f"`{c}`") for c in df.columns])


def _exported(paths: list) -> list:
    """``paths`` with each ``"redis:KEY"`` replaced by a JSONL export of that stream of ``SCOWL_REDIS_URL``.

    As ``scowl replay --events redis:KEY`` (``scowl.inputs``): the stream, in
    its order, to ``SCOWL_HOME/exports/<key>-<UTC time>.jsonl``.

    Raises:
        ValueError: a ``redis:`` input without ``SCOWL_REDIS_URL``, a key
            the store does not hold, or one that is not a stream.
    """
    from scowl.common import UserError
    from scowl.inputs import resolve_inputs, stream_inputs

    if not stream_inputs([p for p in paths if isinstance(p, str)]):
        return paths
    url = os.environ.get("SCOWL_REDIS_URL")
    if not url:
        raise ValueError("events: a redis:KEY input needs the store in SCOWL_REDIS_URL")

    try:
        return resolve_inputs([str(p) for p in paths], url, quiet=True)
    except UserError as e:
        raise ValueError(f"events: {e}") from None


def _raw_events(spark: "SparkSession", events: Any) -> "tuple[DataFrame, bool]":
    """The raw event DataFrame (``writer.sources``) of any accepted form of ``events`` (module docstring).

    Returns:
        ``(raw, renumber)``: for files, ``raw`` is numbered by
        ``monotonically_increasing_id`` and ``renumber`` is true
        (``writer.replay.prepare_events`` makes ``_seq`` dense in the job
        that counts the events, as ``scowl replay`` does: no counting pass of
        its own); other inputs come numbered ``0, 1, ..``.

    Raises:
        TypeError, ValueError: ``events`` is of no accepted form, or an empty list.
    """
    from pyspark.sql import DataFrame

    from writer.sources import estimate_events, events_from_frame, events_from_json, read_events

    if isinstance(events, DataFrame):
        return events_from_frame(events), False
    if isinstance(events, (str, os.PathLike)):
        events = _exported([events])[0]
        estimate_events([events])  # a file that cannot be read: a SourceError naming it, before any job
        return read_events(spark, [events], dense_seq=False), True
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency
        pd = None
    if pd is not None and isinstance(events, pd.DataFrame):
        return events_from_json(spark, [_dumps(i, _drop_missing(r)) for i, r in
                                        enumerate(events.to_dict(orient="records"))]), False
    if isinstance(events, (bytes, Mapping)) or not isinstance(events, Iterable):
        raise TypeError("events: expected path(s), a list of event dicts, a pandas DataFrame or a Spark DataFrame, "
                        f"got {type(events).__name__}")
    items = list(events)
    if not items:
        raise ValueError("events: the list is empty")
    if all(isinstance(x, (str, os.PathLike)) for x in items):
        items = _exported(items)
        estimate_events(items)
        return read_events(spark, items, dense_seq=False), True
    if all(isinstance(x, Mapping) for x in items):
        return events_from_json(spark, [_dumps(i, x) for i, x in enumerate(items)]), False
    kinds = sorted({type(x).__name__ for x in items})
    raise TypeError(f"events: a list must hold only paths or only event dicts, got {', '.join(kinds)}")


def _drop_missing(record: dict) -> dict:
    """A pandas row without its missing values (``NaN``, ``None``, ``NaT``, ``NA``: a missing field, as in a Parquet row)."""
    from pandas.api.types import is_scalar
    import pandas as pd

    return {k: v for k, v in record.items() if not (is_scalar(v) and pd.isna(v))}


def _dumps(i: int, event: Mapping) -> str:
    """One event dict as JSON text (datetimes ISO-8601, numpy scalars and arrays as JSON values)."""
    import orjson

    try:
        return orjson.dumps(event, default=_json_default,
                            option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError as e:
        raise TypeError(f"events[{i}]: cannot be written as JSON: {e}") from None


def _json_default(x: Any) -> Any:
    """orjson's fallback: pandas/numpy scalars, dates and missing values."""
    import numpy as np
    import pandas as pd

    if x is pd.NaT or x is pd.NA:
        return None
    if isinstance(x, (datetime, date)):  # pandas.Timestamp (orjson takes plain datetimes itself)
        return x.isoformat()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"type is not JSON serializable: {type(x).__name__}")
