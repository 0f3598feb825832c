"""The README's Python example runs as written (a smoke test of the documented API)."""

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
        assert (tmp_path / "runs" / f"{name}-hf" / "tokenizer.json").is_file()


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
    assert len(commands) >= 20 and len(flags) >= 45, "the English README's command line was not read"
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
