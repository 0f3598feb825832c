"""An int8 model in about a quarter of float32's memory (issue 33: "resident size ≤ 30% of float32").

What is checked: a packed-only int8 layer (``quantize(..., keep_float=False)``, ``--precision int8``) holds no int8
buffer once its first product has packed it, and still gives back exactly the values it had (state dict, saved file,
deep copy, pickle, ``.to()``, ``load_state_dict``, rows split for cross-attention); token tables of at least
``MIN_ROWS`` rows become int8 with a scale per row, within half a scale of the float lookup, and a head tied to one
holds the very same int8 table; an int8 model with int8 tables saves and loads back with equal logits on each
family, its file under 0.30× of float32's; ``tformer generate --precision int8`` decodes the tokens the int8 layers
decoded before they let go of their buffers, and the model it ran holds only packed copies.
"""

from __future__ import annotations

import copy
import json
import pickle

import pytest
import torch
from torch import nn

import tformer
from test_quantize import rounding_bound, tolerances
from tformer import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer
from tformer.cli import main
from tformer.fast import int8, precision
from tformer.fast.int8 import Int8Linear
from tformer.fast.int8_embedding import MIN_ROWS, Int8Embedding
from tformer.fast.quantize import quantized_embeddings
from tformer.generation import generate_lm

VOCAB = MIN_ROWS  # the smallest table that becomes int8
# tests/test_quantize.py's tolerances (multiples of int8's rounding steps); with int8 tables too the logits moved at
# most 2.3 (EPS_W + eps_x) and, as floats again, 3.4 EPS_W over ten seeds per family, with 8-bit and 7-bit x alike
WEIGHT_TOLERANCE, _, LOGIT_TOLERANCE = tolerances()


def _gpt(seed: int = 1, vocab: int = VOCAB) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig.preset("tiny", vocab_size=vocab, max_len=32)).eval()  # its head is tied to the table


def _bert(seed: int = 2) -> Bert:
    torch.manual_seed(seed)
    return Bert(BertConfig.preset("tiny", vocab_size=VOCAB, max_len=32)).eval()  # MLM decoder tied to the table


def _seq2seq(seed: int = 3) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    config = Seq2SeqConfig.preset("tiny", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, max_len=32, share_embeddings=True)
    return Seq2SeqTransformer(config).eval()  # one table for source, target and the generator


MODELS = {"gpt": _gpt, "bert": _bert, "seq2seq": _seq2seq}
IDS = torch.randint(1, VOCAB, (3, 20), generator=torch.Generator().manual_seed(0))  # 60 rows: batched work


@torch.inference_mode()
def _logits(model: nn.Module, ids: torch.Tensor = IDS) -> torch.Tensor:
    if isinstance(model, Seq2SeqTransformer):
        return model(ids, ids)
    if isinstance(model, Bert):
        return model.pretraining_logits(ids)[0]
    return model(ids)


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / a.abs().max()).item()


def _held_int8(model: nn.Module) -> dict[str, int]:
    """Bytes of int8 buffer storage each int8 linear layer holds, by name (0: the values live in the packing)."""
    return {
        name: 0 if (t := m._buffers.get("weight_int8")) is None else t.untyped_storage().nbytes()
        for name, m in model.named_modules()
        if isinstance(m, Int8Linear)
    }


