"""LoRA (tformer.nn.lora), its PEFT adapter (tformer.hf.peft) and fine-tuning from a pretrained model (``--init``,
tformer.finetune, tformer.lm.sft), issue 46 items 1 and 2.

Tiny random Hugging Face models saved by ``transformers`` (tests/tiny_chat_models.py): a SmolLM2-like Llama with its
chat template, a Qwen2 (Q/K/V bias, tied), a GPT-2 (one c_attn matrix). The pairs tformer trains are PEFT's pairs:
``peft`` reads the adapter a run writes and gives tformer's logits; the fast kernels and ``torch.compile`` give the
reference numbers with LoRA present; the base weights never change; a LoRA run resumes exactly.
"""

import json

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

import tformer  # noqa: E402
import tiny_chat_models as tiny  # noqa: E402
from tformer.cli import main  # noqa: E402
from tformer.hf.peft import fused_qkv, load_adapter, save_adapter  # noqa: E402
from tformer.lm.sft import IGNORE, encode_conversation, read_conversations  # noqa: E402
from tformer.nn.lora import LoraConfig, LoRALinear, add_lora, has_lora, lora_layers, merge_lora, target_names  # noqa: E402

MAKERS = {"llama": tiny.llama_chat_dir, "qwen2": tiny.qwen_chat_dir, "gpt2": tiny.gpt2_dir, "neox": tiny.gpt_neox_dir}


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("bases")
    return {name: make(root / name) for name, make in MAKERS.items()}


