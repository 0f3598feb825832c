"""The training run directory (issue 32): one run at a time, an --overwrite that deletes only a run's files, a
--resume that keeps its run's settings and budget or says why not, damaged run files named, honest progress lines.

Each case goes through the real CLI (``tformer.cli.main`` in this process; a real training in a child process for
the lock) on a tiny language model that trains a step in milliseconds, and checks the exit status, the one line
of an error, and what is on disk.
"""

import json
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tformer.cli import main
from tformer.training import progress
from tformer.training.trainer import TrainConfig, lr_factor

WORDS = "the king is dead long live the queen and all her men ride to war at dawn".split()


def _text(directory: Path) -> Path:
    rng = random.Random(0)
    path = directory / "words.txt"
    path.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(300)), encoding="utf-8")
    return path


def _lm(directory: Path, out: str, *more: str) -> list[str]:
    return [
        "train", "lm", "--data", str(_text(directory)), "--out", out, "--preset", "tiny", "--max-len", "16",
        "--batch-size", "4", "--batches-per-epoch", "5", "--eval-blocks", "8", "--log-every", "1",
        "--schedule", "inverse_sqrt", "--warmup-steps", "3", "--no-progress", *more,
    ]  # fmt: skip


def _run(capsys, argv: list[str]) -> dict:
    code = main(argv)
    captured = capsys.readouterr()
    return {"code": code, "out": captured.out, "err": captured.err}


