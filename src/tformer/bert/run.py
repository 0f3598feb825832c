"""BERT's library entry points: pretrain (MLM + NSP) on text, fine-tune a classifier on ``text<TAB>label``.

    trainer, result = tformer.bert.train("tinyshakespeare.txt", "runs/bert", preset="tiny", minutes=5)
    trainer, result = tformer.bert.train_classifier("langid.tsv", "runs/langid", init="runs/bert", epochs=1)

``tformer train bert`` and ``tformer train classify`` are these functions behind flags, ``tformer data prepare bert``
is :func:`prepare`; tests and benchmarks call them too. Pretraining reads a corpus of any size: its sentences are
tokenized once into memory-mapped shards kept in the cache (:mod:`tformer.data.sentences`), the WordPiece trained on
a sample of them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

import torch

from tformer import checks
from tformer.bert.classification import ClassifyTask, label_note, read_labelled_tsv, split_examples
from tformer.bert.fill_mask import untrained_heads
from tformer.bert.pretraining import BertPretrainTask
from tformer.checks import check_settings
from tformer.data import TOKENIZER_SAMPLE, find_sources, fingerprint, is_prepared, prepared_vocab_size
from tformer.data.sentences import Sentences, held_out_sentences, prepare_sentences, sentences_tokenizer
from tformer.finetune import NO_BERT_ADAPTER, LoraSettings, add_adapters, count_parameters, refuse_given, start_from
from tformer.hf.heads import untrained_mlm
from tformer.loader import load
from tformer.models.bert import Bert, BertConfig
from tformer.models.checkpoint import model_dir
from tformer.models.config import shape_given
from tformer.nn.lora import has_lora
from tformer.tokenizers import Tokenizer, WordPieceTokenizer, load_tokenizer, train_tokenizer
from tformer.training.config import known_train_options
from tformer.training.distributed import from_rank0, say
from tformer.training.resume import last_dir, make_trainer, precheck_out_dir, saved_run, saved_settings, start_run
from tformer.training.sharded import building
from tformer.training.trainer import TrainConfig, Trainer

__all__ = [
    "TRAINING",
    "CLASSIFIER_TRAINING",
    "VALID_CAP",
    "setup",
    "train",
    "prepare",
    "setup_classifier",
    "train_classifier",
]

# The TrainConfig values pretraining and fine-tuning start from unless given (the CLI's defaults are these too)
TRAINING = {"lr": 5e-4, "warmup_steps": 400, "schedule": "inverse_sqrt"}
# What continued pretraining from --init changes unless given: a tenth of the learning rate in full (LoRA's new
# pairs keep TRAINING's, without weight decay), a short warmup
FINE_TUNING = {"lr": 5e-5, "warmup_steps": 50}
FINE_TUNING_LORA = {"lr": 5e-4, "warmup_steps": 50, "weight_decay": 0.0}
CLASSIFIER_TRAINING = {"lr": 3e-4, "warmup_steps": 100, "schedule": "inverse_sqrt"}
MAX_LEN = 128  # --max-len of a new model; with --init the model's positions, up to this
# Where these entry points bound a setting otherwise than tformer.checks.SETTINGS (as `tformer train bert` and
# `train classify`'s flags do: tests/test_api_strict.py keeps them equal)
BOUNDS: dict[str, checks.Check] = {
    "preset": checks.Choice(BertConfig.PRESETS),
    "vocab_size": checks.Number(int, 6, allowed="an integer >= 6 (5 special tokens + 1)"),
    "max_len": checks.Number(int, 3, allowed="an integer >= 3 ([CLS] A [SEP] B [SEP] needs 3)"),
}
# A held-out part given as a fraction of a large corpus is capped at this many sentences: each evaluation reads and
# scores every held-out pair (about one a sentence), and every sentence held out is one not trained on (--valid N
# holds out N)
VALID_CAP = 10_000


def _tokenizer(texts: list[str], tokenizer_dir: str | Path | None, vocab_size: int, device: str) -> WordPieceTokenizer:
    """The WordPiece of ``tokenizer_dir``, else one trained on ``texts`` (by rank 0, for every process)."""
    if tokenizer_dir:
        return WordPieceTokenizer.load(model_dir(tokenizer_dir))
    return from_rank0(lambda: train_tokenizer("wordpiece", texts, vocab_size), device)


def _pretraining_tokenizer(
    data, tokenizer_dir, vocab_size: int | None, valid: float, sample: int, cache, log
) -> WordPieceTokenizer:
    """The WordPiece of a new model: ``tokenizer_dir``'s, a prepared folder's own, else one trained on the training
    sentences of ``data`` (a sample of a large corpus; cached: :func:`tformer.data.sentences.sentences_tokenizer`)."""
    if tokenizer_dir:
        return WordPieceTokenizer.load(model_dir(tokenizer_dir))
    tok: Tokenizer
    if is_prepared(data, "bert"):
        tok = load_tokenizer(Path(data) / "tokenizer", kinds=["wordpiece"])  # another kind: refused, named
    else:
        tok = sentences_tokenizer(
            data, vocab_size, valid=valid, valid_cap=VALID_CAP, sample=sample, cache=cache, log=log
        )
    if tok.kind != "wordpiece":
        raise ValueError(f"--data {str(data)!r} was prepared with a {tok.kind} tokenizer, not a BERT's WordPiece")
    return cast(WordPieceTokenizer, tok)


def _check_data(data) -> None:
    """``--data`` exists and holds text files (or is a prepared folder): refused in one line before a run's directory
    is touched."""
    if not is_prepared(data, "bert"):
        find_sources(data)


def _corpus(
    data, tokenizer: WordPieceTokenizer, valid: float, cache, device: str, log
) -> tuple[Sentences, Sentences, str]:
    """The training and held-out sentences of ``data``, memory-mapped from its prepared shards (prepared first when
    they are not in the cache; by the first process alone under torchrun), and what they hold, in words."""
    directory = from_rank0(lambda: prepare_sentences(data, tokenizer, cache=cache, log=log), device)
    corpus = Sentences.open(directory)
    n_valid = held_out_sentences(len(corpus), valid, VALID_CAP)
    train, held = corpus.split(len(corpus) - n_valid)
    said = (
        f"{len(train)} training / {len(held)} held-out sentences in {len(train.document_sizes())} / "
        f"{len(held.document_sizes())} documents" + ("" if len(held) else " (no validation data)")
    )
    if 0 < valid < 1 and n_valid < held_out_sentences(len(corpus), valid):
        said += f" (the last {valid:g} capped at {VALID_CAP:,} sentences; --valid N holds out N)"
    return train, held, said


def _check_start(init, lora: LoraSettings, shape: dict, **given) -> LoraSettings:
    """``--init``'s refusals: LoRA without it, a flag that would change its architecture or tokenizer (``given``: by
    the entry point's names, None when not given; ``shape``: the model's shape given)."""
    if lora.r and init is None:
        raise ValueError(f"--lora-r {lora.r} needs --init: LoRA adapts a pretrained model")
    if init is not None:
        refuse_given(init, {**given, **shape})
    return lora


def _start_settings(init, lora: LoraSettings) -> dict:  # init: the directory, whatever the cwd of a --resume
    lora_settings = dict(lora_r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, lora_targets=lora.targets)
    return dict(init=str(Path(init).absolute()), **lora_settings)


def _pretrained(
    init, lora: LoraSettings, max_len: int | None, seed: int, log: Callable[[str], None]
) -> tuple[Bert, WordPieceTokenizer]:
    """The BERT of ``init`` with its WordPiece, LoRA pairs beside it when asked; ``max_len`` within its positions."""
    loaded = start_from(init, "bert")
    model = loaded.model
    assert isinstance(model, Bert)
    if (max_len or 0) > model.config.max_len:
        raise ValueError(f"--max-len {max_len} exceeds the --init model's max_len {model.config.max_len}")
    torch.manual_seed(seed)  # LoRA's A starts random: seeded
    if add_adapters(model, lora, log) is not None:  # the pretraining heads train in full (new ones start random)
        _train_heads(model, classifier=False)
        trainable, total = count_parameters(model)  # (the word table tied to the MLM head stays frozen)
        log(f"and the MLM and NSP heads: {trainable:,} trainable of {total:,}\n{NO_BERT_ADAPTER}")
    return model, cast(WordPieceTokenizer, loaded.require_tokenizer())  # a BERT's is WordPiece (tformer.loader)


def _train_heads(model: Bert, classifier: bool) -> None:
    """Beside LoRA's pairs, the heads train in full (PEFT's ``modules_to_save``): the classification head, or the
    MLM and NSP heads of pretraining (the word table tied to the MLM head stays frozen)."""
    tied = {id(p) for p in model.embed.parameters()}
    heads = [model.classifier] if classifier else [model.mlm_head, model.nsp_head]
    for head in heads:
        assert head is not None
        for p in head.parameters():
            p.requires_grad_(id(p) not in tied)


def _resumed(out_dir, classifier: bool = False) -> tuple[Bert, WordPieceTokenizer]:
    """A run from ``--init``: its model read whole from ``OUT/last`` (LoRA layers included, the heads trainable as
    they were) and its WordPiece."""
    last = last_dir(out_dir)
    model = Bert.from_pretrained(last).train()
    if has_lora(model):
        _train_heads(model, classifier)
    return model, WordPieceTokenizer.load(last)


def _overrides(dropout: float | None, shape: dict[str, float]) -> dict:
    return {**shape, **({} if dropout is None else {"dropout": dropout})}


def setup(
    data: str | Path,
    out_dir: str | Path,
    *,
    init: str | Path | None = None,
    lora_r: int = 0,
    lora_alpha: float | None = None,
    lora_dropout: float = 0.05,
    lora_targets: str = "attn.*",
    preset: str | None = None,
    tokenizer_dir: str | Path | None = None,
    vocab_size: int | None = None,
    max_len: int | None = None,
    batch_size: int = 32,
    dropout: float | None = None,
    ffn_dropout: float | None = None,
    d_model: int | None = None,
    n_heads: int | None = None,
    d_ff: int | None = None,
    n_layers: int | None = None,
    valid: float = 0.05,
    mlm_prob: float = 0.15,
    tokenizer_sample: int = TOKENIZER_SAMPLE,
    data_cache: str | Path | None = None,
    resume: bool = False,
    log: Callable[[str], None] = say,
    **train_options,
) -> Trainer:
    """A :class:`Trainer` of MLM + NSP pretraining on the documents of ``data``, ready to ``fit()``.

    ``data``: a text file (blank line = new document, one sentence per line), a ``.tsv`` (first column), a folder
    of text files (or JSONL, Parquet, Arrow: each record's lines), or a folder ``tformer data prepare bert`` wrote.
    Its sentences are tokenized once into memory-mapped shards kept in the cache (``data_cache``, else the user's
    cache folder: :mod:`tformer.data.sentences`), and each batch reads its pairs from them: a corpus of any size. The
    last ``valid`` sentences are held out: a fraction (capped at :data:`VALID_CAP`, said) or a count. The WordPiece
    comes from ``tokenizer_dir`` or is trained on the training sentences (on a sample of ``tokenizer_sample`` bytes
    spread over a larger corpus; cached too); with ``resume``, tokenizer and config come from ``OUT/last``.
    ``train_options`` are the other :class:`TrainConfig` fields (:data:`TRAINING` unless given).

    ``init``: continue the pretraining of this BERT (a tformer run or model, a Hugging Face BERT directory) with its
    own WordPiece (``preset``, ``tokenizer_dir``, ``vocab_size`` and ``dropout`` are then refused; ``max_len`` at most
    its positions, by default its own up to :data:`MAX_LEN`; heads it lacks start new); ``lora_r`` > 0 trains LoRA pairs
    beside ``lora_targets`` only.
    """
    # each setting in its flag's bounds and words, before anything runs (an overwrite deletes the old run)
    check_settings({**locals(), "preset": preset or "small"}, known_train_options(train_options, setup), bounds=BOUNDS)
    shape = shape_given(d_model=d_model, n_heads=n_heads, d_ff=d_ff, n_layers=n_layers, ffn_dropout=ffn_dropout)
    lora = _check_start(
        init,
        LoraSettings(lora_r, lora_alpha, lora_dropout, lora_targets),
        shape,
        preset=preset,
        tokenizer_dir=tokenizer_dir,
        vocab_size=vocab_size,
        dropout=dropout,
    )
    if init is not None:
        train_options = {**(FINE_TUNING_LORA if lora.r else FINE_TUNING), **train_options}
    folder_vocab = prepared_vocab_size(data, vocab_size, log)  # a prepared folder's: its own WordPiece's (or None)
    preset, vocab_size = preset or "small", folder_vocab or vocab_size or 8000
    max_len = max_len if init is not None else max_len or MAX_LEN
    cfg = TrainConfig(out_dir=str(out_dir), **{**TRAINING, **train_options})
    settings = dict(preset=preset, vocab_size=vocab_size, max_len=max_len, batch_size=batch_size, dropout=dropout)
    if resume and folder_vocab:  # the run's WordPiece, which is the folder's (checked); an older run: 8000
        settings["vocab_size"] = saved_settings(out_dir).get("vocab_size", folder_vocab)
    settings.update(d_model=d_model, n_heads=n_heads, d_ff=d_ff, n_layers=n_layers, ffn_dropout=ffn_dropout)  # shape
    if init is None:  # a shape the preset cannot take (d_model not divisible by n_heads) is refused before anything
        BertConfig.preset(preset, vocab_size=vocab_size, max_len=max_len, **_overrides(dropout, shape))
    else:
        settings = {"max_len": max_len, "batch_size": batch_size, **_start_settings(init, lora)}
    # the data first: a missing --data is refused before an overwrite deletes anything
    _check_data(data)
    base = _pretrained(init, lora, max_len, cfg.seed, log) if init is not None and not resume else None
    # what makes the run: --resume refuses a change (the tokenizer comes from OUT/last)
    # the corpus prepared (read whole, strict UTF-8) before an --overwrite deletes the old run; a wrong --out first
    precheck_out_dir(out_dir, resume, cfg.overwrite, data_cache, data=data)
    model: Bert | None = None
    corpus = None
    if not resume:
        if base is not None:
            model, tokenizer = base
        else:
            made = (data, tokenizer_dir, vocab_size, valid, tokenizer_sample, data_cache, log)
            tokenizer = from_rank0(lambda: _pretraining_tokenizer(*made), cfg.device)  # rank 0 trains, the rest read
            sizes = dict(vocab_size=tokenizer.vocab_size, max_len=max_len, pad_id=tokenizer.pad_id)
            config = BertConfig.preset(preset, **sizes, **_overrides(dropout, shape))
        corpus = _corpus(data, tokenizer, valid, data_cache, cfg.device, log)
    settings.update(valid=valid, mlm_prob=mlm_prob, data_sha256=fingerprint(data))  # the text: a changed one refused
    with start_run(cfg, resume, "bert", settings, log) as started:
        if resume and init is not None:  # the run's model whole (its LoRA layers from config.json)
            model, tokenizer = _resumed(out_dir)
        elif resume:
            config, tokenizer = saved_run(out_dir, Bert, WordPieceTokenizer.load)
        if corpus is None:  # --resume: the run's WordPiece's ids
            corpus = _corpus(data, tokenizer, valid, data_cache, cfg.device, log)
        train_part, held, said = corpus
        log(f"data: {said}")
        torch.manual_seed(cfg.seed)
        max_len = max_len or min(MAX_LEN, cast(Bert, model).config.max_len)  # None: --init's, up to MAX_LEN
        task = BertPretrainTask(tokenizer, train_part, held, max_len, batch_size, cfg.seed, mlm_prob)
        if model is None:
            with building(cfg.fsdp):  # --fsdp: whole on rank 0 alone
                model = Bert(config)
        return make_trainer(model, task, cfg, resume, started, evaluate_start=init is not None, log=log)


def prepare(
    data: str | Path,
    *,
    init: str | Path | None = None,
    tokenizer_dir: str | Path | None = None,
    tokenizer_sample: int = TOKENIZER_SAMPLE,
    vocab_size: int | None = None,
    valid: float = 0.05,
    data_cache: str | Path | None = None,
    log: Callable[[str], None] = say,
) -> Path:
    """Tokenize the sentences of ``data`` into the cache ahead of pretraining (``tformer data prepare bert``): the
    folder that :func:`setup` with the same data and tokenizer settings (``vocab_size``, ``tokenizer_sample``,
    ``valid``: the sentences the WordPiece is not trained on; ``tokenizer_dir`` or ``init``'s WordPiece) then maps at
    once. Returns the folder; it may also be given as ``data`` itself."""
    check_settings({"vocab_size": vocab_size, "tokenizer_sample": tokenizer_sample, "valid": valid}, bounds=BOUNDS)
    _check_data(data)
    tok: WordPieceTokenizer
    if init is not None:
        refuse_given(init, {"--tokenizer-dir": tokenizer_dir, "--vocab-size": vocab_size})
        tok = cast(WordPieceTokenizer, start_from(init, "bert").require_tokenizer())  # a BERT's is WordPiece
    else:
        tok = _pretraining_tokenizer(data, tokenizer_dir, vocab_size or 8000, valid, tokenizer_sample, data_cache, log)
    return prepare_sentences(data, tok, cache=data_cache, log=log)


def train(data: str | Path, out_dir: str | Path, **options) -> tuple[Trainer, dict]:
    """Pretrain a BERT (see :func:`setup` for the options); returns the trainer and its last evaluation
    (``val_loss``, ``mlm_loss``, ``nsp_loss``, ``mlm_acc``, ``nsp_acc``)."""
    trainer = setup(data, out_dir, **options)
    return trainer, trainer.fit()


def _classifier(
    base: Bert | None,
    preset: str,
    tokenizer: WordPieceTokenizer,
    n_labels: int,
    max_len: int | None,
    dropout: float | None,
    shape: dict[str, float],
) -> Bert:
    """A new classifier of the preset's size, or the ``base`` model (``--init``) with a new head of ``n_labels``."""
    if base is None:
        config = BertConfig.preset(
            preset,
            vocab_size=tokenizer.vocab_size,
            max_len=max_len,
            pad_id=tokenizer.pad_id,
            num_labels=n_labels,
            **_overrides(dropout, shape),
        )
        return Bert(config)
    if (max_len or 0) > base.config.max_len:
        raise ValueError(f"--max-len {max_len} exceeds the --init model's max_len {base.config.max_len}")
    model = Bert(base.config.replace(num_labels=n_labels, **_overrides(dropout, {})))
    state = {k: v for k, v in base.state_dict().items() if not k.startswith("classifier.")}
    model.load_state_dict(state, strict=False)  # everything but the new classification head
    return model


def setup_classifier(
    data: str | Path,
    out_dir: str | Path,
    *,
    init: str | Path | None = None,
    lora_r: int = 0,
    lora_alpha: float | None = None,
    lora_dropout: float = 0.05,
    lora_targets: str = "attn.*",
    preset: str | None = None,
    tokenizer_dir: str | Path | None = None,
    vocab_size: int | None = None,
    max_len: int | None = None,
    batch_size: int = 32,
    dropout: float | None = None,
    ffn_dropout: float | None = None,
    d_model: int | None = None,
    n_heads: int | None = None,
    d_ff: int | None = None,
    n_layers: int | None = None,
    valid: float = 0.1,
    resume: bool = False,
    log: Callable[[str], None] = say,
    **train_options,
) -> Trainer:
    """A :class:`Trainer` of sequence classification on the ``text<TAB>label`` lines of ``data``.

    ``init``: start from this pretrained model (its tokenizer and weights, a new head; ``max_len`` by default its
    positions, up to :data:`MAX_LEN`); else a new model of ``preset`` (default small), with the WordPiece of
    ``tokenizer_dir`` or one of ``vocab_size`` ids (default 8000) trained on the training texts. ``valid``: the
    held-out examples (a fraction, or a count when >= 1). ``train_options``: the other :class:`TrainConfig`
    fields (:data:`CLASSIFIER_TRAINING` unless given). ``lora_r`` > 0 (with ``init``): LoRA pairs beside
    ``lora_targets`` and the new head train, the rest of the model frozen.
    """
    # each setting in its flag's bounds and words, before anything runs (an overwrite deletes the old run)
    check_settings(
        {**locals(), "preset": preset or "small"}, known_train_options(train_options, setup_classifier), bounds=BOUNDS
    )
    shape = shape_given(d_model=d_model, n_heads=n_heads, d_ff=d_ff, n_layers=n_layers, ffn_dropout=ffn_dropout)
    lora = LoraSettings(lora_r, lora_alpha, lora_dropout, lora_targets)
    _check_start(init, lora, shape, preset=preset, tokenizer_dir=tokenizer_dir, vocab_size=vocab_size)
    preset, vocab_size = preset or "small", vocab_size or 8000  # (not given with --init: its model's, unused)
    max_len = max_len if init is not None else max_len or MAX_LEN
    if init is None:  # a shape the preset cannot take (d_model not divisible by n_heads) is refused before anything
        BertConfig.preset(preset, vocab_size=vocab_size, max_len=max_len, **_overrides(dropout, shape))
    cfg = TrainConfig(out_dir=str(out_dir), **{**CLASSIFIER_TRAINING, **train_options})
    settings = dict(preset=preset, vocab_size=vocab_size, max_len=max_len, batch_size=batch_size, dropout=dropout)
    settings.update(d_model=d_model, n_heads=n_heads, d_ff=d_ff, n_layers=n_layers, ffn_dropout=ffn_dropout)  # shape
    precheck_out_dir(out_dir, resume, cfg.overwrite, data=data)  # a --data in the run --overwrite would delete
    examples = read_labelled_tsv(data)  # before an overwrite deletes anything: a missing --data is refused first
    labels = sorted({y for _, y in examples})
    if len(labels) < 2:
        raise ValueError(f"--data {str(data)!r}: need at least 2 distinct labels, got {labels}")
    if note := label_note(examples, f"--data {str(data)!r}"):
        log(note)
    # what makes the run: --resume refuses a change (the tokenizer and weights come from OUT/last, not --init)
    if init is not None:  # its model's: neither given nor compared on --resume
        settings = {k: v for k, v in settings.items() if k not in ("preset", "vocab_size")}
    if lora.r:
        settings.update(_start_settings(init, lora))
    settings.update(valid=valid, data_sha256=fingerprint(data))  # a resume on other examples (labels) is refused
    with start_run(cfg, resume, "classify", settings, log) as started:
        train_part, valid_part = split_examples(examples, valid, cfg.seed)
        none = "" if valid_part else " (no validation data)"
        log(f"data: {len(train_part)} training / {len(valid_part)} held-out examples{none}, labels {labels}")
        if resume and lora.r:
            model, tokenizer = _resumed(out_dir, classifier=True)
        elif resume:
            config, tokenizer = saved_run(out_dir, Bert, WordPieceTokenizer.load)
            torch.manual_seed(cfg.seed)
            with building(cfg.fsdp):  # --fsdp: whole on rank 0 alone
                model = Bert(config)
        else:
            base = load(init, family="bert", flag="--init") if init else None  # any BERT: a run, a model, a HF one
            if base is not None:
                tokenizer = cast(WordPieceTokenizer, base.require_tokenizer())  # a BERT's is WordPiece (tformer.loader)
            else:
                tokenizer = _tokenizer([t for t, _ in train_part], tokenizer_dir, vocab_size, cfg.device)
            torch.manual_seed(cfg.seed)
            with building(cfg.fsdp and base is None):  # --fsdp: a new one whole on rank 0 alone
                model = _classifier(
                    base.model if base else None, preset, tokenizer, len(labels), max_len, dropout, shape
                )
            if lora.r:
                add_adapters(model, lora, log)
                _train_heads(model, classifier=True)  # the new head trains in full
                trainable, total = count_parameters(model)
                log(f"and the new classification head: {trainable:,} trainable parameters of {total:,}")
                log(NO_BERT_ADAPTER)
        untrained = untrained_mlm(Path(out_dir) / "last") if resume else not base or "mlm_head" in untrained_heads(base)
        max_len = max_len or min(MAX_LEN, model.config.max_len)  # None: --init's, up to MAX_LEN
        task = ClassifyTask(tokenizer, labels, train_part, valid_part, max_len, batch_size, cfg.seed, untrained)
        return make_trainer(model, task, cfg, resume, started, log=log)


def train_classifier(data: str | Path, out_dir: str | Path, **options) -> tuple[Trainer, dict]:
    """Fine-tune a classifier (see :func:`setup_classifier`); returns the trainer and its last evaluation
    (``val_loss``, ``accuracy``). ``TextClassifier.load(out_dir)`` then labels new texts."""
    trainer = setup_classifier(data, out_dir, **options)
    return trainer, trainer.fit()
