"""Training recipes of the language model, and how a run's settings are chosen: flags > recipe > defaults.

A recipe is a model shape (on top of a :class:`~tformer.models.gpt.GPTConfig` preset) plus data and
optimiser settings, tuned for this project's 2-core CPU. :func:`resolve` picks every setting from what
the caller gave, else the recipe, else :data:`DEFAULTS`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RECIPES", "DEFAULTS", "resolve"]

# Training recipes tuned for this project's 2-core CPU: a model shape (on top of a GPTConfig preset)
# plus data and optimiser settings. Flags given on the command line win over the recipe.
RECIPES: dict[str, dict[str, Any]] = {
    # Tuned by training for the budget on this 2-core CPU (README): the fewer the minutes, the shallower the model
    # that wins, because a cheaper step buys more steps. From two layers on they use rotary positions (RoPE: at
    # 9,000 steps of the 6-minute model, val 1.546 against 1.578 with GPT-2's learned table, for 8% more time a
    # step); all use the exact (erf) GELU, as nanoGPT (PyTorch's tanh GELU, GPT-2's, is ~3× slower on this CPU).
    # ~1.5 minutes: one layer, learned positions (with RoPE it ended worse: 4,008 steps -> 1.710 vs ~1.66)
    "shakespeare-char": dict(
        base="tiny",
        model=dict(d_model=128, n_heads=4, n_layers=1, d_ff=512, dropout=0.0, activation="gelu"),
        tokenizer="char",
        max_len=128,
        batch_size=8,
        lr=3e-3,
        warmup_steps=50,
    ),
    # ~6 minutes: two layers, a lower peak lr, weight decay 0.1 (at 9,000 steps: val 1.533 against 1.546 with 0.01;
    # 0.3 gave 1.533 too); token shift (tformer.nn.shift): side by side at equal CPU time 1.505 against 1.550 without
    # (docs/benchmarks.md, "Token shift for the shorter recipes"); --shift-tokens 0 trains one export writes (GPT-NeoX)
    "shakespeare-char-6min": dict(
        base="tiny",
        model=dict(
            d_model=128,
            n_heads=4,
            n_layers=2,
            d_ff=512,
            dropout=0.0,
            activation="gelu",
            positional="rope",
            shift_tokens=1,
        ),
        tokenizer="char",
        max_len=128,
        batch_size=8,
        lr=2e-3,
        warmup_steps=50,
        weight_decay=0.1,
    ),
    # ~30 minutes: four layers with dropout 0.1 on the residual paths (none on the attention weights, so the
    # fused attention kernel keeps running) and weight decay 0.1; without dropout four layers overfit (val 1.53
    # after 9,000 steps, 1.57 at the end of 13,611), with weight decay 0.01 validation stalled at 1.50; twice the batch
    "shakespeare-char-30min-gelu": dict(
        base="tiny",
        model=dict(
            d_model=128,
            n_heads=4,
            n_layers=4,
            d_ff=512,
            dropout=0.1,
            attn_dropout=0.0,
            activation="gelu",
            positional="rope",
        ),
        tokenizer="char",
        max_len=128,
        batch_size=16,
        lr=2e-3,
        warmup_steps=100,
        weight_decay=0.1,
    ),
}
# Today's decoder options (issue 24) on the recipes above: RMSNorm, SwiGLU (d_ff 344, so its three matrices hold about
# what the MLP's two of 512 held), no bias; the rest as it was. Side by side at equal CPU time (benchmarks/lm_recipes.py,
# docs/benchmarks.md): at 30 minutes they won (val 1.510 against 1.521), so they are the 30-minute default and the
# LayerNorm + GELU one is "-gelu"; at 6 minutes a quiet run tied (1.5547 against 1.5530), so the 6-minute default
# stays and the rebuilt one is "-llama".
LLAMA_STYLE = dict(norm="rmsnorm", ffn="swiglu", d_ff=344, bias=False, activation="silu")
RECIPES["shakespeare-char-6min-llama"] = dict(
    RECIPES["shakespeare-char-6min"], model=dict(RECIPES["shakespeare-char-6min"]["model"], **LLAMA_STYLE)
)
# And token shift (GPTConfig.shift_tokens=1, tformer.nn.shift: half of each sub-layer's input read from the position
# before): side by side at equal CPU time it lowered the 30-minute validation loss by 0.016 on both 4 × 128 and 4 × 192
# (docs/benchmarks.md, "Token shift"). No Hugging Face layout has it: --shift-tokens 0 trains a model export can write.
RECIPES["shakespeare-char-30min"] = dict(
    RECIPES["shakespeare-char-30min-gelu"],
    model=dict(RECIPES["shakespeare-char-30min-gelu"]["model"], **LLAMA_STYLE, shift_tokens=1),
)
# For a GPU: nanoGPT's shakespeare-char shape (6 layers × 384, context 256, batch 64: 16,384 tokens a step, dropout
# 0.2, lr 1e-3), with RoPE and the exact GELU as the recipes above. Not tuned or measured by this project yet (no GPU
# in its sessions): `python -m benchmarks.gpu` measures it where one is at hand; docs/benchmarks.md says what was.
RECIPES["shakespeare-char-gpu"] = dict(
    base="tiny",
    model=dict(d_model=384, n_heads=6, n_layers=6, d_ff=1536, dropout=0.2, activation="gelu", positional="rope"),
    tokenizer="char",
    max_len=256,
    batch_size=64,
    lr=1e-3,
    warmup_steps=100,
    weight_decay=0.1,
)
DEFAULTS = dict(tokenizer="char", batch_size=16, lr=1e-3, warmup_steps=100, weight_decay=0.01, vocab_size=4096)


def resolve(
    preset: str = "tiny",
    *,
    tokenizer: str | None = None,
    batch_size: int | None = None,
    lr: float | None = None,
    warmup_steps: int | None = None,
    weight_decay: float | None = None,
    vocab_size: int | None = None,
    max_len: int | None = None,
    dropout: float | None = None,
    shape: dict[str, float] | None = None,
) -> dict:
    """The settings of a run: each given value (not None) wins over the recipe of ``preset``, which wins over
    :data:`DEFAULTS`. ``preset`` is a recipe name or a GPTConfig preset; ``shape``: GPTConfig fields of the model's
    size (``d_model``, ``n_layers``, ...) over the recipe's. Returns the seven settings, ``base`` (the GPTConfig
    preset) and ``model`` (the GPTConfig overrides)."""
    given = dict(
        tokenizer=tokenizer,
        batch_size=batch_size,
        lr=lr,
        warmup_steps=warmup_steps,
        weight_decay=weight_decay,
        vocab_size=vocab_size,
        max_len=max_len,
    )
    recipe: dict[str, Any] = RECIPES.get(preset, dict(base=preset, model={}))
    pick = {k: v if v is not None else recipe.get(k, DEFAULTS.get(k)) for k, v in given.items()}
    model = {**recipe["model"], **(shape or {})}
    if dropout is not None:
        model["dropout"] = dropout
    if pick["max_len"] is not None:
        model["max_len"] = pick["max_len"]
    return {**pick, "base": recipe["base"], "model": model}
