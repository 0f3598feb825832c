"""What a run directory (``OUT``) holds that is the run's, and what is the user's.

A tformer run writes :data:`RUN_FILES` into ``OUT``, and into its save folders (``best/``, ``last/``,
``checkpoints/step-N/``) only what a save writes (:data:`_SAVED`, the tokenizers' files). ``--overwrite`` deletes
those and nothing else: a folder that also holds a file of the user's, at the top or inside a save folder, is refused
with that file named and nothing deleted (:func:`clearable`), as a save replaces its folder whole.

* :func:`listing` — what ``OUT`` holds, hidden names included;
* :func:`is_run` — whether those make ``OUT`` a run's;
* :func:`foreign` / :func:`kept_by_user` — what a save folder holds that no save writes there;
* :func:`clearable` / :func:`clear` — what a new run in ``OUT`` deletes (refusing a folder it must not touch);
* :func:`check_out_dir` — all of it before a run writes: ``OUT`` judged, locked, cleared or checked for a resume (the
  :class:`StartedRun` it returns holds the lock); every run goes through it, a Trainer built directly too.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from tformer.files import earlier_name, leftover_of, recover_dir
from tformer.models.checkpoint import BEST_DIR, CONFIG_NAME, DECODING_FILE, WEIGHTS_NAME
from tformer.tokenizers.hf import GENERATION
from tformer.tokenizers.marian import MARIAN_FILES
from tformer.training.averaging import ADAPTER_FILES, CHECKPOINTS, EMA_NAME, INFO
from tformer.training.lock import LOCK_NAME, RunLock, foreign_lock, foreign_message
from tformer.training.meta import STATE_NAME
from tformer.training.runlog import CSV_NAME, TENSORBOARD_DIR
from tformer.training.state import JSON_NAME, LEGACY_NAME, TENSORS_NAME

__all__ = [
    "RUN_FILES",
    "LEGACY_FILES",
    "listing",
    "is_run",
    "not_a_run",
    "foreign",
    "kept_by_user",
    "clearable",
    "clear",
    "StartedRun",
    "check_out_dir",
]

# What a run writes into OUT, and all that --overwrite deletes: the best model, the last state, the log and its
# plot, translation's held-out splits, `tformer demo`'s attention picture, --keep-checkpoints' models, the settings
# resolved (tformer train's OUT/config.yaml), the log's CSV and TensorBoard copies
RUN_FILES = (BEST_DIR, "last", "log.jsonl", "curves.png", "data", "cross_attention.png", CHECKPOINTS, "config.yaml", CSV_NAME, TENSORBOARD_DIR)  # fmt: skip
# tformer 0.1 kept the best model at the top of OUT: its config, weights, tokenizers and labels (a run's only
# beside that model: config and weights at the top)
LEGACY_FILES = (
    CONFIG_NAME,
    WEIGHTS_NAME,
    "src_tokenizer.json",
    "tgt_tokenizer.json",
    "char_tokenizer.json",
    "tokenizer.json",
    "labels.json",
)
_DATA_FILES = {"valid.tsv", "test.tsv"}  # what a run writes into OUT/data
# What a save writes into a model or state folder (best/, last/, checkpoints/step-N/): the model, its decoding
# settings, labels and end ids, a LoRA run's adapter, the training state (tformer 0.1's too), a kept checkpoint's
# record, the moving average, an Opus-MT tokenizer's files, and the tokenizers (a translator's with src_/tgt_)
_SAVED = {CONFIG_NAME, WEIGHTS_NAME, DECODING_FILE, GENERATION, "labels.json", INFO}
_SAVED |= {EMA_NAME, *ADAPTER_FILES, STATE_NAME, TENSORS_NAME, JSON_NAME, LEGACY_NAME, *MARIAN_FILES}
_TOKENIZER_FILES = {
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "char_tokenizer.json",
    "vocab.txt",
}
# any of these (as a run writes it) makes OUT a run; config.yaml as tformer train writes it, first of all: a run
# stopped before its first record (killed, its output piped to `head`) is still one that --overwrite may replace
_MARKERS = (BEST_DIR, "last", "log.jsonl", "data", "config.yaml")
_CONFIG_HEAD = b"# tformer train "  # the first line of the OUT/config.yaml a run writes (tformer.cli.config)


def not_a_run(out: Path, entries: list[str], overwrite: bool = False) -> ValueError:
    return ValueError(
        f"--out {str(out)!r} is not empty and is not a tformer run (no best/, last/, log.jsonl or config.yaml as a run "
        "writes them; it holds "
        f"{_shown([f for name in entries for f in _named(out, name)])}): give another --out"
        + (" (--overwrite deletes only what a run wrote)" if overwrite else "")
    )


def listing(out: Path) -> list[str]:
    """What ``out`` holds, hidden names included; its ``.lock`` only if tformer did not write it."""
    if not out.is_dir():
        return []
    names = sorted(p.name for p in out.iterdir())
    return [name for name in names if name != LOCK_NAME or foreign_lock(out) is not None]


def is_run(out: Path, entries: list[str]) -> bool:
    """Whether ``entries`` of ``out`` make it a run's: one of :data:`_MARKERS`, or a cut save, as a run writes it."""
    return any((name in _MARKERS or _cut_short(out / name)) and _written_by_run(out / name) for name in entries)


