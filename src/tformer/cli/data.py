"""``tformer data download NAME`` and ``tformer data langid``: fetch a corpus; build English-vs-French examples."""

from __future__ import annotations

from tformer.cli.validate import existing_file, int_at_least, output_dir, output_file, positive_float, seed


def add_parser(sub) -> None:
    p = sub.add_parser("data", help="fetch corpora (everything also accepts local paths)")
    sp = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    d = sp.add_parser("download", help="download a corpus into the cache directory")
    d.add_argument("name", help="tatoeba-eng-fra or multi30k")
    d.add_argument("--cache", type=output_dir, help="cache directory (default: $TFORMER_CACHE or ~/.cache/tformer)")
    d.add_argument("--url", help="base http(s) URL of a mirror (replaces the directory part of each URL)")
    d.add_argument(
        "--timeout", type=positive_float, default=300.0, help="seconds for the whole download (an overall deadline)"
    )
    d.add_argument(
        "--sha256", help="the sha256 the downloaded (unpacked) file must have; for a one-file source (tatoeba-eng-fra)"
    )
    d.add_argument(
        "--max-mb",
        type=positive_float,
        default=256.0,
        help="cap in MiB on a file whose size is not built in, downloaded and unpacked (default 256)",
    )
    d.add_argument("--force", action="store_true", help="download again files already in the cache")
    d.set_defaults(func=run_download)

    g = sp.add_parser("langid", help="English-vs-French text<TAB>label examples from the Tatoeba pairs")
    g.add_argument(
        "--tatoeba",
        required=True,
        type=existing_file,
        help="Tatoeba English<TAB>French TSV (e.g. ../shared/data/tatoeba-eng-fra.tsv)",
    )
    g.add_argument("--out", required=True, type=output_file, help="output TSV")
    g.add_argument("--n", type=int_at_least(2), default=20000, help="number of examples (half English, half French)")
    g.add_argument("--seed", type=seed, default=0)
    g.set_defaults(func=run_langid)


def run_download(args) -> int:
    from tformer.translation.download import download

    path = download(
        args.name, args.cache, args.url, args.timeout, sha256=args.sha256, force=args.force, max_mb=args.max_mb
    )
    print(path)
    return 0


def run_langid(args) -> int:
    from tformer.bert import langid_examples, write_tsv

    examples = langid_examples(args.tatoeba, args.n, args.seed)
    write_tsv(examples, args.out)
    print(
        f"wrote {len(examples)} examples ({sum(y == 'en' for _, y in examples)} en, "
        f"{sum(y == 'fr' for _, y in examples)} fr) to {args.out}"
    )
    return 0
