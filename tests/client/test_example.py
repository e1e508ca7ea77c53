"""``examples/client_example.py`` runs as a script and prints what a fresh store gives (issue 13).

Twice: with ``SCOWL_URL`` unset (the example starts ``scowl serve
examples/flights`` itself over an embedded store in a temporary
``SCOWL_HOME``, and stops it), and with ``SCOWL_URL`` naming a server the
test runs (``tests.serving.helpers.served``) over the test store. The
example's read-only cells need the server's ``?dry_run`` and ``?explain``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compiler import compile_dir
from serving.app import create_app
from serving.settings import Settings
from tests.serving.helpers import served

pytestmark = pytest.mark.slow   # a Python subprocess (and a `scowl serve` one) per test

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "client_example.py"

#: Lines the example prints on a fresh store, in order.
EXPECTED = [
    "departures_1h: [1, 2, 3]",
    "delayed_3h: [0, 1, 2]",
    "prev_dep_time: 2013-01-01T10:20:00+00:00",
    "prev_flight: {'flight': 101, 'dest': 'LAX'}",
    "recent_dests: ['BOS', 'LAX', 'SFO']",
    "mins_since_prev: 20.0",
    "batch visib: 2.5 departures_1h: 4",
    "query departures_1h: 5",
    "explain departures_1h: 5 writes from 2013-01-01T09:55:01+00:00 to 2013-01-01T10:55:00+00:00 every 1 s",
    "query again: 5",
    "enrich after queries: 5 same as query: True",
    "types: {'prev_dep_time': 'time', 'prev_flight': 'struct{flight:int,dest:string}', "
    "'recent_dests': 'array<string>'}",
    "error: 400 unknown-type",
    "done",
]


def run_example(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SCOWL_")}
    return subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, env={**base, **env},
                          capture_output=True, text=True, timeout=180)


def check(r: subprocess.CompletedProcess) -> list[str]:
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert [line for line in lines if not line.startswith("started ")] == EXPECTED, r.stdout
    return lines


def test_the_example_starts_its_own_server(tmp_path):
    lines = check(run_example(tmp_path))
    assert lines[0].startswith("started scowl serve examples/flights at http://127.0.0.1:")
    assert not (tmp_path / ".scowl").exists()   # the embedded store lived in a temporary SCOWL_HOME


def test_the_example_against_scowl_url(tmp_path, redis_url):
    app = create_app(compile_dir(ROOT / "examples" / "flights").plan, Settings(api_keys="example-key"),
                     redis_url=redis_url)
    with served(app) as url:
        lines = check(run_example(tmp_path, SCOWL_URL=url, SCOWL_API_KEY="example-key"))
    assert not any(line.startswith("started ") for line in lines)
