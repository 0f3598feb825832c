"""``benchmarks.memory --laptop``: a SmolLM2-1.7B-shaped Llama in float32 against the 16 GB a laptop has (issue 40:
"a 1.7B-shaped model loads and decodes in float32 on a machine with 16 GB"). A benchmark, not run in CI: it writes
two 6.8 GB directories and needs about 9 GB of free memory (17 GB with the second call).

    python -m benchmarks.memory --laptop [--laptop-dir DIR] [--no-hf]

The model: SmolLM2-1.7B's shape (24 layers × 2048, 32 heads and 32 key/value heads of 64, SwiGLU 8192, vocabulary
49,152 tied to the head, RMSNorm, RoPE base 130,000: its ``config.json``, mapped by ``tformer.hf.config_from_hf``)
built directly as a tformer ``GPT`` in float32 with random weights (seed 0), in a process of its own that saves it
(``save_pretrained``) and exports it as a Hugging Face directory (``tformer.hf.export``: the same weights, for
``LlamaForCausalLM.from_pretrained``), with a tiny twin of each. Then, each in a fresh process as in
:mod:`benchmarks.memory_child`: load (``tformer.load`` / ``from_pretrained``), 32 greedy tokens from a 16-token
prompt, one thread, then the same again (a second prompt: where tformer's fast paths pack a copy of each weight)
when the memory available allows it (~2.4× the weights); the load's peak and the peaks while decoding above the
baseline, and the process's peak (the interpreter and libraries included) after the first call and in all, against
16 GiB.

Before anything is written it checks the free disk where the directories go and the memory available
(``MemAvailable``), and skips with the reason when either is short. Writes ``OUT/memory_laptop.json`` and ``.md``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

GiB = 2**30
LAPTOP = 16 * GiB
HF_CONFIG = {  # SmolLM2-1.7B's config.json (the fields the shape needs)
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 24,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 130000,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
TWIN = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4)
TWIN |= dict(vocab_size=256, max_position_embeddings=64)
WORK = dict(vocab=HF_CONFIG["vocab_size"], new=32)


def config(hf: dict | None = None):
    """The tformer ``GPTConfig`` of SmolLM2-1.7B's shape (or of ``hf``)."""
    from tformer.hf import config_from_hf

    return config_from_hf(hf or HF_CONFIG)


def weight_bytes(c=None) -> int:
    """Float32 bytes of the model's parameters (the tied table once), counted on the meta device."""
    import torch

    from tformer import GPT

    with torch.device("meta"):
        model = GPT(c or config())
    return sum(p.numel() * 4 for p in {id(p): p for p in model.parameters()}.values())


def shortfall(where: Path, weights: int, hf: bool) -> str | None:
    """Why the case cannot run here (disk for the directories, memory for the model), or None."""
    disk = (2 if hf else 1) * weights + GiB
    free = shutil.disk_usage(where).free
    if free < disk:
        return f"{free / GiB:.1f} GiB free on {where}, {disk / GiB:.1f} GiB needed for the model's directories"
    available = _mem_available()
    ram = weights * 1.3 + GiB  # the model, the load's slack (goal: ≤ 1.2× the weights) and the libraries
    if available is not None and available < ram:
        return f"{available / GiB:.1f} GiB of memory available (MemAvailable), {ram / GiB:.1f} GiB needed"
    return None


def second_call(weights: int) -> str | None:
    """Why a second call of the work is left out (it may hold a packed copy of every weight: ~2.4× in all), or None."""
    available, ram = _mem_available(), weights * 2.4 + GiB
    if available is not None and available < ram:
        return f"{available / GiB:.1f} GiB of memory available (MemAvailable), {ram / GiB:.1f} GiB needed"
    return None


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None


def save(root: str, hf: bool) -> dict:
    """In a process of its own: build the model (float32, random, seed 0), save it as tformer's and (``hf``) as a
    Hugging Face directory; the same for the tiny twin. Returns the paths."""
    import torch

    from tformer import GPT
    from tformer.hf import export

    paths = {}
    for kind, c in (("twin", config(dict(HF_CONFIG, **TWIN))), ("model", config())):
        torch.manual_seed(0)
        model = GPT(c).eval()
        paths[kind] = {"tformer": str(model.save_pretrained(Path(root) / kind / "tformer"))}
        if hf:
            paths[kind]["hf"] = str(export(model, Path(root) / kind / "hf"))
        del model
    return paths


