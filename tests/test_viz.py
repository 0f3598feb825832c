"""Pictures: every plot writes a readable PNG of the expected size, showing exactly the data it claims."""

import json

import matplotlib.image
import numpy as np
import pytest
import torch

from tformer.cli import main
from tformer.inspection.plots import plot_attention, plot_mask, plot_positional_encoding
from tformer.nn.masks import causal_mask
from tformer.nn.positional import sinusoidal_table
from tformer.training.curves import plot_curves

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path) -> tuple[int, int]:
    """(width, height) in pixels, after checking the PNG signature."""
    with open(path, "rb") as f:
        assert f.read(8) == PNG_MAGIC
    height, width = matplotlib.image.imread(path).shape[:2]
    return width, height


def _weights(*shape) -> torch.Tensor:
    return torch.softmax(torch.randn(*shape, generator=torch.Generator().manual_seed(0)), dim=-1)


@pytest.mark.parametrize("heads, size", [(None, (500, 440)), (3, (1300, 440)), (6, (1700, 820))])
def test_attention_heatmap_shows_the_weights(tmp_path, heads, size):
    w = _weights(4, 5) if heads is None else _weights(heads, 4, 5)
    fig = plot_attention(w, list("abcde"), list("wxyz"), tmp_path / "a.png", title="test")
    assert _png_size(tmp_path / "a.png") == size
    for h, matrix in enumerate(w.reshape(-1, 4, 5)):
        np.testing.assert_allclose(fig.axes[h].images[0].get_array(), matrix.numpy(), atol=1e-7)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list("abcde")
    assert fig.axes[0].get_xlabel() and fig.axes[0].get_ylabel()


def test_attention_heatmap_refuses_mismatched_labels():
    with pytest.raises(ValueError, match="x_labels"):
        plot_attention(_weights(4, 5), list("abc"), None)
    with pytest.raises(ValueError, match="weights"):
        plot_attention(torch.zeros(1, 2, 3, 4))


def test_positional_table_picture(tmp_path):
    fig = plot_positional_encoding(50, 16, tmp_path / "pe.png")
    assert _png_size(tmp_path / "pe.png") == (800, 600)
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), sinusoidal_table(50, 16).numpy(), atol=1e-7)


def test_mask_picture(tmp_path):
    mask = causal_mask(5)  # (1, 1, 5, 5)
    fig = plot_mask(mask, tmp_path / "m.png", labels=list("abcde"))
    assert _png_size(tmp_path / "m.png") == (600, 500)
    np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), mask[0, 0].numpy().astype(float))


def _write_log(run_dir, with_bleu=True):
    run_dir.mkdir(exist_ok=True)
    lines = [dict(step=s, train_loss=5.0 / s, lr=1e-3 * s) for s in range(1, 6)]
    lines += [dict(step=5, val_loss=1.5, **({"bleu": 12.5} if with_bleu else {}))]
    (run_dir / "log.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return run_dir


@pytest.mark.parametrize("with_bleu, size", [(True, (1500, 400)), (False, (1000, 400))])
def test_training_curves(tmp_path, with_bleu, size):
    fig = plot_curves(_write_log(tmp_path / "run", with_bleu), tmp_path / "c.png")
    assert _png_size(tmp_path / "c.png") == size
    loss_ax = fig.axes[0]
    train = next(line for line in loss_ax.get_lines() if line.get_label() == "train_loss")
    assert list(train.get_xdata()) == [1, 2, 3, 4, 5] and list(train.get_ydata()) == [5.0 / s for s in range(1, 6)]
    assert [ax.get_title() for ax in fig.axes] == (
        ["loss", "BLEU", "learning rate"] if with_bleu else ["loss", "learning rate"]
    )


def test_a_label_smoothed_train_loss_says_so_beside_the_plain_val_loss(tmp_path):
    """A translation run's train_loss is label-smoothed (0.1), its val_loss the plain cross-entropy: drawn side by side
    unnamed, the gap read as overfitting. The session's first record says the smoothing; the legend names it."""
    run = _write_log(tmp_path / "run")
    lines = (run / "log.jsonl").read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "label_smoothing": 0.1})
    (run / "log.jsonl").write_text("\n".join(lines) + "\n")
    labels = [line.get_label() for line in plot_curves(run).axes[0].get_lines()]
    assert labels == ["train_loss (label-smoothed, ε=0.1)", "val_loss"]


