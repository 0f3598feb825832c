"""Training-step throughput of the three families, each beside its anchor built with the same configuration.

    python -m benchmarks.train_step                      # all three groups, ~10 minutes on 2 cores
    python -m benchmarks.train_step --only seq2seq --repeats 11
    python -m benchmarks.train_step --quick              # tiny sizes, seconds: proves the script works
    python -m benchmarks.train_step --only seq2seq --bf16  # each candidate in float32 and under bf16 autocast

Groups (one AdamW step = zero_grad, forward, cross-entropy, backward, optimizer step; dropout 0.1 everywhere,
random token ids, no padding). Every candidate uses the same optimizer, PyTorch's fused AdamW (what
tformer's ``Trainer`` and Hugging Face's ``Trainer`` both use on torch ≥ 2.8), and its own library's loss:
``F.cross_entropy`` for the anchors, ``tformer.fast.sequence_cross_entropy`` for tformer, whose models get the
fast paths swapped in (``tformer.fast.speed_up``, as its ``Trainer`` does). Each group also times tformer on its
reference paths ("tformer, reference paths": ``F.dropout`` in its dropout layers and ``F.cross_entropy`` as its
loss, on a copy of the model given the reference kernels by ``tformer.fast.use_reference``), which shows what its cheaper CPU dropout mask and cross-entropy
backward gain:

* ``seq2seq`` — d_model 256, 4 heads, FFN 1024, 3+3 layers, vocab 8000, batch 64 × 16 → 16; tformer
  ``Seq2SeqTransformer`` vs ``nn.Transformer`` + embeddings + output projection vs HF ``MarianMTModel``
  (from a config). All three share one embedding table between source, target and output, scale
  embeddings by √d and use fixed sinusoidal positions; ``nn.Transformer`` adds a final LayerNorm after each
  stack (two extra LayerNorms, negligible). Throughput in target tokens/s.
* ``gpt`` — 6 layers × 384, 6 heads, FFN 1536, vocab 8000, batch 16 × 256; tformer ``GPT`` vs HF
  ``GPT2LMHeadModel``. Tokens/s (predicted positions).
* ``bert`` — 4 layers × 256, 4 heads, FFN 1024, vocab 8000, batch 32 × 128, MLM (15% of positions
  labelled) + NSP; tformer ``Bert.pretraining_logits`` vs HF ``BertForPreTraining``. Tokens/s.

Achieved GFLOP/s counts the matrix multiplications only, forward ×3 for a training step (backward = 2×
forward), compared with the float32 ``torch.matmul`` peak measured on the same machine (the better of a
reading before and one after the groups, since the speed drifts):

    FLOPs/step = 3 · [ 2 · Σ_streams tokens · W  +  4 · d · B · Σ_attention Tq · Tk ]

where ``W`` is the number of weights a token meets in matrix products (the "6 · params · tokens" rule,
applied per stream) and each attention costs Q·Kᵀ and weights·V (2 · Tq · Tk · d each, full Tq × Tk even
when causal, as the kernels compute it). Per family:

* seq2seq: source tokens meet W_src = L_e·(4d² + 2dF) + L_d·2d² (encoder layers; cross-attention K/V);
  target tokens meet W_tgt = L_d·(6d² + 2dF) + dV; attentions: L_e·S² + L_d·(T² + T·S).
* gpt: W = L·(4d² + 2dF) + dV; attentions L·T².
* bert: W = L·(4d² + 2dF) + d² + dV (MLM transform and decoder); attentions L·T².

Writes ``OUT/train_step.json`` and ``OUT/train_step.md``.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.common import Candidate, base_parser, compare, machine_info, matmul_peak_gflops, session, write_report

PAD = 0

FULL = {
    "seq2seq": dict(vocab=8000, d=256, heads=4, ff=1024, enc=3, dec=3, batch=64, src_len=16, tgt_len=16),
    "gpt": dict(vocab=8000, d=384, heads=6, ff=1536, layers=6, batch=16, seq_len=256),
    "bert": dict(vocab=8000, d=256, heads=4, ff=1024, layers=4, batch=32, seq_len=128),
}
QUICK = {
    "seq2seq": dict(vocab=100, d=32, heads=4, ff=64, enc=1, dec=1, batch=4, src_len=8, tgt_len=8),
    "gpt": dict(vocab=100, d=32, heads=4, ff=64, layers=1, batch=2, seq_len=16),
    "bert": dict(vocab=100, d=32, heads=4, ff=64, layers=1, batch=2, seq_len=16),
}
DROPOUT = 0.1


def _step(model: nn.Module, loss_fn, n_tokens: int):
    """One AdamW training step as a callable returning the tokens it trained on."""
    fused = next(model.parameters()).device.type in ("cpu", "cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused or None)
    model.train()

    def run() -> float:
        opt.zero_grad(set_to_none=True)
        loss_fn().backward()
        opt.step()
        return n_tokens

    return run


def _reference_paths(ours: nn.Module, loss_of, n_tokens: int):
    """The same step on a copy of the model with the reference kernels (``tformer.fast.use_reference``: its dropout
    layers ``F.dropout``, ...) and the reference loss (``F.cross_entropy``): ``loss_of(model, reference)`` makes the
    loss closure."""
    import copy

    from tformer import fast

    model = fast.use_reference(copy.deepcopy(ours))
    return _step(model, loss_of(model, True), n_tokens)


def _ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)  # (B·T, V)


def _loss(logits: torch.Tensor, labels: torch.Tensor, reference: bool = False) -> torch.Tensor:
    """tformer's training loss (its fused CPU backward; ``reference``: the plain one, ``F.cross_entropy``)."""
    from tformer.fast import sequence_cross_entropy
    from tformer.nn import losses

    return (losses.sequence_cross_entropy if reference else sequence_cross_entropy)(logits, labels)


