"""Data-parallel training with torchrun (2 CPU processes, gloo) equals one process on the same global batch."""

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from tformer.data.toy_corpus import builtin_pairs


def _run(args, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def _losses(run_dir):
    lines = (run_dir / "log.jsonl").read_text().splitlines()
    return [r["train_loss"] for r in map(json.loads, lines) if "train_loss" in r]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this torch build has no torch.distributed")
def test_torchrun_two_processes_match_one_process(tmp_path):
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{s}\t{t}\n" for s, t in builtin_pairs()[::5]), encoding="utf-8")
    common = ["train", "translation", "--data", str(data), "--preset", "tiny", "--vocab-size", "300", "--max-tokens", "400",
              "--dropout", "0", "--max-steps", "5", "--eval-every", "100", "--bleu-sentences", "2", "--log-every", "1",
              "--no-progress"]
    _run([sys.executable, "-m", "tformer", *common, "--out", str(tmp_path / "one"), "--accum-steps", "2"], tmp_path)
    _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
          "-m", "tformer", *common, "--out", str(tmp_path / "two"), "--accum-steps", "1"], tmp_path)
    one = load_file(str(tmp_path / "one" / "last" / "model.safetensors"))
    two = load_file(str(tmp_path / "two" / "last" / "model.safetensors"))
    assert one.keys() == two.keys()
    assert max((one[k] - two[k]).abs().max().item() for k in one) <= 1e-5
    losses = _losses(tmp_path / "one")
    assert len(losses) == 5 and losses[-1] < losses[0]  # it really trained
    assert losses == pytest.approx(_losses(tmp_path / "two"), abs=1e-5)
    state = json.loads((tmp_path / "two" / "last" / "state.json").read_text())
    assert state["step"] == 5 and len(torch.load(tmp_path / "two" / "last" / "trainer_state.pt", weights_only=True)["rng"]) == 2


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this torch build has no torch.distributed")
def test_shutdown_leaves_the_process_group(tmp_path):
    from tformer import distributed

    dist = torch.distributed
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    assert dist.is_initialized()
    distributed.shutdown()
    assert not dist.is_initialized()
    distributed.shutdown()  # nothing to leave: a no-op