@pytest.mark.parametrize("metrics", [("accuracy",), ("mlm_acc", "nsp_acc")])
def test_the_accuracy_a_classifier_or_bert_logs_has_its_panel(tmp_path, metrics):
    """classify picks best/ by accuracy, BERT logs its MLM and NSP accuracies: each drawn beside the loss."""
    run = _write_log(tmp_path / "run", with_bleu=False)
    with (run / "log.jsonl").open("a") as log:
        log.write(json.dumps(dict(step=5, val_loss=1.4, **{m: 0.75 for m in metrics})) + "\n")
    fig = plot_curves(run)
    assert [ax.get_title() for ax in fig.axes] == ["loss", "accuracy", "learning rate"]
    assert [line.get_label() for line in fig.axes[1].get_lines()] == list(metrics)


def test_a_value_that_is_not_finite_is_said_on_the_picture_and_by_the_command(tmp_path, capsys):
    """NaN and Infinity (another program's log) and null (how a run logs a diverged value) cannot be drawn: the panel
    says which field at which steps, and plot curves says it on stderr; a log of NaN alone is a picture saying so."""
    run = tmp_path / "run"
    run.mkdir()
    lines = ['{"step": 1, "train_loss": 2.0}', '{"step": 2, "train_loss": Infinity}', '{"step": 3, "train_loss": NaN}']
    lines += ['{"step": 4, "train_loss": 1.0}', '{"step": 4, "val_loss": null}']
    (run / "log.jsonl").write_text("\n".join(lines) + "\n")
    fig = plot_curves(run)
    train = next(line for line in fig.axes[0].get_lines() if line.get_label() == "train_loss")
    assert list(train.get_xdata()) == [1, 4]
    assert [t.get_text() for t in fig.axes[0].texts] == [
        "not finite, not drawn: train_loss at step 2, 3; val_loss at step 4"
    ]
    assert main(["plot", "curves", str(run), "--out", str(tmp_path / "c.png")]) == 0
    err = capsys.readouterr().err
    assert "note: train_loss is not finite at step 2, 3" in err and "note: val_loss is not finite at step 4" in err
    (run / "log.jsonl").write_text('{"step": 1, "train_loss": NaN}\n')
    assert [t.get_text() for t in plot_curves(run).axes[0].texts] == ["not finite, not drawn: train_loss at step 1"]


def test_training_curves_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="log.jsonl"):
        plot_curves(tmp_path)
    (tmp_path / "log.jsonl").write_text('{"step": 1, "train_loss": 2}\nnot json\n')
    with pytest.raises(ValueError, match=":2:"):
        plot_curves(tmp_path)


@pytest.mark.parametrize(
    "argv, size",
    [
        (["plot", "positional", "--max-len", "20", "--d-model", "8"], (800, 600)),
        (["plot", "mask", "--kind", "causal"], (600, 500)),
        (["plot", "mask", "--kind", "padding"], (600, 500)),
        (["plot", "mask", "--kind", "combined", "--tokens", "a b <pad>"], (600, 500)),
        (["plot", "attention", "--toy"], (900, 440)),
        (["plot", "attention", "--toy", "--block", "encoder", "--head", "1"], (500, 440)),
        (["plot", "curves", "RUN"], (1500, 400)),
    ],
)
def test_plot_commands_write_pngs(tmp_path, capsys, argv, size):
    argv = [str(_write_log(tmp_path / "run")) if a == "RUN" else a for a in argv]
    out = tmp_path / "out.png"
    assert main(argv + ["--out", str(out)]) == 0
    assert out.stat().st_size > 1000 and _png_size(out) == size
    assert f"wrote {out}" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["positional", "curves"])
def test_a_picture_is_written_in_the_format_its_name_says(tmp_path, capsys, kind):
    """.svg, .pdf and .jpg are written as such (PNG bytes were written under any name); other names as PNG."""
    heads = {"a.svg": b"<?xml", "a.pdf": b"%PDF", "a.JPG": b"\xff\xd8\xff", "a.png": b"\x89PNG", "a": b"\x89PNG"}
    what = ["positional", "--max-len", "8", "--d-model", "4"] if kind == "positional" else ["curves", "RUN"]
    what = [str(_write_log(tmp_path / "run")) if w == "RUN" else w for w in what]
    for name, head in heads.items():
        assert main(["plot", *what, "--out", str(tmp_path / name)]) == 0
        assert (tmp_path / name).read_bytes().startswith(head), name


