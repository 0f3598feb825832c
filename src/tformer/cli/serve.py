"""``tformer serve``: serve one model with OpenAI's HTTP API (``tformer.serve``).

    tformer serve --model ./SmolLM2-135M-Instruct            # http://127.0.0.1:8000/v1: completions and chat
    tformer serve --model runs/demo --port 8001               # a translator: POST /v1/translate
    TFORMER_API_KEY=secret tformer serve --model M --host 0.0.0.0   # other machines, with a key

Then any OpenAI client: ``openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="-")``. One model, one worker
thread: requests are answered one at a time in the order they came (a FIFO queue of at most --max-queue waiting).
It serves on 127.0.0.1 (a non-loopback --host without an API key prints a warning) and stops on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import os
import sys

from tformer.checks import Text
from tformer.cli.flags import add
from tformer.cli.validate import int_in

DESCRIPTION = (
    "Serve one model with OpenAI's HTTP API: GET /v1/models; a GPT: POST /v1/completions and, if its tokenizer has a "
    "chat template, /v1/chat/completions (streaming as server-sent events); a translator: POST /v1/translate. One "
    "model, one worker thread: requests are answered one at a time, in the order they came (a FIFO queue). Limits: "
    "a request body of 1 MiB, 4 stop strings, 128 texts and a beam of 16 per translate request; "
    'max_tokens at most --max-new-tokens (a longer request is capped, finish_reason "length"), and at most the room '
    "the context leaves after the prompt (more is refused: context_length_exceeded). A client that goes away cancels "
    "its request, waiting or generating "
    "(a translation, once begun, runs to its end)."
)
KEY_ENV = "TFORMER_API_KEY"


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve a model with OpenAI's HTTP API (completions, chat, translate)")
    p.description = DESCRIPTION
    add(
        p,
        "--model",
        model={
            "required": True,
            "help": "a GPT (a tformer train lm run or model directory, or a Hugging Face one) or a translator",
        },
    )
    p.add_argument("--name", type=Text(), help="the model's id in the API (default: the directory's name)")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (127.0.0.1: this machine only)")
    p.add_argument("--port", type=int_in(0, 65535), default=8000, help="port (0 = any free port)")
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        type=Text(),
        help="a Host name the server answers besides localhost, 127.0.0.1 and [::1] when it serves on a loopback "
        "address (the name a reverse proxy or a container forwards); repeat for more; other names are refused "
        "against DNS rebinding",
    )
    p.add_argument(
        "--api-key",
        help=f"ask every request for Authorization: Bearer KEY (default: ${KEY_ENV}, else no key; the variable keeps "
        "the key out of the process list)",
    )
    add(
        p,
        "--max-new-tokens",
        max_new_tokens={
            "default": 512,
            "help": "the most tokens one request may generate: a request's max_tokens is capped at this (one past "
            "the room the model's context leaves after the prompt is refused, as OpenAI's)",
        },
    )
    p.add_argument(
        "--max-queue",
        type=int_in(1, 100_000),
        default=64,
        help="requests that may wait while one runs; one more is answered 503 (server busy)",
    )
    add(p, "--device", "--precision", "--no-fast")
    p.set_defaults(func=run)


def run(args) -> int:
    from tformer.serve import Served, listen, serve
    from tformer.serve.guard import LOOPBACK

    api_key = args.api_key if args.api_key is not None else os.environ.get(KEY_ENV) or None
    given = "--api-key" if args.api_key is not None else f"${KEY_ENV}"
    if api_key is not None and not api_key.strip():
        raise ValueError(f"{given} is empty: give a key, or leave the flag out to serve without one")
    if api_key is not None and (odd := [c for c in api_key if not "!" <= c <= "~"]):  # an HTTP header's characters
        raise ValueError(
            f"{given} has {len(odd)} character(s) an Authorization header cannot carry "
            f"({' '.join(map(repr, odd[:5]))}): a key is printable ASCII without spaces"
        )
    if args.allowed_host and args.host not in LOOPBACK:
        raise ValueError(
            f"--allowed-host {args.allowed_host[0]} is for a server on a loopback address; on --host {args.host} "
            "every Host name is answered already: leave --allowed-host out"
        )
    sock = listen(args.host, args.port)  # before the model loads: a taken port is said at once
    print(f"tformer serve: loading {args.model} ...", file=sys.stderr, flush=True)  # (a large model takes a while)
    try:
        served = Served.open(args.model, args.name, args.device, args.precision, args.fast, args.max_new_tokens)
    except BaseException:
        sock.close()
        raise
    if args.host not in LOOPBACK and api_key is None:
        print(
            f"tformer serve: warning: --host {args.host} without an API key serves the model to other machines: anyone "
            f"who can reach this address can run it (--api-key or ${KEY_ENV})",
            file=sys.stderr,
        )
    if served.family == "gpt":
        chat = ", /v1/chat/completions" if served.chat_template is not None else " (no chat template: no chat)"
        routes = f"/v1/completions{chat}"
    else:
        routes = "/v1/translate"

    def ready(url: str) -> None:
        key = ", API key required" if api_key else ""
        every = " (on every address of this machine: from another, use its name)" * (args.host in ("0.0.0.0", "::"))
        said = f"{served.describe}, served as model {served.name!r}, at {url}{every}: {routes}{key} (Ctrl-C stops)"
        print(f"tformer serve: {said}", flush=True)

    serve(
        served, args.host, args.port, api_key, args.max_queue, ready, sock=sock, allowed_hosts=tuple(args.allowed_host)
    )
    print("tformer serve: stopped", flush=True)
    return 0
