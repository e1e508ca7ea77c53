"""``scowl warm``: show or stop the warm Spark session of ``scowl replay --warm`` (``scowl.warm``)."""

from __future__ import annotations

import time

import typer

from scowl.common import console, format_duration_s, plural, scowl_home


def warm(
    stop: bool = typer.Option(False, "--stop", help="Stop the warm Spark session (after a replay it is running)."),
) -> None:
    """Show or stop the warm Spark session of 'scowl replay --warm'.

    One background process per SCOWL_HOME keeps a local Spark session between
    replays, so that later ones skip Spark's start-up and the JVM's warm-up;
    it exits after 15 idle minutes (SCOWL_WARM_IDLE_S seconds) and is
    replaced when the scowl sources or the Spark settings change. Its log:
    SCOWL_HOME/warm/server.log.
    """
    from scowl import warm as server

    home = scowl_home()
    if stop:
        info = server.stop(home)
        console.print(f"stopped the warm Spark session (pid {info.pid})" if info is not None
                      else f"no warm Spark session is running under {server.server_dir(home)}")
        return
    got = server.status(home)
    if got is None:
        console.print(f"no warm Spark session is running under {server.server_dir(home)}")
        return
    info, state = got
    up = format_duration_s(int(time.time() - info.started))
    if state.get("stopping"):
        doing = "stopping" + (" after its replay" if state["busy"] or state["waiting"] else "")
    elif state["busy"]:
        doing = "running a replay" + (f", {plural(state['waiting'], 'replay')} waiting" if state["waiting"] else "")
    else:
        left = max(0, int(state["idle_s"] - state["idle_for_s"]))
        doing = f"idle, stops in {format_duration_s(left)} without a replay"
    console.print(f"warm Spark session: pid {info.pid}, 127.0.0.1:{info.port}, up {up}, "
                  f"{plural(state['replays'], 'replay')} run, {doing}")
    console.print(f"log: {server.server_dir(home) / 'server.log'}")
