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
