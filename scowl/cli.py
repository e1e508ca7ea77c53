"""The ``scowl`` command (SPEC §6): the typer app, its help format, the commands' registration, the entry point.

Layout (no import cycles inside ``scowl``): this module imports the command
modules ``scowl.commands.*`` (one per command) and registers their functions
on :data:`app`; the command modules import the shared helpers
(``scowl.common``: console, errors, exit codes, topology, store;
``scowl.progress``; ``scowl.signals``), never this module.

Exit codes: 0 success, 1 user error (a diagnostic or a clear message, never a
traceback), 2 usage error (click), ``128 + n`` when stopped by signal ``n``
(SIGINT, SIGTERM, SIGHUP; ``scowl.signals``).

Help is plain text (no boxes, no colour) that reads the same at 80 columns
and through a pipe: ``scowl --help``, ``scowl COMMAND --help``.
"""

from __future__ import annotations

import os
import sys

import typer
from typer.core import TyperCommand

from scowl.commands import backfill, check, demo, plan, replay, serve, status, stream, warm
from scowl.commands import explain as explain_command
from scowl.commands import ui as ui_command
from scowl.common import EXIT_USER_ERROR, UserError, console, print_error
from scowl.signals import Stopped, signals_stop

__all__ = ["app", "console", "main"]


