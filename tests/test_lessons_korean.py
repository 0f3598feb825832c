"""The Korean half of the documentation site, without building it.

* **The glossary** (docs/site/lessons/glossary.md) keeps the Korean pages' terms the same everywhere: when an English
  lesson uses a glossary term in its prose, its Korean lesson uses the glossary's one Korean word for it; no Korean
  page — lessons, index, solutions, user guide, README.ko.md; text or code comments — uses a spelling the glossary
  lists as not used (층 정규화 for 레이어 정규화, 아래 삼각 for 하삼각, …), nor a word of its *the notes say* column
  (서브층, 위치 인코딩) outside a sentence about the notes (노트); the first use of each term in a Korean lesson carries
  its English in parentheses (잔차 연결(residual connection)); and 배치, which the glossary keeps for *batch*, is not
  used for a *layout* (레이아웃). Each checker is tested on made-up pages too, so it is known to fail.

That a Korean lesson runs the English code and names its revision is tests/test_lessons.py's; that README.ko.md
keeps README.md's code, guarantees and sections is tests/test_readme.py's; step counts, the indexes, the user
guide and the Korean font are tests/test_korean_site.py's.
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

# Where an English lesson uses a glossary word in another sense than the glossary's, the Korean lesson need not use
# the glossary's form: (lesson file, English form) -> why.
OTHER_SENSE = {
    ("02-positional-encoding.md", "value"): "'the value still grows': a number, not attention's value (밸류)",
}


# ────────────────────────────────────────────── reading the glossary and the pages ──────────────────────────────────────────────
Row = tuple[list[str], list[str], list[str], list[str]]
HANGUL = "\uac00-\ud7a3"


def glossary_rows(text: str) -> list[Row]:
    """The glossary's table rows as (English forms, the Korean word, the notes' words, Korean spellings not used).

    An English cell may give several forms separated by `` / `` and a note in parentheses (not matched); the Korean
    cell is the one word the site uses (a list of one); the notes' words are what the notes say instead."""
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) != 4 or cells[0] == "English" or set(cells[0]) <= set("-: "):
            continue
        english, korean, notes, avoid = cells
        forms = [form.strip() for form in re.sub(r"\([^)]*\)", "", english).split(" / ") if form.strip()]
        words = [[word.strip() for word in cell.split(",") if word.strip()] for cell in (notes, avoid)]
        rows.append((forms, [korean], *words))
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
    """Where a Korean page — its text or its code's comments — uses a spelling the glossary does not use, or a notes'
    word (서브층) in a sentence that does not say it is the notes' (노트)."""
    source = page.read_text(encoding="utf-8")
    text = prose(source, korean=True) + "\n" + comments(source)
    not_about_the_notes = [s for s in re.split(r"(?<=[.!?])\s+|\n", text) if "노트" not in s]
    problems = [
        f"{page.name}: {word!r} is not the glossary's form; write {ko[0]!r}"
        for _, ko, _, avoid in rows
        for word in avoid
        if word in text
    ]
    return problems + [
        f"{page.name}: {word!r} is the notes' word, in a sentence not about the notes; write {ko[0]!r}"
        for _, ko, notes, _ in rows
        for word in notes
        if any(word in sentence for sentence in not_about_the_notes)
    ]


def glossary_problems(korean: Path, english_dir: Path, rows: list[Row], other_sense=None) -> list[str]:
    """Where a Korean lesson leaves the glossary: a term of its English original without the glossary's Korean
    form, or a spelling the glossary does not use."""
    other_sense = OTHER_SENSE if other_sense is None else other_sense
    english = prose((english_dir / korean.name).read_text(encoding="utf-8"))
    text = prose(korean.read_text(encoding="utf-8"), korean=True)
    problems = []
    for forms, ko, _, _ in rows:
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
    all_terms = [word for _, ko, _, _ in rows for word in ko]
    problems = []
    for forms, ko, _, _ in rows:
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
OTHER_KOREAN = [*sorted((SITE / "guide" / "ko").glob("*.md")), ROOT / "README.ko.md"]  # the user guide, the README


def row(english: str) -> Row:
    return next(r for r in ROWS if english in r[0])


# ────────────────────────────────────────────── the glossary holds ──────────────────────────────────────────────
def test_the_glossary_has_the_notes_terms_once_each():
    english = [form.lower() for forms, _, _, _ in ROWS for form in forms]
    assert len(ROWS) >= 60 and len(english) == len(set(english)), "each English term once"
    korean = {word for _, ko, _, _ in ROWS for word in ko}
    # the notes' vocabulary (shared/notes/README.md), transliterated as the notes write it
    for term in ["디코더", "인코더", "어텐션", "셀프 어텐션", "쿼리", "키", "밸류", "룩-어헤드 마스크", "피드포워드"]:
        assert term in korean, term
    for term in ["임베딩", "소프트맥스", "토큰", "헤드", "멀티 헤드 어텐션"]:
        assert term in korean, term
    for _, ko, notes, avoid in ROWS:  # a form cannot be both the glossary's and one it does not use
        avoid = avoid + notes
        assert not any(word in ko or any(k in word.split() for k in ko) for word in avoid), ko
    assert PLAIN <= korean, PLAIN - korean