def _n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------------------------- seq2seq


class TorchSeq2Seq(nn.Module):
    """``nn.Transformer`` with what a translation model needs around it: a shared embedding (× √d) plus the
    sinusoidal table, and an output projection tied to the embedding."""

    def __init__(self, c: dict, max_len: int) -> None:
        super().__init__()
        from tformer.nn.positional import sinusoidal_table

        self.embed = nn.Embedding(c["vocab"], c["d"])
        self.register_buffer("pe", sinusoidal_table(max_len, c["d"]), persistent=False)
        self.transformer = nn.Transformer(c["d"], c["heads"], c["enc"], c["dec"], c["ff"], DROPOUT, batch_first=True)
        self.output = nn.Linear(c["d"], c["vocab"], bias=False)
        self.output.weight = self.embed.weight
        self.dropout = nn.Dropout(DROPOUT)
        self.scale = math.sqrt(c["d"])

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.embed(ids) * self.scale + self.pe[: ids.shape[1]])  # (B, T, D)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        t = tgt.shape[1]
        blocked = torch.triu(torch.ones(t, t, dtype=torch.bool, device=tgt.device), 1)  # True = blocked (PyTorch)
        src_pad = src == PAD
        h = self.transformer(
            self._embed(src),
            self._embed(tgt),
            tgt_mask=blocked,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt == PAD,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )
        return self.output(h)  # (B, T, V)


def seq2seq_flops(c: dict) -> float:
    d, f, v, le, ld = c["d"], c["ff"], c["vocab"], c["enc"], c["dec"]
    b, s, t = c["batch"], c["src_len"], c["tgt_len"]
    w_src = le * (4 * d * d + 2 * d * f) + ld * 2 * d * d
    w_tgt = ld * (6 * d * d + 2 * d * f) + d * v
    attention = 4 * d * b * (le * s * s + ld * (t * t + t * s))
    return 3 * (2 * b * (s * w_src + t * w_tgt) + attention)


