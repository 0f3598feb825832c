"""``python -m benchmarks`` lists the benchmarks; ``python -m benchmarks NAME [args]`` runs one
(the same as ``python -m benchmarks.NAME [args]`` or ``tformer bench NAME [args]``)."""

from __future__ import annotations

import importlib
import sys

# name -> what it measures (each module has ``main(argv)`` and a docstring with its full commands)
BENCHMARKS = {
    "train_step": "training-step tokens/s of seq2seq, GPT and BERT vs nn.Transformer / HF Marian, GPT-2, BERT",
    "decode": "greedy, beam-5 and sampling tokens/s vs HF generate (Marian); GPT generation with/without KV cache",
    "decode_llama": "SmolLM2-135M-shaped Llama (GQA): generation tokens/s and peak memory vs HF generate; KV bytes/token",
    "decode_floor": "batch-1 decoding: steps/s if a step were only its matmuls (the memory-bandwidth floor)",
    "throughput_multi30k": "end-to-end training on Multi30k, real target tokens/s: token budget vs pad-to-longest",
    "bert_encode": "sentences/s of the MiniLM encoder vs transformers.BertModel (real weights)",
    "translation_bleu": "BLEU within a time budget, greedy vs beam (quality, not speed)",
    "averaging": "one Multi30k recipe run: BLEU of the trained weights vs their EMA and the mean of the last K checkpoints",
    "chunked_loss": "a GPT-2-vocabulary LM step: logits whole vs a chunk at a time (tokens/s, peak MB) vs HF GPT-2",
    "optimizer_step": "one optimizer step of the Multi30k hour's model: fused AdamW vs --optimizer muon (Muon + AdamW)",
    "attention_precision": "a bf16 training step of the char LM recipes: attention in float32 vs PyTorch's bf16 kernel",
    "lm_step": "Tiny Shakespeare recipe's training step: tanh vs exact GELU, Python-loop vs fused AdamW",
    "compile_step": "a CPU training step of the 30-minute char LM recipe: eager vs --compile, with and without dropout",
    "lm_shakespeare": "Tiny Shakespeare char-level validation loss within 1.5 / 6 / 30 minutes (vs nanoGPT's CPU recipe)",
    "lm_recipes": "two Tiny Shakespeare recipes side by side at equal CPU time (today's vs the Llama-style options)",
    "bert_pretrain": "MLM and NSP accuracy on held-out text after N minutes of pretraining, with chance baselines",
    "explore": "tformer explore: ms from request to answer per API call (toy; 6-layer GPT at 32 and 256 tokens)",
    "quantize": "tformer.quantize(model, 'int8') vs float32: perplexity, logits, greedy ids, file size, decode/encoder speed",
    "memory": "resident MB of four models in float32 and in int8 (--precision int8), each in a fresh process",
    "finetune": "LoRA vs full fine-tuning of a SmolLM2-135M-shaped Llama: peak MB, step time, vs HF + PEFT; adapter check",
    "fsdp_memory": "two processes training a 12 × 768 GPT: each one's peak MB with DDP vs --fsdp (meta-built), vs one alone",
    "data": "10 MB / 100 MB / 1 GB of text prepared once and trained on: MB/s, peak MB, step time, start-up vs nanoGPT",
    "serve": "tformer serve: a streamed chat completion's first token vs tformer.lm.reply's; 20 concurrent clients",
    "api_shape": "the API's shape: CLI lines, declarations of shared settings, module switches text -> loss / token",
    "gpu": "one CUDA GPU in one call: GPT-2 124M training (tokens/s, MFU) and decoding vs HF, Multi30k recipe, memory",
}


def run(name: str, argv: list[str]) -> object:
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
    return importlib.import_module(f"benchmarks.{name}").main(argv)


def listing() -> str:
    width = max(map(len, BENCHMARKS))
    lines = [f"  {name:{width}s}  {about}" for name, about in BENCHMARKS.items()]
    return "benchmarks (python -m benchmarks NAME [--quick] [--out DIR] ...):\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1:  # the process's own command line: argparse's usage names it as typed
        sys.argv[0] = f"python -m benchmarks {sys.argv[1]}"  # (not "__main__.py")
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    if argv[0] not in BENCHMARKS:
        print(f"benchmarks: error: unknown benchmark {argv[0]!r}; choose from {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    run(argv[0], argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
