"""Translation's library entry points: prepare a model for a corpus, train it, evaluate it on files.

    trainer, result = tformer.translation.train("builtin", "runs/fr", preset="tiny", minutes=2)
    Translator.load("runs/fr").translate(["I am good."])

``tformer train translation``, ``tformer demo`` and ``tformer evaluate`` are these functions behind
flags; tests and benchmarks call them too.

A TSV of pairs (or a folder prepared from one: :func:`prepare_data`, ``tformer data prepare translation``) is read
as a stream and tokenized once into memory-mapped shards with a length index, kept in the cache
(:mod:`tformer.data.pairs`); training batches from the index and reads a batch's ids when it trains on it. The
built-in corpus and a Multi30k-style directory are small: they are read into memory and encoded there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from tformer import checks
from tformer.checks import check_settings
from tformer.data import TOKENIZER_SAMPLE, find_sources, fingerprint, is_prepared, prepared_vocab_size, read_manifest
from tformer.data.pairs import PairShards, held_out_positions, open_pairs, pairs_tokenizers, prepare_pairs
from tformer.files import atomic_write
from tformer.finetune import LoraSettings, adapter_writer, add_adapters, refuse_given, start_from
from tformer.hf.peft import exportable
from tformer.loader import load
from tformer.models.checkpoint import has_lora_record
from tformer.models.config import shape_given
from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from tformer.settings import takes_old_names
from tformer.text import read_lines
from tformer.tokenizers import Tokenizer, load_tokenizer, train_tokenizer
from tformer.tokens import TRANSLATION_PAD as PAD
from tformer.training import distributed
from tformer.training.config import gpu_batch_note, known_train_options
from tformer.training.distributed import from_rank0, say
from tformer.training.resume import last_dir, make_trainer, precheck_out_dir, saved_run, saved_settings, start_run
from tformer.training.sharded import building
from tformer.training.trainer import TrainConfig, Trainer
from tformer.translation.batching import EncodedPairs
from tformer.translation.pairs import Split, check_languages, load_splits
from tformer.translation.task import TranslationTask
from tformer.translation.translator import Translator, load_tokenizers

__all__ = ["TRAINING", "VALID_CAP", "train_tokenizers", "prepare", "prepare_data", "setup", "train", "evaluate_files"]

# The TrainConfig values a translation run starts from unless given (the CLI's defaults are these too)
TRAINING = {"lr": 7e-4, "warmup_steps": 400, "schedule": "inverse_sqrt"}
# What a run from --init changes unless given: a tenth of the learning rate in full (a pretrained model is adapted,
# not trained anew; LoRA's new pairs keep TRAINING's), a short warmup
FINE_TUNING = {"lr": 7e-5, "warmup_steps": 50}
FINE_TUNING_LORA = {"lr": 7e-4, "warmup_steps": 50, "weight_decay": 0.0}
# The README's Multi30k recipe scaled for a GPU (benchmarks.gpu's variant): 8× the tokens a step, the learning rate
# doubled, a third of the warmup. A starting point, not yet measured by this project (no GPU in its sessions).
GPU_ADVICE = (  # measured on an H200 (docs/benchmarks.md): BLEU 57.3 in 61 s of training; 400 steps at lr 4e-3 gave 42.1
    "--batch-tokens 24000 --lr 2e-3 --warmup-steps 300 --max-steps 1200 (Multi30k: BLEU 57.3 in 61 s on an H200)"
)
# Where this entry point bounds a setting otherwise than tformer.checks.SETTINGS (as `tformer train translation`'s
# flags do: tests/test_api_strict.py keeps them equal): a vocabulary needs the 4 special tokens + 1
# A TSV's validation part given as a fraction: at most this many source sentences (with their references), the rest
# trained on; each evaluation scores all of them (5% of a million pairs took ~15 minutes). --valid N holds out N.
VALID_CAP = 5_000
BOUNDS: dict[str, checks.Check] = {
    "preset": checks.Choice(Seq2SeqConfig.PRESETS),
    "vocab_size": checks.Number(int, 5, allowed="an integer >= 5 (4 special tokens + 1)"),
}


def train_tokenizers(split: Split, vocab_size: int = 8000, joint: bool = True) -> tuple:
    """BPE tokenizers (source, target) trained on the training split; one shared tokenizer when ``joint``."""
    check_settings(locals(), bounds=BOUNDS)
    if joint:
        tok = train_tokenizer("bpe", [x for pair in split.train for x in pair], vocab_size)
        return tok, tok
    sources, targets = [s for s, _ in split.train], [t for _, t in split.train]
    return train_tokenizer("bpe", sources, vocab_size), train_tokenizer("bpe", targets, vocab_size)


def prepare(
    split: Split,
    out_dir: str | Path,
    preset: str = "small",
    vocab_size: int = 8000,
    joint: bool = True,
    seed: int = 0,
    tokenizers: tuple | None = None,
    **config_overrides,
) -> Translator:
    """Train BPE tokenizers on the training split (or take ``tokenizers`` = (source, target)) and build the model.

    Writes the held-out splits to ``OUT/data/{valid,test}.tsv`` so evaluation can be repeated (rank 0 alone,
    under torchrun).
    """
    check_settings(locals(), config_overrides, bounds=BOUNDS)
    src_tok, tgt_tok = tokenizers or train_tokenizers(split, vocab_size, joint)
    config = Seq2SeqConfig.preset(
        preset,
        src_vocab_size=src_tok.vocab_size,
        tgt_vocab_size=tgt_tok.vocab_size,
        share_embeddings=joint,
        pad_id=PAD,
        **config_overrides,
    )
    torch.manual_seed(seed)
    translator = Translator(Seq2SeqTransformer(config), src_tok, tgt_tok)
    _write_held_out(split, out_dir)
    return translator


def _resumed(out_dir: str | Path, seed: int, fsdp: bool = False) -> Translator:
    """The run's tokenizers and a model of its config (the weights come back in ``trainer.resume()``); a run from
    ``--init`` reads its translator whole (its LoRA layers, an Opus-MT model's own ids)."""
    last = last_dir(out_dir)
    if (last / "src_tokenizer.json").is_file() and not has_lora_record(last):
        config, (src_tok, tgt_tok) = saved_run(out_dir, Seq2SeqTransformer, load_tokenizers)
        torch.manual_seed(seed)
        with building(fsdp):  # --fsdp: whole on rank 0 alone
            return Translator(Seq2SeqTransformer(config), src_tok, tgt_tok)
    translator = Translator.from_loaded(load(last, family="seq2seq", fast=False, merge=False, float_weights=True))
    translator.model.train()
    return translator


def _write_held_out(split: Split, out_dir: str | Path) -> None:
    """``OUT/data/{valid,test}.tsv``: the held-out pairs, so that evaluation can be repeated (rank 0)."""
    if distributed.is_main_process():
        data_dir = Path(out_dir) / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        for name, part in (("valid", split.valid), ("test", split.test)):
            text = "".join(f"{s}\t{t}\n" for s, t in part)  # a full disk: one line naming the file (WriteError)
            atomic_write(data_dir / f"{name}.tsv", lambda tmp, text=text: Path(tmp).write_text(text, encoding="utf-8"))


@takes_old_names  # 0.2.0's max_tokens
def setup(
    data: str | None = "builtin",
    out_dir: str | Path = "runs/translation",
    *,
    src_lang: str = "en",
    tgt_lang: str = "fr",
    init: str | Path | None = None,
    lora_r: int = 0,
    lora_alpha: float | None = None,
    lora_dropout: float = 0.05,
    lora_targets: str = "attn.*",
    preset: str | None = None,
    vocab_size: int | None = None,
    joint: bool = True,
    batch_tokens: int = 4096,
    label_smoothing: float = 0.1,
    valid: float = 0.05,
    test: float = 0.05,
    bleu_sentences: int = 500,
    dropout: float | None = None,
    ffn_dropout: float | None = None,
    max_len: int | None = None,
    d_model: int | None = None,
    n_heads: int | None = None,
    d_ff: int | None = None,
    n_encoder_layers: int | None = None,
    n_decoder_layers: int | None = None,
    tokenizer_sample: int = TOKENIZER_SAMPLE,
    data_cache: str | Path | None = None,
    resume: bool = False,
    log: Callable[[str], None] = say,
    **train_options,
) -> Trainer:
    """A :class:`Trainer` of a seq2seq Transformer on the pairs of ``data``, ready to ``fit()``.

    ``data``: ``"builtin"``, a TSV pairs file or a Multi30k-style directory (:func:`load_splits`): a directory
    with ``val.*`` trains on all of ``train.*`` and validates on ``val.*``; other data is split ``valid`` /
    ``test`` (deterministic for the seed; ``valid=0``: no validation data, the latest model is kept).
    A TSV is tokenized once into shards kept in the cache (``data_cache``, else the user's cache folder:
    :mod:`tformer.data.pairs`), its BPE trained on the training pairs (all of them up to ``tokenizer_sample`` bytes
    of text, else that much spread over them); its ``valid`` given as a fraction is capped at :data:`VALID_CAP`
    source sentences. ``data`` may also be a folder prepared by :func:`prepare_data`.
    ``batch_tokens``: a batch's size in tokens (sentences of similar length are batched together). ``log`` takes
    the set-up's lines (the data, the tokenizers, notes; by default printed once, by rank 0).
    ``train_options`` are the other :class:`TrainConfig` fields (``minutes``, ``epochs``, ``device``, ...;
    :data:`TRAINING` unless given). Under torchrun rank 0 trains the tokenizers and every
    process gets them; with ``resume`` they come from ``OUT/last``. ``d_model``, ``n_heads``, ``d_ff``,
    ``n_encoder_layers``, ``n_decoder_layers``: the model's shape, ``ffn_dropout`` inside its feed-forward blocks (None:
    the preset's).

    ``init``: fine-tune this pretrained translator (a tformer run or model, an Opus-MT / Hugging Face Marian
    directory) with its own tokenizers instead of a new model (``preset``, ``vocab_size``, ``joint=False``,
    ``dropout`` and ``max_len`` are then refused); ``lora_r`` > 0 trains LoRA pairs beside ``lora_targets`` only
    (:mod:`tformer.finetune`). A run from ``init`` starts at a tenth of :data:`TRAINING`'s learning rate unless given
    (LoRA's pairs at TRAINING's, without weight decay).
    """
    # each setting in its flag's bounds and words, before anything runs (an overwrite deletes the old run)
    check_settings({**locals(), "preset": preset or "small"}, known_train_options(train_options, setup), bounds=BOUNDS)
    lora = LoraSettings(lora_r, lora_alpha, lora_dropout, lora_targets)
    shape = shape_given(
        d_model=d_model,
        n_heads=n_heads,
        d_ff=d_ff,
        n_encoder_layers=n_encoder_layers,
        n_decoder_layers=n_decoder_layers,
        ffn_dropout=ffn_dropout,
    )  # else the preset's
    if lora.r and init is None:
        raise ValueError(f"--lora-r {lora.r} needs --init: LoRA adapts a pretrained model")
    if init is not None:
        refuse_given(
            init,
            {
                "--preset": preset,
                "--vocab-size": vocab_size,
                "--separate-vocab": None if joint else True,
                "--dropout": dropout,
                "--max-len": max_len,
                **shape,
            },
        )
        train_options = {**(FINE_TUNING_LORA if lora.r else FINE_TUNING), **train_options}
    folder_vocab = prepared_vocab_size(data, vocab_size, log)  # a prepared folder's: its own tokenizers' (or None)
    preset, max_len, vocab_size = preset or "small", max_len or 256, folder_vocab or vocab_size or 8000
    if init is None:  # a shape the preset cannot take (d_model not divisible by n_heads): refused before anything
        Seq2SeqConfig.preset(preset, src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, max_len=max_len, **shape)
    cfg = TrainConfig(out_dir=str(out_dir), **{**TRAINING, **train_options})
    settings = dict(
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        preset=preset,
        vocab_size=vocab_size,
        separate_vocab=not joint,
        batch_tokens=batch_tokens,
        label_smoothing=label_smoothing,
        valid=valid,
        test=test,
        dropout=dropout,
        max_len=max_len,
    )  # what makes the run: --resume refuses a change (bleu_sentences, only evaluation's, may change)
    if resume and folder_vocab:  # the run's tokenizers, which are the folder's (checked); an older run: 8000
        settings["vocab_size"] = saved_settings(out_dir).get("vocab_size", folder_vocab)
    if init is None:
        settings.update(d_model=d_model, n_heads=n_heads, d_ff=d_ff)  # the shape; None: the preset's
        settings.update(n_encoder_layers=n_encoder_layers, n_decoder_layers=n_decoder_layers, ffn_dropout=ffn_dropout)
    else:
        settings = {k: v for k, v in settings.items() if k not in ("preset", "vocab_size", "dropout", "max_len")}
        lora_settings = dict(lora_r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, lora_targets=lora.targets)
        settings.update(init=str(Path(init).absolute()), **lora_settings)  # the directory, whatever a --resume's cwd
    check_languages(data, src_lang, tgt_lang)  # the data first: refused before an overwrite deletes anything
    sharded = _sharded(data)
    settings["data_sha256"] = None if data in (None, "builtin") else fingerprint(data)  # changed: resume refused
    split = None
    if not sharded:
        split = load_splits(
            data, src_lang, tgt_lang, cfg.seed, valid, test, verbose=distributed.is_main_process(), log=log
        )
    pretrained = None
    if init is not None and not resume:  # before an overwrite deletes anything: a bad --init or target is refused
        pretrained = Translator.from_loaded(start_from(init, "seq2seq"))
        torch.manual_seed(cfg.seed)  # LoRA's A starts random: seeded
        add_adapters(pretrained.model, lora, log if distributed.is_main_process() else lambda _: None)
    # the corpus prepared (read whole, strict UTF-8) before an --overwrite deletes the old run; a wrong --out first
    precheck_out_dir(out_dir, resume, cfg.overwrite, data_cache, data=data)
    tokenizers = None
    directory = None
    if not resume:
        if pretrained is not None:
            tokenizers = (pretrained.src_tokenizer, pretrained.tgt_tokenizer)
        elif sharded:
            hold = (cfg.seed, valid, test)
            tokenizers = from_rank0(
                lambda: _pair_tokenizers(data, vocab_size, joint, hold, tokenizer_sample, data_cache, log), cfg.device
            )
        else:
            assert split is not None
            tokenizers = from_rank0(lambda: train_tokenizers(split, vocab_size, joint), cfg.device)
        if sharded:
            assert data is not None
            directory = from_rank0(lambda: prepare_pairs(data, *tokenizers, cache=data_cache, log=log), cfg.device)
    with start_run(cfg, resume, "translation", settings, log) as started:  # a non-empty out_dir: resume or overwrite
        overrides: dict = {"max_len": max_len, **shape}
        if dropout is not None:
            overrides["dropout"] = dropout
        translator: Translator | None = None
        if resume:  # same split (deterministic); tokenizers from the run, weights restored by trainer.resume()
            translator = _resumed(out_dir, cfg.seed, cfg.fsdp)
            tokenizers = (translator.src_tokenizer, translator.tgt_tokenizer)
        elif pretrained is not None:
            translator = pretrained
        assert tokenizers is not None
        train: list[tuple[str, str]] | EncodedPairs
        if sharded:  # the pairs' ids memory-mapped, the held-out pairs read back as text
            assert data is not None
            if directory is None:  # --resume: the run's tokenizers' ids
                directory = from_rank0(lambda: prepare_pairs(data, *tokenizers, cache=data_cache, log=log), cfg.device)
            train, split = _shard_split(open_pairs(directory), cfg.seed, valid, test, data_cache, log)
        else:
            assert split is not None
            train = split.train
        if translator is None:
            with building(cfg.fsdp):  # --fsdp: the model whole on rank 0 alone
                translator = prepare(split, out_dir, preset, vocab_size, joint, cfg.seed, tokenizers, **overrides)
        elif pretrained is not None:
            _write_held_out(split, out_dir)
        note = gpu_batch_note(cfg.device, batch_tokens * cfg.accum_steps, f"--batch-tokens {batch_tokens}", GPU_ADVICE)
        if note and distributed.is_main_process():
            log(note)
        task = TranslationTask(translator, train, split.valid, batch_tokens, label_smoothing, cfg.seed, bleu_sentences)
        writers = []
        if lora.r and init is not None:
            problem = exportable(translator.model.config, init)
            if problem is None:
                writers.append(adapter_writer(init, log if distributed.is_main_process() else None))
            elif distributed.is_main_process():
                log(f"note: no PEFT adapter is written beside the best model: {problem}")
        return make_trainer(
            translator.model, task, cfg, resume, started, also_save=writers, evaluate_start=init is not None, log=log
        )


def _sharded(data: str | Path | None) -> bool:
    """Whether ``data`` is read into shards: a TSV, a folder prepared from one (not the built-in corpus, Multi30k)."""
    if data is None or data == "builtin":
        return False
    return is_prepared(data, "translation") or Path(data).is_file()


def _pair_tokenizers(
    data, vocab_size: int, joint: bool, hold: tuple, sample: int, cache, log: Callable[[str], None]
) -> tuple[Tokenizer, Tokenizer]:
    """The tokenizers of a new model on the pairs of ``data``: a prepared folder's own, else BPE trained on the
    training pairs (``hold``: the seed, valid and test that say which; cached: :func:`tformer.data.pairs_tokenizers`)."""
    if is_prepared(data, "translation"):
        folder = Path(data) / "tokenizer"
        src, tgt = load_tokenizer(folder, prefix="src_"), load_tokenizer(folder, prefix="tgt_")
        same = (folder / "src_tokenizer.json").read_bytes() == (folder / "tgt_tokenizer.json").read_bytes()
        if joint and not same:
            raise ValueError(f"--data {str(data)!r} was prepared with separate vocabularies: give --separate-vocab")
        log(f"tokenizer: {src.kind}, {src.vocab_size:,} ids, from {data}")
        split = (read_manifest(Path(data)) or {}).get("tokenizer_split")  # the pairs its BPE was trained on
        if isinstance(split, dict) and (split.get("seed"), split.get("valid"), split.get("test")) != tuple(hold):
            said = " ".join(f"--{k} {split.get(k)}" for k in ("seed", "valid", "test"))
            log(f"note: {data}'s tokenizer learned from the training pairs of {said}; this run holds out others, some "
                "of which it saw: give those flags to keep the held-out pairs unseen")  # fmt: skip
        return (src, src) if joint else (src, tgt)
    seed, valid, test = hold
    held = dict(seed=seed, valid=valid, test=test, valid_cap=VALID_CAP)
    return pairs_tokenizers(data, vocab_size, joint, **held, sample=sample, cache=cache, log=log)


def _shard_split(
    pairs: PairShards, seed: int, valid: float, test: float, cache: str | Path | None = None, log=say
) -> tuple[EncodedPairs, Split]:
    """The training pairs (their ids, memory-mapped) and the held-out ones (as text, in a :class:`Split` whose
    ``train`` is empty), split by source sentence as :func:`tformer.translation.pairs.split_pairs` splits a list, in
    the same order; said in one line."""
    position, n_valid, test_lo, test_hi = held_out_positions(pairs.n_sources, seed, valid, test, VALID_CAP, cache)
    where = position[pairs.groups]
    del position
    order = np.argsort(where, kind="stable")  # by the source's place in the shuffle, then the file's order
    a, b, c = np.searchsorted(where[order], [n_valid, test_lo, test_hi])  # the parts are runs of that order
    del where
    held_valid, held_test = order[:a], order[b:c]
    trained = np.concatenate([order[a:b], order[c:]])
    del order
    encoded = EncodedPairs(pairs.stream, pairs.offsets[trained], pairs.src_len[trained], pairs.tgt_len[trained])
    split = Split([], pairs.texts(held_valid), pairs.texts(held_test))
    m = pairs.manifest
    none = " (no validation data)" if not len(held_valid) else ""
    capped = ""
    if n_valid < test_lo:
        capped = f" (the {valid:g} of the source sentences capped at {VALID_CAP:,} sentences; --valid N holds out N)"
    log(
        f"data: kept {m['pairs']} pairs, dropped {m['dropped_empty']} empty and {m['dropped_too_long']} over-long; "
        f"split into {len(trained)} train / {len(held_valid)} valid{none}{capped} / {len(held_test)} test pairs, held "
        f"out by source sentence (seed {seed})"
    )
    return encoded, split


def prepare_data(
    data: str | Path,
    *,
    init: str | Path | None = None,
    vocab_size: int | None = None,
    joint: bool = True,
    tokenizer_sample: int = TOKENIZER_SAMPLE,
    seed: int = 0,
    valid: float = 0.05,
    test: float = 0.05,
    data_cache: str | Path | None = None,
    log: Callable[[str], None] = say,
) -> Path:
    """Tokenize the TSV ``data`` into the cache ahead of training (``tformer data prepare translation``): the folder
    that :func:`setup` with the same data and tokenizer settings (``vocab_size``, ``joint``, ``tokenizer_sample``, and
    ``seed``, ``valid``, ``test``, which say the training pairs the BPE is trained on; or ``init``'s tokenizers) then
    maps at once. Returns the folder; it may also be given as ``data`` itself."""
    check_settings(
        {
            "vocab_size": vocab_size,
            "joint": joint,
            "tokenizer_sample": tokenizer_sample,
            "seed": seed,
            "valid": valid,
            "test": test,
        },
        bounds=BOUNDS,
    )
    if is_prepared(data, "translation") or not Path(data).is_file():
        find_sources(data)  # missing: named
        raise ValueError(f"--data {str(data)!r}: translation prepares a TSV file of pairs (source<TAB>target lines)")
    if init is not None:
        refuse_given(init, {"--vocab-size": vocab_size, "--separate-vocab": None if joint else True})
        translator = Translator.from_loaded(start_from(init, "seq2seq"))
        tokenizers = (translator.src_tokenizer, translator.tgt_tokenizer)
    else:
        hold = (seed, valid, test)
        tokenizers = _pair_tokenizers(data, vocab_size or 8000, joint, hold, tokenizer_sample, data_cache, log)
    split = dict(seed=seed, valid=valid, test=test) if init is None else None  # what its BPE was trained on
    return prepare_pairs(data, *tokenizers, cache=data_cache, tokenizer_split=split, log=log)


def train(data: str | None = "builtin", out_dir: str | Path = "runs/translation", **options) -> tuple[Trainer, dict]:
    """Train a translation model (see :func:`setup` for the options); returns the trainer and its last
    evaluation (``val_loss``, ``bleu``, ``chrf``). The best model is in ``out_dir``
    (``Translator.load(out_dir)``), the last state in ``OUT/last``."""
    trainer = setup(data, out_dir, **options)
    return trainer, trainer.fit()


def evaluate_files(
    translator: Translator,
    src: str | Path,
    refs: list[str | Path],
    beam: int = 1,
    max_new_tokens: int = 128,
    **decoding,
) -> dict:
    """BLEU and chrF of ``translator`` on a file of source sentences and one or more reference files
    (one sentence a line, aligned); the result also holds the ``hypotheses``. ``decoding``: :meth:`Translator.evaluate`'s
    other settings (``batch_size``, ``length_penalty``)."""
    sources = read_lines(src)  # strict UTF-8: a bad byte is refused with its file and line
    references = [read_lines(r) for r in refs]
    for flag, path, lines in [("--src", src, sources), *(("--ref", p, r) for p, r in zip(refs, references))]:
        if len(lines) != len(sources):
            raise ValueError(f"--ref {path} has {len(lines)} lines, --src {src} has {len(sources)}")
        if not any(line.strip() for line in lines):  # blank lines only: a mistake, not a test set
            raise ValueError(f"{flag} {path} holds only blank lines: nothing to score")
    return translator.evaluate(sources, references, beam=beam, max_new_tokens=max_new_tokens, **decoding)
