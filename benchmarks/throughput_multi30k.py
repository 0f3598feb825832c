"""End-to-end training throughput on real data (Multi30k EN→FR), counting only real (non-pad) target tokens.

    python -m benchmarks.throughput_multi30k                       # 4000 sentence pairs, ~5 minutes on 2 cores
    python -m benchmarks.throughput_multi30k --sentences 8000 --batch-size 64
    python -m benchmarks.throughput_multi30k --quick               # tiny sizes, seconds: proves the script works

Same model (``Seq2SeqConfig.preset("small")``: d_model 256, 4 heads, FFN 1024, 3+3 layers, dropout 0.1, shared
embeddings over a joint BPE vocabulary from ``tformer.tokenizers.train_tokenizer("bpe", ...)``), same AdamW step,
two ways to cut the data into batches:

* **pad-to-longest** — shuffle, take ``--batch-size`` pairs at a time, pad each batch to its longest
  sentence: what a first implementation does;
* **token budget** — ``tformer.translation.batching.token_budget_batches``: sentences sorted by length into batches
  whose padded size stays under ``--max-tokens``, batch order shuffled. By default the budget is
  ``batch size × mean padded length``, so both pipelines put about the same number of sentences in a
  batch and the difference is the padding.

One timed round = batches until at least ``--round-sentences`` pairs have been trained on, collation
(``make_batch``) included. Throughput = real target tokens (``Batch.n_tokens``, <eos> included) per
second; the report also gives the fraction of target positions that are padding.

Writes ``OUT/throughput_multi30k.json`` and ``OUT/throughput_multi30k.md``.
"""

from __future__ import annotations

import itertools
import random

import torch
import torch.nn.functional as F

from benchmarks.common import SHARED_DATA, Candidate, base_parser, compare, machine_info, session, write_report


def load_pairs(data_dir, src: str, tgt: str, n: int) -> list[tuple[str, str]]:
    from tformer.translation.pairs import read_aligned

    return read_aligned(f"{data_dir}/train.{src}", f"{data_dir}/train.{tgt}")[:n]


def _cycle_rounds(batches: list[list[int]], pairs, model, opt, round_sentences: int, seed: int, device: str):
    """A callable training on the next batches until ``round_sentences`` pairs; returns real target tokens."""
    from tformer.translation.batching import make_batch

    rng = random.Random(seed)
    order = itertools.cycle(rng.sample(batches, len(batches)))
    stats = {"real": 0, "padded": 0}

    def run() -> float:
        seen = tokens = 0
        while seen < round_sentences:
            idx = next(order)
            batch = make_batch([pairs[i] for i in idx]).to(device)
            opt.zero_grad(set_to_none=True)
            logits = model(batch.src, batch.tgt_in, **batch.forward_args())  # (B, T, V)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.tgt_out.reshape(-1), ignore_index=0)
            loss.backward()
            opt.step()
            seen += len(idx)
            real = batch.n_tokens
            tokens += real
            stats["real"] += real
            stats["padded"] += batch.tgt_out.numel()
        return tokens

    return run, stats


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench", "throughput_multi30k.json", "throughput_multi30k.md")
    p.add_argument("--data", default=str(SHARED_DATA / "multi30k"), help="directory with train.<lang> files")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="fr")
    p.add_argument("--sentences", type=int, default=4000, help="sentence pairs to use (first N of train)")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--batch-size", type=int, default=64, help="pairs per batch of the pad-to-longest pipeline")
    p.add_argument("--max-tokens", type=int, default=None, help="token budget (default: batch size × mean length)")
    p.add_argument("--round-sentences", type=int, default=640, help="pairs trained on per timed round")
    p.set_defaults(repeats=5, warmup=1)
    args = p.parse_args(argv)
    if args.quick:
        args.sentences, args.vocab_size, args.batch_size, args.round_sentences = 200, 300, 16, 32
    from tformer import Seq2SeqConfig, Seq2SeqTransformer
    from tformer.tokenizers import train_tokenizer
    from tformer.translation.batching import token_budget_batches

    with session(args):
        texts = load_pairs(args.data, args.src, args.tgt, args.sentences)
        tok = train_tokenizer("bpe", [s for s, _ in texts] + [t for _, t in texts], vocab_size=args.vocab_size)
        pairs = [(tok.encode(s), tok.encode(t)) for s, t in texts]
        mean_len = sum(max(len(s), len(t) + 1) for s, t in pairs) / len(pairs)
        max_tokens = args.max_tokens or round(args.batch_size * mean_len)
        budget_batches = token_budget_batches(pairs, max_tokens, seed=args.seed)
        order = list(range(len(pairs)))
        random.Random(args.seed).shuffle(order)
        padded_batches = [order[i : i + args.batch_size] for i in range(0, len(order), args.batch_size)]

        preset = "tiny" if args.quick else "small"
        config = Seq2SeqConfig.preset(
            preset, src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, share_embeddings=True, max_len=512
        )
        torch.manual_seed(args.seed)
        initial = Seq2SeqTransformer(config).state_dict()
        candidates, stats = [], {}
        for name, batches in (("pad-to-longest", padded_batches), ("tformer token budget", budget_batches)):
            model = Seq2SeqTransformer(config)
            model.load_state_dict(initial)  # the same starting weights
            model.to(args.device)
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            run, stats[name] = _cycle_rounds(batches, pairs, model, opt, args.round_sentences, args.seed, args.device)
            mean_rows = len(pairs) / len(batches)
            candidates.append(
                Candidate(name, run, extra={"batches": len(batches), "mean_sentences_per_batch": mean_rows})
            )
        results = {"multi30k": compare(candidates, args.repeats, args.warmup, args.device, not args.no_memory)}
        for name, s in stats.items():
            results["multi30k"][name]["padding_fraction"] = 1 - s["real"] / max(s["padded"], 1)
        machine = machine_info(args, None)
    payload = {
        "benchmark": "throughput_multi30k",
        "description": "end-to-end training throughput on Multi30k, real (non-pad) target tokens/s",
        "machine": machine,
        "config": {
            "pair": f"{args.src}-{args.tgt}",
            "sentences": len(pairs),
            "vocab_size": tok.vocab_size,
            "batch_size": args.batch_size,
            "max_tokens": max_tokens,
            "preset": preset,
            "round_sentences": args.round_sentences,
            "mean_padded_length": mean_len,
        },
        "results": results,
    }
    return write_report(args.out, "throughput_multi30k", payload, "real tokens/s")


if __name__ == "__main__":
    main()