def test_the_python_api_replaces_a_plain_file_but_never_a_runs_own_files_nor_a_link(tmp_path):
    """plot_curves, the plots and Trace.to_json write a path as savefig does (a plain file there is replaced), but
    refuse, as the command line does, the log a picture is drawn from, any file inside a run or model directory, and
    a symbolic link; the refused file is left as it was."""
    from tformer import GPT, GPTConfig
    from tformer.inspection import trace

    run = _write_log(tmp_path / "run")
    log = (run / "log.jsonl").read_bytes()
    alone = tmp_path / "alone.jsonl"  # a log outside any run
    alone.write_bytes(log)
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"an old picture")
    plot_curves(run, mine)
    assert _png_size(mine) == (1500, 400)  # replaced, as savefig replaces
    link = tmp_path / "link.png"
    link.symlink_to(mine)
    model = tmp_path / "gpt"
    GPT(GPTConfig(vocab_size=20, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=16)).save_pretrained(model)
    t = trace(GPT.from_pretrained(model).eval(), torch.tensor([[1, 2, 3]]))
    refused = {
        "the log it reads": (lambda: plot_curves(alone, alone), "run_dir_or_jsonl"),
        "a run's log": (lambda: plot_curves(run, run / "log.jsonl"), "training run directory"),
        "a run's file": (lambda: plot_curves(run, run / "curves.png"), "training run directory"),
        "a link": (lambda: plot_positional_encoding(8, 4, link), "symbolic link"),
        "a model's folder": (lambda: plot_mask(causal_mask(3), model / "mask.png"), "model directory"),
        "a trace into a run": (lambda: t.to_json(run / "trace.json"), "training run directory"),
        "a heatmap into a run": (lambda: t.plot_attention(run / "a.png"), "training run directory"),
    }
    for name, (write, words) in refused.items():
        with pytest.raises(ValueError, match=words):
            write()
            print(f"not refused: {name}")
    assert (run / "log.jsonl").read_bytes() == log and sorted(p.name for p in run.iterdir()) == ["log.jsonl"]
    assert sorted(p.name for p in model.iterdir()) == ["config.json", "model.safetensors"]
    assert link.is_symlink() and _png_size(mine) == (1500, 400) and alone.read_bytes() == log
    t.to_json(tmp_path / "trace.json")
    assert json.loads((tmp_path / "trace.json").read_text())


def test_plot_mask_command_draws_the_combined_mask(tmp_path):
    from tformer.cli.plot import mask_for

    mask = mask_for("combined", ["<sos>", "Je", "<pad>"])
    assert mask.int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 0]]
    assert mask_for("padding", ["a", "<pad>"]).int().tolist() == [[1, 0], [1, 0]]


def test_plot_errors_name_the_flags_not_the_librarys_parameters(tmp_path, capsys):
    """--layer and --head out of the model's range, and a RUN_DIR without a log, are said by their own names."""
    out = ["--out", str(tmp_path / "a.png")]
    assert main(["plot", "attention", "--toy", "--layer", "5", *out]) == 2
    assert "--layer must be one of [0] for the decoder's cross attention, got 5" in capsys.readouterr().err
    assert main(["plot", "attention", "--toy", "--head", "7", *out]) == 2
    assert "--head must be in [0, 2) for this model, got 7" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    assert main(["plot", "curves", str(tmp_path / "run"), *out]) == 2
    assert "RUN_DIR: no training log at" in capsys.readouterr().err
    assert main(["plot", "attention", "--toy", "--block", "encoder", "--kind", "cross", *out]) == 2
    err = capsys.readouterr().err  # an attention the model lacks: the flags, and the ones it has
    assert "--block encoder --kind cross: a seq2seq has no such attention; it has --block decoder --kind cross" in err
    assert main(["plot", "positional", "--d-model", "7", *out]) == 2
    assert "--d-model must be even (sin and cos columns in pairs), got 7" in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists()


def test_a_space_token_is_labelled_as_the_explorer_shows_it(tmp_path):
    """A character model's space, newline and tab label their row and column visibly (␣ ↵ ⇥), never a blank."""
    fig = plot_attention(np.eye(4), ["a", " ", "\n", "\t"], ["a", " ", "\n", "\t"], tmp_path / "a.png")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [t.get_text() for t in ax.get_yticklabels()]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "␣", "↵", "⇥"]
