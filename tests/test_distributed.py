"""Data-parallel training with torchrun (2 CPU processes, gloo) equals one process on the same global batch.

Every family, launched as one machine with 2 processes or as 2 "machines" (two torchrun agents meeting through
a c10d rendezvous on this host), and resumed exactly from a run cut in the middle.
"""

import json
import os
import random
import re
import socket
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from tformer.translation.toy_corpus import builtin_pairs

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="this torch build has no torch.distributed"
)

STEPS = [
    "--max-steps",
    "4",
    "--lr",
    "3e-3",
    "--warmup-steps",
    "1",
    "--eval-every",
    "100",
    "--log-every",
    "1",
    "--no-progress",
]


def _write_data(tmp_path) -> dict[str, list[str]]:
    """Tiny local corpora from the built-in pairs; each family's `tformer train` arguments (no --out, no steps)."""
    pairs = builtin_pairs()[::5]
    (tmp_path / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    (tmp_path / "text.txt").write_text("".join(f"{s} {t}\n" for s, t in pairs[:600]), encoding="utf-8")
    documents = ["\n".join(s for s, _ in pairs[k : k + 4]) for k in range(0, 800, 4)]  # 4 sentences a document
    (tmp_path / "docs.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    labelled = "".join(f"{s}\t{'long' if len(s) > 20 else 'short'}\n" for s, _ in pairs[:200])
    (tmp_path / "labels.tsv").write_text(labelled, encoding="utf-8")
    return {
        "translation": [
            "translation",
            "--data",
            "pairs.tsv",
            "--preset",
            "tiny",
            "--vocab-size",
            "300",
            "--batch-tokens",
            "400",
            "--bleu-sentences",
            "2",
        ],
        "lm": [
            "lm",
            "--data",
            "text.txt",
            "--preset",
            "tiny",
            "--max-len",
            "32",
            "--batch-size",
            "4",
            "--batches-per-epoch",
            "50",
            "--eval-blocks",
            "4",
        ],
        "bert": [
            "bert",
            "--data",
            "docs.txt",
            "--preset",
            "tiny",
            "--vocab-size",
            "300",
            "--max-len",
            "32",
            "--batch-size",
            "8",
        ],
        "classify": [
            "classify",
            "--data",
            "labels.tsv",
            "--preset",
            "tiny",
            "--vocab-size",
            "300",
            "--batch-size",
            "8",
        ],
    }


def _free_port() -> int:
    """A free port below the ephemeral range (32768 up on Linux): one the kernel hands out (port 0) could be taken by
    another test's outgoing connection between this check and the rendezvous binding it."""
    rng = random.Random()
    for _ in range(100):
        port = rng.randint(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port between 20000 and 32000")


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _check(proc) -> str:
    out, err = proc.communicate(timeout=600) if isinstance(proc, subprocess.Popen) else (proc.stdout, proc.stderr)
    assert proc.returncode == 0, out[-2000:] + err[-4000:]
    # DDP built as each task needs: no deprecated argument, no search for unused parameters where there are none
    assert "FutureWarning" not in err and "find_unused_parameters=True was specified" not in err, err[-4000:]
    return out


def _one_process(args, tmp_path) -> str:
    cmd = [sys.executable, "-m", "tformer", "train", *args]
    return _check(subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600))


def _torchrun(args, tmp_path, launch="standalone", entry=("-m", "tformer")) -> str:
    """`tformer train ARGS` on 2 processes: one agent with 2 workers, or 2 agents ("nodes") with one worker each.
    ``entry``: what torchrun runs (a script that wraps tformer's command line, say)."""
    train = [*entry, "train", *args]
    run = [sys.executable, "-m", "torch.distributed.run"]
    if launch == "standalone":
        return _check(
            subprocess.run(
                [*run, "--standalone", "--nproc-per-node", "2", *train],
                cwd=tmp_path,
                env=_env(),
                capture_output=True,
                text=True,
                timeout=600,
            )
        )
    rendezvous = [
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{_free_port()}",
        "--rdzv-id",
        "tformer-test",
    ]
    agents = [
        subprocess.Popen(
            [*run, *rendezvous, *train],
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        return "".join(_check(agent) for agent in agents)
    finally:  # a failed agent leaves the other waiting at the rendezvous: end it
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()


def _losses(run_dir):
    lines = (run_dir / "log.jsonl").read_text().splitlines()
    return [r["train_loss"] for r in map(json.loads, lines) if "train_loss" in r]


def _max_weight_gap(a, b) -> float:
    one, two = load_file(str(a / "last" / "model.safetensors")), load_file(str(b / "last" / "model.safetensors"))
    assert one.keys() == two.keys()
    return max((one[k] - two[k]).abs().max().item() for k in one)


@pytest.mark.parametrize(
    "family, launch",
    [("translation", "standalone"), ("lm", "two-nodes"), ("bert", "standalone"), ("classify", "standalone")],
)
def test_torchrun_matches_one_process(tmp_path, family, launch):
    """2 processes × 1 batch per step = 1 process × 2 accumulated batches: same weights, same losses."""
    args = [*_write_data(tmp_path)[family], "--dropout", "0", *STEPS]
    out = _torchrun([*args, "--out", "two", "--accum-steps", "1"], tmp_path, launch)
    assert out.count("done: step 4") == 1  # rank 0 alone reports (and writes the run directory)
    if family in (
        "bert",
        "classify",
    ):  # the WordPiece rank 0 trained and shared (the trainer numbers pieces differently per process)
        args += ["--tokenizer-dir", str(tmp_path / "two" / "last")]
    _one_process([*args, "--out", "one", "--accum-steps", "2"], tmp_path)
    assert _max_weight_gap(tmp_path / "one", tmp_path / "two") <= 1e-5
    losses = _losses(tmp_path / "one")
    assert len(losses) == 4 and min(losses[1:]) < losses[0]  # it really trained
    assert losses == pytest.approx(_losses(tmp_path / "two"), abs=1e-5)
    state = json.loads((tmp_path / "two" / "last" / "state.json").read_text())
    assert (
        state["step"] == 4
        and json.loads((tmp_path / "two" / "last" / "trainer_state.json").read_text())["processes"] == 2
    )


def test_torchrun_resume_continues_exactly(tmp_path):
    """With dropout, 2 steps + --resume to 4 = 4 steps straight: every rank's RNG and the data position come back."""
    from tformer.bert import read_sentence_documents
    from tformer.tokenizers import train_tokenizer

    args = [
        *_write_data(tmp_path)["bert"],
        "--dropout",
        "0.1",
        "--eval-every",
        "100",
        "--log-every",
        "1",
        "--no-progress",
    ]
    # one WordPiece for both runs: the tokenizers library's trainer can give another vocabulary each run (#1794)
    train_tokenizer("wordpiece", [s for d in read_sentence_documents(tmp_path / "docs.txt") for s in d], 300).save(
        tmp_path / "wordpiece"
    )
    args += ["--tokenizer-dir", str(tmp_path / "wordpiece")]
    _torchrun([*args, "--out", "straight", "--max-steps", "4"], tmp_path)
    _torchrun([*args, "--out", "cut", "--max-steps", "2"], tmp_path)
    _torchrun([*args, "--out", "cut", "--max-steps", "4", "--resume"], tmp_path)
    assert _max_weight_gap(tmp_path / "straight", tmp_path / "cut") <= 1e-6
    assert _losses(tmp_path / "cut") == pytest.approx(_losses(tmp_path / "straight"), abs=1e-6)
    alone = subprocess.run(
        [sys.executable, "-m", "tformer", "train", *args, "--out", "cut", "--max-steps", "6", "--resume"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert alone.returncode == 0, alone.stderr[-3000:]  # another number of processes goes on, and says how
    assert "the run used 2 process(es), this one has 1" in alone.stdout and "not the exact continuation" in alone.stdout
    assert "a step now takes 1 batch (--accum-steps 1 on each process; it took 2)" in alone.stdout
    cut = _losses(tmp_path / "cut")
    assert len(cut) == 6 and cut[:4] == pytest.approx(_losses(tmp_path / "straight"), abs=1e-6)


def test_rank0_results_and_different_models_across_processes(tmp_path):
    """``from_rank0`` hands rank 0's result (or its error) to every process; a model that differs between processes
    (e.g. a vocabulary each trained on its own) is a clear error, not a size mismatch deep inside gloo."""
    script = tmp_path / "ranks.py"
    script.write_text(
        "import os, torch\n"
        "from tformer.training import distributed\n"
        "world, _ = distributed.init('cpu')\n"
        "print(f'rank {world.rank}: pid {os.getpid()}, from rank 0 {distributed.from_rank0(os.getpid)}')\n"
        "def fails():\n"
        "    raise ValueError('bad data on rank 0')\n"
        "try:\n"
        "    distributed.from_rank0(fails)\n"
        "except ValueError as err:\n"
        "    print(f'rank {world.rank}: {err}')\n"
        "model = torch.nn.Embedding(300 + 2 * world.rank, 8)\n"
        "try:\n"
        "    distributed.broadcast_parameters(model, world)\n"
        "except ValueError as err:\n"
        "    print(f'rank {world.rank}: {err}')\n"
        "distributed.shutdown()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    pids = {rank: (pid, got) for rank, pid, got in re.findall(r"rank (\d): pid (\d+), from rank 0 (\d+)", proc.stdout)}
    assert pids["0"][0] != pids["1"][0] and pids["0"][1] == pids["1"][1] == pids["0"][0]  # both hold rank 0's result
    assert "rank 0: bad data on rank 0" in proc.stdout and "rank 1: bad data on rank 0" in proc.stdout
    assert (
        "rank 0: process 0 and process 1 built different models (first difference: ('weight', (300, 8)) vs ('weight', (302, 8)))"
        in proc.stdout
    )
    assert "rank 1: process 1 and process 0 built different models" in proc.stdout


def test_an_interrupt_under_torchrun_is_said_once_by_rank_0(monkeypatch, capsys):
    """Every rank stops with the same TrainingInterrupted: rank 0 says where the state is saved, the others only exit
    with its status (the message was printed once per process)."""
    import tformer.cli
    from tformer.training.trainer import TrainingInterrupted

    def interrupted(args):
        raise TrainingInterrupted("interrupted by SIGINT at step 3: the state is saved in run/last", 130)

    monkeypatch.setattr(tformer.cli, "_run", interrupted)
    for rank, said in (("1", 0), ("0", 1)):
        monkeypatch.setenv("RANK", rank)
        assert tformer.cli.main(["info", "."]) == 130
        assert capsys.readouterr().err.count("error: interrupted by SIGINT at step 3") == said


def test_shutdown_leaves_the_process_group(tmp_path):
    from tformer.training import distributed

    dist = torch.distributed
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    assert dist.is_initialized()
    distributed.shutdown()
    assert not dist.is_initialized()
    distributed.shutdown()  # nothing to leave: a no-op


def test_from_rank0_without_torchrun_just_calls(monkeypatch):
    from tformer.training import distributed

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert distributed.is_main_process()
    assert distributed.from_rank0(lambda: {"made": 1}) == {"made": 1}
    monkeypatch.setenv("RANK", "1")
    assert not distributed.is_main_process()
