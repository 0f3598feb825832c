"""Every speed benchmark runs in ``--quick`` mode (tiny sizes, one round) and writes its report.

Timings are never asserted here (STYLE.md): these tests prove the scripts work, produce the documented
JSON keys and markdown table, and compare the candidates they say they compare.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the benchmarks package lives next to src/, not installed

pytest.importorskip("transformers")

from benchmarks.common import report_dir  # noqa: E402
from tformer.outputs import written  # noqa: E402

STAT_KEYS = {"median", "min", "max", "median_seconds", "rounds", "ratio", "peak_memory_mb"}
OPTIONAL = {"ONNX Runtime float32", "ONNX Runtime int8 (dynamic)"}  # where onnxruntime is installed (not in CI)

# benchmark -> (extra argv, the candidates every group must hold, groups expected)
CASES = {
    "train_step": (
        [],
        None,
        {
            "seq2seq": {"tformer", "tformer, reference paths", "nn.Transformer", "HF Marian"},
            "gpt": {"tformer", "tformer, reference paths", "HF GPT2LMHeadModel"},
            "bert": {"tformer", "tformer, reference paths", "HF BertForPreTraining"},
        },
    ),
    "decode": (
        [],
        None,
        {f"{mode} b{b}": {"tformer", "HF generate"} for mode in ("greedy", "beam5", "sample") for b in (1, 3)}
        | {f"gpt b{b}": {"tformer KV cache", "tformer no cache", "HF generate"} for b in (1, 2)},
    ),
    "decode_llama": (
        ["--int8", "--floor"],
        None,
        {
            f"smollm2-shape b{b}": {"tformer", "HF generate", "tformer int8", "HF generate, dynamic int8"}
            for b in (1, 2)
        },
    ),
    "decode_floor": (
        [],
        None,
        {
            m: {
                "matmuls only, F.linear (out, in)",
                "matmuls only, weight stored (in, out)",
                "matmuls only, tformer.Linear",
            }
            for m in ("marian", "gpt")
        },
    ),
    "throughput_multi30k": ([], None, {"multi30k": {"pad-to-longest", "tformer token budget"}}),
    "bert_encode": (["--int8"], None, {"MiniLM b4": {"tformer", "HF BertModel", "tformer int8"}}),
    "quantize": (
        ["--no-onnx"],
        None,
        {
            "char GPT decode b1": {"float32", "int8"},
            "GPT 6x384 decode b1": {"float32", "int8"},
            "MiniLM-shaped encoder b2x16": {"float32", "int8"},
        },
    ),
    "chunked_loss": (
        [],
        None,
        {
            "lm step": {
                "Hugging Face GPT2LMHeadModel",
                "tformer, whole logits",
                "tformer, chunked",
                "tformer, chunked, head padded (3,008 rows)",
            }
        },
    ),
    "optimizer_step": (
        [],
        None,
        {
            "optimizer step": {
                "fused AdamW",
                "torch.optim.Muon + fused AdamW, apart",
                "tformer MuonAdamW",
                "tformer MuonAdamW, skip on the device",
            }
        },
    ),
    "attention_precision": (
        [],
        None,
        {
            recipe: {
                "bf16 autocast, attention in bfloat16 (PyTorch's fused kernel)",
                "bf16 autocast, attention in float32",
                "float32",
            }
            for recipe in ("shakespeare-char-6min", "shakespeare-char-30min")
        }
        | {
            "attention 2x2x8x8, forward + backward": {
                "bfloat16 (PyTorch's fused kernel)",
                "float32, cast up and back",
            }
        },
    ),
    "compile_step": (
        [],
        None,
        {"shakespeare-char-30min": {"eager", "compiled", "eager, no dropout", "compiled, no dropout"}},
    ),
    "lm_step": (
        [],
        None,
        {
            "shakespeare-char": {
                "gelu_tanh, AdamW loop",
                "gelu_tanh, fused AdamW",
                "gelu, fused AdamW",
                "gelu, fused AdamW, rotary positions",
                "gelu, fused AdamW, table padded to 128 rows",
            }
        },
    ),
}


def _shared_or_skip(relative: str, what: str) -> None:
    """Skip when ``../shared/data/RELATIVE`` is missing here; fail under CI, which has ../shared beside the clone."""
    if (ROOT.parent / "shared" / "data" / relative).is_file():
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} not found in ../shared/data (CI has it beside the clone)")
    pytest.skip(f"{what} not found in ../shared/data")


def _minilm_or_skip():
    from tformer.bert.embeddings import minilm_path

    try:
        minilm_path()
    except FileNotFoundError as err:
        pytest.skip(str(err))


@pytest.mark.parametrize("name", sorted(CASES))
def test_benchmark_quick_writes_report(name, tmp_path):
    import torch

    from benchmarks.__main__ import run

    if name == "bert_encode":
        _minilm_or_skip()
    if name == "throughput_multi30k":
        _shared_or_skip("multi30k/train.en", "Multi30k")
    if name == "quantize":
        _shared_or_skip("tinyshakespeare.txt", "Tiny Shakespeare")
    extra, _, groups = CASES[name]
    if name == "bert_encode":  # its default sentences are ../shared/data's Multi30k: --quick encodes 4, given here
        sentences = tmp_path / "sentences.en"
        sentences.write_text(
            "A dog runs on the beach.\nTwo men play chess.\nA girl reads.\nIt rains.\n", encoding="utf-8"
        )
        extra = [*extra, "--sentences", str(sentences)]
    threads = torch.get_num_threads()
    returned = run(name, ["--quick", "--out", str(tmp_path), *extra])
    assert torch.get_num_threads() == threads  # --quick runs single-threaded, then restores
    report = json.loads((tmp_path / f"{name}.json").read_text())
    assert report == json.loads(json.dumps(returned))
    assert {"benchmark", "machine", "config", "results"} <= set(report)
    assert report["benchmark"] == name and report["machine"]["quick"] is True
    assert set(report["results"]) == set(groups)
    assert {f"{name}.json", f"{name}.md"} <= set(written(tmp_path))  # recorded as its own: a second run replaces them
    assert report_dir(f"{name}.json", f"{name}.md")(str(tmp_path)) == str(tmp_path)
    for group, candidates in groups.items():
        stats = report["results"][group]
        assert candidates <= set(stats) and set(stats) - candidates <= OPTIONAL
        for s in stats.values():
            assert STAT_KEYS <= set(s)
            assert s["median"] > 0 and s["min"] <= s["median"] <= s["max"]
        anchor = [n for n, s in stats.items() if s["ratio"] == 1.0]
        assert anchor, "one candidate is the anchor (ratio 1)"
    table = (tmp_path / f"{name}.md").read_text()
    assert "| group | candidate |" in table and all(g in table for g in groups)
    if name == "decode_llama":  # the floor: stream rate / weight bytes a step, and tformer's share of it
        floor = report["floor"]
        assert (
            floor["stream_gb_per_s"] > 0 and floor["fp32"]["weight_mb_per_step"] > floor["int8"]["weight_mb_per_step"]
        )
        assert 0 < floor["int8"]["fraction_of_floor"] and 0 < floor["fp32"]["fraction_of_floor"]
    if name == "bert_encode":  # int8's sentence embeddings against float32's
        assert 0.99 < report["int8"]["min_cosine"] <= 1.0 + 1e-6


def test_quantize_quality_per_precision_without_speed(tmp_path):
    """``quantize --no-speed`` times nothing and measures quality in float32, bf16 and int8: the char GPT's
    perplexity, logit gap and greedy agreement, fill-mask top-1 agreement over masked held-out words, the Llama's
    perplexity of its own text with the KL divergence from float32; quantize.md holds the table, a column each."""
    from benchmarks.__main__ import run

    _shared_or_skip("tinyshakespeare.txt", "Tiny Shakespeare")
    _shared_or_skip("multi30k/train.en", "Multi30k")
    report = run("quantize", ["--quick", "--no-speed", "--out", str(tmp_path)])
    assert report["results"] == {} and report["onnxruntime"] == {"skipped": "--no-speed"}
    q = report["quality"]
    assert {"float32", "bf16", "int8"} <= set(q["perplexity"]) and q["perplexity_change"]["float32"] == 0
    fill, own = q["fill_mask"], q["own_text"]
    assert fill["positions"] == 24 and set(fill["top1_accuracy"]) == {"float32", "bf16", "int8"}
    assert own["tokens"] == 24 and set(own["perplexity"]) == {"float32", "bf16", "int8"}
    for p in ("bf16", "int8"):
        assert abs(q["perplexity_change"][p]) < 0.01 and abs(own["perplexity_change"][p]) < 0.01
        assert 0 < q["logits"][p]["relative"] < 0.05
        assert q["greedy"][p]["of"] == 8
        assert 0 <= fill["agreement_with_float32"][p] <= 1
        assert -1e-6 < own["kl_from_float32"][p] < 1e-3
        if "skipped" not in q["minilm_cosine"]:
            assert q["minilm_cosine"][p]["min"] > 0.99
    table = (tmp_path / "quantize.md").read_text()
    assert "Speed: not measured." in table and "| measure | float32 | bf16 | int8 |" in table
    assert "fill-mask (24 masked held-out words)" in table and "its own 24 sampled tokens" in table


def test_train_step_reports_gflops_against_measured_peak(tmp_path):
    from benchmarks.train_step import main

    report = main(["--quick", "--only", "seq2seq", "--no-memory", "--out", str(tmp_path)])
    assert report["machine"]["matmul_peak_gflops_fp32"] > 0
    for s in report["results"]["seq2seq"].values():
        assert s["gflops"] > 0 and s["fraction_of_peak"] == pytest.approx(
            s["gflops"] / report["machine"]["matmul_peak_gflops_fp32"]
        )


def test_seq2seq_flops_formula():
    """6 · weights · tokens + attention, written out for one tiny configuration."""
    from benchmarks.train_step import seq2seq_flops

    c = dict(vocab=10, d=2, heads=1, ff=4, enc=1, dec=1, batch=1, src_len=3, tgt_len=2)
    w_src = (4 * 4 + 2 * 2 * 4) + 2 * 4  # encoder layer + cross-attention K/V
    w_tgt = (6 * 4 + 2 * 2 * 4) + 2 * 10  # decoder layer + output projection
    attention = 4 * 2 * (3 * 3 + 2 * 2 + 2 * 3)
    assert seq2seq_flops(c) == 3 * (2 * (3 * w_src + 2 * w_tgt) + attention)


def test_peak_memory_sees_an_allocation():
    import torch

    from benchmarks.common import peak_memory_mb

    def two_at_once():
        a = torch.ones(16 * 2**20 // 4)  # 16 MiB
        b = a * 2  # 16 MiB more while a is alive
        del a
        return (b + 1).sum()  # b + 1 replaces a: the peak stays 32 MiB

    assert peak_memory_mb(two_at_once) == pytest.approx(32, abs=0.1)


def test_gpu_quick_reports_each_part_and_names_the_device(tmp_path):
    """``benchmarks.gpu --quick`` on the CPU: (a) the four training candidates with tokens/s and MFU against the measured
    bf16 matmul peak (the published peak is null off a GPU), (b) greedy decoding at batch 1 and 16, (c) both Multi30k
    recipe runs to their last step with a BLEU, (d) a peak memory for each candidate; the JSON names the device.
    Hugging Face's compiled static cache may fail in some transformers versions: recorded as an error, never a crash."""
    from benchmarks.__main__ import run

    report = run("gpu", ["--quick", "--out", str(tmp_path)])
    assert report == json.loads((tmp_path / "gpu.json").read_text()) and report["benchmark"] == "gpu"
    m = report["machine"]
    assert m["device"] == "cpu" and m["gpu"] is None and m["device_name"] and m["torch"] and m["quick"] is True
    assert m["measured_bf16_tflops"] > 0 and m["published_bf16_tflops"] is None
    assert all(name.endswith("HF static cache + compile") for name in report["errors"]), report["errors"]
    static = "tformer static cache + compile"
    train = {"HF eager", "HF compiled", "tformer eager", "tformer compiled"}
    decode = {"HF generate", "HF static cache + compile", "tformer eager loop", static}
    assert set(report["results"]) == {"train gpt-tiny", "decode b1", "decode b16"}
    for group, stats in report["results"].items():
        expected = train if group.startswith("train") else decode
        missing = expected - set(stats)
        assert all(n == "HF static cache + compile" or n == static for n in missing), missing
        if static in missing:  # only where tformer's static decoding is not in this checkout
            assert report["skipped"]["decode / " + static].startswith("not available")
        for s in stats.values():
            assert STAT_KEYS <= set(s) and s["median"] > 0 and s["first_call_s"] >= 0
            assert s["peak_total_mb"] >= s["peak_memory_mb"] >= 0
        assert any(s["ratio"] == 1.0 for s in stats.values())
    for s in report["results"]["train gpt-tiny"].values():
        assert s["tflops"] > 0 and s["mfu_published_peak"] is None
        assert s["mfu_measured_peak"] == pytest.approx(s["tflops"] / m["measured_bf16_tflops"])
        assert s["state_mb"] > 0
    runs = report["sections"]["multi30k"]["runs"]
    assert set(runs) == {"README recipe", "GPU variant"}
    for r in runs.values():
        assert r["steps"] == r["options"]["max_steps"] and not r["stopped_by_budget"]
        assert r["tokens_per_s"] > 0 and r["bleu"] is not None and r["val_loss"] > 0
    assert runs["GPU variant"]["options"]["batch_tokens"] > runs["README recipe"]["options"]["batch_tokens"]
    assert {g["met"] for g in report["goals"]} == {None}  # --quick judges no goal
    table = (tmp_path / "gpu.md").read_text()
    for heading in ("## (a)", "## (b)", "## (c)", "## (d)", "## goals"):
        assert heading in table
    assert "Device: cpu" in table and "decode b16" in table and "README recipe" in table


