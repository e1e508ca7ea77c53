"""uvicorn's worker process for ``scowl serve --workers N``, run at a scheduling policy (``scowl.sched``).

A module of its own, imported only to serve with workers: it imports
uvicorn, and a spawned worker unpickles :class:`PolicyWorker` (its target is
a method of it) by this module's name.
"""

from __future__ import annotations

from uvicorn.supervisors.multiprocess import Process

from scowl.sched import apply_policy

__all__ = ["PolicyWorker"]


class PolicyWorker(Process):
    """uvicorn's ``Process`` (one worker, started by uvicorn's supervisor) whose child first sets its policy.

    Args:
        config: the ``uvicorn.Config``.
        sockets: the listening sockets the worker serves.
        policy: ``"normal"``, ``"batch"`` or ``"idle"``
            (``scowl.sched.worker_policy``): the child calls
            ``scowl.sched.apply_policy`` with it before it starts its
            health-check thread and its server, whose threads inherit it.
    """

    def __init__(self, config, sockets, policy: str = "normal") -> None:
        self.policy = policy
        super().__init__(config, sockets)

    def target(self, sockets=None) -> None:  # pragma: no cover - runs in the worker process
        """Set the policy, then run uvicorn's worker (its health-check thread and server)."""
        apply_policy(self.policy)
        super().target(sockets)