@pytest.fixture(scope="module")
def sft_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sft") / "sft.jsonl"
    lines = [
        {"prompt": f"What is {a} plus {b}?", "response": f"{a} plus {b} is {a + b}."}
        for a in range(1, 9)
        for b in range(1, 5)
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def _randomize(model: nn.Module, seed: int = 1) -> None:
    """B starts at 0 (the update is nothing); tests give it values so that a misplaced pair shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in lora_layers(model).values():
            for b in layer.lora_B.values():
                b.copy_(torch.randn(b.shape, generator=g) * 0.3)


def _ids(vocab: int, shape=(2, 11)) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(3))


# ------------------------------------------------------------------------------------------------ the layer


def test_a_pair_starts_at_zero_and_each_part_updates_only_its_rows():
    torch.manual_seed(0)
    base = nn.Linear(8, 12)
    layer = LoRALinear(base, {"q_proj": (0, 4), "v_proj": (8, 12)}, r=2, alpha=6, dropout=0.0)
    x = torch.randn(3, 8)
    assert torch.equal(layer(x), base(x))  # B = 0: exactly the pretrained layer
    _randomize(nn.ModuleDict({"l": layer}))
    expected = base(x).detach().clone()
    for part, (start, end) in layer.parts.items():  # PEFT's formula, one pair per part
        expected[:, start:end] += 3.0 * x @ layer.lora_A[part].T @ layer.lora_B[part].T
    torch.testing.assert_close(layer(x), expected)
    assert torch.equal(layer(x)[:, 4:8], base(x)[:, 4:8])  # K's rows: no pair, no change
    torch.testing.assert_close(layer.forward_rows(x, 4, 12), layer(x)[:, 4:12])  # cross-attention's K/V rows


def test_merge_gives_the_same_function_with_plain_linear_layers(bases):
    model = tformer.load(bases["llama"], fast=False).model
    add_lora(model, LoraConfig(r=4, alpha=8, dropout=0.0, targets=("*",)))
    _randomize(model)
    x = _ids(model.config.vocab_size)
    before = model(x)
    weight = model.decoder.layers[0].self_attn.qkv_proj.weight
    merge_lora(model)
    assert not has_lora(model)
    assert type(model.decoder.layers[0].self_attn.qkv_proj) is nn.Linear
    assert model.decoder.layers[0].self_attn.qkv_proj.weight is weight  # the same Parameter, merged in place
    torch.testing.assert_close(model(x), before, atol=1e-5, rtol=1e-5)


def test_only_the_pairs_train(bases):
    model = tformer.load(bases["llama"], fast=False).model.train()
    config = add_lora(model, LoraConfig(r=2, targets=("attn.q_proj", "attn.v_proj")))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert config.layers == {f"decoder.layers.{i}.self_attn.qkv_proj": ["q_proj", "v_proj"] for i in range(2)}


def test_target_names_follow_the_hugging_face_layout(bases):
    llama = tformer.load(bases["llama"]).model
    gpt2 = tformer.load(bases["gpt2"]).model
    assert target_names(llama, fused_qkv(llama.config)) == [
        "attn.q_proj",
        "attn.k_proj",
        "attn.v_proj",
        "attn.out_proj",
        "ffn.gate_proj",
        "ffn.up_proj",
        "ffn.down_proj",
    ]
    assert target_names(gpt2, fused_qkv(gpt2.config)) == [
        "attn.qkv_proj",
        "attn.out_proj",
        "ffn.linear1",
        "ffn.linear2",
    ]
    with pytest.raises(ValueError, match=r"'attn\.q_proj' matches no layer .*one matrix.*\['attn\.qkv_proj'"):
        add_lora(gpt2, LoraConfig(targets=("attn.q_proj",), fused_qkv=True))
    with pytest.raises(ValueError, match=r"'mlp\.\*' matches no layer"):
        add_lora(llama, LoraConfig(targets=("mlp.*",)))


# ------------------------------------------------------------------------------------------------ PEFT


@pytest.mark.parametrize(
    "name, targets",
    [
        ("llama", ("attn.q_proj", "attn.v_proj", "ffn.*")),
        ("qwen2", ("*",)),
        ("gpt2", ("attn.*", "ffn.linear1")),
        ("neox", ("attn.qkv_proj", "ffn.linear2")),  # query_key_value's rows grouped by head: B's are regrouped
    ],
)
def test_the_adapter_is_peft_s_and_gives_peft_s_logits(bases, tmp_path, name, targets):
    base = bases[name]
    model = tformer.load(base, fast=False).model
    add_lora(model, LoraConfig(r=4, alpha=8, dropout=0.0, targets=targets, fused_qkv=fused_qkv(model.config)))
    _randomize(model)
    adapter = save_adapter(model, tmp_path / "adapter", base)
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4 and config["lora_alpha"] == 8
    assert config["fan_in_fan_out"] == (name == "gpt2")
    x = _ids(model.config.vocab_size)
    hf = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        plain = hf(x).logits
    theirs = peft.PeftModel.from_pretrained(hf, adapter).eval()  # puts the pairs into hf itself
    with torch.no_grad():
        torch.testing.assert_close(model(x), theirs(x).logits, atol=1e-5, rtol=1e-5)
        assert (model(x) - plain).abs().max() > 1e-2  # the pairs do change the logits
    again = load_adapter(tformer.load(base, fast=True).model, adapter)  # a PEFT adapter read back, fast kernels
    with torch.no_grad():
        torch.testing.assert_close(again(x), model(x), atol=1e-5, rtol=1e-5)


def test_an_adapter_peft_made_loads_in_tformer_on_its_base(bases, tmp_path):
    """The other direction: a LoRA adapter trained with peft (its own names, its q_proj and v_proj) is read by
    tformer.load from the adapter directory alone, the base found by base_model_name_or_path."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(bases["llama"], dtype=torch.float32)
    config = peft.LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0)
    model = peft.get_peft_model(hf, config)
    torch.manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    model.save_pretrained(tmp_path / "adapter")
    settings = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    settings["base_model_name_or_path"] = str(bases["llama"])
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps(settings))
    x = _ids(hf.config.vocab_size)
    with torch.no_grad():
        theirs = model.eval()(x).logits
    # Merged, B·A is folded into W, which rounds apart from PEFT's two products: up to 1.4e-5 on logits of up to 8.2
    # (float32, amx class and under AVX2 alike), so the bound is 1e-5 of the logits' size. Unmerged, they are equal.
    scale = theirs.abs().max().item()
    for merge in (True, False):
        ours = tformer.load(tmp_path / "adapter", merge=merge).model
        assert has_lora(ours) != merge
        torch.testing.assert_close(ours(x), theirs, atol=1e-5 * scale, rtol=1e-5)
    settings["base_model_name_or_path"] = "HuggingFaceTB/SmolLM2-135M"
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps(settings))
    with pytest.raises(ValueError, match="base_model_name_or_path .* is not a local directory"):
        tformer.load(tmp_path / "adapter")


