"""The optimizers a run can step with (``--optimizer``): AdamW, and Muon on the layers' weight matrices with AdamW on
the rest (:class:`MuonAdamW`), as modded-nanogpt and Moonshot's Moonlight train.

Muon (Keller Jordan, 2024; ``torch.optim.Muon``) replaces each matrix's momentum by its nearest semi-orthogonal
matrix (five Newton-Schulz iterations) before the step, so every direction of the update moves at the same rate. It
is made for the hidden layers' 2-D weights only: the embeddings, the output head, the norms' gains and the biases
step with AdamW, and so do LoRA's pairs. The Muon step is scaled as Moonshot's "Muon is Scalable" scales it
(``adjust_lr_fn="match_rms_adamw"``: 0.2·√max(rows, cols)), so that ``--lr`` and ``--weight-decay`` mean for it what
they mean for AdamW and a recipe keeps its numbers. Both are PyTorch's own optimizers; :class:`MuonAdamW` holds one of
each over the same parameter groups and state, so the Trainer, the learning-rate schedule and a saved training state
see one optimizer.
"""

from __future__ import annotations

import torch

__all__ = ["OPTIMIZERS", "MuonAdamW", "check_optimizer", "muon_parameters", "make_optimizer"]

OPTIMIZERS = ("adamw", "muon")


def check_optimizer(optimizer: object) -> None:
    """Refuse a name :func:`make_optimizer` does not know, naming the ones it does."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(map(repr, OPTIMIZERS))}, got {optimizer!r}")


def muon_parameters(model: torch.nn.Module) -> list[str]:
    """The names of the parameters Muon steps: the trainable 2-D weights inside the model's layers (``.layers.``),
    not LoRA's pairs; everything else (embeddings, output head, norms, biases, the pooler) steps with AdamW."""
    return [
        name
        for name, p in model.named_parameters()
        if p.requires_grad and p.dim() == 2 and ".layers." in f".{name}" and ".lora_" not in name
    ]


class MuonAdamW(torch.optim.Optimizer):
    """Muon over ``muon_groups``, AdamW over ``adamw_groups``: one optimizer to the Trainer, the schedule (each group's
    ``lr``) and ``state_dict``. Each group keeps its own optimizer's settings, and says which it is (``"muon"``)."""

    def __init__(self, muon_groups: list[dict], adamw_groups: list[dict], lr: float, betas, fused: bool | None):
        self.muon = torch.optim.Muon(muon_groups, lr=lr, adjust_lr_fn="match_rms_adamw")
        self.adamw = torch.optim.AdamW(adamw_groups, lr=lr, betas=betas, fused=fused)
        for group in self.muon.param_groups:
            group["muon"] = True
        for group in self.adamw.param_groups:
            group["muon"] = False
        super().__init__(self.adamw.param_groups + self.muon.param_groups, {"lr": lr})
        self._share()

    def _share(self) -> None:
        """Point both optimizers at this one's groups and state (after ``__init__`` and ``load_state_dict``, which
        replace them)."""
        self.muon.param_groups = [g for g in self.param_groups if g["muon"]]
        self.adamw.param_groups = [g for g in self.param_groups if not g["muon"]]
        self.muon.state = self.adamw.state = self.state

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        """Both optimizers' steps; with ``found_inf`` set (the Trainer's :class:`~tformer.training.tally.Tally`, as
        ``torch.amp.GradScaler`` sets it) a step whose value is 1 is skipped on the device, without a host read."""
        if closure is not None:
            raise ValueError("MuonAdamW.step takes no closure")
        found = getattr(self, "found_inf", None)
        if found is None:
            self.adamw.step()
            self.muon.step()
            return
        self.adamw.found_inf = found  # fused AdamW skips by itself
        try:
            self.adamw.step()
        finally:
            del self.adamw.found_inf
        self._muon_step_unless(found)

    def _muon_step_unless(self, found: torch.Tensor) -> None:
        """Muon's step, taken back where ``found`` is 1: ``torch.optim.Muon`` reads no ``found_inf``, so its matrices
        and momenta are copied before the step and chosen after it by ``torch.where``, on the device."""
        stepped = []
        for group in self.muon.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    state = self.state[p]  # the buffer Muon would make at its first step, made here to be kept
                    if "momentum_buffer" not in state:
                        state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                    stepped += [p, state["momentum_buffer"]]
        kept = [t.clone() for t in stepped]
        self.muon.step()
        skip = found.bool()
        for t, before in zip(stepped, kept):
            t.copy_(torch.where(skip, before, t))

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._share()


def make_optimizer(
    model: torch.nn.Module, optimizer: str, lr: float, weight_decay: float, betas
) -> torch.optim.Optimizer:
    """``optimizer`` (``"adamw"`` or ``"muon"``) over ``model``'s trainable parameters, with weight decay on the
    matrices only."""
    check_optimizer(optimizer)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    on_muon = set(muon_parameters(model)) if optimizer == "muon" else set()
    if optimizer == "muon" and not on_muon:
        raise ValueError(
            "optimizer='muon' (--optimizer muon) steps the layers' weight matrices, and this model trains none "
            "(LoRA trains its pairs only): use adamw"
        )
    decay = [p for n, p in named if p.dim() >= 2 and n not in on_muon]
    no_decay = [p for n, p in named if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # The fused kernel updates every tensor in one pass (CPU and CUDA); without it, PyTorch's CPU default is a
    # Python loop over the parameters, a few percent of a small model's step.
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for _, p in named) or None
    if optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=fused)
    muon = [{"params": [p for n, p in named if n in on_muon], "weight_decay": weight_decay}]
    return MuonAdamW(muon, [g for g in groups if g["params"]], lr=lr, betas=betas, fused=fused)
