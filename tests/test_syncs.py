"""Host reads of tensor values in a training step (issue 48): on a GPU each one is a synchronisation, the host waiting
for the device to finish all it was given. A CPU has no such wait, but the reads are the same code: this counts them
where they happen (``item``, ``float()``, ``int()``, ``bool()`` of a tensor: aten's ``_local_scalar_dense``; ops whose
output size depends on the values: ``nonzero``, ``masked_select``; ``tolist``), so a read added to the step fails here.

Today the language model's step reads 3 times on a CPU: the ids' range check (the model's), the labels' (the CPU's
fused loss only) and the loss with the gradient norm, one read for both (6 before issue 48: two for each check, one for
each micro-batch's loss, one for the norm). Issue 48's goal, at most 1 a step at ``--log-every 10``, needs the
non-finite skip made on the device (fused AdamW's ``found_inf``): not done yet."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tformer.lm

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


def test_a_language_model_step_reads_values_three_times(tmp_path, monkeypatch):
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat, and the dog ran in the fog.\n" * 400)
    trainer = tformer.lm.setup(
        text, tmp_path / "run", "tiny", max_len=32, batch_size=4, max_steps=20, log=lambda s: None
    )
    batches = trainer.task.train_batches(0)
    trainer._optimizer_step(batches[:1], 0.0)  # the first step builds what later ones reuse
    fetched = [trainer.task.fetch(b) for b in batches[1:11]]  # as the feed reads them, in its thread, ahead
    reads = Reads()
    counting(monkeypatch, reads)
    with reads:
        for batch, rows in zip(batches[1:11], fetched):
            trainer._optimizer_step([batch], 0.0, [rows])
    assert trainer.step == 11
    assert reads.count / 10 <= 3, f"{reads.count / 10} host reads a step"
