"""``--log-to csv,tensorboard`` (issue 49): the records of ``OUT/log.jsonl`` sent on to ``OUT/log.csv`` and to
TensorBoard's event files in ``OUT/tensorboard/``, the same numbers; a resumed run's copies follow its log, cut back
to what ``last/`` holds."""

import csv
import importlib.util
import json

import pytest
import torch

from scripted import VOCAB, ScriptedTask
from tformer import GPT, GPTConfig
from tformer.checks import BadValue
from tformer.cli import main
from tformer.training.config import TrainConfig
from tformer.training.resume import _cut_log
from tformer.training.runlog import scalars
from tformer.training.trainer import Trainer


def _model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=16))


def _config(out, **changes) -> TrainConfig:
    options = dict(out_dir=str(out), max_steps=4, eval_every=2, log_every=1, warmup_steps=1, progress=False)
    return TrainConfig(**{**options, **changes})


def _records(out) -> list[dict]:
    return [scalars(json.loads(line)) for line in (out / "log.jsonl").read_text().splitlines()]


def _csv_rows(out) -> tuple[list[str], list[dict]]:
    with open(out / "log.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = [{k: float(v) for k, v in row.items() if v != ""} for row in reader]
        return list(reader.fieldnames or []), rows


def _scalars_of(out) -> dict[str, list[tuple[int, float]]]:
    """What TensorBoard shows: each tag's (step, value) pairs, as its own reader loads them (orphans purged)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_the_csv_holds_each_record_of_the_log(tmp_path):
    Trainer(_model(), ScriptedTask([2.0, 1.5]), _config(tmp_path, log_to="csv", ema=0.5)).fit()
    columns, rows = _csv_rows(tmp_path)
    records = _records(tmp_path)
    assert columns[:2] == ["step", "epoch"] and {"train_loss", "val_loss", "ema_val_loss", "lr"} <= set(columns)
    assert len(rows) == len(records) == 6  # 4 steps, 2 evaluations
    for row, record in zip(rows, records):
        assert row == pytest.approx({k: float(v) for k, v in record.items()}, rel=1e-15)
    assert not (tmp_path / "tensorboard").exists()


def test_tensorboard_shows_the_logs_numbers_and_a_resumed_run_purges_what_last_lacks(tmp_path):
    first = Trainer(_model(), ScriptedTask([2.0]), _config(tmp_path, max_steps=2, log_to="csv,tensorboard"))
    first.fit()
    # the run logged step 3 and was killed before it saved it: --resume cuts the log back to last/'s step 2
    first.run_log.append({"step": 3, "epoch": 0, "train_loss": 99.0})
    assert _scalars_of(tmp_path)["train/loss"][-1] == (3, 99.0)
    _cut_log(tmp_path / "log.jsonl", 2)
    second = Trainer(_model(), ScriptedTask([1.0]), _config(tmp_path, log_to=("tensorboard", "csv")))
    second.resume()
    second.fit()
    records = _records(tmp_path)
    assert 99.0 not in [r.get("train_loss") for r in records]
    shown = _scalars_of(tmp_path)
    for name, tag in [("train_loss", "train/loss"), ("val_loss", "val/loss"), ("lr", "lr"), ("epoch", "epoch")]:
        expected = [(r["step"], r[name]) for r in records if name in r]
        assert [s for s, _ in shown[tag]] == [s for s, _ in expected] and len(expected) >= 2, tag
        assert [v for _, v in shown[tag]] == pytest.approx([v for _, v in expected], rel=1e-6), tag  # float32
    assert [row["step"] for row in _csv_rows(tmp_path)[1]] == [r["step"] for r in records]


def test_tensorboard_added_on_resume_shows_the_earlier_records_too(tmp_path):
    Trainer(_model(), ScriptedTask([2.0]), _config(tmp_path, max_steps=2)).fit()
    second = Trainer(_model(), ScriptedTask([1.0]), _config(tmp_path, log_to="tensorboard"))
    second.resume()
    second.fit()
    records = _records(tmp_path)
    shown = _scalars_of(tmp_path)
    assert [s for s, _ in shown["train/loss"]] == [r["step"] for r in records if "train_loss" in r] == [1, 2, 3, 4]
    assert [s for s, _ in shown["val/loss"]] == [2, 4]


def test_log_to_is_checked_and_tensorboard_missing_is_said(tmp_path, monkeypatch, capsys):
    with pytest.raises(BadValue, match="log_to must be csv, tensorboard"):
        TrainConfig(out_dir=str(tmp_path), max_steps=1, log_to="csv,csv")
    assert TrainConfig(out_dir=str(tmp_path), max_steps=1, log_to="none").log_to == ()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name))
    with pytest.raises(BadValue, match=r"pip install 'tformer\[tensorboard\]'"):
        TrainConfig(out_dir=str(tmp_path), max_steps=1, log_to="tensorboard")
    text = tmp_path / "t.txt"
    text.write_text("to be or not to be, that is the question\n" * 50)
    code = main(["train", "lm", "--data", str(text), "--out", str(tmp_path / "r"), "--max-steps", "1", "--log-to", "tensorboard"])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and "tensorboard package" in err and "Traceback" not in err
    assert not (tmp_path / "r" / "log.jsonl").exists()


def test_the_cli_writes_log_csv_and_overwrite_deletes_it(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("to be or not to be, that is the question\n" * 50)
    out = tmp_path / "r"
    words = ["train", "lm", "--data", str(text), "--out", str(out), "--preset", "tiny", "--max-len", "16"]
    main([*words, "--max-steps", "2", "--log-every", "1", "--log-to", "csv", "--no-progress"])
    assert [row["step"] for row in _csv_rows(out)[1]][:2] == [1.0, 2.0]
    assert "log-to: csv" in (out / "config.yaml").read_text()
    main([*words, "--max-steps", "1", "--overwrite", "--no-progress"])
    assert not (out / "log.csv").exists()


def test_validation_scores_are_in_the_val_section_as_the_guide_says():
    """A translator's BLEU and chrF and a classifier's accuracy are logged without val_: TensorBoard files them under
    val/ (and --ema's under ema/) beside val/loss."""
    from tformer.training.runlog import _tag

    expected = {"bleu": "val/bleu", "chrf": "val/chrf", "accuracy": "val/accuracy", "ema_bleu": "ema/bleu"}
    expected |= {"val_loss": "val/loss", "train_loss": "train/loss", "ema_val_loss": "ema/val_loss", "lr": "lr"}
    assert {name: _tag(name) for name in expected} == expected