def test_gpu_published_peaks_and_flops():
    """The published dense bf16 peak by device name (first match; a card not in the table: None), and nanoGPT's N:
    the parameters of both GPT-2-shaped models less the position table."""
    from benchmarks.gpu import QUICK, _hf_gpt2, _tformer_gpt2, gpt2_flops, published_bf16_tflops

    names = {
        "NVIDIA H100 80GB HBM3": 989,
        "NVIDIA H100 PCIe": 756,
        "NVIDIA H100 NVL": None,
        "NVIDIA H200": 989,
        "NVIDIA A100-SXM4-80GB": 312,
        "NVIDIA L4": 121,
        "NVIDIA L40S": None,
        "Tesla T4": 65,
        None: None,
    }
    assert {name: published_bf16_tflops(name)[0] for name in names} == names
    c = QUICK["gpt"]
    n, flops = gpt2_flops(c)
    for model in (_tformer_gpt2(c, "cpu"), _hf_gpt2(c, "cpu")):
        assert sum(p.numel() for p in model.parameters()) - c["ctx"] * c["d"] == n
    tokens = c["batch"] * c["ctx"]
    assert flops == 6 * n * tokens + 12 * c["layers"] * c["d"] * c["ctx"] * tokens


def test_listing_and_cli(capfd, tmp_path, monkeypatch):
    from benchmarks.__main__ import BENCHMARKS
    from benchmarks.__main__ import main as bench_main
    from tformer.cli import main as cli_main

    assert bench_main([]) == 0
    listing = capfd.readouterr().out
    assert all(name in listing for name in BENCHMARKS)
    assert cli_main(["bench"]) == 0
    assert "train_step" in capfd.readouterr().out
    assert cli_main(["bench", "nope"]) == 2  # unknown name: a clean error
    assert "unknown benchmark" in capfd.readouterr().err
    (tmp_path / "a-file").write_text("mine")
    bad = {
        ("--threads", "0"): "--threads: expected a whole number of at least 1, got 0",
        ("--repeats", "0"): "--repeats: expected a whole number of at least 1, got 0",
        ("--warmup", "-1"): "--warmup: expected a whole number of at least 0, got -1",
        ("--repeats", "two"): "--repeats: expected a whole number, got 'two'",
        ("--device", "foo"): "--device: expected cpu, cuda or cuda:N, got 'foo'",
        ("--out", str(tmp_path / "a-file")): "is a file, expected a directory for the reports",
        ("--out", str(tmp_path / "mine")): "holds decode_floor.json, which no benchmark wrote there",
    }
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "decode_floor.json").write_text("my own notes")  # a user's file of the report's name
    for (flag, value), words in bad.items():  # refused before any work, in argparse's one line, no traceback
        with pytest.raises(SystemExit) as stop:
            bench_main(["decode_floor", flag, value])
        err = capfd.readouterr().err
        assert stop.value.code == 2 and words in err and "Traceback" not in err, (flag, err)
    assert (tmp_path / "a-file").read_text() == "mine"
    assert (tmp_path / "mine" / "decode_floor.json").read_text() == "my own notes"
    monkeypatch.setattr(sys, "argv", ["/x/benchmarks/__main__.py", "decode_floor", "--help"])
    with pytest.raises(SystemExit):  # the usage names the command as typed, not "__main__.py"
        bench_main()
    assert capfd.readouterr().out.startswith("usage: python -m benchmarks decode_floor [-h]")


