"""The README's Python example runs as written (a smoke test of the documented API), its commands parse, its links
resolve, and README.ko.md keeps in step with it: the same code, commands and flags, guarantees and sections."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
README_KO = README.with_name("README.ko.md")


def test_readme_python_example_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "README has no python example"
    monkeypatch.chdir(tmp_path)  # it writes runs/api-example
    exec(compile(blocks[0], "README.md", "exec"), {})
    assert (tmp_path / "runs" / "api-example" / "model.safetensors").is_file()


def test_readme_loads_each_family_the_same_way(tmp_path, monkeypatch):
    """The README's tformer.load example (load, tokenize, run, look inside, save, export) runs as written on a
    translator, a GPT and a BERT: tformer 0.1's runs in tests/fixtures stand in for the ones the README trains."""
    import shutil

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    block = next(b for b in blocks if "tformer.load(" in b)
    fixtures = Path(__file__).parent / "fixtures" / "v0.1"
    runs = {"api-demo": "translation", "shakespeare": "lm", "bert": "bert"}
    for name, fixture in runs.items():
        shutil.copytree(fixtures / fixture, tmp_path / "runs" / name)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    assert len(scope["cache"]) == 1 and scope["m"].family == "bert"  # the last model: BERT's layer-0 weights
    for name in runs:
        assert (tmp_path / "runs" / f"{name}-copy" / "model.safetensors").is_file()
    assert (tmp_path / "runs" / "api-demo-hf" / "tokenizer.json").is_file()  # a MarianMTModel directory


def test_readme_names_the_two_setup_commands():
    text = README.read_text(encoding="utf-8")
    assert "bash scripts/demo.sh" in text and "bash scripts/test.sh" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci


def _readme_cli_lines() -> list[str]:
    """The `tformer ...` lines of the README's command-line block, continuation lines joined, comments dropped."""
    text = README.read_text(encoding="utf-8")
    block = text.split("## Command line", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines, current = [], ""
    for raw in block.splitlines():
        line = raw.split("  #", 1)[0].strip()
        current = f"{current} {line}".strip()
        if current.endswith("\\"):
            current = current[:-1].strip()
            continue
        if current.startswith("tformer "):
            lines.append(current)
        current = ""
    return lines


def test_every_readme_cli_line_parses(monkeypatch):
    """Flags named in the README exist (parsing only; `[optional]` parts are dropped, placeholders kept).

    The README's paths (runs/fr, pairs.tsv) need not exist here: path arguments are taken as written."""
    import shlex

    from tformer.cli import build_parser
    from tformer.cli.validate import PathArg

    monkeypatch.setattr(PathArg, "__call__", lambda self, text: text)

    lines = _readme_cli_lines()
    assert len(lines) >= 20
    parser = build_parser()
    for line in lines:
        argv = shlex.split(re.sub(r"\[[^\]]*\]", "", line))[1:]
        if argv == ["bench"]:
            continue  # `tformer bench` alone lists the benchmarks
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            raise AssertionError(f"README line does not parse: {line}") from exc


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors of a markdown text (headings inside ``` fences are not headings)."""
    anchors, fenced = set(), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_readme_relative_links_point_to_files_that_exist():
    """Every relative link of the README, README.ko.md and the docs names an existing file and heading."""
    pages = [README, README_KO, *sorted((README.parent / "docs").glob("*.md"))]
    checked = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s):, mailto: ...
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.exists(), f"{page.name} links to {target}, which does not exist"
            if anchor and file.suffix == ".md":
                assert anchor in _anchors(file.read_text(encoding="utf-8")), f"{page.name}: no heading for {target}"
            checked += 1
    assert checked, "README links to nothing"


def test_readme_stays_a_short_users_page():
    """The measurement history lives in docs/benchmarks.md; the README stays a page a user reads (issue 21)."""
    assert len(README.read_text(encoding="utf-8").splitlines()) < 275  # 260 until the lessons' section (issue 31)


def _resolves(name: str) -> bool:
    import importlib

    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_readme_names_exist():
    """Every dotted ``tformer.x.y`` name of the READMEs and docs/ is importable (no lines about things gone)."""
    pages = [README, README_KO, *sorted((README.parent / "docs").glob("*.md"))]
    # ASCII names: in Korean a particle follows a name directly (tformer.hooks.add는)
    names = {
        n for p in pages for n in re.findall(r"\btformer(?:\.[A-Za-z_][A-Za-z0-9_]*)+", p.read_text(encoding="utf-8"))
    }
    missing = sorted(n for n in names if not _resolves(n))
    assert not missing, f"README/docs name things that do not exist: {missing}"


def _code_blocks(markdown: str) -> list[str]:
    """The fenced code blocks of a markdown text, in order."""
    return re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.S | re.M)


def _without_comments(code: str) -> list[str]:
    """A code block's lines with their ``#`` comments and blank lines left out: what runs, in either language."""
    lines = (re.sub(r"(^|\s)#.*", "", line).rstrip() for line in code.splitlines())
    return [line for line in lines if line.strip()]


def _commands_and_flags(markdown: str, *, inline: bool) -> tuple[set[str], set[str]]:
    """Every ``tformer <command> [<subcommand> ...]`` and every ``--flag`` of a page's code blocks (comments left
    out), and with ``inline`` of its inline code spans too."""
    code = [line for block in _code_blocks(markdown) for line in _without_comments(block)]
    if inline:
        prose = re.sub(r"^```[^\n]*\n.*?^```", "", markdown, flags=re.S | re.M)
        code += re.findall(r"`([^`]+)`", prose)  # a span may wrap onto the next line
    text = "\n".join(code)
    commands = set(re.findall(r"\btformer(?: [a-z][a-z0-9-]*(?=\s|$))+", text, flags=re.M))
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))
    return commands, flags


@pytest.mark.parametrize("inline", [False, True], ids=["code-blocks", "and-inline-code"])
def test_the_korean_readme_has_every_command_and_flag_of_the_english_one(inline):
    """README.ko.md once shortened the command line (no classify, data download, evaluate-lm, ... issue 38): every
    ``tformer <command>`` and ``--flag`` of README.md's code blocks is in README.ko.md's code blocks, and every one
    of its inline code (the training flags, `tformer info --system` ...) is in README.ko.md's blocks or inline code."""
    commands, flags = _commands_and_flags(README.read_text(encoding="utf-8"), inline=inline)
    assert len(commands) >= 20 and len(flags) >= 40, "the English README's command line was not read"
    ko_commands, ko_flags = _commands_and_flags(README_KO.read_text(encoding="utf-8"), inline=inline)
    assert not commands - ko_commands, f"README.ko.md lacks the commands {sorted(commands - ko_commands)}"
    assert not flags - ko_flags, f"README.ko.md lacks the flags {sorted(flags - ko_flags)}"


def test_the_korean_readme_has_the_english_code_blocks():
    """README.ko.md's code blocks are README.md's, in order, line for line: only the comments are translated."""
    english = [_without_comments(b) for b in _code_blocks(README.read_text(encoding="utf-8"))]
    korean = [_without_comments(b) for b in _code_blocks(README_KO.read_text(encoding="utf-8"))]
    assert len(korean) == len(english), f"README.ko.md has {len(korean)} code blocks, README.md {len(english)}"
    for n, (en, ko) in enumerate(zip(english, korean), 1):
        assert ko == en, f"README.ko.md's code block {n} differs from README.md's (besides comments)"


# ────────────────────────────────────────────── the two READMEs stay in step ──────────────────────────────────────────────
def _headings(markdown: str) -> list[str]:
    """The ``##`` and ``###`` heading markers of a markdown text, in order (headings inside ``` fences left out)."""
    fenced, found = False, []
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{2,3} ", line):
            found.append(line.split(" ", 1)[0])
    return found


def _guarantees(markdown: str) -> list[tuple[int, str]]:
    """The numbered list of the section that links docs/guarantees.md, as (number, item text) with each item's
    continuation lines joined: the same section whatever the language of its heading."""
    sections = re.split(r"^## ", markdown, flags=re.M)
    section = next((s for s in sections if "(docs/guarantees.md)" in s), "")
    items: list[tuple[int, str]] = []
    for line in section.splitlines():
        start = re.match(r"(\d+)\. (.*)", line)
        if start:
            items.append((int(start.group(1)), start.group(2)))
        elif items and line.startswith("   ") and line.strip():
            items[-1] = (items[-1][0], f"{items[-1][1]} {line.strip()}")
        elif items and not line.strip():
            break  # the list ends at its first blank line
    return items


def _untranslated(item: str) -> tuple[list[str], int, list[str]]:
    """What a guarantee keeps in every language: its code spans, its number of bold phrases, the numbers outside
    its code (a translation that drops a clause loses one of them)."""
    code = re.findall(r"`([^`]+)`", item)
    prose = re.sub(r"`[^`]+`", " ", item)
    return sorted(code), len(re.findall(r"\*\*[^*]+\*\*", prose)), sorted(re.findall(r"\d+", prose))


def guarantee_drift(english: str, korean: str) -> list[str]:
    """Where README.ko.md's guarantees are not README.md's: another count or numbering, an empty item, or an item
    whose code, bold phrases or numbers differ from the English one's."""
    en, ko = _guarantees(english), _guarantees(korean)
    problems = ["README.md has no numbered guarantees"] if not en else []
    for name, items in (("README.md", en), ("README.ko.md", ko)):
        numbers = [n for n, _ in items]
        if numbers != list(range(1, len(items) + 1)):
            problems.append(f"{name} numbers its guarantees {numbers}, not 1 to {len(items)}")
    if len(ko) != len(en):
        problems.append(f"README.ko.md has {len(ko)} guarantees, README.md {len(en)}")
    for (n, en_item), (_, ko_item) in zip(en, ko):
        if not ko_item.strip():
            problems.append(f"README.ko.md's guarantee {n} is empty")
        for what, mine, theirs in zip(
            ("code", "bold phrases", "numbers"), _untranslated(en_item), _untranslated(ko_item)
        ):
            if mine != theirs:
                problems.append(f"guarantee {n}: README.md's {what} {mine}, README.ko.md's {theirs}")
    return problems


def section_drift(english: str, korean: str) -> list[str]:
    """Where the two READMEs' ``##``/``###`` headings differ in number or order."""
    en, ko = _headings(english), _headings(korean)
    return [] if en == ko else [f"README.md's headings are {en}, README.ko.md's {ko}"]


def test_the_korean_readme_has_the_english_guarantees_and_sections():
    """Issue 44 item 8: README.ko.md's guarantees had stopped at 15 of 19 and two lacked their new clauses. Both
    READMEs give the same numbered guarantees, each with the same code, bold phrases and numbers, and the same
    ``##``/``###`` headings in the same order."""
    english, korean = README.read_text(encoding="utf-8"), README_KO.read_text(encoding="utf-8")
    assert len(_guarantees(english)) >= 19 and len(_headings(english)) >= 10, "README.md's structure was not read"
    assert guarantee_drift(english, korean) + section_drift(english, korean) == []


EN_PAGE = """## Guarantees

In full: [docs/guarantees.md](docs/guarantees.md).

1. **Outputs cost no file**: a `.NAME.old` of yours is kept.
2. **One run per directory**; resume is refused after 2 tries.

## Results
### On a GPU
"""


@pytest.mark.parametrize(
    "korean, problem",
    [
        (EN_PAGE, None),
        (EN_PAGE.replace("2. **One", "3. **One"), "numbers its guarantees [1, 3]"),
        (EN_PAGE.replace("2. **One run per directory**; resume is refused after 2 tries.\n", ""), "1 guarantees"),
        (EN_PAGE.replace(": a `.NAME.old` of yours is kept", "."), "guarantee 1: README.md's code"),
        (EN_PAGE.replace("**One run per directory**", "One run per directory"), "guarantee 2: README.md's bold"),
        (EN_PAGE.replace(" after 2 tries", ""), "guarantee 2: README.md's numbers"),
        (EN_PAGE.replace("**Outputs cost no file**: a", "**Outputs cost no file**:\n   a"), None),
        (EN_PAGE.replace("### On a GPU", "## On a GPU"), "headings are ['##', '##', '###']"),
        (EN_PAGE.replace("## Results\n", ""), "headings are"),
    ],
    ids=["same", "numbering", "missing", "code", "bold", "number", "wrapped", "level", "section-missing"],
)
def test_the_readme_drift_checkers_on_made_up_pages(korean, problem):
    problems = guarantee_drift(EN_PAGE, korean) + section_drift(EN_PAGE, korean)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) >= 1 and any(problem in found for found in problems), problems


# ────────────────────────────────────────────── README.ko.md runs and links as README.md does ──────────────────────────────────────────────


def test_the_korean_readme_runs_the_readmes_python_example():
    """Its Python block is the README's, token for token (comments translated), so it runs as test_readme runs it."""
    from test_lessons import code_tokens

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
    lines, current = [], ""
    for raw in block.splitlines():  # continuation lines joined, as test_readme reads README.md
        current = f"{current} {raw.split('  #', 1)[0].strip()}".strip()
        if current.endswith("\\"):
            current = current[:-1].strip()
            continue
        if current.startswith("tformer "):
            lines.append(current)
        current = ""
    assert len(lines) >= 12
    parser = build_parser()
    for line in lines:
        argv = shlex.split(re.sub(r"\[[^\]]*\]", "", line))[1:]
        if argv == ["bench"]:
            continue  # `tformer bench` alone lists the benchmarks
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            raise AssertionError(f"README.ko.md line does not parse: {line}") from exc


def test_the_readmes_link_each_other_and_the_korean_ones_links_resolve():
    assert "(README.ko.md)" in README.read_text(encoding="utf-8")
    text = README_KO.read_text(encoding="utf-8")
    assert "(README.md)" in text
    for lang in ("ko", "en"):
        assert f"(docs/site/lessons/{lang}/" in text, lang
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        path, _, anchor = target.partition("#")
        file = README.parent / path
        assert file.is_file(), f"README.ko.md links to {target}, which does not exist"
        if anchor:
            assert anchor in _anchors(file.read_text(encoding="utf-8")), f"README.ko.md: no heading for {target}"
