"""Checkpoint averaging (issue 49): ``--keep-checkpoints K`` keeps the models of a run's last K evaluations, and
``tformer average RUN OUT --last K`` / ``--best K`` writes their exact parameter-wise mean as a model directory."""

import json

import pytest
import torch

from scripted import VOCAB, ScriptedTask
from tformer import GPT, GPTConfig, load
from tformer.cli import main
from tformer.training.averaging import average_models, checkpoints, choose_checkpoints
from tformer.training.config import TrainConfig
from tformer.training.trainer import Trainer


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=16))
    cfg = TrainConfig(
        out_dir=str(out), max_steps=6, eval_every=1, warmup_steps=1, lr=1e-2, progress=False, keep_checkpoints=3
    )
    Trainer(model, ScriptedTask([5.0, 4.0, 3.0, 3.5, 2.5, 2.9]), cfg).fit()
    return out


def _weights(directory):
    return GPT.from_pretrained(directory).state_dict()


def test_the_last_k_evaluations_are_kept_with_their_metric(run):
    kept = checkpoints(run)
    assert [d.name for d in kept] == ["step-0000004", "step-0000005", "step-0000006"]  # the older ones removed
    info = json.loads((kept[0] / "checkpoint.json").read_text())
    assert info == {"step": 4, "metric": "val_loss", "value": 3.5, "higher_is_better": False, "val_loss": 3.5}
    assert not torch.equal(_weights(kept[0])["output.weight"], _weights(kept[1])["output.weight"])


def test_the_average_is_the_exact_mean_of_the_saved_states(run):
    chosen = choose_checkpoints(run, last=3)
    states = [_weights(d) for d in chosen]
    averaged = average_models(chosen).state_dict()
    for name, value in averaged.items():
        mean = torch.stack([s[name].double() for s in states]).mean(0).to(value.dtype)
        assert torch.equal(value, mean), name


def test_best_k_ranks_by_the_run_s_metric(run):
    assert [d.name for d in choose_checkpoints(run, best=2)] == ["step-0000005", "step-0000006"]  # 2.5, 2.9 (not 3.5)
    assert [d.name for d in choose_checkpoints(run, best=1)] == ["step-0000005"]
    with pytest.raises(ValueError, match="--last 4: .* kept 3 checkpoint"):
        choose_checkpoints(run, last=4)


def test_best_k_breaks_a_tie_of_the_metric_by_the_loss_as_best_is_chosen(tmp_path):
    """An accuracy (or a BLEU of 0) tied across evaluations: best/ keeps the lower validation loss, so does --best."""
    scores = [{"accuracy": 0.4, "val_loss": 0.69}, {"accuracy": 0.45, "val_loss": 0.70}]
    scores += [{"accuracy": 0.45, "val_loss": 0.69}, {"accuracy": 0.45, "val_loss": 0.71}]
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=16))
    cfg = TrainConfig(out_dir=str(tmp_path), max_steps=4, eval_every=1, lr=1e-2, progress=False, keep_checkpoints=3)
    trainer = Trainer(model, ScriptedTask(scores, "accuracy", higher_is_better=True), cfg)
    trainer.fit()
    assert trainer.best_step == 3
    assert [d.name for d in choose_checkpoints(tmp_path, best=1)] == ["step-0000003"]
    assert [d.name for d in choose_checkpoints(tmp_path, best=2)] == ["step-0000002", "step-0000003"]


def test_tformer_average_writes_a_model_directory_and_refuses_a_bad_ask(run, tmp_path, capsys):
    out = tmp_path / "avg"
    assert main(["average", str(run), str(out), "--last", "2"]) == 0
    assert "the average of 2 checkpoints (step-0000005, step-0000006)" in capsys.readouterr().out
    assert main(["average", str(run), str(tmp_path / "one"), "--last", "1"]) == 0
    assert "the average of 1 checkpoint (step-0000006)" in capsys.readouterr().out
    model = load(out, fast=False).model
    expected = average_models(choose_checkpoints(run, last=2)).state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in model.state_dict().items())
    assert main(["average", str(run), str(tmp_path / "more"), "--last", "9"]) != 0
    assert "--last 9" in capsys.readouterr().err
    assert main(["average", str(run), str(run / "inside"), "--best", "1"]) != 0  # inside the run it reads
    assert "RUN" in capsys.readouterr().err
    (tmp_path / "plain").mkdir()
    assert main(["average", str(tmp_path / "plain"), str(tmp_path / "x"), "--last", "1"]) != 0
    err = capsys.readouterr().err
    assert "holds no checkpoints" in err and "--keep-checkpoints" in err


