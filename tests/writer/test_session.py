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
    # every default JVM option (huge generated methods compiled, smaller C2 compilations); one JVM
    # start (~10 s), so SCOWL_JAVA_OPTIONS's override, read by the same os.environ.get, is not started again
    args, partitions = _jvm_args({"SCOWL_DRIVER_MEMORY": "1g", "SCOWL_SHUFFLE_PARTITIONS": "3"})
    assert JAVA_OPTIONS.split() and all(option in args for option in JAVA_OPTIONS.split())
    assert "-Xmx1g" in args
    assert partitions == "3"


def test_restarted_lambda_names_give_the_same_plan(spark):
    """``restart_lambda_names``: a frame built again after it has the lambda variables of the first build
    (so the same generated code, which Spark compiles once); without it the names move on."""
    import re

    from pyspark.sql import functions as F

    from writer.session import restart_lambda_names

    def build() -> str:
        df = spark.range(3).select(F.transform(F.array(F.col("id"), F.col("id") + 1), lambda v: v * 2).alias("a"),
                                   F.filter(F.array(F.col("id")), lambda v: v > 0).alias("b"))
        return " ".join(re.findall(r"lambda (x_\d+)", df._jdf.queryExecution().analyzed().toString()))

    restart_lambda_names(spark)
    first = build()
    assert len(set(first.split())) == 2  # two lambdas, two names
    assert build() != first  # the counter moves on
    restart_lambda_names(spark)
    assert build() == first


def test_a_replay_run_again_compiles_nothing(spark, tmp_path):
    """Each read of events restarts the lambda numbering (``writer.sources``): the same replay run again in
    the session builds the same generated code, so Spark compiles no class for it (it compiled the
    largest, input coercion's, anew before: the lambda names were new)."""
    import orjson

    from compiler import compile_sources
    from writer.replay import run_replay

    plan = compile_sources({"t.scowl": (
        "event e\nu := $.u as string\nx := $.x as float?\ntag := $.tag as string?\n"
        "n := Count(by u last 1 hour)\ns := Sum(x by u last 1 day)\nq := Sequence(tag, x by u last 1 hour limit 3)\n")}).plan
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"_type": "e", "_time": 1_700_000_000_000 + 7_000 * i, "u": f"u{i % 3}",
                                           "x": i / 2, "tag": str(i)}) + b"\n" for i in range(40)))
    compiles = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    counts = []
    for i in range(2):
        before = compiles.getCount()
        report = run_replay(spark, plan, [path], tmp_path / f"out{i}")
        counts.append(compiles.getCount() - before)
        assert report.rows == {"e": 40}
    assert counts[1] == 0, counts


def test_arrow_batches_are_bounded_by_rows_not_sized_per_row(spark):
    """``configure`` sets ``maxBytesPerBatch`` to ``Int.MaxValue``: Spark then skips sizing its Arrow batch after
    every row (``BatchedPythonArrowInput``), and ``maxRecordsPerBatch`` alone bounds what ``mapInArrow`` gets."""
    from pyspark.sql import functions as F

    from writer.session import SESSION_CONFS, configure

    configure(spark)
    conf = spark._jsparkSession.sessionState().conf()
    assert conf.arrowMaxBytesPerBatch() == 2**31 - 1 == int(SESSION_CONFS["spark.sql.execution.arrow.maxBytesPerBatch"])
    limit = conf.arrowMaxRecordsPerBatch()

    def sizes(batches):
        import pyarrow as pa

        for b in batches:
            yield pa.RecordBatch.from_pydict({"n": [b.num_rows]})

    df = spark.range(0, 2 * limit + 7, numPartitions=1).select("id", F.struct(F.col("id").alias("a")).alias("s"))
    got = sorted(r["n"] for r in df.mapInArrow(sizes, "n long").collect())
    assert got == [7, limit, limit]


