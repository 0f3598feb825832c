"""Host reads of tensor values in a training step (issue 48): on a GPU each one is a synchronisation, the host waiting
for the device to finish all it was given. A CPU has no such wait, but the reads are the same code: this counts them
where they happen (``item``, ``float()``, ``int()``, ``bool()`` of a tensor: aten's ``_local_scalar_dense``; ops whose
output size depends on the values: ``nonzero``, ``masked_select``; ``tolist``), so a read added to the step fails here.

The language model's step read 6 times before issue 48 (two for each of the ids' and the labels' range checks, one for
each micro-batch's loss, one for the gradient norm), then 3. Now it reads none: the ids are checked by the device
(``torch._assert_async``, which a GPU runs without the host waiting; on a CPU the host is the device), the labels by
the loss's own gather, and the skip of a non-finite step is fused AdamW's (``found_inf``), tallied on the device and
read once per ``--log-every`` steps (:mod:`tformer.training.tally`). Translation's step read 2 (whether its
padding masks hide anything), now none: its batch knows. Issue 48's goal: at most 1 a step at ``--log-every 10``."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tformer.lm
import tformer.training.trainer
from tformer.fast.losses import sequence_cross_entropy
from tformer.models.gpt import GPT, GPTConfig
from tformer.training.optimizers import MuonAdamW, make_optimizer
from tformer.training.tally import takes_found_inf
from tformer.training.trainer import TrainingDiverged

_READS = {
    torch.ops.aten._local_scalar_dense.default,
    torch.ops.aten.nonzero.default,
    torch.ops.aten.masked_select.default,
}


class Reads(TorchDispatchMode):
    """Counts the reads of tensor values by the host while it is open (``tolist`` is counted by :func:`counting`)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in _READS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def counting(monkeypatch, reads: Reads) -> None:
    """``Tensor.tolist`` counted too: on a CPU tensor it reads the memory without an aten op."""
    tolist = torch.Tensor.tolist

    def counted(self):
        reads.count += 1
        return tolist(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counted)


def _lm_trainer(tmp_path, **kw):
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat, and the dog ran in the fog.\n" * 400)
    kw = dict(max_len=32, batch_size=4, max_steps=20, log=lambda s: None) | kw
    return tformer.lm.setup(text, tmp_path / "run", "tiny", **kw)


def _as_on_a_gpu(monkeypatch, optimizer: str) -> None:
    """Muon's run skips on the device on an accelerator only (on a CPU host reads are free, the skip is not): this
    CPU test takes the path a GPU takes."""
    if optimizer == "muon":
        assert not takes_found_inf(
            make_optimizer(GPT(GPTConfig.preset("tiny", vocab_size=50)), "muon", 1e-3, 0, (0.9, 0.9))
        )
        monkeypatch.setattr(tformer.training.trainer, "takes_found_inf", lambda o: isinstance(o, MuonAdamW))


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_ten_language_model_steps_read_the_device_once(tmp_path, monkeypatch, optimizer):
    _as_on_a_gpu(monkeypatch, optimizer)
    trainer = _lm_trainer(tmp_path, optimizer=optimizer)
    assert trainer.tally is not None  # one process, bf16 or fp32, fused AdamW (Muon beside it): skipped on the device
    batches = trainer.task.train_batches(0)
    trainer._optimizer_step(batches[:1], 0.0)  # the first step builds what later ones reuse
    fetched = [trainer.task.fetch(b) for b in batches[1:11]]  # as the feed reads them, in its thread, ahead
    reads = Reads()
    counting(monkeypatch, reads)
    with reads:
        for batch, rows in zip(batches[1:11], fetched):
            trainer._optimizer_step([batch], 0.0, [rows])
        loss = trainer._settle()  # what the loop does at a log step (--log-every 10): read the loss
    assert trainer.step == 11
    assert reads.count <= 1, f"{reads.count} host reads in 10 steps and a log"
    assert loss is not None and math.isfinite(loss) and trainer.skipped_steps == 0


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_a_non_finite_step_is_skipped_on_the_device_and_said_at_the_next_read(tmp_path, capsys, monkeypatch, optimizer):
    _as_on_a_gpu(monkeypatch, optimizer)
    trainer = _lm_trainer(tmp_path, max_bad_steps=3, optimizer=optimizer)
    batches = trainer.task.train_batches(0)
    trainer._optimizer_step(batches[:1], 0.0)
    trainer._settle()
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    slots = [{k: v.clone() for k, v in s.items()} for s in trainer.optimizer.state.values()]  # moments, step counts
    weight = next(trainer.model.parameters())
    with torch.no_grad():
        weight_copy = weight.clone()
        weight.fill_(math.nan)  # every loss NaN from here
    trainer._optimizer_step(batches[1:2], 0.0)
    trainer._optimizer_step(batches[2:3], 0.0)
    with torch.no_grad():
        weight.copy_(weight_copy)
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # no update from the two skipped steps
    kept = list(trainer.optimizer.state.values())  # AdamW's moments and count undone; Muon's momenta taken back
    assert len(kept) == len(slots) and all(
        torch.equal(v, now[k]) for was, now in zip(slots, kept) for k, v in was.items()
    )
    muon = {"momentum_buffer"} if optimizer == "muon" else set()
    assert {k for s in kept for k in s} == {"exp_avg", "exp_avg_sq", "step"} | muon
    assert trainer.step == 3 and trainer.skipped_steps == 0  # nothing read yet
    assert trainer._settle() is None  # the last step was skipped: no loss to log
    assert trainer.skipped_steps == 2 and trainer.bad_steps == 2
    assert "step 3: 2 of the last 2 steps skipped, their loss or gradient norm not finite" in capsys.readouterr().err
    trainer._optimizer_step(batches[3:4], 0.0)  # a finite one: the run of bad steps ends
    assert trainer._settle() is not None and trainer.bad_steps == 0 and trainer.skipped_steps == 2