def _error(result: dict, *names: str, code: int = 2) -> str:
    """The failed command's one error line (no traceback), which names each of ``names``."""
    assert result["code"] == code, result
    assert "Traceback" not in result["err"], result["err"]
    lines = [line for line in result["err"].splitlines() if "error:" in line]
    assert len(lines) == 1, result["err"]
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def _snapshot(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("trained")
    assert main(_lm(directory, str(directory / "run"), "--max-steps", "3")) == 0
    return directory / "run"


@pytest.fixture
def run3(trained, tmp_path, monkeypatch) -> Path:
    """A finished lm run of 3 steps in ``tmp_path/run`` (a copy), the working directory ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    return Path(shutil.copytree(trained, tmp_path / "run"))


# ------------------------------------------------------------------------------------------ one run at a time


def _wait_for(condition, what: str, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert proc.poll() is None, f"the training stopped before {what}: {proc.stderr.read() if proc.stderr else ''}"
        assert time.monotonic() < deadline, f"no {what} after {seconds} s"
        time.sleep(0.1)


def test_a_running_run_keeps_out_a_second_start_resume_and_overwrite_and_its_stale_lock_is_taken_over(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    argv = _lm(tmp_path, "run", "--minutes", "3")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tformer", *argv], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        _wait_for(lambda: (out / ".lock").is_file() and (out / ".lock").read_text().endswith("\n"), "lock", proc)
        lock = json.loads((out / ".lock").read_text())
        assert lock["pid"] == proc.pid and "--minutes 3" in lock["command"]
        _wait_for(lambda: (out / "log.jsonl").is_file(), "log", proc)  # a run's files there: the lock is said first
        for more in ([], ["--resume"], ["--overwrite"]):  # each refused, naming the running one
            line = _error(_run(capsys, _lm(tmp_path, "run", "--max-steps", "2", *more)), "in use by another training")
            assert f"pid {proc.pid}" in line and f"started {lock['started']}" in line and "--minutes 3" in line
            assert "'run/.lock'" in line
        assert proc.poll() is None  # still running
    finally:
        proc.kill()  # SIGKILL: no chance to remove its lock
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and (out / ".lock").is_file()

    again = _run(capsys, _lm(tmp_path, "run", "--max-steps", "2", "--overwrite"))
    assert again["code"] == 0, again["err"]
    assert "took over 'run/.lock', a lock left by a run that is no longer running" in again["err"]
    assert f"pid {proc.pid}" in again["err"]
    assert not (out / ".lock").exists()  # released at the end of the run
    assert [r["step"] for r in _records(out) if "train_loss" in r] == [1, 2]

    # a start refused after it took the lock leaves neither the lock nor a directory it made for it
    _error(_run(capsys, _lm(tmp_path, "new", "--max-steps", "2", "--resume")), "'new/last'")
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------------------------------------------------- overwrite


def test_overwrite_refuses_a_folder_that_is_not_a_run_and_deletes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "corpus.txt").write_text("my corpus\n")
    (mine / "notes.txt").write_text("my notes\n")
    before = _snapshot(mine)
    line = _error(_run(capsys, _lm(tmp_path, "mine", "--max-steps", "2", "--overwrite")), "--out 'mine'")
    assert "not a tformer run" in line and "data" in line and "notes.txt" in line
    assert _snapshot(mine) == before and sorted(p.name for p in mine.iterdir()) == ["data", "notes.txt"]


def test_overwrite_refuses_a_run_that_also_holds_other_files_naming_them(run3, capsys):
    (run3 / "notes.txt").write_text("my notes\n")
    before = _snapshot(run3)
    line = _error(_run(capsys, _lm(run3.parent, "run", "--max-steps", "2", "--overwrite")), "--overwrite", "notes.txt")
    assert "nothing was deleted" in line
    assert _snapshot(run3) == before and not (run3 / ".lock").exists()
    (run3 / "notes.txt").unlink()
    again = _run(capsys, _lm(run3.parent, "run", "--max-steps", "2", "--overwrite"))  # a run alone: replaced
    assert again["code"] == 0, again["err"]
    assert [r["step"] for r in _records(run3) if "train_loss" in r] == [1, 2]


# ---------------------------------------------------------------------------------------------------- resume


@pytest.mark.parametrize(
    "family", [["train", "translation", "--preset", "tiny"], ["train", "bert", "--data", "words.txt"]]
)
def test_resuming_a_run_of_another_family_names_the_kind_it_found(run3, capsys, family):
    _text(run3.parent)
    before = _snapshot(run3)
    # with the family's flags, or --out RUN --resume alone (its settings from its config.yaml): said at once, before
    # "--data is required", as a command-line error (argparse's exit status 2)
    for argv in ([*family, "--out", "run", "--max-steps", "5", "--resume"], [*family[:2], "--out", "run", "--resume"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        line = capsys.readouterr().err
        assert exit_info.value.code == 2 and line.count("\n") == 1 and "holds a `tformer train lm` run" in line, line
        assert f"not a `train {family[1]}` one: resume it with tformer train lm --out run --resume" in line
        assert _snapshot(run3) == before
    assert _snapshot(run3) == before


def test_resume_refuses_a_changed_setting_naming_it_and_both_values(run3, capsys):
    before = _snapshot(run3)
    argv = _lm(run3.parent, "run", "--max-steps", "6", "--resume", "--preset", "small", "--lr", "0.002")
    line = _error(_run(capsys, [*argv, "--batch-size", "8"]), "'run/last/state.json'")
    for change in ("--preset small (the run: tiny)", "--lr 0.002 (the run: 0.001)", "--batch-size 8 (the run: 4)"):
        assert change in line
    assert _snapshot(run3) == before


def test_resume_takes_a_larger_budget_and_another_cadence_and_prints_what_it_uses(run3, capsys):
    result = _run(capsys, _lm(run3.parent, "run", "--max-steps", "6", "--eval-every", "2", "--resume"))
    assert result["code"] == 0, result["err"]
    assert "resuming 'run' at step 3" in result["out"] and "until --max-steps 6 in all" in result["out"]
    assert "--max-steps 6 (was 3), --eval-every 2 (was not given)" in result["out"]
    records = _records(run3)
    assert [r["step"] for r in records if "train_loss" in r] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in records if "val_loss" in r] == [3, 4, 6]  # no evaluation twice


@pytest.mark.parametrize("limit", [["--max-steps", "3"], ["--minutes", "0.002"]])
def test_resume_with_its_budget_spent_says_so_and_how_to_extend_it_and_writes_nothing(
    tmp_path, monkeypatch, capsys, limit
):
    monkeypatch.chdir(tmp_path)
    first = _run(capsys, _lm(tmp_path, "run", *limit))
    assert first["code"] == 0, first["err"]
    before = _snapshot(tmp_path / "run")
    again = _run(capsys, _lm(tmp_path, "run", *limit, "--resume"))
    line = _error(again, "'run'", f"has already reached {limit[0]}")
    assert "nothing was written" in line and "count from the run's start" in line and "give a larger one" in line
    assert "done:" not in again["out"]
    assert _snapshot(tmp_path / "run") == before


def test_the_time_budget_counts_the_optimizer_step(tmp_path, monkeypatch, capsys):
    """--minutes is training time: each step's forward, backward and optimizer step. An optimizer step of 0.1 s (Muon's
    on a small model on 2 cores is 0.5 s) under a 0.3 s budget stops the run after about 3 steps, and the log's
    elapsed_s says that time; the budget had counted the forward and backward alone (64 Muon steps in 1.2 s). Here
    0.5 s optimizer steps under a 1.8 s budget: a stall of the forward on a loaded machine is small beside them."""
    import torch

    step = torch.optim.AdamW.step

    def slow(self, *args, **kwargs):
        time.sleep(0.5)
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", slow)
    monkeypatch.chdir(tmp_path)
    result = _run(capsys, _lm(tmp_path, "run", "--minutes", "0.03"))
    assert result["code"] == 0, result["err"]
    steps = [r for r in _records(tmp_path / "run") if "train_loss" in r]
    # 1.8 s of 0.5 s steps, and one more: a step's optimizer time is on the clock with the next step's forward
    assert 2 <= len(steps) <= 6, [r["step"] for r in steps]
    assert steps[-1]["elapsed_s"] >= 0.5 * (len(steps) - 1)
    done = result["out"].strip().splitlines()[-1]  # the last line says which limit ended it
    assert done.startswith(f"done: step {len(steps)} (--minutes 0.03 reached: it has trained 0."), done


# ------------------------------------------------------------------------------------------ damaged run files


def _state(run: Path, text: str) -> None:
    (run / "last" / "state.json").write_text(text)


def _good_state(run: Path, **changes) -> str:
    return json.dumps({**json.loads((run / "last" / "state.json").read_text()), **changes})


def _no_optimizer(run: Path) -> None:
    path = run / "last" / "trainer_state.json"
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "optimizer"}))


def _no_optimizer_tensors(run: Path) -> None:
    path = run / "last" / "trainer_state.safetensors"
    save_file({k: v for k, v in load_file(str(path)).items() if not k.startswith("optimizer.")}, str(path))


def _bad_log_byte(run: Path) -> None:
    lines = (run / "log.jsonl").read_bytes().splitlines(keepends=True)
    (run / "log.jsonl").write_bytes(lines[0] + b'{"step": 2, "note": "caf\xe9"}\n' + b"".join(lines[2:]))


DAMAGES = {
    "empty state": (lambda run: _state(run, ""), "last/state.json", "is empty"),
    "state {}": (lambda run: _state(run, "{}"), "last/state.json", "'step' is missing, expected a whole number"),
    "state []": (lambda run: _state(run, "[]"), "last/state.json", "must hold a JSON object, got a JSON list"),
    "step a string": (
        lambda run: _state(run, _good_state(run, step="3")),
        "last/state.json",
        "'step' is \"3\", expected a whole number >= 0",
    ),
    "elapsed a list": (
        lambda run: _state(run, _good_state(run, elapsed=[1])),
        "last/state.json",
        "'elapsed' is [1], expected a number of seconds",
    ),
    "no optimizer": (_no_optimizer, "last/trainer_state.json", "'optimizer' is null, expected an object"),
    "no optimizer tensors": (_no_optimizer_tensors, "last/trainer_state.safetensors", "holds no optimizer state"),
    "log not UTF-8": (_bad_log_byte, "log.jsonl'", ":2: byte 0xe9 is not UTF-8"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_run_file_is_named_in_one_line_on_resume(run3, capsys, damage):
    spoil, name, expected = DAMAGES[damage]
    spoil(run3)
    before = _snapshot(run3)
    line = _error(_run(capsys, _lm(run3.parent, "run", "--max-steps", "5", "--resume")), name, expected)
    assert line.startswith("tformer train lm: error:")
    assert _snapshot(run3) == before and not (run3 / ".lock").exists()


# ------------------------------------------------------------------------------------------------- progress


def test_each_progress_line_shows_the_values_of_its_own_step(tmp_path, monkeypatch, capsys):
    """Plain lines (stderr is not a terminal) printed at every step, with a log record only every 100 steps:
    each line's learning rate is that of its step (warmup then inverse square root), and its loss the step's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    argv = [a for a in _lm(tmp_path, "run", "--max-steps", "4") if a != "--no-progress"]
    argv[argv.index("--log-every") + 1] = "100"
    result = _run(capsys, argv)
    assert result["code"] == 0, result["err"]
    lines = [line.split() for line in result["err"].splitlines() if line.startswith("step ")]
    assert [line[1] for line in lines] == ["1/4", "2/4", "3/4", "4/4"]
    cfg = TrainConfig(out_dir="run", lr=1e-3, warmup_steps=3, max_steps=4)
    steps = (1, 2, 3, 4)  # step s trains at lr_factor(s - 1): the factor is 0-based
    assert [line[line.index("lr") + 1] for line in lines] == [f"{1e-3 * lr_factor(s - 1, cfg):.2e}" for s in steps]
    losses = [line[line.index("loss") + 1] for line in lines]
    assert losses[0] == f"{_records(tmp_path / 'run')[0]['train_loss']:.3f}" and len(set(losses)) == 4

    # the same run with a record per step: each line's loss is its step's record
    shutil.rmtree(tmp_path / "run")
    logged = _run(capsys, _lm(tmp_path, "run", "--max-steps", "4"))
    assert logged["code"] == 0, logged["err"]
    assert losses == [f"{r['train_loss']:.3f}" for r in _records(tmp_path / "run") if "train_loss" in r]