def test_api_shape_counts_the_cli_the_settings_and_the_module_switches(tmp_path):
    from benchmarks.__main__ import run

    result = run("api_shape", ["--out", str(tmp_path)])
    assert result["cli_lines"] > 500 and result["declarations"]["d_model"] >= 1
    for path in ("translation_text_to_loss", "gpt_prompt_to_first_token"):
        assert result[path]["switches"] >= result[path]["distinct_switches"] > 3
        assert "tformer.nn.attention" in result[path]["module_list"]


def test_memory_measures_both_libraries_in_fresh_processes(tmp_path):
    """``benchmarks.memory --quick``: each model saved by both libraries, then loaded and used (and trained a step) in a
    process of its own, tformer beside Hugging Face: the load's peak, the peak while decoding and after it, each × the
    model's tensors; HF's dynamic int8 where it is measured (the Llama) and none elsewhere; tformer's int8 tensors (its
    packings included) under three quarters of float32's bytes (tiny tables stay float); the commit measured named."""
    from benchmarks.__main__ import run
    from benchmarks.memory_laptop import weight_bytes

    report = run("memory", ["--quick", "--out", str(tmp_path), "--models", "smollm2", "marian"])
    assert report["benchmark"] == "memory" and set(report["results"]) == {"smollm2", "marian"}
    assert report["measured"]["commit"] and report["machine"]["cpu"]["machine_class"]
    for name, row in report["results"].items():
        cells = [row[k] for k in ("fp32", "int8", "hf_fp32", "hf_int8")] + list(row["train"].values())
        assert not [c["error"] for c in cells if c is not None and "error" in c]  # each measurement ran
        assert row["fp32"]["tensor_bytes"]["total"] > 0 and 0 < row["ratio_tensors"] < 0.75
        assert row["fp32"]["resident_trimmed_mb"] > 0
        assert (row["hf_int8"] is None) == (name != "smollm2")
        for key in ("fp32", "int8", "hf_fp32", "hf_int8"):
            r = row[key]
            if r is None:
                continue
            assert r["lib"] == ("hf" if key.startswith("hf") else "tformer") and r["peak_method"].startswith("VmHWM")
            assert r["load_peak_mb"] > 0 and r["work_peak_mb"] >= r["resident_mb"] - 0.5
            assert r["resident_second_mb"] > 0 and r["x_weights"]["resident_second"] > 0
            assert r["x_weights"]["load_peak"] == pytest.approx(
                r["load_peak_mb"] / (r["tensor_bytes"]["total"] / 2**20)
            )
        same = row["hf_fp32"]["tensor_bytes"]["total"] / row["fp32"]["tensor_bytes"]["total"]
        assert 0.8 < same < 1.25  # the same model in both libraries
        train = row["train"]
        assert train["tformer"]["step_peak_mb"] > 0 and train["hf"]["step_peak_mb"] > 0
        assert train["tformer"]["after_step_mb"] > 0 and row["ratio_train_peak"] > 0
    table = (tmp_path / "memory.md").read_text()
    for heading in ("## Load", "## Decoding", "## One training step", "## tformer, float32 and int8"):
        assert heading in table
    assert "| model | precision | tformer | HF |" in table and "| model | resident fp32 MB |" in table
    assert 1.70e9 < weight_bytes() / 4 < 1.72e9  # --laptop's model (not run here): SmolLM2-1.7B's parameter count


