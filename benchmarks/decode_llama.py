"""Generation tokens/s of a SmolLM2-135M-shaped Llama: tformer against ``transformers``' ``generate``, same weights.

    python -m benchmarks.decode_llama                # batch 1 and 16, prompt 64, 128 new tokens: a few minutes
    python -m benchmarks.decode_llama --quick        # tiny sizes, seconds: proves the script works
    python -m benchmarks.decode_llama --int8 --batch 1   # also tformer int8 and HF dynamic int8, batch 1 only

The model is a randomly initialised ``LlamaForCausalLM`` with SmolLM2-135M's shape (30 layers, d_model 576, 9 query
heads and 3 key/value heads of 64, SwiGLU 1536, vocabulary 49,152, tied embeddings; float32) and its tformer twin
from ``from_hf`` (the same weights, tformer's CPU fast paths on). Both decode greedily exactly ``new_tokens`` tokens
(HF: ``min_new_tokens = max_new_tokens``; tformer: an ``eos_id`` no token has). Timing, medians and peak memory as
in every speed benchmark here (:mod:`benchmarks.common`); the ratio is tformer / HF.

It also reports the KV cache's bytes per token, read off a filled tformer cache, against the multi-head model of the
same shape (9 key/value heads): grouped-query attention stores 3 of 9.

Writes ``OUT/decode_llama.json`` and ``OUT/decode_llama.md``.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from benchmarks.common import Candidate, base_parser, compare, machine_info, session, write_report
from benchmarks.decode import hf_greedy

FULL = dict(vocab=49152, d=576, heads=9, kv_heads=3, ff=1536, layers=30, prompt_len=64, new_tokens=128, batches=[1, 16])
QUICK = dict(vocab=256, d=64, heads=4, kv_heads=2, ff=128, layers=2, prompt_len=8, new_tokens=8, batches=[1, 2])
NEVER = -1  # an eos_id no token has: tformer decodes the full length


def llama_pair(c: dict, device: str):
    """A random HF ``LlamaForCausalLM`` of shape ``c`` and tformer's twin (``from_hf``, fast paths on)."""
    import transformers

    from tformer.fast import speed_up
    from tformer.hf import from_hf

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=c["vocab"],
        hidden_size=c["d"],
        intermediate_size=c["ff"],
        num_hidden_layers=c["layers"],
        num_attention_heads=c["heads"],
        num_key_value_heads=c["kv_heads"],
        max_position_embeddings=c["prompt_len"] + c["new_tokens"],
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    hf = transformers.LlamaForCausalLM(config).to(device).eval()
    return hf, speed_up(from_hf(hf), inference=True)


def kv_bytes_per_token(model, c: dict) -> dict:
    """Bytes the KV cache holds per token, read off a cache filled by a prompt, and the multi-head equivalent's."""
    ids = torch.randint(3, c["vocab"], (1, c["prompt_len"]))
    cache = model.new_cache(c["prompt_len"])
    with torch.inference_mode():
        model(ids, cache=cache)
    stored = sum(layer.k[:, :, : layer.length].nbytes + layer.v[:, :, : layer.length].nbytes for layer in cache.layers)
    per_token = stored / c["prompt_len"]
    mha = per_token * c["heads"] / c["kv_heads"]
    return {"kv_bytes_per_token": per_token, "mha_kv_bytes_per_token": mha, "ratio_vs_mha": per_token / mha}


def int8_pair(hf, ours):
    """tformer's twin in int8 (``tformer.quantize``: what ``--precision auto`` decodes with on a class with VNNI or
    AMX) and HF's model through PyTorch's dynamic int8 (``torch.ao.quantization.quantize_dynamic``, qint8 linear
    layers: the same class of int8), each a copy."""
    import copy

    from tformer.fast.quantize import quantize

    hf_int8 = torch.ao.quantization.quantize_dynamic(copy.deepcopy(hf), {torch.nn.Linear}, dtype=torch.qint8)
    return hf_int8.eval(), quantize(copy.deepcopy(ours), "int8", keep_float=False).eval()


