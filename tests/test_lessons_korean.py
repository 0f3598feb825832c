"""The Korean half of the documentation site, without building it.

* **The glossary** (docs/site/lessons/glossary.md) keeps the Korean lessons' terms the same everywhere: when an English
  lesson uses a glossary term in its prose, its Korean lesson uses the glossary's Korean form, and no Korean lesson
  uses a spelling the glossary lists as not used (위치 인코딩 for 포지셔널 인코딩, …). The checker is tested on made-up
  pages too, so it is known to fail.
* **Both lesson indexes link the glossary**, and the Korean index lists every Korean lesson and the solutions.
* **The Korean font ships with the site**: docs/site/_static/korean.css declares Noto Sans KR for the Hangul
  ranges from woff2 files in the repository (no network), its licence is there, and the files cover every Hangul
  syllable.

That a Korean lesson runs the English code and names its revision is tests/test_lessons.py's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_lessons import KOREAN, LESSONS, ROOT, code_tokens

GLOSSARY = LESSONS / "glossary.md"
SITE = ROOT / "docs" / "site"
FONT_CSS = SITE / "_static" / "korean.css"

# Where an English lesson uses a glossary word in another sense than the glossary's, the Korean lesson need not use
# the glossary's form: (lesson file, English form) -> why.
OTHER_SENSE = {
    ("02-positional-encoding.md", "value"): "'the value still grows': a number, not attention's value (밸류)",
}


# ────────────────────────────────────────────── reading the glossary and the pages ──────────────────────────────────────────────
def glossary_rows(text: str) -> list[tuple[list[str], str, list[str]]]:
    """The glossary's table rows as (English forms, Korean form, Korean spellings not used).

    An English cell may give several forms separated by `` / `` and a note in parentheses (not matched)."""
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) != 3 or cells[0] == "English" or set(cells[0]) <= set("-: "):
            continue
        english, korean, avoid = cells
        forms = [form.strip() for form in re.sub(r"\([^)]*\)", "", english).split(" / ") if form.strip()]
        rows.append((forms, korean, [word.strip() for word in avoid.split(",") if word.strip()]))
    return rows


def prose(text: str, korean: bool = False) -> str:
    """A MyST page's running text: no front matter, fenced blocks (code cells, raw HTML, math), inline code or
    math, whitespace collapsed. In Korean, the English glosses in parentheses — 임베딩(embedding) — are dropped."""
    if text.startswith("---\n"):
        text = text[text.index("\n---", 3) + 4 :]
    text = re.sub(r"^(```|~~~).*?^\1[ \t]*$", " ", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"\$\$.*?\$\$|\$[^$\n]+\$|`[^`\n]+`", " ", text, flags=re.DOTALL)
    text = re.sub(r"\]\([^)]*\)", "] ", text)  # link targets
    if korean:
        text = re.sub(r"\([ -~]*[A-Za-z][ -~]*\)", "", text)  # (ASCII only, with a letter)
    return re.sub(r"\s+", " ", text)


def uses(english_prose: str, form: str) -> bool:
    """Whether English prose uses a glossary form as a word (plural too; not inside a hyphenated word)."""
    pattern = r"(?<![\w-])" + re.escape(form) + r"(?:s|es)?(?![\w-])"
    return re.search(pattern, english_prose, flags=re.IGNORECASE) is not None


def glossary_problems(korean: Path, english_dir: Path, rows, other_sense=None) -> list[str]:
    """Where a Korean lesson leaves the glossary: a term of its English original without the glossary's Korean
    form, or a spelling the glossary does not use."""
    other_sense = OTHER_SENSE if other_sense is None else other_sense
    english = prose((english_dir / korean.name).read_text(encoding="utf-8"))
    text = prose(korean.read_text(encoding="utf-8"), korean=True)
    problems = []
    for forms, ko, avoid in rows:
        used = [form for form in forms if uses(english, form) and (korean.name, form) not in other_sense]
        if used and ko not in text:
            problems.append(f"{korean.name}: the English lesson says {used[0]!r}, the Korean one never {ko!r}")
        for word in avoid:
            if word in text:
                problems.append(f"{korean.name}: {word!r} is not the glossary's form; write {ko!r}")
    return problems


ROWS = glossary_rows(GLOSSARY.read_text(encoding="utf-8"))


# ────────────────────────────────────────────── the glossary holds ──────────────────────────────────────────────
def test_the_glossary_has_the_notes_terms_once_each():
    english = [form.lower() for forms, _, _ in ROWS for form in forms]
    assert len(ROWS) >= 60 and len(english) == len(set(english)), "each English term once"
    korean = {ko for _, ko, _ in ROWS}
    # the notes' vocabulary (shared/notes/README.md), transliterated as the notes write it
    for term in ["디코더", "인코더", "어텐션", "셀프 어텐션", "쿼리", "키", "밸류", "룩-어헤드 마스크", "피드포워드"]:
        assert term in korean, term
    for term in ["임베딩", "소프트맥스", "토큰", "헤드", "멀티 헤드 어텐션"]:
        assert term in korean, term
    for _, ko, avoid in ROWS:  # a form cannot be both the glossary's and one it does not use
        assert not any(word == ko or ko in word.split() for word in avoid), ko


@pytest.mark.parametrize("korean", KOREAN, ids=lambda p: p.stem)
def test_korean_lesson_uses_the_glossary_terms(korean):
    assert glossary_problems(korean, LESSONS / "en", ROWS) == []


ENGLISH = """---
kernelspec: {name: python3}
---
# 2. Positional encoding

