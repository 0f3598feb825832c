#!/usr/bin/env bash
# The main job, from a fresh clone:  bash scripts/demo.sh [tformer demo args]
# Trains a small English→French Transformer on the built-in corpus (CPU, 800 steps: about 1.5 min on 2 free cores),
# prints translations, writes runs/demo/{best, last, curves.png, cross_attention.png}.
# An earlier run in runs/demo is kept: the script then stops with a one-line message; pass --overwrite to
# replace it, or --out DIR to write elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
tformer demo "$@"
