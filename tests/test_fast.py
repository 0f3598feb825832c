"""tformer.fast: each swap against the plain tformer.nn reference it replaces.

speed_up swaps modules in place and keeps the parameters (the same objects), the state dict and the numbers; the
swapped model equals the plain one on a seq2seq, a GPT and a BERT forward, in training (gradients too) and in
decoding; TrainConfig(fast=False) leaves the model plain. tformer.nn imports nothing from tformer.fast.
"""

import ast
import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tformer import GPT, Bert, BertConfig, GPTConfig, MultiHeadAttention, Seq2SeqConfig, Seq2SeqTransformer, fast
from tformer.fast import attention as fast_attention
from tformer.fast import dropout as fast_dropout
from tformer.fast import linear as fast_linear
from tformer.fast import losses as fast_losses
from tformer.generation import beam_search, generate_lm, translate_ids
from tformer.nn import attention, losses
from tformer.nn.cache import LayerKV
from tformer.nn.scaled_dot_product import attend as reference_attend
from tformer.training.trainer import TrainConfig, Trainer

VOCAB = 40


def _seq2seq(dropout: float = 0.0) -> Seq2SeqTransformer:
    torch.manual_seed(0)
    config = Seq2SeqConfig.preset(
        "tiny", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, dropout=dropout, max_len=32, share_embeddings=True
    )
    return Seq2SeqTransformer(config)


def _gpt(dropout: float = 0.0) -> GPT:
    torch.manual_seed(1)
    return GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, dropout=dropout, max_len=32))


def _bert(dropout: float = 0.0) -> Bert:
    torch.manual_seed(2)
    return Bert(BertConfig.preset("tiny", vocab_size=VOCAB, dropout=dropout, max_len=32, num_labels=3))


MODELS = {"seq2seq": _seq2seq, "gpt": _gpt, "bert": _bert}
_g = torch.Generator().manual_seed(3)
SRC, TGT = torch.randint(4, VOCAB, (3, 9), generator=_g), torch.randint(4, VOCAB, (3, 7), generator=_g)
SRC[0, 6:] = 0  # padding in one source


def _forward(model: nn.Module) -> torch.Tensor:
    """The family's forward: (B, T, V) logits (BERT: MLM logits and the classifier's, concatenated)."""
    if isinstance(model, Seq2SeqTransformer):
        return model(SRC, TGT)
    if isinstance(model, GPT):
        return model(TGT)
    mlm, _ = model.pretraining_logits(SRC, attention_mask=SRC != 0)
    return torch.cat([mlm.flatten(), model.classify(SRC, attention_mask=SRC != 0).flatten()])


def _swapped(make, dropout: float = 0.0) -> tuple[nn.Module, nn.Module]:
    plain = make(dropout)
    return plain, fast.speed_up(copy.deepcopy(plain))


def _kinds(model: nn.Module) -> set[type]:
    return {type(m) for m in model.modules()}


def _fast_parts(model: nn.Module) -> list[str]:
    """The names of the fast modules and fast attention functions in ``model``."""
    found = [n for n, m in model.named_modules() if type(m) in (fast_linear.Linear, fast_dropout.Dropout)]
    return found + [
        n for n, m in model.named_modules() if isinstance(m, MultiHeadAttention) and m.kernel is fast_attention.attend
    ]


# ------------------------------------------------------------------------------------------- the swap itself


