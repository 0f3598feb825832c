"""The language model's library entry points: train a model on text, load it, continue a prompt, score a text.

    trainer, result = tformer.lm.train("tinyshakespeare.txt", "runs/lm", "shakespeare-char", minutes=1.5)
    model, tokenizer = tformer.lm.load("runs/lm")
    tformer.lm.generate(model, tokenizer, "ROMEO:", 100, on_text=print)

``tformer train lm``, ``tformer generate`` and ``tformer evaluate-lm`` are these functions behind flags;
tests and benchmarks call them too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from tformer import checks
from tformer.checks import check_settings
from tformer.generation import SamplingConfig, generate_lm
from tformer.lm.data import encode_documents, read_documents, split_ids
from tformer.lm.recipes import RECIPES, resolve
from tformer.lm.stream import TextStream
from tformer.lm.task import LMTask, evaluate_stream
from tformer.loader import load as load_any
from tformer.models.checkpoint import model_dir
from tformer.models.gpt import GPT, GPTConfig
from tformer.settings import takes_old_names
from tformer.text import check_text, check_texts
from tformer.tokenizers import Continuation, Tokenizer, load_tokenizer, train_tokenizer
from tformer.training.config import gpu_batch_note
from tformer.training.distributed import from_rank0, say
from tformer.training.resume import make_trainer, saved_run, start_run
from tformer.training.trainer import TrainConfig, Trainer

__all__ = ["TRAINING", "setup", "train", "load", "generate", "evaluate"]

# The TrainConfig values an lm run starts from unless given; lr, warmup and weight decay come from the preset's
# recipe (tformer.lm.recipes), and the CLI's defaults are these too
TRAINING = {"schedule": "cosine"}

# the recipes' and the CLI's --tokenizer names -> the tokenizer kinds (tformer.tokenizers)
TOKENIZER_KINDS = {"char": "char", "bpe": "byte_bpe"}


# Where this entry point bounds a setting otherwise than tformer.checks.SETTINGS (as `tformer train lm`'s flags do:
# tests/test_api_strict.py keeps them equal): the held-out part is a fraction of the text, a vocabulary needs the
# 3 special tokens + 1
BOUNDS: dict[str, checks.Check] = {
    "preset": checks.Choice(("tiny", "small", "base", *RECIPES)),
    "tokenizer": checks.Choice(TOKENIZER_KINDS),
    "vocab_size": checks.Number(int, 4, allowed="an integer >= 4 (3 special tokens + 1)"),
    "valid": checks.fraction,
}

GPU_ADVICE = "--preset shakespeare-char-gpu (6 × 384, 64 × 256 tokens a step), or a larger --batch-size"


def _tokenizer(directory: str | Path) -> Tokenizer:
    """The tokenizer of a ``tformer train lm`` model directory (a training run's: its best model's): characters
    (``char_tokenizer.json``) or byte-level BPE (``tokenizer.json``)."""
    directory = model_dir(directory)
    try:
        return load_tokenizer(directory, kinds=TOKENIZER_KINDS.values())
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{str(directory)!r} has no LM tokenizer (char_tokenizer.json or tokenizer.json); "
            "is it a `tformer train lm` run?"
        ) from None


@takes_old_names  # 0.2.0's block_size and val_fraction
def setup(
    data: str | Path,
    out_dir: str | Path,
    preset: str = "tiny",
    *,
    tokenizer: str | None = None,
    vocab_size: int | None = None,
    max_len: int | None = None,
    batch_size: int | None = None,
    dropout: float | None = None,
    lr: float | None = None,
    warmup_steps: int | None = None,
    weight_decay: float | None = None,
    batches_per_epoch: int = 200,
    eval_blocks: int | None = 400,
    valid: float = 0.1,
    resume: bool = False,
    log: Callable[[str], None] = say,
    **train_options,
) -> Trainer:
    """A :class:`Trainer` of a GPT on the documents of ``data``, ready to ``fit()``.

    Unset settings come from the recipe of ``preset`` (:mod:`tformer.lm.recipes`), else the defaults;
    ``max_len`` is the context (the model's and the training blocks'), ``valid`` the last part of the text held
    out for validation; ``train_options`` are the other :class:`TrainConfig` fields (``minutes``, ``max_steps``,
    ``device``, ...; :data:`TRAINING` unless given). With ``resume``, the tokenizer and the config come from
    ``OUT/last`` and training continues exactly where it stopped.
    """
    # each setting in its flag's bounds and words, before anything runs (an overwrite deletes the old run)
    check_settings(locals(), train_options, bounds=BOUNDS)
    r = resolve(
        preset,
        tokenizer=tokenizer,
        batch_size=batch_size,
        lr=lr,
        warmup_steps=warmup_steps,
        weight_decay=weight_decay,
        vocab_size=vocab_size,
        max_len=max_len,
        dropout=dropout,
    )
    options = {**TRAINING, **train_options}
    if (
        options["schedule"] == "cosine"
        and options.get("max_steps") is None
        and options.get("minutes") is None
        and options.get("epochs") is not None
    ):  # decay over the epochs
        options["max_steps"] = math.ceil(options["epochs"] * batches_per_epoch / options.get("accum_steps", 1))
    cfg = TrainConfig(
        out_dir=str(out_dir), lr=r["lr"], warmup_steps=r["warmup_steps"], weight_decay=r["weight_decay"], **options
    )
    settings = dict(
        preset=preset,
        tokenizer=r["tokenizer"],
        vocab_size=r["vocab_size"],
        max_len=r["max_len"],
        batch_size=r["batch_size"],
        dropout=dropout,
        batches_per_epoch=batches_per_epoch,
        valid=valid,
    )  # what makes the run: --resume refuses a change (eval_blocks may change)
    docs = read_documents(data)  # a missing or unreadable --data is refused before an overwrite deletes anything
    with start_run(cfg, resume, "lm", settings) as started:  # a non-empty out_dir needs resume or overwrite
        if resume:  # the run's own tokenizer and config; the weights come back in trainer.resume()
            config, tok = saved_run(out_dir, GPT, _tokenizer)
        else:
            kind = TOKENIZER_KINDS[r["tokenizer"]]
            tok = from_rank0(lambda: train_tokenizer(kind, docs, r["vocab_size"]), cfg.device)
            config = GPTConfig.preset(r["base"], vocab_size=tok.vocab_size, pad_id=tok.pad_id, **r["model"])
        train_ids, val_ids = split_ids(encode_documents(tok, docs), valid)
        torch.manual_seed(cfg.seed)
        model = GPT(config)
        val = f"{len(val_ids):,} validation tokens" if len(val_ids) >= 2 else "no validation data"
        log(
            f"data: {len(docs)} document(s), {len(train_ids):,} train tokens / {val}, "
            f"vocabulary {tok.vocab_size}; model: {sum(p.numel() for p in model.parameters()):,} parameters, "
            f"context {config.max_len}"
        )
        batch = f"--batch-size {r['batch_size']} × --max-len {config.max_len}"
        note = gpu_batch_note(cfg.device, r["batch_size"] * config.max_len * cfg.accum_steps, batch, GPU_ADVICE)
        if note:
            log(note)
        task = LMTask(
            tok, train_ids, val_ids, config.max_len, r["batch_size"], batches_per_epoch, eval_blocks, cfg.seed
        )
        return make_trainer(model, task, cfg, resume, started)


def train(data: str | Path, out_dir: str | Path, preset: str = "tiny", **options) -> tuple[Trainer, dict]:
    """Train a GPT (see :func:`setup` for the options); returns the trainer and its last evaluation
    (``val_loss``, ``val_ppl``, ``val_bpc``). The best model is in ``out_dir``, the last state in ``OUT/last``."""
    trainer = setup(data, out_dir, preset, **options)
    return trainer, trainer.fit()


def load(
    directory: str | Path,
    device: str = "cpu",
    dtype: torch.dtype | None = torch.float32,
    flag: str | None = None,
    fast: bool = True,
) -> tuple[GPT, Tokenizer]:
    """A GPT (in eval mode) and its tokenizer, checked to match, through :func:`tformer.load`: a ``tformer train lm``
    run or model directory, or a Hugging Face decoder directory (config.json with a Hugging Face ``model_type``,
    safetensors weights, tokenizer.json), read without ``transformers``. ``dtype``: the weights' dtype in memory
    (None: as stored, float32 for tformer's own); ``flag``: the argument messages name (``--model``); ``fast``: the
    fast kernels (False: the reference ones, ``--no-fast``)."""
    loaded = load_any(directory, device, dtype, family="gpt", flag=flag, fast=fast)
    tokenizer = loaded.require_tokenizer()
    if tokenizer.start_id is None:
        raise ValueError(
            f"{str(directory)!r} names neither a BOS nor an EOS token (generation_config.json, config.json, "
            "tokenizer_config.json): generation has nothing to start an empty prompt from"
        )
    model = loaded.model
    assert isinstance(model, GPT)
    return model, tokenizer


def generate(
    model: GPT,
    tokenizer,
    prompt: str,
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    stop: Iterable[str] = (),
    seed: int | None = None,
    on_text: Callable[[str], None] | None = None,
    compile: bool = False,
) -> str:
    """Continue ``prompt`` (no prompt: start a new document); ``on_text`` receives the text as it becomes safe
    to show (never the end-of-document token, nothing from a stop string on). Returns the continuation.
    ``compile=True``: the same text from a static KV cache and a compiled step (:func:`~tformer.generation.generate_lm`;
    a CUDA graph on a GPU), the first call paying the compilation."""
    if not isinstance(prompt, str):  # token ids go to tformer.generation.generate_lm
        raise TypeError(f"prompt must be a string (the text to continue), got {type(prompt).__name__} {prompt!r:.40}")
    check_text(prompt, "prompt")  # no lone surrogate, no NUL
    stop = check_texts(list(stop) if isinstance(stop, Iterable) and not isinstance(stop, str) else stop, "stop")
    checks.max_new_tokens.check(max_new_tokens, "max_new_tokens")  # the words of --max-new-tokens
    # tformer's tokenizers start and end a document with <|endoftext|>; a Hugging Face one names its own ids
    ends, pad = tokenizer.eos_ids, tokenizer.pad_id
    start = tokenizer.start_id
    if start is None:
        raise ValueError(f"this {tokenizer.kind} tokenizer has neither a BOS nor an EOS token to start a text from")
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=True) or [start]  # no prompt: a new document
    # a SentencePiece-style decoder may strip a leading space: decode the new ids after the prompt's, then cut
    stream = TextStream(Continuation(tokenizer, prompt_ids), stop)
    pieces: list[str] = []

    def emit(text: str) -> None:
        pieces.append(text)
        if on_text is not None:
            on_text(text)

    def show(step, ids) -> None:
        if int(ids[0]) not in ends:  # the end of the document is not shown
            emit(stream.push(int(ids[0])))

    generate_lm(
        model,
        [prompt_ids],
        max_new_tokens,
        sampling or SamplingConfig(),
        eos_id=ends[0] if ends else None,
        pad_id=pad if pad is not None else 0,  # only fills a batch's left padding, which the mask hides
        seed=seed,
        on_token=show,
        stop_ids=ends[1:],
        stop=lambda step, ids: [stream.stopped],
        compile=compile,
    )
    emit(stream.flush())
    return "".join(pieces)


def evaluate(model: GPT, tokenizer, data: str | Path, max_len: int | None = None, batch_size: int = 32) -> dict:
    """Loss per token, perplexity and bits per unit of ``model`` on the documents of ``data``; ``unit`` says
    which ("character" for the char tokenizer, else "byte"), ``tokens`` how many were scored. A tformer run's
    tokenizer only: the stream joins documents with its <|endoftext|> and leaves <pad> unscored."""
    if tokenizer.unit is None:
        raise ValueError(
            "evaluate-lm scores models trained with `tformer train lm` (a char or byte_bpe tokenizer); this model's "
            f"is a {tokenizer.kind} tokenizer (a Hugging Face directory's?), whose units this scoring does not know"
        )
    ids = encode_documents(tokenizer, read_documents(data))
    if len(ids) < 2:
        raise ValueError(f"--data {str(data)!r} has fewer than 2 tokens")
    block = min(max_len or model.config.max_len, model.config.max_len)
    result = evaluate_stream(model, ids, torch.tensor(tokenizer.unit_lengths()), block, batch_size)
    return {**result, "unit": tokenizer.unit}
