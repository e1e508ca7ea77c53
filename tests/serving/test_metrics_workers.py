"""``GET /metrics`` and the explorer's traffic numbers over several processes (``serving.metrics``).

Each process below is a fresh interpreter with ``PROMETHEUS_MULTIPROC_DIR``
set before ``prometheus_client`` is imported, as ``scowl serve --workers N``
starts its workers (``scowl.commands.serve.metrics_dir``): two "workers"
count events, a third reads the service's totals, as either worker answers
a scrape. The CLI end to end is ``tests/cli/test_serve_workers.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WORKER = """
from serving.metrics import EVENTS, EVENT_LATENCY, LATE_EVENTS
for i in range({n}):
    EVENTS.labels("departure").inc()
    EVENT_LATENCY.labels("departure").observe(0.0007)
LATE_EVENTS.labels("departure").inc({late})
"""

READER = """
import json
from serving.metrics import exposition
from scowl.ui.traffic import take_snapshot
snap = take_snapshot()
print(json.dumps({"text": exposition().decode(), "counters": snap.counters,
                  "buckets": {k: {str(le): v for le, v in b.items()} for k, b in snap.buckets.items()}}))
"""


def _python(code: str, env: dict) -> str:
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_metrics_of_several_worker_processes_add_up(tmp_path):
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    _python(WORKER.format(n=7, late=1), env)
    _python(WORKER.format(n=5, late=0), env)
    got = json.loads(_python(READER, env))
    lines = got["text"].splitlines()
    assert 'scowl_events_total{event_type="departure"} 12.0' in lines, got["text"]
    assert 'scowl_late_events_total{event_type="departure"} 1.0' in lines, got["text"]
    assert 'scowl_event_seconds_count{event_type="departure"} 12.0' in lines, got["text"]
    assert got["counters"] == {"departure": {"events": 12.0, "late": 1.0}}
    assert got["buckets"]["departure"]["0.0005"] == 0.0 and got["buckets"]["departure"]["0.001"] == 12.0


def test_one_process_reads_its_own_registry(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env["PYTHONPATH"] = str(ROOT)
    got = json.loads(_python(WORKER.format(n=3, late=0) + READER, env))
    assert 'scowl_events_total{event_type="departure"} 3.0' in got["text"].splitlines(), got["text"]
    assert got["counters"] == {"departure": {"events": 3.0, "late": 0.0}}
    assert not any(tmp_path.iterdir())
