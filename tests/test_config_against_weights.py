"""A config.json is held against its weights before a model of its sizes is built, and judged in its own words
(issue 41, items 3 and 7).

* sizes: every size field of a Hugging Face config.json (Llama, GPT-2, Gemma 3, BERT, Marian; one file or sharded)
  and of tformer's own directories (GPT, int8 GPT, BERT, translator) that disagrees with the weights file's header
  is one line naming the field, the tensor and the file, before the model is built; ``vocab_size`` 150,000,000
  beside a 300-row table is refused in a process that cannot allocate 38 GB;
* words: a value our config refuses (a width not divisible by the heads, key/value heads that do not divide the
  heads, a model over the size limit, a table longer than allowed, a padding id outside the vocabulary) is said in
  the Hugging Face file's own field names, never GPTConfig's / BertConfig's / Seq2SeqConfig's.

The directories are tiny models written by ``tformer.hf.export`` and ``save_pretrained``; no ``transformers``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import tformer
from tformer import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer
from tformer.cli import main
from tformer.hf import export

SIZES = dict(d_model=16, n_heads=2, d_ff=32, max_len=32, dropout=0.0)
DECODERS = {
    "llama": dict(norm="rmsnorm", ffn="swiglu", positional="rope", bias=False, n_kv_heads=1, tie_embeddings=False),
    "gpt2": {},
    "gemma3": dict(
        norm="rmsnorm",
        norm_weight_offset=1.0,
        ffn="geglu",
        activation="gelu_tanh",
        positional="rope",
        bias=False,
        qk_norm=True,
        sandwich_norm=True,
        embed_scale=True,
        head_dim=8,
    ),
}


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory) -> dict[str, Path]:
    """Hugging Face directories of each architecture tformer reads (config.json + model.safetensors), and the Llama
    one sharded (an index and two shards)."""
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for name, options in DECODERS.items():
        torch.manual_seed(0)
        out[name] = export(GPT(GPTConfig(vocab_size=300, n_layers=2, **SIZES, **options)), root / name)
    out["bert"] = export(Bert(BertConfig(vocab_size=300, n_layers=2, **SIZES)), root / "bert")
    seq2seq = Seq2SeqConfig(src_vocab_size=300, tgt_vocab_size=300, n_encoder_layers=2, n_decoder_layers=2, **SIZES)
    out["marian"] = export(Seq2SeqTransformer(seq2seq.replace(share_embeddings=True)), root / "marian")
    sharded = out["llama_sharded"] = shutil.copytree(out["llama"], root / "llama_sharded")
    tensors = load_file(str(sharded / "model.safetensors"))
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in halves.items():
        save_file({k: tensors[k] for k in part}, str(sharded / file))
    weight_map = {k: file for file, part in halves.items() for k in part}
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (sharded / "model.safetensors").unlink()
    return out


@pytest.fixture(scope="module")
def own_dirs(tmp_path_factory) -> dict[str, Path]:
    """tformer's own model directories (config.json in tformer's words + model.safetensors)."""
    root = tmp_path_factory.mktemp("own")
    gpt = GPT(GPTConfig(vocab_size=300, n_layers=2, **SIZES))
    return {
        "gpt": gpt.save_pretrained(root / "gpt"),
        "int8": tformer.quantize(gpt, "int8").save_pretrained(root / "int8"),
        "bert": Bert(BertConfig(vocab_size=300, n_layers=2, n_segments=2, **SIZES)).save_pretrained(root / "bert"),
        "seq2seq": Seq2SeqTransformer(
            Seq2SeqConfig(src_vocab_size=300, tgt_vocab_size=200, n_encoder_layers=2, n_decoder_layers=2, **SIZES)
        ).save_pretrained(root / "seq2seq"),
    }


def _edited(directory: Path, tmp_path: Path, **changes) -> Path:
    work = shutil.copytree(directory, tmp_path / directory.name)
    config = json.loads((work / "config.json").read_text())
    config.update(changes)
    (work / "config.json").write_text(json.dumps(config))
    return work


@pytest.fixture
def nothing_is_built(monkeypatch):
    """Fail if a model layer is allocated outside the ``meta`` device: the check must come first."""
    from tformer.nn.layers import DecoderLayer, EncoderLayer

    for cls in (DecoderLayer, EncoderLayer, torch.nn.Embedding):
        original = cls.__init__

        def guarded(self, *args, __original=original, **kwargs):
            if torch.get_default_device().type != "meta":
                raise AssertionError(f"a {type(self).__name__} was built before the sizes were checked")
            __original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", guarded)


# ------------------------------------------------------------------------------------------------- sizes

# (directory, the config.json change, what the one line must hold: the field as the file names it, the tensor)
HF_SIZES = [
    ("llama", {"vocab_size": 3_000_000}, ["vocab_size=3000000", "'lm_head.weight'", "(300, 16)"]),
    ("llama", {"num_hidden_layers": 1000}, ["num_hidden_layers=1000", "2 layers", "'model.layers.1'"]),
    ("llama", {"num_hidden_layers": 1}, ["num_hidden_layers=1", "2 layers"]),
    ("llama", {"hidden_size": 32}, ["hidden_size=32", "(300, 16)"]),
    ("llama", {"intermediate_size": 48}, ["intermediate_size=48", "mlp.down_proj.weight"]),
    ("llama", {"num_key_value_heads": 2}, ["num_key_value_heads × head_dim=16", "self_attn.k_proj.weight"]),
    ("llama", {"head_dim": 4}, ["num_key_value_heads × head_dim=4", "self_attn.k_proj.weight"]),
    ("llama_sharded", {"vocab_size": 3_000_000}, ["vocab_size=3000000", "model-0000"]),
    ("llama_sharded", {"num_hidden_layers": 5}, ["num_hidden_layers=5", "model.safetensors.index.json"]),
    ("gpt2", {"vocab_size": 3_000_000}, ["vocab_size=3000000", "'transformer.wte.weight'"]),
    ("gpt2", {"n_positions": 64}, ["n_positions=64", "'transformer.wpe.weight'", "(32, 16)"]),
    ("gpt2", {"n_inner": 40}, ["n_inner=40", "mlp.c_"]),
    ("gpt2", {"n_layer": 1000}, ["n_layer=1000", "2 layers", "'transformer.h.1'"]),
    ("gemma3", {"vocab_size": 3_000_000}, ["vocab_size=3000000", "embed_tokens.weight"]),
    ("gemma3", {"head_dim": 16}, ["head_dim", "self_attn."]),
    ("bert", {"vocab_size": 3_000_000}, ["vocab_size=3000000", "word_embeddings.weight"]),
    ("bert", {"type_vocab_size": 7}, ["type_vocab_size=7", "token_type_embeddings.weight"]),
    ("bert", {"max_position_embeddings": 64}, ["max_position_embeddings=64", "position_embeddings.weight"]),
    ("bert", {"num_hidden_layers": 1000}, ["num_hidden_layers=1000", "2 layers", "encoder.layer.1"]),
    ("bert", {"intermediate_size": 48}, ["intermediate_size=48", "intermediate.dense"]),
    ("marian", {"vocab_size": 3_000_000, "decoder_vocab_size": 3_000_000}, ["vocab_size=3000000", "(300, 16)"]),
    ("marian", {"decoder_layers": 1000}, ["decoder_layers=1000", "2 layers", "decoder.layers.1"]),
    ("marian", {"encoder_ffn_dim": 48, "decoder_ffn_dim": 48}, ["ffn_dim=48", "fc"]),
    ("marian", {"d_model": 32}, ["d_model=32", "(d_model"]),
]


@pytest.mark.parametrize("kind, change, words", HF_SIZES, ids=lambda x: str(x))
def test_a_hugging_face_size_that_disagrees_with_the_weights_is_named_before_building(
    hf_dirs, tmp_path, nothing_is_built, kind, change, words
):
    work = _edited(hf_dirs[kind], tmp_path, **change)
    with pytest.raises(ValueError) as err:
        tformer.load(work)
    message = str(err.value)
    assert "config.json" in message and "\n" not in message, message
    for word in words:
        assert word in message, (word, message)


OWN_SIZES = [
    ("gpt", {"vocab_size": 3_000_000}, ["vocab_size=3000000", "'embed.token.weight'", "(300, 16)"]),
    ("gpt", {"n_layers": 1000}, ["n_layers=1000", "2 layers", "'decoder.layers.1'"]),
    ("gpt", {"d_ff": 40}, ["d_ff=40", "ff.linear1"]),
    ("gpt", {"max_len": 64}, ["max_len=64", "'embed.position.weight'"]),
    ("gpt", {"d_model": 32}, ["d_model=32", "(16,)"]),
    ("int8", {"vocab_size": 3_000_000}, ["vocab_size=3000000", "(300, 16)"]),
    ("int8", {"d_ff": 48}, ["d_ff=48", "ff.linear1"]),
    ("bert", {"n_segments": 5}, ["n_segments=5", "'embed.segment.weight'"]),
    ("bert", {"n_layers": 1000}, ["n_layers=1000", "2 layers", "'encoder.layers.1'"]),
    ("seq2seq", {"tgt_vocab_size": 3_000_000}, ["tgt_vocab_size=3000000", "'tgt_embed.token.weight'"]),
    ("seq2seq", {"n_decoder_layers": 1}, ["n_decoder_layers=1", "2 layers"]),
]


@pytest.mark.parametrize("kind, change, words", OWN_SIZES, ids=lambda x: str(x))
def test_a_tformer_size_that_disagrees_with_the_weights_is_named_before_building(
    own_dirs, tmp_path, nothing_is_built, kind, change, words
):
    work = _edited(own_dirs[kind], tmp_path, **change)
    with pytest.raises(ValueError) as err:
        tformer.load(work)
    message = str(err.value)
    assert "config.json" in message and "model.safetensors" in message and "\n" not in message, message
    for word in words:
        assert word in message, (word, message)


def test_a_tformer_weights_file_without_a_table_is_refused_before_building(own_dirs, tmp_path, nothing_is_built):
    """The size of a table the file lacks would go unchecked into the model: the missing weight is named first."""
    work = _edited(own_dirs["gpt"], tmp_path, vocab_size=3_000_000)
    tensors = load_file(str(work / "model.safetensors"))
    del tensors["embed.token.weight"]
    save_file(tensors, str(work / "model.safetensors"))
    with pytest.raises(ValueError, match=r"model.safetensors' does not match the config: missing \['embed.token"):
        tformer.load(work)


def test_a_hugging_face_weights_file_without_a_table_is_refused_before_building(hf_dirs, tmp_path, nothing_is_built):
    work = _edited(hf_dirs["llama"], tmp_path, vocab_size=3_000_000)
    tensors = load_file(str(work / "model.safetensors"))
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        del tensors[name]
    save_file(tensors, str(work / "model.safetensors"))
    with pytest.raises(ValueError, match=r"says vocab_size=3000000, but .* holds no tensor of that size"):
        tformer.load(work)


def test_the_weights_of_from_hf_are_held_against_its_config(hf_dirs, nothing_is_built):
    hf = json.loads((hf_dirs["llama"] / "config.json").read_text()) | {"vocab_size": 3_000_000}
    state = load_file(str(hf_dirs["llama"] / "model.safetensors"))
    with pytest.raises(ValueError, match=r"the config says vocab_size=3000000, but tensor 'lm_head.weight'"):
        tformer.from_hf(hf, state)


@pytest.mark.parametrize("kind", ["llama", "gpt"])
def test_a_config_of_38_gigabytes_beside_300_rows_is_one_line_where_38_gigabytes_cannot_be_had(
    hf_dirs, own_dirs, tmp_path, kind
):
    """The issue's case, in a process limited to 4 GB of address space: the old loader tried to allocate the table
    and said "out of memory"."""
    directory = hf_dirs[kind] if kind in hf_dirs else own_dirs[kind]
    work = _edited(directory, tmp_path, vocab_size=150_000_000)
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)); "
        "from tformer.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    argv = [sys.executable, "-c", code, "trace", "--model", str(work), "--ids", "1 2"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "vocab_size=150000000" in lines[0] and "(300, 16)" in lines[0] and "memory" not in lines[0], lines[0]


# ------------------------------------------------------------------------------------------------- words

# (directory, change, the file's fields the line names); GPTConfig's, BertConfig's and Seq2SeqConfig's words are not
WORDS = [
    ("llama", {"hidden_size": 17, "head_dim": None}, ["hidden_size", "num_attention_heads"]),
    (
        "llama",
        {"num_attention_heads": 4, "num_key_value_heads": 3, "head_dim": 4},
        ["num_key_value_heads must be", "got 3"],
    ),
    ("llama", {"vocab_size": 10**12}, ["parameters", "vocab_size=1000000000000", "hidden_size=16"]),
    ("llama", {"head_dim": 3}, ["head_dim=3"]),
    ("llama", {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, ["rope_parameters"]),
    ("gpt2", {"n_embd": 17}, ["n_embd", "n_head"]),
    ("gpt2", {"n_positions": 2**21}, ["n_positions", "1,048,576"]),
    ("gpt2", {"vocab_size": 10**12}, ["vocab_size=1000000000000", "n_embd=16", "n_layer=2"]),
    ("gemma3", {"num_attention_heads": 4, "num_key_value_heads": 3}, ["num_key_value_heads", "num_attention_heads"]),
    ("bert", {"hidden_size": 17}, ["hidden_size", "num_attention_heads"]),
    ("bert", {"pad_token_id": 300}, ["pad_token_id", "got 300"]),
    ("bert", {"max_position_embeddings": 2**21}, ["max_position_embeddings", "1,048,576"]),
    ("marian", {"d_model": 18, "encoder_attention_heads": 4, "decoder_attention_heads": 4}, ["d_model", "_heads"]),
    ("marian", {"pad_token_id": 300}, ["pad_token_id", "got 300"]),
    ("marian", {"decoder_vocab_size": 200}, ["share_encoder_decoder_embeddings", "vocab_size", "decoder_vocab_size"]),
]
OUR_WORDS = ("d_model", "n_heads", "n_kv_heads", "n_layers", "d_ff", "max_len", "n_segments", "pad_id", "rope_base")


@pytest.mark.parametrize("kind, change, words", WORDS, ids=lambda x: str(x))
def test_a_hugging_face_config_is_refused_in_its_own_words(hf_dirs, tmp_path, kind, change, words):
    work = _edited(hf_dirs[kind], tmp_path, **change)
    with pytest.raises(ValueError) as err:
        tformer.load(work)
    message = str(err.value)
    assert str(work / "config.json") in message and "\n" not in message, message
    for word in words:
        assert word in message, (word, message)
    said = message.replace(str(work), "")
    ours = [w for w in OUR_WORDS if re.search(rf"\b{w}\b", said) and not any(w in x for x in words)]
    assert not ours and not re.search(r"\w+Config\b", said), (ours, message)


def test_the_command_line_says_it_in_the_files_words_too(hf_dirs, tmp_path, capsys):
    work = _edited(hf_dirs["llama"], tmp_path, hidden_size=17, head_dim=None)
    assert main(["trace", "--model", str(work), "--ids", "1 2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hidden_size must be divisible by num_attention_heads" in err, err
    assert "GPTConfig" not in err and "d_model" not in err, err


def test_from_hf_with_a_config_dict_speaks_in_its_words(hf_dirs):
    hf = json.loads((hf_dirs["gpt2"] / "config.json").read_text()) | {"n_embd": 17}
    with pytest.raises(ValueError, match=r"^gpt2 config: n_embd must be divisible by n_head"):
        tformer.from_hf(hf, load_file(str(hf_dirs["gpt2"] / "model.safetensors")))


def test_a_marian_tokenizer_larger_than_its_model_names_the_files_field(tmp_path):
    """The loader's own check of a tokenizer against the model names config.json's field (``vocab_size``), not the
    translator's (``src_vocab_size``)."""
    from tformer.tokenizers import train_tokenizer

    tok = train_tokenizer("bpe", ["the cat sat on the mat", "a dog ran far away"] * 5, vocab_size=40, min_frequency=1)
    sizes = dict(n_encoder_layers=1, n_decoder_layers=1, share_embeddings=True, **SIZES)
    larger = Seq2SeqConfig(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, **sizes)
    export(Seq2SeqTransformer(larger), tmp_path / "larger", (tok, tok))
    small = tok.vocab_size - 5
    smaller = export(Seq2SeqTransformer(larger.replace(src_vocab_size=small, tgt_vocab_size=small)), tmp_path / "small")
    for file in (tmp_path / "larger").glob("*token*"):
        shutil.copy(file, smaller / file.name)
    with pytest.raises(ValueError) as err:
        tformer.load(smaller)
    assert f"says vocab_size={small}: the tokenizer and the model" in str(err.value), err.value
