#!/usr/bin/env bash
# Build the documentation site from a clone, strictly:  bash scripts/docs.sh [sphinx-build args]
# Sets up .venv (scripts/setup.sh: torch CPU + tformer[dev]) on first use, adds the docs extra (Sphinx, MyST-NB,
# furo, jupytext, MathJax), then runs every lesson and builds docs/_build/html. Warnings are errors: a lesson cell
# that raises, a failed check value, a lesson over its time limit or a broken reference fails the build.
# Lessons are cached in docs/_build/.jupyter_cache (one runs again when its code changes); rm -rf docs/_build
# starts afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
stamp=".venv/.tformer-docs-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  python -m pip install -q --no-compile -e ".[dev,docs]" "$TORCH_PIN" 2>&1 | grep -v "^WARNING: Location" || true
  _compile_installed
  python -c "import sphinx, myst_nb, furo, jupytext, ipykernel, mathjax" && touch "$stamp"
fi
export PYDEVD_DISABLE_FILE_VALIDATION=1  # quiets the kernel's debugger warning
start=$(date +%s)
python -m sphinx -E -W --keep-going -b html -d docs/_build/doctrees docs/site docs/_build/html "$@"  # -E: every page re-read, so every warning shows (lessons come from the cache)
echo "docs: built docs/_build/html/index.html in $(( $(date +%s) - start )) s"
