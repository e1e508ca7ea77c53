"""What the store holds per aggregate state: coverage, gaps, online start, size (SPEC §5.6, §6 ``scowl status``).

Coverage comes from the intervals backfill records in ``sc:cov:<definition
hash>`` (field ``<start_ms>-<end_ms>``, see ``writer.backfill``); the
online-writer start time from ``sc:online`` (``compiler.algebra.storekeys.ONLINE_KEY``,
field: definition hash, value: the earliest event time in ms the online path
wrote into the state); size from one ``SCAN`` over the state keys
``sc:{<entity key>}:<definition hash>`` (``compiler.algebra.keys``) with
``MEMORY USAGE`` per key. :func:`stream_status` describes a Redis stream
(serving's ``SCOWL_EVENT_STREAM``): entries, bytes, the append times of its
first and last entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import redis

from compiler.algebra.keys import PREFIX, definition_hash_of
from compiler.algebra.storekeys import ONLINE_KEY, cov_key
from compiler.plan import Plan
from writer.redisio import connect, node_client, pipeline


@dataclass
class StateStatus:
    """Status of one aggregate state.

    Attributes:
        definition_hash: the state's namespace (SPEC §5.4).
        function, window_s, resolution_s, limit: from the plan.
        features: ``event.feature`` names that read this state.
        covered: merged backfilled intervals ``(start_ms, end_ms)``, sorted.
        gaps: holes between covered intervals ``(start_ms, end_ms)``.
        online_since: the earliest event time (epoch ms) the online path has
            written into this state, or ``None`` if it never has.
        keys: number of entity keys stored.
        bytes: sum of ``MEMORY USAGE`` of those keys.
    """

    definition_hash: str
    function: str
    window_s: int
    resolution_s: int
    limit: int | None
    features: list[str] = field(default_factory=list)
    covered: list[tuple[int, int]] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)
    online_since: int | None = None
    keys: int = 0
    bytes: int = 0


def merge_intervals(intervals: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Merge half-open intervals; return ``(covered, gaps)``, both sorted.

    Touching intervals (``[a, b)`` and ``[b, c)``) merge.

    >>> merge_intervals([(5, 9), (0, 3), (3, 4)])
    ([(0, 4), (5, 9)], [(4, 5)])
    """
    covered: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if covered and lo <= covered[-1][1]:
            covered[-1] = (covered[-1][0], max(covered[-1][1], hi))
        else:
            covered.append((lo, hi))
    gaps = [(a[1], b[0]) for a, b in zip(covered, covered[1:])]
    return covered, gaps


def read_coverage(client: redis.Redis, hashes: list[str]) -> dict[str, list[tuple[int, int]]]:
    """Return the merged backfilled intervals ``[(start_ms, end_ms), ..]`` of each state (one pipeline).

    Args:
        client: a connected (synchronous) client.
        hashes: definition hashes.

    Raises:
        redis.RedisError: the store failed.
    """
    pipe = pipeline(client)
    for h in hashes:
        pipe.hkeys(cov_key(h))
    out: dict[str, list[tuple[int, int]]] = {}
    for h, fields in zip(hashes, pipe.execute()):
        spans = []
        for k in fields:
            lo, _, hi = k.decode().rpartition("-")
            spans.append((int(lo), int(hi)))
        out[h] = merge_intervals(spans)[0]
    return out


def record_coverage(client: redis.Redis, hashes: list[str], start_ms: int, end_ms: int, now_ms: int) -> None:
    """Add ``[start_ms, end_ms)`` to the backfilled intervals of each state, kept merged.

    Each state's ``sc:cov:<hash>`` is rewritten atomically (``WATCH``/``MULTI``)
    as its merged intervals (touching ones merge), so it stays small and two
    runs over ``[a, b)`` and ``[b, c)`` leave the same record as one over
    ``[a, c)``. The value of a field is the wall-clock ms of the latest run
    within the interval.

    Args:
        client: a connected (synchronous) client.
        hashes: definition hashes of the states the run wrote.
        start_ms, end_ms: the run's (widened) window.
        now_ms: the run's wall-clock time.

    Raises:
        redis.RedisError: the store failed.
    """
    for h in hashes:
        key = cov_key(h)
        while not _rewrite_coverage(client, key, start_ms, end_ms, now_ms):
            pass


