"""``tformer explore``: the glass box in the browser — every number of a real forward pass and of decoding.

    tformer explore                               # the notes' d_model = 4 toy ("I am good." → "Je vais bien")
    tformer explore --model runs/demo             # any tformer model directory: translation, GPT or BERT
    tformer explore --model runs/demo --export page.html   # one self-contained file, no server needed
    tformer explore --model runs/demo/best --compare runs/demo/last  # two checkpoints side by side, and b − a

It serves on 127.0.0.1 (a non-loopback --host is an explicit choice and prints a warning), prints the URL,
opens the browser unless --no-browser, and stops on Ctrl-C. The page and its API: ``docs/explore-api.md``.
"""

from __future__ import annotations

import sys

from tformer.cli.flags import add
from tformer.cli.validate import existing_dir, int_in, output_file


def add_parser(sub) -> None:
    p = sub.add_parser("explore", help="explore a model's forward pass and decoding in the browser")
    p.add_argument("--model", type=existing_dir, help="model directory of any family (default: the notes' toy)")
    p.add_argument(
        "--compare",
        metavar="DIR2",
        type=existing_dir,
        help="a second checkpoint of the same family and shape (another step of one run) to compare with --model",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (127.0.0.1: this machine only)")
    p.add_argument("--port", type=int_in(0, 65535), default=8765, help="port (0 = any free port)")
    p.add_argument("--no-browser", action="store_true", help="print the URL only; do not open a browser")
    p.add_argument(
        "--export", metavar="FILE.html", type=output_file, help="write a self-contained page to this new file and exit"
    )
    add(p, "--overwrite", "--precision", overwrite={"flag": "--export"})
    p.set_defaults(func=run)


def run(args) -> int:
    from tformer.explore import Session
    from tformer.explore.server import LOOPBACK, serve
    from tformer.outputs import check_output

    if args.export:  # before the model is loaded
        check_output(args.export, "--export", [("--model", args.model), ("--compare", args.compare)], args.overwrite)
    session = Session.open(args.model, args.compare, args.precision)
    if args.export:
        from tformer.explore.export import write_export

        print(f"wrote {write_export(session, args.export)}")
        return 0
    if args.host not in LOOPBACK:
        print(
            f"tformer explore: warning: --host {args.host} serves the explorer to other machines: anyone who can "
            "reach this address can run the model",
            file=sys.stderr,
        )

    def ready(url: str) -> None:
        print(f"tformer explore: {session.m.name} at {url} (Ctrl-C stops)", flush=True)
        if not args.no_browser:
            import webbrowser

            webbrowser.open(url)

    serve(session, args.host, args.port, ready)
    print("tformer explore: stopped", flush=True)
    return 0