@pytest.mark.parametrize("family", MODELS)
def test_speed_up_swaps_every_linear_and_dropout_and_keeps_the_parameters(family):
    model = MODELS[family](0.1)
    params = dict(model.named_parameters())
    state = {k: v.clone() for k, v in model.state_dict().items()}
    n_linear = sum(type(m) is nn.Linear for m in model.modules())
    n_dropout = sum(type(m) is nn.Dropout for m in model.modules())
    assert fast.speed_up(model) is model
    assert nn.Linear not in _kinds(model) and nn.Dropout not in _kinds(model)
    assert sum(type(m) is fast_linear.Linear for m in model.modules()) == n_linear > 0
    assert sum(type(m) is fast_dropout.Dropout for m in model.modules()) == n_dropout > 0
    assert all(m.kernel is fast_attention.attend for m in model.modules() if isinstance(m, MultiHeadAttention))
    assert all(p is params[name] for name, p in model.named_parameters())  # the very same Parameter objects
    assert list(model.state_dict()) == list(state)  # checkpoints keep their keys
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert all(m.training for m in model.modules())  # the mode of each module is kept
    modules = list(model.modules())
    fast.speed_up(model)  # idempotent: nothing is replaced twice
    assert all(a is b for a, b in zip(modules, model.modules()))


@pytest.mark.parametrize("family", ["seq2seq", "gpt", "bert"])
def test_tied_weights_stay_tied(family):
    model = fast.speed_up(MODELS[family]())
    embed = model.tgt_embed if family == "seq2seq" else model.embed
    output = model.mlm_head.decoder if family == "bert" else model.output
    assert type(output) is fast_linear.Linear and output.weight is embed.token.weight


def test_a_module_shared_by_two_parents_stays_shared():
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    fast.speed_up(model)
    assert type(model[0]) is fast_linear.Linear and model[0] is model[2] and model[0].weight is shared.weight


def test_the_swap_works_inside_inference_mode():
    """Generation applies it under torch.inference_mode: the swap makes no tensor."""
    model = _gpt().eval()
    with torch.inference_mode():
        fast.speed_up(model)
    assert not any(p.is_inference() for p in model.parameters())
    assert type(model.output) is fast_linear.Linear


@pytest.mark.parametrize("family", MODELS)
def test_use_reference_chooses_the_reference_kernels_again_with_the_same_parameters(family):
    plain = MODELS[family](0.1)
    model = fast.use_reference(fast.speed_up(copy.deepcopy(plain), inference=True))
    assert _fast_parts(model) == [] and _kinds(model) == _kinds(plain)
    assert all(p.is_contiguous() for p in model.parameters())  # PyTorch's own layout back
    params = list(model.parameters())
    assert fast.use_reference(model) is model and list(model.parameters()) == params  # idempotent
    assert list(fast.speed_up(model).parameters()) == params and _fast_parts(model)  # and back again


# ------------------------------------------------------------------------- the swapped model equals the plain one


