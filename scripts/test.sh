#!/usr/bin/env bash
# Set up (first run only) and run the whole test suite:  bash scripts/test.sh [pytest args]
# Installs into ./.venv: the CPU build of torch (pinned, so pip never pulls a multi-GB CUDA build)
# and tformer with its dev extra. With no arguments it first runs the static checks CI keeps:
# the import-layer contract (lint-imports), ruff (lint and format) and mypy.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
if [ $# -eq 0 ]; then
  echo "static checks: lint-imports, ruff check, ruff format --check, mypy"
  lint-imports --no-cache | tail -n 3
  ruff check src tests benchmarks
  ruff format --check src tests benchmarks
  mypy
fi
python -m pytest "$@"
