"""Precision as a choice (issue 33, item 2): ``--precision auto|fp32|bf16|fp16|int8`` on the training and inference
commands, ``auto`` picking per machine class and kind of work and saying what and why."""

from __future__ import annotations

import json

import pytest
import torch

from tformer.cli import main
from tformer.fast.precision import INT8_MIN_WIDTH, TRAINING_BF16, Choice, apply, choose
from tformer.fast.quantize import is_quantized
from tformer.machine import Machine, machine_class
from tformer.models.gpt import GPT, GPTConfig

ZEN3 = ("avx2", "fma")
ZEN5 = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni")
SAPPHIRE_RAPIDS = (*ZEN5, "amx_bf16", "amx_int8", "amx_tile")


def _machine(features) -> Machine:
    return Machine("a CPU", 2, 2, tuple(features), "AVX512", machine_class(features))


def _gpt(width: int) -> GPT:
    return GPT(GPTConfig(vocab_size=50, d_model=width, n_heads=4, n_layers=1, d_ff=2 * width, max_len=32)).eval()


@pytest.mark.parametrize(
    "features, work, width, expected",
    [
        (ZEN5, "decoding", 384, "int8"),  # measured 2.3x float32 (GPT 6x384), perplexity +0.01%
        (ZEN5, "batched", 384, "fp32"),  # 3.4x, but the printed similarities moved by up to 0.012
        (SAPPHIRE_RAPIDS, "decoding", 512, "int8"),
        (ZEN5, "decoding", 128, "fp32"),  # measured 0.67x: the int8 kernel's fixed cost outweighs its savings
        (ZEN5, "decoding", 256, "fp32"),  # measured 0.91x (the Multi30k-sized translator, greedy)
        (ZEN3, "decoding", 384, "fp32"),  # no 8-bit dot products
        (ZEN5, "measuring", 384, "fp32"),  # evaluate, evaluate-lm, explore read the weights they were given
        (ZEN5, "training", 256, "bf16"),  # Multi30k: 1.9-2.0x float32, validation loss +0.8% (4 seeds)
        (ZEN3, "training", 256, "fp32"),  # no bfloat16 arithmetic: bf16 is ~100x slower there
        (SAPPHIRE_RAPIDS, "training", 256, "bf16"),  # 1.6x float32 at equal quality on the amx class
    ],
)
def test_auto_picks_per_machine_class_work_and_width(features, work, width, expected):
    choice = choose("auto", work, _gpt(width), machine=_machine(features))
    assert choice.precision == expected and choice.reason.startswith("auto: ")
    assert str(choice).startswith(f"precision: {expected} (auto: ")
    assert width >= INT8_MIN_WIDTH or choice.precision != "int8"


def test_auto_keeps_float32_off_the_cpu_and_an_explicit_choice_as_asked():
    assert choose("auto", "decoding", _gpt(384), device="cuda", machine=_machine(ZEN5)).precision == "fp32"
    assert choose("bfloat16", "decoding") == Choice("bf16", "as asked")  # torch's spelling too
    assert choose("int8", "measuring").precision == "int8"
    with pytest.raises(ValueError, match="--precision int8 is for inference: training keeps float weights"):
        choose("int8", "training")
    with pytest.raises(ValueError, match="precision must be one of auto, fp32, bf16, fp16, int8, got 'int4'"):
        choose("int4", "decoding")


def test_apply_changes_the_weights_for_inference_only_as_chosen():
    torch.manual_seed(0)
    model, ids = _gpt(64), torch.randint(0, 50, (1, 8))
    ref = model(ids)
    assert apply(model, Choice("fp32", "as asked")) is model and torch.equal(model(ids), ref)
    apply(model, Choice("int8", "as asked"))
    assert is_quantized(model) and (model(ids) - ref).abs().max() < 0.05 * ref.abs().max()
    bf16 = apply(_gpt(64), Choice("bf16", "as asked"))
    assert next(bf16.parameters()).dtype == torch.bfloat16


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory, words_txt):
    out = tmp_path_factory.mktemp("precision") / "run"
    argv = ["train", "lm", "--data", str(words_txt), "--out", str(out), "--preset", "tiny", "--max-len", "16"]
    assert main([*argv, "--max-steps", "3", "--no-progress", "--precision", "bf16"]) == 0
    return out


