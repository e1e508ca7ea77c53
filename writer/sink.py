"""Pipelined writes of store-image rows to Redis from the executors (SPEC §5.6).

Rows come from ``writer.tiles.state_rows`` (columns ``rk``, ``field``,
``value``, ``mode``, ``ttl_ms``; :func:`write_partition`) or, one row per
key with its fields gathered, from ``writer.tilepass.state_rows_all``
(:func:`write_keys`: one command per key). Each executor partition opens one
connection and sends pipelines of :data:`BATCH` rows (no MULTI: each command
is atomic on its own, and every mode is idempotent, so a retried partition
converges to the same state):

* ``set``    -> ``HSET rk field value`` (a tile complete within the run window)
* ``seen``   -> ``ZADD rk GT ms member`` (CountUnique's sorted set: keep the max last-seen ms)
* ``latest`` -> ``event.lua`` op ``LA`` (newer write wins)
* ``log``    -> write log (sorted set, ``ops.log_member`` layout): drop the
  members scored in the run window ``[start, end)``, add the run's members,
  keep the ``n`` highest (field ``<start>:<end>:<n>``, value a JSON list of
  ``{"t", "m"}``)

and ``PEXPIRE rk ttl_ms`` once per key per pipeline.

With a ``writer.redisio.WriteRetry`` (``scowl backfill --store-retry``), a
pipeline that meets an unavailable store is built again and re-sent on a new
connection, and every connection first checks that the store is the server
process it was as the run's writes began (:class:`_Pipelines`).

Serving's generated scripts keep ``_m`` in a tiled hash, the latest
resolution tile they wrote (``compiler.algebra.lua``: a read at or after it
merges a shorter cover). A backfill leaves it alone: unless forced, it
writes only tiles that end before the state's online start
(``writer.backfill.online_limit``), so before every online write, and a
re-run leaves the store as it was. A forced run (``--force``) may write
later tiles, so its ``set`` rows drop ``_m`` and the next online write
recomputes it from the fields.
"""

from __future__ import annotations

from typing import Iterable

from compiler.algebra.windows import ALLOWED_LATENESS_S

BATCH = 2000


class _Pipelines:
    """One executor partition's pipelines to the store, each sent again while the store is unavailable.

    A connection is made on first use, its store checked against the job's
    (``WriteRetry.check``: a store that restarted stops the job), and kept;
    a pipeline that meets an outage is built again on a new connection and
    re-sent (``WriteRetry.call``): every mode is idempotent (module docstring),
    so commands of a failed pipeline that did apply change nothing the second
    time. Without a ``WriteRetry`` the first error is raised.

    Args:
        url: Redis URL.
        retry: the job's ``writer.redisio.WriteRetry``, or ``None``.
    """

    def __init__(self, url: str, retry=None):
        from compiler.algebra.script import event_script

        self.url = url
        self.retry = retry
        self.source = event_script()
        self.client = None
        self.script = None

    def send(self, build) -> None:
        """Build a pipeline with ``build(pipe, script)`` (``script``: the registered ``event.lua``) and send it.

        Raises:
            redis.RedisError: the store failed (past the retry budget).
            writer.redisio.StoreRestarted: another server process answers.
        """
        from writer.redisio import connect, pipeline, store_outage

        def once() -> None:
            if self.client is None:
                client = connect(self.url)
                try:
                    if self.retry is not None:
                        self.retry.check(client)
                except Exception:
                    client.close()
                    raise
                self.client, self.script = client, client.register_script(self.source)
            pipe = pipeline(self.client, (self.source,))
            build(pipe, self.script)
            try:
                pipe.execute()
            except Exception as e:
                if store_outage(e) is not None:  # the next attempt connects afresh (and checks the store)
                    self.close()
                raise

        if self.retry is None:
            once()
        else:
            self.retry.call(once)

    def close(self) -> None:
        """Close the connection (a new one is made by the next :meth:`send`)."""
        if self.client is not None:
            self.client.close()
            self.client = None


