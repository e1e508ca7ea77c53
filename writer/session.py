"""The Spark session of the jobs (SPEC §5.9: ``local[*]`` unless a master is given)."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def get_spark(master: str | None = None, app_name: str = "scowl") -> SparkSession:
    """Return (or create) the Spark session.

    Args:
        master: Spark master URL; default ``SCOWL_SPARK_MASTER`` or ``local[*]``.
        app_name: application name shown by Spark.

    Returns:
        A session with UTC session time zone, UI off and few shuffle partitions
        (the jobs' data are grouped by (key, tile), small after aggregation).
    """
    master = master or os.environ.get("SCOWL_SPARK_MASTER") or "local[*]"
    # executors' Python workers must run this interpreter (it has redis-py etc.)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        # stay on loopback (and skip Spark's warning about the host name)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", os.environ.get("SCOWL_SHUFFLE_PARTITIONS", "8"))
        .config("spark.driver.memory", os.environ.get("SCOWL_DRIVER_MEMORY", "4g"))
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.python.worker.reuse", "true")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
