"""serving.app.create_app_from_env: the process-manager factory (uvicorn --factory, scowl serve --workers).

Run in a child process (it sets process-wide state): it compiles
``$SCOWL_TOPOLOGY``, refuses a missing or broken topology with a message,
and freezes the heap it built (``serving.app.freeze_heap``: the plan and app
leave the cyclic GC's scans, so no 40-60 ms pause stops the API).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import gc, sys
before = gc.get_freeze_count()
from serving.app import create_app_from_env
try:
    app = create_app_from_env()
except RuntimeError as e:
    print("ERROR", str(e).splitlines()[0])
    sys.exit(0)
print("FROZEN", before, gc.get_freeze_count(), type(app).__name__)
"""


def run_factory(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_factory_builds_the_app_and_freezes_its_heap(tmp_path):
    (tmp_path / "t.scowl").write_text("event e\nk := $.k as string\nn := Count(by k last 1 hour)\n")
    kind, before, after, cls = run_factory({"SCOWL_TOPOLOGY": str(tmp_path),
                                            "SCOWL_REDIS_URL": "redis://127.0.0.1:1/0"}).split()
    assert kind == "FROZEN" and int(before) == 0 and int(after) > 10_000 and cls == "ScowlAPI"


def test_factory_refuses_a_missing_or_broken_topology(tmp_path):
    assert run_factory({"SCOWL_TOPOLOGY": ""}) == "ERROR set SCOWL_TOPOLOGY to the topology directory"
    (tmp_path / "t.scowl").write_text("event e\nn := Count(by nothing last 1 hour)\n")
    out = run_factory({"SCOWL_TOPOLOGY": str(tmp_path), "SCOWL_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert out.startswith("ERROR") and "nothing" in out
