"""``--optimizer muon`` (issue 49): Muon on the layers' weight matrices, AdamW on the rest, one optimizer to the
Trainer. Its step is PyTorch's two optimizers' own (exact), its state is saved and resumed exactly, and what it cannot
do is refused by name."""

import copy

import pytest
import torch

from scripted import VOCAB, ScriptedTask, straight_and_resumed
from tformer import GPT, GPTConfig
from tformer.checks import BadValue
from tformer.cli import main
from tformer.nn.lora import LoraConfig, add_lora
from tformer.training.config import TrainConfig
from tformer.training.optimizers import MuonAdamW, make_optimizer, muon_parameters
from tformer.training.trainer import Trainer


def _model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=16, dropout=0.0))


def _loss(model: GPT) -> torch.Tensor:
    rows = torch.randint(1, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    return torch.nn.functional.cross_entropy(model(rows[:, :-1]).transpose(1, 2), rows[:, 1:])


def test_muon_takes_the_layers_matrices_and_adamw_the_rest():
    model = _model()
    on_muon = muon_parameters(model)
    assert on_muon and all(".layers." in n and model.get_parameter(n).dim() == 2 for n in on_muon)
    rest = {n for n, _ in model.named_parameters()} - set(on_muon)
    assert "embed.token.weight" in rest  # the embedding (tied to the output head) steps with AdamW
    assert all(model.get_parameter(n).dim() < 2 for n in rest - {"embed.token.weight", "embed.position.weight"})
    optimizer = make_optimizer(model, "muon", 1e-3, 0.1, (0.9, 0.98))
    assert isinstance(optimizer, MuonAdamW)
    stepped = [p for g in optimizer.param_groups for p in g["params"]]
    assert len(stepped) == len(set(map(id, stepped))) == len(list(model.parameters()))  # each once, none left out


def test_a_step_is_pytorchs_muon_and_adamw_exactly():
    model, reference = _model(), _model()
    optimizer = make_optimizer(model, "muon", 2e-3, 0.1, (0.9, 0.98))
    names = set(muon_parameters(reference))
    params = dict(reference.named_parameters())
    muon = torch.optim.Muon(
        [params[n] for n in params if n in names], lr=2e-3, weight_decay=0.1, adjust_lr_fn="match_rms_adamw"
    )
    adamw = torch.optim.AdamW(
        [
            {"params": [p for n, p in params.items() if n not in names and p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=2e-3,
        betas=(0.9, 0.98),
        fused=True,
    )
    for _ in range(3):
        for m, opts in ((model, (optimizer,)), (reference, (muon, adamw))):
            _loss(m).backward()
            for o in opts:
                o.step()
                o.zero_grad()
    moved = False
    for (name, a), b in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(a, b), name
        moved |= not torch.equal(a, _model().get_parameter(name))
    assert moved
    groups = optimizer.param_groups  # the schedule scales each group's lr: Muon's group is one of them
    assert [g["muon"] for g in groups] == [False, False, True] and all(g["lr"] == 2e-3 for g in groups)


def test_its_state_round_trips_and_the_next_step_is_the_same():
    model = _model()
    optimizer = make_optimizer(model, "muon", 2e-3, 0.1, (0.9, 0.98))
    for _ in range(2):
        _loss(model).backward()
        optimizer.step()
        optimizer.zero_grad()
    twin = copy.deepcopy(model)
    again = make_optimizer(twin, "muon", 2e-3, 0.1, (0.9, 0.98))
    again.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    assert {len(s) for s in again.state.values()} == {1, 3}  # momentum_buffer; step, exp_avg, exp_avg_sq
    for m, o in ((model, optimizer), (twin, again)):
        _loss(m).backward()
        o.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))


def test_a_step_given_found_inf_is_taken_or_skipped_on_the_device():
    """The Trainer's on-device skip (``found_inf``, as GradScaler passes it): 0 is the plain step, exactly; 1 leaves
    the weights and every slot as they were, Muon's too (``torch.optim.Muon`` reads no ``found_inf``)."""
    models = [_model() for _ in range(3)]
    optimizers = [make_optimizer(m, "muon", 2e-3, 0.1, (0.9, 0.98)) for m in models]
    for found in (None, 0.0, 1.0, 0.0, 1.0):  # the first step makes the slots
        for i, (m, o) in enumerate(zip(models, optimizers)):
            _loss(m).backward()
            if found is not None and i > 0:
                o.found_inf = torch.tensor(found if i == 2 else 0.0)
            before = [p.clone() for p in m.parameters()], copy.deepcopy(o.state_dict()["state"])
            o.step()
            o.zero_grad()
            if i == 2 and found == 1.0:
                assert all(torch.equal(a, b) for a, b in zip(before[0], m.parameters()))
                now = o.state_dict()["state"]
                assert all(torch.equal(v, now[k][n]) for k, slot in before[1].items() for n, v in slot.items())
            if hasattr(o, "found_inf"):
                del o.found_inf
    plain, given_zero, skipped = (list(m.parameters()) for m in models)
    assert all(torch.equal(a, b) for a, b in zip(plain, given_zero))
    assert not all(torch.equal(a, b) for a, b in zip(plain, skipped))


def _config(out, **changes) -> TrainConfig:
    options = dict(out_dir=str(out), max_steps=4, eval_every=2, warmup_steps=1, lr=1e-2, progress=False)
    return TrainConfig(**{"optimizer": "muon", **options, **changes})


def test_a_resumed_muon_run_is_the_uninterrupted_one(tmp_path):
    straight, resumed = straight_and_resumed(_model, _config, tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(resumed.model.parameters(), straight.model.parameters()))
    adamw = Trainer(_model(), ScriptedTask([1.0]), _config(tmp_path / "adamw", optimizer="adamw"))
    adamw.fit()  # and the choice matters: AdamW alone ends elsewhere
    assert not all(torch.equal(a, b) for a, b in zip(adamw.model.parameters(), straight.model.parameters()))


def test_what_muon_cannot_do_is_refused_by_name(tmp_path, monkeypatch, capsys):
    with pytest.raises(ValueError, match="optimizer must be one of 'adamw', 'muon', got 'sgd'"):
        _config(tmp_path, optimizer="sgd")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(BadValue, match="--optimizer muon .* --fsdp"):
        _config(tmp_path, fsdp=True)
    monkeypatch.delenv("WORLD_SIZE")
    lora = _model()
    add_lora(lora, LoraConfig(r=2))
    with pytest.raises(ValueError, match="trains none .*LoRA"):
        make_optimizer(lora, "muon", 1e-3, 0.0, (0.9, 0.98))
    with pytest.raises(SystemExit):
        main(["train", "lm", "--data", __file__, "--out", str(tmp_path / "r"), "--optimizer", "lion"])
    err = capsys.readouterr().err
    assert "--optimizer" in err and "'lion'" in err and "adamw" in err


def test_a_saved_state_may_hold_two_kinds_of_slots_one_kind_a_group(tmp_path):
    from tformer.training.state import read_state, write_state

    state = {0: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(2), "exp_avg_sq": torch.zeros(2)}}
    state[1] = {"momentum_buffer": torch.zeros(2)}
    rng, scheduler = [{"rng": torch.get_rng_state()}], {"base_lrs": [1e-3, 1e-3], "last_epoch": 1}
    write_state(tmp_path, {"state": state, "param_groups": [{"params": [0]}, {"params": [1]}]}, scheduler, rng)
    assert sorted(read_state(tmp_path)["optimizer"]["state"][1]) == ["momentum_buffer"]  # Muon's group, AdamW's
    write_state(tmp_path, {"state": state, "param_groups": [{"params": [0, 1]}]}, scheduler, rng)
    with pytest.raises(ValueError, match="hold different slots .* each parameter of a group"):
        read_state(tmp_path)  # one group, two kinds: damaged or mixed
