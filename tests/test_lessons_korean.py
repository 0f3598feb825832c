"""The Korean half of the documentation site, without building it.

* **The glossary** (docs/site/lessons/glossary.md) keeps the Korean pages' terms the same everywhere: when an English
  lesson uses a glossary term in its prose, its Korean lesson uses the glossary's Korean form (or the notes' other
  word the glossary gives beside it: 위치 인코딩 beside 포지셔널 인코딩); no Korean page — text or code comments —
  uses a spelling the glossary lists as not used (층 정규화 for 레이어 정규화, 아래 삼각 for 하삼각, …); the first use of
  each term in a Korean lesson carries its English in parentheses (잔차 연결(residual connection)); and 배치, which
  the glossary keeps for *batch*, is not used for a *layout* (레이아웃). Each checker is tested on made-up pages
  too, so it is known to fail.
* **Both lesson indexes link the glossary**, and the Korean index lists every Korean lesson and the solutions.
* **The Korean font ships with the site**: docs/site/_static/korean.css declares Noto Sans KR for the Hangul
  ranges from woff2 files in the repository (no network), its licence is there, and the files cover every Hangul
  syllable.

That a Korean lesson runs the English code and names its revision is tests/test_lessons.py's.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from test_lessons import KOREAN, LESSONS, ROOT, code_cells

GLOSSARY = LESSONS / "glossary.md"
SITE = ROOT / "docs" / "site"
FONT_CSS = SITE / "_static" / "korean.css"

# Where an English lesson uses a glossary word in another sense than the glossary's, the Korean lesson need not use
# the glossary's form: (lesson file, English form) -> why.
OTHER_SENSE = {
    ("02-positional-encoding.md", "value"): "'the value still grows': a number, not attention's value (밸류)",
}


# ────────────────────────────────────────────── reading the glossary and the pages ──────────────────────────────────────────────
Row = tuple[list[str], list[str], list[str]]
HANGUL = "\uac00-\ud7a3"


def glossary_rows(text: str) -> list[Row]:
    """The glossary's table rows as (English forms, Korean forms, Korean spellings not used).

    An English cell may give several forms separated by `` / `` and a note in parentheses (not matched); a Korean cell
    the lessons' word and the notes' other word for the same idea, separated by `` · ``."""
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) != 3 or cells[0] == "English" or set(cells[0]) <= set("-: "):
            continue
        english, korean, avoid = cells
        forms = [form.strip() for form in re.sub(r"\([^)]*\)", "", english).split(" / ") if form.strip()]
        korean_forms = [form.strip() for form in korean.split(" · ")]
        rows.append((forms, korean_forms, [word.strip() for word in avoid.split(",") if word.strip()]))
    return rows


def plain_words(text: str) -> set[str]:
    """The glossary's words that need no English at their first use (its line "영어 없이 쓰는 말: …")."""
    line = re.search(r"^영어 없이 쓰는 말: (.+)$", text, flags=re.MULTILINE)
    assert line is not None, "the glossary lists its plain words"
    return {word.strip() for word in line.group(1).split(",")}


def prose(text: str, korean: bool = False, headings: bool = True) -> str:
    """A MyST page's running text: no front matter, fenced blocks (code cells, raw HTML, math), inline code or
    math, whitespace collapsed. In Korean, the English glosses in parentheses — 임베딩(embedding) — are dropped.
    Without ``headings``, the headings' lines are left out too."""
    if text.startswith("---\n"):
        text = text[text.index("\n---", 3) + 4 :]
    text = re.sub(r"^(```|~~~).*?^\1[ \t]*$", " ", text, flags=re.MULTILINE | re.DOTALL)
    if not headings:
        text = re.sub(r"^#.*$", " ", text, flags=re.MULTILINE)
    text = re.sub(r"\$\$.*?\$\$|\$[^$\n]+\$|`[^`\n]+`", " ", text, flags=re.DOTALL)
    text = re.sub(r"\]\([^)]*\)", "] ", text)  # link targets
    if korean:
        text = re.sub(r"\([ -~]*[A-Za-z][ -~]*\)", "", text)  # (ASCII only, with a letter)
    return re.sub(r"\s+", " ", text)