def write_partition(rows: Iterable, url: str, forced: bool = False, retry=None) -> int:
    """Write one partition of rows; return how many were written.

    Args:
        rows: ``pyspark.sql.Row`` objects with the columns above.
        url: Redis URL.
        forced: the run may overwrite online writes: tiled hashes drop ``_m`` (module docstring).
        retry: a ``writer.redisio.WriteRetry``: pipelines wait out an unavailable store, and a store that
            restarted stops the job (:class:`_Pipelines`); ``None``: the first error is raised.

    Raises:
        redis.RedisError: the store failed (writes are idempotent: a re-run converges).
        writer.redisio.StoreRestarted: with ``retry``, another server process answers.
    """
    import orjson

    out = _Pipelines(url, retry)
    n = 0
    chunk: list = []

    def build(pipe, script) -> None:
        expiring: dict[str, int] = {}
        tiled: set[str] = set()
        for row in chunk:
            mode = row["mode"]
            if mode == "set":
                pipe.hset(row["rk"], row["field"], row["value"])
                if forced:
                    tiled.add(row["rk"])
            elif mode == "seen":
                pipe.execute_command("ZADD", row["rk"], "GT", row["value"], row["field"])
            elif mode == "latest":
                t, _, j = row["value"].partition("\t")
                script(keys=[row["rk"]], args=["LA", 1, t, j], client=pipe)
            elif mode == "log":
                start, end, keep = row["field"].split(":")
                pipe.zremrangebyscore(row["rk"], start, f"({end}")
                members = orjson.loads(row["value"])
                if members:
                    pipe.zadd(row["rk"], {m["m"]: m["t"] for m in members})
                # the n latest before the latest write minus the allowed lateness, and every later one (as serving)
                script(keys=[row["rk"]], args=["ZT", 1, int(keep)], client=pipe)
            else:  # pragma: no cover - rows come from state_rows
                raise ValueError(f"unknown row mode {mode}")
            expiring[row["rk"]] = int(row["ttl_ms"])
        for rk in tiled:
            pipe.hdel(rk, "_m")
        for rk, ttl in expiring.items():
            pipe.pexpire(rk, ttl)

    try:
        for row in rows:
            chunk.append(row)
            n += 1
            if len(chunk) >= BATCH:
                out.send(build)
                chunk = []
        if chunk:
            out.send(build)
    finally:
        out.close()
    return n


#: Fields per pipeline in :func:`write_keys`.
KEY_BATCH_FIELDS = 5000


def write_keys(rows: Iterable, url: str, forced: bool = False, retry=None) -> dict[int, int]:
    """Write one partition of per-key rows (``writer.tilepass.state_rows_all``); return fields written per state.

    Each row is one key's store image: ``set`` -> one ``HSET rk f1 v1 f2 v2
    ..`` (and ``HDEL rk _m`` when ``forced``, as :func:`write_partition`),
    ``seen`` -> one ``ZADD GT`` of every member (its max last-seen ms),
    ``latest`` -> its ``LA`` op; then ``PEXPIRE rk ttl_ms``. Pipelined,
    about :data:`KEY_BATCH_FIELDS` fields at a time. One command per key
    instead of one per field: redis-py packs ~3x more fields per second.

    Args:
        rows: rows with ``g`` (state index), ``rk``, ``mode``, ``ttl_ms``,
            ``kv`` (``[field, value, ..]``).
        url: Redis URL.
        forced: the run may overwrite online writes (module docstring).
        retry: as :func:`write_partition`.

    Returns:
        ``{g: fields written}``.

    Raises:
        redis.RedisError: the store failed (every write is idempotent: a re-run converges).
        writer.redisio.StoreRestarted: with ``retry``, another server process answers.
    """
    out = _Pipelines(url, retry)
    counts: dict[int, int] = {}
    chunk: list = []

    def build(pipe, script) -> None:
        for row in chunk:
            rk, mode, kv = row["rk"], row["mode"], row["kv"]
            if mode == "set":
                pipe.execute_command("HSET", rk, *kv)
                if forced:
                    pipe.hdel(rk, "_m")
            elif mode == "seen":
                # CountUnique's sorted set: each member's score := max(score, last-seen ms)
                pipe.execute_command("ZADD", rk, "GT", *[x for i in range(0, len(kv), 2) for x in (kv[i + 1], kv[i])])
            elif mode == "latest":
                t, _, j = kv[1].partition("\t")
                script(keys=[rk], args=["LA", 1, t, j], client=pipe)
            else:  # pragma: no cover - rows come from state_rows_all
                raise ValueError(f"unknown row mode {mode}")
            pipe.pexpire(rk, int(row["ttl_ms"]))

    pending = 0
    try:
        for row in rows:
            chunk.append(row)
            n = len(row["kv"]) // 2
            counts[row["g"]] = counts.get(row["g"], 0) + n
            pending += n
            if pending >= KEY_BATCH_FIELDS:
                out.send(build)
                chunk, pending = [], 0
        if chunk:
            out.send(build)
    finally:
        out.close()
    return counts


