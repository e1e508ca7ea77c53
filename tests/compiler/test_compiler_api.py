"""Public API: compile_dir / compile_sources / CompileResult, file-level diagnostics (SPEC §2.1, §2.5, §6)."""

from __future__ import annotations

from pathlib import Path

import pytest

import compiler
import compiler.check
from compiler import CompileResult, compile_dir, compile_sources
from compiler.diagnostics import CODES, codes_markdown, lookup

from _compiler_helpers import DEMO


def test_compile_dir_recursive_sorted(tmp_path: Path) -> None:
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "late.scowl").write_text("event e\ny := x + 1\n")
    (tmp_path / "a.scowl").write_text("event e\nx := $.x as int\n")
    (tmp_path / "notes.txt").write_text("not scowl")
    res = compile_dir(str(tmp_path))
    assert isinstance(res, CompileResult) and res.ok, res.render()
    assert list(res.sources) == ["a.scowl", "z/late.scowl"]
    assert res.render() == ""
    assert [f.span.file for f in res.plan.events["e"].features] == ["a.scowl", "z/late.scowl"]


def test_compile_dir_errors_name_relative_files(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "bad.scowl").write_text("event e\nx := nosuch\n")
    res = compile_dir(tmp_path)
    assert res.plan is None
    assert res.render().startswith("sub/bad.scowl:2:6-2:12: error E0301 unknown-feature: ")


def test_empty_and_missing_dirs(tmp_path: Path) -> None:
    res = compile_dir(tmp_path)
    assert [d.code for d in res.diagnostics] == ["E0111"]
    res = compile_dir(tmp_path / "nope")
    assert [d.code for d in res.diagnostics] == ["E0111"] and res.plan is None


def test_non_utf8_file(tmp_path: Path) -> None:
    (tmp_path / "x.scowl").write_bytes(b"event e\nx := 'caf\xe9'\n")
    res = compile_dir(tmp_path)
    assert [d.code for d in res.diagnostics] == ["E0110"]
    assert res.diagnostics[0].span.line == 2 and res.diagnostics[0].span.col == 10
    assert "E0110 unreadable-file" in res.render()


def test_internal_error_becomes_diagnostic(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(_files, _sources=None):
        raise RuntimeError("kaput")

    monkeypatch.setattr(compiler.check, "check", boom)
    res = compile_sources({"a.scowl": "event e\nx := 1\n"})
    assert res.plan is None and [d.code for d in res.diagnostics] == ["E9999"]
    assert "kaput" in res.diagnostics[0].message


def test_render_format() -> None:
    res = compile_sources({"f.scowl": "event e\nt := $.t as string\nn := Count(after t)\n"})
    out = res.render()
    assert out == (
        "f.scowl:3:18-3:19: error E0203 after-not-a-time-feature: `after` needs a time feature; 't' is string\n"
        " 3 | n := Count(after t)\n"
        "   |                  ^\n"
        "  hint: after takes the name of a `time` feature of the reading event\n"
        "\n"
        "1 error\n"
    )


def test_errors_are_sorted_and_collected_across_files() -> None:
    res = compile_sources({
        "b.scowl": "event e\ny := (\n",
        "a.scowl": "event e\nx := nosuch\nz := 1 +\n",
    })
    assert [(d.span.file, d.span.line) for d in res.diagnostics] == [("a.scowl", 2), ("a.scowl", 3),
                                                                    ("b.scowl", 2)]


def test_each_file_opens_its_own_section() -> None:
    res = compile_sources({"a.scowl": "event e\nx := 1\n", "b.scowl": "y := 2\n"})
    assert [d.code for d in res.diagnostics] == ["E0107"]


def test_broken_statement_does_not_cascade() -> None:
    res = compile_sources({"a.scowl": "event e\nx := (1 +\ny := x * 2\nz := Count(by x)\n"})
    assert [d.code for d in res.diagnostics] == ["E0103"]


def test_code_table() -> None:
    codes = [c.code for c in CODES]
    names = [c.name for c in CODES]
    assert len(set(codes)) == len(codes) and len(set(names)) == len(names)
    assert all(c.code.startswith("E") and len(c.code) == 5 for c in CODES)
    assert lookup("E0203").name == "after-not-a-time-feature"
    assert lookup("cycle").code == "E0306"
    assert "| E0203 | `after-not-a-time-feature` |" in codes_markdown()


def test_demo_file_via_compile_dir(tmp_path: Path) -> None:
    (tmp_path / "flights.scowl").write_text(DEMO)
    res = compile_dir(tmp_path)
    assert res.ok, res.render()
    assert len(res.plan.states) == 10


def test_long_chains_and_deep_expressions_compile() -> None:
    """Long dependency chains (either order) and expressions up to the depth limit do not recurse out."""
    lines = ["x0 := $.x as int"] + [f"x{i} := x{i - 1} + 1" for i in range(1, 1500)]
    lines.append("n := Count(by x1499 last 1 hour)")
    for order in (lines, list(reversed(lines))):
        res = compile_sources({"a.scowl": "event e\n" + "\n".join(order) + "\n"})
        assert res.ok, res.render()
        assert [f.name for f in res.plan.events["e"].features][:3] == ["x0", "x1", "x2"]
        res.plan.dumps()
    deep = ("event e\nx := $.x as int\ny := " + " + ".join(["x"] * 95) + "\nz := " + "Lower(" * 45 + "'a'"
            + ")" * 45 + "\nw := " + "- " * 95 + "x\nn := Count(by y where z > 'a' and w > y)\n")
    res = compile_sources({"a.scowl": deep})
    assert res.ok, res.render()
    res.plan.dumps()
