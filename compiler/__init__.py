"""The Scowl compiler: ``.scowl`` files -> :class:`~compiler.plan.Plan` (SPEC §1, §2, §6).

Public API::

    from compiler import compile_dir, compile_sources

    result = compile_dir("features/")          # every *.scowl under the directory
    if result.plan is None:
        print(result.render())                 # diagnostics with source lines
    else:
        result.plan.dumps()                    # `scowl plan --json`

Stages (one module each): :mod:`compiler.parser` (text -> :mod:`compiler.nodes`),
:mod:`compiler.check` (names, types, clauses, cycles), :mod:`compiler.planner`
(-> plan). Diagnostics and their codes: :mod:`compiler.diagnostics`.

Source: SPEC §1 (the plan contract), §2 (language), §2.5 (diagnostics), §6 (CLI).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from pathlib import Path

from compiler.diagnostics import Diagnostic, diag, render_all, sort_key
from compiler.plan import Plan, Span

__all__ = ["CompileResult", "compile_dir", "compile_sources", "Diagnostic"]


@dataclass
class CompileResult:
    """The outcome of compiling a topology.

    Attributes:
        plan: the plan, or ``None`` iff there is any diagnostic.
        diagnostics: all errors, sorted by file and position.
        sources: file name (relative, ``/``-separated) -> text.
    """

    plan: Plan | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether compilation succeeded (no diagnostics)."""
        return self.plan is not None

    def render(self) -> str:
        """Render every diagnostic with its source line and caret; ``""`` when there are none."""
        return render_all(self.diagnostics, self.sources)


def compile_sources(sources: dict[str, str]) -> CompileResult:
    """Compile a topology given as ``{file name: text}``.

    Files are read in sorted name order (SPEC §2.1); ``event`` sections may be
    reopened across files; each file starts outside any section.

    Args:
        sources: file name (used in spans) -> Scowl text.

    Returns:
        A :class:`CompileResult`; ``plan`` is ``None`` iff ``diagnostics`` is
        non-empty. Never raises: an unexpected failure becomes an
        ``E9999 internal-error`` diagnostic.

    Source: SPEC §2, §2.5.
    """
    sources = dict(sorted(sources.items()))
    return _compile(sources, [])


def compile_dir(path: str | Path) -> CompileResult:
    """Compile every ``*.scowl`` file under ``path`` (recursive), sorted by relative path.

    Args:
        path: topology directory (a single ``.scowl`` file is accepted too).

    Returns:
        A :class:`CompileResult` whose file names are ``/``-separated paths
        relative to ``path``. A missing directory, one with no ``.scowl``
        file (E0111) or an unreadable / non-UTF-8 file (E0110) gives a
        diagnostic, not an exception.

    Source: SPEC §2.1, §6 (``scowl check DIR``).
    """
    root = Path(path)
    pre: list[Diagnostic] = []
    sources: dict[str, str] = {}
    try:
        if root.is_file():
            files = [(root.name, root)]
        else:
            files = sorted(
                ((p.relative_to(root).as_posix(), p) for p in root.rglob("*.scowl") if p.is_file()),
                key=lambda x: x[0],
            )
        if not files:
            pre.append(diag("E0111", Span(str(root), 1, 1, 1, 1), f"no .scowl files under '{root}'",
                            "a topology is a directory of *.scowl files"))
        for name, p in files:
            try:
                data = p.read_bytes()
            except OSError as e:
                pre.append(diag("E0110", Span(name, 1, 1, 1, 1), f"cannot read file: {e.strerror or e}"))
                continue
            try:
                sources[name] = data.decode("utf-8")
            except UnicodeDecodeError as e:
                before = data[: e.start].decode("utf-8", errors="replace")
                line = before.count("\n") + 1
                col = len(before) - (before.rfind("\n") + 1) + 1
                pre.append(diag("E0110", Span(name, line, col, line, col + 1),
                                f"file is not UTF-8 (byte {data[e.start]:#04x} at offset {e.start})",
                                "save the file as UTF-8"))
                sources[name] = data.decode("utf-8", errors="replace")
    except Exception as e:  # noqa: BLE001 -- never raise out of the compiler
        pre.append(_internal(e, str(root)))
    return _compile(sources, pre)


def _internal(e: BaseException, file: str) -> Diagnostic:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
    return diag("E9999", Span(file, 1, 1, 1, 1), f"internal compiler error: {type(e).__name__}: {e}{where}",
                "this is a bug in scowl; please report it with the source that triggers it")


def _compile(sources: dict[str, str], pre: list[Diagnostic]) -> CompileResult:
    # imported here so that `import compiler` stays cheap for plan-only users
    from compiler.check import check
    from compiler.parser import parse_file
    from compiler.planner import build_plan

    diags = list(pre)
    plan: Plan | None = None
    first = next(iter(sources), "<topology>")
    try:
        files = []
        for name, text in sources.items():
            f, d = parse_file(name, text)
            files.append(f)
            diags.extend(d)
        checked = check(files, sources)
        diags.extend(checked.diagnostics)
        if not diags:
            plan = build_plan(checked)
    except Exception as e:  # noqa: BLE001 -- never raise out of the compiler
        diags.append(_internal(e, first))
        plan = None
    seen: set = set()
    unique = []
    for d in sorted(diags, key=sort_key):
        k = (d.code, d.span, d.message)
        if k not in seen:
            seen.add(k)
            unique.append(d)
    return CompileResult(plan if not unique else None, unique, dict(sources))