def seq2seq_candidates(c: dict, device: str) -> list[Candidate]:
    import transformers

    from tformer import Seq2SeqConfig, Seq2SeqTransformer
    from tformer.fast import speed_up

    max_len = max(64, c["src_len"], c["tgt_len"])
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, c["vocab"], (c["batch"], c["src_len"]), generator=g).to(device)  # (B, S)
    tgt = torch.randint(4, c["vocab"], (c["batch"], c["tgt_len"] + 1), generator=g).to(device)  # (B, T+1)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # teacher forcing: shifted by one
    n_tokens = tgt_out.numel()

    ours = Seq2SeqTransformer(
        Seq2SeqConfig(
            src_vocab_size=c["vocab"],
            tgt_vocab_size=c["vocab"],
            d_model=c["d"],
            n_heads=c["heads"],
            n_encoder_layers=c["enc"],
            n_decoder_layers=c["dec"],
            d_ff=c["ff"],
            dropout=DROPOUT,
            max_len=max_len,
            share_embeddings=True,
            pad_id=PAD,
        )
    ).to(device)
    speed_up(ours)
    torch_model = TorchSeq2Seq(c, max_len).to(device)
    marian = transformers.MarianMTModel(
        transformers.MarianConfig(
            vocab_size=c["vocab"],
            d_model=c["d"],
            encoder_layers=c["enc"],
            decoder_layers=c["dec"],
            encoder_attention_heads=c["heads"],
            decoder_attention_heads=c["heads"],
            encoder_ffn_dim=c["ff"],
            decoder_ffn_dim=c["ff"],
            max_position_embeddings=max_len,
            dropout=DROPOUT,
            attention_dropout=DROPOUT,
            activation_dropout=DROPOUT,
            activation_function="relu",
            scale_embedding=True,
            pad_token_id=PAD,
            decoder_start_token_id=PAD,
            eos_token_id=3,
            forced_eos_token_id=None,
        )
    ).to(device)
    mask = (src != PAD).long()
    flops = seq2seq_flops(c)
    loss_of = lambda model, reference=False: lambda: _loss(model(src, tgt_in), tgt_out, reference)  # noqa: E731
    ours_loss = loss_of(ours)
    return [
        Candidate(
            "nn.Transformer",
            _step(torch_model, lambda: _ce(torch_model(src, tgt_in), tgt_out), n_tokens),
            flops,
            {"params": _n_params(torch_model)},
        ),
        Candidate(
            "HF Marian",
            _step(
                marian,
                lambda: _ce(marian(input_ids=src, attention_mask=mask, decoder_input_ids=tgt_in).logits, tgt_out),
                n_tokens,
            ),
            flops,
            {"params": _n_params(marian)},
        ),
        Candidate("tformer", _step(ours, ours_loss, n_tokens), flops, {"params": _n_params(ours)}),
        Candidate(
            "tformer, reference paths",
            _reference_paths(ours, loss_of, n_tokens),
            flops,
            {"params": _n_params(ours)},
        ),
    ]


# ------------------------------------------------------------------------------------------------- GPT


def gpt_flops(c: dict) -> float:
    d, f, v, n, b, t = c["d"], c["ff"], c["vocab"], c["layers"], c["batch"], c["seq_len"]
    return 3 * (2 * b * t * (n * (4 * d * d + 2 * d * f) + d * v) + 4 * d * b * n * t * t)


def gpt_candidates(c: dict, device: str) -> list[Candidate]:
    import transformers

    from tformer import GPT, GPTConfig
    from tformer.fast import speed_up

    ids = torch.randint(0, c["vocab"], (c["batch"], c["seq_len"] + 1), generator=torch.Generator().manual_seed(1))
    ids = ids.to(device)
    inputs, labels = ids[:, :-1], ids[:, 1:]  # (B, T) each
    ours = GPT(
        GPTConfig(
            vocab_size=c["vocab"],
            d_model=c["d"],
            n_heads=c["heads"],
            n_layers=c["layers"],
            d_ff=c["ff"],
            max_len=c["seq_len"],
            dropout=DROPOUT,
        )
    ).to(device)
    speed_up(ours)
    hf = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=c["vocab"],
            n_positions=c["seq_len"],
            n_embd=c["d"],
            n_layer=c["layers"],
            n_head=c["heads"],
            n_inner=c["ff"],
            resid_pdrop=DROPOUT,
            embd_pdrop=DROPOUT,
            attn_pdrop=DROPOUT,
        )
    ).to(device)
    n_tokens, flops = labels.numel(), gpt_flops(c)
    loss_of = lambda model, reference=False: lambda: _loss(model(inputs), labels, reference)  # noqa: E731
    ours_loss = loss_of(ours)
    return [
        Candidate(
            "HF GPT2LMHeadModel",
            _step(hf, lambda: _ce(hf(input_ids=inputs).logits, labels), n_tokens),
            flops,
            {"params": _n_params(hf)},
        ),
        Candidate("tformer", _step(ours, ours_loss, n_tokens), flops, {"params": _n_params(ours)}),
        Candidate(
            "tformer, reference paths",
            _reference_paths(ours, loss_of, n_tokens),
            flops,
            {"params": _n_params(ours)},
        ),
    ]


# ------------------------------------------------------------------------------------------------ BERT


def bert_flops(c: dict) -> float:
    d, f, v, n, b, t = c["d"], c["ff"], c["vocab"], c["layers"], c["batch"], c["seq_len"]
    return 3 * (2 * b * t * (n * (4 * d * d + 2 * d * f) + d * d + d * v) + 4 * d * b * n * t * t)


