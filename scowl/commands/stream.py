"""``scowl stream`` (SPEC §5.7, §6): live events -> tiles in the store, exactly once per micro-batch.

The job itself is ``writer.stream.run_stream``; this module parses the
command line and prints one line per micro-batch.
"""

from __future__ import annotations

import os
import re
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

import typer

from scowl.common import (
    UserError, check_store, compile_topology, console, file_slug, open_store, plural, redact_url, scowl_home,
    start_spark, writable_dir,
)
from scowl.signals import signals_request_stop

#: Test-only fault injection, ``<batch id>:<keys>:<path>`` (``writer.sink.merge_keys``).
FAULT_ENV = "SCOWL_STREAM_FAULT"


def parse_duration_ms(text: str) -> int:
    """Parse a duration: seconds (``90``), ``<n> <unit>`` (``2 hours``, ``1.5 days``) or ISO-8601 (``PT30M``).

    Returns:
        Milliseconds (>= 0).

    Raises:
        UserError: anything else.

    >>> parse_duration_ms("90"), parse_duration_ms("2 hours"), parse_duration_ms("PT30M"), parse_duration_ms("day")
    (90000, 7200000, 1800000, 86400000)
    """
    from compiler.parser import UNIT_SECONDS, parse_iso_duration

    t = text.strip()
    try:
        seconds = float(t)
    except ValueError:
        seconds = None
    if seconds is None:
        seconds = parse_iso_duration(t.upper()) if t[:1] in "pP" else None
    if seconds is None:
        m = re.fullmatch(r"(\d+(?:\.\d+)?)?\s*([a-z]+)", t.lower())
        if m:
            unit = m.group(2)
            unit = unit[:-1] if unit.endswith("s") and unit[:-1] in UNIT_SECONDS else unit
            if unit in UNIT_SECONDS:
                seconds = float(m.group(1) or 1) * UNIT_SECONDS[unit]
    if seconds is None or seconds < 0:
        raise UserError(f"not a duration: {text!r} (e.g. 3600, '2 hours', 'PT30M')")
    return int(round(seconds * 1000))


def _fault() -> tuple[int, int, str] | None:
    raw = os.environ.get(FAULT_ENV)
    if not raw:
        return None
    batch, keys, path = raw.split(":", 2)
    return int(batch), int(keys), path


def _default_checkpoint(source: str) -> Path:
    return scowl_home() / "checkpoints" / file_slug(source)