def test_the_bar_shows_each_count_with_its_own_steps_values(monkeypatch):
    """On a terminal the bar's values are asked for every BAR_EVERY_S: its count waits for them, so "2/4" never
    shows step 1's loss (it did: the count moved at every step, the values twice a second)."""
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(progress, "BAR_EVERY_S", 0.3)
    stream = Terminal()
    bar = progress.Progress(4, 0, True, stream)
    for step in (1, 2, 3, 4):
        bar.update(step, f"loss of step {step}")
        time.sleep(0.2)  # tqdm draws (every 0.1 s) between the bar's values (every 0.3 s)
    bar.close()
    frames = [f for f in stream.getvalue().split("\r") if "/4" in f and " 0/4 " not in f]  # (the empty bar first)
    shown = [(re.search(r" (\d)/4 ", f), re.search(r"loss of step (\d)", f)) for f in frames]
    assert len(shown) >= 2 and all(count and values for count, values in shown), frames
    assert all(count.group(1) == values.group(1) for count, values in shown), frames
    assert "4/4" in frames[-1] and "loss of step 4" in frames[-1]


def test_the_eta_is_wall_time_and_tokens_per_s_training_time_and_the_log_says_what_each_evaluation_took(
    tmp_path, monkeypatch, capsys
):
    """--minutes counts training only, so an ETA from the training clock alone said 0:00 while a translation run's
    evaluations still had minutes to go: the time left is scaled by the session's wall time per training second."""
    from tformer.training import evaluation, trainer

    assert progress.seconds_left(None, 2.0, 5, 60.0, 0, 0.0) == 60.0  # the budget's minute left, on its clock
    assert progress.seconds_left(None, 2.0, 5, 60.0, 0, 0.0, wall=180.0) == 180.0  # 2 wall seconds per trained one
    assert progress.seconds_left(10, None, 5, 10.0, 0, 0.0, wall=15.0) == pytest.approx(15.0)  # 5 steps of 2 s × 1.5
    assert progress.seconds_left(10, None, 5, 10.0, 0, 0.0, wall=5.0) == pytest.approx(10.0)  # never below training
    walls, scores = [], evaluation.Evaluation._scores

    def slow_scores(self):
        time.sleep(0.4)
        return scores(self)

    def seen(*args, **kwargs):
        walls.append((args[2], args[-1], args[3] - args[5]))  # step, wall, trained seconds
        return progress_left(*args, **kwargs)

    progress_left = trainer.seconds_left
    monkeypatch.setattr(evaluation.Evaluation, "_scores", slow_scores)
    monkeypatch.setattr(trainer, "seconds_left", seen)
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    monkeypatch.chdir(tmp_path)
    argv = [a for a in _lm(tmp_path, "run", "--max-steps", "3", "--eval-every", "1") if a != "--no-progress"]
    assert _run(capsys, argv)["code"] == 0
    after_two = [(wall, trained) for step, wall, trained in walls if step == 3]
    assert after_two and all(wall >= trained + 0.8 for wall, trained in after_two)  # the two evaluations' 0.4 s
    records = _records(tmp_path / "run")
    evals = [r for r in records if "val_loss" in r]
    assert len(evals) == 3 and all(r["eval_s"] >= 0.4 for r in evals)
    # and tokens/s is training's: a step of 4 × 16 tokens after a 0.4 s evaluation still reads as one step's pace
    assert all(r["tokens_per_s"] > 64 / 0.2 for r in records if "train_loss" in r and r["step"] > 1)