The **positional encoding** is added to each token's embedding; `positional_encoding` is a code name.

```{code-cell} ipython3
softmax = 1  # code is not prose: softmax appears here only
```
"""


@pytest.mark.parametrize(
    "korean, problem",
    [
        ("**포지셔널 인코딩**(positional encoding)은 각 토큰의 임베딩에 더합니다.", None),
        ("위치 정보는 각 토큰의 임베딩에 더합니다.", "never '포지셔널 인코딩'"),
        ("포지셔널 인코딩은 각 토큰의 임베딩에 더합니다. 위치 인코딩이라고도 합니다.", "'위치 인코딩' is not"),
        ("포지셔널 인코딩은 각 토큰의 임베딩에 더합니다. 임배딩이 아닙니다.", "'임배딩' is not"),
        ("포지셔널\n인코딩은 각 토큰(token)의 임베딩(embedding)에 더합니다.", None),
    ],
    ids=["right", "missing-term", "other-spelling", "misspelt", "line-break-and-glosses"],
)
def test_the_glossary_checker_on_made_up_pages(tmp_path, korean, problem):
    (tmp_path / "en").mkdir()
    (tmp_path / "ko").mkdir()
    (tmp_path / "en" / "02-positions.md").write_text(ENGLISH, encoding="utf-8")
    page = tmp_path / "ko" / "02-positions.md"
    page.write_text(f"---\nfollows: 4c68121\n---\n# 2.\n\n{korean}\n", encoding="utf-8")
    rows = [(["positional encoding"], "포지셔널 인코딩", ["위치 인코딩"]), (["softmax"], "소프트맥스", [])]
    rows.append((["embedding"], "임베딩", ["임배딩"]))
    problems = glossary_problems(page, tmp_path / "en", rows, other_sense={})
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems


def test_both_lesson_indexes_link_the_glossary_and_the_korean_one_lists_its_pages():
    for lang in ("en", "ko"):
        assert "(../glossary.md)" in (LESSONS / lang / "index.md").read_text(encoding="utf-8"), lang
    korean_index = (LESSONS / "ko" / "index.md").read_text(encoding="utf-8")
    assert (LESSONS / "ko" / "solutions.md").is_file()
    assert ":glob:" in korean_index and "[0-9][0-9]-*" in korean_index and "solutions" in korean_index
    assert "lessons/glossary" in (SITE / "index.md").read_text(encoding="utf-8")


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


# ────────────────────────────────────────────── README.ko.md ──────────────────────────────────────────────
README = ROOT / "README.md"
README_KO = ROOT / "README.ko.md"


def test_the_korean_readme_runs_the_readmes_python_example():
    """Its Python block is the README's, token for token (comments translated), so it runs as test_readme runs it."""
    english, korean = (
        re.findall(r"```python\n(.*?)```", p.read_text(encoding="utf-8"), re.S) for p in (README, README_KO)
    )
    assert korean and code_tokens(korean[0]) == code_tokens(english[0]), "README.ko.md's example is not README.md's"


def test_the_korean_readmes_commands_parse(monkeypatch):
    import shlex

    from tformer.cli import build_parser
    from tformer.cli.validate import PathArg

    monkeypatch.setattr(PathArg, "__call__", lambda self, text: text)
    block = README_KO.read_text(encoding="utf-8").split("## 명령줄", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.startswith("tformer ")]
    assert len(lines) >= 12
    parser = build_parser()
    for line in lines:
        try:
            parser.parse_args(shlex.split(re.sub(r"\[[^\]]*\]", "", line))[1:])
        except SystemExit as exc:
            raise AssertionError(f"README.ko.md line does not parse: {line}") from exc


def test_the_readmes_link_each_other_and_the_korean_ones_links_resolve():
    from test_readme import _anchors

    assert "(README.ko.md)" in README.read_text(encoding="utf-8")
    text = README_KO.read_text(encoding="utf-8")
    assert "(README.md)" in text
    for lang in ("ko", "en"):
        assert f"(docs/site/lessons/{lang}/" in text, lang
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        path, _, anchor = target.partition("#")
        file = ROOT / path
        assert file.is_file(), f"README.ko.md links to {target}, which does not exist"
        if anchor:
            assert anchor in _anchors(file.read_text(encoding="utf-8")), f"README.ko.md: no heading for {target}"