def _rewrite_coverage(client: redis.Redis | redis.RedisCluster, key: str, start_ms: int, end_ms: int,
                      now_ms: int) -> bool:
    """One ``WATCH``/``MULTI`` attempt of :func:`record_coverage` on ``key``'s node; ``False``: retry.

    A concurrent writer fails the ``EXEC`` (``WatchError``); in a cluster, so
    does a slot that moved (``MOVED``/``ASK``: the slot map is reloaded, and
    the next attempt goes to the key's new node).
    """
    with node_client(client, key).pipeline() as pipe:
        try:
            pipe.watch(key)
            old = {}
            for k, v in pipe.hgetall(key).items():
                lo, _, hi = k.decode().rpartition("-")
                old[(int(lo), int(hi))] = int(v)
            merged, _ = merge_intervals([*old, (start_ms, end_ms)])
            fields = {}
            for lo, hi in merged:
                if lo <= start_ms and end_ms <= hi:
                    fields[f"{lo}-{hi}"] = now_ms
                else:  # old intervals only
                    fields[f"{lo}-{hi}"] = max(t for (a, b), t in old.items() if lo <= a and b <= hi)
            pipe.multi()
            pipe.delete(key)
            pipe.hset(key, mapping=fields)
            pipe.execute()
            return True
        except (redis.WatchError, redis.exceptions.MovedError, redis.exceptions.AskError):
            if isinstance(client, redis.RedisCluster):
                client.nodes_manager.initialize()
            return False


def read_online_starts(client: redis.Redis) -> dict[str, int]:
    """Return the online-writer start time (epoch ms) of every state the online path has written.

    Raises:
        redis.RedisError: the store failed.
    """
    return {k.decode(): int(v) for k, v in client.hgetall(ONLINE_KEY).items()}


def state_features(plan: Plan) -> dict[str, list[str]]:
    """Return ``{definition hash: ["event.feature", ..]}``: the features that read each state, in plan order.

    An inline aggregate (SPEC §2.4) is shown as the feature that contains it
    and its source text: ``"event.parent: Sum(x by k last 1 day)"``.
    """
    out: dict[str, list[str]] = {h: [] for h in plan.states}
    for ev in plan.events.values():
        for f in ev.features:
            if f.aggregate is not None and f.aggregate.definition_hash in out:
                name = f.name if f.inline_of is None else f"{f.inline_of}: {f.text or f.aggregate.function}"
                out[f.aggregate.definition_hash].append(f"{ev.name}.{name}")
    return out


