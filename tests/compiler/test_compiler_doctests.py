"""Run the doctests of the compiler modules."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["compiler.parser", "compiler.check", "compiler.functions", "compiler.diagnostics", "compiler.planner"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0
