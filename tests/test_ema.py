"""The moving average of the weights (issue 49): ``--ema DECAY`` keeps ``ema = decay * ema + (1 - decay) * weight``
after every optimizer step, evaluates it beside the trained weights (``ema_*`` in the log), keeps it as ``best/``
when it scores better, and resumes it exactly from ``last/``."""

import json

import pytest
import torch

from scripted import VOCAB, ScriptedTask, straight_and_resumed
from tformer import GPT, GPTConfig
from tformer.cli import main
from tformer.training.averaging import EMA
from tformer.training.config import TrainConfig
from tformer.training.trainer import Trainer


def _model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=16))


def _config(out, **changes) -> TrainConfig:
    options = dict(out_dir=str(out), max_steps=4, eval_every=2, warmup_steps=1, lr=1e-2, progress=False, ema=0.9)
    return TrainConfig(**{**options, **changes})


def test_the_update_rule_its_warmup_and_the_swap():
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ema = EMA(model, 0.9)
    assert [min(0.9, (1 + n) / (10 + n)) for n in range(3)] == [0.1, 2 / 11, 0.25]  # TensorFlow's warmup
    ema.updates = 80  # past the warmup: (1 + 80) / 90 = 0.9
    assert ema.current_decay() == 0.9
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    ema.update()
    after = {k: v.clone() for k, v in model.state_dict().items()}
    for name, shadow in zip(ema.names, ema.shadow):
        torch.testing.assert_close(shadow, 0.9 * before[name] + 0.1 * after[name], rtol=0, atol=1e-6)
    with pytest.raises(RuntimeError), ema.swapped():
        assert all(torch.equal(model.state_dict()[n], s) for n, s in zip(ema.names, ema.shadow))
        raise RuntimeError("an evaluation that fails")
    assert all(torch.equal(v, after[k]) for k, v in model.state_dict().items())  # the trained weights back
    fresh = EMA(model, 0.999)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    fresh.update()  # the first update: decay 0.1, the average goes most of the way to the weights
    moved = {k: v.clone() for k, v in model.state_dict().items()}
    for name, shadow in zip(fresh.names, fresh.shadow):
        torch.testing.assert_close(shadow, 0.1 * after[name] + 0.9 * moved[name], rtol=0, atol=1e-6)
    assert fresh.updates == 1


def test_the_average_is_evaluated_beside_and_kept_as_best_when_better(tmp_path):
    # each evaluation: the trained weights' score, then the average's
    task = ScriptedTask([3.0, 2.0, 1.5, 1.8])
    trainer = Trainer(_model(), task, _config(tmp_path))
    trainer.fit()
    evals = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    evals = [r for r in evals if "val_loss" in r]
    assert [(r["val_loss"], r["ema_val_loss"]) for r in evals] == [(3.0, 2.0), (1.5, 1.8)]
    assert trainer.best == 1.5
    best = GPT.from_pretrained(tmp_path / "best").state_dict()
    assert all(torch.equal(best[k], v) for k, v in task.seen[2].items())  # step 4's trained weights (1.5)
    again = Trainer(_model(), ScriptedTask([3.0, 2.0, 2.5, 2.2]), _config(tmp_path / "b", max_steps=2))
    again.fit()
    best = GPT.from_pretrained(tmp_path / "b" / "best").state_dict()
    averaged = dict(zip(again.ema.names, again.ema.shadow))
    assert all(torch.equal(best[k], averaged[k]) for k in again.ema.names if k in best)  # the average's (2.0)


def test_a_resumed_average_is_the_uninterrupted_one(tmp_path):
    straight, resumed = straight_and_resumed(_model, _config, tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(resumed.ema.shadow, straight.ema.shadow))
    assert resumed.ema.updates == straight.ema.updates == 4  # the warmup goes on where it was
    plain = Trainer(_model(), ScriptedTask([1.0]), _config(tmp_path / "plain", max_steps=2, ema=None))
    plain.fit()
    late = Trainer(_model(), ScriptedTask([1.0]), _config(tmp_path / "plain"))
    with pytest.raises(FileNotFoundError, match="ema.safetensors' is missing"):
        late.resume()


def test_ema_is_refused_outside_0_1(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", "lm", "--data", __file__, "--out", str(tmp_path / "r"), "--ema", "1"])
    err = capsys.readouterr().err
    assert "--ema" in err and "a decay in [0, 1)" in err


def test_ema_0_on_the_command_line_turns_off_a_config_file_s(tmp_path):
    """A recipe file's ``ema: 0.9`` runs the average; ``--ema 0`` after it (the command line wins) runs none, and
    TrainConfig keeps one truth for "none" (``ema=0`` is ``None``)."""
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat. a dog ran in the fog. " * 100)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("preset: tiny\nmax-len: 16\nbatch-size: 4\nmax-steps: 2\neval-every: 2\neval-blocks: 2\n"
                      "warmup-steps: 1\nno-progress: true\nema: 0.9\n")  # fmt: skip
    runs = {}
    for name, extra in (("file", []), ("off", ["--ema", "0"])):
        out = tmp_path / name
        assert main(["train", "lm", "--data", str(text), "--out", str(out), "--config", str(recipe), *extra]) == 0
        records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
        runs[name] = (
            any(k.startswith("ema_") for r in records for k in r),
            (out / "last" / "ema.safetensors").exists(),
        )
    assert runs == {"file": (True, True), "off": (False, False)}
    assert TrainConfig(out_dir=str(tmp_path), max_steps=1, ema=0).ema is None


def test_resuming_without_the_runs_average_says_ema_0_not_not_given(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("to be or not to be, that is the question\n" * 50)
    words = ["train", "lm", "--data", str(text), "--out", str(tmp_path / "r"), "--preset", "tiny", "--max-len", "16"]
    assert main([*words, "--max-steps", "2", "--ema", "0.5", "--no-progress"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]  # the moving average's score too, as bert's line says it
    assert last.startswith("done: step 2, val_loss ") and "; EMA val_loss " in last and "; best/: val_loss" in last
    assert main([*words, "--max-steps", "4", "--ema", "0", "--resume", "--no-progress"]) == 2
    assert "--ema 0 (none) (the run: 0.5)" in capsys.readouterr().err
