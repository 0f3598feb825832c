"""``--fsdp`` (FSDP2, 2 CPU processes with gloo): the same training as one process on the same global batch, the same
files as an unsharded run (so a run resumes with or without it and with another process count), exact resume."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import test_distributed as ddp

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="this torch build has no torch.distributed"
)

# float32: the key projection's bias has no gradient in attention (softmax ignores a constant per row), so AdamW turns
# the rounding of that zero into whole steps of either sign, which differ with the order of the sums (FSDP2 averages
# shards, DDP and accumulation add whole gradients); in bf16 those steps reach the other weights too
FP32 = ["--precision", "fp32"]
# tformer's command line, recording what each process's model was when it got its shards (tests/fsdp_probe.py)
PROBE = (str(Path(__file__).with_name("fsdp_probe.py")),)


def _gap(one: dict, two: dict) -> float:
    """The largest difference between two state dicts, the keys' bias left out (``qkv_proj.bias``'s middle third)."""
    assert one.keys() == two.keys()
    gaps = []
    for k in one:
        a, b = one[k], two[k]
        if k.endswith("qkv_proj.bias"):
            third = a.shape[0] // 3
            a, b = torch.cat([a[:third], a[2 * third :]]), torch.cat([b[:third], b[2 * third :]])
        gaps.append((a - b).abs().max().item())
    return max(gaps)


def _weights(run, sub="last") -> dict:
    return load_file(str(run / sub / "model.safetensors"))


@pytest.mark.parametrize("family", ["translation", "lm", "bert"])
def test_fsdp_matches_one_process(tmp_path, family):
    """2 sharded processes × 1 batch a step = 1 process × 2 accumulated batches: same losses, same weights."""
    args = [*ddp._write_data(tmp_path)[family], "--dropout", "0", *ddp.STEPS, *FP32]
    extra = ["--compile"] if family == "lm" else []  # FSDP2 under torch.compile too
    out = ddp._torchrun([*args, "--out", "two", "--accum-steps", "1", "--fsdp", *extra], tmp_path, entry=PROBE)
    assert out.count("done: step 4") == 1
    if extra:  # a compiled run on the CPU is told what the compiler costs there (benchmarks.compile_step)
        assert out.count("then run compiled; on the CPU slower with dropout or in bf16") == 1
    # rank 0 built the model whole on the CPU; rank 1 on the meta device, and got only its shards' memory
    built = [json.loads((tmp_path / f"fsdp-rank{rank}.json").read_text()) for rank in (0, 1)]
    assert built[0] == {"before": ["cpu"], "after": ["cpu"], "whole_copy": True}
    assert built[1] == {"before": ["meta"], "after": ["cpu"], "whole_copy": False}
    for rank in (0, 1):  # the model's sharded state freed before the process group ended, not at the exit
        assert json.loads((tmp_path / f"fsdp-exit{rank}.json").read_text()) == {"fsdp_states_alive": 0}
    if family == "bert":  # the WordPiece rank 0 trained and shared
        args += ["--tokenizer-dir", str(tmp_path / "two" / "last")]
    ddp._one_process([*args, "--out", "one", "--accum-steps", "2"], tmp_path)
    assert _gap(_weights(tmp_path / "one"), _weights(tmp_path / "two")) <= 1e-5
    losses = ddp._losses(tmp_path / "one")
    assert len(losses) == 4 and losses[-1] < losses[0]  # it really trained
    assert losses == pytest.approx(ddp._losses(tmp_path / "two"), abs=1e-5)
    assert _gap(_weights(tmp_path / "one", "best"), _weights(tmp_path / "two", "best")) <= 1e-5  # gathered whole


def test_fsdp_in_fp16_matches_one_process(tmp_path):
    """fp16 and its gradient scaler over sharded gradients: the same losses, weights and loss scale as one process on
    the same global batch. Both resume with a loss scale of 2**30, so their scaled gradients overflow float16: every
    process must skip those steps and halve the scale together (torch's check for overflow takes the maximum over the
    shards), else the shards would go on from different weights."""
    steps = ddp.STEPS[2:]  # (without --max-steps 4)
    assert ddp.STEPS[:2] == ["--max-steps", "4"]
    args = [*ddp._write_data(tmp_path)["lm"], "--dropout", "0", *steps, "--precision", "fp16"]
    args += ["--schedule", "inverse_sqrt"]  # (the LM's cosine would end at the cut)
    runs = {"two": ["--accum-steps", "1", "--fsdp"], "one": ["--accum-steps", "2"]}

    def train(run: str, *more: str) -> str:
        launch = ddp._torchrun if run == "two" else ddp._one_process
        return launch([*args, "--out", run, *runs[run], *more], tmp_path)

    def scaler(run: str) -> dict:
        return json.loads((tmp_path / run / "last" / "trainer_state.json").read_text())

    for run in runs:
        train(run, "--max-steps", "2")
        state = scaler(run)
        state["scaler"]["scale"] = 2.0**30
        (tmp_path / run / "last" / "trainer_state.json").write_text(json.dumps(state))
        assert "done: step 6" in train(run, "--max-steps", "6", "--resume")
    scales = [scaler(run)["scaler"]["scale"] for run in runs]
    assert scales[0] == scales[1] < 2.0**30, scales  # overflowed, halved, the same on both
    losses = ddp._losses(tmp_path / "one")
    assert len(losses) == 6 and losses[-1] < losses[0]  # it really trained
    assert losses == pytest.approx(ddp._losses(tmp_path / "two"), abs=1e-3)
    assert _gap(_weights(tmp_path / "one"), _weights(tmp_path / "two")) <= 1e-3


def test_fsdp_resumes_exactly_and_writes_whole_files(tmp_path):
    """With dropout, the moving average and kept checkpoints: 2 steps + --resume to 4 = 4 straight (every rank's
    shards, RNG and data position come back); the files hold whole tensors, so one process without --fsdp goes on."""
    args = [*ddp._write_data(tmp_path)["lm"], "--dropout", "0.1", "--lr", "3e-3", "--warmup-steps", "1", *FP32]
    args += ["--schedule", "inverse_sqrt"]  # (the LM's cosine would end at the cut)
    args += ["--eval-every", "2", "--log-every", "1", "--no-progress", "--ema", "0.9", "--keep-checkpoints", "2"]
    ddp._torchrun([*args, "--out", "straight", "--max-steps", "4", "--fsdp"], tmp_path)
    ddp._torchrun([*args, "--out", "cut", "--max-steps", "2", "--fsdp"], tmp_path)
    ddp._torchrun([*args, "--out", "cut", "--max-steps", "4", "--fsdp", "--resume"], tmp_path)
    assert ddp._max_weight_gap(tmp_path / "straight", tmp_path / "cut") <= 1e-6
    assert ddp._losses(tmp_path / "cut") == pytest.approx(ddp._losses(tmp_path / "straight"), abs=1e-6)
    last = tmp_path / "cut" / "last"
    weights, moments = load_file(str(last / "model.safetensors")), load_file(str(last / "trainer_state.safetensors"))
    ema = load_file(str(last / "ema.safetensors"))
    shapes = {tuple(t.shape) for t in weights.values()}
    assert ema.keys() <= weights.keys() and all(ema[k].shape == weights[k].shape for k in ema)
    assert {tuple(v.shape) for k, v in moments.items() if k.endswith(".exp_avg")} <= shapes  # whole, not half
    assert len(list((tmp_path / "cut" / "checkpoints").glob("step-*"))) == 2
    straight_ema = load_file(str(tmp_path / "straight" / "last" / "ema.safetensors"))
    assert max((ema[k] - straight_ema[k]).abs().max().item() for k in ema) <= 1e-6
    alone = subprocess.run(
        [sys.executable, "-m", "tformer", "train", *args, "--out", "cut", "--max-steps", "6", "--resume"],
        cwd=tmp_path,
        env=ddp._env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert alone.returncode == 0, alone.stderr[-3000:]  # one process, unsharded, from the sharded run's files
    assert "the run used 2 process(es), this one has 1" in alone.stdout
    assert "changed: --max-steps 6 (was 4), --fsdp off (was on)" in alone.stdout  # not dropped in silence
    assert len(ddp._losses(tmp_path / "cut")) == 6
    state = json.loads((last / "state.json").read_text())
    assert state["step"] == 6 and state["train_config"]["fsdp"] is False


def test_fsdp_with_one_process_is_refused(tmp_path):
    args = [*ddp._write_data(tmp_path)["lm"], *ddp.STEPS, "--out", "solo", "--fsdp"]
    proc = subprocess.run(
        [sys.executable, "-m", "tformer", "train", *args],
        cwd=tmp_path,
        env=ddp._env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--fsdp shards the model over the processes of a torchrun job, and this run has one process" in proc.stderr
    assert not (tmp_path / "solo").exists()  # nothing left behind
    assert "data:" not in proc.stdout  # said before the data is read


def test_fsdp_from_a_pretrained_model_with_lora(tmp_path):
    """--init evaluates the start before any step (the sharded model's first forward is then an evaluation's) and
    LoRA's frozen base shards beside its trained adapters; best/ holds the PEFT adapter, written by rank 0."""
    args = [*ddp._write_data(tmp_path)["lm"], *ddp.STEPS, *FP32]
    ddp._one_process([*args, "--out", "base"], tmp_path)
    tuned = [*args, "--init", str(tmp_path / "base" / "best"), "--lora-r", "4", "--out", "tuned", "--fsdp"]
    out = ddp._torchrun([arg for arg in tuned if arg not in ("--preset", "tiny")], tmp_path)
    assert out.count("step 0 (the model it starts from)") == 1 and out.count("done: step 4") == 1
    assert (tmp_path / "tuned" / "best" / "adapter_model.safetensors").is_file()
    assert len(ddp._losses(tmp_path / "tuned")) == 4
