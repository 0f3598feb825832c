"""Early stopping (issue 49): ``--patience N`` stops a run after N evaluations in a row without a better metric
(the one ``best/`` is chosen by), says so, and leaves ``best/`` the best model; a resumed run keeps the count, and one
that has stopped is refused unless given a larger patience."""

import json

import pytest
import torch

from scripted import VOCAB, ScriptedTask
from tformer import GPT, GPTConfig
from tformer.cli import main
from tformer.training.config import TrainConfig
from tformer.training.trainer import Trainer


def _model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=16))


def _config(out, **changes) -> TrainConfig:
    options = dict(out_dir=str(out), max_steps=30, eval_every=1, warmup_steps=1, lr=1e-2, progress=False)
    return TrainConfig(**{**options, **changes})


def test_the_run_stops_after_patience_flat_evaluations_and_keeps_the_best(tmp_path, capsys):
    task = ScriptedTask([3.0, 2.0, 2.5, 2.1, 2.2, 1.0])
    trainer = Trainer(_model(), task, _config(tmp_path, patience=3))
    result = trainer.fit()
    assert trainer.step == 5 and result["val_loss"] == 2.2 and trainer.best == 2.0  # steps 3, 4, 5: none better
    out = capsys.readouterr().out
    assert "stopped early at step 5: --patience 3 (3 evaluations in a row without a better one)" in out
    assert "best/ holds the best model (val_loss 2 at step 2)" in out
    best = GPT.from_pretrained(tmp_path / "best").state_dict()
    assert all(torch.equal(best[k], v) for k, v in task.seen[1].items())  # step 2's model, not the last one
    assert not all(torch.equal(best[k], v) for k, v in task.seen[-1].items())
    assert json.loads((tmp_path / "last" / "state.json").read_text())["stale_evals"] == 3
    from tformer.cli.info import describe_run  # tformer info says why the run ended before its --max-steps

    said = describe_run(tmp_path)
    assert "step 5 of 30 (last/)" in said and "stopped at --patience 3 (3 evaluations in a row" in said, said


def test_a_resumed_run_keeps_the_count_and_a_stopped_one_needs_more_patience(tmp_path, capsys):
    Trainer(_model(), ScriptedTask([3.0, 2.0, 2.5, 2.1]), _config(tmp_path, patience=2)).fit()
    again = Trainer(_model(), ScriptedTask([9.0]), _config(tmp_path, patience=2))
    again.resume()
    with pytest.raises(ValueError, match="stopped early, at --patience 2 .*give a larger --patience"):
        again.fit()
    more = Trainer(_model(), ScriptedTask([2.4, 1.5, 2.2, 2.3, 2.6]), _config(tmp_path, patience=3))
    more.resume()
    assert more.stale_evals == 2 and more.best == 2.0
    more.fit()  # 2.4: the third flat evaluation would stop at patience 3 (2 carried over + 1)
    assert more.step == 5 and more.best == 2.0


def test_a_higher_is_better_metric_counts_the_same_way(tmp_path):
    task = ScriptedTask([10.0, 12.0, 11.0, 13.0, 12.5, 13.0, 14.0], metric="bleu", higher_is_better=True)
    trainer = Trainer(_model(), task, _config(tmp_path, patience=2))
    trainer.fit()
    assert trainer.step == 6 and trainer.best == 13.0  # 11.0 then 13.0 (better); 12.5, then 13.0 equal: not better


def test_a_tie_of_the_metric_is_broken_by_the_validation_loss(tmp_path, capsys):
    """BLEU 0 at a translation run's first evaluations: the falling loss moves best/ on and does not spend patience;
    a tie with a higher loss, or an equal one, is not better."""
    scores = [(0.0, 5.0), (0.0, 4.0), (0.0, 3.0), (2.0, 2.5), (2.0, 2.4), (2.0, 2.6), (2.0, 2.4), (1.0, 2.0)]
    task = ScriptedTask([{"bleu": b, "val_loss": v} for b, v in scores], metric="bleu", higher_is_better=True)
    trainer = Trainer(_model(), task, _config(tmp_path, patience=2))
    trainer.fit()
    assert trainer.step == 7 and (trainer.best, trainer.best_step, trainer.best_loss) == (2.0, 5, 2.4)
    assert "best/ holds the best model (BLEU 2.00 at step 5)" in capsys.readouterr().out
    best = GPT.from_pretrained(tmp_path / "best").state_dict()
    assert all(torch.equal(best[k], v) for k, v in task.seen[4].items())
    state = json.loads((tmp_path / "last" / "state.json").read_text())
    assert (state["best_loss"], state["stale_evals"]) == (2.4, 2)
    again = ScriptedTask([{"bleu": 2.0, "val_loss": 2.3}], "bleu", True)
    more = Trainer(_model(), again, _config(tmp_path, patience=3, max_steps=8))
    more.resume()
    assert more.best_loss == 2.4
    more.fit()  # step 8: the same BLEU at a lower loss than the resumed best's
    assert (more.best_step, more.best_loss, more.stale_evals) == (8, 2.3, 0)


def test_patience_without_validation_data_says_so_and_trains_to_the_budget(tmp_path, capsys):
    trainer = Trainer(_model(), ScriptedTask([None]), _config(tmp_path, patience=1, max_steps=4))
    trainer.fit()
    assert trainer.step == 4
    err = capsys.readouterr().err
    assert err.count("--patience 1 compares nothing") == 1 and "no validation data" in err


def test_train_takes_patience_and_refuses_a_bad_one(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat. " * 200)
    args = ["train", "lm", "--data", str(text), "--preset", "tiny", "--max-len", "16", "--batch-size", "4"]
    args += ["--max-steps", "40", "--eval-every", "1", "--eval-blocks", "2", "--no-progress", "--lr", "0.3"]
    args += ["--warmup-steps", "1", "--out", str(tmp_path / "run"), "--patience", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "stopped early at step" in out and "--patience 2" in out  # an lr of 0.3: the loss rises at once
    with pytest.raises(SystemExit):
        main(args[:-1] + ["0", "--overwrite"])
    assert "--patience" in capsys.readouterr().err
