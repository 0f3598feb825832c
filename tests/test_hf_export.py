"""``save_pretrained(dir, format="hf")``: a tformer GPT written in the Hugging Face layout loads with
``transformers.AutoModelForCausalLM.from_pretrained`` as the right class and gives our logits; ``from_hf`` brings it
back unchanged. What no Hugging Face config can hold is refused naming the field, before a file is written."""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from safetensors.torch import load_file

transformers = pytest.importorskip("transformers")

from tformer import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer  # noqa: E402
from tformer.interop import from_hf  # noqa: E402

ATOL = 1e-5
BASE = dict(vocab_size=151, d_model=64, n_heads=4, n_layers=2, d_ff=96, max_len=48, dropout=0.0)
LLAMA = dict(norm="rmsnorm", ffn="swiglu", positional="rope", bias=False, activation="silu", n_kv_heads=2)

# name -> (GPTConfig fields, the class transformers builds)
CASES = {
    "gpt2-tied": (dict(), "GPT2LMHeadModel"),
    "gpt2-untied-relu": (dict(tie_embeddings=False, activation="relu", pad_id=0), "GPT2LMHeadModel"),
    "llama-gqa-tied": (LLAMA, "LlamaForCausalLM"),
    "llama-mqa-untied-bias": (
        LLAMA | dict(n_kv_heads=1, bias=True, tie_embeddings=False, rope_base=5e5),
        "LlamaForCausalLM",
    ),
    "llama-head-dim-yarn": (
        LLAMA | dict(head_dim=24, rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=12)),
        "LlamaForCausalLM",
    ),
    "qwen2-qkv-bias": (LLAMA | dict(qkv_bias=True), "Qwen2ForCausalLM"),
    "qwen3-qk-norm": (LLAMA | dict(qk_norm=True, tie_embeddings=False), "Qwen3ForCausalLM"),
    "mistral-window": (LLAMA | dict(sliding_window=4), "MistralForCausalLM"),
}


def _random_gpt(fields, seed=0):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**BASE, **fields)).eval()
    with torch.no_grad():  # norms start at 1 and biases at 0: randomise so every weight matters
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def _ids(seed=1):
    return torch.randint(1, BASE["vocab_size"], (2, 13), generator=torch.Generator().manual_seed(seed))  # (B, T)


@pytest.fixture(scope="module", params=sorted(CASES))
def exported(request, tmp_path_factory):
    fields, cls = CASES[request.param]
    ours = _random_gpt(fields)
    directory = ours.save_pretrained(tmp_path_factory.mktemp(request.param), format="hf")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()
    return ours, directory, cls, theirs


def test_transformers_loads_the_right_class_with_our_logits(exported):
    ours, _, cls, theirs = exported
    assert type(theirs).__name__ == cls
    ids = _ids()
    with torch.no_grad():
        mine, hf = ours(ids), theirs(ids).logits  # (B, T, V)
    assert (mine - hf).abs().max().item() <= ATOL
    assert mine.abs().max().item() > 0.1


def test_written_files(exported):
    ours, directory, cls, _ = exported
    assert sorted(p.name for p in directory.iterdir()) == ["config.json", "model.safetensors"]  # no temp file left
    config = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == [cls]
    assert config["model_type"] == {"GPT2LMHeadModel": "gpt2"}.get(cls, cls.removesuffix("ForCausalLM").lower())
    assert config["torch_dtype"] == config["dtype"] == "float32"
    assert config["tie_word_embeddings"] == ours.config.tie_embeddings
    weights = load_file(directory / "model.safetensors")
    assert ("lm_head.weight" in weights) == (not ours.config.tie_embeddings)  # a tied head is stored once
    assert sum(t.numel() for t in weights.values()) == sum(p.numel() for p in ours.parameters())


def test_round_trip_through_from_hf(exported):
    ours, _, _, theirs = exported
    back = from_hf(theirs)
    ids = _ids(seed=2)
    with torch.no_grad():
        assert torch.equal(back(ids), ours(ids))  # the same weights, bit for bit
    # attn_dropout: None reads back as the same rate, written out
    assert back.config == ours.config.replace(attn_dropout=ours.config.dropout)


def test_default_format_is_tformers_own(tmp_path):
    model = _random_gpt(LLAMA)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "gpt"
    back = GPT.from_pretrained(tmp_path)
    assert torch.equal(back(_ids()), model(_ids()))


@pytest.mark.parametrize(
    "fields, field",
    [
        (dict(positional="sinusoidal"), "positional"),
        (dict(norm_first=False), "norm_first"),
        (dict(qkv_bias=False), "qkv_bias"),  # GPT-2's c_attn has a bias
        (dict(n_kv_heads=2), "n_kv_heads"),
        (dict(final_softcap=30.0), "final_softcap"),
        (LLAMA | dict(ffn="geglu"), "ffn"),
        (LLAMA | dict(bias=True, qkv_bias=False), "qkv_bias"),  # Llama's attention_bias covers W_Q...W_O at once
        (LLAMA | dict(qk_norm=True, bias=True), "bias"),
        (LLAMA | dict(sliding_window=4, bias=True), "bias"),
        (LLAMA | dict(sandwich_norm=True), "sandwich_norm"),
        (LLAMA | dict(embed_scale=True), "embed_scale"),
        (LLAMA | dict(norm_weight_offset=1.0), "norm_weight_offset"),
    ],
)
def test_config_without_hf_layout_refused(tmp_path, fields, field):
    model = GPT(GPTConfig(**BASE, **fields))
    target = tmp_path / "out"
    with pytest.raises(ValueError, match=f"GPTConfig.{field}=.*has no Hugging Face layout"):
        model.save_pretrained(target, format="hf")
    assert not target.exists()  # refused before anything is written


@pytest.mark.parametrize(
    "model",
    [
        Bert(BertConfig.preset("tiny", vocab_size=50)),
        Seq2SeqTransformer(Seq2SeqConfig.preset("tiny", src_vocab_size=50, tgt_vocab_size=50)),
    ],
    ids=["bert", "seq2seq"],
)
def test_models_without_hf_layout_refused(tmp_path, model):
    with pytest.raises(ValueError, match=f"{type(model).__name__} has no Hugging Face layout"):
        model.save_pretrained(tmp_path / "out", format="hf")
    assert not (tmp_path / "out").exists()


def test_unknown_format_refused(tmp_path):
    with pytest.raises(ValueError, match="format must be 'tformer' or 'hf', got 'onnx'"):
        _random_gpt({}).save_pretrained(tmp_path / "out", format="onnx")
    assert not (tmp_path / "out").exists()


def test_bfloat16_model_written_as_bfloat16(tmp_path):
    model = _random_gpt(LLAMA).to(torch.bfloat16)
    model.save_pretrained(tmp_path, format="hf")
    assert json.loads((tmp_path / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert {t.dtype for t in load_file(tmp_path / "model.safetensors").values()} == {torch.bfloat16}
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    assert next(theirs.parameters()).dtype == torch.bfloat16
