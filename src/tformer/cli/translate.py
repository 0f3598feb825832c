"""``tformer translate``: translate sentences with a trained translation model (arguments or stdin lines).

A sentence longer than the model reads (its ``max_len`` tokens) is translated from its first ``max_len`` tokens,
with one line on stderr: ``tformer translate: warning: source sentence 3 is longer than the model reads ...``.
"""

from __future__ import annotations

import sys
import warnings

from tformer.cli.common import add_translation_flags
from tformer.cli.validate import probability, seed, temperature, top_k


def add_parser(sub) -> None:
    p = sub.add_parser("translate", help="translate sentences (arguments or stdin lines)")
    p.add_argument("sentences", nargs="*", help="sentences to translate; none = read lines from stdin")
    add_translation_flags(p)
    p.add_argument("--sample", action="store_true", help="sample instead of greedy/beam")
    p.add_argument("--temperature", type=temperature, default=1.0, help="with --sample; a tiny value is greedy")
    p.add_argument("--top-k", type=top_k, help="with --sample (0 = off)")
    p.add_argument("--top-p", type=probability)
    p.add_argument("--seed", type=seed)
    p.set_defaults(func=run)


def run(args) -> int:
    from tformer.generation import SamplingConfig
    from tformer.text import read_stdin_lines
    from tformer.translation import Translator
    from tformer.translation.translator import SourceTruncated

    translator = Translator.load(args.model, args.device, flag="--model")  # through tformer.load
    sentences = args.sentences or [line for line in read_stdin_lines() if line.strip()]  # strict UTF-8
    sampling = SamplingConfig(True, args.temperature, args.top_k or None, args.top_p) if args.sample else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SourceTruncated)
        outputs = translator.translate(
            sentences,
            beam=args.beam,
            max_len=args.max_len,
            batch_size=args.batch_size,
            length_penalty=args.length_penalty,
            sampling=sampling,
            seed=args.seed,
        )
    for warning in caught:  # a cut sentence: one line each; anything else as Python shows it
        if issubclass(warning.category, SourceTruncated):
            print(f"tformer translate: warning: {warning.message}", file=sys.stderr)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    for out in outputs:
        print(out, flush=True)
    return 0
