"""Shared helpers for compiler tests (imported as a plain module; tests/ has no packages)."""

from __future__ import annotations

from pathlib import Path

from compiler import CompileResult, compile_sources
from compiler.plan import Plan

HERE = Path(__file__).parent
DEMO = (HERE / "demo_flights.scowl").read_text(encoding="utf-8")


def compile_ok(text: str | dict[str, str]) -> Plan:
    """Compile and assert success; return the plan."""
    sources = {"main.scowl": text} if isinstance(text, str) else text
    result = compile_sources(sources)
    assert result.plan is not None, result.render()
    assert result.diagnostics == []
    return result.plan


def compile_err(text: str | dict[str, str]) -> CompileResult:
    """Compile and assert failure; return the result."""
    sources = {"main.scowl": text} if isinstance(text, str) else text
    result = compile_sources(sources)
    assert result.plan is None and result.diagnostics
    return result

