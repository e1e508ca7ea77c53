"""A Redis-protocol server of a test's own, to kill and start again on the same port (store outage tests).

The server (``scowl.embedded.server_binary``) listens on a fixed loopback
port and keeps an append-only file fsynced on every write, so a ``SIGKILL``
loses nothing it acknowledged and a restart replays it: what a restart, a
failover or a lost connection looks like to a client, with the data kept.
Used by ``tests/serving/test_store_restart.py`` (serving under load),
``tests/stream/test_store_outage.py`` (``scowl stream --store-retry``) and
``tests/cli/test_store_failure.py`` (a job's one-line error).
"""

from __future__ import annotations

import signal
import subprocess
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
