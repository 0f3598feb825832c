"""``tformer data download NAME``, ``tformer data prepare FAMILY`` and ``tformer data langid``: fetch a corpus;
tokenize one into the cache ahead of training; build English-vs-French examples.

    tformer data prepare lm --data corpus/ --tokenizer bpe --vocab-size 8192     # once: later runs start at once
    tformer data prepare translation --data pairs.tsv --vocab-size 8000           # the pairs, with a length index
    tformer data prepare bert --data wiki.txt --vocab-size 8000                   # the sentences, with an index
    tformer train lm --data corpus/ --tokenizer bpe --vocab-size 8192 --out runs/lm --minutes 30
"""

from __future__ import annotations

import argparse
import os

from tformer.cli.flags import add, defaults
from tformer.cli.validate import (
    Number,
    corpus_path,
    count_or_fraction,
    existing_file,
    int_at_least,
    output_dir,
    output_file,
    seconds,
)


def add_parser(sub) -> None:
    from tformer.bert import run as bert_run
    from tformer.translation import run as translation_run

    p = sub.add_parser("data", help="fetch and prepare corpora (everything also accepts local paths)")
    sp = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    d = sp.add_parser("download", help="download a corpus into the cache directory")
    d.add_argument("name", help="tatoeba-eng-fra, multi30k or tinyshakespeare")
    d.add_argument(
        "--cache",
        type=output_dir,
        help="cache directory, created if missing (default: $TFORMER_CACHE or ~/.cache/tformer); "
        "not inside a model or run directory",
    )
    d.add_argument("--url", help="base http(s) URL of a mirror (replaces the directory part of each URL)")
    d.add_argument(
        "--from",
        dest="local",
        metavar="PATH",
        help="a copy on disk instead of the network (the file, or a directory holding the files), checked as a "
        "download is: e.g. --from ../shared/data/tinyshakespeare.txt",
    )
    d.add_argument(
        "--timeout", type=seconds, default=300.0, help="seconds for the whole download (an overall deadline)"
    )
    d.add_argument(
        "--sha256", help="the sha256 the downloaded (unpacked) file must have; for a one-file source (tatoeba-eng-fra)"
    )
    d.add_argument(
        "--max-mb",
        type=Number(float, 0, 1 << 20, low_open=True, allowed="a number of MiB in (0, 1048576] (1 TiB)"),
        default=256.0,
        help="cap in MiB on a file whose size is not built in, downloaded and unpacked",
    )
    d.add_argument(
        "--force",
        action="store_true",
        help="download again files already in the cache (a cached file that is a symbolic link is refused)",
    )
    d.set_defaults(func=run_download)

    pr = sp.add_parser(
        "prepare",
        help="tokenize a corpus into memory-mapped shards in the cache, once (train then maps them at once)",
        description="Read --data as a stream, train the tokenizer a run with the same flags would (or take "
        "--tokenizer-dir's, or --init's), and write the ids into shards with a manifest in the cache. A run with "
        "the same data and tokenizer flags finds them and starts training at once; a changed source, another "
        "tokenizer or a damaged shard is said and prepared again.",
    )
    fam = pr.add_subparsers(dest="family", metavar="FAMILY", required=True)
    lm = fam.add_parser("lm", help="a language model's stream of documents (train lm)")
    lm.add_argument("--data", required=True, type=corpus_path, help="the text, as train lm's --data takes it")
    from tformer.lm.recipes import RECIPES

    add(
        lm,
        "--preset",
        preset={
            "choices": ["tiny", "small", "base", *RECIPES],
            "help": "as train lm's: its recipe says the tokenizer and vocabulary (default: tiny)",
        },
    )
    lm.add_argument("--tokenizer", choices=["char", "bpe"], help="character-level or byte-level BPE (default: char)")
    add(lm, "--vocab-size", "--tokenizer-dir", "--tokenizer-sample", "--init", "--text-field", "--data-cache")
    lm.set_defaults(func=run_prepare_lm)
    bt = fam.add_parser("bert", help="documents of sentences, with a sentence index (train bert)")
    bt.add_argument("--data", required=True, type=corpus_path, help="the text, as train bert's --data takes it")
    add(
        bt,
        "--vocab-size",
        "--tokenizer-dir",
        "--tokenizer-sample",
        "--init",
        "--data-cache",
        "--valid",
        defaults=defaults(bert_run.prepare),
        vocab_size={"type": int_at_least(6, " (5 special tokens + 1)"), "help": "size of the WordPiece (default 8000)"},
        valid={"help": "as train bert's --valid: the sentences held out are not in the WordPiece's sample"},
    )
    bt.set_defaults(func=run_prepare_bert)
    tr = fam.add_parser("translation", help="a TSV of sentence pairs, with a length index (train translation)")
    tr.add_argument("--data", required=True, type=pairs_file, help="the source<TAB>target pairs (a TSV file)")
    entry = defaults(translation_run.prepare_data)
    add(
        tr,
        "--vocab-size",
        "--tokenizer-sample",
        "--init",
        "--data-cache",
        "--valid",
        "--seed",
        defaults=entry,
        vocab_size={"type": int_at_least(5, " (4 special tokens + 1)"), "help": "size of the BPE (default 8000)"},
        valid={"help": "as train translation's --valid: the pairs held out are not in the BPE's sample"},
        seed={"help": "as train translation's --seed (which pairs are held out)"},
    )
    tr.add_argument("--separate-vocab", dest="joint", action="store_false", help="as train translation's")
    tr.add_argument(
        "--test",
        type=count_or_fraction,
        default=entry["test"],
        help="as train translation's (fraction, or count if >= 1)",
    )
    tr.set_defaults(func=run_prepare_translation)

    g = sp.add_parser("langid", help="English-vs-French text<TAB>label examples from the Tatoeba pairs")
    g.add_argument(
        "--tatoeba",
        required=True,
        type=existing_file,
        help="Tatoeba English<TAB>French TSV (e.g. ../shared/data/tatoeba-eng-fra.tsv)",
    )
    g.add_argument("--out", required=True, type=output_file, help="output TSV (a new file)")
    add(g, "--overwrite")
    g.add_argument("--n", type=int_at_least(2), default=20000, help="number of examples (half English, half French)")
    add(g, "--seed", seed={"help": "seed of the sampling of the examples"})
    g.set_defaults(func=run_langid)


