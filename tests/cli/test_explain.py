"""``scowl explain DIR FEATURE [--json]``: definition, plan entry, state, lineage; user errors exit 1.

The topology is ``explain/topology`` (two files, so definitions name their
file): a common aggregate feeding a scalar (``pay.busy``) that filters a
state read by another event (``login.busy_pays``), a cross-event aggregate
the other way round with ``as`` and a filter, inline aggregates, ``after``.
Runs in-process through the typer app (``CliRunner``, no Spark); the exit
codes of user errors through ``scowl.cli.main`` as the console script runs it.

Golden files: ``explain/<event>.<feature>.expected`` hold the text output;
regenerate them with ``SCOWL_UPDATE_GOLDEN=1 pytest tests/cli/test_explain.py``
(then review the diff).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scowl import cli

HERE = Path(__file__).resolve().parent / "explain"
TOPOLOGY = HERE / "topology"
UPDATE = os.environ.get("SCOWL_UPDATE_GOLDEN") == "1"


def run(*args: str):
    """``scowl ARGS`` in this process; returns click's result (``exit_code``, ``stdout``, ``exception``)."""
    return CliRunner().invoke(cli.app, list(args))


def explain_json(feature: str) -> dict:
    r = run("explain", str(TOPOLOGY), feature, "--json")
    assert r.exit_code == 0, (r.output, r.exception)
    return json.loads(r.stdout)


def edges(nodes: list[dict], parent: str) -> set[tuple[str, str, tuple[str, ...]]]:
    """Every (parent, child, roles) edge of a lineage tree, ``event.feature`` names."""
    out = set()
    for n in nodes:
        name = f"{n['event']}.{n['feature']}"
        out.add((parent, name, tuple(n["roles"])))
        out |= edges(n["children"], name)
    return out


@pytest.mark.parametrize("feature", ["pay.n_user", "login.busy_pays"])
def test_golden(feature: str) -> None:
    """The text listing of a feature is exactly the reviewed one."""
    r = run("explain", str(TOPOLOGY), feature)
    assert r.exit_code == 0, (r.output, r.exception)
    expected = HERE / f"{feature}.expected"
    if UPDATE or not expected.exists():
        expected.write_text(r.stdout, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"wrote missing {expected.name}; review it and rerun")
    assert r.stdout == expected.read_text(encoding="utf-8")


def test_definition_plan_entry_and_hash_match_plan_json() -> None:
    """file:line and the source line; the plan entry and definition hash are ``scowl plan --json``'s."""
    r = run("explain", str(TOPOLOGY), "login.first_login")
    assert r.exit_code == 0, (r.output, r.exception)
    lines = r.stdout.splitlines()
    assert lines[0] == "login.first_login: aggregate time"
    assert lines[1] == "  defined at login.scowl:8"
    assert lines[2] == "    first_login := FirstTime(by account after day_start last 1 day)"
    plan = json.loads(run("plan", str(TOPOLOGY), "--json").stdout)
    entry = next(f for f in plan["events"]["login"]["features"] if f["name"] == "first_login")
    h = entry["definition_hash"]
    assert f"  definition hash    {h}" in lines and f"state {h}" in lines
    for row in ("  function           FirstTime", "  keys               account", "  after              day_start",
                "  window             1d (86,400 s)", "  resolution         1m (60 s)", "  exclusive          no",
                "  limit              none", "  storage            tiles: one partial per tile at every level",
                "  tile sizes         1m, 5m, 15m, 1h, 4h, 1d", "  ttl                1d1m after the last write (W + r)",
                "  written by         login: key account (string)", "  read by            login.first_login"):
        assert row in lines, row
    doc = explain_json("login.first_login")
    assert doc["plan"] == entry and doc["state"]["definition_hash"] == h
    assert doc["state"]["ttl_s"] == 86400 + 60 and doc["state"]["tile_sizes_s"] == [60, 300, 900, 3600, 14400, 86400]
    assert doc["definition"]["file"] == "login.scowl" and doc["definition"]["line"] == 8
    assert doc["definition"]["text"] == "FirstTime(by account after day_start last 1 day)"


