"""The import contracts between the layers hold (``[tool.importlinter]`` in pyproject.toml).

* ``compiler`` (grammar, checker, plan, tile algebra) imports nothing from
  ``writer``, ``serving`` or ``scowl``;
* ``writer`` and ``serving`` do not import each other, directly or through
  another module: what both need (store key names, shared Lua) lives in
  ``compiler.algebra`` (``storekeys``, ``script``);
* the modules of ``writer`` import each other without cycles (sources ->
  features -> writes -> tile passes and point-in-time reads -> jobs);
* the modules of ``scowl`` import each other without cycles.

Runs the real ``lint-imports`` (import-linter, the ``test`` extra) from this
interpreter's environment, without its cache, on the repository's own
configuration.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run ``lint-imports ARGS`` (found next to ``sys.executable``) in ``cwd``; return the completed process."""
    exe = Path(sys.executable).with_name("lint-imports")
    assert exe.exists(), f"{exe} is missing: install the test extra (pip install -e '.[test]')"
    return subprocess.run([str(exe), "--no-cache", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_import_contracts_are_kept():
    """Every contract of pyproject.toml is kept (exit 0); on failure the report names the offending imports."""
    r = lint_imports()
    assert r.returncode == 0, r.stdout + r.stderr
    counts = re.search(r"Contracts: (\d+) kept, (\d+) broken", r.stdout)
    assert counts and int(counts[1]) >= 4 and counts[2] == "0", r.stdout  # the contracts were read


def test_a_forbidden_import_is_caught(tmp_path):
    """The contracts can fail: stub layers where compiler and writer import serving break two of them."""
    for pkg in ("compiler", "writer", "serving", "scowl"):
        dst = tmp_path / pkg
        dst.mkdir()
        (dst / "__init__.py").write_text('"""stub"""\n')
    (tmp_path / "serving" / "store.py").write_text('"""stub"""\nONLINE_KEY = "sc:online"\n')
    (tmp_path / "compiler" / "bad.py").write_text('"""stub"""\nfrom serving.store import ONLINE_KEY\n')
    (tmp_path / "writer" / "status.py").write_text('"""stub"""\nfrom serving.store import ONLINE_KEY\n')
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    r = lint_imports(cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "compiler.bad -> serving.store" in r.stdout and "writer.status -> serving.store" in r.stdout, r.stdout
    assert "2 kept, 2 broken" in r.stdout, r.stdout


def test_every_module_imports_without_spark():
    """No module builds a Spark ``Column`` at import time (that needs a live SparkContext: ``scowl replay
    --help`` or a worker process would fail), checked in a fresh interpreter."""
    code = (
        "import importlib, pkgutil\n"
        "bad = []\n"
        "for pkg in ('compiler', 'writer', 'serving', 'scowl'):\n"
        "    for info in pkgutil.walk_packages(importlib.import_module(pkg).__path__, pkg + '.'):\n"
        "        if info.name.endswith('__main__'):\n"
        "            continue\n"
        "        try:\n"
        "            importlib.import_module(info.name)\n"
        "        except BaseException as e:\n"
        "            bad.append(f'{info.name}: {e!r}')\n"
        "from pyspark import SparkContext\n"
        "assert SparkContext._active_spark_context is None\n"
        "print('\\n'.join(bad) or 'ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
