"""The Redis side of serving: one script call per round (SPEC §5.2).

``Store.run(script, keys, argv)`` runs one generated round script
(``compiler.algebra.lua``) as a Valkey function, so an event costs one
network round trip in the common case: ``FCALL`` of the script's library
(``compiler.algebra.script.as_function``: its prelude runs once, at load,
not per call as under ``EVALSHA``), and after a ``Function not found`` error
(the store restarted or flushed its functions: the call did not run)
``FUNCTION LOAD`` and ``FCALL`` again. A store that refuses functions (before
Redis 7, an ACL without them) runs the script with ``EVALSHA`` instead, and
after a ``NOSCRIPT`` error with ``EVAL``, which loads it. Commands are packed by hiredis
(:class:`_HiredisPacking`) and sent on connections the store keeps itself
(:meth:`Store._execute`), not through ``Redis.execute_command``: per call it
took a pool lock, a socket readiness check, metrics and events, ~40% of the
client's CPU per call. Tried twice and measured worse: pipelining the
calls of one event-loop iteration together (client-side auto-pipelining,
as ioredis does), first through redis-py's pipeline (batches of ~3.5
calls under ``wrk`` load, 10-15% fewer events/s), then packed by hiredis
and sent by the first caller, who read every reply (2.35 calls per
Valkey read, 10-15% fewer events/s, Valkey's CPU per call unchanged:
bench/HISTORY.md, sixth session): the calls wait for each other, and
under load Valkey already serves several connections per wake-up. A third
form, where no call waits for another's reply (one connection, a sender
task writing each loop iteration's calls as they come and a reader task
handing the replies out in order; branch ``experiment/pipelined-store``),
measured worse too: 0.70-0.75x the calls per second of one connection per
call in flight, with 8 concurrent callers over captured demo calls, and
Valkey's CPU per call unchanged (212-236 against 208-213 µs): Valkey
answers the calls of one write after running all of them, so the client
and the store take turns instead of overlapping (bench/HISTORY.md,
twenty-fifth session).

``Store.record_online`` keeps the *online-writer start times* in the hash
:data:`ONLINE_KEY` (named in ``compiler.algebra.storekeys``): per aggregate
state (field: definition hash), the earliest event time (epoch ms) the
online path has written into it. ``scowl backfill``
refuses a run window that would overwrite that time (SPEC §5.6) and ``scowl
status`` shows it (§6).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Mapping, Sequence

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import (AskError, ClusterDownError, ExecAbortError, NoPermissionError, NoScriptError,
                              RedisError, ResponseError)
from redis.exceptions import OutOfMemoryError, TryAgainError
from redis.exceptions import TimeoutError as RedisTimeoutError

from compiler.algebra.script import as_function, online_min_script
from compiler.algebra.storekeys import ID_PREFIX, ONLINE_KEY, RESP_PROTOCOL

_log = logging.getLogger("scowl.store")


class _HiredisPacking:
    """Connection mixin: commands packed by hiredis's C packer.

    redis-py's synchronous client packs with hiredis when it is installed; its
    asyncio client joins Python bytes once per argument, which cost ~60 µs
    of a worker's CPU per 50-argument script call (``bench/serve.py``
    profile). Same bytes on the wire: hiredis encodes str (UTF-8), bytes,
    int and float (``repr``) as redis-py's ``Encoder`` does; anything else,
    and a command name holding a space (``"SCRIPT LOAD"``, which redis-py
    splits), goes to redis-py's own packer (and its ``DataError``).
    """

    def pack_command(self, *args: Any) -> list[bytes]:
        """Return the RESP bytes of one command (one chunk)."""
        if isinstance(args[0], str) and " " in args[0]:
            return super().pack_command(*args)  # type: ignore[misc]
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            return super().pack_command(*args)  # type: ignore[misc]


#: Connections per cluster node of a serving process (connections open on demand and are kept).
CLUSTER_MAX_CONNECTIONS = 4096

#: Error replies of a cluster node to a call it did not run, which goes on through redis-py's cluster client
#: (``MovedError`` is an ``AskError``; ``CLUSTERDOWN`` and ``MASTERDOWN`` are ``ClusterDownError``).
_REDIRECTED = (AskError, TryAgainError, ClusterDownError)

#: Seconds after a connection failure on the cluster hot path during which calls go through redis-py's cluster
#: client (:meth:`Store._execute_on`), whose error handling refreshes the slot map (a failover moves slots).
DIRECT_PAUSE_S = 1.0


class StoreUnavailable(RuntimeError):
    """The store could not be reached or failed a command (the API answers 503)."""


class PipelineBroken(Exception):
    """A :meth:`Store.run_many` pipeline failed part way.

    Attributes:
        done: how many calls, the first ones, were run and answered.
        cause: the :class:`StoreUnavailable` the failure maps to (its message is the API's).
    """

    def __init__(self, done: int, cause: StoreUnavailable):
        super().__init__(f"{cause} (after {done} calls)")
        self.done, self.cause = done, cause


@contextmanager
def _store_errors():
    """Turn what a store command raises into :class:`StoreUnavailable` (the API's 503).

    Connection and timeout errors: unreachable; any other ``RedisError``: a
    store error; a failure inside the client (:func:`_client_failure`):
    logged with its traceback.
    """
    try:
        yield
    except TimeoutError as e:  # Store's deadline (asyncio.timeout); before OSError, its base class
        raise StoreUnavailable("store unreachable: no answer within the store timeout") from e
    except (RedisConnectionError, RedisTimeoutError, OSError) as e:
        raise StoreUnavailable(f"store unreachable: {e}") from e
    except RedisError as e:
        if _out_of_memory(e):
            raise StoreUnavailable("store out of memory: it refuses writes past its maxmemory, so nothing of this "
                                   "event was written (free memory in the store or raise its maxmemory)") from e
        raise StoreUnavailable(f"store error: {e}") from e
    except (RedisClusterException, AttributeError, TypeError) as e:
        raise _client_failure(e) from e


def _out_of_memory(e: Exception) -> bool:
    """Whether a store error is Valkey's ``OOM`` refusal (``maxmemory`` reached, no eviction).

    A script call is refused before it runs (a function: ``deny-oom``), or
    at its first write command (an ``EVAL`` script), so nothing was
    written; the error then names the script's SHA and Lua line, which the
    API's answer leaves out (``_store_errors``).
    """
    return isinstance(e, OutOfMemoryError) or "used memory > 'maxmemory'" in str(e)


def _function_missing(e: ResponseError) -> bool:
    """Whether an ``FCALL`` error says the function is not loaded, or functions are not available.

    ``Function not found`` (a restart without persistence, ``FUNCTION
    FLUSH``, a node that never had it); ``unknown command`` (a server before
    Redis 7); ``NOPERM`` (an ACL without ``FCALL``). In each the call did
    not run. Any other error (the script's own) is the call's answer.
    """
    text = str(e)
    return isinstance(e, NoPermissionError) or text.startswith("Function not found") or "unknown command" in text


def _did_not_run(reply: Any) -> bool:
    """Whether a cluster node's reply to a script call says the call did not run: a redirection
    (:data:`_REDIRECTED`) or a missing function (:func:`_function_missing`); it may go again."""
    return isinstance(reply, _REDIRECTED) or isinstance(reply, ResponseError) and _function_missing(reply)


def _exec_outcome(queued: Sequence[Any], done: Any) -> list | None:
    """The replies of a ``MULTI``/``EXEC`` transaction's commands, or ``None`` when the node ran none of them.

    Args:
        queued: the replies to the queued commands (``QUEUED``, or an error reply's exception).
        done: the reply to ``EXEC``: the commands' replies, or why none ran.

    Returns:
        The commands' replies (an error reply's exception in its command's place), or ``None`` when the
        node refused the transaction by a redirection (``MOVED``, ``ASK``, ``TRYAGAIN``, ``CLUSTERDOWN``,
        at ``EXEC`` or at a queued command: ``EXECABORT``), so that its commands may go again.

    Raises:
        redis.exceptions.ResponseError: the transaction failed for an error of its own (a queued
            command's, or ``EXEC``'s).

    Source: Redis Cluster specification (a node checks every key of a transaction at ``EXEC``).
    """
    if isinstance(done, list):
        return done
    if isinstance(done, _REDIRECTED):
        return None
    if isinstance(done, ExecAbortError):
        own = [q for q in queued if isinstance(q, ResponseError) and not isinstance(q, _REDIRECTED)]
        if own:
            raise own[0]
        return None
    if isinstance(done, ResponseError):
        raise done
    raise ResponseError(f"EXEC answered {done!r}")


def _already_loaded(e: ResponseError) -> bool:
    """Whether a ``FUNCTION LOAD`` error says the library is loaded already (same name: same source)."""
    return "already exists" in str(e)


def _client_failure(e: Exception) -> StoreUnavailable:
    """A failure inside the Redis client rather than from the server, logged with its traceback.

    redis-py's asyncio cluster client can fail a command under concurrency
    with an ``AttributeError`` (a connection whose stream another task just
    reset: ``'NoneType' object has no attribute 'writelines'``, seen under
    ``bench/serve.py --cluster`` with redis-py 8.1), or raise
    ``RedisClusterException``, which is no ``RedisError``. The command did
    not complete, as when the store is unreachable: a 503 the client may
    retry (with its ``_id``, exactly once), not a 500.
    """
    _log.warning("store client failure (answered 503)", exc_info=e)
    return StoreUnavailable(f"store client error: {type(e).__name__}: {e}")


class Store:
    """An asyncio Redis client with the event script registered, standalone or Redis Cluster (SPEC §5.1).

    The mode is detected, not configured: the first use asks the server
    named by ``url`` (``INFO cluster``); with ``cluster_enabled:1`` every
    command goes through redis-py's ``RedisCluster``, which learns the slot
    map from that node and follows ``MOVED``, ``ASK`` and ``TRYAGAIN``. A
    store that is down at start-up is asked again at the next use.

    Args:
        url: ``redis://host:port/db`` (``SCOWL_REDIS_URL`` or the embedded
            server); in a cluster, any node (db 0).
        timeout_s: how long one store call may take, in seconds (connect
            included): past it the call fails with :class:`StoreUnavailable`.
        on_mode: called once with ``True``/``False`` when the mode is known
            (the app tells its ``Evaluator``).
        stream_maxlen: the event stream's cap (``SCOWL_EVENT_STREAM_MAXLEN``)
            for the appends a cluster sends apart from the scripts
            (:meth:`_append_events`; ``XADD ... MAXLEN ~``); ``None``: none.

    Attributes:
        cluster: ``None`` until detected, then whether the store is a cluster.
    """

    def __init__(self, url: str, timeout_s: float = 2.0, on_mode: Callable[[bool], None] | None = None,
                 stream_maxlen: int | None = None):
        self.url = url
        self.timeout_s = timeout_s
        self.on_mode = on_mode
        self.stream_maxlen = stream_maxlen
        #: the cap's arguments of every XADD of :meth:`_append_events` (none without a cap)
        self._xadd_cap: tuple = () if stream_maxlen is None else ("MAXLEN", "~", stream_maxlen)
        self.cluster: bool | None = None
        self.client: Any = None
        #: script source -> its SHA1 (one per event type and round)
        self.shas: dict[str, str] = {}
        self.online_script: Any = None
        #: idle connections of the standalone hot path (:meth:`_execute`), most recently used last
        self._idle: list = []
        #: idle connections of the cluster hot path per node name (``host:port``; :meth:`_execute_on`)
        self._node_idle: dict[str, list] = {}
        #: event-loop time before which cluster calls go through redis-py's cluster client (set after a
        #: connection failure on the hot path, :data:`DIRECT_PAUSE_S` on)
        self._direct_after = 0.0
        #: whether round scripts run as Valkey functions (``FCALL``, :func:`as_function`): ``None``
        #: until a library is first loaded, ``False`` once the store refused one (then ``EVALSHA``)
        self.functions: bool | None = None

    def _deadline(self):
        """``asyncio.timeout(timeout_s)`` around one store call (raises ``TimeoutError`` when it passes).

        The standalone client has no socket timeout: with one, redis-py sends
        every command through ``asyncio.wait_for``, which in Python 3.11 runs
        the send as a task of its own (~10% of the client's CPU per script
        call, ~8 µs: a py-spy profile of a worker under ``bench/serve.py``
        load, then a ``/tmp`` harness of 8 concurrent callers). The deadline covers the
        send and the reply; when it passes, redis-py drops the connection
        (a cancelled command never leaves a reply behind on a pooled
        connection). A cluster's calls go on connections without socket
        timeouts too (:meth:`_execute_on`, :meth:`_node_calls`), all of one
        round under one deadline; redis-py's cluster client, which carries
        redirected calls, keeps its own socket timeouts inside it.
        """
        return asyncio.timeout(self.timeout_s)

    async def connect(self) -> bool:
        """Detect the mode and build the client, unless done; return whether the store is a cluster.

        Raises:
            StoreUnavailable: the store cannot be reached (asked again next time).
        """
        if self.client is not None:
            return bool(self.cluster)
        probe = aioredis.Redis.from_url(self.url, socket_timeout=self.timeout_s,
                                        socket_connect_timeout=self.timeout_s, protocol=RESP_PROTOCOL)
        try:
            with _store_errors():
                info = await probe.info("cluster")
        finally:
            await probe.aclose()
        cluster = bool(int(info.get("cluster_enabled", 0)))
        if cluster:
            # max_connections: per node. An event's per-slot calls go at once, so concurrent events
            # need several connections each; past the limit redis-py's asyncio cluster client raises
            # MaxConnectionsError rather than waiting (100 by default: 503s at ~30 concurrent events)
            self.client = RedisCluster.from_url(self.url, socket_timeout=self.timeout_s,
                                                socket_connect_timeout=self.timeout_s, decode_responses=False,
                                                max_connections=CLUSTER_MAX_CONNECTIONS, protocol=RESP_PROTOCOL)
            # hiredis packing for the nodes' connections too (redis-py builds them from these kwargs;
            # where a redis-py version keeps them elsewhere, its own packer stays)
            node_kwargs = getattr(getattr(self.client, "nodes_manager", None), "connection_kwargs", None)
            if isinstance(node_kwargs, dict) and isinstance(node_kwargs.get("connection_class"), type):
                base = node_kwargs["connection_class"]
                node_kwargs["connection_class"] = type("HiredisPacking" + base.__name__, (_HiredisPacking, base), {})
            try:
                with _store_errors():
                    await self.client.initialize()  # the slot map, before the first call
            except StoreUnavailable:
                self.client = None
                raise
            slot_tag(0)  # the slot-tag table, built now rather than on the first event
        else:
            # no socket timeout: each call runs under :meth:`_deadline` instead
            self.client = aioredis.Redis.from_url(
                self.url, socket_timeout=None, socket_connect_timeout=self.timeout_s,
                decode_responses=False, protocol=RESP_PROTOCOL)
            pool = self.client.connection_pool
            pool.connection_class = type("HiredisPacking" + pool.connection_class.__name__,
                                         (_HiredisPacking, pool.connection_class), {})
        self.online_script = self.client.register_script(online_min_script())
        self.cluster = cluster
        if self.on_mode is not None:
            self.on_mode(cluster)
        return cluster

    async def run(self, script: str, keys: Sequence[str], argv: Sequence[Any],
                  layout: Sequence[tuple[int, bool]] | None = None) -> list:
        """Run a round script once (``FCALL`` of its library; ``EVALSHA`` where functions are refused).

        In a cluster the round is split by hash slot (:func:`split_by_slot`):
        one call per slot, all sent at once, their replies merged into the
        reply of one call.

        Args:
            script: the Lua source (``compiler.algebra.lua``).
            keys: Redis keys (KEYS).
            argv: the arguments (ARGV; see ``compiler.algebra.lua``).
            layout: per slot key after the two fixed ones, ``(ARGV elements
                it takes when live, is a read)`` (``serving.evaluate._Round``);
                needed in a cluster.

        Returns:
            The script's reply (``[id flag, one result per read]``).

        Raises:
            StoreUnavailable: connection, timeout or server error. Each script
                call is atomic, so either all of its writes happened or none
                (in a cluster, per slot).
        """
        sha = self._sha(script)
        if self.client is None:
            await self.connect()
        if self.cluster and layout is None:
            raise ValueError("a Redis Cluster call needs the round's layout")
        with _store_errors():
            async with self._deadline():
                if self.cluster:
                    return await self._run_split(script, sha, keys, argv, layout)
                return await self._call(script, sha, keys, argv)

    def _sha(self, script: str) -> str:
        """The SHA1 (hex) ``EVALSHA`` names ``script`` by, computed once per script (:attr:`shas`)."""
        sha = self.shas.get(script)
        if sha is None:
            sha = self.shas[script] = hashlib.sha1(script.encode()).hexdigest()
        return sha

    async def _call(self, script: str, sha: str, keys: Sequence[str], argv: Sequence[Any],
                    slot: int | None = None) -> list:
        """One ``EVALSHA`` (``EVAL`` after ``NOSCRIPT``); in a cluster, sent to the node of ``slot``.

        In a cluster the call goes to the node redis-py's slot map names,
        on a connection of that node's own (:meth:`_execute_on`), without
        the cluster client: naming the node spares it the hash slot of every
        key of the call (CRC16 in Python per key: 40% of a worker's CPU on
        the demo topology), and going around it its per-command routing,
        retry and metrics layers. A ``MOVED``, ``ASK`` or ``TRYAGAIN`` reply
        (the call did not run) goes on through redis-py's cluster client,
        which follows it and updates its slot map (``_execute_command``); so
        does every call for a while after a connection failure
        (:attr:`_direct_after`), so that its topology refresh runs. No other
        retry runs: a call that may have run is never sent twice.
        """
        extra = {}
        execute = self._execute
        if slot is not None:
            # the slot map redis-py keeps (empty until it initializes, or again after a cluster error:
            # then it routes the call itself)
            nodes = self.client.nodes_manager.slots_cache.get(slot)
            if nodes and asyncio.get_running_loop().time() >= self._direct_after:
                execute = functools.partial(self._execute_on, nodes[0])
            else:
                execute = self.client.execute_command
                if nodes:
                    extra["target_nodes"] = nodes[0]
        fn = self._function(script) if self.functions is not False else None
        if fn is not None:
            name, library = fn
            # a missing function (a restart, FUNCTION FLUSH, a new node, another process's retire_functions)
            # or none at all: the call did not run; load and call again, twice at most (a library retired
            # between its load and the call)
            for attempt in range(3):
                try:
                    reply = await execute("FCALL", name, len(keys), *keys, *argv, **extra)
                    self.functions = True  # (a library another process loaded answers too)
                    return reply
                except NoPermissionError as e:
                    if attempt:  # loading allowed, calling not: scripts then
                        _log.warning("the store refuses FCALL (%s): round scripts run with EVALSHA", e)
                        self.functions = False
                        break
                except ResponseError as e:
                    if attempt == 2 or not _function_missing(e):
                        raise
                if not await self._load_function(library):
                    break
        try:
            return await execute("EVALSHA", sha, len(keys), *keys, *argv, **extra)
        except NoScriptError:  # the store (node) restarted or flushed its scripts: this call did not run
            return await execute("EVAL", script, len(keys), *keys, *argv, **extra)

    @staticmethod
    def _function(script: str) -> tuple[str, str] | None:
        """``as_function(script)``: ``(function name, library source)``; ``None`` for a script not generated
        by ``compiler.algebra.lua`` (it runs with ``EVALSHA``)."""
        try:
            return as_function(script)
        except ValueError:
            return None

    async def _load_function(self, library: str) -> bool:
        """``FUNCTION LOAD`` a round's library (``as_function``) on the store, every primary of a cluster.

        A library already loaded is left as it is (its name is its source's
        SHA-1). The first refusal other than that (a server before Redis 7,
        an ACL without ``FUNCTION``, a library that does not compile) turns
        functions off for this store: round scripts then run with
        ``EVALSHA`` as before, and the refusal is logged once.

        Args:
            library: the library source.

        Returns:
            Whether the library is loaded (else :attr:`functions` is now ``False``).

        Raises:
            redis.exceptions.ConnectionError, OSError: as for any command (the caller maps them).
        """
        try:
            if self.cluster:
                for node in self.client.get_primaries():
                    try:
                        await self.client.execute_command("FUNCTION", "LOAD", library, target_nodes=node)
                    except ResponseError as e:
                        if not _already_loaded(e):
                            raise
            else:
                await self._execute("FUNCTION", "LOAD", library)
        except ResponseError as e:
            if _already_loaded(e):
                return True
            _log.warning("the store refuses Valkey functions (%s): round scripts run with EVALSHA", e)
            self.functions = False
            return False
        self.functions = True
        return True

    async def _execute(self, *args: Any) -> Any:
        """Send one command on a connection of the standalone hot path and return its reply.

        The connections are redis-py's (the pool's class: hiredis packing and
        parsing), kept in :attr:`_idle`, one per call in flight: a call takes
        one (or makes one), and gives it back once its reply is read. This
        skips what ``Redis.execute_command`` does around every command -- the
        pool's lock, its readiness check (a socket read per command), its
        connection-count and duration metrics, events and the retry wrapper
        -- ~40% of the client's CPU per script call (~25 µs; ``/tmp``
        harness, 8 concurrent callers, alternated with the previous commit).
        A connection the server has closed while idle (its reader at EOF) is
        dropped before use. A call is never sent twice: on any failure but an
        error reply the connection is dropped and the error raised
        (:func:`_store_errors` makes it the API's 503).

        Args:
            args: the command and its arguments (packed by ``pack_command``).

        Returns:
            The reply, undecoded (bytes, ints, nested lists).

        Raises:
            redis.exceptions.ResponseError: an error reply (``NoScriptError``
                among them); the connection is kept.
            redis.exceptions.ConnectionError, OSError, asyncio.CancelledError:
                the connection is dropped.
        """
        conn = await self._take()
        try:
            await conn.send_packed_command(conn.pack_command(*args), check_health=False)
            reply = await conn.read_response()
        except ResponseError:
            self._idle.append(conn)
            raise
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        self._idle.append(conn)
        return reply

    async def _take(self, idle: list | None = None, make: Callable[[], Any] | None = None):
        """An idle connection of a hot path, or a new one; connections the server closed are dropped.

        Args:
            idle: the idle connections (default: the standalone hot path's, :attr:`_idle`).
            make: makes a new connection (default: the standalone pool's ``make_connection``).
        """
        if idle is None:
            idle = self._idle
        while idle:
            c = idle.pop()
            reader = getattr(c, "_reader", None)  # redis-py's stream reader (private): at EOF once the server closed
            if c.is_connected and not (reader is not None and reader.at_eof()):
                return c
            await c.disconnect(nowait=True)
        return make() if make is not None else self.client.connection_pool.make_connection()

    async def _execute_on(self, node: Any, *args: Any) -> Any:
        """Send one command to cluster node ``node`` on a connection of the cluster hot path; return its reply.

        What :meth:`_execute` is to a standalone store (:meth:`_on_node`):
        redis-py's cluster client spent ~2x the worker CPU of a standalone
        store per event on a cluster of one node (``bench/serve.py
        --cluster``: its target-node resolution, command policies, retry
        loop, metrics, and an ``asyncio.wait_for`` task per send). A
        redirection (``MOVED``, ``ASK``, ``TRYAGAIN``) or ``CLUSTERDOWN``
        means the call did not run: it goes on through the cluster client,
        which follows the redirection and updates its slot map.

        Args:
            node: a redis-py ``ClusterNode`` (from its slot map).
            args: the command and its arguments.

        Returns:
            The reply, undecoded.

        Raises:
            redis.exceptions.ResponseError: the command's error reply (the connection is kept).
            redis.exceptions.ConnectionError, OSError, asyncio.CancelledError: the connection failed
                (:meth:`_on_node`).
            Whatever the cluster client raises for a redirected call.

        Source: SPEC §5.1 (one script call per slot; MOVED/ASK/TRYAGAIN followed).
        """
        (reply,) = await self._on_node(node, [args])
        if isinstance(reply, _REDIRECTED):  # the call did not run
            return await self.client.execute_command(*args, target_nodes=node)
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    async def _on_node(self, node: Any, cmds: Sequence[Sequence[Any]]) -> list:
        """Send ``cmds`` to cluster node ``node`` in one write on a hot-path connection; read every reply.

        The connections (:meth:`_node_connection`) are kept per node in
        :attr:`_node_idle`, one per call in flight, as :meth:`_execute`
        keeps a standalone store's. An error reply is returned in its
        command's place, as the exception redis-py's parser made of it
        (``MovedError``, ``ResponseError``, ...); the connection is kept. Any
        other failure drops the connection, sends the calls of the next
        :data:`DIRECT_PAUSE_S` seconds through redis-py's cluster client
        (:attr:`_direct_after`: its error handling refreshes the slot map
        after a failover) and is raised.

        Args:
            node: a redis-py ``ClusterNode``.
            cmds: the commands, each its name and arguments.

        Returns:
            Per command, its reply (undecoded) or its error reply's exception.

        Raises:
            redis.exceptions.ConnectionError, OSError, asyncio.CancelledError: the connection failed (the
                commands may or may not have run).
        """
        idle = self._node_idle.get(node.name)
        if idle is None:
            idle = self._node_idle[node.name] = []
        conn = await self._take(idle, lambda: self._node_connection(node))
        replies: list = []
        try:
            packed = conn.pack_commands(cmds) if len(cmds) > 1 else conn.pack_command(*cmds[0])
            await conn.send_packed_command(packed, check_health=False)
            for _ in cmds:
                try:
                    replies.append(await conn.read_response())
                except ResponseError as e:
                    replies.append(e)
        except BaseException:
            await conn.disconnect(nowait=True)
            self._direct_after = asyncio.get_running_loop().time() + DIRECT_PAUSE_S
            raise
        idle.append(conn)
        return replies

    async def _node_calls(self, node: Any, script: str, sha: str, name: str,
                          calls: Sequence[tuple[int, Sequence[str], Sequence[Any]]]) -> list:
        """Run one node's calls of a round (:meth:`_run_split`), pipelined on one of its hot-path connections.

        The ``FCALL`` of each call (function ``name``) goes in one write;
        the node runs them one after the other, each atomic, and the replies
        are read in order. A call answered with a redirection (``MOVED``,
        ``ASK``, ``TRYAGAIN``, ``CLUSTERDOWN``) or a missing function did
        not run: it goes again alone through :meth:`_call` (which follows the
        redirection through redis-py's cluster client, or loads the library).
        Any other error reply is raised once every reply is read (the
        connection is kept); a failure of the connection drops it, sends the
        next second's calls through the cluster client (:attr:`_direct_after`)
        and is raised: calls that may have run are never sent twice.

        Args:
            node: the redis-py ``ClusterNode`` the slot map gives for every call's slot.
            script: the round script; ``sha`` its SHA1; ``name`` its function name (:func:`as_function`).
            calls: ``(slot, keys, argv)`` per call (:func:`split_by_slot`).

        Returns:
            The calls' replies, in order.

        Raises:
            redis.exceptions.ResponseError: a call's own error reply.
            redis.exceptions.ConnectionError, OSError, asyncio.CancelledError: the connection failed.

        Source: SPEC §5.1, §5.2.
        """
        replies = await self._on_node(node, [("FCALL", name, len(k), *k, *a) for _, k, a in calls])
        redo: list[int] = []  # the calls that did not run
        for i, r in enumerate(replies):
            if _did_not_run(r):
                redo.append(i)
            elif isinstance(r, ResponseError):  # (every reply is read: the connection stays usable)
                raise r
        if redo:
            again = await asyncio.gather(*[self._call(script, sha, calls[i][1], calls[i][2], calls[i][0])
                                           for i in redo])
            for i, reply in zip(redo, again):
                replies[i] = reply
        return replies

    @staticmethod
    def _node_connection(node: Any) -> Any:
        """A new hot-path connection to cluster node ``node``: its class and settings, no socket timeout (the
        call's deadline bounds it) and no retries (a call that may have run is never sent twice)."""
        kwargs = dict(node.connection_kwargs)
        kwargs.update(socket_timeout=None, retry=Retry(NoBackoff(), 0))
        return node.connection_class(**kwargs)

    async def run_many(self, calls: Sequence[tuple[str, Sequence[str], Sequence[Any], Sequence[tuple[int, bool]]]]
                       ) -> list:
        """Run round scripts in order, pipelined on one connection (a cluster: one per node, :meth:`_run_many_split`).

        The store runs the calls one after the other, in list order, each
        atomic, as :meth:`run` called once per call would, but with one
        round trip for them all (``POST /batch``,
        ``serving.evaluate.Evaluator.process_batch``). Each distinct script
        of the calls goes first, its library's ``FUNCTION LOAD`` (or, where
        the store refuses functions, ``SCRIPT LOAD``) in the same pipeline,
        so no call meets a missing function or ``NOSCRIPT`` (a call retried
        would run out of order), even after ``FUNCTION FLUSH`` or ``SCRIPT
        FLUSH`` (loading a library the store holds costs it ~25 µs: it
        checks the name before compiling). The deadline (``timeout_s``)
        covers the whole pipeline.

        Args:
            calls: ``(script, keys, argv, layout)`` per call, as :meth:`run`
                takes them (``layout`` is used in a cluster only).

        Returns:
            The replies, one per call, in order.

        Raises:
            PipelineBroken: the store failed; ``done`` calls (the first ones)
                were run and answered, the others may or may not have run
                (the connection is dropped).
        """
        try:
            if self.client is None:
                await self.connect()
        except StoreUnavailable as e:
            raise PipelineBroken(0, e) from e
        if self.cluster:
            return await self._run_many_split(calls)
        conn = None
        replies: list = []
        try:
            with _store_errors():
                conn = await self._take()
                scripts = list(dict.fromkeys(call[0] for call in calls))
                fns = [self._function(script) for script in scripts]
                async with self._deadline():
                    if self.functions is None and all(fns):
                        for fn in fns:  # finds out whether the store takes functions
                            await self._load_function(fn[1])
                    cmds: list[tuple] = []
                    if self.functions and all(fns):
                        named = {script: fn[0] for script, fn in zip(scripts, fns)}
                        cmds += [("FUNCTION", "LOAD", fn[1]) for fn in fns]
                        cmds += [("FCALL", named[script], len(keys), *keys, *argv) for script, keys, argv, *_ in calls]
                    else:
                        cmds += [("SCRIPT", "LOAD", script) for script in scripts]
                        cmds += [("EVALSHA", self._sha(script), len(keys), *keys, *argv)
                                 for script, keys, argv, *_ in calls]
                    await conn.send_packed_command(conn.pack_commands(cmds), check_health=False)
                    for _ in scripts:
                        try:
                            await conn.read_response()
                        except ResponseError as e:  # a library loaded before (FUNCTION LOAD leaves it)
                            if not _already_loaded(e):
                                raise
                    for _ in calls:
                        replies.append(await conn.read_response())
        except StoreUnavailable as e:
            if conn is not None:
                await conn.disconnect(nowait=True)
            raise PipelineBroken(len(replies), e) from e
        except BaseException:
            if conn is not None:
                await conn.disconnect(nowait=True)
            raise
        self._idle.append(conn)
        return replies

    async def _run_many_split(self, calls: Sequence[tuple[str, Sequence[str], Sequence[Any],
                                                         Sequence[tuple[int, bool]]]]) -> list:
        """:meth:`run_many` on a Redis Cluster: every call split by slot, each node's calls pipelined at once.

        Each call is split as :meth:`run` splits it (:func:`split_by_slot`),
        and the per-slot calls of all of them go to their nodes together: per
        node, one write on one hot-path connection (:meth:`_on_node`), the
        nodes concurrently. In each node's pipeline the calls of one slot keep
        the order of ``calls``; a slot with more than one call has them in one
        ``MULTI``/``EXEC``, so they run all or none: a node checks every key
        of a transaction at ``EXEC``, and a slot moved or in migration
        (``MOVED``, ``ASK``, ``TRYAGAIN``) discards all of them
        (``EXECABORT``). A later call of a slot can so never run before an
        earlier one that was refused: calls that did not run go again one by
        one, in order, through :meth:`_call` (which follows the redirection).
        An event's values need only this per-slot order: all state of one
        (aggregate, key) lives in one slot, and each call reads and writes
        the keys of one slot (SPEC §3.3, §5.1). Each node's pipeline starts
        with ``FUNCTION LOAD`` of the libraries it calls (a loaded library
        answers "already exists"), so no call inside a transaction meets a
        missing function. The API's ``_id`` markers go at once beside the
        calls (:meth:`_mark_id`), and the events that ran are appended to the
        event stream in order, all at once (:meth:`_append_events`).

        Calls go one at a time through :meth:`run` instead until the store
        runs round scripts as functions (the first call finds out), when a
        slot is missing from redis-py's slot map, and for a while after a
        connection failure (:attr:`_direct_after`).

        Args:
            calls: ``(script, keys, argv, layout)`` per call.

        Returns:
            The merged replies, one per call, in order.

        Raises:
            PipelineBroken: the store failed; the first ``done`` calls ran
                and were answered, the others may or may not have run (each
                per-slot call is atomic, and a call retried with its ``_id``
                applies only the slots that missed it, :func:`split_by_slot`).

        Source: SPEC §5.1 (one call per slot, MOVED/ASK/TRYAGAIN followed, a
        slot migration loses or double-counts nothing), §5.2; Redis Cluster
        specification (multi-key operations and transactions during resharding).
        """
        fns = {script: self._function(script) for script in dict.fromkeys(call[0] for call in calls)}
        split = [split_by_slot(keys, argv, layout, self._sha(script)) for script, keys, argv, layout in calls]
        # node name -> (node, slot -> [(call, part)] in call order)
        by_node: dict[str, tuple[Any, dict[int, list[tuple[int, int]]]]] | None = None
        if self.functions and all(fns.values()):
            by_node = {}
            for c, (parts, _) in enumerate(split):
                for p, (slot, _, _) in enumerate(parts):
                    node = self._hot_node(slot)
                    if node is None:
                        by_node = None
                        break
                    by_node.setdefault(node.name, (node, {}))[1].setdefault(slot, []).append((c, p))
                if by_node is None:
                    break
        if by_node is None:
            replies: list = []
            for script, keys, argv, layout in calls:
                try:
                    replies.append(await self.run(script, keys, argv, layout))
                except StoreUnavailable as e:
                    raise PipelineBroken(len(replies), e) from e
            return replies
        got: list[list] = [[None] * len(parts) for parts, _ in split]
        redo: list[list[tuple[int, int]]] = []  # runs of per-slot calls that did not run, each in call order
        errors: list[Exception] = []

        def fcall(c: int, p: int) -> tuple:
            _, keys, argv = split[c][0][p]
            return ("FCALL", fns[calls[c][0]][0], len(keys), *keys, *argv)  # type: ignore[index]

        async def node_pipeline(node: Any, slots: dict[int, list[tuple[int, int]]]) -> None:
            libraries = list(dict.fromkeys(fns[calls[c][0]][1] for run in slots.values() for c, _ in run))  # type: ignore[index]
            cmds: list[tuple] = [("FUNCTION", "LOAD", library) for library in libraries]
            for run in slots.values():
                if len(run) == 1:
                    cmds.append(fcall(*run[0]))
                else:
                    cmds += [("MULTI",), *(fcall(c, p) for c, p in run), ("EXEC",)]
            replies = iter(await self._on_node(node, cmds))
            for _ in libraries:
                r = next(replies)
                if isinstance(r, ResponseError) and not _already_loaded(r):
                    errors.append(r)
            for run in slots.values():
                if len(run) == 1:
                    r = next(replies)
                    ran: list | None = None if _did_not_run(r) else [r]
                else:
                    queued = [next(replies) for _ in range(len(run) + 1)][1:]  # MULTI's OK, then each QUEUED
                    try:
                        ran = _exec_outcome(queued, next(replies))
                    except ResponseError as e:
                        errors.append(e)
                        continue
                if ran is None:
                    redo.append(run)  # none of them ran
                    continue
                for (c, p), r in zip(run, ran):
                    if isinstance(r, ResponseError):
                        errors.append(r)
                    else:
                        got[c][p] = r

        def answered() -> int:
            return next((c for c, parts in enumerate(got) if any(r is None for r in parts)), len(calls))

        cause: StoreUnavailable | None = None
        try:
            with _store_errors():
                async with self._deadline():
                    todo = [node_pipeline(node, slots) for node, slots in by_node.values()]
                    todo += [self._mark_id(keys[0], int(argv[1]))
                             for _, keys, argv, _ in calls if keys[0] and argv[1] != ""]
                    failed = [r for r in await asyncio.gather(*todo, return_exceptions=True)
                              if isinstance(r, BaseException)]
                if failed:
                    raise failed[0]
                if errors:
                    raise errors[0]
                for run in redo:  # one by one, each slot's in call order, each under its own deadline
                    for c, p in run:
                        slot, keys, argv = split[c][0][p]
                        async with self._deadline():
                            got[c][p] = await self._call(calls[c][0], self._sha(calls[c][0]), keys, argv, slot)
        except StoreUnavailable as e:
            cause = e
        # (a failed _id marker, every call answered: the last event is the one in doubt)
        done = min(answered(), len(calls) - 1) if cause is not None else len(calls)
        out = [merge(replies) for (_, merge), replies in zip(split[:done], got)]
        # the events that ran, appended to the event stream in order (bit 0 of the flag: not a repeated _id)
        appends = [(c, keys[1], argv[2]) for c, ((_, keys, argv, _), (parts, _), reply)
                   in enumerate(zip(calls, split, out)) if argv[2] != "" and keys[1] and (reply[0] & 1 or not parts)]
        if appends:
            try:
                with _store_errors():
                    async with self._deadline():
                        if len({key for _, key, _ in appends}) == 1:
                            await self._append_events(appends[0][1], [text for _, _, text in appends])
                        else:
                            for _, key, text in appends:
                                await self._append_events(key, [text])
            except StoreUnavailable as e:
                cause, done = cause or e, appends[0][0]
        if cause is not None:
            raise PipelineBroken(done, cause) from cause
        return out

    async def _append_events(self, key: str, texts: Sequence[str]) -> None:
        """Append events to the event stream ``key`` on a cluster (``XADD key [MAXLEN ~ N] * event <text>``), in order.

        Sent on the hot path to the node of the stream's slot (:meth:`_on_node`),
        as :meth:`_mark_id` sends markers: several at once in one write, in
        one ``MULTI``/``EXEC``, so that a node that refuses one (the stream
        moved, or in migration) appends none, and they all go again in order
        through redis-py's cluster client, which follows the redirection.

        Args:
            key: the stream (``SCOWL_EVENT_STREAM``).
            texts: each event's JSON text, in arrival order.

        Raises:
            redis.exceptions.RedisError, OSError: as :meth:`_on_node` and the cluster client raise them
                (:func:`_store_errors` makes them :class:`StoreUnavailable`).
        """
        node = self._hot_node(key_slot(key.encode()))
        if node is not None:
            cmds: list[tuple] = [("XADD", key, *self._xadd_cap, "*", "event", text) for text in texts]
            if len(cmds) > 1:
                cmds = [("MULTI",), *cmds, ("EXEC",)]
            replies = await self._on_node(node, cmds)
            if len(cmds) == 1:
                ran = None if isinstance(replies[0], _REDIRECTED) else replies
            else:
                ran = _exec_outcome(replies[1:-1], replies[-1])
            if ran is not None:
                for r in ran:
                    if isinstance(r, ResponseError):
                        raise r
                return
        for text in texts:  # (none of them was appended)
            await self.client.xadd(key, {"event": text}, maxlen=self.stream_maxlen, approximate=True)

    async def _mark_id(self, key: str, ttl_ms: int) -> Any:
        """``SET key 1 NX PX ttl_ms`` on a cluster: the API's own marker of an event's ``_id`` (:meth:`_run_split`).

        Sent on the hot path to the node redis-py's slot map names for the
        key's slot (:meth:`_execute_on`, which hands a redirection to the
        cluster client), not through the cluster client itself: there it
        cost a cluster of 3 masters ~21% of its events/s for events with an
        ``_id`` (a ``/tmp`` harness, 12,000 demo events, 8 at a time: 4,237
        against 5,370 without ``_id``; bench/HISTORY.md, forty-fourth
        session). The key's slot is computed here, not remembered
        (:func:`_slot_of` keeps state keys, which repeat; an id does not).

        Returns:
            The reply (``True``/``OK`` when set, ``None`` when the marker was there).
        """
        node = self._hot_node(key_slot(key.encode()))
        if node is not None:
            return await self._execute_on(node, "SET", key, "1", "NX", "PX", ttl_ms)
        return await self.client.set(key, "1", nx=True, px=ttl_ms)

    def _hot_node(self, slot: int) -> Any:
        """The node redis-py's slot map names for ``slot``, for the cluster hot path; ``None`` when the map
        lacks the slot, or for a while after a connection failure (:attr:`_direct_after`): then the
        command goes through redis-py's cluster client."""
        nodes = self.client.nodes_manager.slots_cache.get(slot)
        if nodes and asyncio.get_running_loop().time() >= self._direct_after:
            return nodes[0]
        return None

    async def _run_split(self, script: str, sha: str, keys: Sequence[str], argv: Sequence[Any],
                         layout: Sequence[tuple[int, bool]]) -> list:
        """The calls of one round on a cluster, one per slot (:func:`split_by_slot`), merged into one reply.

        Once the store runs the round's library as a function, the calls of
        each node go pipelined on one connection of that node
        (:meth:`_node_calls`): one write and one read of the socket per node
        and round, where a connection per call made one of each per slot.
        Otherwise (the first call, a store that refuses functions, a slot the
        slot map lacks, the second after a connection failure) each call goes
        alone through :meth:`_call`. SPEC §5.1: all sent at once, one round
        trip per node, concurrently.
        """
        calls, merge = split_by_slot(keys, argv, layout, sha)
        by_node: dict[str, tuple[Any, list[int]]] | None = None
        fn = self._function(script) if self.functions else None
        if fn is not None and asyncio.get_running_loop().time() >= self._direct_after:
            by_node = {}
            cache = self.client.nodes_manager.slots_cache
            for i, (slot, _, _) in enumerate(calls):
                nodes = cache.get(slot)
                if not nodes:
                    by_node = None
                    break
                by_node.setdefault(nodes[0].name, (nodes[0], []))[1].append(i)
        if by_node is not None:
            todo = [self._node_calls(node, script, sha, fn[0], [calls[i] for i in mine])
                    for node, mine in by_node.values()]
        else:
            todo = [self._call(script, sha, k, a, slot) for slot, k, a in calls]
        if keys[0] and argv[1] != "":  # the API's own marker of the id too (the stream's claims read it)
            todo.append(self._mark_id(keys[0], int(argv[1])))
        replies = await asyncio.gather(*todo)
        if by_node is not None:  # per node, its calls' replies: back in the order of calls
            ordered: list = [None] * len(calls)
            for (_, mine), got in zip(by_node.values(), replies):
                for i, reply in zip(mine, got):
                    ordered[i] = reply
            replies = ordered
        out = merge(replies[:len(calls)])
        if argv[2] != "" and keys[1] and (out[0] & 1 or not calls):  # bit 0: not a repeated _id
            await self._append_events(keys[1], [argv[2]])
        return out

    async def retire_functions(self, scripts: Iterable[str]) -> int:
        """Delete the function libraries of round scripts other than ``scripts`` (``scowl_*``; every primary).

        Each generated round script is a library named after its source
        (:func:`as_function`), so every change of a topology or of the
        allowed lateness leaves the previous libraries loaded, and the
        store's Lua heap grows. A larger heap costs every call: Valkey steps
        Lua's garbage collector every 50 calls, and the marking walks the
        whole heap (demo calls, ``bench/lua_calls.py``-style replay: 111.5 µs
        each beside the demo's own libraries, 124.6 beside 20 more of the wide
        topology's, 132.9 beside 40). The app calls this at start-up with its
        plan's scripts. A library another process still uses (a second
        topology on the store, an older version during a rolling deploy) is
        loaded again by that process's next call (``Function not found``).
        Best effort: a store that refuses functions, or fails, keeps them.

        Args:
            scripts: the round scripts to keep (``serving.evaluate.Evaluator.scripts``).

        Returns:
            How many libraries were deleted (over all primaries).
        """
        keep = {fn[0] for fn in map(self._function, scripts) if fn is not None}
        deleted = 0
        try:
            if self.client is None:
                await self.connect()
            nodes = self.client.get_primaries() if self.cluster else [None]
            for node in nodes:
                extra = {"target_nodes": node} if node is not None else {}
                with _store_errors():
                    async with self._deadline():
                        listed = await self.client.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "scowl_*",
                                                                   **extra)
                        for lib in listed or []:
                            info = lib if isinstance(lib, dict) else dict(zip(lib[::2], lib[1::2]))
                            name = info.get(b"library_name", info.get("library_name"))
                            name = name.decode() if isinstance(name, bytes) else name
                            if name not in keep:  # LIBRARYNAME matched scowl_* only
                                try:
                                    await self.client.execute_command("FUNCTION", "DELETE", name, **extra)
                                    deleted += 1
                                except ResponseError:  # deleted meanwhile by another process
                                    pass
        except (StoreUnavailable, ResponseError) as e:
            _log.info("function libraries left as they are: %s", e)
        return deleted

    async def record_online(self, starts: Mapping[str, int]) -> None:
        """Lower the online-writer start times of some states to ``starts`` (module docstring).

        Each field of :data:`ONLINE_KEY` becomes ``min(current, starts[h])``,
        atomically; one command for all of them.

        Args:
            starts: definition hash -> event time in epoch ms.

        Raises:
            StoreUnavailable: connection, timeout or server error.
        """
        args: list[Any] = []
        for h, ms in starts.items():
            args += [h, int(ms)]
        if self.client is None:
            await self.connect()
        with _store_errors():
            async with self._deadline():
                await self.online_script(keys=[ONLINE_KEY], args=args)

    async def ping(self) -> bool:
        """Return whether the store answers ``PING``."""
        try:
            if self.client is None:
                await self.connect()
            async with self._deadline():
                return bool(await self.client.ping())
        except (RedisError, OSError, StoreUnavailable):
            return False

    async def close(self) -> None:
        """Close the connection pool(s)."""
        while self._idle:
            await self._idle.pop().disconnect(nowait=True)
        for idle in self._node_idle.values():
            while idle:
                await idle.pop().disconnect(nowait=True)
        if self.client is not None:
            await self.client.aclose()


_SLOT_TAGS: list[str] = []


@functools.lru_cache(maxsize=1 << 16)
def _slot_of(key: str) -> int:
    """The Redis Cluster hash slot of ``key`` (``redis.crc.key_slot`` of its UTF-8 bytes), remembered: an
    event's state keys repeat across events (each entity key's states share its hash tag)."""
    return key_slot(key.encode())


def slot_tag(slot: int) -> str:
    """Return a short hash tag whose keys ``{<tag>}...`` lie in Redis Cluster hash slot ``slot`` (0..16383).

    A round's placeholders and ``_id`` markers must lie in the slot of the
    call's keys; the slot's own tag serves any key in it, whatever its tag. The table of the first
    hex numbers reaching every slot is built once (~0.2 s, ~300k CRC16s).
    """
    if not _SLOT_TAGS:
        tags: list[str | None] = [None] * 16384
        left, i = 16384, 0
        while left:
            tag = format(i, "x")
            k = key_slot(tag.encode())
            if tags[k] is None:
                tags[k] = tag
                left -= 1
            i += 1
        _SLOT_TAGS.extend(tags)  # type: ignore[arg-type]
    return _SLOT_TAGS[slot]


def split_by_slot(keys: Sequence[str], argv: Sequence[Any], layout: Sequence[tuple[int, bool]],
                  sha: str) -> tuple[list[tuple[int, list[str], list[Any]]], Callable[[list], list]]:
    """Split one round's script call into one call per Redis Cluster hash slot (SPEC §5.1).

    Each call carries the same script with the keys of one slot; every other
    slot key becomes the placeholder ``{<tag>}`` (:func:`slot_tag`: a key in
    the call's slot that the script skips, ``compiler.algebra.lua``) and
    loses its ARGV elements. The event's ``_id`` marker becomes one per call,
    ``sc:id:{<tag>}:<script sha, 12 hex>:<id>``, so each slot's writes happen at most
    once however often the event is retried (a retry after a partial failure
    applies exactly the slots that missed it). The stream key is left out
    (the caller appends the event itself).

    Args:
        keys: the round's KEYS (``[id key or "", stream key or "", slot keys..]``).
        argv: its ARGV (``[t_ms, id ttl or "", event JSON or "", slot args..]``).
        layout: per slot key, ``(ARGV elements when live, is a read)``.
        sha: the script's SHA1 (one marker per round).

    Returns:
        ``(calls, merge)``: ``calls`` a list of ``(slot, keys, argv)``, one
        per slot; ``merge(replies)`` turns their replies (in ``calls`` order) into
        the reply of the unsplit call: the id flag (0 if any call saw the id:
        it is a repeat) and the reads' results in slot-key order.

    Raises:
        ValueError: ``layout`` does not match ``keys``.
    """
    if len(layout) != len(keys) - 2:
        raise ValueError(f"layout has {len(layout)} slots for {len(keys) - 2} keys")
    groups: dict[int, list[int]] = {}
    spans: list[tuple[int, int]] = []
    a = 3
    for p, (arity, _) in enumerate(layout):
        key = keys[p + 2]
        n = arity if key else 0
        spans.append((a, a + n))
        a += n
        if key:
            groups.setdefault(_slot_of(key), []).append(p)
    event_id = keys[0][len(ID_PREFIX) + 1:-1] if keys[0] else ""
    calls: list[tuple[int, list[str], list[Any]]] = []
    call_of: dict[int, int] = {}
    width = len(keys)
    for c, (slot, positions) in enumerate(groups.items()):
        tag = slot_tag(slot)
        ph = "{" + tag + "}"
        ks = [ph] * width  # every other slot's key is the placeholder (the script skips it)
        if event_id:
            ks[0] = f"{ID_PREFIX}{{{tag}}}:{sha[:12]}:{event_id}"
        args: list[Any] = [argv[0], argv[1] if event_id else "", ""]
        for p in positions:  # ascending: the call's ARGV keeps the round's order
            ks[p + 2] = keys[p + 2]
            lo, hi = spans[p]
            if hi > lo:
                args += argv[lo:hi]
            call_of[p] = c
        calls.append((slot, ks, args))
    order = [call_of[p] for p, (_, is_read) in enumerate(layout) if is_read and keys[p + 2]]

    def merge(replies: list) -> list:
        its = [iter(r[1:]) for r in replies]
        # bit 0: the id flag (0 if any call saw the id); bits 1-2: lateness (compiler.algebra.lua)
        flag = min([int(r[0]) & 1 for r in replies], default=1) | max([int(r[0]) & 6 for r in replies], default=0)
        return [flag] + [next(its[c]) for c in order]

    return calls, merge