def test_lineage_edges() -> None:
    """Upstream: keys, after, the writers' keys/values/filters, recursively; downstream: the reverse edges."""
    doc = explain_json("login.first_login")
    assert edges(doc["upstream"], "login.first_login") == {
        ("login.first_login", "login.account", ("key", "write key")),
        ("login.first_login", "login.day_start", ("after",)),
    }
    doc = explain_json("pay.past_money")
    assert edges(doc["upstream"], "pay.past_money") == {
        ("pay.past_money", "pay.past_money#1", ("uses",)),
        ("pay.past_money", "pay.past_money#2", ("uses",)),
        ("pay.past_money#1", "pay.user", ("key", "write key")),
        ("pay.past_money#1", "pay.amount", ("value",)),
        ("pay.past_money#2", "pay.user", ("key", "write key")),
        ("pay.past_money#2", "pay.amount", ("value",)),
    }
    repeated = [n for n in doc["upstream"][1]["children"] if n["repeated"]]
    assert [n["feature"] for n in repeated] == ["user", "amount"]  # shown once, then "(see above)"
    assert edges(explain_json("pay.amount")["downstream"], "pay.amount") == {
        ("pay.amount", "pay.past_money#1", ("value",)),
        ("pay.amount", "pay.past_money#2", ("value",)),
        ("pay.past_money#1", "pay.past_money", ("uses",)),
        ("pay.past_money#2", "pay.past_money", ("uses",)),
    }
    # an inline aggregate by its plan name; its parent is named
    r = run("explain", str(TOPOLOGY), "pay.past_money#2")
    assert r.exit_code == 0, (r.output, r.exception)
    assert "  defined at pay.scowl:9, inside pay.past_money: Sum(amount by user last 2 days)" in r.stdout


def test_cross_event_lineage() -> None:
    """A state written by one event and read by another links the writer's features to the reader's aggregate."""
    # login writes (key account, filter fresh) a state pay reads
    assert edges(explain_json("login.fresh")["downstream"], "login.fresh") == {
        ("login.fresh", "pay.fresh_logins", ("where",)),
    }
    up = edges(explain_json("pay.fresh_logins")["upstream"], "pay.fresh_logins")
    assert up == {
        ("pay.fresh_logins", "pay.user", ("key",)),
        ("pay.fresh_logins", "login.account", ("write key",)),
        ("pay.fresh_logins", "login.fresh", ("where",)),
        ("login.fresh", "login.ip", ("uses",)),
    }
    # pay's aggregate -> pay's scalar -> the filter of a state login reads
    assert edges(explain_json("pay.n_user")["downstream"], "pay.n_user") == {
        ("pay.n_user", "pay.busy", ("uses",)),
        ("pay.busy", "login.busy_pays", ("where",)),
    }
    r = run("explain", str(TOPOLOGY), "fresh_logins")  # a bare name one event has
    assert r.exit_code == 0, (r.output, r.exception)
    assert "  scopes             login (cross-event)" in r.stdout
    assert "  keys               user (written as account)" in r.stdout
    assert "  written by         login: key account (string), where fresh" in r.stdout
    assert "  read by            pay.fresh_logins" in r.stdout


def test_help_lists_explain() -> None:
    r = run("--help")
    assert r.exit_code == 0 and "explain" in r.stdout
    r = run("explain", "--help")
    assert r.exit_code == 0 and "[OPTIONS] DIR FEATURE" in r.stdout and "--json" in r.stdout


def _main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``scowl ARGS`` through the console entry point (``cli.main``): exit code, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["scowl", *args])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    out = capsys.readouterr()
    return exit_.value.code, out.out, out.err


@pytest.mark.parametrize("feature, message", [
    ("ip", "error: feature 'ip' is ambiguous: 2 events have it; name one of login.ip, pay.ip"),
    ("n_users", "error: unknown feature 'n_users' (did you mean pay.n_user, pay.user?); name it as event.feature"),
    ("pay.n_users", "error: event pay has no feature 'n_users' (did you mean pay.n_user"),
    ("pays.n_user", "error: unknown event 'pays' in 'pays.n_user' (did you mean pay?); the topology has the events "
                    "login, pay"),
])
def test_unknown_or_ambiguous_feature_exits_1(monkeypatch, capsys, feature: str, message: str) -> None:
    code, out, err = _main(monkeypatch, capsys, "explain", str(TOPOLOGY), feature)
    assert code == 1 and out == "" and "Traceback" not in err
    assert err.startswith(message), err


def test_topology_errors_exit_1(monkeypatch, capsys, tmp_path) -> None:
    (tmp_path / "a.scowl").write_text("event e\nx := $.x as int\ny := Count(by nope)\n")
    code, _, err = _main(monkeypatch, capsys, "explain", str(tmp_path), "e.x")
    assert code == 1 and "a.scowl:3:" in err and "E0301" in err and "Traceback" not in err
    code, _, err = _main(monkeypatch, capsys, "explain", str(tmp_path / "missing"), "e.x")
    assert code == 1 and err.startswith("error: ") and "not a directory" in err