class ScowlCommand(TyperCommand):
    """A typer command whose help shows each option's metavar (``--port PORT``) and no type placeholders.

    Typer's own plain help writes ``{DIR}`` for a required argument and
    ``<int>``, ``<bool>`` beside every option; this class writes click's
    classic form instead: ``Usage: scowl serve [OPTIONS] DIR``, then the
    arguments and the options with their help, default and ``[required]``.
    """

    def collect_usage_pieces(self, ctx) -> list[str]:
        """Return the usage line's pieces: ``[OPTIONS]`` and each argument's metavar (``[DIR]`` if optional)."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if _is_argument(param):
                name = param.metavar or param.name.upper()
                name = name if param.required else f"[{name}]"
                pieces.append(name + ("..." if param.nargs != 1 else ""))
        return pieces

    def format_options(self, ctx, formatter) -> None:
        """Write the ``Arguments`` and ``Options`` sections (:func:`help_record` per parameter)."""
        args, opts = [], []
        for param in self.get_params(ctx):
            record = help_record(param)
            if record is not None:
                (args if _is_argument(param) else opts).append(record)
        for title, rows in (("Arguments", args), ("Options", opts)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _is_argument(param) -> bool:
    """Whether a click parameter is a positional argument (typer may vendor click: no ``isinstance``)."""
    return getattr(param, "param_type_name", None) == "argument"


def help_record(param) -> tuple[str, str] | None:
    """Return ``(names, help)`` of one parameter for ``--help``, or ``None`` if it is hidden.

    ``names``: an argument's metavar (``DIR``), or an option's flags and, if
    it takes a value, its metavar (``--events PATH``); ``help``: the help
    text, then ``[default: …]`` for an option with a value default and
    ``[required]``.

    Args:
        param: a click parameter (an option or an argument; typer's classes).
    """
    if getattr(param, "hidden", False):
        return None
    is_option = not _is_argument(param)
    if not is_option:
        names = param.metavar or param.name.upper()
    else:
        names = ", ".join(param.opts)
        if param.secondary_opts:
            names += " / " + ", ".join(param.secondary_opts)
        if not param.is_flag and not param.count:
            names += " " + (param.metavar or param.name.upper())
    text = getattr(param, "help", None) or ""
    extra = []
    if (is_option and param.show_default is not False and not param.is_flag
            and param.default not in (None, (), [])):
        extra.append(f"default: {param.default}")
    if param.required:
        extra.append("required")
    if extra:
        text = f"{text}  [{'; '.join(extra)}]" if text else f"[{'; '.join(extra)}]"
    return names, text


app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
    help="Scowl feature service: compile feature definitions, backfill and stream them with Spark into "
         "Redis tiles, serve them over HTTP, replay them into a training set. Store: SCOWL_REDIS_URL, "
         "else an embedded server under SCOWL_HOME (default ./.scowl). Semantics: docs/semantics.md.",
)

#: The commands in the order ``scowl --help`` lists them (the order of a first session).
COMMANDS = (
    ("check", check.check),
    ("plan", plan.plan),
    ("explain", explain_command.explain),
    ("backfill", backfill.backfill),
    ("serve", serve.serve),
    ("stream", stream.stream),
    ("replay", replay.replay),
    ("status", status.status),
    ("demo", demo.demo),
    ("ui", ui_command.ui),
    ("warm", warm.warm),
)
for _name, _function in COMMANDS:
    app.command(_name, cls=ScowlCommand)(_function)


def main() -> None:
    """Console entry point (``scowl``, ``python -m scowl``): run the app with the exit codes of the module docstring.

    A :class:`scowl.common.UserError` prints ``error: <message>`` on stderr
    and exits 1; a stop signal (:class:`scowl.signals.Stopped`), after the
    command's clean-up, prints ``scowl: stopped by SIG…`` on stderr and
    exits ``128 + n``. Any other exception prints one line
    (:func:`failure_summary`) and where its traceback was saved
    (:func:`save_traceback`), and exits 1; with ``SCOWL_TRACEBACK`` set it is
    raised as it is.
    """
    try:
        with signals_stop():
            app(prog_name="scowl")
    except UserError as e:
        print_error(str(e))
        sys.exit(EXIT_USER_ERROR)
    except Stopped as e:
        sys.stderr.write(f"scowl: stopped by {e.name}\n")
        sys.exit(e.exit_code)
    except Exception as e:  # a failure no command turned into a UserError: summarized, its traceback in a file
        if os.environ.get("SCOWL_TRACEBACK"):
            raise
        unreadable = input_read_failure(e)
        if unreadable is not None:  # an input file Spark could not read: the user's to fix, no traceback
            print_error(unreadable)
            sys.exit(EXIT_USER_ERROR)
        print_error(f"{failure_summary(e)}\n(an unexpected failure; its traceback is in {save_traceback(e)}, "
                    "and SCOWL_TRACEBACK=1 prints it here)")
        sys.exit(EXIT_USER_ERROR)


def failure_summary(error: BaseException) -> str:
    """One line for an unexpected failure: a Spark job's root cause (its Java exception), else the exception.

    Args:
        error: the exception (a py4j ``Py4JJavaError`` for a failed Spark call).

    Returns:
        ``"Spark failed: <Java class>: <message>"`` for a Java exception (the
        innermost cause, whose message names what went wrong), else
        ``"<exception class>: <message>"``; each cut to its first line.
    """
    # py4j's Py4JJavaError holds the Java exception as java_exception, PySpark's captured exceptions as _origin
    java = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    if java is not None:
        try:
            cause = java
            for _ in range(50):  # the innermost cause (bounded: a cause chain can loop)
                nxt = cause.getCause()
                if nxt is None:
                    break
                cause = nxt
            text = f"{cause.getClass().getName()}: {cause.getMessage()}"
            return "Spark failed: " + text.splitlines()[0]
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
        read = next((t for t in texts if "[FAILED_READ_FILE" in t), None)
        if read is None:
            return None
        line = read[read.index("[FAILED_READ_FILE"):].splitlines()[0]
        line = line.split("  SQLSTATE:")[0].strip()
        root = causes[-1]
        why = f"{root.getClass().getName()}: {root.getMessage()}".splitlines()[0]
    except Exception:  # noqa: BLE001 -- the JVM is gone: the general summary
        return None
    return f"cannot read an input file: {line} ({why})" if "[FAILED_READ_FILE" not in why else \
        f"cannot read an input file: {line}"


def save_traceback(error: BaseException) -> str:
    """Write ``error``'s traceback to a new file in the temporary directory; return its path (or a note).

    Args:
        error: the exception being handled.

    Returns:
        The file's path, ``scowl-error-<time>-<pid>.txt``, or ``"(not saved: ..)"``.
    """
    import tempfile
    import time
    import traceback

    try:
        fd, path = tempfile.mkstemp(prefix=f"scowl-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-",
                                    suffix=".txt")
        with os.fdopen(fd, "w") as f:
            f.write(f"scowl {' '.join(sys.argv[1:])}\n\n")
            traceback.print_exception(error, file=f)
        return path
    except OSError as e:
        return f"(not saved: {e})"