def main(args) -> dict:
    from benchmarks.common import machine_info
    from benchmarks.memory import attempt, commit, write, x_weights
    from benchmarks.memory_child import measure_use

    measured = commit()  # before the run: others may commit while it runs
    weights = weight_bytes()
    hf = not args.no_hf
    results: dict = {}
    payload = {
        "benchmark": "memory_laptop",
        "description": (
            "a SmolLM2-1.7B-shaped Llama (random weights, float32) saved, then in a fresh process loaded and 32 "
            "greedy tokens decoded from a 16-token prompt, then again (a second prompt): MB above the baseline, × "
            "the weights, and the process's peak against a 16 GiB laptop"
        ),
        "machine": machine_info(args, None),
        "measured": measured,
        "config": {"hf_config": HF_CONFIG, "weight_bytes": weights, "laptop_bytes": LAPTOP, "work": WORK},
        "results": results,
    }
    root = Path(args.laptop_dir) if args.laptop_dir else Path(tempfile.mkdtemp(prefix="tformer-laptop-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        why = shortfall(root, weights, hf)
        if why is not None:
            payload["skipped"] = why
            print(f"memory --laptop skipped: {why}", file=sys.stderr)
        else:
            paths = attempt(save, str(root), hf)
            if "error" in paths:
                raise RuntimeError(f"memory --laptop: saving the model failed: {paths['error']}")
            for lib in ("tformer", "hf") if hf else ("tformer",):
                no_second = second_call(weights)
                spec = dict(lib=lib, name="smollm2", precision="fp32", quick=False, sizes=WORK)
                spec |= dict(paths=paths["model"], twin=paths["twin"], twin_sizes=dict(WORK, vocab=256, new=4))
                results[lib] = result = attempt(measure_use, dict(spec, second=no_second is None))  # killed: error
                if "error" not in result:
                    result["second_skipped"] = no_second
                    result["x_weights"] = x_weights(result)
                    first = result["baseline_mb"] + max(result["load_peak_mb"], result["work_peak_mb"])
                    result["first_call_process_peak_mb"] = first
                    result["of_laptop"] = {"first call": first * 2**20 / LAPTOP}
                    result["of_laptop"]["with the second"] = result["peak_rss_mb"] * 2**20 / LAPTOP
                print(f"laptop {lib}: {result}", file=sys.stderr)
    finally:
        if not args.laptop_dir:
            shutil.rmtree(root, ignore_errors=True)
    return write(payload, args, "memory_laptop", markdown(payload))


def markdown(payload: dict) -> str:
    weights = payload["config"]["weight_bytes"]
    head = f"Weights: {weights / 2**20:,.0f} MB ({weights / 1e9:.2f} GB) in float32.\n\n"
    if "skipped" in payload:
        return head + f"Skipped: {payload['skipped']}."
    lines = [
        "| library | load peak MB (× weights) | decoding peak (×) | resident after (×) | a second call: peak (×) | "
        "process peak MB: first call / with the second (of 16 GiB) | load s | decoding s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lib, r in payload["results"].items():
        if "error" in r:
            lines.append(f"| {lib} | {r['error']} | | | | | | |")
            continue
        x, laptop = r["x_weights"], r["of_laptop"]
        second = "—" if r["second_peak_mb"] is None else f"{r['second_peak_mb']:,.0f} ({x['second_peak']:.2f}×)"
        lines.append(
            f"| {lib} | {r['load_peak_mb']:,.0f} ({x['load_peak']:.2f}×) | {r['work_peak_mb']:,.0f} "
            f"({x['work_peak']:.2f}×) | {r['resident_mb']:,.0f} ({x['resident']:.2f}×) | {second} | "
            f"{r['first_call_process_peak_mb']:,.0f} ({100 * laptop['first call']:.0f}%) / {r['peak_rss_mb']:,.0f} "
            f"({100 * laptop['with the second']:.0f}%) | {r['load_s']:.1f} | {r['work_s']:.1f} |"
        )
    skipped = {r.get("second_skipped") for r in payload["results"].values()} - {None}
    return head + "\n".join(lines) + "".join(f"\n\nA second call not measured: {why}." for why in skipped)
