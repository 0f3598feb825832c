"""``tformer evaluate``: sacreBLEU BLEU and chrF of a translation model on a test set (source and reference files)."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

from tformer.cli.flags import add
from tformer.cli.translate import add_decoding, unused_length_penalty
from tformer.cli.validate import nonempty_file, output_file


def add_parser(sub) -> None:
    e = sub.add_parser("evaluate", help="sacreBLEU BLEU and chrF of a translation model on a test set")
    e.add_argument("--src", required=True, type=nonempty_file, help="source sentences, one per line")
    e.add_argument(
        "--ref",
        required=True,
        action="append",
        type=nonempty_file,
        help="reference file (repeat for multiple references)",
    )
    e.add_argument("--out-hyp", type=output_file, help="write the translations to this new file (see --overwrite)")
    add(e, "--overwrite", overwrite={"flag": "--out-hyp"})
    add_decoding(e)
    e.add_argument(
        "--tune-length-penalty",
        action="store_true",
        help="try the length penalties 0.6, 0.8, 1.0, 1.2, 1.4 with --beam on --src/--ref (a validation set, never the "
        "test set), and keep the best as the model's default (decoding.json in its directory; a Hugging Face "
        "directory's generation_config.json)",
    )
    e.set_defaults(func=run)


def run(args) -> int:
    from tformer.fast.precision import for_inference
    from tformer.outputs import check_output, write_output
    from tformer.translation import Translator, evaluate_files

    if args.tune_length_penalty:  # the sweep tries its own penalties and writes no translations: said, not ignored
        given = [
            flag
            for flag, value in (("--length-penalty", args.length_penalty), ("--out-hyp", args.out_hyp))
            if value is not None
        ]
        if given:
            raise ValueError(
                f"--tune-length-penalty tries its own penalties and writes no translations: drop {given[0]}"
            )
    if args.out_hyp:  # before the model is loaded and the test set translated
        inputs = [("--src", args.src), *(("--ref", ref) for ref in args.ref), ("--model", args.model)]
        check_output(args.out_hyp, "--out-hyp", inputs, args.overwrite)
    translator = Translator.load(args.model, args.device, flag="--model", fast=args.fast)  # through tformer.load
    translator.model = for_inference(translator.model, args.precision, "measuring", args.device, args.fast)
    unused_length_penalty(args, "evaluate")
    with _cuts_summed(args):
        if args.tune_length_penalty:
            return _tune(args, translator)
        decoding = dict(beam=args.beam, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
        result = evaluate_files(translator, args.src, args.ref, length_penalty=args.length_penalty, **decoding)
    if args.out_hyp:
        text = "\n".join(result["hypotheses"]) + "\n"
        write_output(args.out_hyp, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    print(f"BLEU {result['bleu']:.2f}  {result['bleu_signature']}")
    print(f"chrF {result['chrf']:.2f}  {result['chrf_signature']}")
    return 0


@contextlib.contextmanager
def _cuts_summed(args) -> Iterator[None]:
    """Sources longer than the model reads and translations cut by their length limit, one line for each kind: the
    first one's warning, then how many more and their lines in ``--src`` (each sentence once, however many penalties
    ``--tune-length-penalty`` tried)."""
    from tformer.cli.translate import renumbered
    from tformer.translation.translator import CUTS, recording_cuts

    with recording_cuts() as caught:
        try:
            yield
        finally:
            for w in caught:
                if not isinstance(w.message, CUTS):  # as Python shows them
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
            for kind in CUTS:
                seen = {w.message.number: w.message for w in caught if isinstance(w.message, kind)}  # type: ignore
                if seen:
                    lines = sorted(seen)
                    said = str(renumbered(seen[lines[0]], 0, args.max_new_tokens))
                    if len(lines) > 1:
                        shown = ", ".join(map(str, lines[1:9])) + (", ..." if len(lines) > 9 else "")
                        said += f"; and {len(lines) - 1:,} more so (--src lines {shown})"
                    print(f"tformer evaluate: warning: {said}", file=sys.stderr)


def _tune(args, translator) -> int:
    """``--tune-length-penalty``: each penalty's scores, and the best kept beside the model."""
    from tformer.models.checkpoint import model_dir
    from tformer.text import read_lines
    from tformer.translation.translator import save_length_penalty, tune_length_penalty

    sources, references = read_lines(args.src), [read_lines(r) for r in args.ref]
    decoding = dict(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    best, table = tune_length_penalty(translator, sources, references, args.beam, **decoding)
    for row in table:
        print(f"length penalty {row['length_penalty']:.1f}: BLEU {row['bleu']:.2f}  chrF {row['chrf']:.2f}")
    bleu = next(row["bleu"] for row in table if row["length_penalty"] == best)
    path = save_length_penalty(model_dir(args.model), best, src=str(args.src), beam=args.beam, bleu=round(bleu, 2))
    print(f"best: {best:.1f} (BLEU {bleu:.2f}), kept in {path}: translate and evaluate use it unless given another")
    return 0
