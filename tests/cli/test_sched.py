"""``scowl.sched``: which scheduling policy ``scowl serve --workers N`` runs its workers at, and setting it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from scowl.sched import SCHED_NAMES, WORKER_POLICIES, apply_policy, store_on_this_host, worker_policy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize(("url", "local"), [
    ("redis://127.0.0.1:6379/0", True),
    ("redis://127.8.9.10:6379", True),
    ("rediss://user:secret@localhost:6380/2", True),
    ("redis://LOCALHOST", True),
    ("redis://[::1]:6379", True),
    ("unix:///tmp/valkey.sock?db=0", True),
    ("redis://10.0.0.5:6379", False),
    ("redis://[2001:db8::1]:6379", False),
    ("redis://cache.internal:6379", False),
    ("redis://localhost.example.com:6379", False),
    ("", False),
])
def test_store_on_this_host(url, local):
    """Loopback addresses, ``localhost`` and Unix sockets are this host; other addresses and names are not."""
    assert store_on_this_host(url) is local


@pytest.mark.parametrize(("choice", "workers", "url", "policy"), [
    ("auto", 2, "redis://127.0.0.1:6379", "batch"),
    ("auto", 8, "unix:///run/valkey.sock", "batch"),
    ("auto", 1, "redis://127.0.0.1:6379", "normal"),   # one worker: nothing to share the cores with
    ("auto", 2, "redis://10.0.0.5:6379", "normal"),    # the store on another host
    ("normal", 2, "redis://127.0.0.1:6379", "normal"),
    ("batch", 2, "redis://10.0.0.5:6379", "batch"),
    ("idle", 1, "redis://10.0.0.5:6379", "idle"),
])
def test_worker_policy(choice, workers, url, policy):
    """``auto`` is ``batch`` for two workers or more beside the store, else ``normal``; never ``idle``."""
    assert worker_policy(choice, workers, url) == policy
    assert policy in SCHED_NAMES


def test_worker_policy_rejects_an_unknown_choice():
    """A choice outside ``WORKER_POLICIES`` raises, naming them."""
    with pytest.raises(ValueError, match="auto, normal, batch, idle"):
        worker_policy("fast", 2, "redis://127.0.0.1")
    with pytest.raises(ValueError, match="unknown scheduling policy"):
        apply_policy("auto")
    assert WORKER_POLICIES[0] == "auto"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux scheduling policies")
@pytest.mark.parametrize("policy", ["batch", "idle", "normal"])
def test_apply_policy_sets_every_thread_and_new_threads_inherit_it(policy):
    """In a fresh process: a thread started before the call and one started after both run at the policy
    (``normal`` changes nothing and says so)."""
    code = textwrap.dedent(f"""
        import os, threading
        from scowl.sched import apply_policy
        ready, done = threading.Event(), threading.Event()
        seen = {{}}
        def before():
            ready.set(); done.wait()
            seen["before"] = os.sched_getscheduler(0)
        t = threading.Thread(target=before); t.start(); ready.wait()
        applied = apply_policy({policy!r})
        u = threading.Thread(target=lambda: seen.update(after=os.sched_getscheduler(0))); u.start(); u.join()
        done.set(); t.join()
        print(applied, os.sched_getscheduler(0), seen["before"], seen["after"])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr
    applied, main, before, after = out.stdout.split()
    want = getattr(os, SCHED_NAMES[policy])
    assert applied == str(policy != "normal")
    assert int(main) == int(before) == int(after) == want
