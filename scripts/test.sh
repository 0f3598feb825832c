#!/usr/bin/env bash
# Set up (first run only) and run the whole test suite:  bash scripts/test.sh [pytest args]
# Installs into ./.venv: the CPU build of torch (pinned, so pip never pulls a multi-GB CUDA build)
# and tformer with its dev extra.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
python -m pytest "$@"