#: Suffix of the companion hash holding the stream batch markers of a state
#: kept as a sorted set (a write log, a CountUnique; a sorted set cannot hold
#: them): ``sc:{<entity key>}:<hash>:b``.
LOG_MARK_SUFFIX = ":b"

#: The allowed lateness (ms) a stream merge keeps state for: serving's default
#: (``windows.ALLOWED_LATENESS_S``, SPEC §3.3). Tiles and log members no read up
#: to this late counts are not sent and are pruned.
LATENESS_MS = ALLOWED_LATENESS_S * 1000

#: Keys per pipeline in :func:`merge_keys`.
MERGE_BATCH = 200


def merge_params(states) -> dict[str, tuple[int, int, int, int, int | None, str]]:
    """Per state, the constants :func:`merge_keys` needs (as ``serving.evaluate._Write``).

    Args:
        states: ``compiler.plan.StateSpec`` objects.

    Returns:
        ``{definition hash: (ttl_ms, window_ms, resolution_ms, prune_every_ms,
        limit, storage)}``: expiry ``W + r`` (``DECAY_HORIZON * W`` for
        ``Decayed*``; SPEC §5.3), the prune schedule of the ``X`` op, the write
        log's ``limit`` (``None`` for hashes) and the storage kind
        (``compiler.algebra.registry.storage_of``).
    """
    from compiler.algebra.ops import prune_every_ms
    from compiler.algebra.registry import expiry_ms, storage_of

    out = {}
    for st in states:
        w, r = st.window_s * 1000, st.resolution_s * 1000
        every = prune_every_ms(st.window_s, st.resolution_s, LATENESS_MS)  # as serving's
        out[st.definition_hash] = (expiry_ms(st), w, r, every, st.limit, storage_of(st))
    return out


