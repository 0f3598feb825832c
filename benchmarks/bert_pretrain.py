"""BERT pretraining within a time budget: held-out MLM and NSP accuracy, next to chance baselines.

    python -m benchmarks.bert_pretrain --minutes 10 30            # Tiny Shakespeare (speeches = documents)
    python -m benchmarks.bert_pretrain --minutes 0.05 --quick      # smoke test

Runs ``tformer.bert.train`` (what ``tformer train bert`` calls) for each budget and reads the final held-out evaluation from the run's
log. Baselines: MLM = always predicting the most frequent word piece of the training text;
NSP = 0.5 (the pairs are balanced). Writes ``OUT/bert_pretrain.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from benchmarks.common import options, report_dir, write_text

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def _majority_baseline(run: Path, data: Path) -> float:
    """Share of word pieces equal to the most frequent non-special one (what a constant guess scores on MLM)."""
    from tformer.models.checkpoint import model_dir
    from tformer.tokenizers import load_tokenizer

    tok = load_tokenizer(model_dir(run))
    text = data.read_text(encoding="utf-8")
    tail = text[int(len(text) * 0.95) :]
    ids = [i for line in tail.splitlines() if line.strip() for i in tok.encode(line)]
    counts = collections.Counter(ids)
    return counts.most_common(1)[0][1] / max(len(ids), 1)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, nargs="+", default=[10.0])
    p.add_argument("--data", default=str(SHARED / "tinyshakespeare.txt"))
    p.add_argument("--out", default="runs/bench-bert", type=report_dir("bert_pretrain.json"))
    p.add_argument("--quick", action="store_true")
    p.add_argument(
        "extra",
        nargs="*",
        help="settings of tformer.bert.train after --, as key=value or as `tformer train "
        "bert` flags, e.g. -- --preset tiny --lr 1e-3",
    )
    args = p.parse_args(argv)
    from tformer import bert

    extra = (
        options(args.extra)
        if args.extra
        else dict(preset="small", max_len=64, batch_size=32, vocab_size=4000, lr=1e-3, warmup_steps=200, eval_every=500)
    )
    if args.quick:
        extra = dict(preset="tiny", max_len=32, batch_size=8, vocab_size=300, eval_every=20)
    results = []
    for minutes in args.minutes:
        run = Path(args.out) / f"{minutes:g}min"
        bert.train(args.data, run, minutes=minutes, progress=False, overwrite=True, **extra)  # starts anew
        evals = [r for r in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if "mlm_acc" in r]
        last = evals[-1]
        results.append(
            {
                "minutes": minutes,
                "steps": last["step"],
                "mlm_acc": round(last["mlm_acc"], 4),
                "nsp_acc": round(last["nsp_acc"], 4),
                "mlm_loss": round(last["mlm_loss"], 4),
                "nsp_loss": round(last["nsp_loss"], 4),
                "mlm_majority_baseline": round(_majority_baseline(run, Path(args.data)), 4),
                "nsp_chance": 0.5,
                "args": extra,
            }
        )
    write_text(args.out, "bert_pretrain.json", json.dumps(results, indent=2))
    print("| budget | steps | MLM acc (majority baseline) | NSP acc (chance 0.5) |\n|---|---|---|---|")
    for r in results:
        print(
            f"| {r['minutes']:g} min | {r['steps']} | {r['mlm_acc']:.3f} ({r['mlm_majority_baseline']:.3f}) | {r['nsp_acc']:.3f} |"
        )
    return {"results": results}


if __name__ == "__main__":
    main()
