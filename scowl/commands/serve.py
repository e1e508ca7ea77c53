"""``scowl serve DIR [--host 127.0.0.1] [--port 8000]`` (SPEC §4, §6): the event API over the store.

Shutdown (``scowl.signals``): on SIGINT, SIGTERM or SIGHUP uvicorn stops
accepting connections and finishes the requests in flight; only then is the
embedded store (if this command started it) saved and stopped, and the
process exits with ``128 + signal number``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from scowl.common import UserError, compile_topology, console, open_store, redact_url


def serve(
    directory: Path = typer.Argument(..., metavar="DIR", help="Topology directory (its *.scowl files)."),
    host: str = typer.Option("127.0.0.1", metavar="HOST", help="Bind address."),
    port: int = typer.Option(8000, metavar="PORT", help="TCP port."),
) -> None:
    """Run the event API (POST /event, /batch) over the store.

    The API is wire-compatible with Sumatra's Event API (docs/semantics.md §8).
    Each event's features are computed as it arrives, in arrival order, with
    windows exact at their resolution (docs/semantics.md). The store is
    SCOWL_REDIS_URL, else the embedded one under SCOWL_HOME (default
    ./.scowl), shared with `scowl backfill`. API keys: SCOWL_API_KEYS
    (comma-separated; none means no authentication). Stop it with Ctrl-C or
    kill: requests in flight are answered first, then the embedded store is
    saved and stopped.
    """
    import uvicorn

    from scowl.signals import graceful_server_class
    from serving.app import create_app
    from serving.settings import Settings

    p = compile_topology(directory)
    with open_store() as url:
        try:
            api = create_app(p, Settings(), redis_url=url)
        except NotImplementedError as e:
            raise UserError(str(e)) from None
        console.print(f"serving {directory} on http://{host}:{port} (store {redact_url(url)})")
        server = graceful_server_class()(uvicorn.Config(api, host=host, port=port, log_level="warning"))
        try:
            server.run()
        except SystemExit as e:  # uvicorn could not start (it logged why, e.g. the address is in use)
            if e.code not in (0, None):
                raise UserError(f"the API could not start on {host}:{port} (see the message above)") from None
            raise