def test_finetune_measures_lora_and_full_in_both_libraries(tmp_path):
    """``benchmarks.finetune --quick``: tformer full and LoRA, HF full and HF + PEFT LoRA and the activations probe,
    each in a fresh process with its peak, resident set and step times; the same trainable parameters in both
    libraries (LoRA: the same pairs); tformer's adapter read by PEFT gives its logits; size-dependent goals not judged."""
    pytest.importorskip("peft")
    from benchmarks.__main__ import run
    from benchmarks.finetune_child import KINDS

    report = run("finetune", ["--quick", "--out", str(tmp_path)])
    assert report == json.loads((tmp_path / "finetune.json").read_text())
    assert report["benchmark"] == "finetune" and report["machine"]["quick"] is True
    assert report["measured"]["commit"] and report["machine"]["cpu"]["machine_class"]
    rows = report["results"]
    assert set(rows) == set(KINDS) and not [r["error"] for r in rows.values() if "error" in r]
    for r in rows.values():
        assert r["peak_method"].startswith("VmHWM") and r["peak_mb"] > 0 and r["weights_bytes"] > 0
        assert r["peak_mb"] >= r["first_step_peak_mb"] and len(r["step_s"]) == report["config"]["repeats"]
        assert 0 < r["step_s_min"] <= r["step_s_median"]
    assert rows["tformer_full"]["trainable_params"] == rows["hf_full"]["trainable_params"] == report["config"]["params"]
    lora = rows["tformer_lora"]["trainable_params"]
    assert lora == rows["hf_lora"]["trainable_params"] and 0 < lora < rows["tformer_full"]["trainable_params"]
    assert rows["activations"]["trainable_params"] == 0
    s = report["summary"]
    assert s["activations_mb"] > 0 and s["weights_mb"] > 0 and s["lora_over_full_step"] > 0
    assert s["lora_peak_x_weights_plus_activations"] == pytest.approx(
        rows["tformer_lora"]["peak_mb"] / (s["weights_mb"] + s["activations_mb"])
    )
    check = report["adapter_check"]
    assert check["max_abs_diff"] <= 1e-5 and check["adapter_effect"] > 1e-2  # equal logits, and not trivially
    assert [g["met"] for g in report["goals"]] == [None, None, True]  # --quick judges the adapter check only
    table = (tmp_path / "finetune.md").read_text()
    for heading in ("## Fine-tuning steps", "## Ratios", "## Adapter check", "## Goals (issue 46)"):
        assert heading in table
    assert "| tformer LoRA |" in table and "| HF + PEFT LoRA |" in table