def test_max_bad_steps_in_a_row_stop_the_run_at_the_read(tmp_path):
    trainer = _lm_trainer(tmp_path, max_bad_steps=3)
    batches = trainer.task.train_batches(0)
    with torch.no_grad():
        next(trainer.model.parameters()).fill_(math.nan)
    for i in range(4):
        trainer._optimizer_step(batches[i : i + 1], 0.0)
    with pytest.raises(TrainingDiverged, match="diverged at step 4: .* not finite for 4 steps in a row"):
        trainer._settle()


def test_token_ids_are_checked_without_a_read(monkeypatch):
    model = GPT(GPTConfig.preset("tiny", vocab_size=50))
    reads = Reads()
    counting(monkeypatch, reads)
    with reads:
        model(torch.tensor([[0, 49, 7]]))
    assert reads.count == 0
    for bad in (50, -1):  # on the CPU the device's check is the host's: named at once
        with pytest.raises(ValueError, match=f"ids contains token id {bad}, outside the vocabulary \\[0, 50\\)"):
            model(torch.tensor([[0, bad, 7]]))


def test_the_cpu_loss_checks_its_labels_in_its_gather():
    logits = torch.randn(2, 3, 10, requires_grad=True)
    for bad in (10, -5):
        with pytest.raises(ValueError, match=f"labels contain class {bad}, outside \\[0, 10\\)"):
            sequence_cross_entropy(logits, torch.tensor([[1, 2, 3], [4, bad, -100]]), ignore_index=-100)


def test_ten_translation_steps_read_the_device_once(tmp_path, monkeypatch):
    """Translation: whether the source and the target padding masks hide anything (an all-real one is dropped, so
    attention takes its unmasked path) comes with the batch, found on the host where it was made, as the token count
    does; so the step reads nothing, and 10 steps and a log read once."""
    import tformer.translation as translation

    trainer = translation.setup("builtin", tmp_path / "run", preset="tiny", max_steps=20)
    assert trainer.tally is not None
    batches = trainer.task.train_batches(0)
    trainer._optimizer_step(batches[:1], 0.0)
    fetched = [trainer.task.fetch(b) for b in batches[1:11]]
    assert all(b.padded is not None for b in fetched)
    reads = Reads()
    counting(monkeypatch, reads)
    with reads:
        for batch, rows in zip(batches[1:11], fetched):
            trainer._optimizer_step([batch], 0.0, [rows])
        loss = trainer._settle()
    assert reads.count <= 1, f"{reads.count} host reads in 10 steps and a log"
    assert loss is not None and math.isfinite(loss)


def test_a_translation_batch_knows_its_padding_and_the_model_gives_the_same_logits_with_it():
    """The host's answer (``Batch.padded``) is the masks' own, and the logits given it are those read off the masks:
    a side without padding drops its mask, a side with padding keeps it (a wrong answer would change them)."""
    from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
    from tformer.translation.batching import make_batch

    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqConfig.preset("tiny", src_vocab_size=30, tgt_vocab_size=30)).eval()
    same = [([5, 6, 7], [8, 9]), ([7, 6, 5], [9, 8])]  # no padding on either side
    src_only = [([5, 6, 7], [8, 9]), ([7, 6], [9, 8])]  # the source padded, the target not
    both = [([5, 6, 7], [8, 9, 10]), ([7, 6], [9])]
    for pairs, padded in ((same, (False, False)), (src_only, (True, False)), (both, (True, True))):
        batch = make_batch(pairs)
        assert batch.padded == padded
        with torch.no_grad():
            read = model(batch.src, batch.tgt_in)
            told = model(batch.src, batch.tgt_in, **batch.forward_args())
            wrong = model(batch.src, batch.tgt_in, src_padded=False, tgt_padded=False)
        torch.testing.assert_close(told, read, rtol=0, atol=1e-6)
        assert padded == (False, False) or not torch.allclose(wrong, read, atol=1e-4)  # the answer is used