@pytest.mark.parametrize(
    "settings, refused",
    [
        (dict(target_modules=["q_proj"], modules_to_save=["lm_head"]), "modules_to_save=.*is not supported"),
        (
            dict(target_modules=["q_proj", "embed_tokens"]),
            r"embed_tokens\..* is not a LoRA pair of a linear projection",
        ),
    ],
)
def test_an_adapter_with_more_than_linear_pairs_is_refused_not_cut(bases, tmp_path, settings, refused):
    """PEFT can also save whole modules (``modules_to_save``) and embeddings' pairs; tformer applies neither, so it
    refuses the adapter in one line saying what to do instead of running a model PEFT would not run."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(bases["llama"], dtype=torch.float32)
    peft.get_peft_model(hf, peft.LoraConfig(r=4, lora_alpha=8, **settings)).save_pretrained(tmp_path / "adapter")
    if "modules_to_save" in settings:  # the tensors alone, as an older writer might leave them: refused as well
        config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
        (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps({**config, "modules_to_save": None}))
        with pytest.raises(ValueError, match="lm_head.* is not a LoRA pair of a linear projection.*merge_and_unload"):
            load_adapter(tformer.load(bases["llama"]).model, tmp_path / "adapter")
        (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=refused):
        load_adapter(tformer.load(bases["llama"]).model, tmp_path / "adapter")


def test_an_adapter_with_a_foreign_layer_is_refused(bases, tmp_path):
    model = tformer.load(bases["llama"], fast=False).model
    add_lora(model, LoraConfig(r=2, targets=("attn.q_proj",)))
    adapter = save_adapter(model, tmp_path / "a", bases["llama"])
    gpt2 = tformer.load(bases["gpt2"]).model
    with pytest.raises(ValueError, match="names no projection of this model"):
        load_adapter(gpt2, adapter)


# ------------------------------------------------------------------------------------------------ kernels


def test_the_fast_kernels_and_compile_give_the_reference_numbers_with_lora(bases):
    reference = tformer.load(bases["llama"], fast=False).model
    add_lora(reference, LoraConfig(r=4, dropout=0.0, targets=("attn.*", "ffn.up_proj")))
    _randomize(reference)
    x = _ids(reference.config.vocab_size)
    want = reference(x)
    fast = tformer.load(bases["llama"], fast=True).model
    add_lora(fast, LoraConfig(r=4, dropout=0.0, targets=("attn.*", "ffn.up_proj")))
    fast.load_state_dict(reference.state_dict())
    tformer.fast.speed_up(fast)  # what the Trainer chooses
    torch.testing.assert_close(fast(x), want, atol=1e-5, rtol=1e-5)
    compiled = torch.compile(fast.train(), backend="aot_eager", fullgraph=True)
    fast.decoder.layers[0].self_attn.qkv_proj.dropout.p = 0.0
    out = compiled(x)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    out.float().pow(2).mean().backward()
    layer = fast.decoder.layers[0].self_attn.qkv_proj
    assert layer.lora_B["q_proj"].grad is not None and layer.weight.grad is None


def test_decoding_with_unmerged_pairs_matches_the_reference_kernels(bases, tmp_path):
    model = tformer.load(bases["llama"], fast=False).model
    add_lora(model, LoraConfig(r=4, dropout=0.0, targets=("*",)))
    _randomize(model)
    model.save_pretrained(tmp_path / "m")
    tformer.load(bases["llama"]).tokenizer.save(tmp_path / "m")
    texts = []
    for fast in (True, False):
        m, tok = tformer.lm.load(tmp_path / "m", fast=fast)
        texts.append(tformer.lm.generate(m, tok, "The quick", 12, tformer.generation.SamplingConfig(False)))
    loaded = tformer.load(tmp_path / "m", merge=False, fast=True)
    assert has_lora(loaded.model)
    out = []
    tformer.lm.generate(
        loaded.model, loaded.tokenizer, "The quick", 12, tformer.generation.SamplingConfig(False), on_text=out.append
    )
    assert texts[0] == texts[1] == "".join(out)


def test_a_saved_lora_model_loads_back_with_its_pairs_and_merged(bases, tmp_path):
    model = tformer.load(bases["qwen2"], fast=False).model
    add_lora(model, LoraConfig(r=3, alpha=5, dropout=0.0, targets=("attn.v_proj", "ffn.down_proj")))
    _randomize(model)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["lora"]["r"] == 3 and "decoder.layers.1.ff.down_proj" in config["lora"]["layers"]
    x = _ids(model.config.vocab_size)
    back = type(model).from_pretrained(tmp_path)
    assert has_lora(back)
    torch.testing.assert_close(back(x), model(x))
    merged = tformer.load(tmp_path, strict=False).model  # tformer.load folds the pairs in: plain layers, fast kernels
    assert not has_lora(merged)
    torch.testing.assert_close(merged(x), model(x), atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------------ instruction data


def test_only_the_answers_are_learned_and_the_prompt_is_what_chat_feeds(bases):
    tok = tformer.load(bases["llama"]).tokenizer
    messages = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there."},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Goodbye."},
    ]
    ids, labels = encode_conversation(tok, messages)
    fast = transformers.AutoTokenizer.from_pretrained(bases["llama"])
    assert ids == fast.apply_chat_template(messages, tokenize=True, return_dict=False)  # transformers' ids
    learned = tok.decode([i for i, y in zip(ids, labels) if y != IGNORE], skip_special_tokens=False)
    assert learned == "Hi there.<|im_end|>\nGoodbye.<|im_end|>\n"
    prompt = fast.apply_chat_template(messages[:1], tokenize=True, add_generation_prompt=True, return_dict=False)
    assert ids[: len(prompt)] == prompt and all(y == IGNORE for y in labels[: len(prompt)])


def test_without_a_template_a_prompt_and_response_is_prompt_then_answer(bases):
    tok = tformer.load(bases["gpt2"]).tokenizer
    ids, labels = encode_conversation(tok, [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}])
    prompt = tok.encode("2+2?", add_special_tokens=True)
    assert ids == prompt + tok.encode("4") + [tok.eos_id]
    assert labels == [IGNORE] * len(prompt) + tok.encode("4") + [tok.eos_id]
    with pytest.raises(ValueError, match="no chat template"):
        encode_conversation(
            tok,
            [
                {"role": "system", "content": "x"},
                *[{"role": "user", "content": "y"}] * 1,
                {"role": "assistant", "content": "z"},
            ],
        )


def test_instruction_files_are_read_one_kind_per_file(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a", "response": "b"}\n{"messages": [{"role": "user", "content": "c"}]}\n')
    with pytest.raises(ValueError, match=r"d\.jsonl:2: a 'messages' line in a file of 'prompt' lines"):
        read_conversations(path)
    path.write_text('{"messages": [{"role": "user", "content": "c"}]}\n')
    with pytest.raises(ValueError, match="no assistant turn"):
        read_conversations(path)
    path.write_text('{"text": "plain"}\n')
    assert read_conversations(path) is None


# ------------------------------------------------------------------------------------------------ train lm --init


def _train(*args: str) -> int:
    return main(["train", "lm", "--no-progress", "--precision", "fp32", *args])


def test_a_lora_run_learns_from_the_pretrained_start_and_writes_a_peft_adapter(bases, sft_file, tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        _train(
            "--init",
            str(bases["llama"]),
            "--data",
            str(sft_file),
            "--out",
            str(out),
            "--lora-r",
            "4",
            "--max-steps",
            "30",
            "--eval-every",
            "15",
            "--lr",
            "3e-3",
        )
        == 0
    )
    err = capsys.readouterr().out
    assert "LoRA r 4, alpha 8" in err and "trainable parameters of" in err and "a tformer model" not in err
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    evals = [r for r in records if "val_loss" in r]
    assert evals[0]["step"] == 0 and evals[-1]["val_loss"] < evals[0]["val_loss"]  # lower than the pretrained start
    assert (out / "best" / "adapter_config.json").is_file()
    base = transformers.AutoModelForCausalLM.from_pretrained(bases["llama"], dtype=torch.float32)
    theirs = peft.PeftModel.from_pretrained(base, out / "best").eval()
    ours = tformer.load(out).model  # merged
    x = _ids(ours.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x).logits, atol=1e-5, rtol=1e-5)
    # the base weights are those of --init, bit for bit
    trained = tformer.load(out, merge=False).model
    start = tformer.load(bases["llama"]).model
    for name, layer in lora_layers(trained).items():
        assert torch.equal(layer.weight, start.get_submodule(name).weight)
    # export --to hf of the merged run loads in transformers with the same logits
    assert main(["export", str(out), "--to", "hf", str(tmp_path / "hf")]) == 0
    exported = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32)
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "hf").chat_template == tiny.SMOLLM2_TEMPLATE
    with torch.no_grad():
        torch.testing.assert_close(exported(x).logits, ours(x), atol=1e-5, rtol=1e-5)
    assert main(["merge", str(out), str(tmp_path / "merged")]) == 0
    merged = tformer.load(tmp_path / "merged").model
    torch.testing.assert_close(merged(x), ours(x), atol=1e-5, rtol=1e-5)
    capsys.readouterr()
    assert main(["info", str(out)]) == 0  # info says the run is LoRA's, and where its adapter is
    lora = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("lora ")]
    assert (
        len(lora) == 1 and "rank 4" in lora[0] and "0.05, 8 pairs (merged" in lora[0] and "PEFT adapter:" in lora[0]
    ), lora
    assert main(["info", str(tmp_path / "merged")]) == 0 and "  lora " not in capsys.readouterr().out
    adapter = tmp_path / "adapter"  # the PEFT adapter alone, as a user downloads one: info says it is one
    adapter.mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (adapter / name).write_bytes((out / "best" / name).read_bytes())
    assert main(["info", str(adapter)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("PEFT LoRA adapter: rank 4, alpha 8.0, dropout 0.05 on k_proj, o_proj, q_proj, v_proj, on")
    assert first.endswith(f"on the base {bases['llama'].resolve()}; that base with the pairs merged into it:"), first
    # LoRA again from that adapter: its pairs are in the new run's base weights, which PEFT would not put under the
    # new pairs (it loads base_model_name_or_path alone), so no adapter is written, and the note says what to do
    capsys.readouterr()
    again = ["--init", str(out / "best"), "--data", str(sft_file), "--out", str(tmp_path / "again"), "--lora-r", "2"]
    assert _train(*again, "--max-steps", "1") == 0
    said = capsys.readouterr().out
    assert "no PEFT adapter is written beside the best model: it started from the PEFT adapter" in said
    assert "merge that adapter into its base first" in said
    assert not (tmp_path / "again" / "best" / "adapter_config.json").exists()
    # LoRA on tformer's own model (the merged one): its adapter is written, and said to be tformer's alone to load
    merged = ["--init", str(tmp_path / "merged"), "--data", str(sft_file), "--lora-r", "2", "--max-steps", "1"]
    assert _train(*merged, "--out", str(tmp_path / "on-merged")) == 0
    said = capsys.readouterr().out
    assert f"names {tmp_path / 'merged'} as its base, a tformer model: tformer loads it; for PEFT" in said, said
    assert (tmp_path / "on-merged" / "best" / "adapter_config.json").is_file()
    assert tformer.load(tmp_path / "on-merged" / "best").model is not None


def test_a_lora_run_resumes_exactly(bases, sft_file, tmp_path, monkeypatch):
    """Resumed as `--out RUN --resume` alone, its settings from OUT/config.yaml: an --init given as a relative path
    is the same directory (the run keeps it absolute)."""
    monkeypatch.chdir(bases["llama"].parent)
    common = [
        "--init",
        bases["llama"].name,
        "--data",
        str(sft_file),
        "--lora-r",
        "4",
        "--eval-every",
        "5",
        "--schedule",
        "constant",
        "--lr",
        "1e-3",
    ]
    assert _train(*common, "--out", str(tmp_path / "a"), "--max-steps", "5") == 0
    assert _train(*common, "--out", str(tmp_path / "b"), "--max-steps", "10") == 0
    monkeypatch.chdir(tmp_path)  # elsewhere: the relative name would be another directory, or none
    assert main(["train", "lm", "--out", str(tmp_path / "a"), "--max-steps", "10", "--resume"]) == 0
    a = tformer.load(tmp_path / "a", merge=False).model.state_dict()
    b = tformer.load(tmp_path / "b", merge=False).model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # other conversations: refused, as a changed text is (they went on in silence)
    other = tmp_path / "other.jsonl"
    other.write_text(sft_file.read_text(encoding="utf-8").replace("plus", "and"), encoding="utf-8")
    swap = {str(sft_file): str(other), bases["llama"].name: str(bases["llama"])}  # (the cwd is another one now)
    moved = [swap.get(word, word) for word in common]
    assert _train(*moved, "--out", str(tmp_path / "a"), "--max-steps", "12", "--resume") == 2


def test_averaging_a_lora_run_averages_its_updates_and_writes_their_adapter(bases, sft_file, tmp_path, capsys):
    """The mean of the checkpoints' updates B·A, not mean(B)·mean(A): their pairs side by side (rank K·r), as a
    model and as a PEFT adapter that PEFT puts on the run's base with the same logits."""
    run, avg = tmp_path / "run", tmp_path / "avg"
    words = ["--init", str(bases["llama"]), "--data", str(sft_file), "--out", str(run), "--lora-r", "4"]
    assert _train(*words, "--max-steps", "9", "--eval-every", "3", "--keep-checkpoints", "3", "--lr", "1e-2") == 0
    assert main(["average", str(run), str(avg), "--last", "2"]) == 0
    assert main(["average", str(run), str(avg), "--last", "3", "--overwrite"]) == 0  # its own files: replaced
    assert "LoRA: their pairs side by side (rank 3 x r" in capsys.readouterr().out
    kept = [tformer.load(run / "checkpoints" / f"step-{s:07d}", merge=False).model for s in (3, 6, 9)]
    averaged = tformer.load(avg, merge=False).model
    for name, layer in lora_layers(averaged).items():
        assert layer.r == 12 and layer.scaling == lora_layers(kept[0])[name].scaling
        mean = sum(lora_layers(m)[name].merged_weight().double() for m in kept) / 3
        torch.testing.assert_close(layer.merged_weight().double(), mean, atol=1e-6, rtol=0)
    config = json.loads((avg / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["base_model_name_or_path"]) == (12, 24, str(bases["llama"]))
    base = transformers.AutoModelForCausalLM.from_pretrained(bases["llama"], dtype=torch.float32)
    theirs = peft.PeftModel.from_pretrained(base, avg).eval()
    ours = tformer.load(avg).model
    x = _ids(ours.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x).logits, atol=1e-5, rtol=1e-5)
    # the separate means of A and B: another function, the one this replaced
    separate = tformer.load(run / "checkpoints" / "step-0000009", merge=False).model
    with torch.no_grad():
        for name, layer in lora_layers(separate).items():
            for p in layer.parts:
                layer.lora_A[p].copy_(sum(lora_layers(m)[name].lora_A[p] for m in kept) / 3)
                layer.lora_B[p].copy_(sum(lora_layers(m)[name].lora_B[p] for m in kept) / 3)
        assert (separate(x) - ours(x)).abs().max() > 1e-4


