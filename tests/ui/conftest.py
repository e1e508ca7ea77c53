"""Fixtures of the explorer's tests: a real Chromium driven by Playwright, one browser for the package.

The browser is Debian's ``chromium`` (``/usr/bin/chromium``), launched by
Playwright for Python with ``executable_path`` (no ``playwright install``
download). :func:`chromium` finds it; if it is missing and ``apt-get``
exists, it installs Debian's package (``apt-get update && apt-get install
-y --no-install-recommends chromium``, as root or through ``sudo -n``),
printing what it does. Only where no package manager can be used are the
browser tests skipped, and then loudly: the reason and the number of tests
it skipped close the terminal summary (:func:`pytest_terminal_summary`).

The browser lives for this package only (``scope="package"``), so Playwright's
event loop is gone before other packages' tests run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

#: Where Debian's package puts the browser (and what other distributions call it).
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
#: Chromium's flags for the tests: headless, no sandbox (root in a container), nothing fetched from outside.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: Text every skip of a browser test starts with (counted by :func:`pytest_terminal_summary`).
SKIP_PREFIX = "BROWSER TESTS NOT RUN"

_skip_reason: list[str] = []


def find_chromium() -> str | None:
    """Return the path of an installed Chromium (:data:`CHROMIUM_PATHS`, then ``PATH``), or ``None``."""
    for p in CHROMIUM_PATHS:
        if os.access(p, os.X_OK):
            return p
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _say(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(text, yellow=True, bold=True)
    else:
        print(text, flush=True)


def install_chromium(config: pytest.Config) -> str:
    """Install Debian's ``chromium`` with ``apt-get`` (root, else ``sudo -n``); return its path.

    Returns:
        The browser's path.

    Raises:
        pytest.skip.Exception: no package manager can be used here (no
            ``apt-get``, or neither root nor password-less sudo).
        pytest.fail.Exception: ``apt-get`` ran but no browser came of it.
    """
    if shutil.which("apt-get") is None:
        pytest.skip(f"{SKIP_PREFIX}: no chromium at {CHROMIUM_PATHS[0]} and no apt-get to install it")
    if os.geteuid() == 0:
        prefix: list[str] = []
    elif shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        prefix = ["sudo", "-n"]
    else:
        pytest.skip(f"{SKIP_PREFIX}: no chromium, and apt-get needs root (not root, no password-less sudo)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    capture = config.pluginmanager.get_plugin("capturemanager")
    for cmd in (prefix + ["apt-get", "update"],
                prefix + ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]):
        _say(config, f"\ntests/ui: no chromium found; running: {' '.join(cmd)}")
        if capture is not None:
            with capture.global_and_fixture_disabled():
                rc = subprocess.run(cmd, env=env).returncode
        else:
            rc = subprocess.run(cmd, env=env).returncode
        if rc != 0:
            pytest.fail(f"tests/ui: `{' '.join(cmd)}` exited {rc}: cannot install chromium", pytrace=False)
    path = find_chromium()
    if path is None:
        pytest.fail("tests/ui: apt-get installed chromium but no browser is at /usr/bin/chromium", pytrace=False)
    _say(config, f"tests/ui: installed {path}")
    return path


@pytest.fixture(scope="session")
def chromium(request) -> str:
    """The path of Chromium, installed from Debian's packages if missing (module docstring)."""
    if _skip_reason:
        pytest.skip(_skip_reason[0])
    try:
        path = find_chromium() or install_chromium(request.config)
    except pytest.skip.Exception as e:
        _skip_reason.append(str(e.msg))
        raise
    return path


@pytest.fixture(scope="package")
def browser(chromium):
    """One headless Chromium for the package's tests (Playwright's sync API)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        reason = f"{SKIP_PREFIX}: playwright is not installed (pip install -e '.[test]')"
        _skip_reason.append(reason)
        pytest.skip(reason)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def page(browser):
    """A fresh page (own context: no cookies from other tests) at 1400x900; fails the test on a script error.

    Script errors are uncaught exceptions and ``console.error`` calls; the
    browser's own "Failed to load resource" notes (a 401 or 404 answered on
    purpose) are not.
    """
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text)
          if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
    try:
        yield pg
    finally:
        context.close()
    assert not errors, f"script errors in the page: {errors}"


@pytest.fixture()
def shot(page, tmp_path: Path):
    """``shot(name)``: save the page as a full-page PNG ``tmp_path / f"{name}.png"``; returns the path."""

    def take(name: str, full_page: bool = True) -> Path:
        """Save the page's PNG; return its path."""
        path = tmp_path / f"{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        assert path.stat().st_size > 1000
        return path

    return take


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Close the run with a loud line when the browser tests were skipped (how many, and why)."""
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if SKIP_PREFIX in str(getattr(r, "longrepr", ""))]
    if not skipped and not _skip_reason:
        return
    terminalreporter.section("browser tests skipped", sep="!", red=True, bold=True)
    reason = _skip_reason[0] if _skip_reason else SKIP_PREFIX
    terminalreporter.write_line(f"{len(skipped)} browser tests of tests/ui were skipped: {reason}", red=True, bold=True)
