"""The explorer's page as files: one module per view, nothing from the network, and an export that holds them all.

The page (src/tformer/explore/static/) is plain JavaScript modules under js/, imported by name ("explore/…")
through index.html's import map. These tests read the files and the server's and the export's answers; the
browser tests (test_explore_browser.py) check that each module loads and draws its view.

Dimension legend: none (files).
"""

from __future__ import annotations

import base64
import json
import re

import pytest
from starlette.testclient import TestClient

from tformer.cli import main
from tformer.explore import Session
from tformer.explore.server import create_app, static_dir

STATIC = static_dir()
JS = STATIC / "js"
PORT = 8765
SVG_NAMESPACE = "http://www.w3.org/2000/svg"  # a name in createElementNS, never fetched: the one URL allowed
IMPORT = re.compile(r"""^\s*import\s+(?:[^"';]*?\s+from\s+)?["']([^"']+)["']""", re.M)


def modules() -> dict[str, str]:
    """Every module of the page: its import name ("explore/views/forward.js") → its text."""
    return {f"explore/{p.relative_to(JS).as_posix()}": p.read_text(encoding="utf-8") for p in sorted(JS.rglob("*.js"))}


def tabs() -> list[str]:
    """The views of index.html: each tab's data-view."""
    return re.findall(r'<button data-view="([a-z]+)"', (STATIC / "index.html").read_text(encoding="utf-8"))


def test_each_view_has_its_module_which_the_page_imports():
    found = modules()
    views = sorted(name[len("explore/views/") : -3] for name in found if name.startswith("explore/views/"))
    assert sorted(tabs()) == views == sorted(["forward", "masks", "attention", "decode", "sample", "bert", "compare"])
    app = IMPORT.findall(found["explore/app.js"])
    assert [f"explore/views/{v}.js" for v in tabs()] == [name for name in app if name.startswith("explore/views/")]
    assert 'import "explore/app.js"' in (STATIC / "index.html").read_text(encoding="utf-8")
    for name, text in found.items():  # each opens with what it shows and what it knows nothing about
        head = text.split("\n\n", 1)[0]
        assert head.startswith("//") and "knows nothing" in head.lower(), f"{name} does not open with its comment"
    for view in views:  # a view reaches no other view: they talk through the store
        imported = IMPORT.findall(found[f"explore/views/{view}.js"])
        assert not [name for name in imported if name.startswith("explore/views/")], view


def test_every_import_names_a_module_of_the_page_and_the_old_single_script_is_gone():
    found = modules()
    for name, text in found.items():
        for imported in IMPORT.findall(text):
            assert imported in found, f"{name} imports {imported!r}, which is not a module of the page"
    assert not (STATIC / "explore.js").exists()
    assert max(text.count("\n") for text in found.values()) < 400  # a module, not a page in one file


def test_the_static_files_reference_nothing_online():
    for path in sorted(p for p in STATIC.rglob("*") if p.is_file()):
        text = path.read_text(encoding="utf-8")
        urls = re.findall(r"https?://[^\s\"'`)]*", text)
        assert set(urls) <= {SVG_NAMESPACE}, f"{path.name} names {urls}"
        assert not re.search(r"(src|href)\s*=\s*[\"']?//|@import|cdn", text, re.I), path.name
        assert not re.search(r"\burl\(", text), path.name  # CSS url(): the page draws with no fetched image or font


def test_the_server_sends_each_module_by_its_path_and_nothing_else():
    client = TestClient(create_app(Session.open(None), "127.0.0.1", PORT), base_url=f"http://127.0.0.1:{PORT}")
    for name, text in modules().items():
        for prefix in ("/", "/static/"):  # as the import map "./js/" resolves from / (and from /static/index.html)
            r = client.get(prefix + "js/" + name[len("explore/") :])
            assert r.status_code == 200 and r.text == text and "javascript" in r.headers["content-type"], name
    for path in ("/js/../server.py", "/js/nothing.js", "/views/forward.js", "/js", "/session.py"):
        r = client.get(path)
        assert r.status_code == 404 and "no file" in r.json()["error"], path


def test_the_export_holds_every_module_and_references_no_file(tmp_path, capsys):
    page = tmp_path / "page.html"
    assert main(["explore", "--export", str(page)]) == 0
    capsys.readouterr()
    html = page.read_text(encoding="utf-8")
    (mapped,) = re.findall(r'<script type="importmap">(.*?)</script>', html, re.S)
    imports = json.loads(mapped)["imports"]
    prefix = "data:text/javascript;charset=utf-8;base64,"
    assert all(url.startswith(prefix) for url in imports.values())
    inlined = {name: base64.b64decode(url[len(prefix) :]).decode("utf-8") for name, url in imports.items()}
    assert inlined == modules()  # every module, each its own text
    assert not re.search(r"""\b(src|href)\s*=\s*["']?(?!data:)[^"'\s>]""", html)  # no file named, no URL
    assert "./js/" not in html and 'import "explore/app.js"' in html
    urls = set(re.findall(r"https?://[^\s\"'`)<]*", html)) - {SVG_NAMESPACE}
    assert not urls


@pytest.mark.parametrize("text", ["</script><script>alert(1)</script>", "x </style> y"])
def test_a_module_that_mentions_a_closing_tag_cannot_end_the_exported_script(tmp_path, text):
    """base64 data URLs: nothing a module says can close the import map's <script> in the exported page."""
    from tformer.explore.export import inline_page

    folder = tmp_path / "static"
    (folder / "js").mkdir(parents=True)
    (folder / "index.html").write_text(
        '<script type="importmap">{"imports": {"explore/": "./js/"}}</script>\n'
        '<script type="module">import "explore/app.js";</script>\n',
        encoding="utf-8",
    )
    (folder / "js" / "app.js").write_text(f"console.log({json.dumps(text)});\n", encoding="utf-8")
    html = inline_page(folder)
    assert html.count("</script>") == 2 and text not in html


def test_the_api_doc_has_a_line_for_each_module():
    doc = (STATIC.parents[3] / "docs" / "explore-api.md").read_text(encoding="utf-8")
    missing = [name for name in modules() if f"`js/{name[len('explore/') :]}` — " not in doc]
    assert not missing, f"docs/explore-api.md (Layout) has no line for {missing}"
