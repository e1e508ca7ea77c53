"""Linux scheduling policy of ``scowl serve --workers N``'s worker processes (``--worker-policy``; ``sched(7)``).

Two workers beside the store on a 2-core machine made 0.87-0.88x the
events/s of one at the default policy (``SCHED_OTHER``): the store, woken by
a worker's call, was queued on that worker's core, and the workers then
waited for its replies while a core sat idle (``bench/serve.py --topology
demo --workers 2``; bench/HISTORY.md, eighteenth and nineteenth
sessions). At ``SCHED_BATCH`` a worker woken by a reply or a request does
not preempt what runs on its core (the store's batch of calls): 1.00-1.06x,
the cores ~27% idle instead of ~45%. At ``SCHED_IDLE`` a core that runs
only workers counts as idle, so the woken store is placed there and runs at
once: 1.07-1.14x, ~5% idle; but a worker at ``SCHED_IDLE`` runs only when
nothing else on the host wants the core, so any other busy process starves
the service. ``auto`` (:func:`worker_policy`) picks ``batch`` when several
workers share this host with the store, and never ``idle``.
"""

from __future__ import annotations

import os
import sys

#: The values of ``scowl serve --worker-policy``, ``auto`` first.
WORKER_POLICIES: tuple[str, ...] = ("auto", "normal", "batch", "idle")

#: The Linux policy (an ``os.SCHED_*`` name) of each resolved worker policy.
SCHED_NAMES: dict[str, str] = {"normal": "SCHED_OTHER", "batch": "SCHED_BATCH", "idle": "SCHED_IDLE"}

__all__ = ["SCHED_NAMES", "WORKER_POLICIES", "apply_policy", "store_on_this_host", "worker_policy"]


def store_on_this_host(url: str) -> bool:
    """Whether the store at ``url`` runs on this host: a Unix socket, ``localhost`` or a loopback address.

    Args:
        url: a ``redis://``, ``rediss://`` or ``unix://`` URL (a cluster's
            URL names one of its nodes).

    Returns:
        True for ``unix://`` URLs and hosts ``localhost``, ``127.0.0.0/8``
        and ``::1``; False otherwise (another host, or a name this does not
        resolve: a remote store is the safe guess, it changes nothing).
    """
    import ipaddress
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme == "unix":
        return True
    host = (parts.hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def worker_policy(choice: str, workers: int, store_url: str) -> str:
    """Resolve ``--worker-policy``: the scheduling policy the workers run at (module docstring).

    Args:
        choice: one of :data:`WORKER_POLICIES`.
        workers: the number of worker processes.
        store_url: the store's URL.

    Returns:
        ``"normal"``, ``"batch"`` or ``"idle"``: ``choice`` itself unless it
        is ``"auto"``, which is ``"batch"`` for two workers or more over a
        store on this host (:func:`store_on_this_host`), else ``"normal"``.

    Raises:
        ValueError: ``choice`` is not one of :data:`WORKER_POLICIES`.

    Source: measured with ``bench/serve.py --workers 2`` (module docstring;
    bench/HISTORY.md, nineteenth session); ``sched(7)`` for the policies.
    """
    if choice not in WORKER_POLICIES:
        raise ValueError(f"unknown worker policy {choice!r}; one of {', '.join(WORKER_POLICIES)}")
    if choice != "auto":
        return choice
    return "batch" if workers > 1 and store_on_this_host(store_url) else "normal"


def apply_policy(policy: str) -> bool:
    """Run every thread of this process at the scheduling policy ``policy`` (Linux; elsewhere nothing).

    Threads started later inherit it from the thread that starts them.
    ``normal`` changes nothing (a process starts at ``SCHED_OTHER``; going
    back from ``SCHED_IDLE`` would need privileges).

    Args:
        policy: ``"normal"``, ``"batch"`` (``SCHED_BATCH``) or ``"idle"``
            (``SCHED_IDLE``), as :func:`worker_policy` returns.

    Returns:
        Whether the policy was set (False for ``normal``, elsewhere than
        Linux, or where the kernel refused: the worker then runs as before).

    Raises:
        ValueError: an unknown ``policy``.
    """
    if policy not in SCHED_NAMES:
        raise ValueError(f"unknown scheduling policy {policy!r}")
    if policy == "normal" or not sys.platform.startswith("linux") or not hasattr(os, "sched_setscheduler"):
        return False
    value = getattr(os, SCHED_NAMES[policy])
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    try:
        for tid in tids:
            os.sched_setscheduler(tid, value, os.sched_param(0))
    except OSError:
        return False
    return True
