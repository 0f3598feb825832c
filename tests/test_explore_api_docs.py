"""docs/explore-api.md documents the explorer's server as it is: every route of the Starlette app, every API name (a
section and an example), every request field an API reads; and the doc's examples against the toy still get the
answers it shows (numbers aside: they may differ in their last digits from one machine to another).

Dimension legend: none (text and JSON).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import tformer.explore
from tformer.explore import Session
from tformer.explore.server import create_app
from tformer.explore.session import API_NAMES

DOC_FILE = Path(__file__).resolve().parents[1] / "docs" / "explore-api.md"
EXPLORE = Path(tformer.explore.__file__).parent
PORT = 8765  # the port the doc's examples name
READERS = {"text", "string", "integer", "number", "choice", "has"}  # tformer.explore.params.Params's field readers


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC_FILE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def toy() -> Session:
    return Session.open(None)


def _section(doc: str, name: str) -> str:
    """The text of the API reference's section on ``name``: from its heading to the next heading."""
    match = re.search(rf"^### `{name}`\n(.*?)(?=^#)", doc, re.S | re.M)
    assert match, f"docs/explore-api.md has no section '### `{name}`'"
    return match.group(1)


def test_every_route_of_the_server_is_documented(doc, toy):
    """Each route as `METHOD /path` with its parameters written <name>: a route added to server.py fails here."""
    routes = create_app(toy, "127.0.0.1", PORT).app.routes  # create_app wraps the Starlette app in its Host guard
    missing = []
    for route in routes:
        path = re.sub(r"\{(\w+)(:path)?\}", lambda m: "<path>" if m.group(2) else f"<{m.group(1)}>", route.path)
        for method in sorted(route.methods - {"HEAD"}):
            if f"`{method} {path}`" not in doc:
                missing.append(f"{method} {path}")
    assert routes and not missing, f"docs/explore-api.md does not document {missing}"


@pytest.mark.parametrize("name", API_NAMES)
def test_every_api_has_a_section_and_an_example(doc, name):
    section = _section(doc, name)
    assert re.search(rf"\$\w+/api/{name} ", section), f"the section on {name} has no curl example"


def _functions() -> dict[str, list[ast.FunctionDef]]:
    """Every function and method of the modules that read an API's fields, by name."""
    out: dict[str, list[ast.FunctionDef]] = {}
    for module in ("session.py", "decoding.py"):
        for node in ast.walk(ast.parse((EXPLORE / module).read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                out.setdefault(node.name, []).append(node)
    return out


def _fields_read(api: str) -> set[str]:
    """The fields ``Session.<api>`` reads (``p.text("text")``, ``p.has("target" + suffix)``: "target"), following its
    calls of ``self.f``, ``decoding.f`` and ``f`` through session.py and decoding.py."""
    functions, seen, fields = _functions(), set(), set()
    todo = [api]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in (n for f in functions.get(name, []) for n in ast.walk(f) if isinstance(n, ast.Call)):
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                if func.value.id == "p" and func.attr in READERS and node.args:
                    first = node.args[0]
                    first = first.left if isinstance(first, ast.BinOp) else first
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        fields.add(first.value)
                elif func.value.id in ("self", "decoding"):
                    todo.append(func.attr)
            elif isinstance(func, ast.Name):
                todo.append(func.id)
    return fields


@pytest.mark.parametrize("name", API_NAMES)
def test_every_field_an_api_reads_is_in_its_table(doc, name):
    """A field is documented by a row of the section's table: its first cell names it (`text2`, `target2`)."""
    cells = " ".join(re.findall(r"^\| ([^|]*) \|", _section(doc, name), re.M))
    missing = sorted(f for f in _fields_read(name) if f"`{f}`" not in cells)
    assert not missing, f"the table of {name}'s fields in docs/explore-api.md lacks {missing}, which the server reads"


def test_the_field_reader_finds_the_fields():
    """The reader above sees through the session's helpers: decode's beam fields, tensor's head and row."""
    assert {"text", "mode", "max_len", "reference", "beam_size", "length_penalty"} <= _fields_read("decode")
    assert {"trace_id", "id", "head", "row"} <= _fields_read("tensor")
    assert {"text", "target", "text_b"} <= _fields_read("trace")


CURL = re.compile(r"^\$ curl -s (?:-H '([^']*)' )?-X POST (?:\$TOY|http://127\.0\.0\.1:8765)/api/(\w+) -d '(.*?)'")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _toy_examples(doc: str) -> list[tuple[dict, str, dict, str]]:
    """(headers, api name, body, the answer shown) of each `$ curl ... $TOY/api/...` line of the doc, in order."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", doc, re.S):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            match = CURL.match(line)
            if match:
                header, name, body = match.groups()
                headers = dict([header.split(": ", 1)]) if header else {}
                out.append((headers, name, json.loads(body), lines[i + 1]))
    return out


def test_the_toy_examples_get_the_answers_the_doc_shows(doc, toy):
    """Sent in the doc's order (a tensor asks for a trace an earlier example made): the same status, the same error
    line, the same keys and tokens; "…" in the doc stands for anything, a number for any number."""
    examples = _toy_examples(doc)
    assert len(examples) >= 10
    client = TestClient(create_app(toy, "127.0.0.1", PORT), base_url=f"http://127.0.0.1:{PORT}")
    for headers, name, body, shown in examples:
        answer = client.post(f"/api/{name}", json=body, headers=headers)
        assert (answer.status_code == 200) == (not shown.startswith('{"error"')), (name, body, answer.text)
        pattern = ".*?".join(re.escape(NUMBER.sub("0", part)) for part in shown.split("…"))
        got = NUMBER.sub("0", json.dumps(answer.json(), ensure_ascii=False, separators=(",", ":")))
        assert re.fullmatch(pattern, got, re.S), f"{name} {body}: the doc shows {shown[:200]}, the server {got[:400]}"