def test_a_packed_only_layer_holds_its_values_once_and_gives_them_back_exactly():
    """Odd sizes (fbgemm pads its packing), products of one row and of many, then rows split as cross-attention
    splits them: the buffer is gone after the first product, every way of reading the values gives them back."""
    torch.manual_seed(0)
    layer = Int8Linear.from_linear(nn.Linear(97, 83), packed_only=True)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    x = torch.randn(5, 97)
    with torch.inference_mode():
        y = layer(x)
        assert layer._buffers["weight_int8"] is None  # held once: in the packed copy
        q, kv = layer.forward_rows(x, 0, 30), layer.forward_rows(x, 30, 83)  # W_Q apart from W_K, W_V
    assert [(a, b) for a, b, _ in layer.__dict__["_copies"][1]["pieces"]] == [(0, 30), (30, 83)]  # no overlap
    assert layer._buffers["weight_int8"] is None and torch.allclose(torch.cat([q, kv], -1), y, atol=1e-5)
    after = layer.state_dict()
    assert list(after) == list(before) == ["weight_int8", "weight_scale", "bias"]
    assert all(after[k].dtype == before[k].dtype and torch.equal(after[k], before[k]) for k in before)
    for twin in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert torch.equal(twin.weight_int8, before["weight_int8"]) and torch.allclose(twin(x), y, atol=1e-5)
    layer.to("cpu")  # nothing to move: the packing stays, the buffer stays let go
    assert layer._buffers["weight_int8"] is None
    assert torch.equal(layer.weight, before["weight_int8"].float() * before["weight_scale"][:, None])
    layer.exact = True  # the reference kernel: the exact product reads the values back too
    assert _gap(layer(x), y) < 0.03
    layer.exact = False
    layer.load_state_dict({k: v.clone() for k, v in before.items()})
    assert torch.equal(layer._buffers["weight_int8"], before["weight_int8"])  # loaded into the buffer, packed again
    layer(x)
    assert layer._buffers["weight_int8"] is None


@pytest.mark.parametrize("family", MODELS)
def test_an_int8_model_holds_no_int8_buffers_after_its_first_product_and_saves_the_same_file(family, tmp_path):
    model = tformer.quantize(MODELS[family](), "int8", keep_float=False)  # what --precision int8 does
    model.save_pretrained(tmp_path / "before")
    held = _held_int8(model)
    assert all(n > 0 for n in held.values())  # nothing packed yet
    _logits(
        tformer.fast.speed_up(model, inference=True)
    )  # as decoding runs it (cross-attention: W_Q apart from W_K, W_V)
    tied = {name for name, m in model.named_modules() if isinstance(m, Int8Linear) and m.shares_values}
    assert tied == {"gpt": {"output"}, "bert": {"mlm_head.decoder"}, "seq2seq": {"output"}}[family]
    assert {n for n, b in _held_int8(model).items() if b} == tied  # only a tied head: the table it reads
    model.save_pretrained(tmp_path / "after")
    for name in ("model.safetensors", "config.json"):
        assert (tmp_path / "after" / name).read_bytes() == (tmp_path / "before" / name).read_bytes()


@pytest.mark.parametrize("family", MODELS)
def test_int8_tables_save_and_load_back_with_equal_logits(family, tmp_path):
    f32 = MODELS[family]()
    f32.save_pretrained(tmp_path / "fp32")
    q8 = tformer.quantize(copy.deepcopy(f32), "int8", keep_float=False)
    tables = quantized_embeddings(q8)
    assert tables == {"gpt": ["embed.token"], "bert": ["embed.token"], "seq2seq": ["src_embed.token", "tgt_embed.token"]}[
        family
    ]  # fmt: skip
    assert all(type(m) is not nn.Embedding or m.num_embeddings < MIN_ROWS for m in q8.modules())  # segments: float
    expected = _logits(q8)
    assert _gap(_logits(f32), expected) <= LOGIT_TOLERANCE
    q8.save_pretrained(tmp_path / "int8")
    size = (tmp_path / "int8" / "model.safetensors").stat().st_size
    assert size < 0.30 * (tmp_path / "fp32" / "model.safetensors").stat().st_size  # the table saved once, in int8
    record = json.loads((tmp_path / "int8" / "config.json").read_text())["quantization"]
    assert record["embeddings"] == tables and record["packed_only"] is True
    loaded = tformer.load(tmp_path / "int8").model
    assert quantized_embeddings(loaded) == tables and torch.equal(_logits(loaded), expected)
    head = loaded.get_submodule({"gpt": "output", "bert": "mlm_head.decoder", "seq2seq": "output"}[family])
    table = loaded.get_submodule(tables[-1])
    assert head.weight_int8 is table.weight_int8 and head.weight_scale is table.weight_scale  # one table
    back = tformer.dequantize(loaded)  # the int8 values as floats, the head tied to the table again
    assert type(back.get_submodule(tables[-1])) is nn.Embedding
    float_head = back.get_submodule({"gpt": "output", "bert": "mlm_head.decoder", "seq2seq": "output"}[family])
    assert float_head.weight is back.get_submodule(tables[0]).weight
    assert _gap(_logits(f32), _logits(back)) <= WEIGHT_TOLERANCE


