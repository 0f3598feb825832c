# Sourced by scripts/test.sh and scripts/demo.sh: create ./.venv and install tformer[dev] into it.
# torch is pinned to the CPU build that ships on this kind of machine; the package itself accepts any torch >= 2.6 (pyproject.toml says why).
TORCH_PIN="${TORCH_PIN:-torch==2.13.0}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate
stamp=".venv/.tformer-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  python -m pip install -q "$TORCH_PIN" 2>&1 | grep -v "^WARNING: Location" || true
  python -m pip install -q -e ".[dev]" "$TORCH_PIN" 2>&1 | grep -v "^WARNING: Location" || true
  python -c "import tformer, torch, tokenizers, transformers, hypothesis" && touch "$stamp"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
