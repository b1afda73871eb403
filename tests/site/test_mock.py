"""The mock interviews in Chromium (issue 35, item 4: "practise it, in the browser").

For each card, a candidate answers one mock interview end to end, with the keyboard only: starts
and stops the timer (on Playwright's clock, so no test waits on real time), types notes, opens the
model answer to the card's question, ticks a known subset of its points, then reveals each
follow-up in turn with the "Next follow-up" button, opens its answer and ticks a known subset. The
score of every part and the total shown in the live region must equal the ticks. The run is done
on a desktop in the light theme and at 390 px in the dark theme; there, nothing is wider than the
screen and every text reaches WCAG AA contrast (the measure of ``test_dark_contrast.py``).

Also: every point of the data file is a checkbox on the page and every model answer links to its
follow-up's section; the notes survive a reload and the page still works where localStorage
throws; without the script the page reads as a list of questions with their answers folded.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from conftest import on_fresh_page, set_up_page
from test_dark_contrast import CONTRAST_JS
from test_reader import OVERFLOW_JS
from test_site import parse_html

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "_ext"))

import kvlab_mock  # noqa: E402

CARDS = ["p08", "p22"]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
SCORE = re.compile(r"Covered (\d+) of (\d+) points?\.")
OVERALL = re.compile(r"Overall, over (\d+) parts? so far: (\d+) of (\d+) points? \((\d+) %\)\.")


def data(card: str) -> dict:
    return kvlab_mock.load(ROOT / "book" / "mock" / f"{card}.yml")


def plain(text: str) -> str:
    return kvlab_mock.plain(text)


def ticks_for(part: int, n_points: int) -> list[int]:
    """The points the candidate ticks in a part: a known subset that differs from part to part
    (none in every fifth part, all in the part after it)."""
    if part % 5 == 4:
        return []
    if part % 5 == 0 and part:
        return list(range(n_points))
    return [i for i in range(n_points) if (i + part) % 3 == 0]


def _open(page, server, card, viewport, dark, errors):
    set_up_page(page, server, viewport, dark)
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.clock.install()
    page.goto(server.base + f"book/{card}-mock.html", wait_until="load")
    page.wait_for_selector(f"#kvlab-mock-{card}.kvlab-mock-ready", timeout=20_000)
    return page.locator(f"#kvlab-mock-{card}")


def _press(page, locator, key):
    """Focus ``locator`` and press ``key``, as a keyboard user does after tabbing to it."""
    locator.focus()
    page.keyboard.press(key)


def _interview(page, server, card, viewport, dark):
    """Answer the whole mock interview with the keyboard; return what a check needs."""
    errors: list[str] = []
    spec = data(card)
    root = _open(page, server, card, viewport, dark, errors)
    parts = root.locator(".kvlab-mock-part")
    n_parts = len(spec["parts"])
    assert parts.count() == n_parts
    seen = {"visible_at_start": [parts.nth(i).is_visible() for i in range(n_parts)]}

    # the timer: still until started; runs while started; still again once stopped
    timer, face = root.locator(".kvlab-mock-timer"), root.locator(".kvlab-mock-clock")
    seen["clock_at_start"] = face.inner_text()
    page.clock.run_for(5_000)
    seen["clock_unstarted"] = face.inner_text()
    _press(page, timer, "Enter")
    seen["pressed"] = (timer.get_attribute("class"), timer.inner_text())
    page.clock.run_for(65_000)
    seen["clock_running"] = face.inner_text()
    _press(page, timer, "Space")
    page.clock.run_for(30_000)
    seen["clock_stopped"] = face.inner_text()
    seen["released"] = (timer.get_attribute("class"), timer.inner_text())

    # notes, typed
    notes = root.locator(".kvlab-mock-notes textarea")
    notes.focus()
    page.keyboard.type("Key: parent hash. Evict LRU. Route by score.")

    expected, got, live_after = [], [], []
    for n in range(n_parts):
        part = parts.nth(n)
        if n:
            before = root.locator(".kvlab-mock-next").inner_text()
            _press(page, root.locator(".kvlab-mock-next"), "Enter")
            assert part.is_visible(), f"part {n} did not show"
            assert f"({n_parts - n} left)" in before, before
            focused = page.evaluate(
                "() => document.activeElement.classList.contains('kvlab-mock-ask') &&"
                " document.activeElement.closest('.kvlab-mock-part').dataset.part"
            )
            assert focused == str(n), f"after Next, focus is not on follow-up {n}'s question"
            if n + 1 < n_parts:
                assert not parts.nth(n + 1).is_visible(), f"part {n + 1} shows too early"
            assert plain(part.locator(".kvlab-mock-ask").inner_text()) == plain(
                spec["parts"][n]["heading"]
            )
        # Tab from the question (or the notes) reaches this part's fold; Enter opens it
        summary = part.locator("details > summary")
        _press(page, summary, "Enter")
        assert part.locator("details").get_attribute("open") is not None, f"part {n} not open"
        boxes = part.locator(".kvlab-mock-points input[type=checkbox]")
        n_points = len(spec["parts"][n]["points"])
        assert boxes.count() == n_points
        chosen = ticks_for(n, n_points)
        for i in chosen:
            _press(page, boxes.nth(i), "Space")
        assert [boxes.nth(i).is_checked() for i in range(n_points)] == [
            i in chosen for i in range(n_points)
        ]
        expected.append((len(chosen), n_points))
        m = SCORE.fullmatch(part.locator(".kvlab-mock-part-score").inner_text().strip())
        assert m, part.locator(".kvlab-mock-part-score").inner_text()
        got.append((int(m.group(1)), int(m.group(2))))
        live_after.append(root.locator(".kvlab-mock-score").inner_text().strip())

    next_button = root.locator(".kvlab-mock-next")
    seen.update(
        expected=expected,
        got=got,
        live=live_after,
        next_disabled=next_button.is_disabled(),
        next_text=next_button.inner_text(),
        errors=errors,
    )
    return seen


def _check_scores(seen):
    assert seen["visible_at_start"] == [True] + [False] * (len(seen["expected"]) - 1), (
        "at the start only the card's question should show"
    )
    assert seen["got"] == seen["expected"], "a part's score is not its ticks"
    for n, live in enumerate(seen["live"]):
        m = OVERALL.search(live)
        assert m, f"part {n}: the live region says {live!r}"
        done = seen["expected"][: n + 1]
        ticked, total = sum(t for t, _ in done), sum(p for _, p in done)
        assert [int(g) for g in m.groups()] == [n + 1, ticked, total, round(100 * ticked / total)]
        # a tick is announced with its part's score first
        if seen["expected"][n][0]:
            name = f"Follow-up {n}" if n else "The question"
            said = f"{name}: {seen['expected'][n][0]} of {seen['expected'][n][1]}. "
            assert live.startswith(said), (said, live)
    assert seen["next_disabled"] and seen["next_text"] == "No follow-ups left"


def _check_timer(seen):
    assert seen["clock_at_start"] == "0:00" and seen["clock_unstarted"] == "0:00", (
        "the timer ran before it was started"
    )
    assert seen["pressed"] == ("kvlab-mock-timer kvlab-mock-running", "Stop the timer")
    assert seen["clock_running"] == "1:05", seen["clock_running"]
    assert seen["clock_stopped"] == "1:05", "the timer ran on after it was stopped"
    assert seen["released"] == ("kvlab-mock-timer", "Start the timer")


@pytest.mark.parametrize("card", CARDS)
def test_a_mock_interview_end_to_end(site, server, browser, card):
    seen = on_fresh_page(browser, lambda page: _interview(page, server, card, DESKTOP, False))
    _check_timer(seen)
    _check_scores(seen)
    assert not seen["errors"], seen["errors"]


@pytest.mark.parametrize("card", CARDS)
def test_a_mock_interview_on_a_phone_in_the_dark(site, server, browser, card):
    def visit(page):
        seen = _interview(page, server, card, PHONE, True)
        assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        # the timer pressed (its colours inverted) while text contrast is measured
        _press(page, page.locator(".kvlab-mock-timer"), "Enter")
        seen["overflow"] = page.evaluate(OVERFLOW_JS)
        seen["contrast"] = page.evaluate(CONTRAST_JS)
        seen["small"] = page.evaluate(
            """() => Array.from(document.querySelectorAll(
              '.kvlab-mock button, .kvlab-mock summary, .kvlab-mock-points label'))
              .map(e => [e.className || e.tagName, Math.round(e.getBoundingClientRect().height)])
              .filter(([, h]) => h < 24)"""
        )
        return seen

    seen = on_fresh_page(browser, visit)
    _check_timer(seen)
    _check_scores(seen)
    assert not seen["errors"], seen["errors"]
    assert not seen["overflow"], f"{card} at 390 px: " + "; ".join(seen["overflow"])
    assert seen["contrast"]["checked"] > 100, seen["contrast"]["checked"]
    bad = seen["contrast"]["failures"]
    assert not bad, f"{card} (dark, 390 px): text under WCAG AA: {bad[:6]}"
    assert not seen["small"], f"targets under 24 px tall: {seen['small']}"


@pytest.mark.parametrize("card", CARDS)
def test_every_point_is_a_checkbox_and_every_answer_links_its_section(site, server, browser, card):
    spec = data(card)

    def visit(page):
        root = _open(page, server, card, DESKTOP, False, [])
        return page.evaluate(
            """(id) => Array.from(document.querySelectorAll('#' + id + ' .kvlab-mock-part'))
              .map(p => ({points: Array.from(p.querySelectorAll('.kvlab-mock-points label'))
                            .map(l => l.textContent.trim()),
                          href: p.querySelector('.kvlab-mock-more a').getAttribute('href')}))""",
            root.get_attribute("id"),
        )

    shown = on_fresh_page(browser, visit)
    assert len(shown) == len(spec["parts"])
    page_rel = f"book/{card}-mock.html"
    for n, (part, on_page) in enumerate(zip(spec["parts"], shown, strict=True)):
        # the page shows a point's MyST inline code without its backticks
        said = [plain(p.replace("`", "")) for p in part["points"]]
        assert [plain(p) for p in on_page["points"]] == said, n
        parts = urlsplit(urljoin("http://site/" + page_rel, on_page["href"]))
        target = site / parts.path.lstrip("/")
        assert target.is_file(), f"part {n}: {on_page['href']} is not on the site"
        if n == 0:
            assert target.name == f"{spec['card']}.html" and not parts.fragment
            continue
        assert target.name == f"{spec['followups']}.html", on_page["href"]
        assert parts.fragment in parse_html(target).ids, f"part {n}: no #{parts.fragment}"
        html = target.read_text(encoding="utf-8")
        section = re.search(
            rf'<section id="{re.escape(parts.fragment)}">\s*<h3>(.*?)<a class="headerlink"', html
        )
        assert section, f"part {n}: #{parts.fragment} is not a follow-up's section"
        title = re.sub(r"<[^>]+>", "", section.group(1))
        assert plain(title) == plain(part["heading"]), (title, part["heading"])


def test_notes_survive_a_reload(site, server, browser):
    def visit(page):
        root = _open(page, server, "p22", DESKTOP, False, [])
        root.locator("textarea").fill("")
        root.locator("textarea").focus()
        page.keyboard.type("Prefill compute-bound; decode bandwidth-bound.")
        page.reload(wait_until="load")
        page.wait_for_selector("#kvlab-mock-p22.kvlab-mock-ready")
        return page.locator("#kvlab-mock-p22 textarea").input_value()

    assert on_fresh_page(browser, visit) == "Prefill compute-bound; decode bandwidth-bound."


def test_the_page_works_where_local_storage_throws(site, server, browser):
    def visit(page):
        errors: list[str] = []
        # the interview's own keys throw, as in a browser with storage turned off (the theme's
        # keys keep working, so that only the interview's handling is tested)
        page.add_init_script(
            """(() => { for (const name of ['getItem', 'setItem']) {
              const real = Storage.prototype[name];
              Storage.prototype[name] = function (key, ...rest) {
                if (String(key).startsWith('kvlab-mock')) { throw new Error('storage is off'); }
                return real.call(this, key, ...rest); }; } })();"""
        )
        root = _open(page, server, "p08", DESKTOP, False, errors)
        root.locator("textarea").focus()
        page.keyboard.type("notes")
        _press(page, root.locator(".kvlab-mock-timer"), "Enter")
        summary = root.locator(".kvlab-mock-part").first.locator("summary")
        _press(page, summary, "Enter")
        _press(page, root.locator(".kvlab-mock-points input").first, "Space")
        threw = page.evaluate(
            "() => { try { localStorage.setItem('kvlab-mock-x', '1'); return false; }"
            " catch (e) { return true; } }"
        )
        return errors, root.locator(".kvlab-mock-part-score").first.inner_text(), threw

    errors, score, threw = on_fresh_page(browser, visit)
    assert threw, "the storage stub did not throw: the test tested nothing"
    n = len(data("p08")["parts"][0]["points"])
    assert score == f"Covered 1 of {n} points.", score
    assert not errors, errors


@pytest.mark.parametrize("card", CARDS)
def test_without_the_script_the_page_reads_as_a_list(site, server, browser, card):
    spec = data(card)

    def visit(page):
        page.route(
            "**/*",
            lambda r: r.continue_() if r.request.url.startswith(server.base) else r.abort(),
        )
        page.route("**/kvlab-mock.js*", lambda r: r.abort())  # the later route is tried first
        page.goto(server.base + f"book/{card}-mock.html", wait_until="load")
        root = page.locator(f"#kvlab-mock-{card}")
        page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
        return {
            "ready": "kvlab-mock-ready" in (root.get_attribute("class") or ""),
            "question": root.locator(".kvlab-mock-question blockquote").inner_text(),
            "parts_shown": sum(p.is_visible() for p in root.locator(".kvlab-mock-part").all()),
            "answers": [a.inner_text() for a in root.locator(".kvlab-mock-reveal > p").all()],
            "points": root.locator(".kvlab-mock-points li").count(),
            "timer_shown": root.locator(".kvlab-mock-timer").is_visible(),
            "next_shown": root.locator(".kvlab-mock-next").is_visible(),
        }

    got = on_fresh_page(browser, visit)
    assert not got["ready"]
    assert got["question"].strip().endswith("?")
    assert got["parts_shown"] == len(spec["parts"])
    assert got["points"] == sum(len(p["points"]) for p in spec["parts"])
    assert len(got["answers"]) >= 2 * len(spec["parts"])
    assert not got["timer_shown"] and not got["next_shown"], "controls that need the script show"