def run_download(args) -> int:
    from tformer.translation.download import download

    _check_cache(args)
    path = download(
        args.name,
        args.cache,
        args.url,
        args.timeout,
        sha256=args.sha256,
        force=args.force,
        max_mb=args.max_mb,
        local=args.local,
    )
    print(path)
    return 0


def _check_cache(args) -> None:
    """The cache directory is tformer's to fill with its own file names, so it may exist; it may not lie in a
    model or run directory, and ``--force`` does not replace a cached file that is a symbolic link."""
    from tformer.outputs import check_output_dir
    from tformer.translation.download import SOURCES, default_cache_dir

    flag = "--cache" if args.cache else "the cache directory ($TFORMER_CACHE or ~/.cache/tformer)"
    cache = check_output_dir(args.cache or default_cache_dir(), flag)
    for remote in SOURCES.get(args.name, []) if args.force else []:
        cached = cache / args.name / remote.filename
        if cached.is_symlink():
            raise ValueError(
                f"--force: the cached {str(cached)!r} is a symbolic link (to {os.readlink(cached)!r}); tformer "
                "replaces neither a link nor the file it points to: remove the link, or give another --cache"
            )


def run_prepare_lm(args) -> int:
    from tformer.data import TOKENIZER_SAMPLE
    from tformer.lm import prepare

    directory = prepare(
        args.data,
        args.preset,
        init=args.init,
        tokenizer=args.tokenizer,
        tokenizer_dir=args.tokenizer_dir,
        tokenizer_sample=args.tokenizer_sample or TOKENIZER_SAMPLE,
        vocab_size=args.vocab_size,
        text_field=args.text_field,
        data_cache=args.data_cache,
        log=print,
    )
    print(directory)
    return 0


def run_prepare_bert(args) -> int:
    from tformer import bert
    from tformer.data import TOKENIZER_SAMPLE

    directory = bert.prepare(
        args.data,
        init=args.init,
        tokenizer_dir=args.tokenizer_dir,
        tokenizer_sample=args.tokenizer_sample or TOKENIZER_SAMPLE,
        vocab_size=args.vocab_size,
        valid=args.valid,
        data_cache=args.data_cache,
        log=print,
    )
    print(directory)
    return 0


def pairs_file(text: str) -> str:
    """``data prepare translation --data``: a TSV file; a folder is refused saying what reads it."""
    from tformer.cli.validate import downloaded_corpus
    from tformer.data.prepare import is_prepared

    if not os.path.lexists(text):
        text = downloaded_corpus(text)  # tatoeba-eng-fra: the download's TSV
    try:
        if is_prepared(text, "translation"):
            raise argparse.ArgumentTypeError(f"{text!r} is prepared already: tformer train translation --data {text}")
    except ValueError as err:  # prepared for another family
        raise argparse.ArgumentTypeError(str(err).removeprefix("--data ")) from None
    if os.path.isdir(text):
        if not any(name.startswith("train.") for name in os.listdir(text)):  # not a Multi30k-like folder either
            raise argparse.ArgumentTypeError(f"{text!r} is a folder; this takes a TSV file of source<TAB>target pairs")
        raise argparse.ArgumentTypeError(
            f"{text!r} is a folder; this takes a TSV file of source<TAB>target pairs. A Multi30k folder (train.en, "
            f"train.fr, ...) is not prepared: `tformer train translation --data {text}` reads it as it is"
        )
    return existing_file(text)


def run_prepare_translation(args) -> int:
    from tformer.data import TOKENIZER_SAMPLE
    from tformer.translation.run import prepare_data

    directory = prepare_data(
        args.data,
        init=args.init,
        vocab_size=args.vocab_size,
        joint=args.joint,
        tokenizer_sample=args.tokenizer_sample or TOKENIZER_SAMPLE,
        seed=args.seed,
        valid=args.valid,
        test=args.test,
        data_cache=args.data_cache,
        log=print,
    )
    print(directory)
    return 0


def run_langid(args) -> int:
    from tformer.bert import langid_examples, write_tsv
    from tformer.outputs import check_output

    check_output(args.out, "--out", [("--tatoeba", args.tatoeba)], args.overwrite)
    examples = langid_examples(args.tatoeba, args.n, args.seed)
    write_tsv(examples, args.out)
    print(
        f"wrote {len(examples)} examples ({sum(y == 'en' for _, y in examples)} en, "
        f"{sum(y == 'fr' for _, y in examples)} fr) to {args.out}"
    )
    return 0