def test_a_run_with_checkpoints_is_overwritten_as_a_run(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat. " * 200)
    args = ["train", "lm", "--data", str(text), "--preset", "tiny", "--max-len", "16", "--batch-size", "4"]
    args += ["--max-steps", "4", "--eval-every", "2", "--eval-blocks", "2", "--no-progress", "--warmup-steps", "1"]
    args += ["--out", str(tmp_path / "run"), "--keep-checkpoints", "1"]
    assert main(args) == 0
    assert [d.name for d in checkpoints(tmp_path / "run")] == ["step-0000004"]
    assert main(args + ["--overwrite"]) == 0  # checkpoints/ is the run's own: --overwrite may delete it
    capsys.readouterr()


def test_with_ema_a_checkpoint_records_the_score_of_the_weights_it_holds(tmp_path):
    """A checkpoint holds the trained weights; with --ema its metric is theirs, not the moving average's (which may
    be best/'s), so ``--best K`` ranks the saved weights by their own scores."""
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=16))
    cfg = TrainConfig(
        out_dir=str(tmp_path), max_steps=2, eval_every=1, warmup_steps=1, lr=1e-2, progress=False, keep_checkpoints=2
    )
    task = ScriptedTask([5.0, 4.0, 3.0, 2.0])  # each evaluation: the trained weights', then the average's (better)
    Trainer(model, task, TrainConfig(**{**cfg.__dict__, "ema": 0.5})).fit()
    values = [json.loads((d / "checkpoint.json").read_text())["value"] for d in checkpoints(tmp_path)]
    assert values == [5.0, 3.0]
    step2 = GPT.from_pretrained(checkpoints(tmp_path)[1]).state_dict()
    assert all(torch.equal(step2[k], v) for k, v in task.seen[2].items())  # the weights scored 3.0


@pytest.mark.parametrize(
    "scores, best_ema", [([5.0, 4.0, 3.0, 2.0], True), ([5.0, 4.0, 3.0, 3.5], False)], ids=["average", "trained"]
)
def test_what_best_holds_is_said_when_it_is_the_moving_average(tmp_path, scores, best_ema):
    """best/ may hold --ema's moving average: the run's last line, its state and ``tformer info`` say which, and the
    step (else a best below every logged val_loss reads as a mistake)."""
    from tformer.cli.info import describe_run

    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=16))
    cfg = TrainConfig(out_dir=str(tmp_path), max_steps=2, eval_every=1, warmup_steps=1, progress=False, ema=0.5)
    trainer = Trainer(model, ScriptedTask(scores), cfg)  # each evaluation: the trained weights', then the average's
    trainer.fit()
    assert (trainer.best, trainer.best_step, trainer.best_ema) == (min(scores[2:]), 2, best_ema)
    said = "val_loss 2 at step 2 (the moving average, --ema 0.5)" if best_ema else "val_loss 3 at step 2"
    assert trainer.best_text() == said
    state = json.loads((tmp_path / "last" / "state.json").read_text())
    assert (state["best_step"], state["best_ema"]) == (2, best_ema)
    line = describe_run(tmp_path)
    assert "at step 2 (best/, the model above" in line
    assert ("the moving average of the weights, --ema 0.5" in line) == best_ema, line


def test_a_tuned_length_penalty_is_not_dropped_in_silence_when_best_is_replaced(tmp_path, capsys):
    """evaluate --tune-length-penalty keeps its penalty in best/; a resumed run that finds a better model replaces
    best/ whole, so the penalty (tuned for the model before) goes with it, and the run says so."""
    torch.manual_seed(0)
    cfg = dict(out_dir=str(tmp_path), eval_every=1, lr=1e-3, progress=False)
    Trainer(
        GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=16)),
        ScriptedTask([2.0]),
        TrainConfig(max_steps=2, **cfg),
    ).fit()
    (tmp_path / "best" / "decoding.json").write_text('{"length_penalty": 1.2}\n')
    capsys.readouterr()
    again = Trainer(
        GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=16)),
        ScriptedTask([1.0]),
        TrainConfig(max_steps=4, **cfg),
    )
    again.resume()
    again.fit()
    said = capsys.readouterr()
    assert (
        "best/ is now step 3's model: the length penalty tuned for the one before (decoding.json)"
        in said.out + said.err
    )
    assert not (tmp_path / "best" / "decoding.json").exists()


def test_best_bleu_is_said_to_sacrebleus_two_decimals(tmp_path):
    """The run's last line gives BLEU to 2 decimals, as sacreBLEU and tformer evaluate do: best/'s too."""
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=16))
    cfg = TrainConfig(out_dir=str(tmp_path), max_steps=1, eval_every=1, progress=False)
    trainer = Trainer(model, ScriptedTask([0.36561], "bleu", higher_is_better=True), cfg)
    trainer.fit()
    assert trainer.best_text() == "BLEU 0.37 at step 1"
