"""The notebook-style examples run as scripts: ``examples/training_set_example.py`` (docs/notebooks.md).

A subprocess (its own Spark session, as a user's ``python examples/...``),
from a scratch directory; slow tier (``tests/conftest.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_training_set_example(tmp_path):
    """Exit 0; the slice, the row and column counts, the typed pandas columns are as documented."""
    env = {**os.environ, "SCOWL_SPARK_MASTER": "local[2]", "SCOWL_SHUFFLE_PARTITIONS": "2",
           "SCOWL_DRIVER_MEMORY": "1g"}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "training_set_example.py")], capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "2,340 events from 2013-01-01T06:00:00.000Z to 2013-01-02T16:59:00.000Z" in out
    assert "{'arrival': 1030, 'cancellation': 4, 'departure': 1203, 'weather_obs': 103}" in out
    assert "departures: 1,203 rows, 32 columns" in out
    assert "|15  |2013-01-01T10:17:00.000Z|EWR   |IAH |1            |10.0 |NULL         |" in out
    assert "_time                 datetime64[ms, UTC]" in out
    assert "departures_1h                       Int64" in out
    assert "prev_dep_time         datetime64[ms, UTC]" in out
    assert "pandas: 365 rows, first departure at 2013-01-02 10:12:00+00:00" in out
    assert "Traceback" not in r.stderr
