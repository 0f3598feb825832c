"""The built documentation site in a real headless browser (Debian's chromium + chromedriver, driven by Selenium).

It opens the site that ``bash scripts/docs.sh`` built in docs/_build/html, from file://, with the network cut off
(a proxy that does not exist), and checks what a learner sees:

* every lesson page that embeds the explorer (in either language) shows it in its frame, and the explorer draws:
  its page finishes its first trace, and a heatmap canvas of nonzero size inside the frame holds more than one
  colour; no console error, on the lesson page or in the frame;
* the language switch of a lesson goes from the English page to the Korean one and back, and the Korean page is
  marked lang="ko" and shows Korean text;
* no request leaves file:// (nor data: or blob:, what the explorer's export uses).

Screenshots go to runs/screenshots/docs/ (git-ignored), to be looked at. A missing site skips these tests loudly
(``bash scripts/docs.sh`` builds it); with TFORMER_DOCS_SITE_TESTS=1 it fails them. CI (.ci/run) runs the README's
test command first, before the site exists, then builds the site and runs these again with that variable set.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from test_explore_browser import console_errors, find, headless_chromium, network_requests, wait

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "docs" / "_build" / "html"
LESSON_SOURCES = ROOT / "docs" / "site" / "lessons"
SHOTS = ROOT / "runs" / "screenshots" / "docs"
MUST_EMBED = {"03", "05", "06", "07", "08"}  # the English lessons that show the explorer of their model
LOCAL = ("file:", "data:", "blob:", "about:")
# CI's third step (.ci/run), after it built the site: a missing site or browser fails these tests. Its first step runs
# the README's test command before the site exists (TFORMER_DOCS_SITE_TESTS=0), where they skip.
SITE_REQUIRED = os.environ.get("TFORMER_DOCS_SITE_TESTS") == "1"


def _unavailable(why: str) -> None:
    if SITE_REQUIRED:
        pytest.fail(f"DOCS SITE TESTS NOT RUN: {why} (TFORMER_DOCS_SITE_TESTS=1 requires them)")
    pytest.skip(f"DOCS SITE TESTS NOT RUN: {why}")


def _page(lang: str, name: str) -> Path:
    return SITE / "lessons" / lang / f"{name}.html"


def _embedding_pages() -> list[Path]:
    """The built lesson pages (both languages) that frame an explorer page."""
    if not SITE.is_dir():
        return []
    pages = sorted(SITE.glob("lessons/*/[0-9][0-9]-*.html"))
    return [p for p in pages if 'class="explorer"' in p.read_text(encoding="utf-8")]


@pytest.fixture(scope="module")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        _unavailable(f"the site is not built ({SITE}): run bash scripts/docs.sh")
    missing = [
        p.stem
        for lang in ("en", "ko")
        for p in sorted((LESSON_SOURCES / lang).glob("[0-9][0-9]-*.md"))
        if not _page(lang, p.stem).is_file()
    ]
    assert not missing, (
        f"the built site lacks lessons {missing}: it is older than the sources, run bash scripts/docs.sh"
    )
    return SITE


@pytest.fixture(scope="module")
def browser(site):
    driver = headless_chromium(1300, _unavailable)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def _open(driver, page: Path) -> None:
    driver.switch_to.default_content()
    driver.get(page.as_uri())
    wait(driver, lambda d: d.execute_script("return document.readyState") == "complete", f"{page.name} to load")


def _drawn(driver) -> dict | None:
    """Inside the explorer's frame: the first heatmap canvas's size and how many colours it holds, once the page is
    ready (None before)."""
    return driver.execute_script(
        """
        if (document.body.dataset.ready !== "1") return null;
        const canvas = document.querySelector("canvas.heatmap");
        if (!canvas) return null;
        const box = canvas.getBoundingClientRect();
        const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
        const colours = new Set();
        for (let i = 0; i < pixels.length && colours.size < 50; i += 4 * 7) {
          colours.add(`${pixels[i]},${pixels[i + 1]},${pixels[i + 2]},${pixels[i + 3]}`);
        }
        return {width: box.width, height: box.height, colours: colours.size};
        """
    )


def test_the_lessons_that_should_embed_the_explorer_do(site):
    embedding = {p.stem[:2] for p in _embedding_pages() if p.parent.name == "en"}
    assert MUST_EMBED <= embedding, f"English lessons without the explorer: {sorted(MUST_EMBED - embedding)}"


# no site: one case, which the browser fixture skips (or fails under CI) saying why, not pytest's empty parameter set
@pytest.mark.parametrize(
    "page", _embedding_pages() or [None], ids=lambda p: f"{p.parent.name}/{p.stem}" if p else "site"
)
def test_embedded_explorer_draws_offline(browser, page):
    network_requests(browser)  # forget earlier pages' requests
    console_errors(browser)
    _open(browser, page)
    (frame,) = find(browser, "iframe.explorer")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center', behavior: 'instant'})", frame)  # lazy frame
    src = frame.get_attribute("src")
    assert re.search(r"/_static/explore/[\w.-]+\.html$", src), src
    browser.switch_to.frame(frame)
    try:
        drawn = wait(browser, _drawn, f"the explorer in {page.name} to draw")
        assert drawn["width"] > 50 and drawn["height"] > 20, drawn
        assert drawn["colours"] > 1, f"the heatmap in {page.name} is blank: {drawn}"
        assert find(browser, "#export-note")[0].is_displayed()  # the exported page, not a server's
    finally:
        browser.switch_to.default_content()
    browser.execute_script("arguments[0].scrollIntoView({block: 'start', behavior: 'instant'})", frame)  # not smooth
    browser.save_screenshot(str(SHOTS / f"{page.parent.name}-{page.stem}.png"))  # the page, scrolled to the frame
    assert console_errors(browser) == []
    assert [u for u in network_requests(browser) if not u.startswith(LOCAL)] == []


def test_language_switch_goes_to_korean_and_back(browser, site):
    name = "05-the-decoder-step-by-step"  # a lesson with both pages
    english, korean = _page("en", name), _page("ko", name)
    assert english.is_file() and korean.is_file()
    network_requests(browser)
    console_errors(browser)
    _open(browser, english)
    assert browser.execute_script("return document.documentElement.lang") == "en"
    find(browser, "nav.lesson-bar a[hreflang=ko]")[0].click()
    wait(browser, lambda d: d.current_url.endswith(f"/lessons/ko/{name}.html"), "the Korean page")
    wait(browser, lambda d: d.execute_script("return document.readyState") == "complete", "the Korean page to load")
    assert browser.execute_script("return document.documentElement.lang") == "ko"
    heading = find(browser, "article h1")[0].text
    assert re.search(r"[\uac00-\ud7a3]", heading), heading  # Hangul
    body = browser.execute_script("return document.querySelector('article').innerText")
    assert len(re.findall(r"[\uac00-\ud7a3]", body)) > 500  # a Korean page, not an English one
    browser.save_screenshot(str(SHOTS / f"ko-{name}-top.png"))
    find(browser, "nav.lesson-bar a[hreflang=en]")[0].click()
    wait(browser, lambda d: d.current_url.endswith(f"/lessons/en/{name}.html"), "the English page again")
    assert console_errors(browser) == []
    assert [u for u in network_requests(browser) if not u.startswith(LOCAL)] == []


def test_every_english_lesson_links_to_its_korean_page_or_says_it_is_not_written(browser, site):
    for source in sorted((LESSON_SOURCES / "en").glob("[0-9][0-9]-*.md")):
        _open(browser, _page("en", source.stem))
        (bar,) = find(browser, "nav.lesson-bar")
        if (LESSON_SOURCES / "ko" / source.name).is_file():
            link = bar.find_element("css selector", "a[hreflang=ko]")
            assert link.get_attribute("href").endswith(f"/lessons/ko/{source.stem}.html")
        else:
            assert bar.find_element("css selector", ".lesson-missing[lang=ko]").is_displayed()
    assert console_errors(browser) == []