def test_an_int8_table_looks_up_within_half_a_scale_of_the_float_one():
    torch.manual_seed(0)
    embedding = nn.Embedding(VOCAB, 48)
    embedding.weight.data[7] *= 100  # one large row keeps its own scale
    table = Int8Embedding.from_embedding(embedding)
    ids = torch.tensor([[0, 7, 4095], [3, 3, 1000]])
    exact, looked_up = embedding(ids), table(ids)
    assert looked_up.dtype == torch.float32 and looked_up.shape == exact.shape
    half = table.weight_scale[ids].unsqueeze(-1) / 2  # (2, 3, 1)
    assert ((looked_up - exact).abs() <= half * (1 + 1e-6)).all()
    assert ((looked_up - exact).abs() > 0).any()  # int8, not the float table
    assert table.weight_int8.dtype == torch.int8 and table.weight_scale.shape == (VOCAB,)


def test_a_tied_head_reads_the_int8_table_and_dequantize_ties_it_again():
    model = _gpt()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = [IDS[0, :6].tolist()]
    expected = generate_lm(model, ids, 8)
    kept = tformer.quantize(model, "int8")  # keep_float: the exact float modules come back
    assert kept.output.weight_int8 is kept.embed.token.weight_int8
    assert len(generate_lm(kept, ids, 8)[0]) == len(expected[0])
    tformer.dequantize(kept)
    assert kept.output.weight is kept.embed.token.weight and type(kept.embed.token) is nn.Embedding
    assert all(torch.equal(kept.state_dict()[k], v) for k, v in before.items())
    lean = tformer.quantize(_gpt(), "int8", keep_float=False)
    assert lean.output.original is None and lean.embed.token.original is None  # no float table left alive
    step = _logits(lean, IDS[:1, :1])  # a decoding row through the head's own packing
    assert _gap(_logits(_gpt(), IDS[:1, :1]), step) <= LOGIT_TOLERANCE


@pytest.fixture
def char_gpt(tmp_path):
    """A small GPT (96 wide) with a character tokenizer, saved as tformer saves a run's model."""
    from tformer.tokenizers import train_tokenizer

    tok = train_tokenizer("char", ["the cat sat on the mat and the dog ran off to see it"])
    torch.manual_seed(4)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, d_model=96, n_heads=4, n_layers=2, d_ff=192, max_len=64))
    directory = tmp_path / "gpt"
    model.save_pretrained(directory)
    tok.save(directory)
    return directory, tok


def test_generate_int8_decodes_the_tokens_it_did_and_holds_only_packed_weights(char_gpt, capsys, monkeypatch):
    """A prompt of 24 characters (a prefill of more than 16 rows, then one row a step), greedy: the CLI's text is
    the one the int8 layers gave while they kept their buffer and a packing per kernel (``keep_float=True``)."""
    from tformer import lm

    directory, tok = char_gpt
    prompt = "the cat sat on the mat a"
    ran: list[nn.Module] = []
    apply = precision.apply
    monkeypatch.setattr(precision, "apply", lambda model, choice: ran.append(apply(model, choice)) or ran[-1])
    argv = ["generate", "--model", str(directory), "--prompt", prompt, "--greedy", "--max-new-tokens", "12"]
    assert main([*argv, "--precision", "int8", "--seed", "1"]) == 0
    text = capsys.readouterr().out
    model, _ = lm.load(directory)
    as_before = tformer.quantize(model, "int8").eval()  # each layer keeps its buffer and both packings
    expected = lm.generate(as_before, tok, prompt, 12, tformer.generation.SamplingConfig(False), seed=1)
    assert text == prompt + expected + "\n" and len(expected) > 0
    assert len(ran) == 1 and _held_int8(ran[0]) and not any(_held_int8(ran[0]).values())


