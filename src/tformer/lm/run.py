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
from tformer.data import TOKENIZER_SAMPLE, fingerprint
from tformer.finetune import LoraSettings, adapter_writer, add_adapters, refuse_given, start_from
from tformer.generation import SamplingConfig
from tformer.hf.peft import exportable
from tformer.lm.corpus import BOUNDS, TOKENIZER_KINDS, check_data, data_tokenizer, folder_tokenizer, prepare, streams
from tformer.lm.recipes import resolve
from tformer.lm.scoring import evaluate  # noqa: F401  (tformer.lm.run.evaluate, as before)
from tformer.lm.sft import SFTTask, read_conversations, sft_task
from tformer.lm.stream import stream_ids
from tformer.lm.task import LMTask
from tformer.loader import load as load_any
from tformer.models.checkpoint import model_dir
from tformer.models.config import shape_given
from tformer.models.gpt import GPT, GPTConfig
from tformer.settings import takes_old_names
from tformer.text import check_text, check_texts
from tformer.tokenizers import Tokenizer, load_tokenizer
from tformer.training.config import gpu_batch_note, known_train_options
from tformer.training.distributed import from_rank0, say
from tformer.training.resume import last_dir, make_trainer, precheck_out_dir, saved_run, start_run
from tformer.training.sharded import building
from tformer.training.trainer import TrainConfig, Trainer

__all__ = ["TRAINING", "setup", "prepare", "train", "load", "generate", "evaluate"]

# The TrainConfig values an lm run starts from unless given; lr, warmup and weight decay come from the preset's
# recipe (tformer.lm.recipes), and the CLI's defaults are these too
TRAINING = {"schedule": "cosine"}

# What a run from --init starts from unless given: a smaller step than training from scratch (5e-5 in full, 3e-4 for
# LoRA's pairs, as PEFT's and litgpt's examples), no weight decay on LoRA's pairs, a short warmup, 8 rows of at most
# 512 tokens (the model's context when shorter)
FINE_TUNING_LR = {False: 5e-5, True: 3e-4}  # by LoRA or not
FINE_TUNING_WARMUP, FINE_TUNING_BATCH, FINE_TUNING_CONTEXT = 20, 8, 512


PAD_VOCAB = 64  # a new model's table and head rows: a multiple of this (--pad-vocab; nanoGPT's 50,304 for GPT-2)
GPU_ADVICE = "--preset shakespeare-char-gpu (6 × 384, 64 × 256 tokens a step), or a larger --batch-size"


def _tokenizer(directory: str | Path) -> Tokenizer:
    """The tokenizer of a ``tformer train lm`` model directory (a training run's: its best model's): characters
    (``char_tokenizer.json``) or byte-level BPE (``tokenizer.json``)."""
    directory = model_dir(directory)
    try:
        return load_tokenizer(directory, kinds=[*TOKENIZER_KINDS.values(), "hf"])  # hf: a run from --init
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{str(directory)!r} has no LM tokenizer (char_tokenizer.json or tokenizer.json); "
            "is it a `tformer train lm` run?"
        ) from None