def comments(text: str) -> str:
    """The comments of a MyST page's code cells, one per line (a Korean lesson translates them)."""
    found = []
    for cell in code_cells(text):
        tokens = tokenize.generate_tokens(io.StringIO(cell).readline)
        found += [token.string.lstrip("# ") for token in tokens if token.type == tokenize.COMMENT]
    return "\n".join(found)


def uses(english_prose: str, form: str) -> bool:
    """Whether English prose uses a glossary form as a word (plural too; not inside a hyphenated word)."""
    pattern = r"(?<![\w-])" + re.escape(form) + r"(?:s|es)?(?![\w-])"
    return re.search(pattern, english_prose, flags=re.IGNORECASE) is not None


def spelling_problems(page: Path, rows: list[Row]) -> list[str]:
    """Where a Korean page — its text or its code's comments — uses a spelling the glossary does not use."""
    source = page.read_text(encoding="utf-8")
    text = prose(source, korean=True) + "\n" + comments(source)
    return [
        f"{page.name}: {word!r} is not the glossary's form; write {ko[0]!r}"
        for _, ko, avoid in rows
        for word in avoid
        if word in text
    ]


def glossary_problems(korean: Path, english_dir: Path, rows: list[Row], other_sense=None) -> list[str]:
    """Where a Korean lesson leaves the glossary: a term of its English original without the glossary's Korean
    form, or a spelling the glossary does not use."""
    other_sense = OTHER_SENSE if other_sense is None else other_sense
    english = prose((english_dir / korean.name).read_text(encoding="utf-8"))
    text = prose(korean.read_text(encoding="utf-8"), korean=True)
    problems = []
    for forms, ko, _ in rows:
        used = [form for form in forms if uses(english, form) and (korean.name, form) not in other_sense]
        if used and not any(word in text for word in ko):
            problems.append(f"{korean.name}: the English lesson says {used[0]!r}, the Korean one never {ko[0]!r}")
    return problems + spelling_problems(korean, rows)


def _folded(text: str) -> str:
    return re.sub(r"[\s-]+", " ", text.lower())


def _glossed(text: str, match: re.Match, forms: list[str]) -> bool:
    """Whether parentheses give the word ``match`` of ``text`` one of its English ``forms``: the first parentheses after
    it, a few words on at most (임베딩 테이블(embedding table)), or the ones it stands in ((**쿼리**, query))."""
    after = re.match(r"[^.,;:!?()]{0,24}?\(([^()]*)\)", text[match.end() :])
    glosses = [after.group(1)] if after else []
    before = text[: match.start()]
    if before.rfind("(") > before.rfind(")"):
        glosses.append(text[before.rfind("(") + 1 : text.find(")", match.end())])
    return any(_folded(form) in _folded(gloss) for form in forms for gloss in glosses)


def first_use_problems(page: Path, rows: list[Row], plain: set[str]) -> list[str]:
    """Where a Korean lesson uses a glossary term for the first time (headings aside) without its English in
    parentheses: 잔차 연결(residual connection), **투영**(projection), (**쿼리**, query), 사인파 포지셔널
    인코딩(sinusoidal positional encoding) for both terms. Inside a longer term (패딩 in 패딩 마스크, 검증 in
    검증값) a term is used only where the longer one's English has it too (패딩 마스크(padding mask)); a term
    written in Latin letters (ID) or one of the plain words needs no English. A term found only in headings has no
    first use that could carry its English: that is a problem too."""
    source = page.read_text(encoding="utf-8")
    text = prose(source, headings=False).replace("*", "")
    unfenced = re.sub(r"^(```|~~~).*?^\1[ \t]*$", " ", source, flags=re.MULTILINE | re.DOTALL)
    headings = " ".join(re.findall(r"^#+ (.*)$", unfenced, flags=re.MULTILINE))
    all_terms = [word for _, ko, _ in rows for word in ko]
    problems = []
    for forms, ko, _ in rows:
        firsts = []
        for term in [word for word in ko if re.search(f"[{HANGUL}]", word) and word not in plain]:
            longer = [(word, word.index(term)) for word in all_terms if term in word and word != term]
            for match in re.finditer(f"(?<![{HANGUL}])" + re.escape(term), text):
                inside = any(text.startswith(word, match.start() - at) for word, at in longer)
                if not inside or _glossed(text, match, forms):
                    firsts.append(match)
                    break
        first = min(firsts, key=lambda match: match.start(), default=None)
        if first is None and any(
            word in headings for word in ko if word not in plain and re.search(f"[{HANGUL}]", word)
        ):
            problems.append(f"{page.name}: {ko[0]!r} only in headings, never with its English ({forms[0]})")
        elif first is not None and not _glossed(text, first, forms):
            where = text[max(0, first.start() - 30) : first.end() + 30]
            problems.append(f"{page.name}: the first {first.group()!r} has no ({forms[0]}): …{where}…")
    return problems


