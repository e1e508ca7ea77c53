"""Run the doctests of every ``compiler`` module (found by walking the package) and of ``scowl.common``.

A new module's examples are run without being listed here; a module that
fails to import fails its test.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import compiler

MODULES = sorted(m.name for m in pkgutil.walk_packages(compiler.__path__, "compiler.")) + ["scowl.common"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0


def test_the_walk_finds_the_algebra_and_the_generators() -> None:
    assert {"compiler.algebra.windows", "compiler.algebra.keys", "compiler.codegen.scowl"} <= set(MODULES)
