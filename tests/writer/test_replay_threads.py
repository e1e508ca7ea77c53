"""``writer.replay.as_completed_results``: the event types' datasets are written in driver threads."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from writer.replay import as_completed_results


def test_results_come_as_each_call_finishes():
    release = threading.Event()

    def fn(x: str) -> str:
        if x == "slow":
            release.wait(5)
            time.sleep(0.5)  # well after the fast call has returned
        else:
            release.set()
        return x.upper()

    with ThreadPoolExecutor(2) as pool:
        assert list(as_completed_results(pool, fn, ["slow", "fast"])) == ["FAST", "SLOW"]


def test_first_error_is_raised_after_every_call_finished():
    finished: list[str] = []
    failing = threading.Event()

    def fn(x: str) -> str:
        if x == "bad":
            failing.set()
            raise ValueError("bad type")
        failing.wait(5)
        time.sleep(0.5)
        finished.append(x)
        return x

    with ThreadPoolExecutor(3) as pool:
        seen = []
        with pytest.raises(ValueError, match="bad type"):
            for r in as_completed_results(pool, fn, ["a", "bad", "b"]):
                seen.append(r)
    assert sorted(finished) == ["a", "b"]
    assert seen == []  # nothing is handed on once a call failed
