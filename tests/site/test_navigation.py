"""Navigation on a phone and on a desktop (issue 36, item 1).

The page has two ``.primary-toggle`` buttons (the top bar's and the article header's) and two
``.secondary-toggle`` buttons; pydata-sphinx-theme 0.17.1 binds only the first of each, which is
hidden, so the visible buttons did nothing (pydata/pydata-sphinx-theme#2451). ``kvlab-site.js``
binds every one. These tests tap the visible buttons as a reader does:

- at 390 px the menu button opens the site navigation drawer and the page-contents button the
  page's contents drawer; a tap outside the drawer (on the dimmed page) closes it, and so does
  Escape; the drawer lists the links it should;
- at 1,280 px the sidebar button hides the primary sidebar and a second tap shows it again.
"""

from __future__ import annotations

import pytest
from conftest import on_fresh_page, set_up_page

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
PAGES = ["book/p08-card.html", "notebooks/labs/lab1-vllm-prefix-caching.html"]

# The visible buttons of a kind, as indexes among document.querySelectorAll(selector).
VISIBLE_JS = """(sel) => Array.from(document.querySelectorAll(sel)).map((e, i) => {
  const r = e.getBoundingClientRect(); const s = getComputedStyle(e);
  return (r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none') ? i : -1;
}).filter(i => i >= 0)"""

DIALOG_JS = """(id) => { const d = document.getElementById(id);
  if (!d) return null;
  const r = d.getBoundingClientRect();
  return {open: d.open, width: Math.round(r.width), links: d.querySelectorAll('a').length}; }"""


_set_up = set_up_page


def _tap_visible(page, selector: str) -> None:
    shown = page.evaluate(VISIBLE_JS, selector)
    assert len(shown) == 1, f"{len(shown)} visible {selector} buttons (expected one)"
    page.locator(selector).nth(shown[0]).click()


def _drawer_opens_and_closes(page, selector: str, dialog_id: str, how: str) -> list[str]:
    """Tap the visible ``selector`` button; report what fails: the drawer not opening, empty, or not
    closing (``how``: 'backdrop' taps the dimmed page beside the drawer, 'escape' presses Esc)."""
    problems = []
    before = page.evaluate(DIALOG_JS, dialog_id)
    if before is None:
        return [f"no #{dialog_id} on the page"]
    if before["open"]:
        problems.append(f"#{dialog_id} is open before any tap")
    _tap_visible(page, selector)
    page.wait_for_timeout(300)
    opened = page.evaluate(DIALOG_JS, dialog_id)
    if not opened["open"]:
        return [*problems, f"tapping {selector} did not open #{dialog_id}"]
    if opened["links"] == 0:
        problems.append(f"#{dialog_id} opened empty (no links)")
    if how == "backdrop":
        # the drawer hugs one side: tap the dimmed page on the other side
        x = PHONE["width"] - 10 if dialog_id.startswith("pst-primary") else 10
        page.mouse.click(x, PHONE["height"] // 2)
    else:
        page.keyboard.press("Escape")
    page.wait_for_timeout(300)
    if page.evaluate(DIALOG_JS, dialog_id)["open"]:
        problems.append(f"#{dialog_id} stayed open after {how}")
    return problems


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
@pytest.mark.parametrize("rel", PAGES)
@pytest.mark.parametrize(
    "selector,dialog_id",
    [
        (".primary-toggle", "pst-primary-sidebar-modal"),
        (".secondary-toggle", "pst-secondary-sidebar-modal"),
    ],
    ids=["menu", "contents"],
)
def test_phone_drawers_open_and_close(site, server, browser, rel, selector, dialog_id, dark):
    def visit(page):
        _set_up(page, server, PHONE, dark)
        page.goto(server.base + rel, wait_until="load")
        problems = _drawer_opens_and_closes(page, selector, dialog_id, "backdrop")
        # a second time, closed with Escape: the drawer can be used more than once
        problems += _drawer_opens_and_closes(page, selector, dialog_id, "escape")
        # the sidebar's content went back where it came from
        if not page.evaluate("() => document.querySelectorAll('#pst-primary-sidebar a').length"):
            problems.append("the primary sidebar lost its links after the drawer closed")
        return problems

    problems = on_fresh_page(browser, visit)
    assert not problems, f"{rel} at 390 px, {selector}: " + "; ".join(problems)


SIDEBAR_JS = """() => { const s = document.getElementById('pst-primary-sidebar');
  const r = s.getBoundingClientRect(); const c = getComputedStyle(s);
  return (r.width > 0 && c.visibility !== 'hidden' && c.display !== 'none'); }"""


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
@pytest.mark.parametrize("rel", PAGES)
def test_desktop_sidebar_button_hides_and_shows_the_sidebar(site, server, browser, rel, dark):
    def visit(page):
        _set_up(page, server, DESKTOP, dark)
        page.goto(server.base + rel, wait_until="load")
        states = [page.evaluate(SIDEBAR_JS)]
        for _ in range(2):
            _tap_visible(page, ".primary-toggle")
            page.wait_for_timeout(400)
            states.append(page.evaluate(SIDEBAR_JS))
        modal_open = page.evaluate(DIALOG_JS, "pst-primary-sidebar-modal")["open"]
        return states, modal_open

    states, modal_open = on_fresh_page(browser, visit)
    assert states == [True, False, True], (
        f"{rel} at 1,280 px: primary sidebar shown before/after one tap/after two: {states}"
    )
    assert not modal_open, "at 1,280 px the sidebar button opened the phone drawer"
