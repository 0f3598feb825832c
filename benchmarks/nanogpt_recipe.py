"""The anchor for ``benchmarks.lm_shakespeare``: nanoGPT's published CPU recipe, written out independently.

nanoGPT's README trains a "baby GPT" on Tiny Shakespeare characters on a CPU with
``config/train_shakespeare_char.py`` plus ``--device=cpu --compile=False --eval_iters=20
--block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000
--lr_decay_iters=2000 --dropout=0.0``. What that amounts to, and what this module does:

* model: pre-LayerNorm GPT blocks without biases (``bias=False``), exact GELU MLP 4× wide, learned
  positions, output head tied to the token embedding, N(0, 0.02) init with the residual projections
  scaled by 1/√(2·layers); causal attention through ``F.scaled_dot_product_attention``;
* data: the file's characters (65 for Tiny Shakespeare), first 90% train, last 10% validation,
  random contiguous blocks of 64 in batches of 12;
* AdamW lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on the matrices (nanoGPT decays every tensor of
  two or more dimensions), PyTorch's default (non-fused) implementation, as nanoGPT picks on a CPU;
  100 warmup iterations, then cosine down to 1e-4; gradient clipping at 1.0.

One change makes it a wall-clock recipe like tformer's: the cosine runs over the time budget
(the fraction of it spent) instead of over ``lr_decay_iters``, so a 1.5-minute run ends at
1e-4 whatever the machine's speed that hour. nanoGPT's own periodic evaluations are not made
(their time would not count either); the validation split is scored in full at the end, in
non-overlapping blocks of 64, as ``tformer.lm.task.evaluate_stream`` scores tformer's model.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class Recipe:
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64
    batch_size: int = 12
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.99)
    grad_clip: float = 1.0


class Block(nn.Module):
    def __init__(self, r: Recipe) -> None:
        super().__init__()
        d = r.n_embd
        self.n_head = r.n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(d, bias=False), nn.LayerNorm(d, bias=False)
        self.c_attn, self.attn_proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (
            z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2)
            for z in self.c_attn(self.ln_1(x)).split(d, dim=2)
        )  # (B, H, T, Dh) each
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class BabyGPT(nn.Module):
    def __init__(self, vocab_size: int, r: Recipe) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, r.n_embd), nn.Embedding(r.block_size, r.n_embd)
        self.blocks = nn.ModuleList(Block(r) for _ in range(r.n_layer))
        self.ln_f = nn.LayerNorm(r.n_embd, bias=False)
        self.lm_head = nn.Linear(r.n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * r.n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))  # (B, T, V)


def _lr(it: int, r: Recipe, time_used: float) -> float:
    if it < r.warmup_iters:
        return r.lr * (it + 1) / (r.warmup_iters + 1)
    return r.min_lr + 0.5 * (1 + math.cos(math.pi * min(time_used, 1.0))) * (r.lr - r.min_lr)


def train_and_score(text_path: Path, minutes: float, recipe: Recipe = Recipe(), seed: int = 1337) -> dict:
    """Train for ``minutes`` of step time, then score the whole validation split; returns the figures."""
    text = Path(text_path).read_text(encoding="utf-8")
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(ids))
    train, val = ids[:n], ids[n:]
    torch.manual_seed(seed)
    model = BabyGPT(len(chars), recipe)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": recipe.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=recipe.lr, betas=recipe.betas)
    t, b = recipe.block_size, recipe.batch_size
    elapsed, it = 0.0, 0
    model.train()
    while elapsed < minutes * 60:
        start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = _lr(it, recipe, elapsed / (minutes * 60))
        offsets = torch.randint(len(train) - t, (b,))
        x = torch.stack([train[i : i + t] for i in offsets])
        y = torch.stack([train[i + 1 : i + 1 + t] for i in offsets])
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        optimizer.step()
        it += 1
        elapsed += time.perf_counter() - start
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():  # non-overlapping blocks of the context (the last one shorter): each target once
        full = (len(val) - 1) // t * t
        rows = [(val[:full].view(-1, t), val[1 : full + 1].view(-1, t)), (val[full:-1][None], val[full + 1 :][None])]
        for x, y in rows:
            for i in range(0, len(x) if y.numel() else 0, 64):
                logits = model(x[i : i + 64])
                total += float(F.cross_entropy(logits.flatten(0, 1), y[i : i + 64].flatten(), reduction="sum"))
                count += y[i : i + 64].numel()
    return {
        "val_loss": round(total / count, 4),
        "steps": it,
        "train_seconds": round(elapsed, 1),
        "final_train_loss": round(float(loss.detach()), 4),
        "tokens_per_step": b * t,
    }
