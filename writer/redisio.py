"""The jobs' Redis connections: standalone or Redis Cluster, detected from the URL (SPEC §5.1).

Every job (backfill, stream, replay's store reads, status) connects through
:func:`connect`: ``SCOWL_REDIS_URL`` may name any node of a cluster, and the
mode is asked of that node (``INFO cluster``), once per URL and process.

Executors write in pipelines (:func:`pipeline`). redis-py's cluster pipeline
refuses script calls (``EVALSHA``), which the stream's merges and the
backfill's ``Latest`` writes are; :class:`SlotPipeline` takes their place in
a cluster: it queues commands like a pipeline, sends each node the commands
of the slots it serves as one plain pipeline (one round trip per node), and
re-sends through the cluster client -- which follows ``MOVED``, ``ASK`` and
``TRYAGAIN`` -- any command a node answered with a redirection (a slot
moved or moving) or ``NOSCRIPT`` (as ``EVAL``). Every write of the jobs is
idempotent or guarded (SPEC §5.6, §5.7), so a re-sent command never counts
twice.

No pyspark import here: executors import this module.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable, Iterable, Iterator, TypeVar

import hiredis
import redis

from compiler.algebra.storekeys import RESP_PROTOCOL
from redis.commands.core import CoreCommands
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    TryAgainError,
)

#: The store errors a job waits out rather than failing at once (``scowl stream --store-retry``): redis-py's
#: connection and timeout errors (``BusyLoadingError``: a server still loading its data after a restart), a
#: replica that takes no writes during a failover (``READONLY``), a cluster that is down, has no primary for a
#: slot or is moving one (``CLUSTERDOWN``, ``MASTERDOWN``, ``TRYAGAIN``).
OUTAGE_ERRORS: tuple[str, ...] = ("ConnectionError", "TimeoutError", "BusyLoadingError", "ReadOnlyError",
                                  "ClusterDownError", "MasterDownError", "TryAgainError")
#: One of :data:`OUTAGE_ERRORS` as a Python traceback names it (in the text of a Spark job's failure).
_OUTAGE_LINE = re.compile(r"redis\.exceptions\.(%s): ?([^\n]*)" % "|".join(OUTAGE_ERRORS))

#: Seconds a job waits out an unavailable store before it stops (``scowl stream`` and ``scowl backfill``'s
#: ``--store-retry``).
DEFAULT_STORE_RETRY_S = 300.0

#: URL -> whether it names a cluster node (one ``INFO`` per URL and process).
_MODE: dict[str, bool] = {}

#: Errors in a node's reply that the cluster client resolves by re-sending the command.
_REDIRECTED = (MovedError, AskError, TryAgainError, ClusterDownError, NoScriptError)


def is_cluster(url: str, timeout_s: float = 60.0) -> bool:
    """Return whether ``url`` names a Redis Cluster node (``cluster_enabled:1``), asking once per process.

    Raises:
        redis.RedisError: the server is unreachable.
    """
    mode = _MODE.get(url)
    if mode is None:
        probe = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=min(timeout_s, 10.0),
                                     protocol=RESP_PROTOCOL)
        try:
            mode = _MODE[url] = int(probe.info("cluster").get("cluster_enabled", 0)) == 1
        finally:
            probe.close()
    return mode


class HiredisPacker:
    """Command packer of the jobs' standalone connections (redis-py's ``command_packer``): hiredis's C packer.

    redis-py's own hiredis packer first runs a Python generator over every
    argument (turning ``bytearray``/``memoryview`` into ``bytes``): ~17% of
    the Python samples (driver and workers, py-spy) during stream micro-batches,
    whose script calls carry hundreds of arguments each. The jobs send
    str, bytes, int and float only; anything else, and a command name
    holding a space (``"SCRIPT LOAD"``, which redis-py splits), goes to
    redis-py's packer (and its ``DataError``). Same bytes on the wire.
    """

    def __init__(self) -> None:
        from redis.connection import HiredisRespSerializer

        self._fallback = HiredisRespSerializer()

    def pack(self, *args: Any) -> list[bytes]:
        """Return the RESP bytes of one command (one chunk)."""
        head = args[0]
        if not (isinstance(head, str) and " " in head or isinstance(head, bytes) and b" " in head):
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass
        return self._fallback.pack(*args)


T = TypeVar("T")


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the exceptions it was raised from or while handling, outermost first (each once)."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def store_outage(error: BaseException) -> str | None:
    """Whether ``error`` is the store being unavailable for a while, and which error says so.

    Raised on the driver, ``error`` (or an exception it was raised from) is
    one of redis-py's :data:`OUTAGE_ERRORS`; raised in a Spark task, the
    job's error (a ``Py4JJavaError`` or PySpark's ``PythonException``) quotes
    the task's Python traceback, whose last line of such an error counts.

    Args:
        error: what a job or a store call raised.

    Returns:
        ``"<ErrorName>: <its message's first line>"``, or ``None`` for any
        other error (a script error, a bug, a full store: :func:`store_full`,
        which needs someone to act, not a wait).
    """
    for e in _chain(error):
        if isinstance(e, redis.RedisError) and type(e).__name__ in OUTAGE_ERRORS:
            lines = str(e).strip().splitlines()
            return f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    found = _OUTAGE_LINE.findall(str(error))
    if found:
        name, message = found[-1]
        return f"{name}: {message.strip()}".rstrip(": ")
    return None


def store_full(error: BaseException) -> bool:
    """Whether ``error`` is the store refusing a write past its ``maxmemory`` (``OOM``, with ``noeviction``).

    On the driver: redis-py's ``OutOfMemoryError`` in ``error``'s chain; in
    a Spark task: Valkey's message (``... used memory > 'maxmemory'``) in the
    job's error text, as ``serving.store._out_of_memory`` reads a script call's.
    """
    return any(isinstance(e, redis.exceptions.OutOfMemoryError) for e in _chain(error)) \
        or "used memory > 'maxmemory'" in str(error)


def retry_outages(call: Callable[[], T], budget_s: float, on_wait: Callable[[int, float, str, float], None] | None = None,
                  max_wait_s: float = 30.0, stop: threading.Event | None = None) -> T:
    """``call()``, made again while the store is unavailable (:func:`store_outage`), for up to ``budget_s``.

    The pauses are 1, 2, 4, ... seconds, at most ``max_wait_s``, counted
    from the first failure; ``call`` must be safe to make again (a read, an
    overwrite, a guarded merge).

    Args:
        call: the work, with its own connection(s).
        budget_s: seconds after the first failure past which its error is
            raised (0: at once).
        on_wait: called before each pause with ``(attempt, pause_s, outage,
            waited_s)``: 1 for the first retry, the seconds to the next
            attempt, :func:`store_outage`'s text, the seconds since the
            first failure.
        max_wait_s: the longest pause.
        stop: when set (before or during a pause), the last error is raised.

    Returns:
        What ``call`` returned.

    Raises:
        Whatever ``call`` raised: another error, or an outage past ``budget_s`` or a stop.

    Source: the retry-with-backoff of Kafka Connect sinks (``errors.retry.timeout``) and Flink's
    restart strategies.
    """
    first: float | None = None
    wait, attempt = 1.0, 0
    while True:
        try:
            return call()
        except Exception as e:
            outage = store_outage(e)
            now = time.monotonic()
            first = now if first is None else first
            left = first + budget_s - now
            if outage is None or left <= 0 or (stop is not None and stop.is_set()):
                raise
            pause = min(wait, left)
            attempt += 1
            if on_wait is not None:
                on_wait(attempt, pause, outage, now - first)
            if stop is not None:
                if stop.wait(pause):
                    raise
            else:
                time.sleep(pause)
            wait = min(wait * 2, max_wait_s)


def connect(url: str, socket_timeout: float = 60.0) -> redis.Redis | redis.RedisCluster:
    """Return a client of the store at ``url``: ``redis.Redis``, or ``redis.RedisCluster`` for a cluster node.

    Args:
        url: ``redis://host:port/db``; in a cluster, any node (db 0).
        socket_timeout: seconds.

    Raises:
        redis.RedisError: the server is unreachable.
    """
    if is_cluster(url, socket_timeout):
        return redis.RedisCluster.from_url(url, socket_timeout=socket_timeout, protocol=RESP_PROTOCOL)
    return redis.Redis.from_url(url, socket_timeout=socket_timeout, command_packer=HiredisPacker(),
                                protocol=RESP_PROTOCOL)


def pipeline(client: redis.Redis | redis.RedisCluster, scripts: Iterable[str] = ()) -> Any:
    """Return a non-transactional pipeline of ``client``: its own, or a :class:`SlotPipeline` in a cluster.

    Args:
        client: from :func:`connect`.
        scripts: Lua sources the commands may call by ``EVALSHA`` (loaded on
            every primary of a cluster first; a standalone pipeline loads
            them itself through ``register_script``).
    """
    if isinstance(client, redis.RedisCluster):
        return SlotPipeline(client, scripts)
    return client.pipeline(transaction=False)


def store_identity(client: redis.Redis | redis.RedisCluster) -> tuple[str, ...]:
    """The server processes behind ``client``: ``(run_id,)``, or ``("host:port=run_id", ...)`` of a cluster's primaries.

    ``INFO server``'s ``run_id`` is new at every start of a server, so a
    store that restarted (or a cluster whose primary failed over to a
    replica, a new address) has another identity, even if its address is
    the same: what it had not persisted of earlier writes may be lost.

    Raises:
        redis.RedisError: the store failed (an outage: :func:`store_outage`).
    """
    if isinstance(client, redis.RedisCluster):
        info = client.info("server", target_nodes=redis.RedisCluster.PRIMARIES)
        if "run_id" in info:  # one primary: redis-py gives its reply, not a reply per node
            info = {client.get_primaries()[0].name: info}
        return tuple(sorted(f"{node}={v.get('run_id', '')}" for node, v in info.items()))
    return (str(client.info("server").get("run_id", "")),)


class StoreRestarted(RuntimeError):
    """The store answering a job is not the server process the job began with (:func:`store_identity`)."""


#: The one-line text a :class:`StoreRestarted` carries (``scowl.failures.store_failure`` finds it in a job's
#: failure, on the driver or quoted from a Spark task's traceback).
RESTARTED_TEXT = "the store restarted under the job (a new server process answers)"


class WriteRetry:
    """How a job's writes wait out an unavailable store, and the store they must find again (picklable).

    A write (a pipeline of idempotent commands) that meets an outage is sent
    again after 1, 2, 4, ... s (:func:`retry_outages`, pauses up to
    ``max_wait_s``) for up to ``budget_s``, on a new connection; every
    connection first checks :func:`store_identity` against ``identity``, the
    store's as the job's writes began, and a store that restarted since stops
    the job with :class:`StoreRestarted` (its writes before the restart may be
    lost, and re-sending only the failed ones would leave holes).

    Args:
        budget_s: seconds of waiting per outage (0: none).
        identity: :func:`store_identity` before the job's first write, or
            ``None`` for calls that write nothing (no check).
        max_wait_s: the longest pause.
        label: names the job in the waits' log lines (``"backfill"``).
        log_waits: log each wait (logger ``scowl.writes``, warning); off
            where the driver reports the outage itself (under ``local[*]``
            the executors' lines would cut through the command's progress).
    """

    def __init__(self, budget_s: float, identity: tuple[str, ...] | None = None, max_wait_s: float = 30.0,
                 label: str = "job", log_waits: bool = True):
        self.budget_s = budget_s
        self.identity = identity
        self.max_wait_s = max_wait_s
        self.label = label
        self.log_waits = log_waits

    def check(self, client: redis.Redis | redis.RedisCluster) -> None:
        """Raise :class:`StoreRestarted` unless ``client``'s store is the one the job began with.

        Raises:
            StoreRestarted: another server process answers.
            redis.RedisError: the store failed.
        """
        if self.identity is None:
            return
        now = store_identity(client)
        if now != self.identity:
            raise StoreRestarted(f"{RESTARTED_TEXT}: what it had not persisted of this run's writes may be lost")

    def pinned(self, url: str) -> "WriteRetry":
        """This retry, checking against the store at ``url`` as it is now (:func:`store_identity`), its outages
        waited out as any call's (:meth:`call`).

        Raises:
            redis.RedisError: the store failed (past :attr:`budget_s`).
        """
        def identity() -> tuple[str, ...]:
            client = connect(url)
            try:
                return store_identity(client)
            finally:
                client.close()

        return WriteRetry(self.budget_s, self.call(identity), self.max_wait_s, self.label, self.log_waits)

    def call(self, once: Callable[[], T]) -> T:
        """``once()``, made again while the store is unavailable, for up to :attr:`budget_s`; each wait logged.

        Raises:
            Whatever ``once`` raised: another error, :class:`StoreRestarted`,
            or an outage past :attr:`budget_s`.
        """
        import logging

        log = logging.getLogger("scowl.writes")

        def announce(attempt: int, pause: float, outage: str, waited: float) -> None:
            log.warning("%s: store unavailable (%s); retry %d in %.0fs (%.0fs of --store-retry %gs spent)",
                        self.label, outage, attempt, pause, waited, self.budget_s)

        return retry_outages(once, self.budget_s, announce if self.log_waits else None, max_wait_s=self.max_wait_s)


def used_memory(client: redis.Redis | redis.RedisCluster) -> int:
    """Return the bytes the store uses (``INFO memory``; a cluster's primaries together).

    Raises:
        redis.RedisError: the store failed.
    """
    if isinstance(client, redis.RedisCluster):
        info = client.info("memory", target_nodes=redis.RedisCluster.PRIMARIES)
        return sum(int(v["used_memory"]) for v in info.values())
    return int(client.info("memory")["used_memory"])


def node_client(client: redis.Redis | redis.RedisCluster, key: str) -> redis.Redis:
    """Return a plain client of the node serving ``key`` (``client`` itself when standalone).

    For what a cluster client cannot do across nodes but one node can for
    one key: ``WATCH``/``MULTI`` transactions (a slot that moves meanwhile
    fails the ``EXEC``; retry).
    """
    if isinstance(client, redis.RedisCluster):
        return client.get_node_from_key(key).redis_connection
    return client


class SlotPipeline(CoreCommands):
    """A pipeline over a Redis Cluster that allows script calls (module docstring).

    Commands are queued by the usual command methods (``hset``, ``zadd``,
    ``set``, ``execute_command``, a registered script called with
    ``client=`` this pipeline, ...); :meth:`execute` returns their replies in
    order, as a pipeline does.

    Args:
        client: the cluster client.
        scripts: Lua sources to load on every primary (``SCRIPT LOAD``), so
            ``EVALSHA`` finds them; a node that lost them gets ``EVAL``.

    Raises:
        redis.RedisError: from loading the scripts.
    """

    def __init__(self, client: redis.RedisCluster, scripts: Iterable[str] = ()):
        self.client = client
        # sha -> source of the scripts loaded through this client (once per client, not per pipeline)
        self.sources: dict[str, str] = client.__dict__.setdefault("_scowl_scripts", {})
        for src in scripts:
            if src not in self.sources.values():
                self.sources[client.script_load(src)] = src
        self.commands: list[tuple[tuple, dict]] = []

    def execute_command(self, *args: Any, **options: Any) -> "SlotPipeline":
        """Queue one command (``args[0]`` its name); return this pipeline."""
        self.commands.append((args, options))
        return self

    def __len__(self) -> int:
        return len(self.commands)

    @staticmethod
    def _key(args: tuple) -> Any:
        name = str(args[0]).upper()
        return args[3] if name in ("EVALSHA", "EVAL") else args[1]

    def execute(self) -> list:
        """Send the queued commands (one pipeline per node); return their replies in queue order.

        Raises:
            redis.RedisError: a command failed for another reason than a
                redirection, or a node is unreachable.
        """
        commands, self.commands = self.commands, []
        by_node: dict[str, tuple[Any, list[int]]] = {}
        for i, (args, _) in enumerate(commands):
            node = self.client.get_node_from_key(self._key(args))
            by_node.setdefault(node.name, (node, []))[1].append(i)
        replies: list[Any] = [None] * len(commands)
        for node, idxs in by_node.values():
            pipe = node.redis_connection.pipeline(transaction=False)
            for i in idxs:
                args, options = commands[i]
                pipe.execute_command(*args, **options)
            for i, reply in zip(idxs, pipe.execute(raise_on_error=False)):
                replies[i] = reply
        for i, reply in enumerate(replies):
            if isinstance(reply, Exception):
                if not isinstance(reply, _REDIRECTED):
                    raise reply
                args, options = commands[i]
                if isinstance(reply, NoScriptError):
                    args = ("EVAL", self.sources[args[1]], *args[2:])
                replies[i] = self.client.execute_command(*args, **options)
        return replies
