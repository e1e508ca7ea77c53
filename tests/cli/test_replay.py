"""``scowl replay`` (SPEC §5.8, §6): layout, encodings, ``--types``, errors, values equal to the API.

One small topology with every output encoding (time, duration, struct with a
time, array of structs, a tuple item of a multi-value ``Set`` -- a struct
named after the value features, also through a reference and an index --,
bool, int beyond 2^53), an aggregate inside an expression (computed, not a
column), events with and without ``_id``, an invalid record and a blank
line, through the real command (a subprocess: new Spark session, embedded
store not needed). Values are compared with ``POST /batch`` on a fresh store.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from compiler import compile_dir
from compiler.typesystem import format_time
from tests.e2e.helpers import close, post_all

ROOT = Path(__file__).resolve().parents[2]

TOPOLOGY = """
event pay
user := $.user as string
amount := $.amount as float?
at := $.at as time?
flag := $.flag as bool?
big := $.big as int?
n := Count(by user last 1 hour)
total := Sum(amount by user)
prev := Latest(at, amount by user exclusive)
since := EventTime() - prev.at
recent := Sequence(at, flag by user limit 2)
pairs := Set(user, big last 1 day)
same_pairs := pairs
last_pair := pairs[-1]
drift := Sum(amount by user last 1 day) - Sum(amount by user last 1 hour)
first_at := FirstTime(by user)
mx := Max(big)

event probe
user := $.user as string
n_pay := Count<pay>(by user last 1 hour)
"""


def _events() -> list[dict]:
    out = []
    for i in range(40):
        e = {"_type": "pay", "_time": 1_357_000_000_000 + i * 37_000, "user": ["a", "b", "ü"][i % 3],
             "amount": None if i % 7 == 0 else i * 1.25, "at": 1_356_990_000_000 + i * 1000, "flag": i % 2 == 0,
             "big": 2**60 + i}
        if i % 2 == 0:
            e["_id"] = f"id-{i}"
        out.append(e)
        if i % 5 == 0:
            out.append({"_type": "probe", "_time": 1_357_000_000_000 + i * 37_000 + 1, "user": "a"})
    return out


def _scowl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scowl", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900, env={**__import__("os").environ, "SCOWL_SHUFFLE_PARTITIONS": "2"})


def test_replay_command_layout_encodings_and_values(spark, tmp_path, redis_url):
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    events = _events()
    lines = [json.dumps(e) for e in events]
    lines.insert(3, "")                     # blank: not a record
    lines.insert(10, '{"_type": "nope"}')  # invalid: set aside, keeps its position
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")

    r = _scowl("replay", str(topo), "--events", str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert "1 invalid record skipped" in r.stdout

    pay = pq.read_table(tmp_path / "out" / "pay")
    assert pay.column_names == ["_seq", "_time", "_id", "user", "amount", "at", "flag", "big", "n", "total", "prev",
                                "since", "recent", "pairs", "same_pairs", "last_pair", "drift", "first_at", "mx"]
    # a tuple is a struct named after the Set's value features (SPEC §5.8), through refs and indexing too
    for col in ("pairs", "same_pairs"):
        item = pay.schema.field(col).type.value_type
        assert [item.field(i).name for i in range(item.num_fields)] == ["user", "big"]
        assert str(item.field(0).type) == "string" and str(item.field(1).type) == "int64"
    last = pay.schema.field("last_pair").type
    assert [last.field(i).name for i in range(last.num_fields)] == ["user", "big"]
    # written as writer.replay.PARQUET_OPTIONS says: zstd pages, no dictionary pages
    for part in (tmp_path / "out" / "pay").glob("*.parquet"):
        meta = pq.ParquetFile(part).metadata
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                chunk = meta.row_group(g).column(c)
                assert chunk.compression == "ZSTD", (part.name, chunk.path_in_schema, chunk.compression)
                assert chunk.dictionary_page_offset is None, (part.name, chunk.path_in_schema, chunk.encodings)
    probe = pq.read_table(tmp_path / "out" / "probe")
    assert probe.column_names == ["_seq", "_time", "user", "n_pay"]  # no _id given for probes
    rows = {r["_seq"]: ("pay", r) for r in pay.to_pylist()} | {r["_seq"]: ("probe", r) for r in probe.to_pylist()}
    # _seq: position among the input's records (the invalid one at 9 keeps its place)
    assert sorted(rows) == [i for i in range(len(events) + 1) if i != 9]
    assert [r["_seq"] for r in pay.to_pylist()] == sorted(r["_seq"] for r in pay.to_pylist())  # input order

    plan = compile_dir(topo).plan
    online = post_all(plan, redis_url, events)
    positions = [i for i in range(len(events) + 1) if i != 9]
    for e, want, seq in zip(events, online, positions):
        ev, got = rows[seq]
        assert ev == e["_type"]
        assert got.get("_id") == e.get("_id")
        assert got["_time"] == format_time(e["_time"])  # the API's event_time
        outputs = [f.name for f in plan.events[ev].outputs]  # the inline Sums of drift are no columns
        assert set(got) - {"_seq", "_time", "_id"} == set(outputs)
        for k in outputs:
            v, g = want[k], got[k]
            if k in ("pairs", "same_pairs"):  # tuples: an array in JSON, a struct (user, big) in Parquet
                g = [[x["user"], x["big"]] for x in g]
            if k == "last_pair":
                g = [g["user"], g["big"]]
            assert close(g, v) or (isinstance(v, list) and all(close(a, b) for a, b in zip(g, v)) and len(g) == len(v)), \
                (seq, k, g, v)
    first = rows[0][1]
    assert first["_time"] == "2013-01-01T00:26:40.000Z"
    assert first["at"] == "2012-12-31T21:40:00.000Z" and first["big"] == 2**60
    assert isinstance(rows[len(events)][1]["since"], float)

    # --types writes only those (in-process, on the shared session); an unknown type is a user error
    from writer.replay import run_replay

    report = run_replay(spark, plan, [tmp_path / "in.jsonl"], tmp_path / "o2", types=["probe"])
    assert report.rows == {"probe": probe.num_rows} and report.rejected == 1
    assert sorted(p.name for p in (tmp_path / "o2").iterdir()) == ["probe"]
    assert pq.read_table(tmp_path / "o2" / "probe").to_pylist() == probe.to_pylist()
    r = _scowl("replay", str(topo), "--events", str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "o3"),
               "--types", "pay,nope", cwd=tmp_path)
    assert r.returncode == 1 and "unknown event type(s) nope" in r.stderr and "Traceback" not in r.stderr
    r = _scowl("replay", str(topo), "--events", str(tmp_path / "missing*.jsonl"), "--out", str(tmp_path / "o4"),
               cwd=tmp_path)
    assert r.returncode == 1 and "no input files match" in r.stderr
