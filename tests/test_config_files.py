"""Recipes as files (issue 49): ``tformer train FAMILY --config FILE.yaml`` takes the flags' own names, a flag on the
command line wins, an unknown key is refused with the closest names, and every run writes the settings it resolved
to ``OUT/config.yaml``, which repeats the run."""

import json
from pathlib import Path

import pytest
import yaml

from tformer.cli import main
from tformer.cli.config import shipped


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("the cat sat on the mat. a dog ran in the fog. " * 100)
    return path


def _losses(out):
    return [r["train_loss"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if "train_loss" in r]


def test_a_config_file_sets_flags_the_command_line_wins_and_the_run_writes_what_it_resolved(tmp_path, text):
    config = tmp_path / "recipe.yaml"
    config.write_text(
        "preset: tiny\nmax-len: 16\nbatch_size: 4\nmax-steps: 2\neval-blocks: 2\nlog-every: 1\nno-progress: true\n"
        "warmup-steps: 1\n"
    )
    out = tmp_path / "run"
    assert (
        main(["train", "lm", "--data", str(text), "--out", str(out), "--config", str(config), "--max-steps", "3"]) == 0
    )
    assert len(_losses(out)) == 3  # the command line's --max-steps 3, not the file's 2
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["max-steps"] == 3 and resolved["preset"] == "tiny" and resolved["batch-size"] == 4
    assert resolved["no-progress"] is True and resolved["out"] == str(out) and resolved["data"] == str(text)
    assert "config" not in resolved and "overwrite" not in resolved
    first = _losses(out)
    assert main(["train", "lm", "--config", str(out / "config.yaml"), "--overwrite"]) == 0  # the same run again
    assert _losses(out) == first


@pytest.mark.parametrize(
    "body, words",
    [
        ("max_step: 3\n", ["'max_step' is not a setting", "did you mean 'max-steps'"]),
        ("max-steps: -1\n", ["bad.yaml: max-steps: must be a positive integer, got -1"]),
        ("schedule: off\n", ["bad.yaml: schedule: 'off' is not one of"]),  # YAML 1.2: off is a word, not false
        ("compile: yes\n", ["'compile' is a switch, give true or false, got 'yes'"]),
        ("no-progress: maybe\n", ["'no-progress' is a switch, give true or false"]),
        ('no-fast: "false"\n', ["got 'false' (a quoted string: write it without the quotes)"]),
        ("- max-steps\n", ["expected a mapping of settings"]),
        ("overwrite: true\n", ["'overwrite' is not a setting of a run but what this launch does: give --overwrite"]),
        ("learning_rate: 0.1\n", ["'learning_rate' is not a setting of this command; tformer calls it 'lr'"]),
        ("max-steps: [1, 2]\n", ["'max-steps' takes one value"]),
        ("lr: 0.001\nlr: 0.002\n", ["not a readable YAML file ('lr' is given twice)"]),
        ("no-progress: true\nprogress: true\n", ["'no-progress' and 'progress' set the same setting"]),
        ("bf16: true\nprecision: fp32\n", ["'bf16' and 'precision' set the same setting"]),
    ],
)
def test_a_bad_config_is_refused_in_one_line(tmp_path, text, capsys, body, words):
    config = tmp_path / "bad.yaml"
    config.write_text(body)
    with pytest.raises(SystemExit) as exit_:
        main(["train", "lm", "--data", str(text), "--out", str(tmp_path / "r"), "--config", str(config)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words) and len(err.strip().splitlines()) == 1, err  # no usage block
    assert not (tmp_path / "r").exists()


def test_a_missing_config_file_is_named(tmp_path, text, capsys):
    with pytest.raises(SystemExit):
        main(["train", "lm", "--data", str(text), "--out", str(tmp_path / "r"), "--config", str(tmp_path / "no.yaml")])
    assert "no.yaml: no such file" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("max-steps: 3\n")
    with pytest.raises(SystemExit):  # a run's folder where its config.yaml was meant
        main(["train", "lm", "--data", str(text), "--out", str(tmp_path / "r"), "--config", str(tmp_path / "run")])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.endswith(f"run: a folder, not a YAML file; its run settings are {tmp_path / 'run' / 'config.yaml'}")


def test_the_written_paths_are_absolute_so_the_file_repeats_from_anywhere(tmp_path, text, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text.rename(tmp_path / "here.txt")
    words = ["train", "lm", "--data", "here.txt", "--out", "run", "--preset", "tiny", "--max-len", "16"]
    assert main([*words, "--batch-size", "4", "--max-steps", "1", "--eval-blocks", "1", "--no-progress"]) == 0
    resolved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert (resolved["data"], resolved["out"]) == (str(tmp_path / "here.txt"), str(tmp_path / "run"))
    monkeypatch.chdir(tmp_path.parent)
    assert main(["train", "lm", "--config", str(tmp_path / "run" / "config.yaml"), "--out", str(tmp_path / "b")]) == 0


def test_a_config_after_global_options_is_read_too(tmp_path, text):
    config = tmp_path / "recipe.yaml"
    config.write_text("preset: tiny\nmax-len: 16\nbatch-size: 4\nmax-steps: 1\neval-blocks: 1\nno-progress: true\n")
    out = tmp_path / "run"
    assert main(["--debug", "train", "lm", "--data", str(text), "--out", str(out), "--config", str(config)]) == 0
    assert yaml.safe_load((out / "config.yaml").read_text())["max-steps"] == 1


def _parsed(words: list[str]):
    from tformer.cli import build_parser
    from tformer.cli.config import expand

    parser = build_parser()
    return parser.parse_args(expand(parser, words))


@pytest.mark.parametrize("name", sorted(shipped()))
def test_each_shipped_recipe_is_read_by_its_own_command(name, tmp_path):
    recipe = yaml.safe_load(shipped()[name].read_text())
    family = recipe.pop("family")
    args = _parsed(
        ["train", family, "--data", __file__, "--out", str(tmp_path / "r"), "--config", name, "--device", "cpu"]
    )
    for key, value in recipe.items():  # each setting reaches its flag (the command line's --device cpu wins)
        got = getattr(args, key.replace("-", "_"))
        assert got == ("cpu" if key == "device" else value), (name, key)
    other = "lm" if family != "lm" else "translation"
    with pytest.raises(SystemExit):
        _parsed(["train", other, "--data", __file__, "--out", str(tmp_path / "r"), "--config", name])


def test_the_readme_recipe_is_the_shipped_one_and_a_wrong_name_lists_them(tmp_path, capsys):
    args = _parsed(["train", "translation", "--data", __file__, "--out", "o", "--config", "multi30k-cpu-hour"])
    assert (args.lr, args.batch_tokens, args.schedule, args.warmup_steps, args.minutes) == (
        2e-3,
        3000,
        "cosine",
        300,
        60,
    )
    assert (args.dropout, args.ema) == (0.2, 0.999)
    with pytest.raises(SystemExit):
        _parsed(["train", "lm", "--data", __file__, "--out", "o", "--config", "multi30k"])
    err = capsys.readouterr().err
    assert "not a recipe tformer ships" in err and "multi30k-cpu-hour" in err and "shakespeare-char-30min" in err


def test_the_command_line_undoes_a_config_files_switches(tmp_path):
    """A flag on the command line wins over the file's, switches too: each has its opposite, and --precision wins
    over the file's bf16 (its alias) and --bf16 over the file's precision."""
    config = tmp_path / "recipe.yaml"
    config.write_text("bf16: true\ncompile: true\nno-progress: true\nno-fast: true\nseparate-vocab: true\n")
    words = ["train", "translation", "--data", __file__, "--out", "o", "--config", str(config)]
    args = _parsed(words)
    assert (args.bf16, args.compile, args.progress, args.fast, args.joint) == (True, True, False, False, False)
    args = _parsed(words + ["--precision", "fp32", "--no-compile", "--progress", "--fast", "--joint-vocab"])
    assert (args.bf16, args.precision, args.compile, args.progress, args.fast, args.joint) == (
        False,
        "fp32",
        False,
        True,
        True,
        True,
    )
    config.write_text("precision: fp32\ncompile: false\n")
    args = _parsed(words + ["--bf16", "--compile"])
    assert (args.bf16, args.precision, args.compile) == (True, "auto", True)
    config.write_text("compile: false\nno-progress: false\n")  # false: the switch's opposite, last on the line
    args = _parsed(words[:-2] + ["--compile", "--no-progress", "--config", str(config)])
    assert (args.compile, args.progress) == (True, False)  # the command line's, wherever --config stands


def test_a_files_value_the_command_line_overrides_is_still_checked_but_not_against_this_machine(tmp_path, capsys):
    """A bad value in a recipe is the recipe's error even where the command line wins over it; a recipe made on
    another machine (its GPU, its paths) is repeated here with --device cpu and another --data."""
    config = tmp_path / "recipe.yaml"
    words = ["train", "translation", "--data", __file__, "--out", "o", "--config", str(config)]
    config.write_text("lr: fast\n")
    with pytest.raises(SystemExit) as exit_:
        _parsed(words + ["--lr", "0.001"])
    assert (
        exit_.value.code == 2 and "recipe.yaml: lr: must be a finite number > 0, got 'fast'" in capsys.readouterr().err
    )
    config.write_text(f"device: cuda:7\ndata: {tmp_path / 'elsewhere.tsv'}\n")
    args = _parsed(words + ["--device", "cpu"])
    assert (args.device, args.data) == ("cpu", __file__)


def test_a_config_value_is_one_word_and_yaml_words_stay_words(tmp_path):
    config = tmp_path / "recipe.yaml"
    config.write_text("src-lang: no\ntgt-lang: -x\n")  # Norwegian, and a value that starts with a dash
    args = _parsed(["train", "translation", "--data", __file__, "--out", "o", "--config", str(config)])
    assert (args.src_lang, args.tgt_lang) == ("no", "-x")


def test_a_run_with_bf16_writes_it_as_its_precision(tmp_path, text):
    out = tmp_path / "run"
    words = ["train", "lm", "--data", str(text), "--out", str(out), "--preset", "tiny", "--max-len", "16"]
    assert main(words + ["--batch-size", "4", "--max-steps", "1", "--eval-blocks", "1", "--no-progress", "--bf16"]) == 0
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["precision"] == "bf16" and "bf16" not in resolved
    args = _parsed(["train", "lm", "--config", str(out / "config.yaml"), "--precision", "fp32"])
    assert (args.precision, args.bf16) == ("fp32", False)  # the command line's precision wins over the file's


@pytest.mark.parametrize("family", ["lm", "bert"])
def test_the_written_config_holds_what_the_preset_chose_and_repeats_the_run_bit_for_bit(tmp_path, text, family):
    """Unset flags are written as the values the run used (the preset's shape, the family's learning rate), not
    null, so the file repeats the run when a preset changes; a BERT run repeats too (its WordPiece trainer gave
    another vocabulary in each process)."""
    from safetensors.torch import load_file

    first, again = tmp_path / "first", tmp_path / "again"
    text.write_text("the cat sat on the mat.\na dog ran in the fog.\nwhere is the café?\n" * 40)  # sentences
    words = ["train", family, "--data", str(text), "--preset", "tiny", "--max-len", "16", "--batch-size", "4"]
    assert main([*words, "--out", str(first), "--max-steps", "2", "--no-progress"]) == 0
    resolved = yaml.safe_load((first / "config.yaml").read_text())
    assert (resolved["d-model"], resolved["n-heads"], resolved["d-ff"], resolved["n-layers"]) == (64, 4, 256, 2)
    assert resolved["dropout"] == 0.1 and resolved["lr"] is not None and resolved["warmup-steps"] is not None
    assert resolved.get("pad-vocab") == (64 if family == "lm" else None)  # the table's rows: a multiple of 64
    assert main(["train", family, "--config", str(first / "config.yaml"), "--out", str(again)]) == 0
    assert yaml.safe_load((again / "config.yaml").read_text()) == {**resolved, "out": str(again)}
    assert resolved["data"] == str(text) and Path(resolved["data"]).is_absolute()
    a, b = load_file(first / "best" / "model.safetensors"), load_file(again / "best" / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    # the file resumes its run, and the run it made resumes with the flags alone: a value the file gives is the
    # value the preset chose (the model's shape), not a change
    assert main(["train", family, "--config", str(first / "config.yaml"), "--resume", "--max-steps", "3"]) == 0
    assert main([*words, "--out", str(again), "--resume", "--max-steps", "3", "--no-progress"]) == 0
    assert main([*words, "--out", str(again), "--resume", "--max-steps", "4", "--dropout", "0.3"]) == 2


def test_a_run_with_a_tokenizer_directory_repeats_from_its_file(tmp_path, text):
    """The tokenizer is the directory's: the file does not add a kind or size (which --tokenizer-dir refuses)."""
    from tiny_chat_models import gpt2_dir

    tokenizer = gpt2_dir(tmp_path / "gpt2")
    first = tmp_path / "first"
    words = ["train", "lm", "--data", str(text), "--tokenizer-dir", str(tokenizer), "--preset", "tiny"]
    assert main([*words, "--max-len", "16", "--max-steps", "1", "--out", str(first), "--no-progress"]) == 0
    resolved = yaml.safe_load((first / "config.yaml").read_text())
    assert resolved["tokenizer"] is None and resolved["vocab-size"] is None
    assert main(["train", "lm", "--config", str(first / "config.yaml"), "--out", str(tmp_path / "again")]) == 0


def test_resume_reads_the_runs_settings_from_its_config_yaml_and_a_flag_given_wins(tmp_path, text, capsys):
    """As nanoGPT's and HF Trainer's resumes read the run's own config: `--out OUT --resume` alone continues the
    run with its settings; a flag given again wins (and is said), a damaged file is named."""
    out = tmp_path / "run"
    first = ["--preset", "tiny", "--max-len", "16", "--batch-size", "4", "--lr", "3e-3", "--dropout", "0.2"]
    first += ["--eval-blocks", "2", "--warmup-steps", "1", "--no-progress", "--max-steps", "2"]
    assert main(["train", "lm", "--data", str(text), "--out", str(out), *first]) == 0
    capsys.readouterr()
    assert main(["train", "lm", "--out", str(out), "--resume", "--max-steps", "3"]) == 0
    said = capsys.readouterr().out
    assert "changed: --max-steps 3 (was 2)" in said and "done: step 3," in said, said  # no --data, lr, dropout given
    assert main(["train", "lm", "--out", str(out), "--resume", "--max-steps", "4", "--patience", "3"]) == 0
    assert "changed: --max-steps 4 (was 3), --patience 3 (was none)" in capsys.readouterr().out
    assert main(["train", "lm", "--out", str(out), "--resume", "--max-steps", "5", "--lr", "1e-3"]) == 2
    assert "--resume: --lr 0.001 (the run: 0.003)" in capsys.readouterr().err  # (a fixed setting: refused)
    (out / "config.yaml").write_text("family: lm\nbatch-size: lots\n")
    with pytest.raises(SystemExit):
        main(["train", "lm", "--out", str(out), "--resume", "--max-steps", "6"])
    err = capsys.readouterr().err.strip()
    assert err == (
        f"tformer train lm: error: {out / 'config.yaml'} (the run's settings, which --resume reads): batch-size: "
        "must be a positive integer, got 'lots'"
    )


def test_a_resume_from_python_keeps_the_runs_config_yaml_to_its_budget(tmp_path, capsys):
    """A command-line run resumed from Python to 4 steps kept a config.yaml that said 2: a later `--out OUT --resume`
    read that and said the run had 'already reached --max-steps 2 (it is at step 4)'."""
    import yaml

    from tformer import lm

    data = tmp_path / "text.txt"
    data.write_text("the cat sat on the mat.\n" * 60, encoding="utf-8")
    out = tmp_path / "run"
    words = ["--preset", "tiny", "--max-len", "16", "--batch-size", "2", "--batches-per-epoch", "2", "--no-progress"]
    assert main(["train", "lm", "--data", str(data), "--out", str(out), *words, "--max-steps", "2"]) == 0
    lm.train(data, out, preset="tiny", max_len=16, batch_size=2, batches_per_epoch=2, progress=False, max_steps=4,
             resume=True, log=lambda _: None)  # fmt: skip
    text = (out / "config.yaml").read_text(encoding="utf-8")
    assert text.startswith("# tformer train lm: ") and yaml.safe_load(text)["max-steps"] == 4
    capsys.readouterr()
    assert main(["train", "lm", "--out", str(out), "--resume"]) == 2  # its own budget, said as it is
    assert "--max-steps 4 (it is at step 4)" in capsys.readouterr().err
    assert main(["train", "lm", "--out", str(out), "--resume", "--max-steps", "6"]) == 0
