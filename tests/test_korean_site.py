"""The Korean site beyond the lessons' glossary (tests/test_lessons_korean.py), without building it.

* **A count of training steps is 스텝** on every Korean page — lessons, index, solutions, user guide, README.ko.md —
  never 단계 (800단계), which the glossary keeps for a stage of a procedure.
* **Both lesson indexes link the glossary**, and the Korean index lists every Korean lesson and the solutions; the
  Korean user guide names every lesson, and both guides link the GPU page.
* **The Korean font ships with the site**: docs/site/_static/korean.css declares Noto Sans KR for the Hangul
  ranges from woff2 files in the repository (no network), its licence is there, and the files cover every Hangul
  syllable.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_lessons import KOREAN, LESSONS
from test_lessons_korean import KOREAN_PAGES, OTHER_KOREAN, SITE, comments, prose

FONT_CSS = SITE / "_static" / "korean.css"


def step_count_problems(page: Path) -> list[str]:
    """Where a Korean page counts training steps in 단계 (800단계, 1,000단계): the glossary's word is 스텝. A stage
    of a procedure keeps 단계, numbered in one digit (5강의 1단계–6단계)."""
    source = page.read_text(encoding="utf-8")
    text = prose(source) + "\n" + comments(source)
    counts = re.findall(r"(?<![\d,.])(?:\d{2,}|\d{1,3}(?:,\d{3})+)\s?단계", text)
    return [
        f"{page.name}: {count!r} counts steps in 단계; write {count.split('단')[0].strip()}스텝" for count in counts
    ]


@pytest.mark.parametrize("page", KOREAN_PAGES + OTHER_KOREAN, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_korean_pages_count_training_steps_in_one_word(page):
    """Issue 44: README.ko.md and the user guide said 800단계 (and 300단계마다 검증) where the lessons said
    1,000스텝; a count of steps is 스텝 on every Korean page."""
    assert step_count_problems(page) == []


@pytest.mark.parametrize(
    "text, problem",
    [
        ("800스텝 학습하고 300스텝마다 검증합니다. 1단계 — 임베딩, 6단계 — 소프트맥스.", None),
        ("기본 800단계 학습합니다.", "'800단계'"),
        ("32쌍짜리 배치로 1,000 단계를 학습합니다.", "'1,000 단계'"),
        ("로짓 `[45, 40, 49]`를 봅니다. 3단계의 출력입니다.", None),
    ],
    ids=["steps-and-stages", "a-count-in-단계", "a-count-with-a-comma", "code-and-a-stage"],
)
def test_the_step_count_checker_on_made_up_pages(tmp_path, text, problem):
    page = tmp_path / "page.md"
    page.write_text(f"# 페이지\n\n{text}\n", encoding="utf-8")
    problems = step_count_problems(page)
    assert problems == [] if problem is None else len(problems) == 1 and problem in problems[0], problems


def test_both_lesson_indexes_link_the_glossary_and_the_korean_one_lists_its_pages():
    for lang in ("en", "ko"):
        assert "(../glossary.md)" in (LESSONS / lang / "index.md").read_text(encoding="utf-8"), lang
    korean_index = (LESSONS / "ko" / "index.md").read_text(encoding="utf-8")
    assert (LESSONS / "ko" / "solutions.md").is_file()
    assert ":glob:" in korean_index and "[0-9][0-9]-*" in korean_index and "solutions" in korean_index
    assert "lessons/glossary" in (SITE / "index.md").read_text(encoding="utf-8")


def lessons_named(text: str) -> set[int]:
    """The lesson numbers a Korean page names: 6강, and each of a range, 1–5강."""
    named = set()
    for low, high in re.findall(r"(?<!\d)(\d+)(?:[–-](\d+))?강", text):
        named.update(range(int(low), int(high or low) + 1))
    return named


def test_the_korean_guide_names_every_lesson_and_both_guides_link_the_gpu_page():
    """Issue 44: the Korean user guide described lessons 1–5 only and linked no GPU page."""
    korean = (SITE / "guide" / "ko" / "index.md").read_text(encoding="utf-8")
    numbers = {int(page.name[:2]) for page in KOREAN}
    assert len(numbers) == 10 and numbers <= lessons_named(korean), sorted(numbers - lessons_named(korean))
    assert "](gpu.md)" in korean and "](gpu.md)" in (SITE / "guide" / "index.md").read_text(encoding="utf-8")
    assert lessons_named("1–5강과 7강, 9-10강") == {1, 2, 3, 4, 5, 7, 9, 10}


# ────────────────────────────────────────────── the Korean font ships with the site ──────────────────────────────────────────────
def font_faces(css: str) -> list[tuple[str, list[tuple[int, int]]]]:
    """Each @font-face of the CSS as (its url, its unicode ranges)."""
    faces = []
    for block in re.findall(r"@font-face\s*\{(.*?)\}", css, flags=re.DOTALL):
        url = re.search(r"url\(([^)]+)\)", block)
        ranges = re.search(r"unicode-range:\s*([^;]+);", block)
        assert url and ranges, block
        spans = []
        for part in ranges.group(1).split(","):
            low, _, high = part.strip().removeprefix("U+").partition("-")
            spans.append((int(low, 16), int(high or low, 16)))
        faces.append((url.group(1).strip("'\""), spans))
    return faces


def test_the_korean_font_is_shipped_for_every_hangul_syllable():
    css = FONT_CSS.read_text(encoding="utf-8")
    faces = font_faces(css)
    assert len(faces) > 50
    covered = set()
    for url, spans in faces:
        assert not re.match(r"(https?:)?//", url), f"{url}: a font from the network"
        path = (FONT_CSS.parent / url).resolve()
        assert path.is_file() and path.suffix == ".woff2", url
        assert path.read_bytes()[:4] == b"wOF2", url
        for low, high in spans:  # Hangul only: Latin text keeps the theme's fonts
            assert 0x1100 <= low and high <= 0xD7FF, f"{url}: U+{low:04X}-{high:04X} is not Hangul"
            covered.update(range(low, high + 1))
    assert set(range(0xAC00, 0xD7A4)) <= covered, "every Hangul syllable has a font"
    licence = FONT_CSS.parent / "fonts" / "noto-sans-kr" / "OFL.txt"
    assert "SIL Open Font License" in licence.read_text(encoding="utf-8")
    conf = (SITE / "conf.py").read_text(encoding="utf-8")
    assert '"korean.css"' in conf
    assert re.search(r'font-family:\s*"Noto Sans KR Variable"', css) and ":lang(ko)" in css
