#!/usr/bin/env bash
# The main job, from a fresh clone:  bash scripts/demo.sh [tformer demo args]
# Trains a small English→French Transformer on the built-in corpus (CPU, a few minutes),
# prints translations, writes runs/demo/{model, curves.png, cross_attention.png}.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
tformer demo "$@"