def test_a_file_written_before_packed_only_layers_existed_still_loads(tmp_path):
    """An int8 directory whose record has no ``packed_only`` nor ``embeddings`` (tformer before this change):
    its layers load as they were saved, keeping their buffers, with equal logits."""
    model = tformer.quantize(_gpt(vocab=40), "int8")
    model.save_pretrained(tmp_path / "old")
    config = json.loads((tmp_path / "old" / "config.json").read_text())
    assert "packed_only" not in config["quantization"] and "embeddings" not in config["quantization"]
    loaded = tformer.load(tmp_path / "old").model
    assert not any(m.packed_only for m in loaded.modules() if isinstance(m, Int8Linear))
    assert torch.equal(_logits(loaded, IDS % 40), _logits(model, IDS % 40))


def test_decodings_one_row_product_equals_the_general_path_and_follows_changed_buffers(monkeypatch):
    """A packed-only layer's one-row float32 product (decoding's, worked out once) gives the numbers of the general
    path (the same product as a batch of two rows' first row, and the dequantized reference within the rounding of
    x), for a fused projection's rows too; scales changed in place, a new bias or a new scale buffer take effect.
    The machine is this one, with its own features (7-bit x without VNNI), taken for the avx2 class where its own
    class has no dynamic kernel (every x86 build of PyTorch has fbgemm's, and 7-bit x is right on every x86 CPU)."""
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        pytest.skip("this PyTorch has no fbgemm engine (not an x86 build): int8 runs the reference product here")
    machine_class, features = int8._this_machine()
    monkeypatch.setattr(int8, "_MACHINE", [(machine_class if machine_class in int8.KERNELS else "avx2", features)])
    torch.manual_seed(0)
    layer = precision.apply(nn.Sequential(nn.Linear(64, 96)), precision.Choice("int8", "as asked"))[0]
    x = torch.randn(1, 1, 64)
    kernel = layer._kernel(x)
    assert kernel.name == "dynamic"
    bound = rounding_bound(x, layer.weight, 7 if kernel.seven_bits else 8).view(1, 1, 96)
    with torch.inference_mode():
        first = layer(x)  # packs, lets the int8 buffer go
        assert layer._buffers["weight_int8"] is None
        again, rows = layer(x), layer.forward_rows(x, 32, 96)
        assert torch.equal(first, again) and torch.equal(rows, layer.forward_rows(x, 32, 96))
        two = layer(torch.cat([x, torch.zeros_like(x)], dim=1))[:, :1]  # the general path (rows scaled each)
        assert (again - two).abs().max() <= 1e-5 * again.abs().max()
        layer.exact = True  # the reference kernel: the dequantized weight's product
        assert ((again - layer(x)).abs() <= bound).all()
        assert ((rows - layer(x)[..., 32:]).abs() <= bound[..., 32:]).all()
        layer.exact = False
    bias = layer.bias.clone()
    with torch.no_grad():
        layer.weight_scale.mul_(2)  # in place: the packing is made again from the new scales
    with torch.inference_mode():
        doubled = layer(x)
        assert (doubled - (2 * (again - bias) + bias)).abs().max() <= 1e-4 * doubled.abs().max()
        layer.bias = torch.zeros(96)  # a new bias buffer
        assert torch.allclose(layer(x), doubled - bias, atol=1e-6)
        layer.weight_scale = layer.weight_scale / 2  # a new scale buffer
        assert (layer(x) - (again - bias)).abs().max() <= 1e-4 * again.abs().max()
