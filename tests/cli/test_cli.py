"""The ``scowl`` command: exit codes and outputs (SPEC §6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLIGHTS = ROOT / "examples" / "flights"


def scowl(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scowl", *args], capture_output=True, text=True, cwd=cwd or ROOT,
                          env=env, timeout=600)


def test_check_ok():
    r = scowl("check", str(FLIGHTS))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok: 4 events, ") and r.stdout.endswith(" aggregate states\n"), r.stdout


def test_check_counts_in_the_singular_for_one(tmp_path):
    """One event type with one feature and one aggregate state: ``1 event``, not ``1 events``."""
    (tmp_path / "a.scowl").write_text("event e\nn := Count(last 1 hour)\n")
    r = scowl("check", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ok: 1 event, 1 feature, 1 aggregate state\n"


def test_check_reports_errors_with_positions(tmp_path):
    (tmp_path / "a.scowl").write_text("event e\nx := $.x as int\ny := Count(by nope)\nz := Sum(x last q)\n")
    r = scowl("check", str(tmp_path))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "a.scowl:3:" in r.stderr and "E0301" in r.stderr
    assert "a.scowl:4:" in r.stderr


def test_usage_error_is_2():
    r = scowl("check")
    assert r.returncode == 2


def test_plan_json_fields():
    r = scowl("plan", str(FLIGHTS), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    feats = {f["name"]: f for f in doc["events"]["departure"]["features"]}
    assert feats["origin"]["kind"] == "input" and feats["origin"]["type"] == "string"
    assert feats["route"]["kind"] == "scalar"
    agg = feats["departures_1h"]
    assert agg["kind"] == "aggregate" and agg["type"] == "int"
    for key in ("function", "scopes", "window_s", "resolution_s", "limit", "definition_hash"):
        assert key in agg
    assert (agg["function"], agg["window_s"], agg["resolution_s"], agg["limit"]) == ("Count", 3600, 1, None)
    assert feats["miles_tail_30d"]["window_s"] == 30 * 86400 and feats["miles_tail_30d"]["resolution_s"] == 60
    assert feats["visib"]["scopes"] == ["weather_obs"]


def test_not_a_directory_is_user_error(tmp_path):
    """One plain line on stderr, never wrapped however long the path and however narrow the terminal."""
    missing = tmp_path / ("long-directory-name-" * 6) / "missing"
    r = scowl("check", str(missing), env={**os.environ, "COLUMNS": "40"})
    assert r.returncode == 1
    assert r.stderr == f"error: {missing}: not a directory\n"
    assert r.stdout == ""


def test_backfill_of_missing_input_is_a_user_error_before_spark(tmp_path):
    """The input paths are expanded (to pick the JVM options, ``writer.sources.estimate_events``) before
    Spark starts: a path that matches nothing is exit 1 with its message, no traceback."""
    env = {k: v for k, v in os.environ.items() if k != "SCOWL_REDIS_URL"}
    env["SCOWL_HOME"] = str(tmp_path / "home")
    r = scowl("backfill", str(FLIGHTS), "--events", str(tmp_path / "missing*.jsonl"), cwd=tmp_path, env=env)
    assert r.returncode == 1 and "no input files match" in r.stderr and "Traceback" not in r.stderr, r.stderr