def candidates(hf, ours, c: dict, batch: int, device: str, int8=None) -> list[Candidate]:
    from tformer.generation import generate_lm

    ids = torch.randint(3, c["vocab"], (batch, c["prompt_len"]), generator=torch.Generator().manual_seed(batch))
    ids = ids.to(device)
    n = c["new_tokens"]

    def tformer_run() -> float:
        return sum(len(row) for row in generate_lm(ours, ids.tolist(), n, eos_id=NEVER))

    out = [Candidate("HF generate", hf_greedy(hf, ids, n)), Candidate("tformer", tformer_run)]
    if int8 is not None:
        hf_int8, ours_int8 = int8

        def tformer_int8_run() -> float:
            return sum(len(row) for row in generate_lm(ours_int8, ids.tolist(), n, eos_id=NEVER))

        out += [
            Candidate("HF generate, dynamic int8", hf_greedy(hf_int8, ids, n)),
            Candidate("tformer int8", tformer_int8_run),
        ]
    return out


def _floor(ours, batch1: dict | None) -> dict:
    """benchmarks.decode_floor's floor for this model, with tformer's batch-1 medians (float32, int8) against it."""
    from benchmarks.decode_floor import floor_report

    measured = {}
    if batch1:
        measured = {p: batch1[name]["median"] for p, name in (("fp32", "tformer"), ("int8", "tformer int8"))}
        measured = {p: v for p, v in measured.items() if v}
    return floor_report(ours, True, measured)


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench", "decode_llama.json", "decode_llama.md")
    p.set_defaults(repeats=3, warmup=1)
    p.add_argument("--int8", action="store_true", help="also tformer int8 and HF's dynamic int8 (each a copy)")
    p.add_argument("--batch", type=int, action="append", help="only these batch sizes (repeatable)")
    p.add_argument(
        "--floor",
        action="store_true",
        help="also the floor of batch-1 decoding per precision (measured stream rate / weight bytes per step) and "
        "tformer's batch-1 tokens/s as a fraction of it (benchmarks.decode_floor)",
    )
    args = p.parse_args(argv)
    c = QUICK if args.quick else FULL
    if args.batch:
        c = dict(c, batches=args.batch)
    results = {}
    with session(args):
        hf, ours = llama_pair(c, args.device)
        with torch.inference_mode():  # the same model: greedy ids must agree before timing means anything
            prompt = torch.randint(3, c["vocab"], (1, c["prompt_len"]))
            theirs = hf.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=8)
        from tformer.generation import generate_lm

        same = generate_lm(ours, prompt.tolist(), 8, eos_id=NEVER)[0] == theirs[0, c["prompt_len"] :].tolist()
        int8 = int8_pair(hf, ours) if args.int8 else None
        for batch in c["batches"]:
            results[f"smollm2-shape b{batch}"] = compare(
                candidates(hf, ours, c, batch, args.device, int8),
                args.repeats,
                args.warmup,
                args.device,
                not args.no_memory,
                anchor="HF generate",
            )
        kv = kv_bytes_per_token(ours, c)
        floor = _floor(ours, results.get("smollm2-shape b1")) if args.floor else None
        machine = machine_info(args, None)
    payload = {
        "benchmark": "decode_llama",
        "description": "greedy generation, new tokens/s, SmolLM2-135M-shaped random Llama (float32)",
        "machine": machine,
        "config": c,
        "same_greedy_ids": same,
        "kv_cache": kv,
        "results": results,
    }
    if floor is not None:
        payload["floor"] = floor
        for precision in ("fp32", "int8"):
            row = floor[precision]
            print(
                f"floor {precision}: {row['weight_mb_per_step']} MB/step at {floor['stream_gb_per_s']} GB/s = "
                f"{row['floor_tokens_per_s']} tokens/s; tformer {row.get('measured_tokens_per_s')} "
                f"({row.get('fraction_of_floor')} of it)"
            )
    print(
        f"greedy ids equal HF's: {same}; KV cache {kv['kv_bytes_per_token']:,.0f} bytes/token "
        f"(multi-head: {kv['mha_kv_bytes_per_token']:,.0f}, ×{kv['ratio_vs_mha']:.2f})"
    )
    return write_report(args.out, "decode_llama", payload, "tokens/s")


if __name__ == "__main__":
    main()