@takes_old_names  # 0.2.0's block_size and val_fraction
def setup(
    data: str | Path,
    out_dir: str | Path,
    preset: str | None = None,
    *,
    init: str | Path | None = None,
    lora_r: int = 0,
    lora_alpha: float | None = None,
    lora_dropout: float = 0.05,
    lora_targets: str = "attn.*",
    tokenizer: str | None = None,
    tokenizer_dir: str | Path | None = None,
    tokenizer_sample: int = TOKENIZER_SAMPLE,
    vocab_size: int | None = None,
    pad_vocab: int | None = None,
    max_len: int | None = None,
    batch_size: int | None = None,
    dropout: float | None = None,
    ffn_dropout: float | None = None,
    shift_tokens: int | None = None,
    d_model: int | None = None,
    n_heads: int | None = None,
    d_ff: int | None = None,
    n_layers: int | None = None,
    lr: float | None = None,
    warmup_steps: int | None = None,
    weight_decay: float | None = None,
    batches_per_epoch: int = 200,
    eval_blocks: int | None = 400,
    valid: float = 0.1,
    valid_data: str | Path | None = None,
    text_field: str = "text",
    data_cache: str | Path | None = None,
    resume: bool = False,
    log: Callable[[str], None] = say,
    **train_options,
) -> Trainer:
    """A :class:`Trainer` of a GPT on the documents of ``data``, ready to ``fit()``.

    ``data`` is tokenized once into memory-mapped shards kept in the cache (``data_cache``, else the user's cache
    folder: :mod:`tformer.data`), and training reads its blocks from them: a corpus of any size, in about the memory
    of the model. ``data`` may be a text file, a JSONL, Parquet or Arrow file (the string field ``text_field``), a
    dataset saved by Hugging Face ``datasets``, a folder of such files, or a folder prepared by ``tformer data
    prepare``. The tokenizer is trained on the corpus (BPE on ``tokenizer_sample`` bytes of it), or is the one in
    ``tokenizer_dir`` (a Hugging Face directory's ``tokenizer.json``, e.g. GPT-2's). ``valid``: a fraction of the
    stream (capped at :data:`VALID_CAP` tokens) or a count of tokens held out from its end; ``valid_data``: a
    separate corpus to validate on instead.

    Unset settings come from the recipe of ``preset`` (:mod:`tformer.lm.recipes`), else the defaults (``d_model``,
    ``n_heads``, ``d_ff``, ``n_layers``: the model's shape; ``ffn_dropout``: inside its feed-forward; ``shift_tokens``:
    :attr:`GPTConfig.shift_tokens`); ``max_len`` is the context (the model's and the training blocks');
    ``train_options`` are the other :class:`TrainConfig` fields (``minutes``, ``max_steps``, ``device``, ...;
    :data:`TRAINING` unless given). With ``resume``, the tokenizer and the config come from ``OUT/last``.

    ``pad_vocab``: the new model's token table and output head get rows up to a multiple of it
    (:attr:`GPTConfig.vocab_multiple`; None: :data:`PAD_VOCAB`, 1: none), so that the GPU's matrix tiles fit them;
    the rows past the vocabulary are no words, their logits cut off, and an export leaves them out.

    ``init``: start from this pretrained GPT (a tformer run or model, a Hugging Face decoder directory) and its
    tokenizer instead of a new model (``preset``, ``tokenizer``, ``vocab_size`` and ``dropout`` are then refused);
    ``lora_r`` > 0 trains LoRA pairs of that rank beside ``lora_targets`` only (:mod:`tformer.finetune`), the best
    model written with its PEFT adapter beside it. ``data`` may then also be instruction data, a JSONL of
    ``{"prompt", "response"}`` or ``{"messages"}`` lines (:mod:`tformer.lm.sft`): the loss is on the answers only,
    the conversations rendered with the model's chat template, ``valid`` a fraction of the conversations.
    """
    # each setting in its flag's bounds and words, before anything runs (an overwrite deletes the old run)
    check_settings({**locals(), "preset": preset or "tiny"}, known_train_options(train_options, setup), bounds=BOUNDS)
    fields: dict[str, float | None] = dict(d_model=d_model, n_heads=n_heads, d_ff=d_ff, n_layers=n_layers)
    fields.update(ffn_dropout=ffn_dropout, shift_tokens=shift_tokens)  # the model's shape, over the recipe's
    shape = shape_given(**fields)  # (the ones given)
    refuse_given(init, shape)
    lora = LoraSettings(lora_r, lora_alpha, lora_dropout, lora_targets)  # (its flags without --lora-r: refused)
    if init is not None or lora_r:
        return _setup_from(
            data,
            out_dir,
            init,
            lora,
            preset=preset,
            tokenizer=tokenizer,
            vocab_size=vocab_size,
            pad_vocab=pad_vocab,
            max_len=max_len,
            batch_size=batch_size,
            dropout=dropout,
            lr=lr,
            warmup_steps=warmup_steps,
            weight_decay=weight_decay,
            tokenizer_dir=tokenizer_dir,
            batches_per_epoch=batches_per_epoch,
            eval_blocks=eval_blocks,
            valid=valid,
            valid_data=valid_data,
            text_field=text_field,
            data_cache=data_cache,
            resume=resume,
            log=log,
            **train_options,
        )
    preset = preset or "tiny"
    if read_conversations(data, text_field) is not None:
        raise ValueError(
            f"--data {str(data)!r} is instruction data (prompt/response or messages lines): it fine-tunes a "
            "pretrained model, given with --init"
        )
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
        shape=shape,
    )
    options = {**TRAINING, **train_options}
    epochs_only = (
        options.get("epochs") is not None and options.get("max_steps") is None and options.get("minutes") is None
    )
    if options["schedule"] == "cosine" and epochs_only:  # decay over the epochs
        options["max_steps"] = math.ceil(options["epochs"] * batches_per_epoch / options.get("accum_steps", 1))
    cfg = TrainConfig(
        out_dir=str(out_dir), lr=r["lr"], warmup_steps=r["warmup_steps"], weight_decay=r["weight_decay"], **options
    )
    folder = folder_tokenizer(data, tokenizer, vocab_size, tokenizer_dir, out_dir if resume else None, log)
    kind, size = folder or (r["tokenizer"], r["vocab_size"])  # a prepared folder: its own tokenizer's
    settings = dict(
        preset=preset,
        tokenizer=kind,
        vocab_size=size,
        pad_vocab=pad_vocab,
        max_len=r["max_len"],
        batch_size=r["batch_size"],
        dropout=dropout,
        **fields,  # None: the recipe's
        batches_per_epoch=batches_per_epoch,
        valid=valid,
    )  # what makes the run: --resume refuses a change (eval_blocks may change)
    check_data(data, valid_data, text_field)  # a missing or unreadable --data is refused before an overwrite
    settings["data_sha256"] = fingerprint(data)  # what the text was: a resume on a changed one is refused
    settings["valid_data_sha256"] = None if valid_data is None else fingerprint(valid_data)  # (its best/ too)
    # the corpus is prepared (read whole, strict UTF-8) before an --overwrite deletes the old run: a wrong --out first
    precheck_out_dir(out_dir, resume, cfg.overwrite, data_cache, data=data, valid_data=valid_data)
    if not resume:
        tok = from_rank0(
            lambda: data_tokenizer(
                data,
                tokenizer_dir,
                TOKENIZER_KINDS[r["tokenizer"]],
                r["vocab_size"],
                tokenizer_sample,
                text_field,
                data_cache,
                log,
            ),
            cfg.device,
        )
        multiple = PAD_VOCAB if pad_vocab is None else pad_vocab
        config = GPTConfig.preset(
            r["base"], vocab_size=tok.vocab_size, vocab_multiple=multiple, pad_id=tok.pad_id, **r["model"]
        )
        prepared = streams(data, valid_data, tok, valid, text_field, data_cache, cfg.device, log)
    with start_run(cfg, resume, "lm", settings, log) as started:  # a non-empty out_dir needs resume or overwrite
        if resume:  # the run's own tokenizer and config; the weights come back in trainer.resume()
            config, tok = saved_run(out_dir, GPT, _tokenizer)
            prepared = streams(data, valid_data, tok, valid, text_field, data_cache, cfg.device, log)
        train_ids, val_ids, said = prepared
        torch.manual_seed(cfg.seed)
        with building(cfg.fsdp):  # --fsdp: whole on rank 0 alone
            model = GPT(config)
        rows = "" if config.table_rows == tok.vocab_size else f" (table and head {config.table_rows} rows: --pad-vocab)"
        log(
            f"data: {said}, vocabulary {tok.vocab_size}{rows}; model: "
            f"{sum(p.numel() for p in model.parameters()):,} parameters, context {config.max_len}"
        )
        batch = f"--batch-size {r['batch_size']} × --max-len {config.max_len}"
        note = gpu_batch_note(cfg.device, r["batch_size"] * config.max_len * cfg.accum_steps, batch, GPU_ADVICE)
        if note:
            log(note)
        task = LMTask(
            tok, train_ids, val_ids, config.max_len, r["batch_size"], batches_per_epoch, eval_blocks, cfg.seed
        )
        return make_trainer(model, task, cfg, resume, started, log=log)


