#!/usr/bin/env bash
# Set up (first run only) and run the whole test suite:  bash scripts/test.sh [pytest args]
# Installs into ./.venv: the CPU build of torch (pinned; scripts/setup.sh says where it comes from)
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
# The browser tests (tests/test_explore_browser.py) need Debian's chromium and chromedriver; without them they are
# skipped, and this says so loudly, before and after the run. CI sets TFORMER_BROWSER_TESTS=1: there a missing
# browser fails them.
no_browser=""
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  no_browser="BROWSER TESTS NOT RUN: chromium not found (apt-get install chromium chromium-driver)"
  printf '\n!!!!! %s !!!!!\n\n' "$no_browser" >&2
fi
# The site's browser test (tests/test_docs_site.py) opens the site bash scripts/docs.sh built; without it, it is
# skipped, and this says so (CI builds the site first).
no_site=""
if [ ! -f docs/_build/html/index.html ]; then
  no_site="DOCS SITE TESTS NOT RUN: the site is not built (bash scripts/docs.sh builds it)"
  printf '\n!!!!! %s !!!!!\n\n' "$no_site" >&2
fi
# pytest-xdist: one worker per core (at most 8; TFORMER_TEST_WORKERS=N chooses, 0 runs in this process), each test
# file on one worker (its module fixtures built once); a -n among the arguments wins, as it comes last.
cores=$(python -c 'import os; print(len(os.sched_getaffinity(0)))' 2>/dev/null || getconf _NPROCESSORS_ONLN)
workers="${TFORMER_TEST_WORKERS:-$((cores < 8 ? cores : 8))}"
# The project's own bytecode, made once here: where PYTHONDONTWRITEBYTECODE is set (CI's machines set it), each of
# the hundreds of processes the tests start would compile tformer again on import (~0.3 s each on 2 cores).
python -m compileall -q -j 0 src benchmarks >/dev/null 2>&1 || true
status=0
python -m pytest -n "$workers" --dist loadfile "$@" || status=$?
if [ -n "$no_browser" ]; then
  printf '\n!!!!! %s !!!!!\n' "$no_browser" >&2
fi
if [ -n "$no_site" ]; then
  printf '\n!!!!! %s !!!!!\n' "$no_site" >&2
fi
exit "$status"
