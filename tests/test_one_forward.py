"""One forward per module (issue 45): attention has one ``forward`` and its kernel is chosen, not its class; every
kind of KV cache speaks one protocol, so ``nn/`` and ``models/`` never ask which kind they were given or whether
they are being compiled."""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import io
import pathlib
import re
import tokenize

import pytest
import torch

import tformer.fast
from tformer.fast import attention as fast_attention
from tformer.models.gpt import GPT, GPTConfig
from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from tformer.nn.attention import MultiHeadAttention
from tformer.nn.cache import KVCache
from tformer.nn.scaled_dot_product import attend

SRC = pathlib.Path(tformer.fast.__file__).parents[1]  # src/tformer


class _Layer:
    """One layer of :class:`_ProtocolOnly`: ``update`` and the cross-attention pair, nothing else."""

    def __init__(self, inner, calls: list[str]) -> None:
        self._inner, self._calls = inner, calls
        self.cross_k = self.cross_v = None

    def update(self, k, v, mask, causal):
        self._calls.append("update")
        return self._inner.update(k, v, mask, causal)


class _ProtocolOnly:
    """A KV cache that offers only the protocol of tformer.nn.cache (``begin``, ``layers[i].update``, ``cross_k``,
    ``cross_v``, ``len``): a model that reached past it (``append``, ``length``, ``isinstance``) would fail."""

    def __init__(self, inner: KVCache) -> None:
        self._inner, self.calls = inner, []
        self.layers = [_Layer(layer, self.calls) for layer in inner.layers]

    def begin(self, ids, attention_mask=None, positions=None, max_len=None, name="ids"):
        self.calls.append("begin")
        return self._inner.begin(ids, attention_mask, positions, max_len, name)

    def __len__(self) -> int:
        return len(self.layers)


def _decode_gpt(model: GPT, ids: torch.Tensor, cache) -> torch.Tensor:
    """The prompt's last logits, then two steps, through ``cache``: (B, 3, V)."""
    logits = [model(ids, cache=cache)[:, -1]]
    for _ in range(2):
        logits.append(model(logits[-1].argmax(-1, keepdim=True), cache=cache)[:, -1])
    return torch.stack(logits, 1)


def test_a_model_speaks_to_its_cache_only_through_the_protocol():
    torch.manual_seed(0)
    config = GPTConfig.preset("tiny", vocab_size=40, positional="rope", sliding_window=3, n_kv_heads=2)
    model = GPT(config).eval()
    ids = torch.randint(0, 40, (2, 6))
    with torch.no_grad():
        expected = _decode_gpt(model, ids, model.new_cache())
        cache = _ProtocolOnly(model.new_cache())
        assert torch.equal(_decode_gpt(model, ids, cache), expected)
    per_forward = ["begin"] + ["update"] * config.n_layers  # one begin, then one update a layer
    assert cache.calls == per_forward * 3

    seq2seq = Seq2SeqTransformer(Seq2SeqConfig.preset("tiny", src_vocab_size=30, tgt_vocab_size=30)).eval()
    src, start = torch.randint(1, 30, (2, 5)), torch.ones(2, 1, dtype=torch.long)
    with torch.no_grad():
        memory = seq2seq.encode(src)
        plain, protocol = seq2seq.new_cache(), _ProtocolOnly(seq2seq.new_cache())
        for cache in (plain, protocol):
            first = seq2seq.decode(start, memory, cache=cache)
            second = seq2seq.decode(first.argmax(-1), memory, cache=cache)
            if cache is plain:
                expected = second
        assert torch.equal(second, expected)
    assert protocol.calls.count("begin") == 2


def _source(folder: str) -> dict[pathlib.Path, str]:
    return {p: p.read_text() for p in sorted((SRC / folder).rglob("*.py"))}


def _code(text: str) -> str:
    """The code of a module without its strings and comments, one token after another."""
    kept = (tokenize.NAME, tokenize.OP, tokenize.NUMBER)
    return " ".join(t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type in kept)


def test_nn_and_models_never_ask_whether_they_are_compiled_or_which_cache_they_have():
    """The plain parts read like the notes: no branch on torch.compile, on a static cache, on a kind of cache."""
    asked = re.compile(r"is_compiling|Static\w*KV|isinstance \( cache")
    found = [
        f"{path.relative_to(SRC)}: {match.group()}"
        for folder in ("nn", "models")
        for path, text in _source(folder).items()
        for match in asked.finditer(_code(text))
    ]
    assert found == []
    assert not (SRC / "nn" / "static_cache.py").exists()  # the static cache is decoding's (generation/)