def test_an_accumulation_longer_than_an_epoch_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """A step never spans two epochs: --accum-steps 8 over an epoch of 3 batches trained steps of 3, in silence."""
    monkeypatch.chdir(tmp_path)
    result = _run(capsys, _lm(tmp_path, "run", "--max-steps", "3", "--batches-per-epoch", "3", "--accum-steps", "8"))
    assert result["code"] == 2 and "Traceback" not in result["err"]
    assert "--accum-steps 8 makes a step of 8 batches, but an epoch of this run's training data has 3" in result["err"]
    assert not (tmp_path / "run").exists()  # the same command, fixed, runs without --overwrite
    assert (
        _run(capsys, _lm(tmp_path, "run", "--max-steps", "3", "--batches-per-epoch", "3", "--accum-steps", "3"))["code"]
        == 0
    )


def test_a_run_stopped_before_its_first_record_is_a_run_that_overwrite_replaces(tmp_path, monkeypatch, capsys):
    """Killed (or its output piped to `head`) between OUT/config.yaml and the first log record: --overwrite starts
    it again; a config.yaml of the user's is not a run's, and stays."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stopped").mkdir()
    (tmp_path / "stopped" / "config.yaml").write_text(
        "# tformer train lm: the settings this run resolved\nfamily: lm\n"
    )
    result = _run(capsys, _lm(tmp_path, "stopped", "--max-steps", "1"))
    assert "pass --resume to continue the run in it, or --overwrite" in _error(result)
    assert _run(capsys, _lm(tmp_path, "stopped", "--max-steps", "1", "--overwrite"))["code"] == 0
    assert (tmp_path / "stopped" / "log.jsonl").is_file()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.yaml").write_text("batch: 8\n")  # a YAML file of the user's
    _error(_run(capsys, _lm(tmp_path, "mine", "--max-steps", "1", "--overwrite")), "is not a tformer run")
    assert (tmp_path / "mine" / "config.yaml").read_text() == "batch: 8\n"


def test_a_trainer_built_directly_judges_its_folder_as_every_run_does(tmp_path):
    """Trainer(model, task, TrainConfig(out_dir=D)).fit() took only the lock: a folder of the user's lost the files in
    its best/ and last/ when the saves replaced them, and a second run over the first one's folder mixed two runs in
    one log. Now it is judged as the commands judge it: a user's folder refused untouched, a run's needing resume()
    (or overwrite), the same trainer fitted again going on from its own saves."""
    from scripted import VOCAB, ScriptedTask
    from tformer import GPT, GPTConfig
    from tformer.training.config import TrainConfig
    from tformer.training.trainer import Trainer

    def trainer(out, scores=(3.0, 2.0), **changes):
        torch.manual_seed(0)
        model = GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=16))
        options = dict(out_dir=str(out), max_steps=len(scores), eval_every=1, warmup_steps=1, progress=False)
        return Trainer(model, ScriptedTask(list(scores)), TrainConfig(**{**options, **changes}))

    mine = tmp_path / "mine"
    (mine / "best").mkdir(parents=True)
    (mine / "best" / "my_model.bin").write_text("precious")
    (mine / "notes.txt").write_text("my notes")
    before = sorted(str(p.relative_to(mine)) for p in mine.rglob("*"))
    with pytest.raises(ValueError, match=r"--out .*mine' is not empty"):
        trainer(mine).fit()
    assert sorted(str(p.relative_to(mine)) for p in mine.rglob("*")) == before  # nothing written, nothing deleted
    run = tmp_path / "run"
    first = trainer(run)
    first.fit()
    with pytest.raises(ValueError, match=r"is not empty .*pass --resume to continue the run in it, or --overwrite"):
        trainer(run).fit()
    first.cfg = TrainConfig(**{**first.cfg.__dict__, "max_steps": 3})  # the same trainer, a longer budget
    first.task.scores.append(1.5)
    first.fit()
    steps = [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 3  # one run's log
    trainer(run, (9.0,), overwrite=True).fit()  # asked for: a new run in its place
    assert [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()][-1] == 1
