"""``tformer.hf.export(model, dir)`` of a GPT: written in the Hugging Face layout, it loads with
``transformers.AutoModelForCausalLM.from_pretrained`` as the right class and gives our logits; ``from_hf`` brings it
back unchanged. What no Hugging Face config can hold is refused naming the field, before a file is written.
``save_pretrained(format="hf")`` is gone, with a line that names the export. (Every family, the tokenizer files and
the command: tests/test_hf_roundtrip.py.)"""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from safetensors.torch import load_file

transformers = pytest.importorskip("transformers")

from tformer import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer  # noqa: E402
from tformer.hf import export, from_hf  # noqa: E402

ATOL = 1e-5
BASE = dict(vocab_size=151, d_model=64, n_heads=4, n_layers=2, d_ff=96, max_len=48, dropout=0.0)
LLAMA = dict(norm="rmsnorm", ffn="swiglu", positional="rope", bias=False, activation="silu", n_kv_heads=2)
GEMMA = dict(  # Gemma 3's block: 1 + weight norms, four a layer, GeGLU, √D embeddings, its own score scale
    norm="rmsnorm",
    norm_weight_offset=1.0,
    ffn="geglu",
    positional="rope",
    bias=False,
    activation="gelu_tanh",
    n_kv_heads=2,
    head_dim=24,
    qk_norm=True,
    sandwich_norm=True,
    embed_scale=True,
    attn_scale=1 / 16,
    rope_base=1e6,
)

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
    "gemma3-local-global-softcap": (
        GEMMA | dict(sliding_window=4, sliding_window_pattern=2, rope_local_base=1e4, final_softcap=30.0),
        "Gemma3ForCausalLM",
    ),
    "gemma3-global-untied": (GEMMA | dict(tie_embeddings=False), "Gemma3ForCausalLM"),
    # RoPE with GPT-2's MLP (the presets shakespeare-char-6min and -30min-gelu): GPT-NeoX's sequential block
    "gpt-neox-tied": (dict(positional="rope", activation="gelu", rope_base=5e3), "GPTNeoXForCausalLM"),
    "gpt-neox-untied": (dict(positional="rope", tie_embeddings=False, attn_dropout=0.1), "GPTNeoXForCausalLM"),
    "gpt-neox-pythia": (  # Pythia's block: a parallel residual, a quarter of each head turned
        dict(positional="rope", parallel_residual=True, rope_dim=4, tie_embeddings=False),
        "GPTNeoXForCausalLM",
    ),
    # a table and head padded to 192 rows (--pad-vocab 64): written with the 151 words' rows only
    "gpt2-padded": (dict(vocab_multiple=64), "GPT2LMHeadModel"),
    "llama-padded-untied": (LLAMA | dict(vocab_multiple=64, tie_embeddings=False), "LlamaForCausalLM"),
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
    directory = export(ours, tmp_path_factory.mktemp(request.param) / "hf")
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
    names = sorted(p.name for p in directory.parent.iterdir())
    assert names == ["hf"]  # no temp directory left beside it
    files = ["config.json", "generation_config.json", "model.safetensors"]
    assert sorted(p.name for p in directory.iterdir()) == [".tformer-output.json", *files]
    assert json.loads((directory / ".tformer-output.json").read_text()) == {
        "written_by": "tformer export",
        "files": files,
    }
    config = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == [cls]
    special = {"GPT2LMHeadModel": "gpt2", "Gemma3ForCausalLM": "gemma3_text", "GPTNeoXForCausalLM": "gpt_neox"}
    assert config["model_type"] == special.get(cls, cls.removesuffix("ForCausalLM").lower())
    assert config["torch_dtype"] == config["dtype"] == "float32"
    assert config["tie_word_embeddings"] == ours.config.tie_embeddings
    weights = load_file(directory / "model.safetensors")
    head = "embed_out.weight" if cls == "GPTNeoXForCausalLM" else "lm_head.weight"  # (v4's name, which v5 reads)
    assert (head in weights) == (not ours.config.tie_embeddings)  # a tied head is stored once
    padding = ours.config.table_rows - ours.config.vocab_size  # rows of no word: not written
    tables = 1 if ours.config.tie_embeddings else 2
    assert all(t.shape[0] == ours.config.vocab_size for k, t in weights.items() if "wte" in k or "embed" in k)
    assert sum(t.numel() for t in weights.values()) == sum(p.numel() for p in ours.parameters()) - (
        tables * padding * ours.config.d_model
    )


