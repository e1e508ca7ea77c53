# %% [markdown]
# # scowl.client: enrich, query and explain from Python
#
# Notebook-style (`# %%` cells: VS Code, PyCharm, Jupytext); also a script:
#
#     SCOWL_URL=http://127.0.0.1:8000 SCOWL_API_KEY=... python examples/client_example.py
#
# With `SCOWL_URL` unset it starts `scowl serve examples/flights` itself on a free
# loopback port, with the embedded store in a temporary `SCOWL_HOME`, waits for
# `GET /ready`, and stops it at exit. The numbers printed below are those of a
# fresh store (against a server that already holds these events they are larger).
# Reference: docs/client.md.

# %% Start a server unless SCOWL_URL names one
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx

from scowl.client import Client, ScowlError

ROOT = Path(__file__).resolve().parents[1] if "__file__" in globals() else Path.cwd()
URL = os.environ.get("SCOWL_URL")
API_KEY = os.environ.get("SCOWL_API_KEY")


def start_server() -> str:
    """Run `scowl serve examples/flights` on a free port over a private embedded store; return its URL."""
    from scowl.embedded import free_port

    home = tempfile.mkdtemp(prefix="scowl-client-example-")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("SCOWL_REDIS_URL", "SCOWL_API_KEYS")}
    env["SCOWL_HOME"] = home
    log = open(Path(home) / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "scowl", "serve", str(ROOT / "examples" / "flights"),
                             "--port", str(port)], cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT)

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(home, ignore_errors=True)

    atexit.register(stop)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            sys.exit(f"scowl serve exited with {proc.returncode}:\n{(Path(home) / 'serve.log').read_text()}")
        try:
            if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                return url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            sys.exit(f"scowl serve not ready after 60 s:\n{(Path(home) / 'serve.log').read_text()}")
        time.sleep(0.1)


if not URL:
    URL = start_server()
    print(f"started scowl serve examples/flights at {URL}")

client = Client(URL, api_key=API_KEY)
atexit.register(client.close)

# %% Three departures of one aircraft from JFK (times: timezone-aware datetimes; naive ones are UTC)
T0 = datetime(2013, 1, 1, 10, 0, tzinfo=timezone.utc)
results = [
    client.enrich("departure", carrier="B6", flight=100 + i, tailnum="N-EXAMPLE", origin="JFK", dest=dest,
                  dep_delay=delay, distance=1000, _time=T0 + timedelta(minutes=20 * i))
    for i, (dest, delay) in enumerate([("BOS", 5.0), ("LAX", 25.0), ("SFO", 40.0)])
]
print("departures_1h:", [r["departures_1h"] for r in results])
print("delayed_3h:", [r["delayed_3h"] for r in results])
last = results[-1]
# a `time` feature comes back as a UTC datetime, a struct as a dict, an array as a list
print("prev_dep_time:", last["prev_dep_time"].isoformat())
print("prev_flight:", last["prev_flight"])
print("recent_dests:", last["recent_dests"])
print("mins_since_prev:", last["mins_since_prev"])

# %% A batch, mixed event types, processed in order: weather then a departure that reads it
batch = client.enrich_batch([
    {"_type": "weather_obs", "origin": "JFK", "visib": 2.5, "wind_speed": 18.4, "_time": "2013-01-01T10:45:00Z"},
    ("departure", {"carrier": "B6", "flight": 200, "tailnum": "N-OTHER", "origin": "JFK", "dest": "BOS",
                   "dep_delay": 0.0, "_time": T0 + timedelta(minutes=50)}),
])
print("batch visib:", batch[1]["visib"], "departures_1h:", batch[1]["departures_1h"])

# %% Read-only: what would the next departure from JFK see? (POST /event?dry_run: nothing stored)
probe = {"carrier": "B6", "flight": 300, "tailnum": "N-EXAMPLE", "origin": "JFK", "dest": "BOS",
         "_time": T0 + timedelta(minutes=55)}
q = client.query("departure", probe, explain=True)
print("query departures_1h:", q["departures_1h"])
w = q.explain["departures_1h"].window
print(f"explain departures_1h: {q.explain['departures_1h'].writes} writes "
      f"from {w.start.isoformat()} to {w.end.isoformat()} every {w.resolution_s} s")
print("query again:", client.query("departure", probe)["departures_1h"])
real = client.enrich("departure", probe)
print("enrich after queries:", real["departures_1h"], "same as query:", real.features == q.features)

# %% Feature types from GET /topology
types = client.feature_types("departure")
print("types:", {name: types[name] for name in ("prev_dep_time", "prev_flight", "recent_dests")})

# %% Errors are ScowlError(status, code, message)
try:
    client.enrich("no_such_event", x=1)
except ScowlError as e:
    print("error:", e.status, e.code)

# %%
client.close()
print("done")
