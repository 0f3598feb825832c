"""One optimizer step on the Multi30k hour's model: fused AdamW (the recipe) against ``--optimizer muon`` (issue 49).

    python -m benchmarks.optimizer_step              # the ``small`` translator, 8,000-word vocabularies: 9.6 M weights
    python -m benchmarks.optimizer_step --quick      # the ``tiny`` one, seconds: proves the script works

One call = one ``optimizer.step()`` over gradients drawn once (the step's arithmetic does not depend on their values).
Candidates, in one process, alternating, each over its own copy of the same weights:

* ``fused AdamW`` — the anchor: ``torch.optim.AdamW(fused=True)``, what the recipe trains with;
* ``torch.optim.Muon + fused AdamW, apart`` — PyTorch's two optimizers stepped one after the other, as
  :class:`tformer.training.optimizers.MuonAdamW` holds them (its cost without tformer);
* ``tformer MuonAdamW`` — ``--optimizer muon``'s optimizer;
* ``tformer MuonAdamW, skip on the device`` — the same given ``found_inf`` (0: the step is taken) as the Trainer's
  on-device skip gives it on a GPU: Muon's matrices and momenta copied and chosen back by ``torch.where``.

Steps/s and the ratio to fused AdamW. Writes ``OUT/optimizer_step.json`` and ``OUT/optimizer_step.md``.
"""

from __future__ import annotations

import copy

import torch

from benchmarks.common import Candidate, base_parser, compare, machine_info, session, write_report


def _candidate(name: str, step) -> Candidate:
    def run() -> float:
        step()
        return 1.0

    return Candidate(name, run)


def _given_found_inf(optimizer):
    """``optimizer.step`` as the Trainer's Tally calls it on a GPU: ``found_inf`` 0, a finite step taken."""

    def step() -> None:
        optimizer.found_inf = torch.zeros(())
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf

    return step


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench", "optimizer_step.json", "optimizer_step.md")
    args = p.parse_args(argv)
    from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
    from tformer.training.optimizers import make_optimizer, muon_parameters

    preset, vocab = ("tiny", 500) if args.quick else ("small", 8000)
    with session(args):
        model = Seq2SeqTransformer(Seq2SeqConfig.preset(preset, src_vocab_size=vocab, tgt_vocab_size=vocab))
        models = [copy.deepcopy(model) for _ in range(4)]
        for m in models:  # the same gradients for each copy (deepcopy does not copy .grad)
            g = torch.Generator().manual_seed(args.seed)
            for p_ in m.parameters():
                p_.grad = 1e-3 * torch.randn(p_.shape, generator=g)
        lr, decay, betas = 1e-4, 0.01, (0.9, 0.98)
        adamw = make_optimizer(models[0], "adamw", lr, decay, betas)
        names = set(muon_parameters(models[1]))
        named = list(models[1].named_parameters())
        torch_muon = torch.optim.Muon(
            [p_ for n, p_ in named if n in names], lr=lr, weight_decay=decay, adjust_lr_fn="match_rms_adamw"
        )
        rest = [
            {"params": [p_ for n, p_ in named if n not in names and p_.dim() >= 2], "weight_decay": decay},
            {"params": [p_ for _, p_ in named if p_.dim() < 2], "weight_decay": 0.0},
        ]
        torch_adamw = torch.optim.AdamW(rest, lr=lr, betas=betas, fused=True)
        muon = make_optimizer(models[2], "muon", lr, decay, betas)
        muon_skip = make_optimizer(models[3], "muon", lr, decay, betas)
        assert all(p_.grad is not None for m in models for p_ in m.parameters())  # a step with no gradient is free
        candidates = [
            _candidate("fused AdamW", adamw.step),
            _candidate("torch.optim.Muon + fused AdamW, apart", lambda: (torch_muon.step(), torch_adamw.step())),
            _candidate("tformer MuonAdamW", muon.step),
            _candidate("tformer MuonAdamW, skip on the device", _given_found_inf(muon_skip)),
        ]
        stats = compare(candidates, args.repeats, args.warmup, args.device, memory=not args.no_memory)
        machine = machine_info(args, None)
    on_muon = sum(models[2].get_parameter(n).numel() for n in names)
    payload = {
        "benchmark": "optimizer_step",
        "description": f"one optimizer step of the {preset} translator ({sum(p_.numel() for p_ in model.parameters()):,}"
        f" weights, {on_muon:,} of them in the {len(names)} matrices Muon steps), steps/s",
        "machine": machine,
        "config": {"preset": preset, "vocab": vocab, "lr": lr, "weight_decay": decay},
        "results": {"optimizer step": stats},
    }
    return write_report(args.out, "optimizer_step", payload, "steps/s")


if __name__ == "__main__":
    main()
