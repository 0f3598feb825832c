"""save_pretrained / from_pretrained: exact round trips and clear errors on broken directories."""

import json

import pytest
import torch
from safetensors.torch import load_file

import tformer
from tformer import GPT, Bert, Seq2SeqTransformer

SRC = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
TGT = torch.tensor([[1, 11, 12], [1, 13, 0]])

FAMILIES = {
    "seq2seq": (Seq2SeqTransformer, lambda m: m(SRC, TGT), lambda m: m.output.weight is m.tgt_embed.token.weight),
    "gpt": (GPT, lambda m: m(SRC), lambda m: m.output.weight is m.embed.token.weight),
    "bert": (Bert, lambda m: m.pretraining_logits(SRC)[0], lambda m: m.mlm_head.decoder.weight is m.embed.token.weight),
}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("loader", ["class", "load_pretrained"])
def test_round_trip(family, loader, request, tmp_path):
    cls, run, tied = FAMILIES[family]
    model = request.getfixturevalue(family)
    assert model.save_pretrained(tmp_path / "ckpt") == tmp_path / "ckpt"
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["config.json", "model.safetensors"]
    loaded = cls.from_pretrained(tmp_path / "ckpt") if loader == "class" else tformer.load_pretrained(tmp_path / "ckpt")
    assert type(loaded) is cls and not loaded.training
    assert loaded.config == model.config
    assert tied(loaded)
    assert torch.equal(run(loaded), run(model))
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name


def test_config_json_is_readable(gpt, tmp_path):
    gpt.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "gpt"
    assert config["vocab_size"] == gpt.config.vocab_size and config["d_ff"] == gpt.config.d_ff


def test_tied_weights_stored_once(seq2seq, tmp_path):
    seq2seq.save_pretrained(tmp_path)
    stored = load_file(str(tmp_path / "model.safetensors"))
    assert "tgt_embed.token.weight" in stored and "output.weight" not in stored
    assert not any("table" in name for name in stored)  # the sinusoidal table is not saved


def test_save_overwrites_and_leaves_no_temp_files(gpt, bert, tmp_path):
    bert.save_pretrained(tmp_path)
    gpt.save_pretrained(tmp_path)  # overwrite with another family
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    assert type(tformer.load_pretrained(tmp_path)) is GPT


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        GPT.from_pretrained(tmp_path / "nope")


def test_missing_config(gpt, tmp_path):
    gpt.save_pretrained(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json"):
        tformer.load_pretrained(tmp_path)


def test_missing_weights(gpt, tmp_path):
    gpt.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        GPT.from_pretrained(tmp_path)


@pytest.mark.parametrize("keep", [0.5, 0.01], ids=["half", "header_only"])
def test_truncated_weights(gpt, tmp_path, keep):
    gpt.save_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        GPT.from_pretrained(tmp_path)


def test_invalid_json(gpt, tmp_path):
    gpt.save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    path.write_text(path.read_text()[:-10])
    with pytest.raises(ValueError, match="not valid JSON"):
        GPT.from_pretrained(tmp_path)


def _edit_config(directory, **changes):
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def test_config_not_matching_weights(seq2seq, tmp_path):
    seq2seq.save_pretrained(tmp_path)
    _edit_config(tmp_path, d_ff=128)
    with pytest.raises(ValueError, match="says d_ff=128, but tensor .*linear1.* has shape \\(256,\\)"):
        Seq2SeqTransformer.from_pretrained(tmp_path)


def test_config_with_fewer_layers_than_weights(bert, tmp_path):
    bert.save_pretrained(tmp_path)
    _edit_config(tmp_path, n_layers=1)
    with pytest.raises(ValueError, match="says n_layers=1, but .* holds 2 layers"):
        Bert.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(model_type="llama"), "model_type"),
        (dict(colour="blue"), "GPTConfig has no field 'colour'"),
        (dict(n_heads=5), "n_heads"),
    ],
)
def test_bad_config_values(gpt, tmp_path, changes, message):
    gpt.save_pretrained(tmp_path)
    _edit_config(tmp_path, **changes)
    with pytest.raises(ValueError, match=message):
        GPT.from_pretrained(tmp_path)


def test_old_field_names_still_load(seq2seq, tmp_path):
    """A config.json written with 0.1's ``tie_output`` loads as ``tie_embeddings``."""
    seq2seq.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert "tie_embeddings" in config and "tie_output" not in config
    config["tie_output"] = config.pop("tie_embeddings")
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = Seq2SeqTransformer.from_pretrained(tmp_path)
    assert loaded.config == seq2seq.config
    assert torch.equal(loaded(SRC, TGT), seq2seq(SRC, TGT))


def test_wrong_family(gpt, tmp_path):
    gpt.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="'gpt' model, not a 'seq2seq'"):
        Seq2SeqTransformer.from_pretrained(tmp_path)