def test_round_trip_through_from_hf(exported):
    ours, _, cls, theirs = exported
    back = from_hf(theirs)
    ids = _ids(seed=2)
    with torch.no_grad():
        assert torch.equal(back(ids), ours(ids))  # the same weights, bit for bit
    # attn_dropout: None reads back as the same rate, written out; GPT-2's and GPT-NeoX's MLPs drop nothing inside
    attn_dropout = ours.config.dropout if ours.config.attn_dropout is None else ours.config.attn_dropout
    ffn_dropout = 0.0 if cls in ("GPT2LMHeadModel", "GPTNeoXForCausalLM") else ours.config.ffn_dropout
    expected = ours.config.replace(attn_dropout=attn_dropout, ffn_dropout=ffn_dropout, vocab_multiple=1)
    assert back.config == expected


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
        (dict(positional="rope", qkv_bias=False), "qkv_bias"),  # GPT-NeoX's query_key_value has a bias
        (dict(positional="rope", rope_scaling=dict(rope_type="linear", factor=2.0)), "rope_scaling"),
        (dict(positional="rope", norm="rmsnorm"), "norm"),  # RMSNorm with an MLP: neither GPT-NeoX nor Llama
        (LLAMA | dict(parallel_residual=True), "parallel_residual"),  # GPT-NeoX's alone
        (LLAMA | dict(rope_dim=8), "rope_dim"),
        (dict(norm_first=False), "norm_first"),
        (dict(qkv_bias=False), "qkv_bias"),  # GPT-2's c_attn has a bias
        (dict(n_kv_heads=2), "n_kv_heads"),
        (dict(final_softcap=30.0), "final_softcap"),
        (LLAMA | dict(ffn="geglu"), "ffn"),
        (LLAMA | dict(bias=True, qkv_bias=False), "qkv_bias"),  # Llama's attention_bias covers W_Q...W_O at once
        (LLAMA | dict(qk_norm=True, bias=True), "bias"),
        (LLAMA | dict(sliding_window=4, bias=True), "bias"),
        (LLAMA | dict(sandwich_norm=True), "ffn"),  # sandwich norms are Gemma 3's, whose feed-forward is GeGLU
        (GEMMA | dict(attn_softcap=50.0), "attn_softcap"),  # Gemma 2's, which Gemma 3 never applies
        (GEMMA | dict(norm_scale=False), "norm_scale"),
        (LLAMA | dict(embed_scale=True), "embed_scale"),
        (LLAMA | dict(norm_weight_offset=1.0), "norm_weight_offset"),
        (LLAMA | dict(shift_tokens=1), "shift_tokens"),  # tformer's own (x-transformers')
    ],
)
def test_config_without_hf_layout_refused(tmp_path, fields, field):
    model = GPT(GPTConfig(**BASE, **fields))
    target = tmp_path / "out"
    with pytest.raises(ValueError, match=f"GPTConfig.{field}=.*has no Hugging Face layout") as refused:
        export(model, target)
    assert not target.exists()  # refused before anything is written
    if field == "shift_tokens":  # the Tiny Shakespeare recipes' models have it: the refusal says how to train without
        assert "`tformer train lm --shift-tokens 0` trains one without it" in str(refused.value)


@pytest.mark.parametrize(
    "model",
    [
        _random_gpt({}),
        Bert(BertConfig.preset("tiny", vocab_size=50)),
        Seq2SeqTransformer(Seq2SeqConfig.preset("tiny", src_vocab_size=50, tgt_vocab_size=50)),
    ],
    ids=["gpt", "bert", "seq2seq"],
)
def test_save_pretrained_hf_format_points_to_export(tmp_path, model):
    with pytest.raises(ValueError, match=r"format='hf'\) is gone: .*tformer.hf.export\(model, DIR, tokenizer\)"):
        model.save_pretrained(tmp_path / "out", format="hf")
    assert not (tmp_path / "out").exists()


def test_unknown_format_refused(tmp_path):
    with pytest.raises(ValueError, match="format must be 'tformer', got 'onnx'"):
        _random_gpt({}).save_pretrained(tmp_path / "out", format="onnx")
    assert not (tmp_path / "out").exists()


def test_bfloat16_model_written_as_bfloat16(tmp_path):
    model = _random_gpt(LLAMA).to(torch.bfloat16)
    out = export(model, tmp_path / "hf")
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert {t.dtype for t in load_file(out / "model.safetensors").values()} == {torch.bfloat16}
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert next(theirs.parameters()).dtype == torch.bfloat16
