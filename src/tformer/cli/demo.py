"""``tformer demo``: the main job — train a small English→French translator, then show what it learned.

Trains on the built-in corpus (or ``--data``) for a few minutes on the CPU, prints translations
including the notes' "I am good." → "Je vais bien.", and writes the checkpoint, the training
curves and a cross-attention heatmap (target tokens × source tokens) as PNG files.
"""

from __future__ import annotations

from pathlib import Path

EXAMPLES = ["I am good.", "She is tired.", "We do not eat bread today.", "Do you like coffee?", "They have a dog."]


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="train a small translator on the built-in corpus and show it working")
    p.add_argument("--data", default="builtin", help="'builtin', a TSV pairs file, or a Multi30k-style directory")
    p.add_argument("--out", default="runs/demo", help="run directory")
    p.add_argument("--minutes", type=float, default=2.0, help="training time budget")
    p.add_argument("--preset", choices=["tiny", "small", "base"], default="tiny")
    p.add_argument("--vocab-size", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("sentences", nargs="*", help="sentences to translate at the end (default: a few examples)")
    p.set_defaults(func=run)


def run(args) -> int:
    from tformer.training.trainer import Trainer, TrainConfig
    from tformer.translation.task import TranslationTask, load_corpus, prepare, split_corpus

    out = Path(args.out)
    split = split_corpus(load_corpus(args.data), args.seed, valid=0.05, test=0.05)
    translator = prepare(split, out, args.preset, args.vocab_size, joint=True, seed=args.seed, max_len=128)
    task = TranslationTask(translator, split.train, split.valid, max_tokens=2048, seed=args.seed, bleu_sentences=200)
    cfg = TrainConfig(out_dir=str(out), lr=1e-3, warmup_steps=200, minutes=args.minutes, eval_every=200,
                      seed=args.seed, progress=not args.no_progress)
    n_params = sum(p.numel() for p in translator.model.parameters())
    print(f"training a {args.preset} Seq2SeqTransformer ({n_params:,} parameters) for {args.minutes:g} min on {len(split.train)} pairs")
    result = Trainer(translator.model, task, cfg).fit()
    print(f"validation: loss {result['val_loss']:.3f}, BLEU {result['bleu']:.1f}, chrF {result['chrf']:.1f}")

    from tformer.translation.task import Translator

    best = Translator.load(out)
    sentences = args.sentences or EXAMPLES
    for src, hyp in zip(sentences, best.translate(sentences)):
        print(f"  {src:32s} → {hyp}")
    heatmap = _cross_attention_png(best, sentences[0], out / "cross_attention.png")
    print(f"wrote {out}/ (model, tokenizers), {out / 'curves.png'}, {heatmap}")
    return 0


def _cross_attention_png(translator, sentence: str, path: Path) -> Path:
    """Heatmap of the last decoder layer's cross-attention (averaged over heads) for one translation."""
    import torch

    from tformer.generation import translate_ids
    from tformer.translation.tokenizer import EOS, SOS
    from tformer.inspect.plots import plot_attention

    src = translator.encode_sources([sentence])
    max_len = translator.model.config.max_len - 1
    hyp_ids = translate_ids(translator.model, src, SOS, EOS, max_len=min(max_len, 40))[0]
    tgt = torch.tensor([[SOS] + hyp_ids])
    with torch.no_grad():
        _, weights = translator.model(src, tgt, return_attention=True)
    last = f"decoder.layers.{translator.model.config.n_decoder_layers - 1}.cross_attn"
    def label(tokenizer, i):
        return tokenizer.id_to_token(i).replace("\u2581", "") or "\u2581"  # "▁" marks a word start

    src_tokens = [label(translator.src_tokenizer, i) for i in src[0].tolist()]
    tgt_tokens = ["<sos>"] + [label(translator.tgt_tokenizer, i) for i in hyp_ids]
    plot_attention(weights[last][0].mean(0), src_tokens, tgt_tokens, path,
                   title=f"cross-attention, last decoder layer (mean over heads): {sentence}")
    return path
