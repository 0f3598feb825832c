"""``tformer translate``: translate sentences with a trained translation model (arguments or stdin lines).

One line out for each line in: an empty (or blank) line gives an empty line, so the output lines stay aligned with
the input's; input with no text at all is refused in one line, as ``embed`` refuses it. Lines on stdin are translated
as they come: a line is answered as soon as no more are waiting (so ``translate`` works as a filter between programs,
or typed at), while a file is read ``--batch-size`` · 16 lines at a time. With ``--sample --seed`` stdin is read whole
first, so that the same input gives the same translations however it arrives.

A sentence longer than the model reads (its ``max_len`` tokens) is translated from its first ``max_len`` tokens,
with one line on stderr: ``tformer translate: warning: source sentence 3 is longer than the model reads ...``; a
translation cut by its length limit is one line too: ``... warning: translation 3 reached 128 tokens without its end
token: cut there (--max-new-tokens 128)``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable

from tformer.cli.flags import FLAGS, add, defaults, options

TRANSLATOR = (
    "a translator: a tformer train translation / demo run or model directory, or a Hugging Face Marian one (OPUS-MT, "
    "or tformer export's)"
)
COMPILE = (
    "decode on a static KV cache with the one-token step compiled once by torch.compile (on a GPU captured as a CUDA "
    "graph and replayed): the same translations; the first batch pays the compilation (seconds to a minute)"
)
DECODING = ("--beam", "--length-penalty", "--max-new-tokens", "--batch-size", "--device", "--precision", "--no-fast")


def add_decoding(p) -> None:
    """The model and decoding flags of ``translate`` and ``evaluate`` (:meth:`Translator.translate`'s settings)."""
    from tformer.translation import Translator

    add(p, "--model", model={"required": True, "help": TRANSLATOR})
    entry = defaults(Translator.translate)
    add(
        p,
        *DECODING,
        defaults=entry,
        max_new_tokens={
            "help": "longest translation in tokens (the model's own max_len caps it)",
            "old": ("--max-len",),
        },
        batch_size={"help": "sentences translated together"},
        beam={
            "help": "beam size, 1 to 64 (1 = greedy; at most the target vocabulary): transformers' "
            "generate(num_beams=K, "
            "early_stopping=True); of a Hugging Face model's generation_config.json only length_penalty is read "
            "(not its num_beams, bad_words_ids or forced_eos_token_id)"
        },
    )


def add_parser(sub) -> None:
    p = sub.add_parser("translate", help="translate sentences (arguments or stdin lines)")
    p.add_argument("sentences", nargs="*", help="sentences to translate; none = read lines from stdin")
    add_decoding(p)
    p.add_argument("--sample", action="store_true", help="sample instead of greedy/beam")
    add(
        p,
        "--temperature",
        "--top-k",
        "--top-p",
        "--seed",
        temperature={"help": "with --sample: divide the logits by this; a tiny value is greedy"},
        seed={"default": None, "help": "with --sample: the random seed (default: random)"},
    )
    add(p, "--compile", compile={"help": COMPILE})
    p.set_defaults(func=run)


def run(args) -> int:
    from tformer.fast.precision import for_inference
    from tformer.generation import SamplingConfig
    from tformer.text import read_stdin_lines, stdin_line_batches
    from tformer.translation import Translator

    if args.sample and args.beam > 1:  # transformers would sample beams (beam_sample); this beam search draws nothing
        raise ValueError(
            f"--sample with --beam {args.beam}: beam search keeps the likeliest beams and draws nothing; give --beam 1 "
            "to sample, or drop --sample for beam search"
        )
    translator = Translator.load(args.model, args.device, flag="--model", fast=args.fast)  # through tformer.load
    translator.model = for_inference(translator.model, args.precision, "decoding", args.device, args.fast)
    unused_length_penalty(args, "translate")
    if args.sentences and not any(s.strip() for s in args.sentences):
        raise ValueError(_NONE.format(where="the arguments are all empty"))
    top_p = args.top_p if args.top_p < 1 else None
    sampling = SamplingConfig(True, args.temperature, args.top_k or None, top_p) if args.sample else None
    flags = ("--temperature", "--top-k", "--top-p")
    unused = [f for f in flags if getattr(args, f[2:].replace("-", "_")) != FLAGS[f].default]  # set: for sampling
    unused += ["--seed"] * (args.seed is not None)  # (beam search and greedy decoding draw nothing)
    if unused and not args.sample:  # as transformers warns when do_sample is off
        print(f"tformer translate: note: {', '.join(unused)} shape sampling only (--sample): not used", file=sys.stderr)
    # stdin: each line translated as soon as no more wait (a filter, as fairseq-interactive is), a file in batches
    if args.sentences or (args.sample and args.seed is not None):  # a seed's draws: over the whole input at once
        batches: Iterable[list[str]] = [args.sentences or read_stdin_lines()]
    else:
        batches = stdin_line_batches(args.batch_size * READ_BATCHES)
    done, blank = 0, 0  # sentences translated before this batch; blank lines held until a sentence comes
    for sentences in batches:  # strict UTF-8; every line, empty ones too: one out for each
        if not done and not any(s.strip() for s in sentences):
            blank += len(sentences)  # no text yet: nothing is printed if none comes
            continue
        outputs = [""] * blank + _translated(translator, args, sentences, sampling, done + blank)
        done, blank = done + len(outputs), 0
        for out in outputs:
            print(out, flush=True)
    if not done:
        raise ValueError(_NONE.format(where="stdin held only empty lines"))
    return 0


def unused_length_penalty(args, command: str) -> None:
    """``--length-penalty`` with greedy decoding (``--beam 1``), where no beams are ranked: said, as transformers
    warns of a length_penalty with num_beams=1."""
    if args.length_penalty is not None and args.beam == 1:
        print(
            f"tformer {command}: note: --length-penalty ranks the beams of beam search (--beam 2 or more): not used "
            "with --beam 1",
            file=sys.stderr,
        )


_NONE = "no sentences: {where} (one sentence a line, pass them as arguments or pipe them in)"
READ_BATCHES = 16  # stdin: lines read ahead when they are waiting, in --batch-size's (sorted by length together)


def _translated(translator, args, sentences: list[str], sampling, before: int) -> list[str]:
    """``sentences`` translated, a cut source or translation said in one line naming its place in the whole input
    (``before`` sentences came first)."""
    from tformer.translation import Translator
    from tformer.translation.translator import recording_cuts

    with recording_cuts() as caught:
        outputs = translator.translate(**options(args, Translator.translate, sentences=sentences, sampling=sampling))
    cuts = []
    for warning in caught:  # a cut sentence: one line each, in the input's order; anything else as Python shows it
        said = renumbered(warning.message, before, args.max_new_tokens)
        if said is not None:
            cuts.append(said)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    for said in sorted(cuts, key=lambda w: w.number):  # type: ignore[attr-defined]  # a source's before its translation
        print(f"tformer translate: warning: {said}", file=sys.stderr)
    return outputs


def renumbered(message, before: int, max_new_tokens: int) -> Warning | None:
    """A :class:`SourceTruncated` or :class:`TranslationCut` warning numbered in the whole input (``before`` sentences
    came first), its limit named by its flag; None for any other warning."""
    from tformer.translation.translator import SourceTruncated, TranslationCut

    if isinstance(message, SourceTruncated):
        return SourceTruncated(before + message.number, message.detail)
    if isinstance(message, TranslationCut):
        flag = f"--max-new-tokens {max_new_tokens}"
        limit = f"{message.limit}; {flag} cannot go past it" if message.by_model else flag
        return TranslationCut(before + message.number, message.tokens, limit, by_model=message.by_model)
    return None
