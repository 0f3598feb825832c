"""``tformer data download NAME``: fetch a corpus into the cache directory."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("data", help="fetch corpora (everything also accepts local paths)")
    sp = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    d = sp.add_parser("download", help="download a corpus into the cache directory")
    d.add_argument("name", help="tatoeba-eng-fra or multi30k")
    d.add_argument("--cache", help="cache directory (default: $TFORMER_CACHE or ~/.cache/tformer)")
    d.add_argument("--url", help="base URL of a mirror (replaces the directory part of each URL)")
    d.add_argument("--timeout", type=float, default=60.0)
    d.set_defaults(func=run_download)
    from tformer.cli.bert import add_data_parsers
    add_data_parsers(sp)


def run_download(args) -> int:
    from tformer.translation.download import download

    path = download(args.name, args.cache, args.url, args.timeout)
    print(path)
    return 0
