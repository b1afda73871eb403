"""Fixtures for the browser test of the built site: the site folder, a local server, Chromium.

The site is ``_build/html`` under the repository root (``make test-site`` builds it first), or the
folder named by the environment variable ``SITE_DIR``. Chromium is Debian's (``/usr/bin/chromium``,
or ``CHROMIUM``); Playwright's own browser download is never used. Without Chromium the browser
tests are skipped, with the reason; without the site they fail, saying how to build it.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_path() -> str | None:
    """Debian's Chromium, or the browser named by $CHROMIUM; None when absent."""
    for cand in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if cand and Path(cand).exists():
            return cand
    return None


def site_dir() -> Path:
    return Path(os.environ.get("SITE_DIR") or ROOT / "_build" / "html").resolve()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


class SiteServer:
    """Serve a folder on a free localhost port from a background thread."""

    def __init__(self, folder: Path):
        handler = functools.partial(_QuietHandler, directory=str(folder))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.folder = folder
        self.base = f"http://127.0.0.1:{port}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="session")
def site() -> Path:
    folder = site_dir()
    if not (folder / "index.html").is_file():
        pytest.fail(
            f"no built site at {folder} (index.html missing): build it first with `make book` "
            "(make test-site does), or point SITE_DIR at a built _build/html",
            pytrace=False,
        )
    return folder


@pytest.fixture(scope="session")
def server(site):
    srv = SiteServer(site)
    yield srv
    srv.close()


@pytest.fixture(scope="session")
def browser():
    exe = chromium_path()
    if exe is None:
        pytest.skip(
            "Chromium is not installed (/usr/bin/chromium): `apt-get install chromium` to run the "
            "browser checks (.ci/run does)"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # pragma: no cover - playwright is in requirements.txt
        pytest.skip(f"playwright is not installed: {exc}")
    profile = tempfile.mkdtemp(prefix="site-test-profile-")
    pw = sync_playwright().start()
    context = pw.chromium.launch_persistent_context(
        profile,
        executable_path=exe,
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1280, "height": 900},
    )
    try:
        yield context
    finally:
        context.close()
        pw.stop()
        shutil.rmtree(profile, ignore_errors=True)


def _renderer_died(exc: BaseException) -> bool:
    """True for the errors Playwright raises when a page's renderer goes away under it (killed by
    the kernel's out-of-memory killer, which picks Chromium's renderers first, or crashed): the
    page, not the check, is gone."""
    name = type(exc).__name__
    text = str(exc)
    return name == "TargetClosedError" or "Target crashed" in text or "Page crashed" in text


def on_fresh_page(context, visit, attempts: int = 2):
    """Run ``visit(page)`` on a new page and close it; if the page's renderer dies mid-visit
    (TargetClosedError, "Target crashed"), run the whole visit again on a fresh page, once. A
    check that fails is never retried: only a page that disappeared is. The second death raises,
    saying so."""
    for attempt in range(attempts):
        page = context.new_page()
        crashed: list[bool] = []
        page.on("crash", lambda _p, seen=crashed: seen.append(True))
        try:
            return visit(page)
        except Exception as exc:
            if not _renderer_died(exc) or attempt == attempts - 1:
                if _renderer_died(exc):
                    raise RuntimeError(
                        f"the page's renderer died {attempts} times"
                        f"{' (crashed)' if crashed else ''}: {exc}"
                    ) from exc
                raise
            print(f"renderer died ({'crash' if crashed else type(exc).__name__}); visiting again")
        finally:
            try:
                page.close()
            except Exception:  # already gone with its renderer
                pass
    raise AssertionError("unreachable")


def set_up_page(page, server, viewport=None, dark: bool = False):
    """Size ``page`` (when ``viewport`` is given), pick its theme and block every request that does
    not go to the test server; return the page."""
    if viewport:
        page.set_viewport_size(viewport)
    mode = "dark" if dark else "light"
    page.add_init_script(
        f"localStorage.setItem('mode', '{mode}'); localStorage.setItem('theme', '{mode}');"
    )
    page.route(
        "**/*", lambda r: r.continue_() if r.request.url.startswith(server.base) else r.abort()
    )
    return page
