"""``tformer translate`` and ``tformer evaluate``: run a trained translation model."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    p = sub.add_parser("translate", help="translate sentences (arguments or stdin lines)")
    p.add_argument("sentences", nargs="*", help="sentences to translate; none = read lines from stdin")
    _common(p)
    p.add_argument("--sample", action="store_true", help="sample instead of greedy/beam")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int)
    p.add_argument("--top-p", type=float)
    p.add_argument("--seed", type=int)
    p.set_defaults(func=run_translate)

    e = sub.add_parser("evaluate", help="sacreBLEU BLEU and chrF of a translation model on a test set")
    e.add_argument("--src", required=True, help="source sentences, one per line")
    e.add_argument("--ref", required=True, action="append", help="reference file (repeat for multiple references)")
    e.add_argument("--out-hyp", help="write the translations to this file")
    _common(e)
    e.set_defaults(func=run_evaluate)


def _common(p) -> None:
    p.add_argument("--model", required=True, help="model directory (from tformer train translation / demo)")
    p.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")
    p.add_argument("--length-penalty", type=float, default=1.0)
    p.add_argument("--max-len", type=int, default=128, help="longest translation in tokens")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default="cpu")


def run_translate(args) -> int:
    from tformer.generation import SamplingConfig
    from tformer.translation.task import Translator

    translator = Translator.load(args.model, args.device)
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    sampling = SamplingConfig(True, args.temperature, args.top_k, args.top_p) if args.sample else None
    for out in translator.translate(sentences, beam=args.beam, max_len=args.max_len, batch_size=args.batch_size,
                                    length_penalty=args.length_penalty, sampling=sampling, seed=args.seed):
        print(out, flush=True)
    return 0


def run_evaluate(args) -> int:
    from pathlib import Path

    from tformer.translation.task import Translator

    def lines(path):
        return Path(path).read_text(encoding="utf-8").splitlines()

    sources = lines(args.src)
    refs = [lines(r) for r in args.ref]
    for path, r in zip(args.ref, refs):
        if len(r) != len(sources):
            raise ValueError(f"--ref {path} has {len(r)} lines, --src {args.src} has {len(sources)}")
    translator = Translator.load(args.model, args.device)
    result = translator.evaluate(sources, refs, beam=args.beam, max_len=args.max_len)
    if args.out_hyp:
        Path(args.out_hyp).write_text("\n".join(result["hypotheses"]) + "\n", encoding="utf-8")
    print(f"BLEU {result['bleu']:.2f}  {result['bleu_signature']}")
    print(f"chrF {result['chrf']:.2f}  {result['chrf_signature']}")
    return 0