def _written_by_run(path: Path) -> bool:
    """Whether ``path``, an entry of a run directory, is one that tformer runs write."""
    name = path.name
    if path.is_symlink():
        return False
    if name in (BEST_DIR, "last"):
        return path.is_dir() and not foreign(path)
    if name == CHECKPOINTS:  # --keep-checkpoints: step-N folders (and what a cut save of one leaves)
        return path.is_dir() and not foreign(path)
    if name == "data":
        return path.is_dir() and {p.name for p in path.iterdir()} <= _DATA_FILES
    if name == TENSORBOARD_DIR:  # --log-to tensorboard: its event files only
        return path.is_dir() and all(
            p.name.startswith("events.out.tfevents.") and p.is_file() and not p.is_symlink() for p in path.iterdir()
        )
    if name in LEGACY_FILES:
        return path.is_file() and _legacy_layout(path.parent)
    if name == "config.yaml":  # a YAML file of the user's is not the run's (nor deleted by --overwrite)
        try:
            with open(path, "rb") as f:
                return path.is_file() and f.read(len(_CONFIG_HEAD)) == _CONFIG_HEAD
        except OSError:
            return False
    if name in RUN_FILES:
        return path.is_file()
    return _cut_short(path)


def foreign(path: Path, out: Path | None = None) -> list[str]:
    """What a save folder of the run ``out`` (``best/``, ``last/``, ``checkpoints/``) holds that no save writes
    there, as paths in ``out``: a user's file or folder, which ``--overwrite`` (deleting the folder) or a save
    (replacing it whole) would lose."""
    out = out or path.parent
    found = []
    for p in sorted(path.iterdir()):
        if p.name.startswith("step-") and path.name == CHECKPOINTS and p.is_dir() and not p.is_symlink():
            found += foreign(p, out)
        elif not _saved_file(p) and leftover_of(p) is None:  # a save cut short leaves its own temporary names
            found.append(str(p.relative_to(out)))
    return found


def _named(out: Path, name: str) -> list[str]:
    """The entry ``name`` of ``out`` that is not the run's, as a refusal names it: a folder the run writes is named
    by what in it is not the run's (``best/NOTES.md``, ``data/mine.tsv``), anything else by its name."""
    path = out / name
    if path.is_symlink() or not path.is_dir():
        return [name]
    if name in (BEST_DIR, "last", CHECKPOINTS):
        return foreign(path, out) or [name]
    if name == "data":
        return [f"data/{p.name}" for p in sorted(path.iterdir()) if p.name not in _DATA_FILES] or [name]
    return [name]


def _saved_file(path: Path) -> bool:
    name = path.name.removeprefix("src_").removeprefix("tgt_")
    return path.is_file() and not path.is_symlink() and (path.name in _SAVED or name in _TOKENIZER_FILES)


def _legacy_layout(out: Path) -> bool:
    """Whether ``out`` holds a tformer 0.1 run's best model at its top (config and weights, as files; a 0.1 run
    resumed since has best/ too): only then are config.json, tokenizers and labels at the top a run's."""
    return all((out / name).is_file() and not (out / name).is_symlink() for name in (CONFIG_NAME, WEIGHTS_NAME))


def _cut_short(path: Path) -> bool:
    """A write or save of one of the run's files that a crash cut short, as tformer names and marks them, or an
    earlier version's save folder by what it holds (:func:`tformer.files.leftover_of`): never a user's
    ``.best.old``, ``.log.jsonl.bak``, ``.log.jsonl.backup01.tmp`` or ``.best.tmp-20250101/``."""
    return leftover_of(path) in RUN_FILES


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def kept_by_user(out: Path) -> list[str]:
    """What the save folders of the run ``out`` hold that is not the run's (a save replaces its folder whole)."""
    return [f for name in (BEST_DIR, "last", CHECKPOINTS) if (out / name).is_dir() for f in foreign(out / name, out)]