def test_serve_measures_first_token_and_twenty_clients(tmp_path):
    """``benchmarks.serve --quick``: the server's streamed first token beside the library's on the same prompt (both
    measured, their ratio the medians'), and 20 concurrent streaming clients each answered completely, as alone."""
    pytest.importorskip("openai")
    from benchmarks.__main__ import run

    report = run("serve", ["--quick", "--out", str(tmp_path)])
    assert report == json.loads((tmp_path / "serve" / "serve.json").read_text())
    assert len(report["first_token_library_s"]) == len(report["first_token_server_s"]) == 3
    assert all(t > 0 for t in report["first_token_library_s"] + report["first_token_server_s"])
    assert report["first_token_ratio"] == pytest.approx(
        report["first_token_server_median_s"] / report["first_token_library_median_s"]
    )
    together = report["concurrent"]
    assert together["clients"] == 20 and together["complete_and_equal"] == 20
    assert "Ratio server ÷ library" in (tmp_path / "serve" / "serve.md").read_text()


def test_data_prepares_trains_and_measures_beside_nanogpt(tmp_path):
    """``benchmarks.data --quick --sizes 2``: a corpus prepared, trained on and read beside nanoGPT's prepare + memmap,
    and 2,000 translation pairs, each measurement in a fresh process; every figure the table and the goals use is
    there (the goals are judged, not asserted: timings are the full run's to say; one size here, as each costs five
    processes: that memory stays flat as the corpus grows is tests/test_data_prepare.py's)."""
    from benchmarks.__main__ import run

    report = run("data", ["--quick", "--sizes", "2", "--out", str(tmp_path)])
    assert report == json.loads((tmp_path / "data.json").read_text())
    assert report["machine"]["quick"] is True and report["machine"]["cpu"]["machine_class"]
    rows = report["results"]
    assert [r["size_mb"] for r in rows] == [2] and report["model_training_peak_mb"] > 0
    for r in rows:
        assert r["tokens"] > 0 and r["prepare_seconds"] > 0 and r["prepare_peak_mb"] > 0 and r["train_peak_mb"] > 0
        # a tiny model's step may read 0 s: the log's elapsed_s is to 0.01 s (the full run's steps are ~0.3 s)
        assert r["startup_seconds"] > 0 and r["step_seconds"] >= 0 and r["batch_ms"] > 0
        assert r["nanogpt_prepare_seconds"] > 0 and r["nanogpt_batch_ms"] > 0
    assert set(report["goals"]) >= {"second run start-up ≤ 5 s", "prepare ≥ 10 MB/s per core (byte-level BPE)"}
    (pairs,) = report["pairs"]  # translation: 2,000 pairs prepared and trained on
    assert pairs["pairs"] > 1500 and pairs["train_peak_mb"] > 0 and pairs["model_peak_mb"] > 0
    assert pairs["prepare_seconds"] > 0 and pairs["step_seconds"] >= 0 and pairs["startup_seconds"] > 0
    table = (tmp_path / "data.md").read_text()
    assert "| 2 MB |" in table and "nanoGPT prepare s" in table and "| 2,000 |" in table


