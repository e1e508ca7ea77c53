"""``scowl ui [DIR] [--port PORT] [--no-open]``: the feature explorer (``scowl.ui``) on the demo store.

Serves the API and its explorer (``/ui``) for ``DIR`` (default the demo's
topology, ``examples/flights``) over the store every command uses
(``SCOWL_REDIS_URL``, else the embedded one under ``SCOWL_HOME``, default
``./.scowl``, which ``scowl demo`` fills), on a free loopback port unless
``--port`` is given, and opens the explorer in the browser
(``webbrowser.open``; ``--no-open`` only prints its URL). It runs until
stopped (Ctrl-C, SIGTERM, SIGHUP), as ``scowl serve`` does
(``scowl.signals``): the requests in flight are answered, then the
embedded store is saved and stopped.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import typer

from scowl.common import UserError, compile_topology, console, open_store, redact_url


def ui(
    directory: Path = typer.Argument(None, metavar="DIR", show_default=False,
                                     help="Topology directory (default: the demo's, examples/flights)."),
    host: str = typer.Option("127.0.0.1", metavar="HOST", help="Bind address."),
    port: int = typer.Option(0, min=0, max=65535, metavar="PORT", help="TCP port (0: a free one)."),
    open_browser: bool = typer.Option(True, "--open/--no-open", help="Open the explorer in the browser, or only print its URL."),
) -> None:
    """Open the feature explorer on the demo store.

    Serves the topology (default examples/flights, the demo's) and its
    explorer at /ui over the store (SCOWL_REDIS_URL, else the embedded one
    under SCOWL_HOME, default ./.scowl, which `scowl demo` fills): the
    topology, the lineage graph, dry-run lookups, the store's coverage and
    live traffic. Opens it in the browser unless --no-open. Stop it with
    Ctrl-C.
    """
    import uvicorn

    from scowl.common import bind_address
    from scowl.signals import graceful_server_class
    from scowl.ui import install_ui
    from serving.app import create_app
    from serving.settings import Settings, SettingsError

    if directory is None:
        from scowl.demo import topology_dir

        try:
            directory = topology_dir()
        except FileNotFoundError as e:
            raise UserError(str(e)) from None
    plan = compile_topology(directory)
    with open_store() as url:
        try:
            app = create_app(plan, Settings.load(ui=True), redis_url=url)
        except (NotImplementedError, SettingsError) as e:
            raise UserError(str(e)) from None
        install_ui(app, directory)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning")  # 0: a free port
        sock = bind_address(config)  # before the address is printed: a busy port is one error line
        sock.listen(config.backlog)  # connections made once it is printed wait for the server
        address = f"http://{host}:{sock.getsockname()[1]}/ui"
        console.print(f"feature explorer for {directory} on {address} (store {redact_url(url)}); Ctrl-C to stop")
        if not _has_data(plan, url):
            console.print("the store holds nothing for this topology yet: `scowl demo` fills it with the demo's data")
        server = graceful_server_class()(config)
        if open_browser:
            threading.Thread(target=_open_when_started, args=(server, address), daemon=True).start()
        with sock:
            try:
                server.run(sockets=[sock])
            except SystemExit as e:  # uvicorn could not start (it logged why)
                if e.code not in (0, None):
                    raise UserError(f"the explorer could not start on {host}:{port} (see the message above)") from None
                raise


def _open_when_started(server, address: str, timeout_s: float = 30.0) -> None:
    """Open ``address`` in the browser once ``server`` has started (within ``timeout_s``); say so if none opens."""
    import webbrowser

    deadline = time.monotonic() + timeout_s
    while not server.started:
        if time.monotonic() > deadline or server.should_exit:
            return
        time.sleep(0.05)
    try:
        opened = webbrowser.open(address)
    except webbrowser.Error:
        opened = False
    if not opened:
        console.print(f"no browser could be opened: visit {address}")


def _has_data(plan, url: str) -> bool:
    """Whether the store holds a backfill record or an online start for any state of ``plan`` (``True`` if it cannot tell)."""
    import redis

    from compiler.algebra.storekeys import ONLINE_KEY, cov_key
    from writer.redisio import connect

    if not plan.states:
        return True
    try:
        client = connect(url)
        try:
            hashes = sorted(plan.states)
            if client.exists(*(cov_key(h) for h in hashes)):
                return True
            return any(v is not None for v in client.hmget(ONLINE_KEY, hashes))
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return True
