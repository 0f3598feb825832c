"""Pictures of a Transformer: attention heatmaps, the positional table, masks (training curves: :mod:`tformer.training.curves`).

Everything draws on a bare :class:`matplotlib.figure.Figure` rendered by the Agg canvas, so it
works headless (CI, servers) and never touches pyplot's global state or a notebook's backend.
Each function returns the Figure; with ``path`` it also writes it (PNG, or the format its suffix names: .svg, .pdf,
.jpg) of exactly ``figsize × dpi`` pixels, replacing a plain file there (as ``savefig`` does) but never a symbolic
link, nor a file inside a model or run directory (:func:`tformer.outputs.save_to`). The drawn data stays
inspectable — for a heatmap, ``fig.axes[i].images[0].get_array()`` is the matrix of head ``i``.

Dimension legend: H heads, Tq query length (rows), Tk key length (columns), T positions, D model dim.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tformer.inspection.format import shown
from tformer.outputs import save_to, write_figure

__all__ = ["plot_attention", "plot_positional_encoding", "plot_mask"]

DPI = 100
_ANNOTATE_MAX = 12  # write the value in each cell when the grid is at most this many rows and columns


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")  # labels never clipped
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: str | Path | None) -> Figure:
    if path is not None:  # atomically: a failed drawing leaves the file that was there
        write_figure(fig, save_to(path, "path"), DPI)
    return fig


def _as_array(x, name: str) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    arr = np.asarray(x, dtype=np.float64)
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    return arr


def _label_axes(ax, x_labels, y_labels, shape: tuple[int, int]) -> None:
    for labels, n, name, set_ticks, set_labels in (
        (x_labels, shape[1], "x_labels", ax.set_xticks, ax.set_xticklabels),
        (y_labels, shape[0], "y_labels", ax.set_yticks, ax.set_yticklabels),
    ):
        if labels is None:
            continue
        if len(labels) != n:
            raise ValueError(f"{name} has {len(labels)} labels, the matrix has {n} along that axis")
        set_ticks(range(n))
        set_labels([shown(t) for t in labels], rotation=90 if set_ticks == ax.set_xticks else 0)  # a space: ␣


def _annotate(ax, matrix: np.ndarray, fmt: str = "{:.2f}") -> None:
    if max(matrix.shape) > _ANNOTATE_MAX:
        return
    for i, j in np.ndindex(*matrix.shape):
        value = matrix[i, j]
        text = "0" if value == 0 else fmt.format(value)
        ax.text(j, i, text, ha="center", va="center", fontsize=7, color="black" if value > 0.5 else "white")


def plot_attention(
    weights,
    x_labels=None,
    y_labels=None,
    path=None,
    title: str = "attention weights",
    head_titles: list[str] | None = None,
) -> Figure:
    """Heatmap of attention ``weights`` (Tq, Tk), or a grid with one panel per head for (H, Tq, Tk).

    Rows are queries (``y_labels``, the tokens that look), columns keys (``x_labels``, the tokens
    looked at). Colours run from 0 to 1, the range of a softmax, so heads compare at a glance.
    """
    w = _as_array(weights, "weights")
    if w.ndim == 2:
        w = w[None]  # (1, Tq, Tk)
    if w.ndim != 3:
        raise ValueError(f"weights must have shape (Tq, Tk) or (H, Tq, Tk), got {w.shape}")
    n_heads = w.shape[0]
    cols = min(n_heads, 4)
    rows = math.ceil(n_heads / cols)
    fig = _new_figure(1.0 + 4.0 * cols, 0.6 + 3.8 * rows)
    image = None
    for h in range(n_heads):
        ax = fig.add_subplot(rows, cols, h + 1)
        image = ax.imshow(w[h], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        _label_axes(ax, x_labels, y_labels, w[h].shape)
        _annotate(ax, w[h])
        ax.set_xlabel("key (attended to)")
        if h % cols == 0:
            ax.set_ylabel("query (attending)")
        ax.set_title(head_titles[h] if head_titles else (f"head {h}" if n_heads > 1 else title), fontsize=9)
    assert image is not None  # at least one head
    fig.colorbar(image, ax=fig.axes, label="weight", shrink=0.8)
    if n_heads > 1:
        fig.suptitle(title)
    return _save(fig, path)


def plot_positional_encoding(max_len: int = 100, d_model: int = 64, path=None) -> Figure:
    """The sinusoidal table PE (max_len, d_model): even columns sin, odd columns cos."""
    from tformer.nn.positional import sinusoidal_table

    if max_len < 1:
        raise ValueError(f"max_len must be a positive integer, got {max_len}")
    table = sinusoidal_table(max_len, d_model).numpy()  # (T, D)
    fig = _new_figure(8.0, 6.0)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(table, cmap="RdBu", vmin=-1.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xlabel("dimension (even: sin, odd: cos)")
    ax.set_ylabel("position")
    ax.set_title(f"sinusoidal positional encoding (max_len={max_len}, d_model={d_model})")
    fig.colorbar(image, ax=ax, label="PE value")
    return _save(fig, path)


def plot_mask(mask, path=None, labels=None, title: str = "attention mask (1 = may attend)") -> Figure:
    """A boolean/0-1 mask (Tq, Tk) — or any shape that squeezes to it, e.g. (1, 1, Tq, Tk)."""
    m = _as_array(mask, "mask")
    m = m.reshape(m.shape[-2:]) if m.ndim > 2 and m.size == m.shape[-1] * m.shape[-2] else m
    if m.ndim != 2:
        raise ValueError(f"mask must squeeze to (Tq, Tk), got shape {m.shape}")
    fig = _new_figure(6.0, 5.0)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(m, cmap="Greys_r", vmin=0.0, vmax=1.0, aspect="auto")
    row_labels = labels if labels is not None and len(labels) == m.shape[0] else None  # square: same tokens
    _label_axes(ax, labels, row_labels, m.shape)
    _annotate(ax, m, fmt="{:.0f}")
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="1 = may attend, 0 = blocked", ticks=[0, 1])
    return _save(fig, path)
