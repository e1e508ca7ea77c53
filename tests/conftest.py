"""Shared fixtures: one real Redis-protocol server and one SparkSession per test run.

The server is started by the same mechanism as the embedded default
(``scowl.embedded.EmbeddedStore``, SPEC §5.9); each test that asks for
``redis_url`` gets it flushed. Spark follows chispa's pattern: one
session-scoped ``spark`` fixture (start-up costs ~5 s). ``SPARK_TESTING`` is
not set: it would turn off Spark's code-generation fallback, which the jobs
rely on in production too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

#: The slow tier (marker ``slow``; the inner loop is ``pytest -m "not slow"``):
#: every test in these directories (new ones there too) -- end-to-end runs of
#: backfill, replay and stream with Spark jobs of tens of seconds and CLI
#: subprocesses that start their own JVM ...
SLOW_DIRS = ("e2e", "stream")
#: ... every test of these modules (Spark jobs beyond a few seconds, ``scowl``
#: subprocesses, the 10,000-case compiler fuzz) ...
SLOW_MODULES = (
    "cli/test_cli.py",
    "cli/test_replay.py",
    "cli/test_status.py",
    "compiler/test_check_command.py",
    "compiler/test_compiler_fuzz.py",
    "conformance/test_random_arithmetic.py",
    "writer/test_pit_oracle.py",
)
#: ... and these single tests (``module::test`` without parameters): the
#: conformance tables through Spark (10-30 s each), point-in-time replay
#: against the online path (~50 s), subprocesses.
SLOW_TESTS = (
    "compiler/test_docs.py::test_module_entry_point_checks_the_committed_file",
    "conformance/test_coercion.py::test_coercion_spark_matches",
    "conformance/test_conformance.py::test_spark",
    "test_demo_data.py::test_cli",
    "writer/test_pointintime.py::test_point_in_time_equals_online",
)
#: Modules of :data:`SLOW_DIRS` that run in well under a second (no Spark, no subprocess): not slow.
FAST_MODULES = (
    "e2e/test_store_dump.py",
    "stream/test_merge_ops.py",
)


def _is_slow(item: pytest.Item) -> bool:
    """Whether ``item`` belongs to the slow tier (:data:`SLOW_DIRS` but :data:`FAST_MODULES`,
    :data:`SLOW_MODULES`, :data:`SLOW_TESTS`)."""
    try:
        rel = item.path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return False
    name = f"{rel}::{getattr(item, 'originalname', item.name)}"
    in_slow_dir = rel.split("/", 1)[0] in SLOW_DIRS and rel not in FAST_MODULES
    return in_slow_dir or rel in SLOW_MODULES or name in SLOW_TESTS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow tier ``slow`` (pyproject registers the marker); a test may also carry it itself."""
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A private valkey/redis server for the whole session; yields its URL."""
    from scowl.embedded import EmbeddedStore

    store = EmbeddedStore(tmp_path_factory.mktemp("store"), persist=False)
    url = store.start()
    yield url
    store.stop()


@pytest.fixture()
def redis_url(redis_server):
    """The session server's URL, flushed before the test."""
    import redis

    client = redis.Redis.from_url(redis_server)
    client.flushall()
    client.close()
    return redis_server


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole test run (UTC, 2 cores, UI off)."""
    import os
    import sys

    from pyspark.sql import SparkSession

    from writer.classdata import plan_for_session
    from writer.session import configure, process_confs, start_jvm

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("scowl-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
    )
    # get_spark's JVM options and Python daemon; the class-data archive if one exists (this JVM lives as long
    # as the run: one written at its exit would come too late for it; the commands the tests start write it)
    for key, value in process_confs(driver_options=plan_for_session(create=False).options).items():
        builder = builder.config(key, value)
    start_jvm(builder)  # as get_spark starts it: output relayed (writer.gateway)
    session = builder.getOrCreate()
    configure(session)  # the writer's SQL settings (writer.session.SESSION_CONFS), as get_spark sets them
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def redis_cluster_server(tmp_path_factory):
    """A private 3-master Redis Cluster on loopback for the session (``scowl.embedded.LocalCluster``, SPEC §5.1)."""
    from scowl.embedded import LocalCluster

    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"), masters=3)
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture()
def redis_cluster(redis_cluster_server):
    """The session's cluster, every node flushed; yields the ``LocalCluster`` (its ``url`` names node 0)."""
    for i in range(redis_cluster_server.masters):
        redis_cluster_server.node(i).flushall()
    return redis_cluster_server


@pytest.fixture(params=["single", "cluster"])
def store_url(request):
    """A flushed store of each kind in turn: the single server (``redis_url``), then the 3-master cluster
    (``redis_cluster``); yields the URL every command is given (for the cluster, node 0's: SPEC §5.1)."""
    if request.param == "single":
        return request.getfixturevalue("redis_url")
    return request.getfixturevalue("redis_cluster").url
