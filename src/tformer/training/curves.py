"""Training curves: the records of a run's ``log.jsonl`` and their plot (loss, BLEU, learning rate vs step).

Drawn on a bare :class:`matplotlib.figure.Figure` rendered by the Agg canvas (headless, no pyplot state),
like the pictures of :mod:`tformer.inspection.plots`. This module knows the log's format and nothing about
models or families.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tformer.outputs import save_to, write_figure
from tformer.text import read_lines

__all__ = ["read_log", "plot_curves", "not_finite"]

DPI = 100
PLOTTED = ("train_loss", "val_loss", "bleu", "accuracy", "mlm_acc", "nsp_acc", "lr")  # drawn against "step"
PANELS = (  # each panel's title and the fields drawn in it: a run's metric beside its loss, as it picks best/
    ("loss", ("train_loss", "val_loss")),
    ("BLEU", ("bleu",)),
    ("accuracy", ("accuracy", "mlm_acc", "nsp_acc")),
    ("learning rate", ("lr",)),
)


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")  # labels never clipped
    FigureCanvasAgg(fig)
    return fig


def read_log(run_dir_or_jsonl: str | Path) -> list[dict]:
    """The records of a training log: ``RUN_DIR/log.jsonl`` or a ``.jsonl`` file, one JSON object a line."""
    path = Path(run_dir_or_jsonl)
    if path.is_dir():
        path = path / "log.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"run_dir_or_jsonl: no training log at {path}")
    records = []
    for n, line in enumerate(read_lines(path), start=1):  # strict UTF-8: a bad byte is named by file and line
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:
            reason = err.msg if isinstance(err, json.JSONDecodeError) else "nested too deeply"
            raise ValueError(f"{path}:{n}: not a JSON object ({reason})") from None
        if not isinstance(record, dict) or "step" not in record:
            raise ValueError(f"{path}:{n}: each log line must be a JSON object with a 'step' field")
        for key in ("step", *PLOTTED):  # what is drawn must be a number (or null): not a string, list or object
            value = record.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"{path}:{n}: {key!r} must be a number, got {value!r:.60}")
        records.append(record)
    if not records:
        raise ValueError(f"{path} holds no log records")
    return records


def _series(records: list[dict], key: str) -> tuple[list[float], list[float]]:
    """The finite values of ``key`` and their steps: what is drawn."""
    pairs = [(r["step"], r[key]) for r in records if r.get(key) is not None and math.isfinite(r[key])]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def not_finite(records: list[dict]) -> dict[str, list[int]]:
    """The steps at which each plotted field is not a finite number (null: how a run logs a NaN or an infinity, or
    NaN/Infinity written by another program): points a picture cannot draw, so it says so instead."""
    found = {
        key: [r["step"] for r in records if key in r and (r[key] is None or not math.isfinite(r[key]))]
        for key in PLOTTED
    }
    return {key: steps for key, steps in found.items() if steps}


def _legend(records: list[dict], key: str) -> str:
    """A field's name in the legend; a label-smoothed ``train_loss`` says so (it stays above the plain cross-entropy
    that ``val_loss`` is: the gap between them is not all overfitting)."""
    smoothing = next((r["label_smoothing"] for r in reversed(records) if "label_smoothing" in r), None)
    return f"{key} (label-smoothed, ε={smoothing:g})" if key == "train_loss" and smoothing else key


def plot_curves(run_dir_or_jsonl, path=None) -> Figure:
    """Training curves: train/val loss vs step, plus a panel each for BLEU, accuracy (a classifier's; BERT's MLM and
    NSP) and the learning rate where logged; with
    ``path``, written there as :func:`tformer.inspection.plots.plot_attention` writes (PNG, or .svg/.pdf/.jpg)."""
    records = read_log(run_dir_or_jsonl)
    missing = not_finite(records)
    panels = [(label, keys) for label, keys in PANELS if any(_series(records, k)[0] or k in missing for k in keys)]
    if not panels:
        raise ValueError(f"the log has none of {', '.join(map(repr, PLOTTED))} to plot")
    fig = _new_figure(5.0 * len(panels), 4.0)
    for i, (label, keys) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        for key in keys:
            steps, values = _series(records, key)
            if steps:
                ax.plot(
                    steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=_legend(records, key)
                )
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.set_title(label)
        ax.grid(alpha=0.3)
        if any(ax.get_lines()):
            ax.legend()
        said = [
            f"{key} at step {', '.join(map(str, missing[key][:4]))}{' …' * (len(missing[key]) > 4)}"
            for key in keys
            if key in missing
        ]
        if said:  # a diverged value is said where it would have been drawn, never left out in silence
            ax.text(
                0.02,
                0.02,
                "not finite, not drawn: " + "; ".join(said),
                transform=ax.transAxes,
                fontsize=8,
                color="tab:red",
                va="bottom",
                wrap=True,
            )
    if path is not None:  # atomically: a failed drawing leaves the file that was there; never the log itself
        write_figure(fig, save_to(path, "path", [("run_dir_or_jsonl", run_dir_or_jsonl)]), DPI)
    return fig