def store_status(plan: Plan, redis_url: str) -> list[StateStatus]:
    """Return the status of every state of ``plan`` in the store at ``redis_url``.

    Args:
        plan: the compiled plan.
        redis_url: the store.

    Returns:
        One :class:`StateStatus` per state, sorted by reading feature names.

    Raises:
        redis.RedisError: the store is unreachable.
    """
    out: dict[str, StateStatus] = {}
    features = state_features(plan)
    for h, st in plan.states.items():
        out[h] = StateStatus(h, st.function, st.window_s, st.resolution_s, st.limit, features=features[h])
    client = connect(redis_url)
    try:
        coverage = read_coverage(client, list(out))
        online = read_online_starts(client)
        for h, s in out.items():
            s.covered, s.gaps = merge_intervals(coverage[h])
            s.online_since = online.get(h)
        batch: list[bytes] = []

        def measure() -> None:
            pipe = pipeline(client)
            for key in batch:
                pipe.memory_usage(key, samples=0)
            for key, size in zip(batch, pipe.execute()):
                h = definition_hash_of(key.decode("utf-8", "replace"))
                if h in out:
                    out[h].keys += 1
                    out[h].bytes += int(size or 0)
            batch.clear()

        for key in client.scan_iter(match=PREFIX + "{*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                measure()
        measure()
    finally:
        client.close()
    return sorted(out.values(), key=lambda s: (s.features, s.definition_hash))


@dataclass
class StreamStatus:
    """What a Redis stream holds (``scowl status`` with ``SCOWL_EVENT_STREAM`` set).

    Attributes:
        key: the stream.
        entries: its length (0 when it does not exist).
        bytes: ``MEMORY USAGE`` of the key (0 when it does not exist).
        first_ms, last_ms: the store time (epoch ms, from the entry ids) at
            which its first and last entries were appended; ``None`` when empty.
        added: every entry ever appended (``XINFO STREAM`` ``entries-added``).
    """

    key: str
    entries: int = 0
    bytes: int = 0
    first_ms: int | None = None
    last_ms: int | None = None
    added: int = 0


def stream_status(redis_url: str, key: str) -> StreamStatus:
    """Return what the stream ``key`` of the store at ``redis_url`` holds.

    Args:
        redis_url: the store (a cluster: any node).
        key: the stream key.

    Returns:
        A :class:`StreamStatus` (all zero for a missing key).

    Raises:
        redis.RedisError: the store is unreachable, or ``key`` is not a stream.
    """
    out = StreamStatus(key)
    client = connect(redis_url)
    try:
        if not client.exists(key):
            return out
        info = client.xinfo_stream(key)
        out.entries = int(info.get("length", 0))
        out.added = int(info.get("entries-added", out.entries) or 0)
        out.bytes = int(client.memory_usage(key, samples=0) or 0)
        for attr, entry in (("first_ms", info.get("first-entry")), ("last_ms", info.get("last-entry"))):
            if entry:
                eid = entry[0].decode() if isinstance(entry[0], bytes) else str(entry[0])
                setattr(out, attr, int(eid.partition("-")[0]))
    finally:
        client.close()
    return out


@dataclass
class ServerStatus:
    """The store's server(s) as ``scowl status`` reports them: software, uptime, memory, persistence.

    Attributes:
        software: ``"Valkey 8.1.8"`` or ``"Redis 7.2.4"`` (a cluster: its first primary's).
        primaries: 1 for a standalone store, else the cluster's primaries.
        uptime_s: the shortest uptime of them (seconds since the newest start).
        used_memory: bytes, all primaries together.
        maxmemory: bytes, all primaries together (0: no limit).
        policy: ``maxmemory-policy`` (of the first primary).
        aof_fsync: ``appendfsync`` when the append-only file is on, else ``None``.
        save: the snapshot schedule (``CONFIG GET save``; ``""`` none), ``None`` when ``CONFIG`` is refused.
        last_save_s: epoch seconds of the last snapshot (the oldest of the primaries').
    """

    software: str
    primaries: int
    uptime_s: int
    used_memory: int
    maxmemory: int
    policy: str
    aof_fsync: str | None
    save: str | None
    last_save_s: int


def server_status(redis_url: str) -> ServerStatus:
    """Return the store's :class:`ServerStatus` (``INFO server``, ``memory``, ``persistence``; ``CONFIG GET``).

    What persists is what a restart keeps (README, "Not there yet"): an
    append-only file keeps every write up to its ``appendfsync``, snapshots
    what the last one held, neither nothing written since the server started
    (the embedded store saves a snapshot only when scowl stops it).

    Args:
        redis_url: the store (a cluster: any node).

    Raises:
        redis.RedisError: the store is unreachable.
    """
    client = connect(redis_url)
    try:
        if isinstance(client, redis.RedisCluster):
            nodes = [n.redis_connection for n in client.get_primaries()]
        else:
            nodes = [client]
        infos = [n.info() for n in nodes]
        first, node = infos[0], nodes[0]
        try:
            save = str(node.config_get("save").get("save", ""))
            fsync = str(node.config_get("appendfsync").get("appendfsync", ""))
        except redis.ResponseError:  # CONFIG renamed or refused (a managed store)
            save, fsync = None, "unknown"
        name = "Valkey" if first.get("valkey_version") or first.get("server_name") == "valkey" else "Redis"
        version = first.get("valkey_version") or first.get("redis_version", "?")
        return ServerStatus(
            software=f"{name} {version}", primaries=len(nodes),
            uptime_s=min(int(i.get("uptime_in_seconds", 0)) for i in infos),
            used_memory=sum(int(i.get("used_memory", 0)) for i in infos),
            maxmemory=sum(int(i.get("maxmemory", 0)) for i in infos),
            policy=str(first.get("maxmemory_policy", "?")),
            aof_fsync=fsync if all(int(i.get("aof_enabled", 0)) for i in infos) else None,
            save=save, last_save_s=min(int(i.get("rdb_last_save_time", 0)) for i in infos))
    finally:
        client.close()


#: Where ``scowl stream`` keeps its own records inside a checkpoint (``writer.stream``): the stream id and source
#: (``stream.json``) and one record per micro-batch (``batches/<batch id, 12 digits>.json``, with the checkpoint's
#: running totals); Spark's own files are under ``spark/``.
CHECKPOINT_META = ("scowl", "stream.json")
BATCH_RECORDS = ("scowl", "batches")


@dataclass
class CheckpointStatus:
    """A ``scowl stream`` checkpoint, read from its files (:func:`checkpoint_status`).

    Attributes:
        path: the checkpoint directory.
        source: its source (``dir:<absolute path>`` or ``redis:<stream>``).
        stream_id: the id of its batches' guard fields (``_b:<id>``).
        created_ms: when its first run began (epoch ms).
        batches, events, late, invalid: its running totals, as of its
            latest batch's record (events to merge; late and invalid ones
            set aside). A record is written as its batch starts, before the
            merges, so they count that batch however it ended (a batch cut
            short is redone from its record on restart).
        last_batch: the id of its latest batch (``None`` before any).
        last_batch_ms: when that batch started (its record's file time,
            epoch ms): the stream's last sign of life.
        watermark_ms: that batch's watermark (``None`` for none yet).
        max_time_ms: the largest event time merged.
    """

    path: str
    source: str
    stream_id: str
    created_ms: int | None = None
    batches: int = 0
    events: int = 0
    late: int = 0
    invalid: int = 0
    last_batch: int | None = None
    last_batch_ms: int | None = None
    watermark_ms: int | None = None
    max_time_ms: int | None = None


def latest_batch_record(records: Path) -> tuple[int, Path, dict] | None:
    """The latest micro-batch record in a checkpoint's :data:`BATCH_RECORDS` directory ``records``.

    Returns:
        ``(batch id, its file, the record)`` (``writer.stream``: watermark,
        largest event time, counts and the checkpoint's running ``totals``),
        or ``None`` before any batch.

    Raises:
        OSError, ValueError: a record that cannot be read or parsed.
    """
    import orjson

    ids = [(int(f.stem), f) for f in records.glob("*.json") if f.stem.isdigit()]
    if not ids:
        return None
    batch_id, path = max(ids)
    return batch_id, path, orjson.loads(path.read_bytes())


def checkpoint_status(root: Path) -> list[CheckpointStatus]:
    """The ``scowl stream`` checkpoints directly under ``root`` (default ``SCOWL_HOME/checkpoints``), by path.

    Args:
        root: a directory whose subdirectories may be checkpoints (those
            without :data:`CHECKPOINT_META`, or whose files do not parse,
            are left out).

    Returns:
        One :class:`CheckpointStatus` per checkpoint, sorted by path; ``[]``
        when ``root`` does not exist.
    """
    import orjson

    out: list[CheckpointStatus] = []
    if not root.is_dir():
        return out
    for ck in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            meta = orjson.loads(ck.joinpath(*CHECKPOINT_META).read_bytes())
            st = CheckpointStatus(str(ck), str(meta["source"]), str(meta["id"]), meta.get("created_ms"))
            latest = latest_batch_record(ck.joinpath(*BATCH_RECORDS))
            if latest is not None:
                batch_id, path, rec = latest
                totals = rec.get("totals", {})
                st.batches, st.events = int(totals.get("batches", 0)), int(totals.get("events", 0))
                st.late, st.invalid = int(totals.get("late", 0)), int(totals.get("invalid", 0))
                st.last_batch, st.last_batch_ms = batch_id, int(path.stat().st_mtime * 1000)
                st.watermark_ms, st.max_time_ms = rec.get("watermark_ms"), rec.get("max_time_ms")
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.append(st)
    return out