# Korean words that the glossary gives one meaning each, although Korean gives them another too: (English word,
# Korean word, how a Korean lesson may say it compared with its English original saying the English word).
COUNTED = [
    ("batch", "배치", "no more often"),  # 배치 is also an arrangement, a layout: that one is 레이아웃
    ("layout", "레이아웃", "at least as often"),
]


def count_problems(korean: Path, english_dir: Path) -> list[str]:
    """Where a Korean lesson's text and comments say 배치 more often than its English original says batch (not
    counting a 배치(batch) glossed), or 레이아웃 less often than it says layout."""
    source = korean.read_text(encoding="utf-8")
    original = (english_dir / korean.name).read_text(encoding="utf-8")
    text = prose(source) + "\n" + comments(source)
    english = prose(original) + "\n" + comments(original)
    problems = []
    for word, ko, rule in COUNTED:
        glossed = rf"(?!\s*\({word})" if rule == "no more often" else ""  # 배치(batch) says which it is
        n_ko = len(re.findall(ko + glossed, text))
        n_en = len(re.findall(rf"(?<![\w-]){word}(?:s|es)?(?![\w-])", english, flags=re.IGNORECASE))
        if (n_ko > n_en) if rule == "no more often" else (n_ko < n_en):
            problems.append(f"{korean.name}: {ko!r} {n_ko} times, the English lesson says {word!r} {n_en} times")
    return problems


GLOSSARY_TEXT = GLOSSARY.read_text(encoding="utf-8")
ROWS = glossary_rows(GLOSSARY_TEXT)
PLAIN = plain_words(GLOSSARY_TEXT)
KOREAN_PAGES = sorted((LESSONS / "ko").glob("*.md"))  # the lessons, the index and the solutions page


def row(english: str) -> Row:
    return next(r for r in ROWS if english in r[0])


# ────────────────────────────────────────────── the glossary holds ──────────────────────────────────────────────
def test_the_glossary_has_the_notes_terms_once_each():
    english = [form.lower() for forms, _, _ in ROWS for form in forms]
    assert len(ROWS) >= 60 and len(english) == len(set(english)), "each English term once"
    korean = {word for _, ko, _ in ROWS for word in ko}
    # the notes' vocabulary (shared/notes/README.md), transliterated as the notes write it
    for term in ["디코더", "인코더", "어텐션", "셀프 어텐션", "쿼리", "키", "밸류", "룩-어헤드 마스크", "피드포워드"]:
        assert term in korean, term
    for term in ["임베딩", "소프트맥스", "토큰", "헤드", "멀티 헤드 어텐션"]:
        assert term in korean, term
    for _, ko, avoid in ROWS:  # a form cannot be both the glossary's and one it does not use
        assert not any(word in ko or any(k in word.split() for k in ko) for word in avoid), ko
    assert PLAIN <= korean, PLAIN - korean


