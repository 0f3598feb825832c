"""Prepare once, reuse: a corpus tokenized into shards in a cache that outlives the run, checked each time it is used.

A task's corpus is prepared by its module (:mod:`.stream` for the language model's, :mod:`.pairs`, :mod:`.sentences`)
through :func:`prepared`, which finds, checks or makes its folder here.

The cache (:func:`cache_root`): ``--data-cache DIR``, else ``$TFORMER_CACHE/data``, else ``$XDG_CACHE_HOME/tformer/
data`` (``~/.cache/tformer/data``), as Hugging Face ``datasets`` keeps its own. One folder per corpus (its files'
paths, the text field) and tokenizer, holding::

    manifest.json       the format version, the tokenizer's hash, each source file's path, size and SHA-256, the counts
                        (documents, ids, bytes of text) and each shard's file, id count and SHA-256
    tokenizer/          the tokenizer the ids are of
    shard-00000.bin ... the ids (uint16, or uint32 for a vocabulary over 65,536)

Each use checks the manifest against the sources and the shards against their hashes: a source that changed, a
manifest of another format or tokenizer, or a shard that is missing, short or altered is said in one line and the
corpus prepared again, never used. A folder is written whole or not at all (:func:`tformer.files.staged_dir`): a
full disk or an interrupted preparation leaves no half cache. A tokenizer trained on the corpus (BPE on a sample of
:data:`TOKENIZER_SAMPLE` bytes, characters on all of it) is kept in the cache the same way, so a second run starts
training at once. A folder prepared elsewhere (with its ``manifest.json``) may be given as the data itself.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from tformer.data.sources import MANIFEST, NEWLINES, corpus_bytes, find_sources, is_prepared, read_pieces, sample_text
from tformer.files import staged_dir
from tformer.tokenizers import Tokenizer, load_tokenizer, train_tokenizer

__all__ = [
    "FORMAT",
    "TOKENIZER_SAMPLE",
    "cache_root",
    "is_prepared",
    "tokenizer_hash",
    "corpus_tokenizer",
    "prepared",
    "prepared_vocab_size",
    "file_entry",
    "damaged_file",
    "fingerprint",
    "cache_key",
    "read_manifest",
    "source_records",
    "stale",
    "size_text",
    "progress_line",
]

FORMAT = 1  # the manifest's and the shards' layout; another is prepared again
TOKENIZER_SAMPLE = 32 << 20  # bytes of text a BPE or WordPiece is trained on, spread over the corpus


def cache_root(given: str | Path | None = None) -> Path:
    """Where prepared corpora are kept: ``given`` (``--data-cache``), else ``$TFORMER_CACHE/data``, else the user's
    cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``) ``/tformer/data``."""
    if given is not None:
        return Path(given)
    if os.environ.get("TFORMER_CACHE"):
        return Path(os.environ["TFORMER_CACHE"]) / "data"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tformer" / "data"


def prepared_vocab_size(data, given: int | None, log: Callable[[str], None] = print) -> int | None:
    """The vocabulary size of a prepared folder's run (None when ``data`` is not one): ``given`` (``--vocab-size``,
    the size asked for) or, not given, the folder's tokenizer's number of ids (a translator's: its source side's).
    Asked for N, a tokenizer has at most N ids: a ``given`` below the folder's is another tokenizer, refused in one
    line; one above it is said, as the model has the folder's."""
    if data is None or not is_prepared(data):
        return None
    manifest = read_manifest(Path(data)) or {}
    size = manifest.get("vocab_size")
    size = size.get("src") if isinstance(size, dict) else size
    if not isinstance(size, int) or given == size:
        return given if given is not None else size
    if given is None:
        return size
    if given < size:
        raise ValueError(
            f"--vocab-size {given}: --data {str(data)!r} is a folder prepared with a tokenizer of {size:,} ids; "
            f"leave --vocab-size out, or prepare it with the size you want (tformer data prepare "
            f"{manifest.get('task')} --vocab-size N)"
        )
    log(
        f"note: --data {str(data)!r} is a prepared folder: the model has its tokenizer's {size:,} ids (--vocab-size "
        f"{given} asked; a tokenizer trained for {given} ids may have fewer)"
    )
    return given