def clear(out: Path, overwrite: bool, resumable: bool) -> None:
    """A new run's directory: empty, or (``overwrite``) a run's, whose files are deleted; else refused."""
    for name in clearable(out, overwrite, resumable):
        path = out / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def clearable(out: Path, overwrite: bool, resumable: bool) -> list[str]:
    """What :func:`clear` would delete of ``out`` (reading only); a directory it would refuse is refused here."""
    entries = listing(out)
    if not entries:
        return []
    ours = [name for name in entries if _written_by_run(out / name)]
    others = [name for name in entries if name not in ours]
    if not is_run(out, entries):
        raise not_a_run(out, entries, overwrite)
    if not overwrite:
        remedy = (
            "pass --resume to continue the run in it, or --overwrite to delete it and start a new one"
            if resumable
            else "pass --overwrite to delete its run and start a new one, or give another --out"
        )
        raise ValueError(f"--out {str(out)!r} is not empty (it holds {_shown(entries)}): {remedy}")
    if others:
        others = [f for name in others for f in _named(out, name)]
        earlier = [name for name in others if earlier_name(out / name)]
        which = "which no tformer run writes" + (
            f" or which tformer cannot tell from files of yours ({_shown(earlier)}: named as earlier versions named "
            "their temporary files)"
            if earlier
            else ""
        )
        raise ValueError(
            f"--overwrite: --out {str(out)!r} holds a run and also {_shown(others)}, {which}; nothing was deleted: "
            f"move them out of {str(out)!r}"
            + (" (delete what an earlier tformer left)" if earlier else "")
            + ", or give another --out"
        )
    return ours


@dataclass
class StartedRun:
    """A run directory this process has judged and locked (rank 0; on the other ranks ``lock`` is None), handed from
    :func:`start_run` to :func:`make_trainer` by the caller. Used as ``with start_run(...) as started:`` around the
    setup between them, it releases the lock if the setup fails (a trainer made from it holds it instead)."""

    lock: RunLock | None
    run: dict | None = None  # {"kind": ..., "settings": ...}, saved into state.json

    def hand_over(self) -> RunLock | None:
        """The lock, now the caller's (a trainer's, which releases it when its ``fit()`` ends), no longer this."""
        lock, self.lock = self.lock, None
        return lock

    def release(self) -> None:
        """Give the lock back (nothing if it was handed to a trainer or given back already)."""
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.release()

    def __enter__(self) -> StartedRun:
        return self

    def __exit__(self, kind, _value, _traceback) -> None:
        if kind is not None:
            self.release()


def check_out_dir(
    out_dir: str | Path, resume: bool = False, overwrite: bool = False, resumable: bool = True, prepared: bool = False
) -> StartedRun:
    """What :func:`start_run` does first, in this process: judge ``out_dir`` (reading only: it must be empty or
    a run, and its ``.lock`` tformer's); take its lock (returned, for the trainer); refuse a non-empty ``out_dir`` for
    a new run without ``overwrite`` (else delete the old run's files, and only those); repair ``OUT/last`` and check
    that it holds a state for ``resume``. Any error releases the lock.

    ``resumable=False``: the command has no ``--resume`` (``tformer demo``), so the refusal names ``--overwrite`` only.
    ``prepared``: what the run's preparation wrote there is its own (a Trainer built directly, after
    ``translation.prepare`` wrote ``OUT/data``): only a previous run's state (``best/``, ``last/``, the log) is refused.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {str(out)!r} is a file, not a directory")
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other: give one of them")
    judge(out, resume)  # before the lock: nothing is written into a folder that is not a run's
    lock = RunLock(out).acquire()
    if lock.stale:
        print(f"note: took over {str(lock.path)!r}, a lock left by a run that is no longer running: {lock.stale}",
              file=sys.stderr)  # fmt: skip
    with StartedRun(lock) as started:  # released if a check fails
        if resume:
            check_resumable(out)
        elif not prepared or any(os.path.lexists(out / name) for name in (BEST_DIR, "last", "log.jsonl", CHECKPOINTS)):
            clear(out, overwrite, resumable)
    return started


def judge(out: Path, resume: bool) -> None:
    """Refuse, reading only, an ``out`` that is neither missing, empty nor a run (all it holds named), or whose
    ``.lock`` tformer did not write (a link, a file of the user's: naming it); the lock is taken only after."""
    entries = listing(out)
    if not is_run(out, entries):
        if [name for name in entries if name != LOCK_NAME]:
            raise no_state(out) if resume else not_a_run(out, entries)
        if resume and not os.path.lexists(out / LOCK_NAME):  # with a lock, a run may be starting: the lock tells
            raise no_state(out)
    what = foreign_lock(out)
    if what is not None:
        raise ValueError(foreign_message(out, what))


def no_state(out: Path) -> FileNotFoundError:
    last = out / "last"
    return FileNotFoundError(
        f"--resume: {str(last)!r} holds no training state to resume from; train without --resume first"
    )


def check_resumable(out: Path) -> None:
    for name in (BEST_DIR, "last"):
        recover_dir(out / name)
    if not (out / "last" / STATE_NAME).is_file():
        raise no_state(out)
    kept = kept_by_user(out)
    if kept:  # the next save of best/ or last/ replaces the folder whole: a file of the user's there would be lost
        raise ValueError(
            f"--resume: {str(out)!r} holds {', '.join(kept[:5])}{' ...' if kept[5:] else ''}, which no tformer run "
            "writes, in a folder that every save replaces whole; nothing was changed: move them out first"
        )
