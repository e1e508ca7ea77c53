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
from scowl.commands import init as init_command
from scowl.commands import explain as explain_command
from scowl.commands import ui as ui_command
from scowl.common import EXIT_USER_ERROR, UserError, console, print_error
from scowl.failures import failure_summary, input_read_failure, store_failure  # noqa: F401 -- used here and re-exported
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

def version_text() -> str:
    """``scowl <version> (Python <v>, PySpark <v>, <embedded store's version line>)`` for ``scowl --version``.

    Versions come from the installed distributions
    (``serving.app.installed_version``, as ``/metrics``' ``scowl_build_info``)
    and the embedded store's ``--version`` (``scowl.embedded.server_binary``;
    "no embedded store" when none is found), so that a bug report names
    what ran.
    """
    import platform
    import subprocess

    from scowl.embedded import EmbeddedStoreError, server_binary
    from serving.app import installed_version as installed

    try:
        line = subprocess.run([server_binary(), "--version"], capture_output=True, text=True, timeout=10).stdout
        store = " ".join(line.split()[:3]) or "store version unknown"  # "Valkey server v=8.1.8"
    except (EmbeddedStoreError, OSError, subprocess.SubprocessError):
        store = "no embedded store"
    return (f"scowl {installed('scowl')} (Python {platform.python_version()}, PySpark {installed('pyspark')}, "
            f"{store})")


def _print_version(value: bool) -> None:
    """``--version``'s callback: print :func:`version_text` and exit 0."""
    if value:
        console.print(version_text(), highlight=False)
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print the versions of scowl, Python, PySpark and the embedded store, "
                                            "and exit.")) -> None:
    """The options before a command (``--version``)."""


#: The commands in the order ``scowl --help`` lists them (the order of a first session).
COMMANDS = (
    ("init", init_command.init),
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
        known = input_read_failure(e) or store_failure(e)
        if known is not None:  # an input file Spark could not read, a store gone: the user's to fix, no traceback
            print_error(known)
            sys.exit(EXIT_USER_ERROR)
        print_error(f"{failure_summary(e)}\n(an unexpected failure; its traceback is in {save_traceback(e)}, "
                    "and SCOWL_TRACEBACK=1 prints it here)")
        sys.exit(EXIT_USER_ERROR)


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
