"""The browser checks survive a page whose renderer dies, and only that (conftest.on_fresh_page).

On a loaded machine the kernel's out-of-memory killer picks Chromium's renderers first; Playwright
then raises TargetClosedError (or "Target crashed") from whatever the test was doing on that page.
The visit is repeated once on a fresh page; a check that fails is not repeated.
"""

from __future__ import annotations

import pytest
from conftest import on_fresh_page


def test_a_crashed_renderer_is_visited_again(server, browser):
    calls = []

    def visit(page):
        calls.append(1)
        if len(calls) == 1:
            with page.expect_event("crash", timeout=20_000):
                try:
                    page.goto("chrome://crash", timeout=20_000)  # Chromium kills the renderer
                except Exception:  # the navigation fails with the renderer
                    pass
            page.evaluate("() => 1")  # raises: the renderer is gone
        page.goto(server.base + "book/intro.html", wait_until="load")
        return page.evaluate("() => document.title")

    title = on_fresh_page(browser, visit)
    assert len(calls) == 2 and title


def test_a_closed_page_is_visited_again(server, browser):
    calls = []

    def visit(page):
        calls.append(1)
        if len(calls) == 1:
            page.close()
            page.evaluate("() => 1")  # TargetClosedError
        return "second visit"

    assert on_fresh_page(browser, visit) == "second visit" and len(calls) == 2


def test_a_failing_check_is_not_retried(browser):
    calls = []

    def visit(page):
        calls.append(1)
        raise AssertionError("the check failed")

    with pytest.raises(AssertionError, match="the check failed"):
        on_fresh_page(browser, visit)
    assert len(calls) == 1


def test_two_deaths_fail_saying_so(browser):
    def visit(page):
        page.close()
        page.evaluate("() => 1")

    with pytest.raises(RuntimeError, match="renderer died 2 times"):
        on_fresh_page(browser, visit)
