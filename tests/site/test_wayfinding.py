"""Way-finding (issue 36, item 6): a reader finds the problems and the paths through the book.

- The home page's first screen, on a phone (390 x 844) and on a desktop (1,280 x 900), links both
  interview cards and the reading paths.
- Start-here ends at the cards: its "next" button leads to a card, and its text links both.
- Figure numbers restart on every page (a card's one diagram is "Fig. 1", not "Fig. 10").
- The worked answers fold their code: every code cell whose source shows is folded ("Show code cell
  source"), since there the text, not the code, is the lesson.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import on_fresh_page

WORKED_ANSWERS = ["notebooks/p08-04-worked-answer.html", "notebooks/p22-02-worked-answer.html"]
CARDS = ("p08-card.html", "p22-card.html")

# The links whose box lies (at least partly) inside the first screen, by where they lead.
FIRST_SCREEN_LINKS_JS = """() => Array.from(document.querySelectorAll('.bd-article a[href]'))
  .filter(a => { const r = a.getBoundingClientRect();
                 return r.width > 0 && r.height > 0 && r.top < window.innerHeight && r.bottom > 0; })
  .map(a => a.getAttribute('href'))"""


@pytest.mark.parametrize("viewport", [(390, 844), (1280, 900)], ids=["390", "1280"])
def test_home_first_screen_links_the_cards_and_the_paths(site, server, browser, viewport):
    def visit(page):
        page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
        page.route(
            "**/*",
            lambda r: r.continue_() if r.request.url.startswith(server.base) else r.abort(),
        )
        page.goto(server.base + "book/intro.html", wait_until="load")
        return page.evaluate(FIRST_SCREEN_LINKS_JS)

    links = on_fresh_page(browser, visit)
    missing = [c for c in CARDS if not any(h.split("#")[0].endswith(c) for h in links)]
    assert not missing, (
        f"the home page's first screen at {viewport} does not link {missing}: {links}"
    )
    paths = [h for h in links if h.startswith("#") and "path" in h]
    assert paths, f"the home page's first screen at {viewport} does not link the reading paths"
    html = (site / "book" / "intro.html").read_text(encoding="utf-8")
    for h in paths:
        assert f'id="{h[1:]}"' in html, f"{h} leads nowhere on the home page"


def test_start_here_ends_at_the_cards(site):
    html = (site / "book" / "start-here.html").read_text(encoding="utf-8")
    nxt = re.search(r'<a class="right-next"\s+href="([^"]+)"', html)
    assert nxt and nxt.group(1).split("#")[0].endswith(CARDS), (
        f"start-here's next button leads to {nxt.group(1) if nxt else None}, not a card"
    )
    article = html.split('class="bd-article"', 1)[-1].split('class="prev-next-area"', 1)[0]
    for card in CARDS:
        assert f'href="{card}"' in article, f"start-here does not link {card}"


def figure_numbers(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'class="caption-number">Fig\. (\d+)', html)]


def test_figure_numbers_restart_on_every_page(site):
    wrong = {}
    for page in sorted(site.rglob("*.html")):
        nums = figure_numbers(page.read_text(encoding="utf-8"))
        if nums and sorted(nums) != list(range(1, len(nums) + 1)):
            wrong[str(page.relative_to(site))] = nums
    assert not wrong, f"pages whose figures are not numbered from 1: {wrong}"
    card = (site / "book" / "p22-card.html").read_text(encoding="utf-8")
    assert figure_numbers(card) == [1], figure_numbers(card)


def test_figure_number_check_can_fail():
    assert figure_numbers('<span class="caption-number">Fig. 10 </span>') == [10]


def unfolded_code_cells(html: str) -> list[str]:
    """The code cells whose source is shown as the page opens (not inside a folded block)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    shown = []
    for cell in soup.select("div.cell"):
        source = cell.select_one("div.cell_input")
        if source is None:
            continue
        if source.find_parent("details") is None:
            shown.append(source.get_text()[:60].strip())
    return shown


@pytest.mark.parametrize("rel", WORKED_ANSWERS)
def test_worked_answers_fold_their_code(site, rel):
    html = (site / rel).read_text(encoding="utf-8")
    assert "div" in html and 'class="cell' in html, f"{rel} has no code cells"
    shown = unfolded_code_cells(html)
    assert not shown, f"{rel}: {len(shown)} code cells open with their source shown: {shown[:3]}"


def test_fold_check_can_fail():
    html = '<div class="cell"><div class="cell_input"><pre>import numpy</pre></div></div>'
    assert unfolded_code_cells(html) == ["import numpy"]


def test_glossary_is_reference_not_the_first_step():
    toc = (Path(__file__).resolve().parents[2] / "_toc.yml").read_text(encoding="utf-8")
    start = toc.split("caption: Start here", 1)[1].split("caption:", 1)[0]
    assert "book/glossary" not in start, "the glossary sits between start-here and the cards"