def _sha256(path: Path) -> str:
    digest, buffer = hashlib.sha256(), bytearray(1 << 20)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(view[:n])
    return digest.hexdigest()


def source_records(files: list[Path]) -> list[dict]:
    """Each source file's path, size and SHA-256: what a manifest records of it, and what a use compares."""
    records = []
    for f in files:
        path, stat = str(f.resolve()), f.stat()
        sha256 = _known_sha256(path, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
        records.append({"path": path, "size": stat.st_size, "sha256": sha256})
    return records


@functools.lru_cache(maxsize=1024)
def _known_sha256(path: str, size: int, mtime_ns: int, ctime_ns: int, inode: int) -> str:
    """A source's SHA-256, read once per process for one state of the file (its size, times and inode: a write
    changes them): a run's fingerprint, its tokenizer's check and its data's check read a large text once, not three
    times."""
    return _sha256(Path(path))


def tokenizer_hash(tokenizer: Tokenizer | Mapping[str, Tokenizer]) -> str:
    """The SHA-256 of the files the tokenizer saves: the same tokenizer, the same hash. A mapping of named tokenizers
    (a translator's ``{"src": ..., "tgt": ...}``): the hash of each, saved with its name as the prefix."""
    with tempfile.TemporaryDirectory() as tmp:
        _save_tokenizers(tokenizer, tmp)
        return _files_hash(Path(tmp))


def _files_hash(directory: Path) -> str:
    """The SHA-256 of the files in ``directory``: each one's name and bytes, in name order."""
    digest = hashlib.sha256()
    for f in sorted(directory.iterdir()):
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


def _save_tokenizers(tokenizer: Tokenizer | Mapping[str, Tokenizer], directory: str | Path) -> None:
    """``tokenizer`` saved into ``directory``; each of a mapping with the prefix ``NAME_``."""
    if isinstance(tokenizer, Mapping):
        for name, tok in tokenizer.items():
            tok.save(directory, prefix=f"{name}_")
    else:
        tokenizer.save(directory)


def cache_key(**parts) -> str:
    """A cache folder's name part: a short hash of what the folder depends on."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _changed_source(recorded: list[dict], now: list[dict]) -> str | None:
    """Which source differs from when it was prepared, in words; None: none."""
    if [r["path"] for r in recorded] != [r["path"] for r in now]:
        return "its files are not the same files"
    for old, new in zip(recorded, now):
        if old["size"] != new["size"]:
            return f"{old['path']} changed since it was prepared ({old['size']:,} bytes then, {new['size']:,} now)"
        if old["sha256"] != new["sha256"]:
            return f"{old['path']} changed since it was prepared (its SHA-256 differs)"
    return None


def damaged_file(directory: Path, manifest: dict) -> str | None:
    """Which of the manifest's ``files`` (each ``{"file", "bytes", "sha256"}``: the shards, an index) is missing,
    short or altered, in words; None: all are as written."""
    for entry in manifest.get("files", []):
        path = directory / entry["file"]
        if not path.is_file():
            return f"{entry['file']} is missing"
        size = path.stat().st_size
        if size != entry["bytes"]:
            return f"{entry['file']} is damaged ({size:,} bytes, {entry['bytes']:,} written)"
        if _sha256(path) != entry["sha256"]:
            return f"{entry['file']} is damaged (its SHA-256 differs from the one written)"
    return None


def read_manifest(directory: Path) -> dict | None:
    """A folder's manifest, or None when it is missing or unreadable."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def stale(directory: Path, sources: list[dict], tok_hash: str, what: str) -> str | None:
    """Why the prepared folder cannot be used as it is (in words), or None when it can."""
    manifest = read_manifest(directory)
    if manifest is None:
        return f"its {MANIFEST} is missing or unreadable"
    if manifest.get("format") != FORMAT:
        return f"it is of format {manifest.get('format')}, this tformer reads {FORMAT}"
    if what == "tokens" and manifest.get("tokenizer_sha256") != tok_hash:
        return "it was prepared with another tokenizer"
    changed = _changed_source(manifest.get("sources", []), sources)
    if changed:
        return changed
    return damaged_file(directory, manifest) if what == "tokens" else None


def corpus_tokenizer(
    data: str | Path,
    kind: str,
    vocab_size: int | None,
    *,
    sample: int = TOKENIZER_SAMPLE,
    text_field: str = "text",
    cache: str | Path | None = None,
    log: Callable[[str], None] = print,
) -> Tokenizer:
    """A tokenizer of ``kind`` trained on the corpus ``data``: characters on all of its text, BPE or WordPiece on
    ``sample`` bytes of it spread over the whole; kept in the cache, so the next run on the same corpus loads it."""
    files = find_sources(data)
    sources = source_records(files)
    key = cache_key(
        format=FORMAT,
        sources=[s["path"] for s in sources],
        text_field=text_field,
        newlines=NEWLINES,
        kind=kind,
        vocab_size=vocab_size,
        sample=None if kind == "char" else sample,
    )
    directory = cache_root(cache) / f"tokenizer-{key}"
    if directory.is_dir():
        problem = stale(directory, sources, "", "tokenizer")
        if problem is None:
            return load_tokenizer(directory / "tokenizer")
        log(f"data cache {directory}: {problem}: training the tokenizer again")
    total = corpus_bytes(files)
    start = time.perf_counter()
    texts: Iterator[str]
    if kind == "char":
        texts = (text for _, text in read_pieces(files, text_field))
        said = f"every character of {size_text(total)}"
    else:
        texts = sample_text(files, sample, text_field)
        said = (
            f"a {size_text(min(sample, total))} sample of {size_text(total)} (--tokenizer-sample)"
            if total > sample
            else size_text(total)
        )
    tokenizer = train_tokenizer(kind, texts, vocab_size)
    log(f"tokenizer: {kind}, {tokenizer.vocab_size:,} ids, from {said} in {time.perf_counter() - start:.1f} s")
    with staged_dir(directory) as work:
        tokenizer.save(work / "tokenizer")
        (work / MANIFEST).write_text(
            json.dumps(
                {
                    "kind": "tformer-tokenizer",
                    "format": FORMAT,
                    "sources": sources,
                    "text_field": text_field,
                    "tokenizer_kind": kind,
                    "vocab_size": vocab_size,
                    "sample": sample,
                },
                indent=1,
            )
        )
    return tokenizer


def prepared(
    task: str,
    data: str | Path,
    tokenizer: Tokenizer | Mapping[str, Tokenizer],
    build: Callable[[Path, list[Path]], dict],
    *,
    key: dict | None = None,
    cache: str | Path | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """The cache folder of ``data`` prepared for ``task`` with ``tokenizer``: found and checked, else made by
    ``build(work, files)`` (the files of ``data`` read into the empty folder ``work``; it returns the manifest's own
    entries, among them ``files``: each binary file written, as :func:`file_entry` gives it). ``key``: what else the
    preparation depends on (the task's settings). ``data`` may be a folder prepared so (then checked, never rebuilt).
    ``tokenizer`` may be a mapping of named tokenizers (a translator's two): each is saved in ``tokenizer/`` with its
    name as the prefix (``src_tokenizer.json``).
    """
    tok_hash = tokenizer_hash(tokenizer)
    if is_prepared(data, task):
        directory = Path(data)
        manifest = read_manifest(directory) or {}
        if manifest.get("format") != FORMAT:
            problem: str | None = f"it is of format {manifest.get('format')}, this tformer reads {FORMAT}"
        elif manifest.get("task") != task:
            problem = f"it was prepared for {manifest.get('task')!r}, not {task!r}"
        elif manifest.get("tokenizer_sha256") != tok_hash:
            kept = directory / "tokenizer"  # the copy saved with the shards: changed since, or another tokenizer
            edited = not kept.is_dir() or _files_hash(kept) != manifest.get("tokenizer_sha256")
            problem = (
                "its tokenizer/ was changed since it was prepared"
                if edited
                else "it was prepared with another tokenizer than this model's"
            )
        else:
            problem = damaged_file(directory, manifest)
        if problem:
            raise ValueError(f"--data {str(directory)!r}: {problem}; prepare it again from its text")
        return directory
    files = find_sources(data)
    sources = source_records(files)
    # the folder of this text (its files' contents, not only their names): a changed text is prepared into a new
    # folder, and the one before is kept whole, since a run given that folder as --data resumes from it
    content = [[s["path"], s["sha256"]] for s in sources]
    name = cache_key(format=FORMAT, task=task, sources=content, tok=tok_hash, **(key or {}))
    directory = cache_root(cache) / f"{task}-{name}"
    if directory.is_dir():
        problem = stale(directory, sources, tok_hash, "tokens")
        if problem is None:
            log(f"data: prepared before, checked: {directory}")
            return directory
        log(f"data cache {directory}: {problem}: preparing it again")
    elif (earlier := _earlier(directory, task, sources, tok_hash)) is not None:
        changed = _changed_source(earlier[1]["sources"], sources)
        log(
            f"data: {changed}: preparing it in a new folder; {earlier[0]}, prepared from the text before, is kept "
            "(delete it when no run reads it)"
        )
    total = corpus_bytes(files)
    log(f"preparing {size_text(total)} of text in {directory} (once: later runs map it)")
    start = time.perf_counter()
    with staged_dir(directory) as work:  # whole or not at all
        built = build(work, files)
        _save_tokenizers(tokenizer, work / "tokenizer")
        seconds = time.perf_counter() - start
        if isinstance(tokenizer, Mapping):
            kind: object = {n: t.kind for n, t in tokenizer.items()}
            size: object = {n: t.vocab_size for n, t in tokenizer.items()}
        else:
            kind, size = tokenizer.kind, tokenizer.vocab_size
        manifest = {
            "kind": "tformer-tokens",
            "format": FORMAT,
            "task": task,
            "tokenizer_sha256": tok_hash,
            "tokenizer_kind": kind,
            "vocab_size": size,
            "sources": sources,
            "text_bytes": total,
            "seconds": round(seconds, 2),
            **(key or {}),
            **built,
        }
        (work / MANIFEST).write_text(json.dumps(manifest, indent=1))
    log(f"prepared {size_text(total)} in {seconds:.1f} s ({total / 1e6 / max(seconds, 1e-9):.1f} MB/s)")
    return directory


def _earlier(directory: Path, task: str, sources: list[dict], tok_hash: str) -> tuple[Path, dict] | None:
    """The newest folder beside ``directory`` prepared for ``task`` with this tokenizer from the same files, whose
    text has changed since, with its manifest (None: none)."""
    paths, found = [s["path"] for s in sources], []
    for other in directory.parent.glob(f"{task}-*"):
        manifest = read_manifest(other) or {}
        if (
            manifest.get("tokenizer_sha256") == tok_hash
            and [r.get("path") for r in manifest.get("sources", [])] == paths
        ):
            found.append((other.stat().st_mtime, str(other), other, manifest))
    return max(found)[2:] if found else None


def file_entry(path: Path) -> dict:
    """A binary file's manifest entry: its name, size and SHA-256 (what :func:`damaged_file` checks)."""
    return {"file": path.name, "bytes": path.stat().st_size, "sha256": _sha256(path)}


def fingerprint(data: str | Path) -> str:
    """The SHA-256 of what ``data`` holds: each source file's size and SHA-256, in reading order (a prepared folder:
    those it was prepared from), not where they are: a run moved with its text resumes. A run records it, and
    ``--resume`` refuses a text that changed since."""
    if is_prepared(data):
        sources = (read_manifest(Path(data)) or {}).get("sources", [])
    else:
        try:
            sources = source_records(find_sources(data))
        except FileNotFoundError:  # a folder of no corpus format, a Multi30k one (train.en ...): each of its files
            if not Path(data).is_dir():
                raise
            sources = source_records(sorted(p for p in Path(data).iterdir() if p.is_file()))
    content = [[s["size"], s["sha256"]] for s in sources]
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()


def size_text(n: int) -> str:
    """``12.3 MB``, ``1.02 GB``: a size in words."""
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def progress_line(done: int, total: int, seconds: float, ids: int) -> str:
    """``preparing: 120.0 MB of 1.00 GB (12%), 25.1 MB/s, 30,000,000 ids, ETA 0:35`` (characters count as bytes)."""
    rate = done / max(seconds, 1e-9)
    left = max(total - done, 0) / max(rate, 1e-9)
    return (
        f"preparing: {size_text(done)} of {size_text(total)} ({100 * done / max(total, 1):.0f}%), {rate / 1e6:.1f} MB/s, "
        f"{ids:,} ids, ETA {int(left // 60)}:{int(left % 60):02d}"
    )
