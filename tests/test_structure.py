"""The package's shape: no module of tformer imports one that imports it back, and the layer contract holds."""

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def _cycles(graph) -> list[tuple[str, str]]:
    found = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported != module and graph.chain_exists(importer=imported, imported=module):
                found.append((module, imported))
    return found


def test_no_import_cycles_inside_tformer():
    cycles = _cycles(grimp.build_graph("tformer"))
    assert not cycles, "modules that import each other back (directly or through others): " + ", ".join(
        f"{a} <-> {b}" for a, b in cycles
    )


def test_the_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc import b\n")
    (pkg / "b.py").write_text("from cyc import c\n")
    (pkg / "c.py").write_text("import cyc.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert ("cyc.a", "cyc.b") in _cycles(grimp.build_graph("cyc", cache_dir=None))


def test_layer_contract_is_kept():
    """cli -> families -> inspect/interop -> training/generation -> models -> fast -> nn (pyproject.toml)."""
    exe = str(Path(sys.executable).with_name("lint-imports"))  # import-linter: in the dev extra
    out = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:]


def _packages_and_modules() -> list[str]:
    """Every package (``explore/``) and top-level module (``generation.py``) of src/tformer, as the docs write them."""
    src = ROOT / "src" / "tformer"
    names = [f"{p.name}/" for p in sorted(src.iterdir()) if p.is_dir() and (p / "__init__.py").is_file()]
    return names + [p.name for p in sorted(src.glob("*.py")) if p.name not in ("__init__.py", "__main__.py")]


def test_architecture_md_names_every_package_and_module_and_only_real_files():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [name for name in _packages_and_modules() if name not in text]
    assert not missing, f"docs/architecture.md does not describe: {missing}"
    import re

    src = ROOT / "src" / "tformer"
    for cited in sorted(set(re.findall(r"`tformer/([\w/]+\.py)`", text))):
        assert (src / cited).is_file(), f"docs/architecture.md cites tformer/{cited}, which does not exist"
    for package, names in re.findall(r"\| `tformer/(\w+)/` \| ([^|]*)\|", text):
        for cited in re.findall(r"`(\w+\.py)`", names):
            assert (src / package / cited).is_file(), f"docs/architecture.md cites {package}/{cited}: no such file"


def test_the_readme_layout_names_every_package():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in _packages_and_modules() if name.endswith("/") and f"`{name}`" not in layout]
    assert not missing, f"the README's Layout section does not name: {missing}"


def test_a_plain_import_tformer_reaches_the_families():
    """The README's ``import tformer; tformer.translation.train(...)``: each family (and the other subpackages) is
    imported when first named, in a fresh interpreter where nothing imported it before; a typo is an AttributeError."""
    code = (
        "import sys, tformer\n"
        "assert 'tformer.translation' not in sys.modules\n"
        "print(tformer.translation.train.__name__, tformer.lm.setup.__name__, tformer.bert.TextClassifier.__name__)\n"
        "try:\n    tformer.translatoin\nexcept AttributeError as err:\n    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["train setup TextClassifier", "module 'tformer' has no attribute 'translatoin'"]
