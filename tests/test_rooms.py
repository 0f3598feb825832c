"""Rooms that say what they hold (issue 45, item 4): no module named like one of the standard library's, no file past
the house limit of 450 lines, value checks apart from the command line and from the file readers."""

from __future__ import annotations

import ast
import pathlib
import sys

import tformer
import tformer.checks

SRC = pathlib.Path(tformer.__file__).parent


def test_no_module_or_package_is_named_like_a_standard_library_one():
    """(A command's module in cli/ is named by its command: ``cli/trace.py`` is ``tformer trace``.)"""
    names = {p.stem for p in SRC.rglob("*.py") if not p.stem.startswith("__") and p.parent.name != "cli"}
    names |= {p.name for p in SRC.rglob("*") if p.is_dir() and (p / "__init__.py").exists()}
    assert sorted(names & set(sys.stdlib_module_names)) == []


def test_every_file_is_at_most_450_lines():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 450}
    assert long == {}


def test_the_value_checks_know_nothing_of_argparse_and_leave_the_files_to_the_readers():
    tree = ast.parse(pathlib.Path(tformer.checks.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "argparse" not in imported and "tformer.readers" not in imported
    assert not hasattr(tformer.checks, "read_json_object") and not hasattr(tformer.checks, "load_safetensors")
    assert issubclass(tformer.checks.BadValue, ValueError)
