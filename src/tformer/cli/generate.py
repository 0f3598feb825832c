"""``tformer generate``: continue a prompt with a trained language model, streaming to stdout.

tformer generate --model runs/shakespeare --prompt "ROMEO:" --max-new-tokens 300 --temperature 0.8 --top-k 50 --seed 1
tformer generate --model ./SmolLM2-135M --prompt "The capital of France is" --greedy --max-new-tokens 20

``--model`` is any GPT ``tformer.load`` reads: a ``tformer train lm`` run or model directory, or a Hugging Face
decoder directory (config.json, safetensors weights, tokenizer.json; read without ``transformers``); another family
is refused in one line.
"""

from __future__ import annotations

import sys

from tformer.cli.common import add_fast_flag
from tformer.cli.validate import (
    Number,
    device,
    existing_dir,
    max_new_tokens,
    probability,
    repetition_penalty,
    seed,
    temperature,
    top_k,
)


def add_parser(sub) -> None:
    g = sub.add_parser("generate", help="continue a prompt with a trained language model (streams to stdout)")
    g.add_argument(
        "--model",
        required=True,
        type=existing_dir,
        help="model directory: from tformer train lm, or a Hugging Face one (gpt2, llama, mistral, qwen2, qwen3)",
    )
    g.add_argument("--prompt", default="", help="text to continue (default: start a new document)")
    g.add_argument(
        "--max-new-tokens",
        type=max_new_tokens,
        default=300,
        help="at most 100000 (past the model's context the window slides)",
    )
    g.add_argument("--greedy", action="store_true", help="argmax instead of sampling")
    g.add_argument("--temperature", type=temperature, default=0.8, help="towards 0: greedy (a tiny value is greedy)")
    g.add_argument("--top-k", type=top_k, default=50, help="0 = off")
    g.add_argument("--top-p", type=probability, default=0.95, help="1 = off")
    g.add_argument("--repetition-penalty", type=repetition_penalty, default=1.0, help="> 1 discourages repeats")
    g.add_argument("--stop", action="append", default=[], help="stop when this text appears (repeatable)")
    g.add_argument("--num-samples", type=Number(int, 1, 1000), default=1)
    g.add_argument("--seed", type=seed, help="sample i uses seed + i (default: random)")
    g.add_argument("--device", type=device, default="cpu")
    g.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default="float32",
        help="the weights' dtype in memory (bfloat16: half the memory of float32, slightly different numbers)",
    )
    add_fast_flag(g)
    g.set_defaults(func=run)


def run(args) -> int:
    import torch

    from tformer import lm
    from tformer.generation import SamplingConfig

    model, tokenizer = lm.load(args.model, args.device, getattr(torch, args.dtype), flag="--model")  # tformer.load
    sampling = SamplingConfig(
        not args.greedy,
        args.temperature,
        args.top_k or None,
        args.top_p if args.top_p < 1 else None,
        args.repetition_penalty,
    )
    out = sys.stdout

    def show(text: str) -> None:
        out.write(text)
        out.flush()

    for i in range(args.num_samples):
        if i:
            out.write("\n" + "-" * 40 + "\n")
        show(args.prompt)
        seed = None if args.seed is None else args.seed + i
        lm.generate(model, tokenizer, args.prompt, args.max_new_tokens, sampling, args.stop, seed, on_text=show)
        show("\n")
    return 0