def bert_candidates(c: dict, device: str) -> list[Candidate]:
    import transformers

    from tformer import Bert, BertConfig
    from tformer.fast import speed_up

    g = torch.Generator().manual_seed(2)
    b, t = c["batch"], c["seq_len"]
    ids = torch.randint(5, c["vocab"], (b, t), generator=g)  # (B, T)
    segments = (torch.arange(t) >= t // 2).long().expand(b, t).contiguous()  # (B, T) sentence A | sentence B
    mlm_labels = torch.where(torch.rand(b, t, generator=g) < 0.15, ids, torch.full_like(ids, -100))  # 15% picked
    nsp_labels = torch.randint(0, 2, (b,), generator=g)
    ids, segments, mlm_labels, nsp_labels = (x.to(device) for x in (ids, segments, mlm_labels, nsp_labels))
    mask = torch.ones_like(ids)
    ours = Bert(
        BertConfig(
            vocab_size=c["vocab"],
            d_model=c["d"],
            n_heads=c["heads"],
            n_layers=c["layers"],
            d_ff=c["ff"],
            max_len=t,
            dropout=DROPOUT,
        )
    ).to(device)
    speed_up(ours)
    hf = transformers.BertForPreTraining(
        transformers.BertConfig(
            vocab_size=c["vocab"],
            hidden_size=c["d"],
            num_hidden_layers=c["layers"],
            num_attention_heads=c["heads"],
            intermediate_size=c["ff"],
            max_position_embeddings=t,
            hidden_dropout_prob=DROPOUT,
            attention_probs_dropout_prob=DROPOUT,
        )
    ).to(device)

    def loss_of(model, reference=False):
        def loss():
            mlm, nsp = model.pretraining_logits(ids, token_type_ids=segments, attention_mask=mask)
            return _loss(mlm, mlm_labels, reference) + F.cross_entropy(nsp, nsp_labels)

        return loss

    ours_loss = loss_of(ours)

    def hf_loss():
        out = hf(input_ids=ids, token_type_ids=segments, attention_mask=mask)
        return _ce(out.prediction_logits, mlm_labels) + F.cross_entropy(out.seq_relationship_logits, nsp_labels)

    n_tokens, flops = ids.numel(), bert_flops(c)
    return [
        Candidate("HF BertForPreTraining", _step(hf, hf_loss, n_tokens), flops, {"params": _n_params(hf)}),
        Candidate("tformer", _step(ours, ours_loss, n_tokens), flops, {"params": _n_params(ours)}),
        Candidate(
            "tformer, reference paths",
            _reference_paths(ours, loss_of, n_tokens),
            flops,
            {"params": _n_params(ours)},
        ),
    ]


GROUPS = {"seq2seq": seq2seq_candidates, "gpt": gpt_candidates, "bert": bert_candidates}


def _bf16(candidate: Candidate, device: str) -> Candidate:
    """The same step under bfloat16 autocast (float32 master weights and optimizer; products in bfloat16)."""

    def run() -> float:
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            return candidate.run()

    return Candidate(f"{candidate.name}, bf16 autocast", run, candidate.flops, candidate.extra)


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench", "train_step.json", "train_step.md")
    p.add_argument("--only", choices=sorted(GROUPS), action="append", help="run only these groups (repeatable)")
    p.add_argument(
        "--bf16", action="store_true", help="also time each candidate under bfloat16 autocast (its name says so)"
    )
    args = p.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    with session(args):

        def measure_peak():
            return matmul_peak_gflops(256 if args.quick else 2048, 2 if args.quick else 5, args.device)

        before = measure_peak()
        results = {}
        for group in args.only or list(GROUPS):
            candidates = GROUPS[group](sizes[group], args.device)
            # each library's step in bfloat16 too, and tformer's reference paths: what its masks gain there
            if args.bf16:
                candidates += [_bf16(c, args.device) for c in candidates]
            results[group] = compare(
                candidates, args.repeats, args.warmup, args.device, not args.no_memory, anchor=candidates[0].name
            )
        # this machine's speed drifts over minutes: the better of a reading before and after the groups
        peak = max(before, measure_peak())
        for stats in results.values():
            for s in stats.values():
                if "gflops" in s:
                    s["fraction_of_peak"] = s["gflops"] / peak
        machine = machine_info(args, peak)
    payload = {
        "benchmark": "train_step",
        "description": "training-step throughput, tokens/s (target tokens for seq2seq)",
        "machine": machine,
        "config": {g: sizes[g] for g in results},
        "results": results,
    }
    return write_report(args.out, "train_step", payload, "tokens/s")


if __name__ == "__main__":
    main()
