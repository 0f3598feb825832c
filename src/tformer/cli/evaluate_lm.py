"""``tformer evaluate-lm``: loss, perplexity and bits per character/byte of a language model on a text.

tformer evaluate-lm --model runs/shakespeare --data other.txt
"""

from __future__ import annotations

from tformer.cli.validate import device, existing_dir, existing_path, positive_int


def add_parser(sub) -> None:
    e = sub.add_parser("evaluate-lm", help="loss, perplexity and bits per character/byte of a language model on a text")
    e.add_argument("--model", required=True, type=existing_dir, help="a GPT: a tformer train lm run or model directory")
    e.add_argument(
        "--data", required=True, type=existing_path, help="a UTF-8 text file, a folder of .txt files, or a JSONL file"
    )
    e.add_argument("--block-size", type=positive_int, help="tokens per block (default: the model's context)")
    e.add_argument("--batch-size", type=positive_int, default=32)
    e.add_argument("--device", type=device, default="cpu")
    e.set_defaults(func=run)


def run(args) -> int:
    from tformer import lm

    model, tokenizer = lm.load(args.model, args.device, flag="--model")  # through tformer.load
    r = lm.evaluate(model, tokenizer, args.data, args.block_size, args.batch_size)
    print(
        f"tokens {r['tokens']}  loss {r['val_loss']:.4f}  perplexity {r['val_ppl']:.3f}  "
        f"bits per {r['unit']} {r['val_bpc']:.4f}"
    )
    return 0
