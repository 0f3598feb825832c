"""Decoding throughput (new tokens/s): tformer's generation loops vs Hugging Face ``generate``, same weights.

    python -m benchmarks.decode                 # all groups; 20-30 minutes on 2 cores, most of it the
                                                # GPT no-cache loop at batch 16 (cost grows with length²)
    python -m benchmarks.decode --only greedy --only gpt
    python -m benchmarks.decode --only gpt --no-uncached   # HF vs the KV cache only: minutes, not half an hour
    python -m benchmarks.decode --quick         # tiny sizes, seconds: proves the script works
    python -m benchmarks.decode --only greedy --only beam5 --only gpt --no-uncached --int8 --batch 1   # and int8

* **Translation** (``greedy``, ``beam5``, ``sample``): an HF ``MarianMTModel`` built from a config (d_model 256,
  4 heads, FFN 1024, 3+3 layers, vocab 8000) and its tformer twin from ``from_hf`` (same weights); batches of
  1 and 32 random sources of 16 tokens; exactly 32 new tokens per source. HF is held to 32 tokens with
  ``min_new_tokens = max_new_tokens = 32`` (EOS suppressed until then); tformer gets an ``eos_id`` no token
  has (-1), so it never stops early. Greedy: ``translate_ids`` vs ``generate(num_beams=1)``; beam:
  ``beam_search(beam_size=5, length_penalty=1.0)`` vs ``generate(num_beams=5, length_penalty=1.0,
  early_stopping=True)`` (tokens/s counts the returned tokens, 32 per source, not per beam); sampling: top-k 50,
  temperature 1 on both sides.
* **GPT** (``gpt``): HF ``GPT2LMHeadModel`` (6 layers × 384, vocab 8000) and ``from_hf`` of it; 16-token prompts,
  256 new tokens greedy, batches of 1 and 16: tformer ``generate_lm`` with its KV cache, tformer without a
  cache (the whole prefix recomputed every step: what the cache saves), HF ``generate`` (its own cache).

Writes ``OUT/decode.json`` and ``OUT/decode.md``.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from benchmarks.common import Candidate, base_parser, compare, machine_info, session, write_report

FULL = {
    "marian": dict(vocab=8000, d=256, heads=4, ff=1024, layers=3, src_len=16, new_tokens=32, batches=[1, 32]),
    "gpt": dict(vocab=8000, d=384, heads=6, layers=6, prompt_len=16, new_tokens=256, batches=[1, 16]),
}
QUICK = {
    "marian": dict(vocab=100, d=32, heads=4, ff=64, layers=1, src_len=6, new_tokens=4, batches=[1, 3]),
    "gpt": dict(vocab=100, d=32, heads=4, layers=1, prompt_len=4, new_tokens=4, batches=[1, 2]),
}
PAD, EOS, NEVER = 0, 3, -1  # NEVER: an eos_id no token has, so tformer decodes the full length


def _marian_pair(c: dict, device: str):
    import transformers

    from tformer.fast import speed_up
    from tformer.hf import from_hf

    hf = (
        transformers.MarianMTModel(
            transformers.MarianConfig(
                vocab_size=c["vocab"],
                d_model=c["d"],
                encoder_layers=c["layers"],
                decoder_layers=c["layers"],
                encoder_attention_heads=c["heads"],
                decoder_attention_heads=c["heads"],
                encoder_ffn_dim=c["ff"],
                decoder_ffn_dim=c["ff"],
                max_position_embeddings=max(64, c["new_tokens"] + 1, c["src_len"]),
                activation_function="relu",
                scale_embedding=True,
                pad_token_id=PAD,
                decoder_start_token_id=PAD,
                eos_token_id=EOS,
                forced_eos_token_id=None,
            )
        )
        .to(device)
        .eval()
    )
    return hf, speed_up(from_hf(hf), inference=True)  # tformer's CPU fast paths, as tformer.load chooses them


def _int8(model):
    """A copy of ``model`` in int8 (``tformer.quantize``: what ``--precision auto`` decodes with from 256 wide on a
    class with VNNI or AMX)."""
    import copy

    from tformer.fast.quantize import quantize

    return quantize(copy.deepcopy(model), "int8", keep_float=False).eval()


def translation_candidates(mode: str, c: dict, batch: int, device: str, int8: bool = False) -> list[Candidate]:
    hf, ours = _marian_pair(c, device)
    src = _source(c, batch, device)
    n = c["new_tokens"]
    hf_kwargs = dict(input_ids=src, attention_mask=torch.ones_like(src), min_new_tokens=n, max_new_tokens=n)
    if mode == "greedy":
        hf_kwargs.update(num_beams=1, do_sample=False)
    elif mode == "beam5":
        hf_kwargs.update(num_beams=5, do_sample=False, length_penalty=1.0, early_stopping=True)
    else:
        hf_kwargs.update(num_beams=1, do_sample=True, top_k=50, temperature=1.0)

    def hf_run() -> float:
        with torch.inference_mode():
            out = hf.generate(**hf_kwargs)  # (B, 1 + n)
        return (out.shape[1] - 1) * batch

    candidates = [
        Candidate("HF generate", hf_run),
        Candidate("tformer", _translation_run(mode, ours, c, batch, device)),
    ]
    if int8:
        candidates.append(Candidate("tformer int8", _translation_run(mode, _int8(ours), c, batch, device)))
    return candidates


def _source(c: dict, batch: int, device: str) -> torch.Tensor:
    return torch.randint(4, c["vocab"], (batch, c["src_len"]), generator=torch.Generator().manual_seed(batch)).to(
        device
    )


def _translation_run(mode: str, ours, c: dict, batch: int, device: str):
    """tformer's decoding of ``mode`` (greedy, beam5, sample) on the benchmark's sources, as a timed callable."""
    from tformer.generation import SamplingConfig, beam_search, translate_ids

    src, n = _source(c, batch, device), c["new_tokens"]
    if mode == "greedy":
        ours_run = lambda: translate_ids(ours, src, sos_id=PAD, eos_id=NEVER, max_len=n)  # noqa: E731
    elif mode == "beam5":
        ours_run = lambda: beam_search(ours, src, sos_id=PAD, eos_id=NEVER, beam_size=5, max_len=n)  # noqa: E731
    else:
        sampling = SamplingConfig(do_sample=True, top_k=50)
        ours_run = lambda: translate_ids(ours, src, PAD, NEVER, n, sampling, torch.Generator(device).manual_seed(0))  # noqa: E731

    def tformer_run() -> float:
        with torch.inference_mode():
            return sum(len(ids) for ids in ours_run())

    return tformer_run


def _gpt_pair(c: dict, device: str):
    import transformers

    from tformer.fast import speed_up
    from tformer.hf import from_hf

    hf = (
        transformers.GPT2LMHeadModel(
            transformers.GPT2Config(
                vocab_size=c["vocab"],
                n_positions=c["prompt_len"] + c["new_tokens"],
                n_embd=c["d"],
                n_layer=c["layers"],
                n_head=c["heads"],
                bos_token_id=0,
                eos_token_id=0,
                pad_token_id=0,
            )
        )
        .to(device)
        .eval()
    )
    return hf, speed_up(from_hf(hf), inference=True)  # tformer's CPU fast paths, also for the loop without a cache


def _greedy_without_cache(model, ids: torch.Tensor, n: int) -> torch.Tensor:
    """The loop from the course notes: feed the whole prefix every step, take the argmax, append."""
    for _ in range(n):
        nxt = model(ids)[:, -1].argmax(-1)  # (B,)
        ids = torch.cat([ids, nxt[:, None]], dim=1)  # (B, T + 1)
    return ids


def hf_greedy(hf, ids: torch.Tensor, n: int):
    """One timed call of HF ``generate``: greedy, exactly ``n`` new tokens per prompt of ``ids`` (B, T); returns B·n."""

    def run() -> float:
        with torch.inference_mode():
            out = hf.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, min_new_tokens=n, max_new_tokens=n
            )
        return (out.shape[1] - ids.shape[1]) * ids.shape[0]

    return run


def gpt_candidates(c: dict, batch: int, device: str, uncached: bool = True, int8: bool = False) -> list[Candidate]:
    from tformer.generation import generate_lm

    hf, ours = _gpt_pair(c, device)
    ids = torch.randint(1, c["vocab"], (batch, c["prompt_len"]), generator=torch.Generator().manual_seed(batch))
    ids = ids.to(device)
    n = c["new_tokens"]
    hf_run = hf_greedy(hf, ids, n)

    def cached_run() -> float:
        return sum(len(row) for row in generate_lm(ours, ids.tolist(), n))

    def uncached_run() -> float:
        with torch.inference_mode():
            return (_greedy_without_cache(ours, ids, n).shape[1] - ids.shape[1]) * batch

    candidates = [Candidate("HF generate", hf_run), Candidate("tformer KV cache", cached_run)]
    if int8:
        quantized = _int8(ours)
        candidates.append(
            Candidate("tformer int8 KV cache", lambda: sum(len(r) for r in generate_lm(quantized, ids.tolist(), n)))
        )
    return candidates + [Candidate("tformer no cache", uncached_run)] if uncached else candidates


GROUPS = ("greedy", "beam5", "sample", "gpt")


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench", "decode.json", "decode.md")
    p.add_argument("--only", choices=GROUPS, action="append", help="run only these groups (repeatable)")
    p.add_argument(
        "--no-uncached",
        action="store_true",
        help="gpt: skip the no-cache loop (on a CPU it takes most of the benchmark's time)",
    )
    p.add_argument("--int8", action="store_true", help="also tformer's model in int8 (tformer.quantize), a copy")
    p.add_argument("--batch", type=int, action="append", help="only these batch sizes (repeatable)")
    p.set_defaults(repeats=5, warmup=1)
    args = p.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    results = {}
    with session(args):
        for group in args.only or GROUPS:
            c = sizes["gpt" if group == "gpt" else "marian"]
            for batch in args.batch or c["batches"]:
                if group == "gpt":
                    candidates = gpt_candidates(c, batch, args.device, not args.no_uncached, args.int8)
                else:
                    candidates = translation_candidates(group, c, batch, args.device, args.int8)
                results[f"{group} b{batch}"] = compare(
                    candidates, args.repeats, args.warmup, args.device, not args.no_memory, anchor="HF generate"
                )
        machine = machine_info(args, None)
    payload = {
        "benchmark": "decode",
        "description": "decoding throughput, new tokens/s (per source, not per beam)",
        "machine": machine,
        "config": sizes,
        "results": results,
    }
    return write_report(args.out, "decode", payload, "tokens/s")


if __name__ == "__main__":
    main()
