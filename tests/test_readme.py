"""The README's Python example runs as written (a smoke test of the documented API)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "README has no python example"
    monkeypatch.chdir(tmp_path)  # it writes runs/api-example
    exec(compile(blocks[0], "README.md", "exec"), {})
    assert (tmp_path / "runs" / "api-example" / "model.safetensors").is_file()


def test_readme_names_the_two_setup_commands():
    text = README.read_text(encoding="utf-8")
    assert "bash scripts/demo.sh" in text and "bash scripts/test.sh" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci
