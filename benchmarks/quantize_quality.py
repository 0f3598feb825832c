"""The quality measures of ``benchmarks.quantize`` that need a model of their own: fill-mask agreement of a BERT
trained here, and the SmolLM2-135M-shaped Llama's perplexity on its own text; and the quality tables of the report.

Every precision is reached the way the commands reach it (:func:`at_precision`: ``tformer.fast.precision``'s
``choose`` and ``apply``, what ``--precision bf16`` / ``--precision int8`` run), on a copy of the float32 model.

* **Fill-mask** (:func:`fill_mask_quality`): a BERT with its MLM head pretrained here (``tformer.bert.train``, what
  ``tformer train bert`` runs: MLM + NSP, preset ``small``, 700 steps: a few minutes) on Multi30k's English training
  side; then sentences of Multi30k's English validation side (never trained on) with one whole word replaced by
  ``[MASK]`` (a word that is one WordPiece token, at most ``ceil(texts / lines)`` per line, picked by a seeded
  random), ``texts`` of them, filled by ``tformer.bert.fill_mask`` (the code ``tformer fill-mask`` prints from) in
  float32, bf16 and int8. Reported: how often bf16's and int8's top-1 token equals float32's (the issue's goal:
  >= 95%), also over only the positions where float32's top-1 is not its commonest one (a model this short-trained
  still guesses a frequent word often, and agreeing on a constant guess is easy); each precision's top-1 accuracy
  against the word that was there, beside always guessing the commonest hidden word; the distinct top-1 tokens.
* **Own text** (:func:`own_text_quality`): the Llama of ``benchmarks.decode_llama`` (random weights, SmolLM2-135M's
  shape, converted with ``from_hf``) samples ``rows`` × ``tokens`` tokens after a BOS token at temperature 1 (seed
  0) in float32; each sequence is then scored teacher-forced, one forward pass each, in float32, bf16 and int8:
  perplexity, its relative change, and the mean KL divergence KL(float32 ‖ other) of the next-token distributions
  over the same positions. Random weights make every distribution nearly uniform over the 49,152 tokens, so the
  perplexity sits near the vocabulary size whatever the precision; the report gives the uniform perplexity and
  float32's mean entropy beside it, and the KL divergence is the measure that still tells the precisions apart.

Dimension legend: R rows, T tokens, V vocabulary, N scored positions.
"""

from __future__ import annotations

import copy
import math
import random
import tempfile
from collections import Counter
from pathlib import Path

import torch

from benchmarks.common import SHARED_DATA

PRECISIONS = ("float32", "bf16", "int8")  # report names; the commands' --precision spells float32 fp32
MLM = {
    "full": dict(
        # a constant 5e-4 after warmup: with the inverse square root (or at 1e-3 / 2e-3) 300-800 steps ended on the
        # unigram plateau, the top-1 'a' at 77-100% of the masked words; this ends at 'a' for about half of them
        train=dict(
            preset="small", max_len=64, batch_size=32, vocab_size=4000, lr=5e-4, warmup_steps=100, schedule="constant"
        ),
        steps=700,
        texts=2000,
        lines=None,
    ),
    "quick": dict(train=dict(preset="tiny", max_len=32, batch_size=8, vocab_size=300), steps=3, texts=24, lines=300),
}
OWN_TEXT = {"full": dict(rows=2, tokens=256), "quick": dict(rows=2, tokens=12)}
BOS = 1  # decode_llama's config: bos_token_id=1


def at_precision(model, precision: str, work: str):
    """A copy of float32 ``model`` in ``precision`` (:data:`PRECISIONS`), through ``choose`` and ``apply`` as the
    commands' ``--precision`` goes (``for_inference`` without its stderr line), in eval mode."""
    from tformer.fast.precision import apply, choose

    if precision == "float32":
        return model.eval()
    return apply(copy.deepcopy(model), choose(precision, work, model)).eval()


# ---------------------------------------------------------------------------------------------------- fill-mask


def mlm_model(quick: bool, work: Path):
    """(BERT, tokenizer) pretrained here on Multi30k's English training side (its first ``lines`` lines in quick)."""
    from tformer import bert
    from tformer.bert import load_masked_lm

    sizes = MLM["quick" if quick else "full"]
    data = SHARED_DATA / "multi30k" / "train.en"
    if sizes["lines"]:
        lines = data.read_text(encoding="utf-8").splitlines()[: sizes["lines"]]
        data = work / "mlm-train.en"
        data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = work / "bert"
    bert.train(
        data,
        run,
        max_steps=sizes["steps"],
        valid=100,
        precision="fp32",  # float32 weights whatever auto would train with: the reference the others copy
        progress=False,
        overwrite=True,
        **sizes["train"],
    )
    return load_masked_lm(run)


def masked_texts(tokenizer, lines: list[str], n: int, max_len: int, seed: int = 0) -> list[tuple[str, str]]:
    """Up to ``n`` (text with one ``[MASK]``, the word it hides): whole alphabetic words that are one WordPiece
    token each and fall within the model's ``max_len`` tokens, at most ``ceil(n / len(lines))`` per line, picked by
    a random seeded with ``seed``."""
    rng = random.Random(seed)
    per_line = math.ceil(n / max(len(lines), 1))
    out: list[tuple[str, str]] = []
    for line in lines:
        words = line.split()
        texts = {}
        for k, word in enumerate(words):
            if not word.isalpha() or len(ids := tokenizer.encode(word)) != 1:
                continue
            text = " ".join(words[:k] + ["[MASK]"] + words[k + 1 :])
            if tokenizer.mask_id in tokenizer.encode(text, add_special_tokens=True, max_length=max_len):
                texts[text] = tokenizer.id_to_token(ids[0])
        out += rng.sample(sorted(texts.items()), min(per_line, len(texts)))
    return out[:n]


def fill_mask_quality(quick: bool, work: Path) -> dict:
    """Top-1 agreement of bf16 and int8 with float32 over masked held-out words, and each one's top-1 accuracy."""
    from tformer.bert import fill_mask

    sizes = MLM["quick" if quick else "full"]
    f32, tok = mlm_model(quick, work)
    lines = (SHARED_DATA / "multi30k" / "val.en").read_text(encoding="utf-8").splitlines()
    texts = masked_texts(tok, lines, sizes["texts"], f32.config.max_len)
    top1 = {}
    for name in PRECISIONS:
        model = at_precision(f32, name, "batched")
        top1[name] = [fill_mask(model, tok, text, top_k=1)[0][0][0] for text, _ in texts]
    truth = [word for _, word in texts]
    n = len(texts)
    commonest, _ = Counter(top1["float32"]).most_common(1)[0]
    rest = [k for k, t in enumerate(top1["float32"]) if t != commonest]  # where a constant guess would not agree

    def agreement(p: str, where) -> float:
        return sum(top1[p][k] == top1["float32"][k] for k in where) / max(len(where), 1)

    return {
        "model": {"preset": sizes["train"]["preset"], "d_model": f32.config.d_model, "steps": sizes["steps"]},
        "positions": n,
        "agreement_with_float32": {p: agreement(p, range(n)) for p in PRECISIONS[1:]},
        "top1_accuracy": {p: sum(a == b for a, b in zip(top1[p], truth)) / n for p in PRECISIONS},
        "distinct_top1": {p: len(set(top1[p])) for p in PRECISIONS},
        "float32_commonest": {"token": commonest, "share": 1 - len(rest) / n},
        "agreement_elsewhere": {"positions": len(rest)} | {p: agreement(p, rest) for p in PRECISIONS[1:]},
        "hidden_word_majority": Counter(truth).most_common(1)[0][1] / n,  # accuracy of always guessing it
    }


# ---------------------------------------------------------------------------------------------------- own text


def own_text_quality(quick: bool) -> dict:
    """Perplexity of the float32 Llama's own sampled text in each precision, and the KL divergence from float32."""
    from benchmarks.decode_llama import FULL, NEVER, QUICK, llama_pair
    from tformer.generation import SamplingConfig, generate_lm

    sizes = OWN_TEXT["quick" if quick else "full"]
    shape = dict(QUICK if quick else FULL, prompt_len=1, new_tokens=sizes["tokens"])
    hf, f32 = llama_pair(shape, "cpu")
    del hf  # only its weights were needed: from_hf copied them
    sampling = SamplingConfig(do_sample=True, temperature=1.0)
    new = generate_lm(f32, [[BOS]] * sizes["rows"], sizes["tokens"], sampling, eos_id=NEVER, seed=0)
    seqs = torch.tensor([[BOS] + row for row in new])  # (R, T + 1)
    target = seqs[:, 1:].reshape(-1)  # (N,) with N = R * T
    logp = {}
    for name in PRECISIONS:
        model = at_precision(f32, name, "measuring")
        with torch.inference_mode():  # one forward pass per sequence; each row scores the next token
            rows = [model(s[None, :-1])[0].float().log_softmax(-1) for s in seqs]  # R x (T, V)
        logp[name] = torch.cat(rows)  # (N, V)
        del model
    nll = {k: -lp.gather(1, target[:, None]).mean().item() for k, lp in logp.items()}
    ref = logp["float32"]
    p_ref = ref.exp()  # (N, V)
    vocab = ref.shape[-1]
    return {
        "model": {"d_model": shape["d"], "layers": shape["layers"], "vocab": vocab, "weights": "random"},
        "tokens": int(target.numel()),
        "rows": sizes["rows"],
        "perplexity": {k: math.exp(v) for k, v in nll.items()},
        "perplexity_change": {k: math.exp(v - nll["float32"]) - 1 for k, v in nll.items()},
        "kl_from_float32": {k: (p_ref * (ref - lp)).sum(-1).mean().item() for k, lp in logp.items() if k != "float32"},
        "uniform_perplexity": vocab,
        "float32_entropy": -(p_ref * ref).sum(-1).mean().item(),
        "uniform_entropy": math.log(vocab),
    }


def fill_mask_and_own_text(quick: bool) -> dict:
    """Both measures, in a temporary directory of their own."""
    with tempfile.TemporaryDirectory() as tmp:
        return {"fill_mask": fill_mask_quality(quick, Path(tmp)), "own_text": own_text_quality(quick)}


# ---------------------------------------------------------------------------------------------------- report


def _pct(x: float) -> str:
    return f"{100 * x:+.2f}%"


def markdown(quality: dict) -> str:
    """The quality tables: one column per precision (float32, bf16, int8)."""
    ppl, lg, gr, cos = quality["perplexity"], quality["logits"], quality["greedy"], quality["minilm_cosine"]
    change = quality["perplexity_change"]
    out = [
        "## Quality per precision",
        "",
        "| measure | float32 | bf16 | int8 |",
        "|---|---:|---:|---:|",
        "| char GPT, Tiny Shakespeare validation perplexity | "
        + " | ".join(f"{ppl[p]:.4f} ({_pct(change[p])})" for p in PRECISIONS)
        + " |",
        "| char GPT logits: max abs gap to float32 (% of the largest logit) | — | "
        + " | ".join(f"{lg[p]['max_abs']:.4f} ({100 * lg[p]['relative']:.2f}%)" for p in PRECISIONS[1:])
        + " |",
        "| char GPT greedy tokens equal to float32's (first difference at) | — | "
        + " | ".join(f"{gr[p]['equal']}/{gr[p]['of']} ({gr[p]['equal_prefix']})" for p in PRECISIONS[1:])
        + " |",
    ]
    if "skipped" not in cos:
        out.append(
            f"| MiniLM embeddings ({cos['sentences']} Multi30k sentences): cosine to float32, min / mean | — | "
            + " | ".join(f"{cos[p]['min']:.5f} / {cos[p]['mean']:.5f}" for p in PRECISIONS[1:])
            + " |"
        )
    fm = quality.get("fill_mask")
    if fm:
        acc, agree = fm["top1_accuracy"], fm["agreement_with_float32"]
        out += [
            f"| fill-mask ({fm['positions']:,} masked held-out words): top-1 equal to float32's | — | "
            + " | ".join(f"{100 * agree[p]:.2f}%" for p in PRECISIONS[1:])
            + " |",
            f"| the same, at the {fm['agreement_elsewhere']['positions']:,} positions where float32's top-1 is not its "
            f"commonest ({fm['float32_commonest']['token']!r}, {100 * fm['float32_commonest']['share']:.1f}%) | — | "
            + " | ".join(f"{100 * fm['agreement_elsewhere'][p]:.2f}%" for p in PRECISIONS[1:])
            + " |",
            "| fill-mask: top-1 accuracy against the hidden word (always its commonest: "
            f"{100 * fm['hidden_word_majority']:.2f}%) | "
            + " | ".join(f"{100 * acc[p]:.2f}%" for p in PRECISIONS)
            + " |",
            "| fill-mask: distinct top-1 tokens | "
            + " | ".join(str(fm["distinct_top1"][p]) for p in PRECISIONS)
            + " |",
        ]
    ot = quality.get("own_text")
    if ot:
        own, kl = ot["perplexity"], ot["kl_from_float32"]
        out += [
            f"| SmolLM2-shaped Llama (random weights), perplexity of its own {ot['tokens']} sampled tokens | "
            + " | ".join(f"{own[p]:,.1f} ({_pct(ot['perplexity_change'][p])})" for p in PRECISIONS)
            + " |",
            "| the same: mean KL(float32 ‖ precision) of the next-token distributions, nats | — | "
            + " | ".join(f"{kl[p]:.2e}" for p in PRECISIONS[1:])
            + " |",
            "",
            f"The Llama's weights are random: its float32 next-token entropy is {ot['float32_entropy']:.3f} nats "
            f"against {ot['uniform_entropy']:.3f} for uniform (perplexity {ot['uniform_perplexity']:,}), so its "
            "perplexity says little about the precisions; the KL divergence does.",
        ]
    fs = quality["file_size"]
    out += [
        "",
        f"File (char GPT, model.safetensors): float32 {fs['float32_bytes']:,} bytes, int8 {fs['int8_bytes']:,} "
        f"({fs['ratio']:.3f}×).",
    ]
    return "\n".join(out) + "\n"