def test_continued_pretraining_from_a_gpt2_directory(bases, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text(" ".join(tiny.TEXTS * 20), encoding="utf-8")
    out = tmp_path / "r"
    assert (
        _train(
            "--init",
            str(bases["gpt2"]),
            "--data",
            str(text),
            "--out",
            str(out),
            "--max-steps",
            "20",
            "--eval-every",
            "10",
            "--lr",
            "1e-3",
            "--batch-size",
            "4",
            "--max-len",
            "32",
        )
        == 0
    )
    evals = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines() if "val_loss" in x]
    assert evals[0]["step"] == 0 and evals[-1]["val_loss"] < evals[0]["val_loss"]
    assert "fine-tuning all" in capsys.readouterr().out


def test_the_loss_counts_every_token_of_a_hugging_face_vocabulary():
    """tformer's own tokenizers keep id 1 for <pad>; a Hugging Face one uses it for a real token, which the
    continued-pretraining loss must count (positions past the end of the stream are what is skipped)."""
    from tformer.lm.task import LMTask, evaluate_stream

    class Model(nn.Module):
        config = type("C", (), {"max_len": 8})

        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(5))

        def forward(self, x):
            return self.w.expand(*x.shape, 5)

    stream = torch.tensor([1, 1, 2, 1, 3, 1, 1, 4, 1, 1])
    result = evaluate_stream(Model(), stream, None, max_len=4)
    assert result["tokens"] == len(stream) - 1 and "val_bpc" not in result
    tok = type("T", (), {"unit": None})()
    task = LMTask(tok, stream, stream[:0], 4, 2)
    loss, n = task.loss(Model(), torch.tensor([0, 3]))
    assert n == 8 and torch.isclose(loss, torch.tensor(8 * torch.log(torch.tensor(5.0)).item()))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--preset", "small"], "--preset small cannot be used with --init"),
        (["--tokenizer", "bpe"], "--tokenizer bpe cannot be used with --init"),
        (["--n-layers", "3"], "--n-layers 3 cannot be used with --init"),
        (["--lora-r", "2", "--lora-targets", "mlp.*"], "--lora-targets 'mlp.*' matches no layer"),
        (["--max-len", "4096"], "--max-len 4096 exceeds the --init model's context"),
    ],
)
def test_what_init_refuses_is_one_line(bases, sft_file, tmp_path, capsys, args, message):
    code = _train(
        "--init", str(bases["llama"]), "--data", str(sft_file), "--out", str(tmp_path / "r"), "--max-steps", "2", *args
    )
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_a_length_past_the_init_models_context_is_refused_before_the_corpus_is_prepared(bases, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("hello world. " * 200)
    cache = tmp_path / "cache"
    args = ["--init", str(bases["llama"]), "--data", str(text), "--out", str(tmp_path / "r"), "--max-steps", "2"]
    assert _train(*args, "--max-len", "4096", "--data-cache", str(cache)) == 2
    err = capsys.readouterr().err
    assert "--max-len 4096 exceeds the --init model's context" in err and "prepar" not in err
    assert not cache.exists() or not any(cache.rglob("manifest.json"))  # nothing tokenized into the cache


def test_instruction_data_or_lora_without_init_is_refused(sft_file, tmp_path, capsys):
    assert _train("--data", str(sft_file), "--out", str(tmp_path / "r"), "--max-steps", "2") == 2
    assert "is instruction data" in capsys.readouterr().err
    text = tmp_path / "t.txt"
    text.write_text("hello world " * 100)
    assert _train("--data", str(text), "--out", str(tmp_path / "r"), "--max-steps", "2", "--lora-r", "2") == 2
    assert "--lora-r 2 needs --init" in capsys.readouterr().err


@pytest.mark.parametrize("family", ["lm", "translation", "bert"])
@pytest.mark.parametrize(
    "flag, value", [("--lora-alpha", "32"), ("--lora-dropout", "0.1"), ("--lora-targets", "ffn.*")]
)
def test_a_lora_setting_without_a_rank_is_refused_not_ignored(tmp_path, capsys, family, flag, value):
    data = tmp_path / "data.txt"
    data.write_text("hello world\tbonjour le monde\n" * 50)
    argv = ["train", family, "--data", str(data), "--out", str(tmp_path / "r"), "--max-steps", "1", flag, value]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{flag} {value} is a LoRA setting" in line and "give --lora-r R" in line
    assert not (tmp_path / "r").exists()


def test_a_rank_too_large_for_the_width_is_said_and_the_count_is_of_pairs():
    """r·(in + out) ≥ in·out: the pairs cost what the weights do (a 64-wide model, r 64 on its attention), said
    with both counts; r 4 is not. The count is of pairs (2 per block here: one on the fused W_Q W_K W_V, one on
    W_O), not of the model's layers."""
    from tformer import GPT, GPTConfig
    from tformer.finetune import LoraSettings, add_adapters

    for r, noted in ((64, True), (4, False)):
        said: list[str] = []
        add_adapters(GPT(GPTConfig.preset("tiny", vocab_size=16)), LoraSettings(r=r), said.append)
        assert said[0].startswith(f"LoRA r {r}, alpha {2 * r}, dropout 0.05: 4 pairs (attn.")
        assert any(line.startswith(f"note: --lora-r {r} is too large") for line in said) == noted, said
    assert said == said[:1]
