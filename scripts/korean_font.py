"""Write the Korean web font the documentation site ships: python scripts/korean_font.py [PACKAGE_DIR]

The site works offline and a reader's machine may have no Korean font (Hangul then shows as boxes), so the site
carries its own: Noto Sans KR (SIL Open Font License 1.1), the variable font of the npm package
``@fontsource-variable/noto-sans-kr``, which holds it as woff2 files split by unicode-range. Only the files that hold
Hangul are kept (about 2 MB of the package's 3.5), each declared for its Hangul ranges alone, so Latin text keeps the
theme's fonts and a page fetches only the pieces its characters need.

Writes docs/site/_static/fonts/noto-sans-kr/ (the woff2 files and OFL.txt) and docs/site/_static/korean.css. The
result is committed: the build needs neither npm nor the network. Run it again only to change the font's version:
with no argument it fetches the package with ``npm pack``; PACKAGE_DIR is an unpacked package instead.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "@fontsource-variable/noto-sans-kr@5.3.1"
FAMILY = "Noto Sans KR Variable"
ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "docs" / "site" / "_static"
FOLDER = STATIC / "fonts" / "noto-sans-kr"
HANGUL = [(0x1100, 0x11FF), (0x3130, 0x318F), (0xA960, 0xA97F), (0xAC00, 0xD7A3), (0xD7B0, 0xD7FF)]  # jamo, syllables
# furo's own stacks (its furo.css), with the Korean font in front: it has only Hangul, so Latin text is unchanged
SANS = "-apple-system, BlinkMacSystemFont, Segoe UI, Helvetica, Arial, sans-serif, Apple Color Emoji, Segoe UI Emoji"
MONO = '"SFMono-Regular", Menlo, Consolas, Monaco, Liberation Mono, Lucida Console'

RULES = f"""
/* Hangul from the font above on every page (the language switch and the glossary are Korean on English pages
   too); the theme's fonts for everything else. */
body {{
  --font-stack: "{FAMILY}", {SANS};
  --font-stack--monospace: {MONO}, "{FAMILY}", monospace;
}}
/* Korean breaks lines between words, not inside them. */
:lang(ko) p, :lang(ko) li, :lang(ko) td, :lang(ko) h1, :lang(ko) h2, :lang(ko) h3 {{
  word-break: keep-all;
  overflow-wrap: anywhere;
}}
"""


def hangul_ranges(unicode_range: str) -> list[tuple[int, int]]:
    """The parts of a CSS unicode-range that are Hangul."""
    kept = []
    for part in unicode_range.split(","):
        low_text, _, high_text = part.strip().removeprefix("U+").removeprefix("u+").partition("-")
        low, high = int(low_text, 16), int(high_text or low_text, 16)
        for start, end in HANGUL:
            if low <= end and start <= high:
                kept.append((max(low, start), min(high, end)))
    return kept


def css_range(spans: list[tuple[int, int]]) -> str:
    return ", ".join(f"U+{a:04X}" if a == b else f"U+{a:04X}-{b:04X}" for a, b in spans)


def write(package: Path) -> None:
    faces = re.findall(
        r"src: url\(\./files/([^)]+)\)[^;]*;\s*unicode-range: ([^;]+);", (package / "index.css").read_text()
    )
    if FOLDER.exists():
        shutil.rmtree(FOLDER)
    FOLDER.mkdir(parents=True)
    shutil.copy2(package / "LICENSE", FOLDER / "OFL.txt")
    blocks, covered, size = [], set(), 0
    for name, unicode_range in faces:
        spans = hangul_ranges(unicode_range)
        if not spans:
            continue
        shutil.copy2(package / "files" / name, FOLDER / name)
        size += (FOLDER / name).stat().st_size
        covered.update(c for a, b in spans for c in range(a, b + 1))
        blocks.append(
            f'@font-face {{\n  font-family: "{FAMILY}";\n  font-style: normal;\n  font-weight: 100 900;\n'
            f'  font-display: swap;\n  src: url(fonts/noto-sans-kr/{name}) format("woff2");\n'
            f"  unicode-range: {css_range(spans)};\n}}\n"
        )
    missing = set(range(0xAC00, 0xD7A4)) - covered
    if missing:
        sys.exit(f"korean_font: {len(missing)} Hangul syllables have no font file (first U+{min(missing):04X})")
    version = re.search(r'"version":\s*"([^"]+)"', (package / "package.json").read_text()).group(1)
    header = (
        f"/* Noto Sans KR ({version} of @fontsource-variable/noto-sans-kr, SIL Open Font License 1.1: "
        f"fonts/noto-sans-kr/OFL.txt),\n   its {len(blocks)} files that hold Hangul, declared for Hangul only. "
        "Written by scripts/korean_font.py: do not edit the @font-face rules by hand. */\n"
    )
    (STATIC / "korean.css").write_text(header + "\n".join(blocks) + RULES, encoding="utf-8")
    print(f"korean_font: {len(blocks)} files, {size / 1e6:.2f} MB in {FOLDER.relative_to(ROOT)}")


def main() -> None:
    if len(sys.argv) > 1:
        write(Path(sys.argv[1]))
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", PACKAGE, "--pack-destination", tmp], check=True, capture_output=True)
        (tarball,) = Path(tmp).glob("*.tgz")
        with tarfile.open(tarball) as archive:
            archive.extractall(tmp, filter="data")
        write(Path(tmp) / "package")


if __name__ == "__main__":
    main()
