"""Settings once (issue 30, item 4): every flag is declared once under the library's name for it, has help text
and shows its default; one spelling per idea across the families; the old spellings still work, with a note; a
mistyped flag or command gets the subcommand's usage and a "did you mean"; the model configs declare the fields
the families share once."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest

from tformer.bert import run as bert_run
from tformer.cli import build_parser, main
from tformer.cli.flags import FLAGS, defaults, options
from tformer.lm import run as lm_run
from tformer.models.bert import BertConfig
from tformer.models.config import ModelConfig
from tformer.models.gpt import GPTConfig
from tformer.models.seq2seq import Seq2SeqConfig
from tformer.training.config import TrainConfig
from tformer.translation import run as translation_run

ROOT = Path(__file__).resolve().parents[1]


def _commands(parser: argparse.ArgumentParser, words=()):
    """(words, parser) of every subcommand that runs something."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(words), parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _commands(sub, (*words, name))


COMMANDS = dict(_commands(build_parser()))


def _shown(parser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS and a.dest != "help"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_has_help_and_shows_its_default(command):
    parser = COMMANDS[command]
    text = " ".join(parser.format_help().split())
    for action in _shown(parser):
        assert action.help and action.help.strip(), (command, action.option_strings)
        default = action.default
        if default in (None, [], argparse.SUPPRESS) or isinstance(default, bool):
            continue
        entry = " ".join(parser._get_formatter()._format_action(action).split())
        assert "default" in entry, (command, action.option_strings, entry)
        assert f"(default: {default})" in text or "default" in (action.help or ""), (command, action.option_strings)


# the spellings tformer 0.2.0 had for ideas that have another name in other commands
RETIRED = {
    "--block-size": "--max-len",
    "--val-fraction": "--valid",
    "--max-tokens": "--batch-tokens",
    "--steps": "--max-steps",
}


def test_one_spelling_per_idea_in_every_help():
    for command, parser in COMMANDS.items():
        flags = {s for a in _shown(parser) for s in a.option_strings}
        assert not flags & set(RETIRED), (command, flags & set(RETIRED))
        if "--candidates" in flags or command in ("fill-mask", "trace"):
            assert "--top-k" not in flags, command  # candidates shown, not the sampling filter
    # --max-len is a length of sequences (a model's, or the blocks scored), never the length of an output
    for command in ("translate", "evaluate"):
        flags = {s for a in _shown(COMMANDS[command]) for s in a.option_strings}
        assert "--max-new-tokens" in flags and "--max-len" not in flags
    # the same idea is one flag in every family's training command
    for family in ("translation", "lm", "bert", "classify"):
        flags = {s for a in _shown(COMMANDS[f"train {family}"]) for s in a.option_strings}
        assert {"--max-len", "--valid", "--preset", "--vocab-size", "--dropout", "--out", "--max-steps"} <= flags


@pytest.mark.parametrize(
    "argv, dest, value, note",
    [
        (["train", "lm", "--data", ".", "--out", "o", "--block-size", "16"], "max_len", 16, "--block-size"),
        (["train", "lm", "--data", ".", "--out", "o", "--val-fraction", "0.2"], "valid", 0.2, "--val-fraction"),
        (["train", "translation", "--out", "o", "--max-tokens", "999"], "batch_tokens", 999, "--max-tokens"),
        (["demo", "--steps", "7"], "max_steps", 7, "--steps"),
        (["translate", "--model", ".", "--max-len", "9"], "max_new_tokens", 9, "--max-len"),
        (["fill-mask", "--model", ".", "--top-k", "3", "a [MASK]"], "candidates", 3, "--top-k"),
        (["evaluate-lm", "--model", ".", "--data", ".", "--block-size", "8"], "max_len", 8, "--block-size"),
    ],
)
def test_an_old_spelling_still_works_with_a_note(argv, dest, value, note, capsys):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    assert f"note: {note} is now called --" in err


@pytest.mark.parametrize(
    "argv, usage, hint",
    [
        (["train", "lm", "--data", ".", "--out", "o", "--max-lne", "16"], "usage: tformer train lm", "--max-len"),
        (
            ["train", "translation", "--out", "o", "--batch-tokns", "9"],
            "usage: tformer train translation",
            "--batch-tokens",
        ),
        (["generate", "--model", ".", "--temprature", "0.5"], "usage: tformer generate", "--temperature"),
        (["fill-mask", "--modle", "runs/bert", "a [MASK]"], "usage: tformer fill-mask", "--model"),  # not "required"
        (["trian", "lm"], "usage: tformer ", "train"),
        (["plot", "atention"], "usage: tformer plot", "attention"),
    ],
)
def test_a_mistyped_flag_gets_the_subcommands_usage_and_a_did_you_mean(argv, usage, hint, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert usage in err and f"did you mean {hint}?" in err, err
    assert "Traceback" not in err


TRAIN_ENTRIES = {
    "train translation": (translation_run.setup, translation_run.TRAINING),
    "train lm": (lm_run.setup, lm_run.TRAINING),
    "train bert": (bert_run.setup, bert_run.TRAINING),
    "train classify": (bert_run.setup_classifier, bert_run.CLASSIFIER_TRAINING),
}


@pytest.mark.parametrize("command", sorted(TRAIN_ENTRIES))
def test_every_training_flag_is_the_entry_points_setting_with_its_default(command):
    """Each flag's dest is a parameter of the family's entry point or a TrainConfig field, so the command hands
    the parsed values on by name (flags.options) and nothing restates them; its default is the entry point's."""
    entry, training = TRAIN_ENTRIES[command]
    parser = COMMANDS[command]
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    import inspect

    params = set(inspect.signature(entry).parameters)
    expected = defaults(entry, training)
    for action in parser._actions:
        # --config is the command line's own: read before parsing (tformer.cli.config), not a setting
        if action.dest in ("help", "func", "family", "command", "config") or action.dest == argparse.SUPPRESS:
            continue
        assert action.dest in params or action.dest in fields, (command, action.option_strings, action.dest)
        if not isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            assert action.default == expected.get(action.dest), (command, action.dest, action.default)
    data = [] if command == "train translation" else ["--data", __file__]
    args = parser.parse_args([*data, "--out", "o"])
    passed = options(args, entry)
    assert set(passed) == {a.dest for a in parser._actions if a.dest not in ("help", argparse.SUPPRESS)} - {
        "func",
        "config",
    }


def test_the_families_train_with_the_same_defaults_from_python_and_the_cli():
    """``tformer.bert.setup(...)`` and ``tformer train bert`` start from the same learning rate (the library used
    TrainConfig's 5e-4 only by coincidence; classify's 3e-4 was written in two places)."""
    for command, (_, training) in TRAIN_ENTRIES.items():
        parser = COMMANDS[command]
        lr = next(a for a in parser._actions if a.dest == "lr").default
        assert lr == training.get("lr"), command
    assert lm_run.TRAINING["schedule"] == "cosine" and translation_run.TRAINING["lr"] == 7e-4


def test_the_flags_table_names_each_flag_after_its_setting():
    for name, flag in FLAGS.items():
        dest = flag.dest or name[2:].replace("-", "_")
        assert re.fullmatch(r"--[a-z0-9]+(-[a-z0-9]+)*", name) and dest.isidentifier()
        assert flag.help and not flag.help.endswith(".")


# ------------------------------------------------------------------------------------------- the library


def test_the_library_takes_the_old_names_with_a_warning_and_refuses_both(tmp_path, words_txt):
    with pytest.warns(FutureWarning, match="tformer.lm.setup: block_size is now called max_len"):
        trainer = lm_run.setup(words_txt, tmp_path / "a", "tiny", block_size=16, max_steps=1, progress=False)
    assert trainer.model.config.max_len == 16
    with pytest.raises(ValueError, match="block_size and max_len are the same setting"):
        lm_run.setup(words_txt, tmp_path / "b", "tiny", block_size=16, max_len=16, max_steps=1)


def test_a_run_saved_with_the_old_names_is_resumed_and_checked_under_the_new_ones(tmp_path, capsys, words_txt):
    """A 0.2.0 run saved its settings as block_size / val_fraction: --resume compares them with --max-len and
    --valid (without the mapping, a changed context length went through unnoticed)."""
    data, out = words_txt, tmp_path / "run"
    common = ["train", "lm", "--data", str(data), "--out", str(out), "--preset", "tiny", "--no-progress"]
    assert main([*common, "--max-len", "16", "--max-steps", "2"]) == 0
    state = out / "last" / "state.json"
    meta = json.loads(state.read_text())
    settings = meta["run"]["settings"]
    settings["block_size"], settings["val_fraction"] = settings.pop("max_len"), settings.pop("valid")
    state.write_text(json.dumps(meta))
    capsys.readouterr()
    assert main([*common, "--max-len", "32", "--max-steps", "3", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "--max-len 32 (the run: 16)" in err and len(err.strip().splitlines()) == 1
    assert main([*common, "--max-len", "16", "--max-steps", "3", "--resume"]) == 0


# ---------------------------------------------------------------------------------------- model configs


def test_the_shared_model_fields_are_declared_once():
    """ModelConfig declares the fields all three families have; no family's class body declares them again
    (a family states its defaults in one table), and each family still has them with its own defaults."""
    shared = {f.name for f in dataclasses.fields(ModelConfig)}
    assert {"d_model", "n_heads", "d_ff", "dropout", "max_len", "activation", "norm_first", "norm_eps"} <= shared
    for module in ("gpt", "bert", "seq2seq"):
        tree = ast.parse((ROOT / "src/tformer/models" / f"{module}.py").read_text(encoding="utf-8"))
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Config")):
            declared = {
                s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            }
            assert not declared & shared, (cls.name, declared & shared)
    for cls in (GPTConfig, BertConfig, Seq2SeqConfig):
        assert shared <= {f.name for f in dataclasses.fields(cls)}
    gpt, bert = GPTConfig(vocab_size=50257), BertConfig()
    paper = Seq2SeqConfig(src_vocab_size=100, tgt_vocab_size=100)
    assert (gpt.d_model, gpt.n_heads, gpt.max_len, gpt.activation, gpt.norm_first) == (768, 12, 1024, "gelu_tanh", True)
    assert (bert.d_model, bert.max_len, bert.activation, bert.norm_eps) == (768, 512, "gelu", 1e-12)
    assert (paper.d_model, paper.n_heads, paper.d_ff, paper.activation, paper.norm_first) == (
        512,
        8,
        2048,
        "relu",
        False,
    )
    with pytest.raises(TypeError, match="'vocab' is not a field every family shares"):

        @dataclasses.dataclass(frozen=True, kw_only=True)
        class Broken(ModelConfig, defaults={"vocab": 3}):
            pass


def test_a_long_commands_error_or_a_refused_value_is_two_lines_and_a_missing_corpus_says_how_to_fetch_it(
    tmp_path, capsys
):
    """A training command's usage is 20-odd lines of flags: before an error it is one line saying where they are, so
    the error stays what the user reads; a missing path named as a corpus tformer fetches says the command."""
    for argv, said in (
        (["train", "translation", "--data", str(tmp_path / "multi30k"), "--out", "o"], "data download multi30k`"),
        (["train", "lm", "--data", str(tmp_path / "tinyshakespeare.txt"), "--out", "o"], "download tinyshakespeare`"),
    ):
        with pytest.raises(SystemExit):
            main(argv)
        usage, error = capsys.readouterr().err.splitlines()
        command = " ".join(argv[:2])
        assert usage == f"usage: tformer {command} [options] ... (tformer {command} --help lists them)"
        assert error.startswith(f"tformer {command}: error: argument --data: ") and said in error, error
    with pytest.raises(SystemExit):
        main(["plot", "mask", "--nope"])  # a short usage is shown whole, as argparse shows it
    assert capsys.readouterr().err.startswith("usage: tformer plot mask [-h]")
    with pytest.raises(SystemExit):  # but not above a value refused: the error says what it takes
        main(["plot", "mask", "--kind", "nope"])
    usage, error = capsys.readouterr().err.splitlines()
    assert usage == "usage: tformer plot mask [options] ... (tformer plot mask --help lists them)"
    assert error.startswith("tformer plot mask: error: argument --kind: invalid choice: 'nope' (choose from")
