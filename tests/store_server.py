"""A Redis-protocol server of a test's own, to kill and start again on the same port (store outage tests).

The server (``scowl.embedded.server_binary``) listens on a fixed loopback
port and keeps an append-only file fsynced on every write, so a ``SIGKILL``
loses nothing it acknowledged and a restart replays it: what a restart, a
failover or a lost connection looks like to a client, with the data kept.
Used by ``tests/serving/test_store_restart.py`` (serving under load),
``tests/stream/test_store_outage.py`` (``scowl stream --store-retry``) and
``tests/cli/test_store_failure.py`` (a job's one-line error, a backfill's
``--store-retry``). :class:`StoreProxy` stands between a client and the server
to cut connections without a restart.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import redis


class StoreServer:
    """A ``valkey-server`` in ``home`` on ``port`` (default a free one); :meth:`start`, :meth:`kill`, again.

    Attributes:
        home: its data directory.
        port: its loopback port (the same across restarts).
        url: ``redis://127.0.0.1:<port>/0``.
    """

    def __init__(self, home: Path, port: int | None = None):
        from scowl.embedded import free_port

        self.home = home
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Start the server (replaying its append-only file) and wait until it answers ``PING``.

        Raises:
            AssertionError: it did not answer within 20 s.
        """
        from scowl.embedded import server_binary

        self.proc = subprocess.Popen(
            [server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.home),
             "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        client = redis.Redis(port=self.port, socket_timeout=1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        raise AssertionError("the test's store did not start")

    def kill(self) -> None:
        """``SIGKILL`` the server and wait for it (its acknowledged writes are in the append-only file)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        """Kill the server if it runs (a fixture's teardown)."""
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


class StoreProxy:
    """A loopback TCP proxy to a store that can be cut and restored: a lost connection to the same server.

    :meth:`cut` closes every connection through it and its listening socket
    (clients then get ``Connection refused``); :meth:`restore` listens again
    on the same port. The server behind it keeps running, so its ``run_id``
    is unchanged: an outage that lost nothing (``tests/cli/test_store_failure.py``).

    Attributes:
        port: its loopback port.
        url: ``redis://127.0.0.1:<port>/0``.
    """

    def __init__(self, target_port: int):
        from scowl.embedded import free_port

        self.target_port = target_port
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        """Listen (again) on :attr:`port` and forward every accepted connection to the store."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:  # the store itself is down: the client sees its connection closed
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        """Close the listening socket and every connection through the proxy (the store runs on)."""
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread: the port is free again
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        """Cut for good (a test's teardown)."""
        self.cut()
