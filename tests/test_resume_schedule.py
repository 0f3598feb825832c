"""A resume that moves the end of the cosine decay says so (issue 44, item 7).

``--max-steps`` is a total and may grow on ``--resume``; the cosine schedule, rebuilt from the new value, then gave
the next step another learning rate (1.0e-4 → 2.4e-4 in the issue) without a word, though the README promises that a
resume changes nothing silently. Now the new decay applies from the next step, said in one line on stderr with that
step's learning rate on both schedules; a schedule whose end did not move (or that has none) resumes exactly,
unsaid.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tformer import lm
from tformer.checks import BadValue
from tformer.cli import main
from tformer.training.config import TrainConfig, lr_factor

NOTE = "note: the cosine decay now ends"


def _setup(words_txt, out, schedule: str = "cosine", **more):
    return lm.setup(
        words_txt, out, preset="tiny", max_len=16, batch_size=4, lr=1e-3, warmup_steps=2, batches_per_epoch=4,
        progress=False, schedule=schedule, precision="fp32", **more,
    )  # fmt: skip


def _lr(trainer) -> float:
    return trainer.optimizer.param_groups[0]["lr"]


def test_a_larger_max_steps_on_resume_says_the_new_decay_with_both_learning_rates(tmp_path, words_txt, capsys):
    first = _setup(words_txt, tmp_path / "r", max_steps=6)
    first.fit()
    saved_lr = _lr(first)  # what the run's schedule gives its 7th step
    assert saved_lr == pytest.approx(1e-3 * lr_factor(6, first.cfg))
    capsys.readouterr()
    resumed = _setup(words_txt, tmp_path / "r", max_steps=12, resume=True)
    err = capsys.readouterr().err
    new_lr = 1e-3 * lr_factor(6, replace(first.cfg, max_steps=12))
    assert new_lr > 2 * saved_lr  # the decay re-stretched: a jump worth saying
    (line,) = [x for x in err.splitlines() if x.startswith(NOTE)]
    assert line == (
        f"{NOTE} at step 12 (--max-steps 12), not at step 6 as the run's did (--max-steps 6): the learning rate at "
        f"step 7 is {new_lr:.2e}, not {saved_lr:.2e}"
    )
    assert _lr(resumed) == pytest.approx(new_lr)  # and it is the rate the next step takes, as said
    resumed.fit()
    assert resumed.step == 12
    # a resume whose decay end did not move (a larger --epochs) is exact and unsaid
    first = _setup(words_txt, tmp_path / "cos", max_steps=12, epochs=1)  # stops at the epoch's end: step 4
    first.fit()
    saved_lr = _lr(first)
    capsys.readouterr()
    resumed = _setup(words_txt, tmp_path / "cos", max_steps=12, epochs=2, resume=True)
    assert NOTE not in capsys.readouterr().err and _lr(resumed) == saved_lr
    # a schedule with no end (inverse square root) takes a larger --max-steps unchanged, unsaid
    other = _setup(words_txt, tmp_path / "isqrt", schedule="inverse_sqrt", max_steps=4)
    other.fit()
    saved_lr = _lr(other)
    capsys.readouterr()
    resumed = _setup(words_txt, tmp_path / "isqrt", schedule="inverse_sqrt", max_steps=8, resume=True)
    assert NOTE not in capsys.readouterr().err and _lr(resumed) == saved_lr


def _cli(words_txt, out) -> list[str]:
    """``tformer train lm`` of a tiny cosine run into ``out`` (the budget and the rest added by each test)."""
    return [
        "train", "lm", "--data", str(words_txt), "--out", str(out), "--preset", "tiny", "--max-len", "16",
        "--batch-size", "4", "--batches-per-epoch", "4", "--eval-blocks", "4", "--no-progress", "--schedule",
        "cosine", "--warmup-steps", "1", "--precision", "fp32", "--lr", "1e-3",
    ]  # fmt: skip


def test_the_cli_says_the_changed_decay_in_one_line_on_stderr(tmp_path, words_txt, capsys):
    args = _cli(words_txt, tmp_path / "r")
    assert main([*args, "--max-steps", "4"]) == 0
    capsys.readouterr()
    assert main([*args, "--max-steps", "8", "--resume"]) == 0
    captured = capsys.readouterr()
    assert "changed: --max-steps 8 (was 4)" in captured.out  # the resume line, as before
    lines = [x for x in captured.err.splitlines() if x.startswith(NOTE)]
    assert len(lines) == 1 and "(--max-steps 8), not at step 4" in lines[0] and "at step 5 is" in lines[0]


def test_each_logged_learning_rate_is_the_one_its_step_used(tmp_path, words_txt):
    """The log's (and the progress line's) ``lr`` of step N is the rate step N trained with: lr_factor(N - 1), the
    first step of a warmup a small one, not the next step's."""
    import json

    trainer = _setup(words_txt, tmp_path / "r", max_steps=6, log_every=1)
    trainer.fit()
    records = [json.loads(line) for line in (tmp_path / "r" / "log.jsonl").read_text().splitlines()]
    logged = {r["step"]: r["lr"] for r in records if "lr" in r}
    assert sorted(logged) == [1, 2, 3, 4, 5, 6]
    assert logged == {s: pytest.approx(1e-3 * lr_factor(s - 1, trainer.cfg)) for s in logged}
    assert logged[1] == pytest.approx(1e-3 / 2)  # warmup's first step: half the rate (--warmup-steps 2)