def test_the_glossary_follows_the_notes_words_and_bans_the_variants_a_reader_found():
    """Issue 38: the notes' own words are the glossary's (마스크된 as in "마스크된 멀티 헤드 어텐션", the look-ahead
    mask named for the code's ``causal_mask`` too), one word per idea (레이어, not 층), the standard 하삼각/상삼각, and
    "forward pass" one word (순전파), not 통과 or 순방향 계산."""
    assert "causal mask" in row("look-ahead mask")[0] and row("look-ahead mask")[1] == ["룩-어헤드 마스크"]
    banned = {
        "layer normalization": ("레이어 정규화", ["층 정규화"]),
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
        _, ko, _, avoid = row(english)
        assert ko[0] == korean and set(variants) <= set(avoid), (english, ko, avoid)
    assert "순전파" not in row("feed-forward")[3]  # the standard word for a forward pass, not a feed-forward layer
    assert row("layout")[1] == ["레이아웃"] and row("batch")[1] == ["배치"]


def test_the_glossary_gives_one_word_an_idea_and_the_notes_words_as_the_notes():
    """Issue 44: the glossary gave the notes' 위치 인코딩 beside its own 포지셔널 인코딩 as a second Korean form and the
    notes' 서브층 and 훈련 among the spellings not used, so a reader could not tell which the project says: the
    Korean column holds one word, the notes' words stand in their own column, and each of them is in the notes."""
    notes = {
        "sub-layer": "서브층",
        "training": "훈련",
        "cross-attention": "인코더-디코더 어텐션",
        "positional encoding": "위치 인코딩",
    }
    for english, word in notes.items():
        forms, ko, said, avoid = row(english)
        assert word in said and word not in ko + avoid, (english, ko, said, avoid)
    assert all(len(ko) == 1 and " · " not in ko[0] for _, ko, _, _ in ROWS)
    assert row("training step")[1] == ["스텝"] and "스텝" in PLAIN
    folder = ROOT.parent / "shared" / "notes"  # absent in a clone: the rest holds there too
    text = "".join(p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt")))
    assert not text or all(word in text for _, _, said, _ in ROWS for word in said), "a notes' word the notes lack"


@pytest.mark.parametrize("korean", KOREAN, ids=lambda p: p.stem)
def test_korean_lesson_uses_the_glossary_terms(korean):
    assert glossary_problems(korean, LESSONS / "en", ROWS) == []


@pytest.mark.parametrize("page", [p for p in KOREAN_PAGES if p not in KOREAN] + OTHER_KOREAN, ids=lambda p: p.stem)
def test_the_korean_index_solutions_guide_and_readme_use_the_glossary_spellings(page):
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
    (["positional encoding"], ["포지셔널 인코딩"], ["위치 인코딩"], ["위치 부호화"]),
    (["softmax"], ["소프트맥스"], [], []),
    (["embedding"], ["임베딩"], [], ["임배딩"]),
    (["padding"], ["패딩"], [], []),
    (["padding mask"], ["패딩 마스크"], [], []),
    (["id"], ["ID"], [], []),
    (["position"], ["위치"], [], []),
    (["check value"], ["검증값"], [], []),
    (["validation"], ["검증"], [], []),
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
        ("포지셔널 인코딩은 각 토큰의 임베딩에 더합니다. 노트는 위치 인코딩이라고 부릅니다.", "", None),
        ("노트의 위치 인코딩(positional encoding)은 각 토큰의 임베딩에 더합니다.", "", "never '포지셔널 인코딩'"),
        ("포지셔널 인코딩은 각 토큰의 임베딩에 더합니다. 위치 인코딩도 같습니다.", "", "the notes' word"),
        ("포지셔널 인코딩은 각 토큰의 임베딩에 더합니다.", "위치 인코딩 하나", "the notes' word"),
        ("포지셔널 인코딩은 각 토큰의 임베딩에 더합니다. 위치 부호화라고도 합니다.", "", "'위치 부호화' is not"),
        ("포지셔널 인코딩은 각 토큰의 임베딩에 더합니다. 임배딩이 아닙니다.", "", "'임배딩' is not"),
        ("포지셔널 인코딩은 각 토큰의 임베딩에 더합니다.", "임배딩 하나", "'임배딩' is not"),
        ("포지셔널\n인코딩은 각 토큰(token)의 임베딩(embedding)에 더합니다.", "", None),
    ],
    ids=[
        "right",
        "missing-term",
        "the-notes-word-as-the-notes",
        "the-notes-word-for-the-term",
        "the-notes-word-as-an-alternative",
        "the-notes-word-in-a-comment",
        "other-spelling",
        "misspelt",
        "misspelt-comment",
        "glosses",
    ],
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
        ("포지셔널 인코딩(positional encoding)은 노트의 위치 인코딩입니다. 임베딩(embedding)에 더합니다.", None),
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
