"""``tformer train lm``, ``tformer generate`` and ``tformer evaluate-lm``: the decoder-only language model.

    tformer train lm --data ../shared/data/tinyshakespeare.txt --out runs/shakespeare --preset shakespeare-char --minutes 1.5
    tformer generate --model runs/shakespeare --prompt "ROMEO:" --max-new-tokens 300 --temperature 0.8 --top-k 50 --seed 1
    tformer evaluate-lm --model runs/shakespeare --data other.txt
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

# Training recipes tuned for this project's 2-core CPU: a model shape (on top of a GPTConfig preset)
# plus data and optimiser settings. Flags given on the command line win over the recipe.
RECIPES = {
    # Tuned by training for the budget on this 2-core CPU (README): the fewer the minutes, the shallower the model
    # that wins, because a cheaper step buys more steps. From two layers on they use rotary positions (RoPE: at
    # 9,000 steps of the 6-minute model, val 1.546 against 1.578 with GPT-2's learned table, for 8% more time a
    # step); all use the exact (erf) GELU, as nanoGPT (PyTorch's tanh GELU, GPT-2's, is ~3× slower on this CPU).
    # ~1.5 minutes: one layer, learned positions (with RoPE it ended worse: 4,008 steps -> 1.710 vs ~1.66)
    "shakespeare-char": dict(base="tiny", model=dict(d_model=128, n_heads=4, n_layers=1, d_ff=512, dropout=0.0,
                                                     activation="gelu"),
                             tokenizer="char", block_size=128, batch_size=8, lr=3e-3, warmup_steps=50),
    # ~6 minutes: two layers, a lower peak lr, weight decay 0.1 (at 9,000 steps: val 1.533 against 1.546 with 0.01;
    # 0.3 gave 1.533 too)
    "shakespeare-char-6min": dict(base="tiny", model=dict(d_model=128, n_heads=4, n_layers=2, d_ff=512, dropout=0.0,
                                                          activation="gelu", positional="rope"),
                                  tokenizer="char", block_size=128, batch_size=8, lr=2e-3, warmup_steps=50,
                                  weight_decay=0.1),
    # ~30 minutes: four layers with dropout 0.1 on the residual paths (none on the attention weights, so the
    # fused attention kernel keeps running) and weight decay 0.1; without dropout four layers overfit (val 1.53
    # after 9,000 steps, 1.57 at the end of 13,611), with weight decay 0.01 validation stalled at 1.50; twice the batch
    "shakespeare-char-30min": dict(base="tiny", model=dict(d_model=128, n_heads=4, n_layers=4, d_ff=512, dropout=0.1,
                                                           attn_dropout=0.0, activation="gelu", positional="rope"),
                                   tokenizer="char", block_size=128, batch_size=16, lr=2e-3, warmup_steps=100,
                                   weight_decay=0.1),
}
DEFAULTS = dict(tokenizer="char", batch_size=16, lr=1e-3, warmup_steps=100, weight_decay=0.01, vocab_size=4096)


def add_train_lm_parser(fam) -> None:
    """Add ``lm`` to the families of ``tformer train``."""
    from tformer.cli.train import add_training_flags

    t = fam.add_parser("lm", help="decoder-only (GPT) language model on a text file, a folder of .txt files or JSONL",
                       description="Unset --lr/--warmup-steps/--weight-decay/--batch-size/--block-size/--tokenizer come "
                                   "from the preset's recipe, else lr 1e-3, warmup 100, weight decay 0.01, batch 16, "
                                   "the preset's context, char. "
                                   "Cosine decays over --max-steps, else over --minutes.")
    t.add_argument("--data", required=True, help="a UTF-8 text file, a folder of .txt files, or a JSONL file with a 'text' field")
    t.add_argument("--preset", choices=["tiny", "small", "base", *RECIPES], default="tiny",
                   help="model size (GPTConfig preset) or a tuned CPU recipe")
    t.add_argument("--tokenizer", choices=["char", "bpe"], help="character-level or byte-level BPE (default: char)")
    t.add_argument("--vocab-size", type=int, help="BPE vocabulary size (default 4096; char: the text's characters)")
    t.add_argument("--block-size", type=int, help="context length in tokens (default: the preset's max_len)")
    t.add_argument("--batch-size", type=int, help="blocks per batch (default 16)")
    t.add_argument("--dropout", type=float, help="override the preset's dropout")
    t.add_argument("--batches-per-epoch", type=int, default=200, help="random batches per 'epoch' (evaluation cadence)")
    t.add_argument("--eval-blocks", type=int, default=400, help="validation blocks scored at each evaluation")
    t.add_argument("--val-fraction", type=float, default=0.1, help="the last part of the text kept for validation")
    t.add_argument("--compile", action="store_true", help="torch.compile the model for training (the saved model is unwrapped)")
    add_training_flags(t, lr=1e-3, warmup=100, schedule="cosine")
    t.set_defaults(func=run_train_lm, lr=None, warmup_steps=None, weight_decay=None)


def add_parser(sub) -> None:
    g = sub.add_parser("generate", help="continue a prompt with a trained language model (streams to stdout)")
    g.add_argument("--model", required=True, help="model directory (from tformer train lm)")
    g.add_argument("--prompt", default="", help="text to continue (default: start a new document)")
    g.add_argument("--max-new-tokens", type=int, default=300)
    g.add_argument("--greedy", action="store_true", help="argmax instead of sampling")
    g.add_argument("--temperature", type=float, default=0.8)
    g.add_argument("--top-k", type=int, default=50, help="0 = off")
    g.add_argument("--top-p", type=float, default=0.95, help="1 = off")
    g.add_argument("--repetition-penalty", type=float, default=1.0)
    g.add_argument("--stop", action="append", default=[], help="stop when this text appears (repeatable)")
    g.add_argument("--num-samples", type=int, default=1)
    g.add_argument("--seed", type=int, help="sample i uses seed + i (default: random)")
    g.add_argument("--device", default="cpu")
    g.set_defaults(func=run_generate)

    e = sub.add_parser("evaluate-lm", help="loss, perplexity and bits per character/byte of a language model on a text")
    e.add_argument("--model", required=True, help="model directory (from tformer train lm)")
    e.add_argument("--data", required=True, help="a UTF-8 text file, a folder of .txt files, or a JSONL file")
    e.add_argument("--block-size", type=int, help="tokens per block (default: the model's context)")
    e.add_argument("--batch-size", type=int, default=32)
    e.add_argument("--device", default="cpu")
    e.set_defaults(func=run_evaluate_lm)


def _resolve(args) -> dict:
    """Flags > recipe > defaults, and the GPTConfig overrides."""
    recipe = RECIPES.get(args.preset, dict(base=args.preset, model={}))
    pick = {k: getattr(args, k) if getattr(args, k) is not None else recipe.get(k, DEFAULTS.get(k))
            for k in ("tokenizer", "batch_size", "lr", "warmup_steps", "weight_decay", "vocab_size", "block_size")}
    model = dict(recipe["model"])
    if args.dropout is not None:
        model["dropout"] = args.dropout
    if pick["block_size"] is not None:
        model["max_len"] = pick["block_size"]
    return {**pick, "base": recipe["base"], "model": model}


def run_train_lm(args) -> int:
    import torch

    from tformer.training.distributed import from_rank0
    from tformer.lm.task import PAD, LMTask, encode_documents, load_lm_tokenizer, read_documents, split_ids, train_lm_tokenizer
    from tformer.models.gpt import GPT, GPTConfig
    from tformer.training.trainer import Trainer
    from tformer.cli.train import say, train_config

    r = _resolve(args)
    args.lr, args.warmup_steps, args.weight_decay = r["lr"], r["warmup_steps"], r["weight_decay"]
    if args.schedule == "cosine" and args.max_steps is None and args.minutes is None and args.epochs is not None:
        args.max_steps = math.ceil(args.epochs * args.batches_per_epoch / args.accum_steps)  # decay over the epochs
    cfg = train_config(args)
    docs = read_documents(args.data)
    if args.resume:  # the run's own tokenizer and config; the weights come back in trainer.resume()
        tokenizer = load_lm_tokenizer(Path(args.out) / "last")
        config = GPT.from_pretrained(Path(args.out) / "last").config
    else:
        tokenizer = from_rank0(lambda: train_lm_tokenizer(r["tokenizer"], docs, r["vocab_size"]), args.device)
        config = GPTConfig.preset(r["base"], vocab_size=tokenizer.vocab_size, pad_id=PAD, **r["model"])
    train_ids, val_ids = split_ids(encode_documents(tokenizer, docs), args.val_fraction)
    torch.manual_seed(args.seed)
    model = GPT(config)
    say(f"data: {len(docs)} document(s), {len(train_ids):,} train / {len(val_ids):,} validation tokens, "
        f"vocabulary {tokenizer.vocab_size}; model: {sum(p.numel() for p in model.parameters()):,} parameters, "
        f"context {config.max_len}")
    task = LMTask(tokenizer, train_ids, val_ids, config.max_len, r["batch_size"], args.batches_per_epoch,
                  args.eval_blocks, args.seed, args.compile)
    trainer = Trainer(model, task, cfg)
    if args.resume:
        trainer.resume()
    result = trainer.fit()
    say(f"done: step {trainer.step}, val_loss {result['val_loss']:.4f} (best {trainer.best:.4f}), "
        f"ppl {result['val_ppl']:.2f}, bpc {result['val_bpc']:.3f} -> {args.out}")
    return 0


def _load(directory: str, device: str):
    from tformer.lm.task import load_lm_tokenizer
    from tformer.models.gpt import GPT

    return GPT.from_pretrained(directory).to(device).eval(), load_lm_tokenizer(directory)


def run_generate(args) -> int:
    from tformer.generation import SamplingConfig, generate_lm
    from tformer.lm.task import EOT, PAD, TextStream

    if args.num_samples < 1:
        raise ValueError(f"--num-samples must be >= 1, got {args.num_samples}")
    model, tokenizer = _load(args.model, args.device)
    sampling = SamplingConfig(not args.greedy, args.temperature, args.top_k or None,
                              args.top_p if args.top_p < 1 else None, args.repetition_penalty)
    prompt = tokenizer.encode(args.prompt) or [EOT]  # no prompt: start as after a document boundary
    out = sys.stdout
    for i in range(args.num_samples):
        if i:
            out.write("\n" + "-" * 40 + "\n")
        out.write(args.prompt)
        out.flush()
        stream = TextStream(tokenizer, args.stop)

        def show(step, ids, stream=stream):
            if int(ids[0]) != EOT:  # the end of the document is not shown
                out.write(stream.push(int(ids[0])))
            out.flush()

        seed = None if args.seed is None else args.seed + i
        generate_lm(model, [prompt], args.max_new_tokens, sampling, eos_id=EOT, pad_id=PAD, seed=seed, on_token=show,
                    stop=lambda step, ids, stream=stream: [stream.stopped])
        out.write(stream.flush() + "\n")
        out.flush()
    return 0


def run_evaluate_lm(args) -> int:
    from tformer.lm.task import CharTokenizer, encode_documents, evaluate_stream, read_documents

    import torch

    model, tokenizer = _load(args.model, args.device)
    ids = encode_documents(tokenizer, read_documents(args.data))
    if len(ids) < 2:
        raise ValueError(f"--data {args.data!r} has fewer than 2 tokens")
    block = min(args.block_size or model.config.max_len, model.config.max_len)
    r = evaluate_stream(model, ids, torch.tensor(tokenizer.unit_lengths()), block, args.batch_size)
    unit = "character" if isinstance(tokenizer, CharTokenizer) else "byte"
    print(f"tokens {r['tokens']}  loss {r['val_loss']:.4f}  perplexity {r['val_ppl']:.3f}  bits per {unit} {r['val_bpc']:.4f}")
    return 0