def test_attention_has_one_forward_and_its_kernel_is_chosen_not_its_class():
    model = tformer.fast.speed_up(GPT(GPTConfig.preset("tiny", vocab_size=40)))
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert layers and all(type(m) is MultiHeadAttention and m.kernel is fast_attention.attend for m in layers)
    plain = GPT(GPTConfig.preset("tiny", vocab_size=40))
    assert all(m.kernel is attend for m in plain.modules() if isinstance(m, MultiHeadAttention))
    assert MultiHeadAttention.__subclasses__() == []  # no second forward anywhere
    lines = (SRC / "nn" / "attention.py").read_text().splitlines()
    assert len(lines) <= 300
    tree = ast.parse("\n".join(lines))
    (mha,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MultiHeadAttention"]
    assert [f.name for f in mha.body if isinstance(f, ast.FunctionDef)].count("forward") == 1
    reassigned = [
        f"{path.relative_to(SRC)}:{n}"
        for path, text in _source(".").items()
        for n, line in enumerate(text.splitlines(), 1)
        if re.search(r"\.__class__\s*=[^=]", line)
    ]
    assert reassigned == []  # kernels are chosen, not swapped in by changing an object's class


def test_the_kernels_are_read_off_the_model_and_info_prints_what_runs(tmp_path, capsys):
    from tformer.cli import main
    from tformer.fast.kernels import kernels
    from tformer.fast.quantize import quantize

    model = GPT(GPTConfig.preset("tiny", vocab_size=40, norm="rmsnorm")).eval()
    reference = {"attention": ["reference"], "products": ["reference"], "norms": ["reference"]}
    assert {k: v for k, v in kernels(model).items() if k in reference} == reference
    shown = repr(model)  # print(model) says it too: the attention's kernel by name, no fast class
    assert "kernel=tformer.nn.scaled_dot_product.attend" in shown and ", fast" not in shown
    assert kernels(quantize(copy.deepcopy(model)))["products"] == ["int8"]
    model.save_pretrained(tmp_path / "m")
    fast = kernels(tformer.fast.speed_up(model))  # the one call that chooses them
    assert fast["attention"] == fast["products"] == fast["norms"] == ["fast"]
    shown = repr(model)
    assert "kernel=tformer.fast.attention.attend" in shown and "kernel=tformer.nn" not in shown
    assert "Linear(in_features=64, out_features=192, bias=True, fast)" in shown and "eps=1e-05, weight_offset" in shown
    assert "RMSNorm(64, eps=1e-05, weight_offset=0.0, scale=True, fast)" in shown
    assert kernels(tformer.load(tmp_path / "m").model) == fast  # the load chooses them too
    assert kernels(tformer.load(tmp_path / "m", fast=False).model)["attention"] == ["reference"]
    assert main(["info", str(tmp_path / "m")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("kernels"))
    assert "attention fast, products fast, norms fast" in line and "--no-fast" in line


def test_architecture_mds_decoding_picture_names_real_files_and_the_kernels_it_says():
    text = (SRC.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    picture = text.split("### One decoding step", 1)[1].split("```", 2)[1]
    cited = set(re.findall(r"\b(\w+/\w+\.py)\b", picture))
    assert {"nn/attention.py", "nn/cache.py", "generation/static_cache.py", "fast/linear.py"} <= cited
    assert [path for path in sorted(cited) if not (SRC / path).is_file()] == []
    assert "nn/scaled_dot_product.attend" in picture and "fast/attention.attend" in picture
    assert "DecodingWeights" in picture and isinstance(tformer.fast.linear.DecodingWeights, type)
    assert callable(attend) and callable(fast_attention.attend)  # the two kernels the picture names


@pytest.mark.parametrize(
    "field, bad",
    [("norm", "batchnorm"), ("ffn", "glu"), ("n_kv_heads", 3), ("sliding_window", 0), ("attn_softcap", -1.0)],
)
def test_a_layer_option_is_checked_once_in_the_same_words_for_a_layer_and_a_family(field, bad):
    """One check per option (tformer.nn.layers.LAYER_OPTIONS): a LayerConfig and a GPTConfig refuse a bad value in
    the same words, the family's naming its field."""
    from tformer.nn.layers import LAYER_OPTIONS, LayerConfig

    with pytest.raises(ValueError) as layer:
        LayerConfig(64, 4, 256, **{field: bad})
    with pytest.raises(ValueError) as family:
        GPTConfig.preset("tiny", vocab_size=40, **{field: bad})
    assert str(family.value) == f"GPTConfig.{str(layer.value)}"
    layer_fields = {f.name for f in dataclasses.fields(LayerConfig)}
    assert set(LAYER_OPTIONS) <= layer_fields  # each option a LayerConfig field


def test_importing_tformer_registers_no_process_wide_hook():
    """No optimizer-step hook, no module hook is registered at import time (the fast Linear's copies needed one to
    know when a weight changed; its layouts now belong to the decoding call)."""
    import torch.nn.modules.module as module_hooks
    import torch.optim.optimizer as optimizer_hooks

    import tformer.cli  # noqa: F401  everything the command line imports
    import tformer.generation  # noqa: F401

    assert not optimizer_hooks._global_optimizer_pre_hooks and not optimizer_hooks._global_optimizer_post_hooks
    assert not module_hooks._global_forward_hooks and not module_hooks._global_forward_pre_hooks


@pytest.mark.parametrize("command", ["evaluate", "translate"])
def test_a_translators_commands_run_the_kernels_no_fast_asks_for(command, tmp_path, monkeypatch, capsys):
    """--no-fast: the reference kernels, read off the model that translates; without it the fast ones."""
    from tformer.cli import main
    from tformer.fast.kernels import kernels
    from tformer.tokenizers import train_tokenizer
    from tformer.translation import Translator
    from tformer.translation.toy_corpus import builtin_pairs

    pairs = builtin_pairs()[::59][:20]
    tok = train_tokenizer("bpe", [t for p in pairs for t in p], vocab_size=200, min_frequency=1)
    cfg = Seq2SeqConfig.preset("tiny", src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, max_len=64)
    Translator(Seq2SeqTransformer(cfg), tok, tok).save(tmp_path / "m")
    (tmp_path / "src.txt").write_text("A dog runs.\nTwo men.\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("Un chien court.\nDeux hommes.\n", encoding="utf-8")
    seen, real = [], Translator.translate

    @functools.wraps(real)  # its signature kept: the commands read their settings off it
    def translate(self, *args, **kwargs):
        seen.append(kernels(self.model)["products"])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate", translate)
    words = ["--model", str(tmp_path / "m"), "--max-new-tokens", "3"]
    words += (
        ["--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "ref.txt")]
        if command == "evaluate"
        else ["A dog."]
    )
    assert main([command, *words, "--no-fast"]) == 0
    assert main([command, *words]) == 0
    assert seen == [["reference"], ["fast"]]
