"""One line for a failure of a command or of the warm server: a Spark job's root cause, or a user's input error.

Shared by the console entry point (``scowl.cli.main``) and the warm replay
server (``scowl.warm``), which answers its client with the same line.
"""

from __future__ import annotations

__all__ = ["failure_summary", "input_read_failure", "store_failure"]


def failure_summary(error: BaseException) -> str:
    """One line for an unexpected failure: a Spark job's root cause (its Java exception), else the exception.

    Args:
        error: the exception (a py4j ``Py4JJavaError`` for a failed Spark call).

    Returns:
        ``"Spark failed: <Java class>: <message>"`` for a Java exception (the
        innermost cause, whose message names what went wrong), else
        ``"<exception class>: <message>"``; each cut to its first line.
    """
    causes = _java_causes(error)
    if causes:
        try:
            return "Spark failed: " + _java_line(causes[-1])  # the innermost cause names what went wrong
        except Exception:  # noqa: BLE001 -- the JVM is gone: the Python side's text below
            pass
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _java_causes(error: BaseException) -> list:
    """The Java exception of a failed Spark call and its causes, outermost first (empty for a Python error)."""
    java = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    out = []
    try:
        while java is not None and len(out) < 50:  # bounded: a cause chain can loop
            out.append(java)
            java = java.getCause()
    except Exception:  # noqa: BLE001 -- the JVM is gone: what was read so far
        pass
    return out


def _java_line(java) -> str:
    """``<Java class>: <message>`` of a Java exception, cut to its first line; for a Python task's exception
    (PySpark's ``PythonException``, whose message is the task's Python traceback), the Python exception's line
    (``writer.session.python_error_line``)."""
    from writer.session import python_error_line

    message = str(java.getMessage() or "")
    raised = python_error_line(message)
    if raised is not None:
        return f"a Python task raised {raised}"
    return f"{java.getClass().getName()}: {message}".splitlines()[0]


def store_failure(error: BaseException) -> str | None:
    """The message for a command whose store became unavailable under it, or None for any other failure.

    A store that goes away while a job writes to it (a restart, a failover,
    a lost connection: ``writer.redisio.store_outage``, on the driver or in a
    Spark task) is the environment's failure, not scowl's: one line naming
    the store's error, exit 1, no traceback file.

    Args:
        error: the exception.

    A store past its ``maxmemory`` (``OOM``, with the ``noeviction`` policy
    scowl asks for: evicting tiles would change values silently) is one line
    too: it needs more memory, not a retry.

    A store that answers again as another server process than the job
    began with (``writer.redisio.StoreRestarted``: a backfill's writes wait
    out an outage, ``--store-retry``) stops the job with one line as well.

    Returns:
        ``"the store became unavailable (<error>): run the command again once it answers (...)"``,
        ``"the store is out of memory (...)"``, ``"the store restarted under the job (...)"``, or None.
    """
    from writer.redisio import RESTARTED_TEXT, store_full, store_outage

    try:
        restarted = RESTARTED_TEXT in str(error)
        outage = None if restarted else store_outage(error)
        full = outage is None and not restarted and store_full(error)
    except Exception:  # noqa: BLE001 -- the JVM is gone: the general summary
        return None
    again = ("a backfill records no coverage for a run cut short, and its re-run overwrites what it wrote, "
             "never adds")
    if restarted:
        return (f"{RESTARTED_TEXT}, so the run stopped: what the store had not persisted of the run's writes may "
                f"be lost; run the command again ({again})")
    if full:
        return ("the store is out of memory (its maxmemory, with noeviction: it refuses writes rather than "
                f"evict state): give it more memory, then run the command again ({again})")
    if outage is None:
        return None
    return f"the store became unavailable ({outage}): run the command again once it answers ({again})"


def input_read_failure(error: BaseException) -> str | None:
    """The message for a Spark job that failed reading an input file, or None for any other failure.

    Spark raises its error class ``FAILED_READ_FILE`` (``[FAILED_READ_FILE.NO_HINT] Encountered error
    while reading file <path>.``) when a data source cannot read an input file: a Parquet file whose
    pages are corrupt, a compressed file cut short past the part ``writer.sources.estimate_events``
    reads before the job. That is a user error (SPEC §6: exit 1, a diagnostic, no traceback).

    Args:
        error: the exception (a py4j ``Py4JJavaError`` or a PySpark captured exception).

    Returns:
        ``"cannot read an input file: <Spark's message> (<innermost cause>)"``, each cut to its first
        line, or None.
    """
    causes = _java_causes(error)
    try:
        texts = [str(c.getMessage() or "") for c in causes]
        at = next((i for i, t in enumerate(texts) if "[FAILED_READ_FILE" in t), None)
        if at is None:
            return None
        read = texts[at]
        line = read[read.index("[FAILED_READ_FILE"):].splitlines()[0].split("  SQLSTATE:")[0].strip()
        if at == len(causes) - 1:  # the read error is the innermost cause: nothing more to name
            return f"cannot read an input file: {line}"
        why = _java_line(causes[-1])
    except Exception:  # noqa: BLE001 -- the JVM is gone: the general summary
        return None
    return f"cannot read an input file: {line} ({why})"