def test_min_lr_ratio_sets_where_the_cosine_decay_ends_and_a_resume_keeps_it(tmp_path, words_txt, capsys):
    """``--min-lr-ratio R`` (nanoGPT's ``min_lr / lr``): the last step of a cosine run trains at ``lr × R`` (0: at
    zero); out of range it is refused naming the flag; a resume that changes it is refused like ``--lr``."""
    import json

    args = [*_cli(words_txt, tmp_path / "r"), "--log-every", "1"]
    assert main([*args, "--max-steps", "5", "--min-lr-ratio", "0.25"]) == 0
    records = [json.loads(line) for line in (tmp_path / "r" / "log.jsonl").read_text().splitlines()]
    logged = {r["step"]: r["lr"] for r in records if "lr" in r}
    assert logged[5] == pytest.approx(1e-3 * 0.25) and logged[3] == pytest.approx(1e-3 * (0.25 + 0.75 * 0.5))
    capsys.readouterr()
    with pytest.raises(SystemExit) as bad:
        main([*args, "--out", str(tmp_path / "bad"), "--max-steps", "5", "--min-lr-ratio", "1.5"])
    assert bad.value.code == 2 and "--min-lr-ratio" in capsys.readouterr().err and not (tmp_path / "bad").exists()
    assert main([*args, "--max-steps", "8", "--min-lr-ratio", "0", "--resume"]) != 0
    said = capsys.readouterr()
    assert "--min-lr-ratio" in said.err + said.out, said


@pytest.mark.parametrize("schedule", ["constant", "inverse_sqrt"])
def test_min_lr_ratio_without_a_cosine_schedule_is_refused(tmp_path, words_txt, capsys, schedule):
    """``--min-lr-ratio`` sets where the cosine decay ends; with a schedule that has no such end it would do nothing,
    so it is refused naming both flags, before anything is written (Hugging Face's ``min_lr`` is likewise an argument
    of its cosine schedule alone). The default (the flag left out) is no setting and trains as before."""
    out = tmp_path / "r"
    assert main([*_cli(words_txt, out), "--schedule", schedule, "--max-steps", "2", "--min-lr-ratio", "0"]) != 0
    said = capsys.readouterr()
    assert "--min-lr-ratio" in said.err and f"--schedule {schedule}" in said.err and not out.exists(), said
    assert "Traceback" not in said.err
    with pytest.raises(BadValue, match="min_lr_ratio=0.5"):
        TrainConfig(out_dir=str(out), schedule=schedule, max_steps=2, min_lr_ratio=0.5)
    assert main([*_cli(words_txt, out), "--schedule", schedule, "--max-steps", "2"]) == 0
