"""``tformer generate``: continue a prompt with a trained language model, streaming to stdout.

tformer generate --model runs/shakespeare --prompt "ROMEO:" --max-new-tokens 300 --temperature 0.8 --top-k 50 --seed 1
tformer generate --model ./SmolLM2-135M --prompt "The capital of France is" --greedy --max-new-tokens 20
tformer generate --model runs/shakespeare --device cuda --compile   # static KV cache, the step a CUDA graph

``--model`` is any GPT ``tformer.load`` reads: a ``tformer train lm`` run or model directory, or a Hugging Face
decoder directory (config.json, safetensors weights, tokenizer.json; read without ``transformers``); another family
is refused in one line.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from tformer.cli.flags import add
from tformer.cli.validate import Number, repetition_penalty

COMPILE = (
    "decode on a static KV cache with the one-token step compiled once by torch.compile (on a GPU captured as a CUDA "
    "graph and replayed): the same tokens, faster where launching kernels is the cost; the first run pays the "
    "compilation (seconds to a minute)"
)
# what generate samples with unless told: the filters people use with small models (nanoGPT's sample.py, HF's)
SAMPLING = {"max_new_tokens": 300, "temperature": 0.8, "top_k": 50, "top_p": 0.95, "seed": None}


def stop_text(text: str) -> str:
    """``--stop``: any text but the empty one (which would end every text at once; serve refuses it too)."""
    if text == "":
        raise argparse.ArgumentTypeError("must not be empty: a stop string ends the text where it appears")
    return text


# --model of the commands that read a language model (generate, evaluate-lm)
LM_MODEL = {
    "required": True,
    "help": "a GPT: a tformer train lm run or model directory, or a Hugging Face one (gpt2, gpt_neox, llama, mistral, "
    "qwen2, qwen3, gemma3)",
}


def add_parser(sub) -> None:
    g = sub.add_parser("generate", help="continue a prompt with a trained language model (streams to stdout)")
    add(g, "--model", model=LM_MODEL)
    g.add_argument("--prompt", default="", help="text to continue (default: start a new document)")
    add(
        g,
        "--max-new-tokens",
        defaults=SAMPLING,
        max_new_tokens={"help": "tokens generated at most (past the model's context the window slides)"},
    )
    add_sampling(g)
    g.add_argument(
        "--stop", action="append", type=stop_text, default=[], help="stop when this text appears (repeatable)"
    )
    g.add_argument("--num-samples", type=Number(int, 1, 1000), default=1, help="continuations, one after another")
    add(g, "--seed", "--device", defaults=SAMPLING, seed={"help": "sample i uses seed + i (default: random)"})
    add(g, "--precision", "--no-fast", "--compile", compile={"help": COMPILE})
    g.set_defaults(func=run)


def add_sampling(g) -> None:
    """How a decoding command chooses each token: ``--greedy``, or sampling with ``--temperature``, ``--top-k``,
    ``--top-p``; ``--repetition-penalty`` either way (``generate``'s and ``chat``'s)."""
    g.add_argument("--greedy", action="store_true", help="argmax instead of sampling")
    add(g, "--temperature", "--top-k", "--top-p", defaults=SAMPLING)
    g.add_argument("--repetition-penalty", type=repetition_penalty, default=1.0, help="> 1 discourages repeated tokens")


def sampling_config(args):
    """The :class:`~tformer.generation.SamplingConfig` of :func:`add_sampling`'s flags (0 / 1: the filter off)."""
    from tformer.generation import SamplingConfig

    return SamplingConfig(
        not args.greedy,
        args.temperature,
        args.top_k or None,
        args.top_p if args.top_p < 1 else None,
        args.repetition_penalty,
    )


def run(args) -> int:
    if args.greedy and args.num_samples > 1:  # greedy decoding gives the same text every time (HF refuses it too)
        raise ValueError(
            f"--num-samples {args.num_samples} with --greedy would print the same continuation {args.num_samples} "
            "times: drop --greedy to sample them, or --num-samples"
        )
    from tformer import lm
    from tformer.fast.precision import for_inference
    from tformer.generation import PromptCut

    model, tokenizer = lm.load(args.model, args.device, flag="--model", fast=args.fast)  # through tformer.load
    model = for_inference(model, args.precision, "decoding", args.device, args.fast)
    sampling = sampling_config(args)
    settings = ("temperature", "top_k", "top_p", "seed")  # sampling's alone: greedy decoding draws nothing
    unused = [f"--{k.replace('_', '-')}" for k in settings if getattr(args, k) != SAMPLING[k]]
    if args.greedy and unused:  # as transformers warns when do_sample is off
        print(f"note: --greedy takes the most likely token: {', '.join(unused)} not used", file=sys.stderr)
    out = sys.stdout
    _say_cache(model, tokenizer, args)
    if unknown := tokenizer.lacks(args.prompt):  # a character model reads them as <unk>
        print(f"note: --prompt has {len(unknown)} character(s) the model's vocabulary lacks "
              f"({' '.join(unknown[:10])}): it reads each as <unk>", file=sys.stderr)  # fmt: skip

    def show(text: str) -> None:
        out.write(text)
        out.flush()

    warnings.filterwarnings("ignore", category=PromptCut)  # _say_cache said it, naming --prompt (for this command)
    for i in range(args.num_samples):
        if i:
            out.write("\n" + "-" * 40 + "\n")
        show(args.prompt)
        seed = None if args.seed is None else args.seed + i
        lm.generate(
            model,
            tokenizer,
            args.prompt,
            args.max_new_tokens,
            sampling,
            args.stop,
            seed,
            on_text=show,
            compile=args.compile,
        )
        show("\n")
    return 0


def _say_cache(model, tokenizer, args) -> None:
    """The KV cache this run will hold at most, on stderr, before it is allocated (tformer.generation.cache_size; the
    library refuses one larger than the memory available)."""
    from tformer.generation.cache_size import describe_bytes, kv_cache_bytes
    from tformer.generation.static import lm_capacity

    prompt = len(tokenizer.encode(args.prompt)) + 1 if args.prompt else 1  # (+ a start-of-document token)
    positions = min(prompt + args.max_new_tokens, model.config.max_len)
    kind = ""
    if args.compile:  # the static cache: its capacity, in every layer (a sliding window's too)
        positions, kind = lm_capacity(prompt, args.max_new_tokens, model.config.max_len), "static "
    size = kv_cache_bytes(model, 1, positions, static=bool(args.compile))
    print(f"{kind}KV cache: {describe_bytes(size)} at most (1 row x {positions} positions)", file=sys.stderr)
    context = model.config.max_len
    if prompt >= context:  # the model reads its context's worth: the prompt's start is cut, as a window slides
        print(
            f"note: --prompt is {prompt:,} tokens, {'as many as' if prompt == context else 'more than'} the model's "
            f"context of {context:,}: it reads the last "
            f"{context - 1:,} (room for one new token)",
            file=sys.stderr,
        )
