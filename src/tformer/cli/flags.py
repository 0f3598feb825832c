"""Every flag the ``tformer`` commands share, declared once (the parser they are built with: :mod:`tformer.cli.parser`).

A flag's name is the library's name for the setting: ``--max-len`` is ``max_len`` in the model config, the
family's entry point (``tformer.lm.setup(max_len=...)``) and the run's saved settings. So a command adds its
flags by name from :data:`FLAGS` (its help, validator and spelling, written here once), takes their defaults
from the entry point it calls (:func:`defaults`: the signature, and the family's ``TRAINING`` values of the
:class:`~tformer.training.config.TrainConfig` fields), and hands the parsed values on with :func:`options` —
no flag is restated between the command line and the library.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tformer.cli import validate as v
from tformer.cli.parser import Switch, renamed
from tformer.training.progress import PLAIN_EVERY_S

__all__ = ["Flag", "FLAGS", "add", "add_training", "defaults", "options"]


@dataclasses.dataclass(frozen=True)
class Flag:
    """One flag: its help, its validator (:mod:`tformer.cli.validate`), and what argparse needs besides.

    ``default`` is the flag's own default when no entry point gives one; ``old`` lists the spellings of earlier
    releases, still accepted with a note; ``off`` is a switch's opposite spelling (``--no-compile``), which undoes it
    (a ``--config`` file's, say): the two are one :class:`~tformer.cli.parser.Switch`."""

    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: Sequence[str] | None = None
    action: str | None = None
    dest: str | None = None
    metavar: str | None = None
    old: tuple[str, ...] = ()
    off: str | None = None


PRESETS = ("tiny", "small", "base")

FLAGS: dict[str, Flag] = {
    # --- what to read and where to run
    "--model": Flag(
        "a model: a tformer run or model directory, or a Hugging Face one (read by tformer.load)", v.existing_dir
    ),
    "--device": Flag("where the model runs: cpu, cuda, cuda:N or mps", v.device, "cpu"),
    "--no-fast": Flag(
        "no CPU fast paths (tformer.fast): the plain reference code, the same numbers to float rounding",
        action="store_false",
        dest="fast",
        off="--fast",
    ),
    "--seed": Flag("random seed", v.seed, 0),
    "--batch-size": Flag("sequences per batch", v.positive_int),
    "--overwrite": Flag(
        "replace the file {flag} names if it exists (a symbolic link, one of this command's inputs, or a place "
        "inside a model or run directory is refused even so)",
        action="store_true",
    ),
    # --- the model and its data (train)
    "--preset": Flag("model size", choices=PRESETS),
    "--vocab-size": Flag("size of the tokenizer trained on --data", v.int_at_least(6, " (the special tokens + 1)")),
    "--pad-vocab": Flag(
        "round a new model's token table and output head up to a multiple of this many rows (the GPU's matrix "
        "tiles: GPT-2's 50,257 words take 50,304 rows); the extra rows are no words, their logits cut off; 1: none",
        v.pad_vocab,
        64,
    ),
    "--max-len": Flag("longest sequence in tokens: the model's positions (its context)", v.positive_int),
    "--batch-tokens": Flag(
        "a batch's size in tokens (sentences of similar length are batched together)",
        v.positive_int,
        old=("--max-tokens",),
    ),
    "--dropout": Flag("dropout of the model (default: the preset's)", v.fraction),
    "--ffn-dropout": Flag(
        "dropout inside the feed-forward blocks, after the activation (default: the preset's, which is --dropout; "
        "0: none there, as GPT-2 and nanoGPT)",
        v.fraction,
    ),
    "--shift-tokens": Flag(
        "each layer also reads the last N positions, through feature group i of N + 1 taken from i positions back "
        "(x-transformers' shift_tokens, RWKV's token shift; GPTConfig.shift_tokens; no Hugging Face layout has it) "
        "(default: the preset's; 0: none)",
        v.non_negative_int,
    ),
    # the model's shape, one config field each, over the preset's (a recipe's model size in one line of its file)
    "--d-model": Flag("width of the model: its embeddings and residual stream (default: the preset's)", v.positive_int),
    "--n-heads": Flag("attention heads per layer; they divide --d-model (default: the preset's)", v.positive_int),
    "--d-ff": Flag("inner width of the feed-forward blocks (default: the preset's)", v.positive_int),
    "--n-layers": Flag("layers of the model (default: the preset's)", v.positive_int),
    "--n-encoder-layers": Flag("layers of the encoder (default: the preset's)", v.positive_int),
    "--n-decoder-layers": Flag("layers of the decoder (default: the preset's)", v.positive_int),
    "--valid": Flag(
        "held-out part for validation: a fraction, or a count if >= 1 (0: none, the latest model is kept)",
        v.count_or_fraction,
    ),
    "--tokenizer-dir": Flag(
        "use this directory's tokenizer (tokenizer.json or vocab.txt) instead of training one on --data",
        v.existing_dir,
    ),
    # --- a corpus of any size (tformer.data)
    "--text-field": Flag(
        "the field (JSONL) or column (Parquet, Arrow, a saved datasets dataset) that holds each document's text",
        v.text_field,
        "text",
        metavar="NAME",
    ),
    "--data-cache": Flag(
        "where corpora are kept tokenized, prepared once (default: $TFORMER_CACHE/data, else ~/.cache/tformer/data)",
        v.cache_dir,
    ),
    "--tokenizer-sample": Flag(
        "bytes of text, spread over --data, that a BPE or WordPiece tokenizer is trained on", v.positive_int
    ),
    "--valid-data": Flag(
        "validate on this text (a file or folder, as --data) instead of a part held out from --data", v.corpus_path
    ),
    # --- starting from a pretrained model (tformer.finetune)
    "--init": Flag(
        "start from this pretrained model and its tokenizer: a tformer run or model directory, or a Hugging Face one "
        "(read by tformer.load); the flags that would change its architecture or tokenizer are refused",
        v.existing_dir,
    ),
    "--lora-r": Flag(
        "train LoRA pairs of this rank beside the --lora-targets layers, the model frozen (0: every parameter "
        "trains); a GPT's or translator's best model is written with its PEFT adapter beside it (a BERT's pairs have "
        "no PEFT form: tformer merge folds them in)",
        v.non_negative_int,
        0,
    ),
    "--lora-alpha": Flag("LoRA's scale: the update is alpha / r · B A (default: 2 × --lora-r)", v.positive_float),
    "--lora-dropout": Flag("dropout on the input of the LoRA pairs", v.fraction, 0.05),
    "--lora-targets": Flag(
        "comma-separated layers that get a LoRA pair, shell patterns over attn.q_proj, attn.k_proj, attn.v_proj "
        "(attn.qkv_proj for a GPT-2), attn.out_proj, cross_attn.*, ffn.* (ffn.gate_proj, ffn.up_proj, "
        "ffn.down_proj, or ffn.linear1, ffn.linear2)",
        v.lora_targets,
        "attn.*",
    ),
    # --- training (TrainConfig's fields)
    "--out": Flag("run directory (best model, last state, log, curves)", v.output_dir, dest="out_dir"),
    "--lr": Flag("peak learning rate", v.positive_float),
    "--schedule": Flag(
        "learning rate after warmup: inverse_sqrt (the paper), cosine or constant",
        choices=("inverse_sqrt", "cosine", "constant"),
    ),
    "--warmup-steps": Flag("optimizer steps of linear warmup", v.non_negative_int),
    "--min-lr-ratio": Flag(
        "where --schedule cosine ends, as a fraction of --lr (nanoGPT's min_lr / lr; 0 decays to zero)", v.ratio
    ),
    "--weight-decay": Flag("decoupled weight decay of the matrices (AdamW's, and Muon's)", v.non_negative_float),
    "--optimizer": Flag("adamw, or muon: Muon on the layers' matrices, AdamW on the rest", choices=("adamw", "muon")),
    "--clip": Flag("max gradient norm (0 = off)", v.non_negative_float),
    "--accum-steps": Flag("batches accumulated per optimizer step", v.positive_int),
    "--epochs": Flag("epochs in all (a resumed run counts the ones it trained)", v.positive_int),
    "--max-steps": Flag("optimizer steps in all (a resumed run counts its steps)", v.positive_int),
    "--minutes": Flag(
        "training time budget in all, evaluations and saves not counted (a resumed run counts its time)",
        v.positive_float,
    ),
    "--eval-every": Flag("optimizer steps between evaluations (default: every epoch)", v.positive_int),
    "--log-every": Flag(
        f"optimizer steps between log records (OUT/log.jsonl); the progress bar, or off a terminal a line every "
        f"{PLAIN_EVERY_S:g} s, shows the latest step",
        v.positive_int,
    ),
    "--precision": Flag(
        "number format: auto (picks per machine class and kind of work, and says what and why), fp32, bf16, fp16 "
        "(GPUs), int8 (inference)",
        v.precision,
        "auto",
        choices=("auto", "fp32", "bf16", "fp16", "int8"),
        old=("--dtype",),
    ),
    "--bf16": Flag(
        "the same as --precision bf16: bfloat16 autocast, float32 master weights (faster only on CPUs with "
        "AVX512_BF16 or AMX, and on GPUs)",
        action="store_true",
    ),
    "--resume": Flag(
        "continue exactly from OUT/last; a changed model, data or optimizer flag is refused, the budget, "
        "evaluation, logging and device flags may change",
        action="store_true",
    ),
    "--max-bad-steps": Flag(
        "stop when this many steps in a row have a non-finite loss or gradient norm (each is skipped)", v.positive_int
    ),
    "--patience": Flag(
        "stop early after this many evaluations in a row without a better validation metric (the one best/ is "
        "chosen by; an equal one with a lower validation loss is better); best/ holds the best model",
        v.positive_int,
    ),
    "--keep-checkpoints": Flag(
        "keep the model of each of the last K evaluations in OUT/checkpoints/step-N, for tformer average",
        v.positive_int,
    ),
    "--ema": Flag(
        "keep an exponential moving average of the weights with this decay (e.g. 0.999), evaluated beside them "
        "(ema_* in the log); best/ is whichever scores better; 0: none (turns off a --config file's)",
        v.ema_decay,
    ),
    "--log-to": Flag(
        "send log.jsonl's records to csv (OUT/log.csv), tensorboard (OUT/tensorboard/; pip install "
        "'tformer[tensorboard]'), or both: csv,tensorboard",
        v.log_sinks,
    ),
    "--no-progress": Flag(
        "no progress bar or lines (OUT/log.jsonl is written as always)",
        action="store_false",
        dest="progress",
        off="--progress",
    ),
    "--compile": Flag(
        "torch.compile the model for the training steps: slower to start (the first steps compile), faster after "
        "on GPUs; on the CPU faster only in float32 without dropout, slower with dropout or in bf16 (python -m "
        "benchmarks.compile_step); the model saved is the plain one",
        action="store_true",
        off="--no-compile",
    ),
    "--fsdp": Flag(
        "under torchrun: shard the weights, gradients and AdamW's moments over the processes (PyTorch's FSDP2) "
        "instead of a whole copy in each (DDP); the files written are the same",
        action="store_true",
        off="--no-fsdp",
    ),
    # --- decoding
    "--max-new-tokens": Flag("tokens generated at most", v.max_new_tokens),
    "--beam": Flag("beam size, 1 to 64 (1 = greedy; at most the target vocabulary)", v.beam_size, 1),
    "--length-penalty": Flag(
        "beam search ranks by score / length ** this (default: the model's, from evaluate --tune-length-penalty; "
        "else 1.0)",
        v.length_penalty,
    ),
    "--temperature": Flag("divide the logits by this before sampling; towards 0: greedy", v.temperature, 1.0),
    "--top-k": Flag("sample from the k most likely tokens only (0 = off)", v.top_k, 0),
    "--top-p": Flag("sample from the smallest set of tokens whose probability reaches p (1 = off)", v.probability, 1.0),
    # --- looking inside
    "--candidates": Flag("most likely tokens shown for each position", v.candidates, 5, old=("--top-k",)),
}


def add(p, *names: str, defaults: Mapping[str, Any] | None = None, **changes: Any) -> None:
    """Add the flags ``names`` (``"--device"``, ...) of :data:`FLAGS` to the parser or group ``p``.

    ``defaults``: dest -> default (an entry point's, :func:`defaults`), else the flag's own. ``changes``: per
    flag, keyed by its dest, what this command says differently (``model={"required": True}``; ``old``: earlier
    spellings of the flag in this command, in place of its own); a help text's ``{flag}`` becomes the ``flag`` given there
    (``--overwrite``'s output flag)."""
    for name in names:
        flag = FLAGS[name]
        dest = flag.dest or name[2:].replace("-", "_")
        spec = dict(changes.get(dest, {}))
        olds = tuple(spec.pop("old")) if "old" in spec else flag.old
        kwargs: dict[str, Any] = dict(dest=dest, help=flag.help.format(flag=spec.pop("flag", "--out")))
        spellings = (name, flag.off) if flag.off else (name,)
        if flag.off:  # the switch and its opposite, one action
            kwargs.update(action=Switch, default=flag.action == "store_false")
            kwargs["help"] += f"; {flag.off} undoes it (the last one given wins)"
        elif flag.action:
            kwargs["action"] = flag.action
        else:
            default = (defaults or {}).get(dest, flag.default)
            kwargs.update(type=flag.type, default=default, choices=flag.choices, metavar=flag.metavar)
        kwargs.update(spec)
        action = p.add_argument(*spellings, **{k: x for k, x in kwargs.items() if x is not None or k == "default"})
        for old in olds:
            p.add_argument(
                old,
                dest=argparse.SUPPRESS,
                nargs=action.nargs,
                type=action.type,
                choices=action.choices,
                help=argparse.SUPPRESS,
                action=renamed(old, action),
            )


def defaults(entry: Callable, training: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The defaults an entry point's flags show: its keyword parameters' and, for the TrainConfig fields it passes
    on (``**train_options``), TrainConfig's overridden by the family's ``training`` values."""
    from tformer.training.config import TrainConfig

    out = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}
    out.update(training or {})
    for name, param in inspect.signature(entry).parameters.items():
        if param.default is not inspect.Parameter.empty:
            out[name] = param.default
    return out


def options(args: argparse.Namespace, entry: Callable, **extra: Any) -> dict[str, Any]:
    """The parsed values ``entry`` takes, by name: its parameters, and the TrainConfig fields when it passes
    ``**train_options`` on; ``extra`` adds or replaces values the command computed."""
    from tformer.training.config import TrainConfig

    params = inspect.signature(entry).parameters
    names = {n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        names |= {f.name for f in dataclasses.fields(TrainConfig)}
    return {**{n: getattr(args, n) for n in names if hasattr(args, n)}, **extra}


TRAINING_FLAGS = (
    "--out",
    "--lr",
    "--schedule",
    "--warmup-steps",
    "--min-lr-ratio",
    "--weight-decay",
    "--optimizer",
    "--clip",
    "--accum-steps",
    "--epochs",
    "--max-steps",
    "--minutes",
    "--eval-every",
    "--log-every",
    "--seed",
    "--precision",
    "--bf16",
    "--device",
    "--resume",
    "--overwrite",
    "--max-bad-steps",
    "--patience",
    "--keep-checkpoints",
    "--ema",
    "--log-to",
    "--no-progress",
    "--no-fast",
    "--compile",
    "--fsdp",
)


def training_precision() -> dict[str, Any]:
    """``--precision`` as a training command takes it: what :data:`~tformer.training.config.TRAINING_PRECISIONS`
    lists (no int8: training keeps float weights), and an error that lists those."""
    from tformer.training.config import TRAINING_PRECISIONS

    return {
        "choices": TRAINING_PRECISIONS,
        "type": v.precision_in(TRAINING_PRECISIONS),
        "old": (),
        "help": "number format of training: auto (picks per machine class and kind of work, and says what and why), "
        "fp32, bf16, fp16 (with a gradient scaler; for GPUs); int8 is for inference only",
    }


START_FLAGS = ("--init", "--lora-r", "--lora-alpha", "--lora-dropout", "--lora-targets")


def add_start(p, entry_defaults: Mapping[str, Any], **changes: Any) -> None:
    """The flags that start a run from a pretrained model (``--init``) and fine-tune it with LoRA, in their own group."""
    g = p.add_argument_group("start from a pretrained model (tformer.finetune)")
    add(g, *START_FLAGS, defaults=entry_defaults, **changes)


def add_training(p, entry_defaults: Mapping[str, Any], **changes: Any) -> None:
    """The training flags every ``tformer train`` family has (one per TrainConfig field), in their own group."""
    g = p.add_argument_group("training (TrainConfig)")
    overwrite = (
        "start a new run in a non-empty --out, deleting the run there, and only what a run wrote: a folder with "
        "other files is refused (without --overwrite or --resume, a non-empty --out is refused)"
    )
    changes = {
        "out_dir": {"required": True},
        "overwrite": {"help": overwrite},
        "precision": training_precision(),
        **changes,
    }
    add(g, *TRAINING_FLAGS, defaults=entry_defaults, **changes)
    g.add_argument(
        "--config",
        metavar="FILE",
        help="settings from a YAML file, by the flags' names (max-steps: 100), or a recipe tformer ships by its name "
        "(multi30k-cpu-hour, multi30k-gpu, shakespeare-char-6min, shakespeare-char-30min, shakespeare-char-gpu); a "
        "flag given here too wins; every run writes what it resolved to OUT/config.yaml",
    )