def _block(max_len: int | None, context: int) -> int:
    """The fine-tuning block: ``--max-len`` (at most the pretrained model's ``context``), else the shorter of the
    context and :data:`FINE_TUNING_CONTEXT`."""
    if max_len is not None and max_len > context:
        raise ValueError(f"--max-len {max_len} exceeds the --init model's context ({context} positions)")
    return max_len if max_len is not None else min(context, FINE_TUNING_CONTEXT)


def _setup_from(
    data: str | Path,
    out_dir: str | Path,
    init: str | Path | None,
    lora: LoraSettings,
    *,
    preset: str | None,
    tokenizer: str | None,
    vocab_size: int | None,
    pad_vocab: int | None,
    max_len: int | None,
    batch_size: int | None,
    dropout: float | None,
    lr: float | None,
    warmup_steps: int | None,
    weight_decay: float | None,
    tokenizer_dir: str | Path | None,
    batches_per_epoch: int,
    eval_blocks: int | None,
    valid: float,
    valid_data: str | Path | None,
    text_field: str,
    data_cache: str | Path | None,
    resume: bool,
    log: Callable[[str], None],
    **train_options,
) -> Trainer:
    """:func:`setup` from the pretrained model ``init``: continued pretraining on text, or fine-tuning on instruction
    data, in full or with LoRA (see :func:`setup`)."""
    if init is None:
        raise ValueError(f"--lora-r {lora.r} needs --init: LoRA adapts a pretrained model")
    refuse_given(
        init,
        {
            "--preset": preset,
            "--tokenizer": tokenizer,
            "--tokenizer-dir": tokenizer_dir,
            "--vocab-size": vocab_size,
            "--pad-vocab": pad_vocab,
            "--dropout": dropout,
        },
    )
    options = {
        **TRAINING,
        "lr": lr if lr is not None else FINE_TUNING_LR[bool(lora.r)],
        "warmup_steps": warmup_steps if warmup_steps is not None else FINE_TUNING_WARMUP,
        "weight_decay": weight_decay if weight_decay is not None else (0.0 if lora.r else 0.01),  # none on the pairs
        **train_options,
    }
    TrainConfig(out_dir=str(out_dir), **{**options, "schedule": "constant"})  # a missing budget is said first
    conversations = read_conversations(data, text_field)  # --data next: a bad one is named before anything is loaded
    if conversations is None:
        check_data(data, valid_data, text_field)
    data_sha256 = fingerprint(data) if conversations is None else None  # (conversations: their own key, below)
    settings = dict(
        init=str(Path(init).absolute()),  # the directory, whatever the cwd of a --resume
        lora_r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        lora_targets=lora.targets,
        max_len=max_len,
        batch_size=batch_size,
        batches_per_epoch=batches_per_epoch,
        valid=valid,
        data_sha256=data_sha256,
    )  # what makes the run: --resume refuses a change
    if conversations is not None:  # (a key of its own: runs before it saved data_sha256=None, and still resume)
        settings["conversations_sha256"] = fingerprint(data)
    model: GPT | None = None
    device = str(options.get("device", "cpu"))
    overwrite = bool(options.get("overwrite"))
    precheck_out_dir(out_dir, resume, overwrite, data_cache, data=data, valid_data=valid_data)  # before long work
    prepared = None
    if not resume:  # before an overwrite deletes anything: a bad --init, target or text is refused first
        loaded = start_from(init, "gpt")
        model, tok = loaded.model, loaded.require_tokenizer()
        _block(max_len, model.config.max_len)  # a length past its context: refused before the corpus is read
        torch.manual_seed(int(options.get("seed", 0)))  # LoRA's A starts random: seeded, as a new model is
        add_adapters(model, lora, log)
        if conversations is None:
            prepared = streams(data, valid_data, tok, valid, text_field, data_cache, device, log)
    decay_over_epochs = options["schedule"] == "cosine" and options.get("max_steps") is None
    decay_over_epochs = decay_over_epochs and options.get("minutes") is None
    # the run's directory, checked and locked (its budget's end is known once the data is: the steps of an epoch)
    with start_run(
        TrainConfig(out_dir=str(out_dir), **{**options, "max_steps": 1} if decay_over_epochs else options),
        resume,
        "lm",
        settings,
        log,
    ) as started:
        if model is None:  # --resume: the run's own tokenizer and model (its LoRA layers from config.json)
            last = last_dir(out_dir)
            model, tok = GPT.from_pretrained(last), _tokenizer(last)
            model.train()
        block = _block(max_len, model.config.max_len)
        rows = batch_size or FINE_TUNING_BATCH
        task: LMTask | SFTTask
        if conversations is not None:
            task = sft_task(tok, conversations, block, rows, valid, int(options.get("seed", 0)), log)
            per_epoch = math.ceil(len(task.train) / rows)  # the batches of an epoch, counted, not made
        else:
            if prepared is None:  # --resume: the run's tokenizer's ids
                prepared = streams(data, valid_data, tok, valid, text_field, data_cache, device, log)
            train_ids, val_ids, said = prepared
            log(f"data: {said} (continued pretraining)")
            task = LMTask(tok, train_ids, val_ids, block, rows, batches_per_epoch, eval_blocks, options.get("seed", 0))
            per_epoch = batches_per_epoch
        if decay_over_epochs:
            options["max_steps"] = math.ceil(options["epochs"] * per_epoch / options.get("accum_steps", 1))
        cfg = TrainConfig(out_dir=str(out_dir), **options)
        writers = []
        if lora.r:
            problem = exportable(model.config, init)
            if problem is None:
                writers.append(adapter_writer(init, log))
            else:
                log(f"note: no PEFT adapter is written beside the best model: {problem}")
        torch.manual_seed(cfg.seed)
        return make_trainer(model, task, cfg, resume, started, also_save=writers, evaluate_start=True, log=log)


def train(data: str | Path, out_dir: str | Path, preset: str | None = None, **options) -> tuple[Trainer, dict]:
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
    start = tokenizer.start_id
    if start is None:
        raise ValueError(f"this {tokenizer.kind} tokenizer has neither a BOS nor an EOS token to start a text from")
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=True) or [start]  # no prompt: a new document
    return stream_ids(model, tokenizer, prompt_ids, max_new_tokens, sampling, stop, seed, on_text, compile).text
