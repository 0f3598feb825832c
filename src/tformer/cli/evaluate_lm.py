"""``tformer evaluate-lm``: loss, perplexity and bits per character/byte of a language model on a text (a Hugging
Face model's tokens have no unit of tformer's: bits per byte of the text itself).

tformer evaluate-lm --model runs/shakespeare --data other.txt
"""

from __future__ import annotations

import sys

from tformer.cli.flags import add, defaults
from tformer.cli.generate import LM_MODEL
from tformer.cli.validate import corpus_path


def add_parser(sub) -> None:
    e = sub.add_parser("evaluate-lm", help="loss, perplexity and bits per character/byte of a language model on a text")
    from tformer.lm import run as lm

    add(e, "--model", model=LM_MODEL)
    e.add_argument(
        "--data",
        required=True,
        type=corpus_path,
        help="a UTF-8 text file, a folder of .txt files, a JSONL file, or a folder tformer data prepare lm made",
    )
    add(
        e,
        "--max-len",
        "--batch-size",
        "--device",
        "--precision",
        defaults=defaults(lm.evaluate),
        max_len={"help": "tokens per block scored (default: the model's context)", "old": ("--block-size",)},
        batch_size={"help": "blocks scored together"},
    )
    e.set_defaults(func=run)


def run(args) -> int:
    from tformer import lm
    from tformer.fast.precision import for_inference

    model, tokenizer = lm.load(args.model, args.device, flag="--model")  # through tformer.load
    model = for_inference(model, args.precision, "measuring", args.device)
    context = model.config.max_len
    if args.max_len is not None and args.max_len > context:  # as generate says of a prompt it cuts
        print(f"tformer evaluate-lm: note: --max-len {args.max_len} is past the model's context: scores blocks of "
              f"{context} tokens", file=sys.stderr)  # fmt: skip
    r = lm.evaluate(model, tokenizer, args.data, args.max_len, args.batch_size)
    if r.get("unknown"):
        print(f"tformer evaluate-lm: note: {r['unknown']:,} character(s) of --data are not in the model's vocabulary: "
              "scored as <unk>", file=sys.stderr)  # fmt: skip
    ppl = r["val_ppl"]  # inf past exp(700): 3 digits from 1e6 on, not 300
    bits = f"  bits per {r['unit']} {r['val_bpc']:.4f}" if r["unit"] else ""  # (a prepared folder, HF tokens: none)
    print(f"tokens {r['tokens']}  loss {r['val_loss']:.4f}  perplexity {ppl:{'.3f' if ppl < 1e6 else '.3g'}}{bits}")
    return 0
