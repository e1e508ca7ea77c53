"""``writer.session.get_spark``: the settings it takes from the environment reach the JVM it starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from writer.session import JAVA_OPTIONS

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
from writer.session import get_spark
spark = get_spark()
args = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
print("ARGS", "|".join(args))
print("PARTITIONS", spark.conf.get("spark.sql.shuffle.partitions"))
spark.stop()
"""


def _jvm_args(env: dict[str, str]) -> tuple[list[str], str]:
    """Start ``get_spark`` in a fresh process with ``env`` added; return the JVM's arguments and the partitions."""
    full = {k: v for k, v in os.environ.items() if k != "SCOWL_JAVA_OPTIONS"}
    full.update({"SCOWL_SPARK_MASTER": "local[1]", **env})
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=full, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.startswith(("ARGS ", "PARTITIONS ")))
    return lines["ARGS"].split("|"), lines["PARTITIONS"]


def test_java_options_memory_and_partitions_reach_the_session():
    # the default JVM options (HotSpot may compile huge generated methods); one JVM start (~10 s), so
    # SCOWL_JAVA_OPTIONS's override, read by the same os.environ.get, is not started again
    args, partitions = _jvm_args({"SCOWL_DRIVER_MEMORY": "1g", "SCOWL_SHUFFLE_PARTITIONS": "3"})
    assert JAVA_OPTIONS.split()[0] in args
    assert "-Xmx1g" in args
    assert partitions == "3"
