"""The numbers a training run logs are the saved model's numbers (issue 29).

A translation run at the ``small`` preset once logged BLEU 0.05 for a model that scores 96 when reloaded: the
evaluation decoded through copies of the weights that the CPU fast paths had made at the previous evaluation,
and PyTorch's fused AdamW step (which the trainer uses) leaves a weight's version counter, their only staleness
signal then, unchanged. These tests train each family for a few steps with the fast paths and the fused optimizer,
then evaluate the saved ``best/`` and ``last/`` models afresh (plain models, loaded from disk, no copies) and
compare with what the log says about the very same weights. At the ``small`` preset the translator's decoding
uses every copy the fast Linear has (a split of one row between the threads, the transposed copy, the oneDNN
packing for the 2-256 rows of a batch of sentences).
"""

import json

import pytest
import torch

import tformer.bert
import tformer.lm
import tformer.translation
from tformer.models.bert import Bert
from tformer.models.gpt import GPT
from tformer.translation.translator import Translator

SHARED = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the one-row split between threads is one of the layouts under test
    yield
    torch.set_num_threads(before)


def _evaluations(out) -> list[dict]:
    records = [json.loads(line) for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r for r in records if "val_loss" in r]


def _same(logged: dict, fresh: dict) -> None:
    assert fresh.keys() <= logged.keys()
    for name, value in fresh.items():
        assert logged[name] == pytest.approx(value, rel=1e-4, abs=1e-4), name


def _check_run(out, trainer, reload_and_evaluate) -> None:
    evaluations = _evaluations(out)
    assert len(evaluations) >= 2  # a second evaluation is where copies from the first could be reused
    metric, higher = trainer.task.metric, trainer.task.higher_is_better
    best = (max if higher else min)(
        evaluations, key=lambda r: (r[metric], -r["step"]) if higher else (r[metric], r["step"])
    )
    _same(best, reload_and_evaluate(out / "best"))
    _same(evaluations[-1], reload_and_evaluate(out / "last"))


def test_translation_logs_the_bleu_of_the_model_it_saves(tmp_path, two_threads):
    out = tmp_path / "run"
    trainer = tformer.translation.setup(
        "builtin",
        out,
        preset="small",
        max_steps=40,  # evaluations at steps 20 and 40: the second is where the first's copies could be reused
        eval_every=20,
        bleu_sentences=24,
        batch_tokens=1024,
        lr=2e-3,
        warmup_steps=10,
    )
    assert isinstance(trainer.optimizer, torch.optim.AdamW) and trainer.optimizer.defaults["fused"]
    trainer.fit()
    task = trainer.task

    def reload_and_evaluate(directory):
        task.translator = Translator.load(directory)  # a plain model from disk: no fast path, no copies
        with torch.no_grad():
            return task.evaluate(task.translator.model.eval())

    _check_run(out, trainer, reload_and_evaluate)
    assert max(r["chrf"] for r in _evaluations(out)) > 10  # the run learned something: the check compares real text


@pytest.mark.skipif(not (SHARED / "tinyshakespeare.txt").is_file(), reason="needs ../shared/data/tinyshakespeare.txt")
def test_a_language_model_logs_the_loss_of_the_model_it_saves(tmp_path, two_threads):
    out = tmp_path / "run"
    text = tmp_path / "text.txt"
    text.write_text((SHARED / "tinyshakespeare.txt").read_text(encoding="utf-8")[:60_000], encoding="utf-8")
    trainer = tformer.lm.setup(text, out, "tiny", max_steps=12, eval_every=4, eval_blocks=16, log=lambda s: None)
    trainer.fit()

    def reload_and_evaluate(directory):
        with torch.no_grad():
            return trainer.task.evaluate(GPT.from_pretrained(directory).eval())

    _check_run(out, trainer, reload_and_evaluate)


def test_bert_logs_the_losses_of_the_model_it_saves(tmp_path, two_threads):
    out = tmp_path / "run"
    text = tmp_path / "text.txt"
    sentences = [
        f"the {a} {v} the {o} near the river ."
        for a in ("cat", "dog", "bird", "fox")
        for v in ("saw", "met", "chased")
        for o in ("boy", "girl", "tree", "house", "car")
    ]
    text.write_text("\n".join(sentences[:30]) + "\n\n" + "\n".join(sentences[30:]) + "\n", encoding="utf-8")
    trainer = tformer.bert.setup(
        text,
        out,
        preset="tiny",
        vocab_size=200,
        batch_size=8,
        valid=0.2,
        max_steps=12,
        eval_every=4,
        log=lambda s: None,
    )
    trainer.fit()

    def reload_and_evaluate(directory):
        with torch.no_grad():
            return trainer.task.evaluate(Bert.from_pretrained(directory).eval())

    _check_run(out, trainer, reload_and_evaluate)