def test_the_glossary_follows_the_notes_words_and_bans_the_variants_a_reader_found():
    """Issue 38: the notes' own words are the glossary's (위치 인코딩 beside 포지셔널 인코딩, 마스크된 as in "마스크된
    멀티 헤드 어텐션", the look-ahead mask named for the code's ``causal_mask`` too), one word per idea (레이어, not
    층), the standard 하삼각/상삼각, and "forward pass" one word (순전파), not 통과 or 순방향 계산."""
    assert row("positional encoding")[1] == ["포지셔널 인코딩", "위치 인코딩"]
    assert "causal mask" in row("look-ahead mask")[0] and row("look-ahead mask")[1] == ["룩-어헤드 마스크"]
    banned = {
        "layer normalization": ("레이어 정규화", ["층 정규화"]),
        "sub-layer": ("서브레이어", ["서브층"]),
        "output layer": ("출력 레이어", ["출력층"]),
        "lower triangle": ("하삼각", ["아래 삼각"]),
        "upper triangle": ("상삼각", ["위 삼각"]),
        "masked self-attention": ("마스크된 셀프 어텐션", ["마스크드 셀프 어텐션"]),
        "masked language modelling": ("마스크된 언어 모델링", ["마스크드"]),
        "forward pass": ("순전파", ["순방향 계산", "통과 과정", "한 번 통과"]),
        "stack": ("스택", ["더미"]),
        "look-ahead mask": ("룩-어헤드 마스크", ["인과 마스크"]),
    }
    for english, (korean, variants) in banned.items():
        _, ko, avoid = row(english)
        assert ko[0] == korean and set(variants) <= set(avoid), (english, ko, avoid)
    assert "순전파" not in row("feed-forward")[2]  # the standard word for a forward pass, not a feed-forward layer
    assert row("layout")[1] == ["레이아웃"] and row("batch")[1] == ["배치"]


@pytest.mark.parametrize("korean", KOREAN, ids=lambda p: p.stem)
def test_korean_lesson_uses_the_glossary_terms(korean):
    assert glossary_problems(korean, LESSONS / "en", ROWS) == []


@pytest.mark.parametrize("page", [p for p in KOREAN_PAGES if p not in KOREAN], ids=lambda p: p.stem)
def test_the_korean_index_and_solutions_use_the_glossary_spellings(page):
    assert spelling_problems(page, ROWS) == []


@pytest.mark.parametrize("korean", KOREAN, ids=lambda p: p.stem)
def test_korean_lesson_gives_each_terms_english_at_its_first_use(korean):
    assert first_use_problems(korean, ROWS, PLAIN) == []


@pytest.mark.parametrize("korean", KOREAN, ids=lambda p: p.stem)
def test_korean_lesson_says_batch_for_batch_and_layout_for_layout(korean):
    assert count_problems(korean, LESSONS / "en") == []


ENGLISH = """---
kernelspec: {name: python3}
---
# 2. Positional encoding

The **positional encoding** is added to each token's embedding; `positional_encoding` is a code name.

```{code-cell} ipython3
softmax = 1  # code is not prose: softmax appears here only
```
"""
MADE_UP_ROWS: list[Row] = [
    (["positional encoding"], ["포지셔널 인코딩", "위치 인코딩"], ["위치 부호화"]),
    (["softmax"], ["소프트맥스"], []),
    (["embedding"], ["임베딩"], ["임배딩"]),
    (["padding"], ["패딩"], []),
    (["padding mask"], ["패딩 마스크"], []),
    (["id"], ["ID"], []),
    (["position"], ["위치"], []),
    (["check value"], ["검증값"], []),
    (["validation"], ["검증"], []),
]


def made_up_page(tmp_path: Path, korean: str, comment: str = "", heading: str = "2.") -> Path:
    (tmp_path / "en").mkdir()
    (tmp_path / "ko").mkdir()
    (tmp_path / "en" / "02-positions.md").write_text(ENGLISH, encoding="utf-8")
    page = tmp_path / "ko" / "02-positions.md"
    cell = f"\n```{{code-cell}} ipython3\nsoftmax = 1  # {comment}\n```\n" if comment else ""
    page.write_text(f"---\nfollows: 4c68121\n---\n# {heading}\n\n{korean}\n{cell}", encoding="utf-8")
    return page


@pytest.mark.parametrize(
    "korean, comment, problem",
    [
        ("**포지셔널 인코딩**(positional encoding)은 각 토큰의 임베딩에 더합니다.", "", None),
        ("위치 정보는 각 토큰의 임베딩에 더합니다.", "", "never '포지셔널 인코딩'"),
        ("위치 인코딩(positional encoding)은 노트의 다른 말입니다. 각 토큰의 임베딩에 더합니다.", "", None),
        ("포지셔널 인코딩은 각 토큰의 임베딩에 더합니다. 위치 부호화라고도 합니다.", "", "'위치 부호화' is not"),
        ("포지셔널 인코딩은 각 토큰의 임베딩에 더합니다. 임배딩이 아닙니다.", "", "'임배딩' is not"),
        ("포지셔널 인코딩은 각 토큰의 임베딩에 더합니다.", "임배딩 하나", "'임배딩' is not"),
        ("포지셔널\n인코딩은 각 토큰(token)의 임베딩(embedding)에 더합니다.", "", None),
    ],
    ids=["right", "missing-term", "the-notes-word", "other-spelling", "misspelt", "misspelt-comment", "glosses"],
)
def test_the_glossary_checker_on_made_up_pages(tmp_path, korean, comment, problem):
    page = made_up_page(tmp_path, korean, comment)
    problems = glossary_problems(page, tmp_path / "en", MADE_UP_ROWS, other_sense={})
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems


