"""A Redis Stream as a Spark Structured Streaming source (SPEC §5.7).

A Python data source (``pyspark.sql.datasource``, Spark >= 4.2) registered as
``scowl-redis-stream``::

    spark.dataSource.register(RedisStreamDataSource)
    df = (spark.readStream.format("scowl-redis-stream")
          .option("url", "redis://127.0.0.1:6379/0").option("stream", "events").load())

Each stream entry is one event. Its JSON text is the entry's ``event`` field
(what ``serving`` appends with ``SCOWL_EVENT_STREAM``, and what
``XADD events * event '{"_type": ...}'`` writes); an entry without that field
becomes the JSON object of all its fields (values as strings).

Columns: ``_entry`` (string, the entry id ``<ms>-<n>``), ``_seq`` (long,
``ms * 2**20 + n``: orders entries as the stream does, for entry ids with
``n < 2**20``), ``_raw`` (string, the event's JSON text).

Offsets are entry ids: ``{"id": "<ms>-<n>"}`` is the last entry a batch
includes (``"0-0"`` before the first), so a batch is the entries in
``(start, end]``, read with ``XRANGE`` -- the same entries whenever a batch is
re-run after a crash, as long as they have not been trimmed from the stream
(keep the stream longer than the job's lag; nothing here trims it).

Options: ``url`` (required), ``stream`` (required), ``maxRecordsPerBatch``
(default: all available), ``startingId`` (default ``0-0``: the whole stream;
an entry id to start after it).
"""

from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

#: Entries fetched per ``XRANGE`` call when reading a batch.
CHUNK = 1000

#: Multiplier of the entry id's milliseconds in ``_seq``.
SEQ_SHIFT = 1 << 20


def _id_text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


def entry_seq(entry_id: str) -> int:
    """Return the ``_seq`` of an entry id (``ms * 2**20 + n``).

    >>> entry_seq("1700000000000-3")
    1782579200000000003
    """
    ms, _, n = entry_id.partition("-")
    return int(ms) * SEQ_SHIFT + int(n or 0)


def entry_text(fields: dict) -> str:
    """Return the JSON text of one entry (its ``event`` field, else all fields as an object)."""
    import orjson

    ev = fields.get(b"event", fields.get("event"))
    if ev is not None:
        return ev.decode("utf-8", "replace") if isinstance(ev, bytes) else ev
    obj = {_id_text(k): _id_text(v) for k, v in fields.items()}
    return orjson.dumps(obj).decode()


class RedisRange(InputPartition):
    """One batch's partition: the entries with ids in ``(start, end]`` (strings ``<ms>-<n>``).

    Args:
        start: id of the last entry of the previous batch (``"0-0"`` for none).
        end: id of the batch's last entry.
    """

    def __init__(self, start: str, end: str):
        super().__init__((start, end))
        self.start = start
        self.end = end


class RedisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stream reader over one Redis Stream (module docstring).

    Args:
        options: the data source options (``url``, ``stream``,
            ``maxRecordsPerBatch``, ``startingId``).

    Raises:
        ValueError: a missing ``url``/``stream`` or a bad ``maxRecordsPerBatch``.
    """

    def __init__(self, options: dict):
        try:
            self.url = options["url"]
            self.stream = options["stream"]
        except KeyError as e:
            raise ValueError(f"scowl-redis-stream needs the option {e.args[0]}") from None
        self.max_rows = int(options.get("maxRecordsPerBatch", 0) or 0)
        if self.max_rows < 0:
            raise ValueError("maxRecordsPerBatch must be >= 0")
        self.start_id = options.get("startingId", "0-0")
        self.target: str | None = None

    def _client(self):
        from writer.redisio import connect

        return connect(self.url)

    def _last_id(self) -> str | None:
        client = self._client()
        try:
            top = client.xrevrange(self.stream, "+", "-", count=1)
        finally:
            client.close()
        return _id_text(top[0][0]) if top else None

    def initialOffset(self) -> dict:
        """Return ``{"id": startingId}`` (default ``"0-0"``: before the first entry)."""
        return {"id": self.start_id}

    def getDefaultReadLimit(self):
        """``ReadMaxRows(maxRecordsPerBatch)`` if that option is set, else all available."""
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Record the stream's last entry id now: later entries are left for later runs."""
        self.target = self._last_id() or self.start_id

    def latestOffset(self, start: dict, limit=None) -> dict:
        """Return the id of the last entry the next batch includes (``start`` when none).

        Args:
            start: the previous batch's end offset.
            limit: ``ReadMaxRows(n)`` caps the batch at ``n`` entries;
                ``ReadAllAvailable`` (or ``None``) takes everything up to the
                latest entry (or the ``availableNow`` target).
        """
        begin = start["id"] if start else self.start_id
        client = self._client()
        try:
            end = self.target
            if end is None:
                top = client.xrevrange(self.stream, "+", "-", count=1)
                end = _id_text(top[0][0]) if top else begin
            if isinstance(limit, ReadMaxRows) and limit.max_rows > 0:
                got = client.xrange(self.stream, "(" + begin, end, count=int(limit.max_rows))
                if got:
                    end = _id_text(got[-1][0])
                else:
                    end = begin
        finally:
            client.close()
        if entry_seq(end) <= entry_seq(begin):
            end = begin
        return {"id": end}

    def partitions(self, start: dict, end: dict):
        """One partition per batch: the entries in ``(start, end]`` (none if equal)."""
        if start["id"] == end["id"]:
            return []
        return [RedisRange(start["id"], end["id"])]

    def read(self, partition: RedisRange) -> Iterator[tuple]:
        """Yield ``(_entry, _seq, _raw)`` for the partition's entries, in stream order."""
        client = self._client()
        try:
            lo = "(" + partition.start
            while True:
                got = client.xrange(self.stream, lo, partition.end, count=CHUNK)
                for eid, fields in got:
                    eid = _id_text(eid)
                    yield (eid, entry_seq(eid), entry_text(fields))
                if len(got) < CHUNK:
                    break
                lo = "(" + _id_text(got[-1][0])
        finally:
            client.close()

    def commit(self, end: dict) -> None:
        """Nothing to do: the stream keeps its entries (trimming is the producer's policy)."""


class RedisStreamDataSource(DataSource):
    """The ``scowl-redis-stream`` data source (module docstring): streaming reads only."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``spark.readStream.format("scowl-redis-stream")``."""
        return "scowl-redis-stream"

    def schema(self) -> str:
        """DDL of the rows: ``_entry`` (entry id), ``_seq`` (long order key), ``_raw`` (event JSON)."""
        return "_entry string, _seq long, _raw string"

    def streamReader(self, schema) -> RedisStreamReader:
        """Return the stream reader over this source's options (``schema`` is :meth:`schema`'s).

        Raises:
            ValueError: a missing ``url``/``stream`` option or a negative ``maxRecordsPerBatch``.
        """
        return RedisStreamReader(self.options)
