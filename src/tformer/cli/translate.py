"""``tformer translate``: translate sentences with a trained translation model (arguments or stdin lines)."""

from __future__ import annotations

from tformer.cli.common import add_translation_flags
from tformer.cli.validate import positive_float, positive_int, probability, seed


def add_parser(sub) -> None:
    p = sub.add_parser("translate", help="translate sentences (arguments or stdin lines)")
    p.add_argument("sentences", nargs="*", help="sentences to translate; none = read lines from stdin")
    add_translation_flags(p)
    p.add_argument("--sample", action="store_true", help="sample instead of greedy/beam")
    p.add_argument("--temperature", type=positive_float, default=1.0)
    p.add_argument("--top-k", type=positive_int)
    p.add_argument("--top-p", type=probability)
    p.add_argument("--seed", type=seed)
    p.set_defaults(func=run)


def run(args) -> int:
    from tformer.generation import SamplingConfig
    from tformer.text import read_stdin_lines
    from tformer.translation import Translator

    translator = Translator.load(args.model, args.device)
    sentences = args.sentences or [line for line in read_stdin_lines() if line.strip()]  # strict UTF-8
    sampling = SamplingConfig(True, args.temperature, args.top_k, args.top_p) if args.sample else None
    for out in translator.translate(
        sentences,
        beam=args.beam,
        max_len=args.max_len,
        batch_size=args.batch_size,
        length_penalty=args.length_penalty,
        sampling=sampling,
        seed=args.seed,
    ):
        print(out, flush=True)
    return 0
