"""What averaging the weights gives in one run: the README's Multi30k recipe with ``--ema`` and ``--keep-checkpoints``.

    python -m benchmarks.averaging                       # multi30k-cpu-hour: 60 minutes, --ema 0.999, the last 5 kept
    python -m benchmarks.averaging --tgt de --minutes 60
    python -m benchmarks.averaging --quick               # the built-in corpus, a few seconds: proves the script works

One ``tformer train translation --config multi30k-cpu-hour`` run (the same minutes for all that follows):

* in the run's own log, each evaluation's BLEU of the trained weights and of their moving average (``ema_bleu``),
  greedy, on the same validation sentences;
* after it, sacreBLEU on ``val.*`` (1,014 sentences), greedy and beam 5, of: the last trained weights (the newest
  kept checkpoint), the mean of the last K kept (``tformer average --last K``), and ``best/`` (the better of the two
  kinds at the evaluation it won).

Writes ``OUT/averaging.json`` with the machine.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.common import report_dir, write_text

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def _scores(model_dir: Path, sources: list[str], refs: list[list[str]], beam: int) -> dict:
    from tformer.translation import Translator

    translator = Translator.load(model_dir)
    start = time.perf_counter()
    scores = translator.evaluate(sources, refs, beam=beam)
    return {"bleu": round(scores["bleu"], 2), "chrf": round(scores["chrf"], 2), "seconds": time.perf_counter() - start}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(SHARED / "multi30k"), help="the corpus (default: ../shared/data/multi30k)")
    p.add_argument("--tgt", default="fr", help="Multi30k's target language (default: fr)")
    p.add_argument("--minutes", type=float, default=60, help="the training run's time (default: 60)")
    p.add_argument("--ema", type=float, default=0.999, help="the moving average's decay (default: 0.999)")
    p.add_argument("--keep", type=int, default=5, help="checkpoints kept and averaged (--keep-checkpoints)")
    p.add_argument("--beam", type=int, default=5, help="beam width of the BLEU evaluation (default: 5)")
    p.add_argument(
        "--out",
        default="runs/bench-averaging",
        type=report_dir("averaging.json"),
        help="the run and averaging.json (default: %(default)s)",
    )
    p.add_argument("--quick", action="store_true", help="built-in corpus, tiny preset, 60 steps")
    args = p.parse_args(argv)
    from tformer.cli import main as tformer
    from tformer.machine import describe
    from tformer.training.averaging import choose_checkpoints, write_average
    from tformer.translation.pairs import group_references, read_aligned

    out = Path(args.out)
    words = ["train", "translation", "--config", "multi30k-cpu-hour", "--tgt-lang", args.tgt, "--out", str(out)]
    words += ["--ema", str(args.ema), "--keep-checkpoints", str(args.keep), "--overwrite", "--no-progress"]
    if args.quick:
        words += ["--data", "builtin", "--src-lang", "en", "--tgt-lang", "fr", "--preset", "tiny", "--max-steps", "60"]
        words += ["--eval-every", "20", "--minutes", "5"]
    else:
        words += ["--data", args.data, "--minutes", str(args.minutes)]
    start = time.perf_counter()
    if tformer(words) != 0:
        raise SystemExit("the training run failed (above)")
    trained_s = time.perf_counter() - start
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    evals = [r for r in log if "bleu" in r]
    kept = choose_checkpoints(out, last=min(args.keep, len(list((out / "checkpoints").glob("step-*")))))
    write_average(kept, out / "average")
    if args.quick:
        pairs = [tuple(line.split("\t")[:2]) for line in (out / "data" / "valid.tsv").read_text().splitlines()]
    else:
        pairs = read_aligned(Path(args.data) / "val.en", Path(args.data) / f"val.{args.tgt}")
    sources, refs = group_references(pairs)
    models = {"last": kept[-1], f"average of last {len(kept)}": out / "average", "best/": out / "best"}
    result: dict = {
        "machine": describe().to_dict(),
        "command": "tformer " + " ".join(words),
        "training_s": round(trained_s, 1),
        "steps": log[-1]["step"],
        "ema": args.ema,
        "in_run_greedy": [{"step": r["step"], "bleu": r["bleu"], "ema_bleu": r.get("ema_bleu")} for r in evals],
        "best_in_run": {
            "trained": max(r["bleu"] for r in evals),
            "ema": max((r["ema_bleu"] for r in evals if r.get("ema_bleu") is not None), default=None),
        },
        "validation": {"sentences": len(sources), "models": {}},
    }
    for name, directory in models.items():
        result["validation"]["models"][name] = {
            "greedy": _scores(directory, sources, refs, 1),
            f"beam{args.beam}": _scores(directory, sources, refs, args.beam),
        }
    write_text(out, "averaging.json", json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