def stream(
    directory: Path = typer.Argument(..., metavar="DIR", help="Topology directory (its *.scowl files)."),
    source: str = typer.Option(..., "--source", metavar="SOURCE",
                               help="dir:PATH (new JSONL files) or redis:STREAM (a Redis Stream)."),
    checkpoint: Optional[Path] = typer.Option(None, metavar="PATH",
                                              help="Checkpoint directory; restart with the same one to resume "
                                              "exactly once (default: SCOWL_HOME/checkpoints/<source>)."),
    allowed_lateness: Optional[str] = typer.Option(None, "--allowed-lateness", metavar="DURATION",
                                                   help="Watermark lag, e.g. '2 hours' (default: the longest window)."),
    dead_letter: Optional[Path] = typer.Option(None, "--dead-letter", metavar="PATH",
                                               help="Where late and invalid events go (default: CHECKPOINT/dead-letter)."),
    available_now: bool = typer.Option(False, "--available-now", "--once",
                                       help="Process what the source holds now, then exit."),
    trigger: Optional[float] = typer.Option(None, "--trigger", metavar="SECONDS",
                                            help="Seconds between micro-batches (default: back to back)."),
    max_files_per_trigger: Optional[int] = typer.Option(None, "--max-files-per-trigger", min=1, metavar="N",
                                                        help="dir: files per micro-batch (default: all new files)."),
    max_events_per_batch: Optional[int] = typer.Option(None, "--max-events-per-batch", min=1, metavar="N",
                                                       help="redis: entries per micro-batch (default: all new entries)."),
    trim_source: bool = typer.Option(False, "--trim-source",
                                     help="Delete what committed micro-batches read: a redis: stream's entries "
                                     "(XTRIM), a dir: source's files. For a job that is the source's only reader."),
    skip_trimmed: bool = typer.Option(False, "--skip-trimmed",
                                      help="redis: when the stream was trimmed past the checkpoint (entries may "
                                      "be lost), go on with what is left instead of stopping."),
    source_url: Optional[str] = typer.Option(None, "--source-url", metavar="URL",
                                             help="Redis URL of a redis: source (default: the store)."),
    store_retry: float = typer.Option(300.0, "--store-retry", min=0, metavar="SECONDS",
                                      help="How long a micro-batch waits out an unavailable store (restart, "
                                      "failover, lost connection), running again with growing pauses, before "
                                      "the job stops; 0 stops at once."),
    master: Optional[str] = typer.Option(None, metavar="URL",
                                         help="Spark master (default SCOWL_SPARK_MASTER or local[*])."),
) -> None:
    """Stream live events into the store's tiles (Spark).

    Spark Structured Streaming from a directory of JSONL files or a Redis
    Stream.
    Each micro-batch's partial aggregates are merged into Redis exactly once
    per key, even when the job is killed and restarted with the same
    checkpoint. Events older than the watermark (the largest event time seen
    minus the allowed lateness) and invalid records are counted and written
    to the dead-letter directory. Windows and late events are explained in
    docs/semantics.md. Runs until stopped (Ctrl-C, kill, a closed terminal:
    the summary is printed and a batch cut short is redone on restart)
    unless --available-now. With --trim-source the job deletes what its
    committed micro-batches read; a redis: stream trimmed past the
    checkpoint (by anyone) stops the job unless --skip-trimmed. A store that
    restarts or fails over is waited out (--store-retry): the batch runs
    again once it answers, merging nothing twice.
    """
    from compiler.typesystem import format_time
    from writer.stream import StreamError, check_streamable, parse_source, run_stream

    plan = compile_topology(directory)
    lateness_ms = parse_duration_ms(allowed_lateness) if allowed_lateness is not None else None
    try:
        check_streamable(plan)
        kind, target = parse_source(source)
    except StreamError as e:
        raise UserError(str(e)) from None
    if kind == "dir" and not Path(target).is_dir():
        raise UserError(f"--source {source}: {target} is not a directory")
    if skip_trimmed and kind != "redis":
        raise UserError("--skip-trimmed applies to a redis: source only")
    ck = checkpoint if checkpoint is not None else _default_checkpoint(source)
    writable_dir(ck, "--checkpoint")  # before Spark and the store: the query would fail only at its first batch
    if dead_letter is not None:
        writable_dir(dead_letter, "--dead-letter")

    def on_batch(b) -> None:
        wm = "none" if b.watermark_ms is None else format_time(b.watermark_ms)
        note = " (re-run after a restart)" if b.rerun else ""
        behind = "" if b.behind_ms is None else f"; {b.behind_ms / 1000:,.1f}s behind the stream's last entry"
        retried = "" if not b.retries else f"; {plural(b.retries, 'store retry', 'store retries')}"
        if b.store_restarted:
            retried += (" (the store restarted meanwhile: what it did not persist of earlier batches' merges is "
                        "lost)")
        console.print(f"batch {b.batch_id}{note}: {plural(b.events, 'event', spec=',')}, {b.late:,} late, "
                      f"{b.invalid:,} invalid, {plural(b.applied, 'key', spec=',')} merged, {b.skipped:,} already "
                      f"merged; watermark {wm}; {b.seconds:.1f}s{behind}{retried}")

    def on_retry(r) -> None:
        console.print(f"batch {r.batch_id}: store unavailable ({r.error}); retry {r.attempt} in {r.wait_s:.0f}s "
                      f"({r.waited_s:.0f}s of --store-retry {r.budget_s:g}s spent)")


    with open_store() as url:
        check_store(url)  # before Spark: its first batch would fail, after pages of the JVM's log
        console.print(f"stream {source} -> store {redact_url(url)} (checkpoint {ck.absolute()})")
        spark = start_spark(master, app_name="scowl-stream")
        # until stopped: Ctrl-C, SIGTERM and SIGHUP stop the query (summary printed, exit 0)
        until_stopped = nullcontext() if available_now else signals_request_stop()
        try:
            with until_stopped as stop:
                report = run_stream(spark, plan, url, source, ck, source_url=source_url,
                                    stop_requested=None if stop is None else stop.is_set,
                                    allowed_lateness_ms=lateness_ms,
                                    dead_letter=dead_letter, available_now=available_now, trigger_s=trigger,
                                    max_files_per_trigger=max_files_per_trigger,
                                    max_events_per_batch=max_events_per_batch, trim_source=trim_source,
                                    skip_trimmed=skip_trimmed, fault=_fault(), on_batch=on_batch,
                                    store_retry_s=store_retry, on_retry=on_retry)
        except StreamError as e:
            raise UserError(str(e)) from None
    t = report.totals
    console.print(f"streamed {plural(len(report.batches), 'batch', 'batches')}: "
                  f"{plural(report.events, 'event', spec=',')} merged, "
                  f"{report.late:,} late and {report.invalid:,} invalid set aside")
    if t:
        console.print(f"checkpoint totals: {plural(t['batches'], 'batch', 'batches', spec=',')}, "
                      f"{plural(t['events'], 'event', spec=',')}, {t['late']:,} late, {t['invalid']:,} invalid")
    if report.late or report.invalid:
        console.print(f"note: late and invalid events are in {report.dead_letter}/late and {report.dead_letter}/invalid")