PE = "포지셔널 인코딩(positional encoding)을 "


@pytest.mark.parametrize(
    "korean, problem",
    [
        ("**포지셔널 인코딩**(positional encoding)은 임베딩(embedding)에 더합니다. 포지셔널 인코딩은 …", None),
        ("사인파 **포지셔널 인코딩**(sinusoidal positional encoding)은 임베딩(embedding)에 더합니다.", None),
        ("값을 더합니다(**소프트맥스**, softmax). 그다음 임베딩(embedding)에 " + PE, None),
        ("위치 인코딩(positional encoding)을 임베딩(embedding)에 더합니다.", None),
        (
            "포지셔널 인코딩은 임베딩(embedding)에 더합니다. 포지셔널 인코딩(positional encoding)은 …",
            "the first '포지셔널",
        ),
        (PE + "임베딩 행(embedding)에 더합니다. 임베딩은 …", None),
        (PE + "임베딩에 더합니다. 임베딩(embedding)은 …", "the first '임베딩'"),
        (PE + "임베딩(embedding)에 소프트맥스(normalized exponential)로.", "the first '소프트맥스'"),
        (PE + "씁니다. 패딩 마스크(padding mask)를 씁니다. 패딩은 …", None),
        (PE + "씁니다. 검증값(check value)은 … 검증은 …", "the first '검증'"),
        (PE + "씁니다. 검증값(check value)은 … 검증(validation) ID와 위치는 …", None),
        ("임베딩(embedding)에 더합니다.", "'포지셔널 인코딩' only in headings"),
    ],
    ids=[
        "glossed",
        "gloss-after-a-longer-phrase",
        "inside-parentheses",
        "the-notes-word",
        "glossed-too-late",
        "a-few-words-before-the-gloss",
        "not-glossed",
        "another-english",
        "inside-a-longer-term-with-its-english",
        "only-inside-a-longer-term",
        "latin-and-plain-words",
        "only-in-a-heading",
    ],
)
def test_the_first_use_checker_on_made_up_pages(tmp_path, korean, problem):
    page = made_up_page(tmp_path, korean, heading="2. 포지셔널 인코딩")  # headings need no English
    problems = first_use_problems(page, MADE_UP_ROWS, plain={"위치"})
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems


@pytest.mark.parametrize(
    "english, korean, problem",
    [
        ("A batch of (B, T) ids.", "(B, T) ID의 배치(batch)입니다.", None),
        ("A batch of (B, T) ids.", "(B, T) ID의 배치입니다. 같은 배치입니다.", "'배치' 2 times"),
        ("A batch of (B, T) ids.", "배치(batch) 하나. 같은 배치입니다.", None),
        ("The layout of `nn.Linear`.", "`nn.Linear`와 같은 레이아웃입니다.", None),
        ("The layout of `nn.Linear`.", "`nn.Linear`와 같은 배치입니다.", "'레이아웃' 0 times"),
    ],
    ids=["batch", "batch-for-layout", "glossed-batch", "layout", "layout-missing"],
)
def test_the_batch_and_layout_counts_on_made_up_pages(tmp_path, english, korean, problem):
    (tmp_path / "en").mkdir()
    (tmp_path / "ko").mkdir()
    (tmp_path / "en" / "04-heads.md").write_text(f"# 4. Heads\n\n{english}\n", encoding="utf-8")
    page = tmp_path / "ko" / "04-heads.md"
    page.write_text(f"# 4. 헤드\n\n{korean}\n", encoding="utf-8")
    problems = count_problems(page, tmp_path / "en")
    if problem is None:
        assert problems == []
    else:
        assert any(problem in found for found in problems), problems


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
