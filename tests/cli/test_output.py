"""``scowl`` output at 80 columns and through a pipe: the plan listing, inline aggregates, ``--help`` (SPEC §6).

Every command runs as a real subprocess with ``COLUMNS=80`` and its output
captured (a pipe), as ``scowl plan DIR | less`` would see it.
"""

from __future__ import annotations

import doctest
import importlib
import json
import os
import re

import pytest

from scowl.common import format_duration_s, plural
from tests.cli.test_cli import FLIGHTS, scowl

NARROW = {**os.environ, "COLUMNS": "80"}

#: A topology with inline aggregates (SPEC §2.4), a cross-event aggregate
#: with an ``as`` key, ``where``/``limit``/``exclusive``/``after``.
TOPOLOGY = """
event pay
user := $.user as string
amount := $.amount as int
x := Count(by user) + 1
past_money := Sum(amount by user last 30 days) - Sum(amount by user last 2 days)
a_very_long_feature_name_that_is_not_cut := Count(by user where amount > 10 last 86401 seconds limit 7 exclusive)

event login
account := $.account as string
day_start := EventTime() - 1 hour
pays_90s := Count<pay>(by account as user last 90 seconds)
first_login := FirstTime(by account after day_start last 1 day)
"""


@pytest.mark.parametrize("name", ["scowl.common", "scowl.commands.stream"])
def test_doctests(name: str) -> None:
    """The examples in the docstrings of the CLI's helpers hold (format_duration_s, redact_url, parse_duration_ms)."""
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("seconds, text", [(90, "90s"), (600, "10m"), (3600, "1h"), (86400, "1d"), (2592000, "30d"),
                                           (86401, "1d1s"), (150, "2m30s"), (6000, "1h40m"), (259200, "3d")])
def test_format_duration_s(seconds: int, text: str) -> None:
    """Windows and resolutions are shown in compact units (the largest exact one below 100, else unit by unit)."""
    assert format_duration_s(seconds) == text


def test_plan_listing_at_80_columns(tmp_path):
    """Names are never cut, windows read 30d / 1d1s / 90s, keys (with ``as``) and clauses are shown, inline aggregates sit under their scalar."""
    (tmp_path / "t.scowl").write_text(TOPOLOGY)
    r = scowl("plan", str(tmp_path), env=NARROW)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    doc = json.loads(scowl("plan", str(tmp_path), "--json").stdout)
    hashes = {f["name"]: f["definition_hash"] for ev in doc["events"].values() for f in ev["features"]
              if f["kind"] == "aggregate"}
    inline = {a["text"]: a["definition_hash"] for ev in doc["events"].values() for f in ev["features"]
              for a in f.get("inline_aggregates", [])}
    assert set(inline) == {"Count(by user)", "Sum(amount by user last 30 days)", "Sum(amount by user last 2 days)"}

    assert lines[0] == "event login: 1 input, 1 scalar, 2 aggregates"
    assert "event pay: 2 inputs, 2 scalars, 1 aggregate" in lines
    assert lines[lines.index("event pay: 2 inputs, 2 scalars, 1 aggregate") - 1] == ""  # a blank line between events
    assert f"  pays_90s     int     aggregate  state {hashes['pays_90s']}" in lines
    assert "    Count<pay>(by account as user), window 90s, resolution 1s" in lines
    assert "    FirstTime(by account after day_start), window 1d, resolution 1m" in lines
    long = "a_very_long_feature_name_that_is_not_cut"
    i = next(k for k, line in enumerate(lines) if line.startswith(f"  {long}"))
    assert lines[i:i + 2] == [f"  {long}  int     aggregate  state {hashes[long]}",
                              "    Count(by user where amount > 10 limit 7 exclusive), window 1d1s, resolution 1s"]
    # a scalar with aggregates inside keeps its kind; its aggregates follow it, indented, under their text
    i = lines.index("  past_money" + " " * 18 + "  int     scalar")  # names padded to 28 (longer ones push their line)
    assert lines[i + 1:i + 5] == [
        f"    Sum(amount by user last 30 days)  int  aggregate  state {inline['Sum(amount by user last 30 days)']}",
        "      Sum(amount by user), window 30d, resolution 1m",
        f"    Sum(amount by user last 2 days)  int  aggregate  state {inline['Sum(amount by user last 2 days)']}",
        "      Sum(amount by user), window 2d, resolution 1m",
    ]
    i = lines.index("  x" + " " * 27 + "  int     scalar")
    assert lines[i + 1:i + 3] == [f"    Count(by user)  int  aggregate  state {inline['Count(by user)']}",
                                  "      Count(by user), window 30d, resolution 1m"]
    assert not any("#" in line for line in lines)  # the internal names x#1, past_money#2 are not shown
    assert not any("…" in line for line in lines)  # nothing truncated by rich


