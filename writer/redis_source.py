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
re-run after a crash, as long as they have not been trimmed from the stream.

Trimming and lost entries (the Redis counterpart of a Kafka topic's
retention and of Spark's Kafka option ``failOnDataLoss``):

* with ``trim`` (``scowl stream --trim-source``), the source deletes the
  entries a committed micro-batch read: Spark calls :meth:`RedisStreamReader.commit`
  with a batch's end once the batch's commit is recorded in the checkpoint
  and it will only ask for later entries (measured 2026-12-05: during the
  construction of the next batch, so a run's last batch is trimmed at the
  next run's first), and ``XTRIM <stream> MINID <end>`` deletes every entry
  before ``end``. The entry ``end`` itself stays: it marks how far this job
  has read. Use it when the job is the stream's only reader;
* whatever trims the stream (``--trim-source``, a producer's ``MAXLEN``, such
  as serving's ``SCOWL_EVENT_STREAM_MAXLEN``, or ``XTRIM`` by hand), a batch
  that starts after an entry the stream no longer holds may have lost the
  entries after it. With ``failOnDataLoss`` (the default) the source then
  reads nothing more: with the option ``lossFile`` it writes the message
  (naming the entry) to that file and offers no new entries, so the query
  makes no batch and its owner stops it (``writer.stream.run_stream``:
  Spark logs no error and no Python traceback); without it the query fails
  with :class:`TrimmedPastCheckpoint`. With it off the batch goes on with
  the entries that are left (a warning is logged).

A stream trimmed by ``MAXLEN``/``MINID`` loses its oldest entries first, so
the last read entry still being there means no later one was trimmed.

A source store that restarts or fails over (``writer.redisio.store_outage``)
is waited out for ``retryS`` seconds (``scowl stream --store-retry``): each
store call of the source (the batch's end, the entries' read, a trim) is
made again after 1, 2, 4 s (at most 5: a stop request waits for at most one
pause), each wait announced on standard error; reads and trims give the
same result when made again, so nothing is read twice or lost. After
``retryS`` the error stops the query.

Options: ``url`` (required), ``stream`` (required), ``maxRecordsPerBatch``
(default: all available), ``startingId`` (default ``0-0``: the whole stream;
an entry id to start after it), ``trim`` (``true``/``false``, default false),
``failOnDataLoss`` (``true``/``false``, default true), ``lossFile`` (a local
path, default none), ``retryS`` (seconds, default 0: fail at the first
store error).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

#: Entries fetched per ``XRANGE`` call when reading a batch.
CHUNK = 1000

#: The longest pause between two attempts of a store call while the source's store is unavailable, in seconds
#: (short: the query waits for the call when it is stopped).
RETRY_MAX_WAIT_S = 5.0

#: Multiplier of the entry id's milliseconds in ``_seq``.
SEQ_SHIFT = 1 << 20

log = logging.getLogger(__name__)


class TrimmedPastCheckpoint(RuntimeError):
    """The stream no longer holds the last entry the job read: entries after it may have been lost (one line)."""


def _flag(options: dict, name: str, default: bool) -> bool:
    """A boolean data source option (``true``/``false``, any case; ``1``/``0``).

    Raises:
        ValueError: another value.
    """
    raw = str(options.get(name, "")).strip().lower()
    if not raw:
        return default
    if raw in ("true", "1"):
        return True
    if raw in ("false", "0"):
        return False
    raise ValueError(f"scowl-redis-stream option {name} must be true or false, got {options[name]!r}")


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


def behind_ms(url: str, stream: str, last_seq: int) -> int | None:
    """How far a reader that has read up to ``last_seq`` is behind the stream's last entry, in ms of append time.

    Entry ids are ``<ms>-<n>``, ``ms`` the store's clock when the entry was
    appended, so the difference of the two ``ms`` parts is how much later
    than the reader's last entry the newest one came in (0: caught up).

    Args:
        url: the store holding the stream.
        stream: the stream key.
        last_seq: :func:`entry_seq` of the last entry read.

    Returns:
        Milliseconds (>= 0), or ``None`` when the stream is empty, missing,
        or the store does not answer (the lag is information, not a reason
        to fail a batch).
    """
    import redis

    from writer.redisio import connect

    try:
        client = connect(url)
        try:
            top = client.xrevrange(stream, "+", "-", count=1)
        finally:
            client.close()
    except redis.RedisError:
        return None
    if not top:
        return None
    return max(0, entry_seq(_id_text(top[0][0])) // SEQ_SHIFT - last_seq // SEQ_SHIFT)


@dataclass
class StreamExport:
    """What :func:`export_stream` wrote.

    Attributes:
        path: the JSONL file.
        entries: lines written (one per entry).
        first_id, last_id: the first and last entry ids exported (``None`` when none).
    """

    path: str
    entries: int = 0
    first_id: str | None = None
    last_id: str | None = None


def export_stream(url: str, stream: str, path: str | Path) -> StreamExport:
    """Write the entries of the Redis stream ``stream`` to ``path`` as JSONL, one event a line, in stream order.

    Each line is :func:`entry_text` of an entry (its ``event`` field, what
    serving appends with ``SCOWL_EVENT_STREAM``: the body with the resolved
    ``_time`` in epoch ms and its ``_id``). The entries are those up to the
    last one when the export starts (``XRANGE`` in chunks of :data:`CHUNK`),
    so a stream still being appended to gives a consistent prefix; the file's
    line order is the stream's, i.e. the API's arrival order, which is what
    replay's ``_seq`` follows (SPEC §3.3, §5.8). The file is written to a
    temporary name beside ``path`` and renamed when complete.

    Args:
        url: the store (a cluster: any node).
        stream: the stream key.
        path: the JSONL file to write (its directory must exist).

    Returns:
        A :class:`StreamExport`.

    Raises:
        LookupError: there is no such key in the store.
        redis.RedisError: the store failed, or the key is not a stream
            (``WRONGTYPE``).
    """
    from writer.redisio import connect

    path = Path(path)
    out = StreamExport(str(path))
    client = connect(url)
    try:
        if not client.exists(stream):
            raise LookupError(f"the store holds no stream {stream!r}")
        top = client.xrevrange(stream, "+", "-", count=1)
        tmp = path.with_name(f".{path.name}.part")
        with open(tmp, "w", encoding="utf-8") as f:
            if top:
                end = _id_text(top[0][0])
                lo = "-"
                while True:
                    got = client.xrange(stream, lo, end, count=CHUNK)
                    for eid, fields in got:
                        f.write(entry_text(fields).replace("\n", " ") + "\n")
                    if got:
                        out.entries += len(got)
                        out.first_id = out.first_id or _id_text(got[0][0])
                        out.last_id = _id_text(got[-1][0])
                    if len(got) < CHUNK:
                        break
                    lo = "(" + _id_text(got[-1][0])
        os.replace(tmp, path)
    finally:
        client.close()
    return out


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
            ``maxRecordsPerBatch``, ``startingId``, ``trim``,
            ``failOnDataLoss``, ``lossFile``: module docstring).

    Raises:
        ValueError: a missing ``url``/``stream``, a bad ``maxRecordsPerBatch``
            or a flag that is not true/false.
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
        self.trim = _flag(options, "trim", False)
        self.fail_on_data_loss = _flag(options, "failOnDataLoss", True)
        self.loss_file = options.get("lossFile") or None
        try:
            self.retry_s = float(options.get("retryS", 0) or 0)
        except ValueError:
            raise ValueError(f"retryS must be a number of seconds, not {options.get('retryS')!r}") from None
        if self.retry_s < 0:
            raise ValueError("retryS must be >= 0")
        self.target: str | None = None
        self._redis = None

    def __getstate__(self) -> dict:
        """The reader as pickled for a task (``read`` runs in a Python worker): without the driver's client."""
        return {**self.__dict__, "_redis": None}

    def _client(self):
        """This reader's client of the source's store, made on first use and kept (one connection per process,
        where there was one per call: each ``XRANGE`` chunk of a batch opened its own)."""
        if self._redis is None:
            from writer.redisio import connect

            self._redis = connect(self.url)
        return self._redis

    def _with_store(self, call: Callable[[Any], Any]) -> Any:
        """``call(client)`` with this reader's client of the source's store; an outage is waited out.

        While the store is unavailable, the call is made again for up to
        ``retryS`` seconds (``writer.redisio.retry_outages``, pauses up to
        :data:`RETRY_MAX_WAIT_S`), on a new client each time; each wait is
        announced on standard error (the query's owner shows it, as the
        batches' own retries).

        Raises:
            Whatever ``call`` raised: another error, or an outage past ``retryS``.
        """
        from writer.redisio import retry_outages, store_outage

        def once() -> Any:
            client = self._client()
            try:
                return call(client)
            except Exception as e:
                if store_outage(e) is not None:  # the next attempt connects afresh
                    self._redis = None
                    client.close()
                raise

        def announce(attempt: int, pause: float, outage: str, waited: float) -> None:
            log.warning("source redis:%s: store unavailable (%s); retry %d in %.0fs (%.0fs of --store-retry %gs "
                        "spent)", self.stream, outage, attempt, pause, waited, self.retry_s)

        return retry_outages(once, self.retry_s, announce, max_wait_s=RETRY_MAX_WAIT_S)

    def _last_id(self) -> str | None:
        top = self._with_store(lambda client: client.xrevrange(self.stream, "+", "-", count=1))
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

        Raises:
            TrimmedPastCheckpoint: ``start`` is an entry the stream no
                longer holds, with ``failOnDataLoss`` and no ``lossFile``
                (:meth:`_check_kept`; with a ``lossFile``, ``start`` is returned).
        """
        begin = start["id"] if start else self.start_id

        def latest(client) -> str:
            if not self._check_kept(client, begin):
                return begin
            end = self.target
            if end is None:
                top = client.xrevrange(self.stream, "+", "-", count=1)
                end = _id_text(top[0][0]) if top else begin
            if isinstance(limit, ReadMaxRows) and limit.max_rows > 0:
                got = client.xrange(self.stream, "(" + begin, end, count=int(limit.max_rows))
                end = _id_text(got[-1][0]) if got else begin
            return end

        end = self._with_store(latest)
        if entry_seq(end) <= entry_seq(begin):
            end = begin
        return {"id": end}

    def partitions(self, start: dict, end: dict):
        """One partition per batch: the entries in ``(start, end]`` (none if equal)."""
        if start["id"] == end["id"]:
            return []
        return [RedisRange(start["id"], end["id"])]

    def read(self, partition: RedisRange) -> Iterator[tuple]:
        """Yield ``(_entry, _seq, _raw)`` for the partition's entries, in stream order (chunks of :data:`CHUNK`,
        each read again while the store is unavailable, up to ``retryS``)."""
        lo = "(" + partition.start
        while True:
            got = self._with_store(lambda client, lo=lo: client.xrange(self.stream, lo, partition.end, count=CHUNK))
            for eid, fields in got:
                eid = _id_text(eid)
                yield (eid, entry_seq(eid), entry_text(fields))
            if len(got) < CHUNK:
                break
            lo = "(" + _id_text(got[-1][0])

    def _check_kept(self, client, begin: str) -> bool:
        """Check that the stream still holds ``begin``, the last entry read (nothing to check at ``startingId``).

        Trims (``XTRIM``, ``XADD ... MAXLEN``) delete the oldest entries
        first, so while ``begin`` is there no later entry has been trimmed;
        once it is gone, entries after it may have been lost unread.

        Returns:
            False when it is gone, ``failOnDataLoss`` is on and the message
            went to ``lossFile`` (no entry is to be read); else True (with
            ``failOnDataLoss`` off a warning is logged and the batch goes on).

        Raises:
            TrimmedPastCheckpoint: it is gone, ``failOnDataLoss`` is on and
                there is no ``lossFile``.
        """
        if begin == self.start_id or entry_seq(begin) == 0 or client.xrange(self.stream, begin, begin, count=1):
            return True
        first = client.xrange(self.stream, "-", "+", count=1)
        now = f"its first entry is now {_id_text(first[0][0])}" if first else "it holds no entry now"
        text = (f"the Redis stream {self.stream!r} no longer holds entry {begin}, the last one this "
                f"job read ({now}), so entries after it may have been deleted before they were read; keep the "
                "stream longer than the job's lag, or run again with --skip-trimmed (option failOnDataLoss=false) to go "
                "on from what is left")
        if not self.fail_on_data_loss:
            log.warning("%s", text)
            return True
        if self.loss_file is None:
            raise TrimmedPastCheckpoint(text)
        with open(self.loss_file, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        return False

    def commit(self, end: dict) -> None:
        """With ``trim``: delete the entries before ``end`` (``XTRIM MINID``), which Spark has committed.

        ``end`` itself is kept: the next batch checks that it is still there
        (:meth:`_check_kept`). Without ``trim`` the stream keeps its entries.

        Args:
            end: the committed batch's end offset (``{"id": "<ms>-<n>"}``).
        """
        if not self.trim or entry_seq(end["id"]) == 0:
            return
        self._with_store(lambda client: client.xtrim(self.stream, minid=end["id"], approximate=False))


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
            ValueError: a missing ``url``/``stream`` option, a negative
                ``maxRecordsPerBatch`` or a ``trim``/``failOnDataLoss`` that is not true/false.
        """
        return RedisStreamReader(self.options)