@pytest.mark.parametrize("family", MODELS)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_swapped_model_equals_the_plain_one_in_evaluation(family, mode):
    plain, swapped = _swapped(MODELS[family])
    plain.eval(), swapped.eval()
    with getattr(torch, mode)():
        torch.testing.assert_close(_forward(swapped), _forward(plain), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", MODELS)
def test_swapped_model_has_the_plain_gradients_in_training(family):
    """Dropout off: F.linear in both, the fused loss against F.cross_entropy: same loss, same gradients."""
    plain, swapped = _swapped(MODELS[family])
    labels = torch.randint(
        0, VOCAB, TGT.shape if family != "bert" else SRC.shape, generator=torch.Generator().manual_seed(4)
    )
    results = []
    for model, loss_fn in ((plain, losses.sequence_cross_entropy), (swapped, fast.sequence_cross_entropy)):
        model.train()
        logits = (
            model(SRC, TGT)
            if family == "seq2seq"
            else model(TGT)
            if family == "gpt"
            else model.pretraining_logits(SRC, attention_mask=SRC != 0)[0]
        )
        loss = loss_fn(logits, labels, ignore_index=0, label_smoothing=0.1)
        assert ("_CrossEntropy" in type(loss.grad_fn).__name__) == (model is swapped)  # the fused backward ran
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    (loss_plain, g_plain), (loss_fast, g_fast) = results
    torch.testing.assert_close(loss_fast, loss_plain, rtol=1e-6, atol=1e-6)
    assert g_fast.keys() == g_plain.keys()
    for name in g_plain:
        torch.testing.assert_close(g_fast[name], g_plain[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("family", MODELS)
def test_with_dropout_the_swapped_model_draws_the_fast_mask_and_equals_the_plain_one_on_reference(family):
    plain, swapped = _swapped(MODELS[family], dropout=0.1)
    plain.train(), swapped.train()
    torch.manual_seed(5)
    expected = _forward(plain)
    torch.manual_seed(5)
    assert not torch.allclose(_forward(swapped), expected)  # the fast mask: other draws
    fast.use_reference(swapped)  # every kernel the reference one: torch's dropout, drawn in the same order
    torch.manual_seed(5)
    torch.testing.assert_close(_forward(swapped), expected, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------- each swap, piece by piece


@pytest.mark.parametrize("rows", [1, 2, 5, 64, 300])
@pytest.mark.parametrize("bias", [True, False])
def test_fast_linear_equals_nn_linear_and_project_rows(rows, bias):
    torch.manual_seed(6)
    plain = nn.Linear(64, 3 * 256, bias=bias)  # a fused W_Q/W_K/W_V of d_model 256: big enough for every layout
    swapped = fast_linear.Linear.from_linear(plain)
    x = torch.randn(rows, 1, 64)
    with torch.inference_mode():
        torch.testing.assert_close(swapped(x), plain(x), rtol=1e-5, atol=1e-5)
        for start, end in ((0, 256), (256, 768)):  # W_Q; W_K and W_V
            torch.testing.assert_close(
                attention.project_rows(swapped, x, start, end),
                attention.project_rows(plain, x, start, end),
                rtol=1e-5,
                atol=1e-5,
            )
            torch.testing.assert_close(
                attention.project_rows(plain, x, start, end), plain(x)[..., start:end], rtol=1e-6, atol=1e-6
            )
    with torch.inference_mode():  # outside a decoding step: F.linear itself
        torch.testing.assert_close(swapped(x), plain(x), rtol=0, atol=0)
    torch.testing.assert_close(swapped(x), plain(x), rtol=0, atol=0)  # training: F.linear itself


def test_fast_dropout_module_equals_nn_dropout_on_reference_and_keeps_its_rate():
    plain = nn.Dropout(0.2)
    swapped = fast.speed_up(nn.Sequential(plain))[0]
    assert type(swapped) is fast_dropout.Dropout and swapped.p == 0.2
    x = torch.randn(300, 40)
    back = fast.use_reference(nn.Sequential(swapped))[0]  # the reference kernel: nn.Dropout at the same rate
    assert type(back) is nn.Dropout and back.p == 0.2
    torch.manual_seed(7)
    ours = back(x)
    torch.manual_seed(7)
    assert torch.equal(ours, plain(x))
    kept = swapped(x) != 0
    assert abs(kept.float().mean().item() - 0.8) < 0.01  # the fast mask drops at the rate


@pytest.mark.parametrize("dropout_p", [0.0, 0.25])
@pytest.mark.parametrize("details", [False, True])
def test_fast_attention_function_equals_the_plain_one(dropout_p, details):
    q, k, v = torch.randn(3, 2, 4, 5, 8).unbind(0)
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    mask[0, :, :, 3:] = False
    torch.manual_seed(8)
    with torch.no_grad():
        ours = fast_dropout.scaled_dot_product_attention(q, k, v, mask, dropout_p, details)
    torch.manual_seed(8)
    plain = attention.scaled_dot_product_attention(q, k, v, mask, dropout_p, details)
    if dropout_p:  # the fast mask: other draws, the same weights before dropout
        if details:
            torch.testing.assert_close(ours[1].weights, plain[1].weights)
        return
    if details:  # (context, AttentionDetails) both
        (ours, ours_details), (plain, plain_details) = ours, plain
        torch.testing.assert_close(vars(ours_details), vars(plain_details), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ours, plain, rtol=1e-6, atol=1e-6)


def test_fast_loss_equals_the_plain_loss_with_its_gradient():
    torch.manual_seed(0)  # the same inputs whatever ran before
    logits = torch.randn(2, 6, 30) * 3
    labels = torch.randint(0, 30, (2, 6))
    labels[1, 4:] = 0
    grads = []
    for loss_fn in (losses.sequence_cross_entropy, fast_losses.sequence_cross_entropy):
        x = logits.clone().requires_grad_()
        loss = loss_fn(x, labels, ignore_index=0, label_smoothing=0.1, reduction="sum")
        loss.backward()
        grads.append((loss.detach(), x.grad))
    torch.testing.assert_close(grads[1][0], grads[0][0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grads[1][1], grads[0][1], rtol=1e-6, atol=1e-6)  # gradients of at most 1 in size


# ------------------------------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("inference", [False, True])
def test_decoding_runs_the_kernels_the_model_has_with_the_same_tokens(inference):
    """A plain model decodes with nn.Linear; after speed_up (either layout) with the fast Linear (its forward hook
    sees it); the tokens are the same, and decoding swaps nothing in either model."""
    plain, other = _seq2seq().eval(), fast.speed_up(_seq2seq().eval(), inference=inference)
    src = SRC.clone()
    ran = []
    for model in (plain, other):
        model.output.register_forward_hook(lambda module, args, out: ran.append(type(module)))
    greedy = translate_ids(plain, src, 1, 2, max_len=12)
    beams = beam_search(plain, src, 1, 2, beam_size=3, max_len=12)
    assert set(ran) == {nn.Linear} and _fast_parts(plain) == []  # the reference kernels, still plain
    ran.clear()
    assert translate_ids(other, src, 1, 2, max_len=12) == greedy  # the fast kernels, the same tokens
    assert beam_search(other, src, 1, 2, beam_size=3, max_len=12) == beams
    assert set(ran) == {fast_linear.Linear}

    gpt_plain, gpt_fast = _gpt().eval(), fast.speed_up(_gpt().eval(), inference=inference)
    prompts = [[5, 9, 3], [7, 1, 2, 8], [12]]
    assert generate_lm(gpt_fast, prompts, 10) == generate_lm(gpt_plain, prompts, 10)
    assert _fast_parts(gpt_plain) == []


def test_the_swapped_decoding_step_equals_the_plain_logits():
    """Step by step with a cache (one row per step: the split/transposed layouts; beams: the packed one)."""
    plain, swapped = _swapped(_gpt)
    plain.eval(), swapped.eval()
    ids = torch.randint(1, VOCAB, (5, 12), generator=torch.Generator().manual_seed(9))
    for rows in (1, 5):
        with torch.inference_mode(), fast_linear.decoding_step(fast_linear.DecodingWeights()):
            out = []
            for model in (plain, swapped):
                cache = model.new_cache()
                out.append(torch.cat([model(ids[:rows, t : t + 1], cache=cache) for t in range(12)], 1))
        torch.testing.assert_close(out[1], out[0], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------- trainer


class _LMTask:
    """The smallest task the Trainer takes: next-token loss on fixed rows; evaluation decodes with generate_lm."""

    metric, higher_is_better = "val_loss", False
    cross_entropy = staticmethod(fast.sequence_cross_entropy)  # the loss kernel; TrainConfig(fast=False) chooses again

    def __init__(self) -> None:
        self.rows = torch.randint(1, VOCAB, (4, 9), generator=torch.Generator().manual_seed(10))
        self.grad_fns: list[str] = []

    def train_batches(self, epoch: int) -> list[torch.Tensor]:
        return [self.rows[:2], self.rows[2:]]

    def count_tokens(self, batch: torch.Tensor) -> int:
        return batch[:, 1:].numel()

    def loss(self, model, batch):
        loss = self.cross_entropy(model(batch[:, :-1]), batch[:, 1:], reduction="sum")
        self.grad_fns.append(type(loss.grad_fn).__name__)
        return loss, self.count_tokens(batch)

    def evaluate(self, model) -> dict:
        generate_lm(model, [[3, 4]], 3)
        return {"val_loss": float(sum(self.loss(model, b)[0] for b in self.train_batches(0)))}

    def save_extra(self, directory) -> None:
        pass


@pytest.mark.parametrize("use_fast", [True, False])
def test_the_trainer_applies_the_fast_paths_unless_told_not_to(tmp_path, use_fast):
    # fast=False is given a model with the fast kernels (as tformer.load makes it): the trainer chooses again
    model, task = (_gpt(0.1) if use_fast else fast.speed_up(_gpt(0.1), inference=True)), _LMTask()
    cfg = TrainConfig(out_dir=str(tmp_path), max_steps=2, warmup_steps=1, progress=False, fast=use_fast)
    Trainer(model, task, cfg).fit()
    if use_fast:
        assert type(model.output) is fast_linear.Linear and nn.Dropout not in _kinds(model)
        assert task.grad_fns[0] == "_CrossEntropyBackward"  # the fused loss backward in training
    else:  # the reference kernels and the reference loss, chosen once
        assert _fast_parts(model) == [] and all(p.is_contiguous() for p in model.parameters())
        assert all("_CrossEntropy" not in name for name in task.grad_fns)


@pytest.mark.parametrize("precision, rel", [("fp32", 1e-5), ("bf16", 1e-3)])
def test_the_plain_trainer_and_the_fast_one_train_the_same_model_without_dropout(tmp_path, precision, rel):
    """The same losses step after step (not the same weights: Adam turns the float noise of a gradient that is 0 in
    exact arithmetic, such as W_K's bias's, into full-size steps of either sign; they change no output). In bfloat16
    to bfloat16's rounding: the fast kernel's attention runs in float32 there, the reference's in bfloat16."""
    losses_of = []
    for use_fast in (True, False):
        cfg = TrainConfig(
            out_dir=str(tmp_path / str(use_fast)),
            max_steps=4,
            warmup_steps=1,
            log_every=1,
            progress=False,
            fast=use_fast,
            precision=precision,
        )
        trainer = Trainer(_gpt(), _LMTask(), cfg)
        trainer.fit()
        losses_of.append([r["train_loss"] for r in trainer.history if "train_loss" in r])
    assert len(losses_of[0]) == 4
    assert losses_of[0] == pytest.approx(losses_of[1], rel=rel)


# ------------------------------------------------------------------------------------------------- layering


def test_tformer_nn_imports_nothing_from_tformer_fast():
    nn_dir = Path(attention.__file__).parent
    for path in nn_dir.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else ([a.name for a in node.names] if isinstance(node, ast.Import) else [])
            )
            assert not any(n.startswith("tformer.fast") for n in names), f"{path.name} imports {names}"


def test_f_linear_is_what_plain_project_rows_computes():
    layer = nn.Linear(6, 12)
    x = torch.randn(2, 3, 6)
    expected = F.linear(x, layer.weight[4:10], layer.bias[4:10])
    assert torch.equal(attention.project_rows(layer, x, 4, 10), expected)


# ------------------------------------------------------------------------------------------- attention swap


def _attention_pair(**options) -> tuple[MultiHeadAttention, MultiHeadAttention]:
    torch.manual_seed(11)
    plain = MultiHeadAttention(32, 4, **options).eval()
    return plain, fast_attention.swap_attention(copy.deepcopy(plain))


def _steps(mha, x, mask=None, window=None) -> torch.Tensor:
    """Self-attention one position at a time through a KV cache (a sliding window's forgets); (B, T, D)."""
    cache = LayerKV(x.shape[1], window)
    return torch.cat(
        [
            mha(x[:, t : t + 1], mask=None if mask is None else mask[..., : t + 1], causal=True, cache=cache)
            for t in range(x.shape[1])
        ],
        dim=1,
    )


SWAP_CASES = {
    # name: (attention options, the call) — each takes one of the shortcuts of tformer.fast.attention
    "causal, whole sequence (is_causal)": ({}, lambda m, x, mem, pad: m(x, causal=True)),
    "causal with padding": ({}, lambda m, x, mem, pad: m(x, mask=pad, causal=True)),
    "a mask that hides nothing": ({}, lambda m, x, mem, pad: m(x, mask=torch.ones_like(pad), causal=True)),
    "one position a step (views)": ({}, lambda m, x, mem, pad: _steps(m, x)),
    "grouped-query, one position a step": ({"n_kv_heads": 2}, lambda m, x, mem, pad: _steps(m, x, pad)),
    "sliding window, a cache that forgets": (
        {"sliding_window": 3},
        lambda m, x, mem, pad: _steps(m, x, torch.ones(3, 1, 1, 9, dtype=torch.bool), window=3),
    ),
    "cross-attention, beams sharing a source": (
        {},
        lambda m, x, mem, pad: torch.cat(
            [m(x[:, t : t + 1], mem[:1], cache=c) for c in [LayerKV()] for t in range(9)], 1
        ),
    ),
    "cross-attention, grouped-query": ({"n_kv_heads": 1}, lambda m, x, mem, pad: m(x, mem, mask=pad)),
}


@pytest.mark.parametrize("case", SWAP_CASES)
def test_the_swapped_attention_equals_the_plain_module(case):
    options, call = SWAP_CASES[case]
    plain, swapped = _attention_pair(**options)
    assert swapped.kernel is fast_attention.attend and plain.kernel is reference_attend  # chosen, readable off it
    assert type(swapped) is type(plain) is MultiHeadAttention  # one module, one forward
    g = torch.Generator().manual_seed(12)
    x, memory = torch.randn(3, 9, 32, generator=g), torch.randn(3, 9, 32, generator=g)
    pad = torch.ones(3, 1, 1, 9, dtype=torch.bool)
    pad[0, ..., 6:] = False
    with torch.no_grad():
        expected = call(plain, x, memory, pad)
        torch.testing.assert_close(call(swapped, x, memory, pad), expected, rtol=1e-5, atol=1e-6)
        fast.use_reference(swapped)  # the reference kernel again: the plain forward itself
        assert swapped.kernel is reference_attend and torch.equal(call(swapped, x, memory, pad), expected)


def test_the_swapped_attention_trains_as_the_plain_one():
    plain, swapped = _attention_pair(n_kv_heads=2)
    plain.train(), swapped.train()
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(13))
    grads = []
    for mha in (plain, swapped):
        mha(x, causal=True).square().sum().backward()
        grads.append({n: p.grad for n, p in mha.named_parameters()})
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-5, atol=1e-6, msg=name)


def _bf16_qkv(requires_grad: bool) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(14)
    return [torch.randn(3, 4, 20, 16, generator=g).bfloat16().requires_grad_(requires_grad) for _ in range(3)]


@pytest.mark.parametrize("causal", [True, False])
def test_a_bfloat16_training_step_on_the_cpu_runs_the_fused_kernel_in_float32(causal):
    """Autocast hands the kernel bfloat16 Q, K, V; while autograd records them on the CPU the fused kernel runs in
    float32 (faster there, docs/benchmarks.md) and its context comes back in bfloat16, with gradients for all three."""
    q, k, v = _bf16_qkv(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fast_attention.attend(q, k, v, causal=causal)
    assert fast_attention.fused_in_float32(q, k) and out.dtype == torch.bfloat16
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal).bfloat16()
    assert torch.equal(out, expected)
    in_bf16 = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # what autocast alone would run
    assert not torch.equal(out, in_bf16)  # (so the comparison above tells the two apart)
    out.float().square().sum().backward()
    assert all(t.grad is not None and t.grad.dtype == torch.bfloat16 for t in (q, k, v))


def test_decoding_and_evaluation_keep_the_bfloat16_kernel():
    """Without autograd (decoding, evaluation), in float32 and where keys x head dim passes FLOAT32_MAX_KEY_ELEMENTS
    the kernel runs in the inputs' own dtype."""
    q, k, v = _bf16_qkv(False)
    with torch.no_grad():
        assert not fast_attention.fused_in_float32(q, k)
        out = fast_attention.attend(q, k, v, causal=True)
        assert torch.equal(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    with torch.no_grad():
        assert not fast_attention.fused_in_float32(*_bf16_qkv(True)[:2])
    fp32 = torch.randn(1, 1, 4, 8, requires_grad=True)
    assert not fast_attention.fused_in_float32(fp32, fp32)
    q, k, _ = _bf16_qkv(True)
    assert fast_attention.fused_in_float32(q, k)
    limit = fast_attention.FLOAT32_MAX_KEY_ELEMENTS  # keys x head dim: level or slower past it, so kept in bf16

    def keys(t: int, dh: int) -> torch.Tensor:
        return torch.zeros(1, 1, t, dh, dtype=torch.bfloat16)

    def query(dh: int) -> torch.Tensor:
        return torch.zeros(1, 1, 1, dh, dtype=torch.bfloat16, requires_grad=True)

    assert fast_attention.fused_in_float32(query(32), keys(limit // 32, 32))  # 256 keys of 32: 1.2-1.4x in float32
    assert not fast_attention.fused_in_float32(query(32), keys(limit // 32 + 1, 32))
    assert not fast_attention.fused_in_float32(query(128), keys(128, 128))  # 128 keys, but of 128 dims: level


def test_speed_up_chooses_the_fast_kernel_everywhere_and_a_hook_inside_one_sends_it_down_the_reference_path(
    monkeypatch,
):
    from tformer import hooks

    model = fast.speed_up(_seq2seq()).eval()
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attentions) == 6 and all(m.kernel is fast_attention.attend for m in attentions)
    fast_masks = []
    shortcut = fast_attention.fast_mask
    monkeypatch.setattr(fast_attention, "fast_mask", lambda *a: fast_masks.append(1) or shortcut(*a))
    with torch.no_grad():
        model(SRC, TGT)
        assert len(fast_masks) == 6  # every layer took the shortcuts
        with hooks.capture(model, "decoder.layers.0.self_attn.hook_q"):  # outside the kernel: the same path
            model(SRC, TGT)
        assert len(fast_masks) == 6 + 6
        with hooks.capture(model, "decoder.layers.0.self_attn.hook_weights"):  # inside: the reference path
            model(SRC, TGT)
        assert len(fast_masks) == 6 + 6 + 5


@pytest.mark.parametrize("shape", [(1, 1, 576), (3, 7, 64), (5, 32)])
def test_the_fast_rmsnorm_gives_the_references_numbers_and_gradients(shape):
    """F.rms_norm in place of the written-out formula: the same float32 numbers and gradients to the last bit; a
    bfloat16 input and Gemma's weight offset run the reference (its float32 arithmetic, its offset)."""
    from tformer.fast.norms import RMSNorm as FastRMSNorm
    from tformer.fast.norms import swap_norms
    from tformer.nn.norms import RMSNorm

    torch.manual_seed(0)
    ref = RMSNorm(shape[-1], eps=1e-5)
    with torch.no_grad():
        ref.weight.normal_()
    model = swap_norms(torch.nn.Sequential(ref))
    fast = model[0]
    assert type(fast) is FastRMSNorm and fast.weight is ref.weight
    x = torch.randn(shape, requires_grad=True)
    fast_out = fast(x)
    (fast_grad,) = torch.autograd.grad(fast_out.square().sum(), x)
    ref_out = RMSNorm.forward(fast, x)  # the reference formula
    (ref_grad,) = torch.autograd.grad(ref_out.square().sum(), x)
    assert torch.equal(fast_out, ref_out) and torch.allclose(fast_grad, ref_grad, rtol=1e-6, atol=1e-6)
    half = x.detach().bfloat16()
    assert torch.equal(fast(half), RMSNorm.forward(fast, half))  # computed in float32, as the reference does
    gemma = swap_norms(torch.nn.Sequential(RMSNorm(shape[-1], weight_offset=1.0)))[0]
    assert torch.equal(gemma(x), RMSNorm.forward(gemma, x))
