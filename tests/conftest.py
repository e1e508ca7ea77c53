"""Shared fixtures: one real Redis-protocol server and one SparkSession per test run.

The server is started by the same mechanism as the embedded default
(``scowl.embedded.EmbeddedStore``, SPEC §5.9); each test that asks for
``redis_url`` gets it flushed. Spark follows chispa's pattern: one
session-scoped ``spark`` fixture (start-up costs ~5 s). ``SPARK_TESTING`` is
not set: it would turn off Spark's code-generation fallback, which the jobs
rely on in production too.
"""

from __future__ import annotations

import pytest


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

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("scowl-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