def test_plan_of_the_demo_topology_is_not_cut():
    """Every feature of examples/flights appears whole, and no line was cut by the 80-column terminal."""
    r = scowl("plan", str(FLIGHTS), env=NARROW)
    assert r.returncode == 0, r.stderr
    assert "  cancellations_carrier_1d  int" in r.stdout
    assert "    Sum(distance by tailnum), window 30d, resolution 1m" in r.stdout
    assert "2592000s" not in r.stdout and "…" not in r.stdout


@pytest.mark.parametrize("command", ["", "init", "check", "plan", "backfill", "serve", "stream", "replay", "status",
                                     "demo", "warm"])
def test_help_reads_cleanly_at_80_columns(command: str):
    """No type placeholders (<bool>, <path>, {DIR}), no boxes; every line fits 80 columns; metavars name the values."""
    r = scowl(*([command] if command else []), "--help", env=NARROW)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for placeholder in ("<bool>", "<str>", "<int>", "<path>", "{DIR}", "{directory}", "╭", "│"):
        assert placeholder not in out, (placeholder, out)
    assert all(len(line) <= 80 for line in out.splitlines()), out
    if command in ("check", "plan", "backfill", "serve", "stream", "replay", "status"):
        assert f"Usage: scowl {command} [OPTIONS] DIR\n" in out
        assert "\n  DIR  Topology directory (its *.scowl files).  [required]\n" in out


def test_help_shows_metavars_and_cites_the_semantics():
    """Options name their values; replay, serve and backfill point to docs/semantics.md."""
    out = {c: scowl(c, "--help", env=NARROW).stdout for c in ("backfill", "serve", "replay")}
    assert "  --events PATH  " in out["backfill"] and "  --start ISO  " in out["backfill"]
    assert re.search(r"\n  --port PORT +TCP port\.  \[default: 8000\]\n", out["serve"]), out["serve"]
    assert re.search(r"\n  --worker-policy POLICY +Linux scheduling policy", out["serve"]), out["serve"]
    assert "[default: auto]" in " ".join(out["serve"].split()) and "WorkerPolicy" not in out["serve"]
    assert "  --types E,...  " in out["replay"]
    for c, text in out.items():
        assert "docs/semantics.md" in " ".join(text.split()), c


def test_version_names_scowl_python_pyspark_and_the_store():
    """``scowl --version``: one line naming the installed versions (what a bug report needs), exit 0."""
    import platform
    from importlib.metadata import version

    r = scowl("--version", env=NARROW)
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(rf"scowl {re.escape(version('scowl'))} \(Python {re.escape(platform.python_version())}, "
                        rf"PySpark {re.escape(version('pyspark'))}, Valkey server v=\d+\.\d+\.\d+\)\n", r.stdout), r.stdout
    assert "--version" in scowl("--help", env=NARROW).stdout


@pytest.mark.parametrize(("args", "text"), [
    ((1, "event"), "1 event"), ((0, "event"), "0 events"), ((2, "event"), "2 events"),
    ((1, "batch", "batches"), "1 batch"), ((3, "batch", "batches"), "3 batches"),
    ((1500, "row", None, ","), "1,500 rows"), ((1, "invalid record"), "1 invalid record"),
])
def test_plural(args, text) -> None:
    """Counts in the CLI's messages: the singular for exactly one, else the plural."""
    assert plural(*args) == text