def test_fsdp_memory_measures_every_process(tmp_path):
    """``benchmarks.fsdp_memory --quick``: one process, DDP's two and --fsdp's two, each process's memory read by
    itself (set-up peak, resident at the first step, training peak) and each rank held against DDP's same rank."""
    pytest.importorskip("torch.distributed")
    from benchmarks.__main__ import run

    report = run("fsdp_memory", ["--quick", "--out", str(tmp_path)])
    assert report == json.loads((tmp_path / "fsdp_memory.json").read_text())
    results = report["results"]
    ranks = {name: [r["rank"] for r in rows] for name, rows in results.items()}
    assert ranks == {
        "one process (2 batches accumulated)": [0],
        "DDP, 2 processes": [0, 1],
        "--fsdp, 2 processes": [0, 1],
    }
    for rows in results.values():
        for r in rows:
            assert r["baseline_mb"] > 0 and r["training_peak_mb"] > 0 and r["setup_peak_mb"] >= 0
            assert r["ratio_to_ddp"]["training_peak_mb"] > 0
    assert all(r["ratio_to_ddp"]["training_peak_mb"] == 1.0 for r in results["DDP, 2 processes"])
    assert "| --fsdp, 2 processes | 1 |" in (tmp_path / "fsdp_memory.md").read_text()


def test_data_s_work_directory_is_never_a_users_folder(tmp_path, capfd):
    """--work gets corpora written and caches deleted by name: a folder holding anything else is refused before any
    work, its files kept; a new or empty one, or one the benchmark used before, is taken."""
    from benchmarks.__main__ import main as bench_main
    from benchmarks.data import _work_dir

    mine = tmp_path / "mine"
    (mine / "pc-2000").mkdir(parents=True)  # a name the benchmark deletes
    (mine / "pc-2000" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as stop:
        bench_main(["data", "--quick", "--work", str(mine), "--out", str(tmp_path / "out")])
    err = capfd.readouterr().err
    assert stop.value.code == 2 and "holds pc-2000: this benchmark writes and deletes" in err and "Traceback" not in err
    assert (mine / "pc-2000" / "notes.txt").read_text() == "mine"
    assert _work_dir(str(tmp_path / "new")) == str(tmp_path / "new")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / ".tformer-output.json").write_text('{"written_by": "tformer benchmarks.data --work"}')
    (tmp_path / "used" / "corpus-1mb.txt").write_text("an earlier run's")
    assert _work_dir(str(tmp_path / "used")) == str(tmp_path / "used")