def merge_call(rk: str, ops: list, latest: int, params: dict, marker: str,
               batch_id: int) -> tuple[list[str], list]:
    """The ``event.lua`` call that merges one key's ops of a micro-batch (:func:`merge_keys`).

    Args:
        rk: the key (``sc:{<entity key>}:<definition hash>``).
        ops: its ``compiler.algebra.arrowtiles.merge_ops`` ops ``(mode, field, value)``.
        latest: the key's latest write time in the batch (ms): pruning runs as of it.
        params: :func:`merge_params` of the plan's states.
        marker: the guard's hash field, ``_b:<stream id>``.
        batch_id: the micro-batch id.

    Returns:
        ``(keys, args)``: ``KEYS`` (the key, and for a sorted-set state its
        companion hash ``rk`` + :data:`LOG_MARK_SUFFIX` holding the guard) and
        ``ARGV``: ``B``; the hash field merges as one ``MF`` op; ``SEEN``,
        ``LA``, ``DM`` ops; a write log's members as one ``ZM`` op (cutoff
        ``t - W - r - L`` of its latest member, ``L`` =
        ``windows.ALLOWED_LATENESS_S``); then ``X`` (``SX`` for a
        ``CountUnique``; none for a write log, whose ``ZM`` trims and expires it),
        pruning as of ``latest`` what ends at or before ``latest - W - r - L``,
        as serving's pruning passes do: no read up to ``L`` late counts it.

    Raises:
        ValueError: an unknown merge mode.
    """
    ttl, w, r, every, limit, storage = params[rk.rsplit(":", 1)[1]]
    keys = [rk, rk + LOG_MARK_SUFFIX] if storage in ("log", "seen") else [rk]
    args: list = ["B", len(keys), marker, batch_id, ttl]
    fields: list = []  # the hash field merges: one MF op (one HMGET and one HSET in event.lua)
    for mode, field, value in ops:
        if mode in ("I", "F", "HMS"):
            fields += [mode, field, value, ""]
        elif mode.startswith(("MIN:", "MAX:")):
            fields += [mode[:3], field, value, mode[4:]]
        elif mode == "FI":
            ms, _, j = value.partition("\t")
            fields += ["FI", field, ms, j]
        elif mode == "SEEN":
            args += [mode, 1, field, value]
        elif mode == "LA":
            ms, _, j = value.partition("\t")
            args += ["LA", 1, ms, j]
        elif mode == "DM":
            ms, v, c = value.split("\t")
            args += ["DM", 1, ms, v, c, w]
        elif mode == "ZM":
            if value:
                args += ["ZM", 1, len(value), limit, value[-1]["t"] - w - r - LATENESS_MS, ttl]
                for m in value:
                    args += [m["t"], m["r"], m["j"]]
        else:
            raise ValueError(f"unknown merge mode {mode}")
    if fields:
        args += ["MF", 1, len(fields) // 4, *fields]
    # pruning as serving's passes prune: what no read up to the allowed lateness late counts (SPEC §3.3;
    # the cutoff t - (W + L) - r; it was t - W - r, which deleted tiles a late read still counts)
    if storage == "seen":
        args += ["SX", 1, ttl, latest, w + LATENESS_MS, r]
    elif storage != "log":
        args += ["X", 1, ttl, latest, w + LATENESS_MS, r, every]
    return keys, args


def merge_keys(batches: Iterable, url: str, batch_id: int, marker: str, params: dict, specs: list,
               fault: tuple[int, int, str] | None = None):
    """Merge one partition of a micro-batch's writes into Redis, exactly once per key (SPEC §5.7).

    A ``mapInArrow`` function over ``writer.tilepass.batch_write_rows`` (every
    state's counted writes, all rows of a key in this partition): the
    partition's partial aggregates and merge ops per key come from
    ``compiler.algebra.arrowtiles.merge_ops`` (numpy). Each key gets ONE
    ``event.lua`` call: ``B`` (the guard: skip everything if the key's
    ``marker`` field already holds a batch id ``>= batch_id``, else record
    ``batch_id``), its hash field merges as one ``MF`` op (one ``HMGET`` and
    one ``HSET``; none for a tile that ends ``W + r + L`` or more before the
    key's latest write, ``L`` = ``windows.ALLOWED_LATENESS_S``: no read up
    to ``L`` late counts it, and ``X`` deletes it), ``SEEN``/``DM``/``ZM`` ops, then ``X`` (prune what
    ends ``W + r + L`` or more before, and ``PEXPIRE`` W + r by the store's clock, as serving does; ``SX`` for a
    CountUnique's sorted set) with the key's latest write time of the batch.
    Write logs and CountUnique states keep the marker in the companion hash
    ``<rk>`` + :data:`LOG_MARK_SUFFIX` (same hash tag, so the call is atomic
    and Cluster-safe). Calls are pipelined, :data:`MERGE_BATCH` keys at a
    time, two pipelines in turn: one is sent by a thread while the next is
    built.

    Args:
        batches: ``pyarrow.RecordBatch`` objects with the columns of
            ``compiler.algebra.arrowtiles.WRITE_COLUMNS``.
        url: Redis URL of the store.
        batch_id: the micro-batch id (Spark's, stable when a batch is re-run).
        marker: hash field of the guard, ``_b:<stream id>``.
        params: :func:`merge_params` of the plan's states.
        specs: ``writer.tilepass.tile_specs`` of the states (``g`` indexes it).
        fault: test-only fault injection ``(batch_id, keys, path)``: in that
            batch, after ``keys`` keys of this partition are applied, create
            ``path`` and hang (so a test can SIGKILL the job mid-batch).

    Yields:
        One record batch ``applied``, ``skipped`` (int64 key counts; skipped:
        already applied by an earlier run of the same batch).

    Raises:
        redis.RedisError: the store failed (the batch fails; re-running it is safe).
        ValueError: an unknown merge mode.
    """
    import time
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa
    from writer.redisio import connect, pipeline

    from compiler.algebra.arrowtiles import merge_ops
    from compiler.algebra.script import event_script

    client = connect(url)
    source = event_script()
    script = client.register_script(source)
    hang = fault is not None and fault[0] == batch_id
    per_pipe = 1 if hang else MERGE_BATCH
    # two pipelines, reused (a pipeline empties itself on execute): one is sent by a thread while
    # the next keys' calls are built into the other, so building and the store's work overlap
    pipes = [pipeline(client, (source,)), pipeline(client, (source,))]
    pipe = pipes[0]
    sender = ThreadPoolExecutor(1)
    inflight = None
    applied = skipped = pending = 0

    def count(results: list) -> None:
        nonlocal applied, skipped
        for res in results:
            if int(res[0]) == 1:
                applied += 1
            else:
                skipped += 1

    def flush(last: bool = False) -> None:
        nonlocal pending, pipe, inflight
        previous, pending = inflight, 0
        if hang:  # one key at a time, synchronously
            count(pipe.execute())
            if applied >= fault[1]:
                with open(fault[2], "w") as f:
                    f.write(str(applied))
                while True:  # pragma: no cover - killed by the test
                    time.sleep(1)
            return
        inflight = sender.submit(pipe.execute)
        pipe = pipes[1] if pipe is pipes[0] else pipes[0]
        if previous is not None:
            count(previous.result())  # the other pipeline is free again (or raises the store's error)
        if last:
            count(inflight.result())
            inflight = None

    def send(rk: str, ops: list, latest: int) -> None:
        nonlocal pending
        keys, args = merge_call(rk, ops, latest, params, marker, batch_id)
        script(keys=keys, args=args, client=pipe)
        pending += 1
        if pending >= per_pipe:
            flush()

    try:
        got = list(batches)  # none for an empty partition
        # no op for a tile no read within the allowed lateness of the key's latest write counts: the X op
        # deletes it (arrowtiles.merge_ops, merge_call)
        for rk, ops, latest in merge_ops(pa.Table.from_batches(got), specs,
                                         LATENESS_MS) if got else ():
            send(rk, ops, latest)
        flush(last=True)
    finally:
        sender.shutdown(wait=True)
        client.close()
    yield pa.RecordBatch.from_pydict({"applied": [applied], "skipped": [skipped]},
                                     schema=pa.schema([("applied", pa.int64()), ("skipped", pa.int64())]))


def claim_ids(batches: Iterable, url: str, marker: str, ttl_ms: int):
    """Claim the ``_id`` of each event of a stream micro-batch in the store, as the API does (SPEC §4).

    A ``mapInArrow`` function over rows ``_id`` (string), ``_seq`` (long).
    Each id's idempotency key (``compiler.algebra.storekeys.id_key``, the
    API's) is set to ``marker`` (the stream's and batch's) unless it exists
    (``SET NX GET``, expiring after ``ttl_ms``): an id the API or an earlier
    micro-batch recorded is a repeat, and its event writes nothing; an id
    holding this very ``marker`` was claimed by an earlier attempt of the
    same batch (a re-run), and is kept. Pipelined, :data:`MERGE_BATCH` at a
    time.

    Args:
        batches: ``pyarrow.RecordBatch`` objects with ``_id`` and ``_seq``.
        url: Redis URL of the store.
        marker: ``_b:<stream id>:<batch id>``.
        ttl_ms: how long a claimed id is remembered (the API's ``SCOWL_ID_TTL_S``).

    Yields:
        Record batches ``_seq`` (int64), ``_taken`` (bool: the id was
        recorded before, elsewhere).

    Raises:
        redis.RedisError: the store failed (the batch fails; re-running it is safe).
    """
    import pyarrow as pa
    from writer.redisio import connect, pipeline

    from compiler.algebra.storekeys import id_key

    client = connect(url)
    want = marker.encode()
    pipe = pipeline(client)  # reused: a pipeline empties itself on execute
    try:
        for batch in batches:
            ids, seqs = batch.column("_id").to_pylist(), batch.column("_seq").to_pylist()
            taken: list[bool] = []
            for i in range(0, len(ids), MERGE_BATCH):
                for event_id in ids[i:i + MERGE_BATCH]:
                    pipe.set(id_key(event_id), marker, nx=True, px=ttl_ms, get=True)
                taken += [old is not None and old != want for old in pipe.execute()]
            yield pa.RecordBatch.from_pydict({"_seq": seqs, "_taken": taken},
                                             schema=pa.schema([("_seq", pa.int64()), ("_taken", pa.bool_())]))
    finally:
        client.close()
