"""Take the README's screenshots of the built site with headless Chromium, offline.

Usage: .venv/bin/python tools/screenshots.py [SITE_DIR] [OUT_DIR]
(defaults: _build/html and docs/screenshots)

Each page is shown at 390 x 844 in the dark theme (``<name>-dark-390.png``) and at 1,280 x 900 in
the light theme (``<name>-light.png``); the cards also at the two other combinations. Every request
off the local server is blocked, as in tests/site, so a screenshot shows what an offline reader
sees. Chromium is Debian's (/usr/bin/chromium, or $CHROMIUM).
"""

from __future__ import annotations

import functools
import http.server
import os
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = {
    "home": "book/intro.html",
    "p08-card": "book/p08-card.html",
    "p22-card": "book/p22-card.html",
    "p08-explorer": "notebooks/p08-05-routing-demo.html",
    "lab1": "notebooks/labs/lab1-vllm-prefix-caching.html",
}
PHONE_DARK = ("dark", 390, 844)
DESKTOP_LIGHT = ("light", 1280, 900)
EXTRA = {"p08-card": [("dark", 1280, 900), ("light", 390, 844)]}
EXTRA["p22-card"] = EXTRA["p08-card"]
EXPLORER_ID = {"p08-explorer": "kvlab-routing-explorer"}


def _name(page: str, mode: str, width: int) -> str:
    return f"{page}-{mode}{'-390' if width == 390 else ''}.png"


def main(site: Path, out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(site))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}/"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    exe = os.environ.get("CHROMIUM") or "/usr/bin/chromium"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=exe, args=["--no-sandbox", "--headless", "--disable-gpu"]
        )
        for page_name, rel in PAGES.items():
            for mode, width, height in [PHONE_DARK, DESKTOP_LIGHT, *EXTRA.get(page_name, [])]:
                page = browser.new_page(viewport={"width": width, "height": height})
                page.add_init_script(
                    f"localStorage.setItem('mode', '{mode}'); "
                    f"localStorage.setItem('theme', '{mode}');"
                )
                page.route(
                    "**/*",
                    lambda r: r.continue_() if r.request.url.startswith(base) else r.abort(),
                )
                page.goto(base + rel, wait_until="load", timeout=60_000)
                if page_name in EXPLORER_ID:
                    root = f"#{EXPLORER_ID[page_name]}"
                    page.wait_for_selector(f"{root}[data-ready='1'] svg", timeout=60_000)
                    page.locator(root).scroll_into_view_if_needed()
                page.wait_for_timeout(500)
                target = out / _name(page_name, mode, width)
                page.screenshot(path=str(target))
                written.append(target)
                page.close()
        browser.close()
    srv.shutdown()
    return written


if __name__ == "__main__":
    site = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "_build" / "html"
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "docs" / "screenshots"
    for path in main(site.resolve(), out.resolve()):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