def test_training_says_and_logs_its_precision(lm_run):
    first = json.loads((lm_run / "log.jsonl").read_text().splitlines()[0])
    assert first["precision"] == "bf16" and first["machine"]["machine_class"]
    state = json.loads((lm_run / "last" / "state.json").read_text())
    assert state["train_config"]["precision"] == "bf16"


def test_training_auto_says_what_it_picked_and_why(tmp_path, capsys, words_txt):
    out = tmp_path / "auto"
    argv = ["train", "lm", "--data", str(words_txt), "--out", str(out), "--preset", "tiny", "--max-len", "16"]
    assert main([*argv, "--max-steps", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out  # the run's report, with its data and model lines
    expected = "bf16" if _this_class() in TRAINING_BF16 else "fp32"
    assert f"precision: {expected} (auto: " in out


def _this_class() -> str:
    from tformer.machine import describe

    return describe().machine_class


def test_training_refuses_int8_and_a_contradiction_in_one_line(tmp_path, capsys, words_txt):
    argv = ["train", "lm", "--data", str(words_txt), "--out", str(tmp_path / "r"), "--max-steps", "1"]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--precision", "int8"])
    # the command's own choices are listed: fp16 trains (with a gradient scaler), int8 does not
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "argument --precision: must be one of auto, fp32, bf16, fp16 for this" in err
    assert "got 'int8'" in err
    assert main([*argv, "--precision", "fp32", "--bf16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--bf16" in err[0] and "contradict" in err[0]


@pytest.mark.parametrize("precision", ["fp32", "int8", "bf16"])
def test_generate_runs_in_each_precision_and_says_it(lm_run, precision, capsys):
    assert main(["generate", "--model", str(lm_run), "--prompt", "the", "--max-new-tokens", "4", "--seed", "1",
                 "--precision", precision]) == 0  # fmt: skip
    captured = capsys.readouterr()
    said = f"precision: {precision} (as asked)" in captured.err  # only a change from the float32 read is said
    assert said == (precision != "fp32") and captured.out.startswith("the")


def test_the_old_dtype_flag_still_works(lm_run, capsys):
    assert main(["generate", "--model", str(lm_run), "--max-new-tokens", "2", "--dtype", "bfloat16"]) == 0
    err = capsys.readouterr().err
    assert "note: --dtype is now called --precision" in err and "precision: bf16 (as asked)" in err


def test_the_explorer_says_what_precision_its_numbers_come_from(lm_run):
    from tformer.explore import Session

    assert Session.open(lm_run).call("info", {})["precision"] == "fp32"  # auto: the explorer measures
    assert Session.open(lm_run, precision="int8").call("info", {})["precision"] == "int8"


def test_info_system_says_what_auto_picks_for_each_kind_of_work(capsys):
    assert main(["info", "--system"]) == 0
    out = capsys.readouterr().out
    for work in ("training", "decoding", "batched", "measuring"):
        line = next(x for x in out.splitlines() if x.startswith(f"auto, {work}"))
        assert "precision: " in line and "(auto: " in line


# ───────────────────────────────────────── the device: a GPU's generation, fp16 with a gradient scaler (issue 39) ─────
@pytest.mark.parametrize(
    "capability, work, expected",
    [
        ((7, 5), "training", "fp16"),  # a T4: no native bfloat16 (is_bf16_supported() says yes, through emulation)
        ((7, 0), "decoding", "fp16"),  # a V100
        ((8, 0), "training", "bf16"),  # an A100
        ((9, 0), "training", "bf16"),  # an H100
        ((9, 0), "decoding", "bf16"),
        ((9, 0), "measuring", "fp32"),  # evaluate, the explorer: the numbers are the point
        ((9, 0), "batched", "fp32"),  # the scores printed stay float32's
    ],
)
def test_auto_on_a_gpu_picks_by_compute_capability(capability, work, expected):
    choice = choose("auto", work, _gpt(384), device="cuda", capability=capability, machine=_machine(ZEN5))
    assert choice.precision == expected and choice.reason.startswith("auto: ")
    if expected != "fp32":  # the reason names the GPU's generation
        assert f"compute capability {capability[0]}.{capability[1]}" in choice.reason


def test_the_cpu_choice_is_not_the_gpu_choice():
    on_cpu = choose("auto", "training", _gpt(384), machine=_machine(ZEN3))
    on_gpu = choose("auto", "training", _gpt(384), device="cuda", capability=(7, 5), machine=_machine(ZEN3))
    assert (on_cpu.precision, on_gpu.precision) == ("fp32", "fp16")


def _scaler_state(run) -> dict:
    from tformer.training.state import JSON_NAME

    return json.loads((run / "last" / JSON_NAME).read_text())["scaler"]


def test_fp16_trains_with_a_gradient_scaler_whose_state_resume_restores(tmp_path, words_txt, capsys):
    from tformer import lm

    run = tmp_path / "fp16"
    common = dict(preset="tiny", max_len=16, batch_size=4, precision="fp16", progress=False, eval_every=2)
    trainer = lm.setup(words_txt, run, max_steps=2, **common)
    assert trainer.scaler is not None and trainer.precision.precision == "fp16"
    trainer.fit()
    assert trainer.step == 2 and "precision: fp16 (as asked)" in capsys.readouterr().out
    saved = _scaler_state(run)
    assert saved["scale"] == trainer.scaler.get_scale() and saved["_growth_tracker"] == 2  # two good steps
    first = json.loads((run / "log.jsonl").read_text().splitlines()[0])
    assert first["precision"] == "fp16"
    resumed = lm.setup(words_txt, run, max_steps=4, resume=True, **common)
    assert resumed.scaler.state_dict() == trainer.scaler.state_dict()  # scale and growth tracker, exactly
    resumed.fit()
    assert _scaler_state(run)["_growth_tracker"] == 4


def test_fp16_overflow_is_the_scalers_skip_not_a_diverged_run(tmp_path, words_txt):
    """A scale so large that the scaled gradients overflow float16: the step is skipped and the scale halved, as
    torch's GradScaler does, and the run goes on (a non-finite *loss* is still a bad step). 2**36 takes about 20
    halvings, within the skips in a row that are the scaler finding its level (tests/test_fp16_scaler.py: past
    NORMAL_OVERFLOWS, they are bad steps)."""
    from tformer import lm

    trainer = lm.setup(
        words_txt, tmp_path / "r", preset="tiny", max_len=16, batch_size=4, precision="fp16", progress=False,
        max_steps=1, max_bad_steps=1,
    )  # fmt: skip
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**36)  # float16 overflows at 65504
    trainer.fit()  # max_bad_steps=1: a bad step would raise TrainingDiverged
    assert trainer.step == 1 and trainer.scaler_skips >= 1 and trainer.scaler.get_scale() < 2.0**36


def test_a_cpu_recipes_batch_on_a_gpu_is_said_with_what_to_use_instead(tmp_path, words_txt, monkeypatch):
    from tformer.lm import run as lm_run
    from tformer.lm.recipes import resolve
    from tformer.training.config import GPU_MIN_TOKENS, gpu_batch_note

    note = gpu_batch_note("cuda:0", 3000, "--batch-tokens 3000", "--batch-tokens 24000")
    assert note is not None and "3,000 tokens a step" in note and note.endswith("--batch-tokens 24000")
    assert gpu_batch_note("cpu", 3000, "--batch-tokens 3000", "x") is None  # the CPU recipe is right on a CPU
    assert gpu_batch_note("cuda", GPU_MIN_TOKENS, "b", "x") is None
    gpu = resolve("shakespeare-char-gpu")  # the GPU variant of the Tiny Shakespeare recipes
    assert gpu["batch_size"] * gpu["max_len"] >= GPU_MIN_TOKENS
    seen = []  # the LM entry point asks with its own batch (a tiny run on the CPU: the note says nothing there)
    monkeypatch.setattr(lm_run, "gpu_batch_note", lambda *a: seen.append(a) or "note: said")
    lines = []
    lm_run.setup(words_txt, tmp_path / "r", max_len=16, batch_size=4, max_steps=1, log=lines.append, progress=False)
    assert seen[0][1:3] == (4 * 16, "--batch-size 4 × --max-len 16") and "note: said" in lines


# ───────────────────────────────────────── the precision reported is the precision that runs (issue 41, item 2) ───
@pytest.fixture(scope="module")
def int8_run(tmp_path_factory, lm_run):
    """The LM run's model quantized and saved in int8 (its float weights are not in the directory)."""
    import shutil

    import tformer

    directory = tmp_path_factory.mktemp("int8") / "m"
    shutil.copytree(lm_run / "best", directory)
    loaded = tformer.load(directory)
    tformer.quantize(loaded.model, "int8").save_pretrained(directory)
    return directory


@pytest.mark.parametrize("asked", ["fp32", "bf16", "fp16"])
def test_a_float_precision_asked_of_an_int8_model_dequantizes_it_and_says_so(int8_run, asked):
    import tformer
    from tformer.fast.quantize import is_quantized

    model = tformer.load(int8_run).model
    for work in ("decoding", "measuring", "batched"):
        choice = choose(asked, work, model)
        assert choice.precision == asked and "int8 weights dequantized" in choice.reason
    apply(model, choose(asked, "decoding", model))
    assert not is_quantized(model)  # what runs is float: the int8 layers are gone
    assert {p.dtype for p in model.parameters()} == {Choice(asked, "").dtype}


@pytest.mark.parametrize("work", ["decoding", "measuring", "batched"])
def test_auto_on_an_int8_model_runs_int8_and_says_so(int8_run, work):
    import tformer

    choice = choose("auto", work, tformer.load(int8_run).model, machine=_machine(ZEN3))  # even where int8 never pays
    assert choice.precision == "int8" and "holds int8 weights" in choice.reason


@pytest.mark.parametrize("asked", ["fp32", "bf16"])
def test_generate_on_an_int8_model_says_the_precision_it_decodes_in(int8_run, lm_run, asked, capsys):
    argv = ["generate", "--model", str(int8_run), "--prompt", "the", "--max-new-tokens", "6", "--greedy"]
    assert main([*argv, "--precision", asked]) == 0
    captured = capsys.readouterr()
    assert f"precision: {asked} (as asked: the model's int8 weights dequantized" in captured.err
    assert main([*argv, "--precision", "auto"]) == 0
    assert "precision: int8 (auto: the model holds int8 weights" in capsys.readouterr().err


def test_the_explorer_of_an_int8_model_names_int8(int8_run):
    from tformer.explore import Session

    assert Session.open(int8_run).call("info", {})["precision"] == "int8"  # not "fp32" (issue 41)
    assert Session.open(int8_run, precision="fp32").call("info", {})["precision"] == "fp32"  # dequantized


def test_tf32_is_the_runs_and_put_back_after_it(monkeypatch):
    """Issue 48: a training run on a GPU sets TF32 for float32 products while it runs (any precision) and puts the
    process's own settings back after it, even when it fails; on a CPU nothing is touched."""
    from tformer.fast import precision

    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        with precision.tf32_matmuls("cpu"):
            assert torch.get_float32_matmul_precision() == "highest"
        monkeypatch.setattr(precision, "tf32_applies", lambda device: True)  # as on a CUDA device
        with pytest.raises(RuntimeError), precision.tf32_matmuls("cuda"):
            assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32
            raise RuntimeError("a run that fails")
        assert torch.get_float32_matmul_precision() == "highest" and not torch.backends.cudnn.allow_tf32
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]


def test_a_training_run_holds_tf32_while_it_runs_whatever_its_precision(tmp_path, monkeypatch):
    from scripted import VOCAB, ScriptedTask
    from tformer.fast import precision
    from tformer.training.trainer import TrainConfig, Trainer

    monkeypatch.setattr(precision, "tf32_applies", lambda device: True)  # as on a CUDA device
    seen = []

    class Watching(ScriptedTask):
        def evaluate(self, model):
            seen.append(torch.get_float32_matmul_precision())
            return super().evaluate(model)

    before = torch.get_float32_matmul_precision()
    model = GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=16))
    cfg = TrainConfig(out_dir=str(tmp_path), max_steps=2, eval_every=1, precision="fp32", progress=False)
    Trainer(model, Watching([1.0]), cfg).fit()
    assert seen == ["high", "high"] and torch.get_float32_matmul_precision() == before
