"""What is printed is true (issue 44, item 7): ``info`` counts an int8 model's parameters and says int8, ``info RUN``
says the run's step and best score, ``bench NAME`` passes the benchmark's own flags on, a sharded Hugging Face
directory's missing weight is named as the file names it, training's ``--precision`` help lists what training takes,
``--greedy`` with several samples is refused, and a flag of another command is said to be so."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import torch

import tformer
from tformer.cli import bench, main
from tformer.models.gpt import GPT, GPTConfig


@pytest.fixture(scope="module")
def lm_run(words_txt, tmp_path_factory):
    out = tmp_path_factory.mktemp("truths") / "run"
    argv = ["train", "lm", "--data", str(words_txt), "--out", str(out), "--preset", "tiny", "--max-len", "16"]
    assert main([*argv, "--max-steps", "4", "--eval-every", "2", "--no-progress"]) == 0
    return out


def test_info_counts_an_int8_models_parameters_as_its_float_twin_and_says_int8(tmp_path, capsys):
    for tie in (True, False):
        model = GPT(GPTConfig.preset("tiny", vocab_size=300, tie_embeddings=tie))
        floats = sum(p.numel() for p in model.parameters())
        tformer.quantize(model, "int8").save_pretrained(tmp_path / f"int8-{tie}")
        capsys.readouterr()
        assert main(["info", str(tmp_path / f"int8-{tie}")]) == 0
        first = capsys.readouterr().out.splitlines()[0]
        assert f"{floats:,} parameters (" in first and "of them int8)" in first, first


def test_info_of_a_run_says_its_step_and_best_score(lm_run, capsys):
    assert main(["info", str(lm_run)]) == 0
    out = capsys.readouterr().out
    state = json.loads((lm_run / "last" / "state.json").read_text())
    line = next(line for line in out.splitlines() if line.strip().startswith("run "))
    assert "step 4 of 4 (last/)" in line
    records = [json.loads(r) for r in (lm_run / "log.jsonl").read_text().splitlines()]
    best = next(r for r in records if r.get("val_loss") == state["best"])
    assert f"best val_loss {state['best']:.4f} at step {best['step']}" in line


def test_bench_passes_the_benchmarks_own_flags_on(monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda argv, env: calls.append(argv) or subprocess.CompletedProcess(argv, 0))
    assert main(["bench", "train_step", "--quick", "--out", "runs/bench", "--only", "gpt"]) == 0
    assert calls[-1][calls[-1].index("benchmarks") + 1 :] == [
        "train_step",
        "--quick",
        "--out",
        "runs/bench",
        "--only",
        "gpt",
    ]
    assert main(["--debug", "bench", "decode", "--help"]) == 0  # --help is the benchmark's, not bench's
    assert calls[-1][-2:] == ["decode", "--help"]
    examples = re.findall(
        r"^\s+tformer (bench .*?)\s*(?:#|$)", bench.__doc__, re.M
    )  # `tformer bench --help` shows these
    assert len(examples) >= 3
    for example in examples:
        assert main(example.split()) == 0, example
        assert calls[-1][calls[-1].index("benchmarks") + 1 :] == (example.split()[1:] or ["list"])


def test_a_sharded_directory_missing_its_head_is_named_in_the_files_words(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path, max_shard_size="20KB")
    index = tmp_path / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    del data["weight_map"]["lm_head.weight"]
    index.write_text(json.dumps(data))
    assert main(["info", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "lacks 'lm_head.weight'" in err and "output.weight" not in err, err


def test_training_precision_help_lists_what_training_takes(capsys):
    with pytest.raises(SystemExit):
        main(["train", "lm", "--help"])
    out = capsys.readouterr().out
    help_text = " ".join(re.search(r"\n  --precision \{.*?\n  --bf16", out, re.S).group(0).split())
    assert "int8 (inference)" not in help_text and "int8 is for inference only" in help_text


def test_greedy_with_several_samples_is_refused(lm_run, capsys):
    argv = ["generate", "--model", str(lm_run), "--prompt", "the", "--greedy", "--num-samples", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--num-samples 2 with --greedy" in err and err.count("\n") == 1


def test_a_flag_of_another_command_is_said_to_be_so(words_txt, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", "lm", "--mlm-prob", "0.2", "--data", str(words_txt), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert "--mlm-prob is a flag of tformer train bert, not of tformer train lm" in last and "minutes" not in last


def test_a_flag_named_as_other_tools_name_it_gets_tformers_name(words_txt, tmp_path, capsys):
    """--learning-rate (Hugging Face's Trainer) and --n-embd (nanoGPT) are not near --lr and --d-model by spelling."""
    with pytest.raises(SystemExit):
        main(["train", "lm", "--learning_rate", "1e-3", "--n-embd", "64", "--data", str(words_txt)])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.endswith("(--learning_rate: tformer calls it --lr; --n-embd: tformer calls it --d-model)"), last
    with pytest.raises(SystemExit):  # an OpenAI client's name, not "a flag of train translation" (its old spelling)
        main(["generate", "--max-tokens", "5"])
    assert capsys.readouterr().err.strip().endswith("(--max-tokens: tformer calls it --max-new-tokens)")
