"""``torch.compile`` through the fast paths (issue 39, item 2): the training forward of each family, with every swap of
:func:`tformer.fast.speed_up` in it, compiles as ONE graph (``fullgraph=True``: no graph break), in float32 and under
bfloat16 / float16 autocast, and over steps of varying batch size and length compiles a bounded number of times (the
first shape, then once with dynamic sizes); the compiled model gives the eager model's numbers; and a Trainer with
``TrainConfig(compile=True)`` trains through the compiled forward, saving the plain model.

Dynamo's own ``eager`` backend is used (:class:`torch._dynamo.testing.CompileCounter`): it traces exactly as the real
compiler does, where breaks and recompilations come from, and costs no C++ build on these 2-core machines.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter

from tformer import fast
from tformer.models.bert import Bert, BertConfig
from tformer.models.gpt import GPT, GPTConfig
from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

SHAPES = [(2, 8), (3, 12), (2, 9), (4, 16), (2, 8)]  # (batch, length) of five training steps


def _gpt(**kw) -> GPT:
    return GPT(GPTConfig.preset("tiny", vocab_size=50, dropout=0.1, **kw))


FAMILIES = {
    "gpt": lambda: _gpt(),
    "llama": lambda: _gpt(
        norm="rmsnorm", positional="rope", n_kv_heads=2, ffn="swiglu", activation="silu", bias=False, norm_first=True
    ),
    "seq2seq": lambda: Seq2SeqTransformer(Seq2SeqConfig.preset("tiny", src_vocab_size=40, tgt_vocab_size=40)),
    "bert": lambda: Bert(BertConfig.preset("tiny", vocab_size=60, dropout=0.1)),
}


def _inputs(family: str, batch: int, length: int, g: torch.Generator) -> tuple | dict:
    if family == "seq2seq":
        src = torch.randint(4, 40, (batch, length), generator=g)
        src[0, -2:] = 0  # padding: the masked path
        return src, torch.randint(4, 40, (batch, length + 1), generator=g)
    if family == "bert":
        attention = torch.ones(batch, length, dtype=torch.long)
        attention[0, -3:] = 0
        ids = torch.randint(5, 60, (batch, length), generator=g)
        return {"ids": ids, "token_type_ids": torch.zeros(batch, length, dtype=torch.long), "attention_mask": attention}
    return (torch.randint(1, 50, (batch, length), generator=g),)


def _call(model, inputs):
    """``model`` on ``inputs``: a BERT takes its segments and mask by name."""
    return model(**inputs) if isinstance(inputs, dict) else model(*inputs)


def _autocast(precision: str):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    return contextlib.nullcontext() if dtype is None else torch.autocast("cpu", dtype=dtype)


# every family in float32 and bf16; fp16 autocast traces the same ops as bf16, so the decoders alone take it (time)
CASES = [(f, p) for f in sorted(FAMILIES) for p in ("fp32", "bf16")] + [("gpt", "fp16"), ("llama", "fp16")]


@pytest.mark.parametrize("family, precision", CASES)
def test_a_training_step_compiles_as_one_graph_a_bounded_number_of_times(family, precision):
    torch.manual_seed(0)
    model = fast.speed_up(FAMILIES[family]()).train()
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(model, backend=counter, fullgraph=True)  # a graph break raises
    g = torch.Generator().manual_seed(1)
    for batch, length in SHAPES:
        with _autocast(precision):
            out = _call(compiled, _inputs(family, batch, length, g))
        out.float().square().mean().backward()
    # the first shape, then one graph with dynamic batch and length for every other: never one per shape
    assert counter.frame_count <= 2, f"{counter.frame_count} compilations for {len(SHAPES)} steps"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_compiled_forward_gives_the_eager_numbers_and_gradients(family):
    torch.manual_seed(0)
    model = fast.speed_up(FAMILIES[family]()).train()
    for m in model.modules():  # no dropout: the two runs draw different masks
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        if hasattr(m, "dropout") and isinstance(m.dropout, float):
            m.dropout = 0.0
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    inputs = _inputs(family, 3, 10, torch.Generator().manual_seed(2))
    results = []
    for run in (model, compiled):
        model.zero_grad()
        out = _call(run, inputs)
        out.square().mean().backward()
        results.append((out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (eager, eager_grads), (comp, comp_grads) = results
    torch.testing.assert_close(comp, eager, rtol=1e-5, atol=1e-5)
    assert len(comp_grads) == len(eager_grads) > 0
    for a, b in zip(comp_grads, eager_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_compiled_forward_leaves_the_fast_linear_unchanged():
    """The fast Linear holds its Parameters and nothing else, and a compiled forward (one graph, inside a decoding
    step too) changes nothing in it: a mutation in forward is what broke the graph on the GPU (issue 39)."""
    model = fast.speed_up(_gpt(), inference=True).eval()
    layer = next(m for m in model.modules() if isinstance(m, fast.linear.Linear))
    before = {k: (id(v), dict(v) if isinstance(v, dict) else None) for k, v in vars(layer).items()}
    with torch.no_grad(), fast.linear.decoding_step(fast.linear.DecodingWeights()):
        model(torch.randint(1, 50, (1, 4)))  # eager, as a decoding step runs it: the layouts are the step's
    torch._dynamo.reset()
    compiled = torch.compile(model.train(), backend="eager", fullgraph=True)
    compiled(torch.randint(1, 50, (2, 6))).sum().backward()
    with torch.no_grad(), fast.linear.decoding_step(fast.linear.DecodingWeights()):
        compiled.eval()(torch.randint(1, 50, (1, 4)))
    assert {k: (id(v), dict(v) if isinstance(v, dict) else None) for k, v in vars(layer).items()} == before


def test_a_trainer_with_compile_trains_through_the_compiled_forward_and_saves_the_plain_model(
    tmp_path, monkeypatch, words_txt
):
    from tformer import lm

    counters = []

    def counting_compile(model, **kw):  # the Trainer's torch.compile, traced by dynamo without a C++ build
        counters.append(CompileCounter())
        return torch._dynamo.optimize(counters[-1], nopython=True)(model)

    torch._dynamo.reset()
    monkeypatch.setattr(torch, "compile", counting_compile)
    trainer = lm.setup(
        words_txt, tmp_path / "run", preset="tiny", max_len=16, batch_size=4, max_steps=3, compile=True, progress=False
    )
    assert trainer.forward_model is not trainer.model and trainer.cfg.compile
    trainer.fit()
    assert len(counters) == 1 and 1 <= counters[0].frame_count <= 2  # traced, once per shape kind
    from safetensors import safe_open

    with safe_open(str(tmp_path / "run" / "last" / "model.safetensors"), "pt") as f:  # the model's own names
        assert not [k for k in f.keys() if "_orig_mod" in k]
