"""Golden diagnostics: ``cases/<name>.scowl`` compiles to the rendered ``cases/<name>.expected``.

Regenerate the expected files with ``SCOWL_UPDATE_GOLDEN=1 pytest tests/compiler``
(then review the diff). Source: SPEC §2.5.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compiler import compile_sources
from compiler.diagnostics import CODES

CASES = Path(__file__).parent / "cases"
UPDATE = os.environ.get("SCOWL_UPDATE_GOLDEN") == "1"
# codes that need a file system or a compiler bug; tested in test_api.py
NOT_GOLDEN = {"E0110", "E0111", "E9999"}


def _cases() -> list[Path]:
    return sorted(CASES.glob("*.scowl"))


@pytest.mark.parametrize("case", _cases(), ids=lambda p: p.stem)
def test_golden(case: Path) -> None:
    text = case.read_text(encoding="utf-8")
    result = compile_sources({case.name: text})
    rendered = result.render()
    expected = case.with_suffix(".expected")
    if UPDATE or not expected.exists():
        expected.write_text(rendered, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"wrote missing {expected.name}; review it and rerun")
    assert rendered == expected.read_text(encoding="utf-8")
    assert result.plan is None and result.diagnostics


@pytest.mark.parametrize("case", [p for p in _cases() if p.stem[:5] in {c.code for c in CODES}],
                         ids=lambda p: p.stem)
def test_case_reports_its_code(case: Path) -> None:
    """A case named after a code reports that code (and uses its registered name)."""
    result = compile_sources({case.name: case.read_text(encoding="utf-8")})
    code = case.stem[:5]
    hits = [d for d in result.diagnostics if d.code == code]
    assert hits, result.render()
    name = next(c.name for c in CODES if c.code == code)
    assert case.stem[6:] == name.replace("-", "_")
    assert all(d.name == name for d in hits)


def test_every_code_has_a_case() -> None:
    covered = {p.stem[:5] for p in _cases()}
    missing = {c.code for c in CODES} - covered - NOT_GOLDEN
    assert not missing, f"add tests/compiler/cases/<code>_<name>.scowl for {sorted(missing)}"