def test_java_options_by_job_size_and_override(monkeypatch):
    """``java_options``: warm-up options up to ``LONG_JOB_EVENTS`` events or when unknown (a stream),
    HotSpot's steady-state C2 settings above it; ``SCOWL_JAVA_OPTIONS`` replaces either; ``process_confs``
    gives the driver and the executors the same choice (the driver its log configuration after it)."""
    from writer.session import LONG_JOB_EVENTS, LONG_JOB_JAVA_OPTIONS, java_options, log_options, process_confs

    monkeypatch.delenv("SCOWL_JAVA_OPTIONS", raising=False)
    assert java_options() == JAVA_OPTIONS and java_options(LONG_JOB_EVENTS) == JAVA_OPTIONS
    assert java_options(LONG_JOB_EVENTS + 1) == LONG_JOB_JAVA_OPTIONS != JAVA_OPTIONS
    assert "-XX:-DontCompileHugeMethods" in LONG_JOB_JAVA_OPTIONS.split()
    confs = process_confs(10 * LONG_JOB_EVENTS)
    assert confs["spark.executor.extraJavaOptions"] == LONG_JOB_JAVA_OPTIONS
    assert confs["spark.driver.extraJavaOptions"] == " ".join(filter(None, [LONG_JOB_JAVA_OPTIONS, log_options()]))
    monkeypatch.setenv("SCOWL_JAVA_OPTIONS", "-Xss2m")
    assert java_options() == java_options(10 * LONG_JOB_EVENTS) == "-Xss2m"


def test_cached_frames_are_stored_uncompressed_and_read_back_whole(spark):
    """``configure`` turns the columnar cache's compression off (the cached ``_raw`` texts are distinct:
    no scheme compresses them, and gathering the schemes' statistics cost a sixth of the read phase);
    what is cached reads back value for value."""
    from pyspark.sql import functions as F

    from writer.session import configure

    configure(spark)
    assert spark._jsparkSession.sessionState().conf().useCompression() is False
    df = spark.range(0, 5_000, numPartitions=2).select(
        F.concat(F.lit('{"_type": "e", "n": '), F.col("id").cast("string"), F.lit("}")).alias("_raw"),
        (F.col("id") % 3).alias("k")).persist()
    try:
        assert df.count() == 5_000
        rows = sorted((r["_raw"], r["k"]) for r in df.collect())
        assert rows == sorted((f'{{"_type": "e", "n": {i}}}', i % 3) for i in range(5_000))
    finally:
        df.unpersist()


def test_column_building_records_no_python_call_site(spark, monkeypatch):
    """``STATIC_CONFS`` turn PySpark's DataFrame debugging off in the sessions the writer starts (the
    test session too): building a column makes no py4j round trip to record the Python call site
    (``PySparkCurrentOrigin``, ~5 round trips per function call), and the column still computes."""
    from py4j import clientserver
    from pyspark.sql import functions as F

    from writer.session import STATIC_CONFS, process_confs

    assert STATIC_CONFS["spark.python.sql.dataFrameDebugging.enabled"] == "false"
    assert process_confs()["spark.python.sql.dataFrameDebugging.enabled"] == "false"
    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    sent: list[str] = []
    send = clientserver.ClientServerConnection.send_command

    def record(self, command, *args, **kwargs):
        sent.append(command)
        return send(self, command, *args, **kwargs)

    monkeypatch.setattr(clientserver.ClientServerConnection, "send_command", record)
    col = F.upper(F.concat(F.col("s"), F.lit("-"), F.col("s"))).alias("u")
    monkeypatch.setattr(clientserver.ClientServerConnection, "send_command", send)
    assert sent, "the column was built through py4j"
    assert not [c for c in sent if "PySparkCurrentOrigin" in c or "getActiveSession" in c]
    assert [r["u"] for r in spark.createDataFrame([("ab",)], "s string").select(col).collect()] == ["AB-AB"]


def test_python_workers_are_reached_through_a_unix_domain_socket(spark):
    """``STATIC_CONFS`` have the executors reach their Python workers through a Unix domain socket (loopback
    TCP stalled every Python task ~50 ms): the workers of the test session, started with
    ``process_confs`` as ``get_spark``'s are, run in that mode, and a ``mapInArrow`` task computes its rows."""
    import pyarrow as pa

    from writer.session import STATIC_CONFS, process_confs

    key = "spark.python.unix.domain.socket.enabled"
    assert STATIC_CONFS[key] == "true" and process_confs()[key] == "true"
    assert spark.sparkContext.getConf().get(key) == "true"

    def tag(batches):
        import os

        for b in batches:
            mode = os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "unset")
            yield pa.RecordBatch.from_pydict({"id": b.column(0), "mode": [mode] * b.num_rows})

    rows = spark.range(0, 6, 1, 3).mapInArrow(tag, "id long, mode string").collect()
    assert sorted(r["id"] for r in rows) == list(range(6))
    assert {r["mode"].lower() for r in rows} == {"true"}  # as pyspark.daemon reads it
