"""fp16 training cannot loop for ever (issue 44, item 4).

torch's GradScaler skips a step whose scaled gradients overflow float16 and halves its scale, with no floor: a scale
of 0 (a damaged file, or a run whose scale underflowed) skipped every step, unsaid, never counted as a bad step, and
the run never ended. Now the scale stops at its floor (said once) and overflows there, or past NORMAL_OVERFLOWS in a
row, are bad steps (--max-bad-steps); a scaler state read from last/ is checked, naming the file and the field; an
fp16 run whose last/ holds none is refused. Each run here has an epoch limit besides --max-steps, so that the code
before this fix (which skipped for ever) ends and fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tformer import lm
from tformer.cli import main
from tformer.fast.precision import NORMAL_OVERFLOWS, SCALE_FLOOR
from tformer.training.state import JSON_NAME, STATE_NAME
from tformer.training.trainer import TrainingDiverged

FLOOR_NOTE = "fp16: the loss scale reached its floor"


def _args(data, out, *more: str) -> list[str]:
    return [
        "train", "lm", "--data", str(data), "--out", str(out), "--preset", "tiny", "--max-len", "16",
        "--batch-size", "4", "--batches-per-epoch", "4", "--eval-blocks", "4", "--no-progress", *more,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def fp16_run(tmp_path_factory, words_txt):
    """A finished fp16 run of 2 steps (its last/ holds the scaler's state)."""
    out = tmp_path_factory.mktemp("fp16") / "run"
    assert main(_args(words_txt, out, "--precision", "fp16", "--max-steps", "2")) == 0
    assert json.loads((out / "last" / JSON_NAME).read_text())["scaler"]["scale"] == 65536.0
    return out


def _damaged(fp16_run, tmp_path, edit, name: str = JSON_NAME):
    run = tmp_path / "run"
    shutil.copytree(fp16_run, run)
    path = run / "last" / name
    state = json.loads(path.read_text())
    edit(state)
    path.write_text(json.dumps(state))
    return run


def _refused(code: int, err: str, *names: str) -> str:
    assert code == 2 and "Traceback" not in err and "this is a bug" not in err, err
    (line,) = [x for x in err.splitlines() if "error:" in x]
    for name in names:
        assert name in line, (name, line)
    return line


@pytest.mark.parametrize(
    "field, value",
    [
        ("scale", 0),  # skipped every step for ever
        ("scale", "abc"),  # failed at the first step: "this is a bug"
        ("scale", -1.0),
        ("scale", 0.5),  # below the floor
        ("scale", 1e39),  # float32's infinity in the scaler's tensor
        ("_growth_tracker", -1),
        ("_growth_tracker", 1.5),
        ("growth_interval", 0),
        ("backoff_factor", 1.0),  # the scale would never come down
        ("growth_factor", None),  # the field missing
    ],
)
def test_a_damaged_scaler_state_is_refused_in_one_line_naming_the_file_and_field(
    fp16_run, tmp_path, words_txt, capsys, field, value
):
    def edit(state):
        if value is None:
            del state["scaler"][field]
        else:
            state["scaler"][field] = value

    run = _damaged(fp16_run, tmp_path, edit)
    before = (run / "last" / JSON_NAME).read_bytes()
    capsys.readouterr()
    code = main(_args(words_txt, run, "--precision", "fp16", "--max-steps", "6", "--epochs", "3", "--resume"))
    line = _refused(code, capsys.readouterr().err, JSON_NAME, f"'scaler.{field}'", "--precision fp32", "--overwrite")
    assert ("is missing" if value is None else f"is {json.dumps(value)}") in line
    assert (run / "last" / JSON_NAME).read_bytes() == before  # nothing was written
    # the remedy the line gives works: fp32 uses no scaler
    assert main(_args(words_txt, run, "--precision", "fp32", "--max-steps", "3", "--resume")) == 0


@pytest.mark.parametrize("recorded", ["state.json's precision", "train_config only (an older save)"])
def test_an_fp16_run_whose_last_dir_lacks_the_scaler_state_is_refused(fp16_run, tmp_path, words_txt, capsys, recorded):
    run = _damaged(fp16_run, tmp_path, lambda state: state.pop("scaler"))
    if recorded != "state.json's precision":
        meta = json.loads((run / "last" / STATE_NAME).read_text())
        meta.pop("precision", None)
        assert meta["train_config"]["precision"] == "fp16"
        (run / "last" / STATE_NAME).write_text(json.dumps(meta))
    capsys.readouterr()
    code = main(_args(words_txt, run, "--precision", "fp16", "--max-steps", "4", "--resume"))
    line = _refused(code, capsys.readouterr().err, JSON_NAME, "no 'scaler'", "fp16", "--precision fp32", "--overwrite")
    assert "damaged" in line
    # a run that trained in fp32 has none to lack: resumed in fp16, its scaler starts afresh, the change said
    fp32 = tmp_path / "fp32"
    assert main(_args(words_txt, fp32, "--precision", "fp32", "--max-steps", "2")) == 0
    capsys.readouterr()
    assert main(_args(words_txt, fp32, "--precision", "fp16", "--max-steps", "4", "--resume")) == 0
    assert "--precision fp16 (was fp32)" in capsys.readouterr().out
    assert json.loads((fp32 / "last" / JSON_NAME).read_text())["scaler"]["_growth_tracker"] == 2


def _trainer(words_txt, out, scale: float, **more):
    trainer = lm.setup(
        words_txt, out, preset="tiny", max_len=16, batch_size=4, precision="fp16", progress=False,
        batches_per_epoch=10, epochs=5, **more,
    )  # fmt: skip
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    attempts = []
    step = trainer._optimizer_step
    trainer._optimizer_step = lambda *a: attempts.append(1) or step(*a)
    return trainer, attempts


def _overflowing(trainer) -> None:
    """Every step's gradients overflow float16 at any scale from 1 up (a loss that large: a diverging run)."""
    loss = trainer.task.loss
    trainer.task.loss = lambda model, batch: (lambda out: (out[0] * 1e9, out[1]))(loss(model, batch))


def test_a_scale_of_zero_is_raised_to_the_floor_said_once_and_the_run_trains(tmp_path, words_txt, capsys):
    trainer, attempts = _trainer(words_txt, tmp_path / "r", 0.0, max_steps=3)
    trainer.fit()
    err = capsys.readouterr().err
    assert trainer.step == 3 and len(attempts) == 4  # the one skipped step, at scale 0, then three good ones
    assert err.count(FLOOR_NOTE) == 1 and "at step 1:" in err
    assert trainer.scaler.get_scale() == SCALE_FLOOR and trainer.skipped_steps == 1  # a bad step, not a free skip


def test_overflows_at_the_floor_are_bad_steps_and_end_the_run(tmp_path, words_txt, capsys):
    trainer, attempts = _trainer(words_txt, tmp_path / "r", 65536.0, max_steps=40, max_bad_steps=3)
    _overflowing(trainer)
    with pytest.raises(TrainingDiverged, match=r"3 steps in a row.*--precision bf16 or fp32"):
        trainer.fit()
    err = capsys.readouterr().err
    # 16 halvings bring 65536 to the floor, the 17th overflow would go below it: a bad step, and two more
    assert len(attempts) == 16 + 3 and trainer.step == 0 and trainer.scaler.get_scale() == SCALE_FLOOR
    assert err.count(FLOOR_NOTE) == 1
    assert err.count("overflowed at the loss scale's floor (1): step skipped, a bad step") == 3


def test_overflows_past_the_bound_in_a_row_are_bad_steps_above_the_floor(tmp_path, words_txt, capsys):
    trainer, attempts = _trainer(words_txt, tmp_path / "r", 2.0**40, max_steps=40, max_bad_steps=2)
    _overflowing(trainer)
    with pytest.raises(TrainingDiverged, match="2 steps in a row"):
        trainer.fit()
    err = capsys.readouterr().err
    assert len(attempts) == NORMAL_OVERFLOWS + 2 and trainer.scaler.get_scale() > SCALE_FLOOR
    assert f"overflowed {NORMAL_OVERFLOWS + 1} steps in a row" in err and FLOOR_NOTE not in err
