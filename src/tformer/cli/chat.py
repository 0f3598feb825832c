"""``tformer chat``: talk with a chat model, a line at a time, its replies streamed to stdout.

tformer chat --model ./SmolLM2-135M-Instruct --system "Answer in one sentence." --greedy
printf 'Hi!\\nWhat is 2 + 2?\\n' | tformer chat --model ./Qwen2.5-0.5B-Instruct --seed 1   # a pipe works too

Each line read from stdin is a user message; the model's reply, laid out by its chat template
(:func:`tformer.lm.chat.reply`), is streamed to stdout and kept in the history, which the next message continues.
``/reset`` clears the history (``--system`` stays), ``/exit`` or the end of the input ends, ``/help`` lists the
commands. Another line of one ``/word`` is refused as an unknown command, not sent to the model (a message that is
such a word begins with ``//``: ``//usr`` sends ``/usr``). A conversation longer
than the model's context drops its oldest turns, with one line on stderr saying so. A message the model cannot take
(longer than the context leaves it, or a line that is not UTF-8 text) is refused on stderr, the conversation going on
without it; the exit status is then 2. Ctrl-C during a reply stops that reply, which is not kept, nor is its message;
Ctrl-C at the prompt ends, as Ctrl-D does. ``--model`` is any GPT ``tformer.load`` reads whose tokenizer has a
chat template (a Hugging Face chat model's directory); one without is refused in one line.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator

from tformer.cli.flags import add
from tformer.cli.generate import SAMPLING, add_sampling, sampling_config

COMMANDS = {
    "/reset": "clear the conversation (--system stays)",
    "/exit": "end (so does the end of the input)",
    "/help": "list these commands",
}
COMMAND = re.compile(r"/[A-Za-z]\w*")  # a line that is one /word alone: a command, never a message


def add_parser(sub) -> None:
    g = sub.add_parser(
        "chat",
        help="talk with a chat model: stdin lines in, streamed replies out",
        description="Each line of stdin is a message; the reply streams to stdout and the conversation goes on. "
        f"Commands: {'; '.join(f'{c} to {what}' for c, what in COMMANDS.items())}; a message that is one /word begins "
        "with // (//usr sends /usr). A conversation longer than the context drops its oldest turns, saying so on "
        "stderr; a message too long is refused and the chat goes on (exit status 2 at the end). Ctrl-C stops a "
        "reply (neither it nor its message is kept); Ctrl-D ends.",
    )
    add(
        g,
        "--model",
        model={
            "required": True,
            "help": "a chat model: a GPT whose tokenizer has a chat template (chat_template.jinja, or chat_template in "
            "tokenizer_config.json): a Hugging Face directory tformer reads (llama, mistral, qwen2, qwen3, gemma3), or "
            "a run fine-tuned from one (tformer train lm --init)",
        },
    )
    g.add_argument("--system", default="", help="the system message that starts the conversation (default: none)")
    add(
        g,
        "--max-new-tokens",
        max_new_tokens={
            "default": None,
            "help": f"tokens of one reply at most (default: {SAMPLING['max_new_tokens']}, or a quarter of a smaller context)",
        },
    )
    add_sampling(g)
    add(g, "--seed", "--device", defaults=SAMPLING, seed={"help": "reply i uses seed + i (default: random)"})
    add(g, "--precision", "--no-fast")
    g.set_defaults(func=run)


def run(args) -> int:
    from tformer import lm
    from tformer.fast.precision import for_inference

    model, tokenizer = lm.load(args.model, args.device, flag="--model", fast=args.fast)  # through tformer.load
    if tokenizer.chat_template is None:
        raise ValueError(
            f"--model {args.model!r} has no chat template (chat_template.jinja, or chat_template in "
            "tokenizer_config.json): tformer chat needs a chat model's; `tformer generate` continues a text"
        )
    context = model.config.max_len
    if args.max_new_tokens is None:  # the default fits any context: a quarter of it at most (the rest: the talk)
        args.max_new_tokens = max(1, min(int(SAMPLING["max_new_tokens"] or 0), context // 4))
    elif args.max_new_tokens >= context:
        raise ValueError(
            f"--max-new-tokens {args.max_new_tokens} leaves no room for the conversation in the model's context of "
            f"{context} tokens: ask for fewer"
        )
    model = for_inference(model, args.precision, "decoding", args.device, args.fast)
    sampling = sampling_config(args)
    system = [{"role": "system", "content": args.system}] if args.system else []
    if system:  # a template that takes no system message (Mistral's) would refuse every message: said once, now
        try:
            tokenizer.apply_chat_template([*system, {"role": "user", "content": "hi"}], add_generation_prompt=True)
        except ValueError as err:
            raise ValueError(f"--system: this model's chat template refuses a system message ({err})") from None
    interactive = sys.stdin is not None and sys.stdin.isatty()
    hints = ", ".join(f"{c} to {what}" for c, what in COMMANDS.items())
    if interactive:
        print(f"tformer chat: a context of {context} tokens; {hints}", file=sys.stderr)
    try:
        return _talk(args, model, tokenizer, sampling, system, interactive, hints, context)
    except KeyboardInterrupt:  # Ctrl-C at the prompt ends the session, as Ctrl-D does (during a reply: that reply)
        print(file=sys.stderr)
        return 0


def _talk(args, model, tokenizer, sampling, system, interactive: bool, hints: str, context: int) -> int:
    """The conversation, a line of stdin at a time; 2 when a line of piped input was refused (a script's error)."""
    from tformer import lm

    history: list[dict[str, str]] = []
    failed, turn = False, 0
    for line in _lines(interactive):
        if isinstance(line, ValueError):  # a line that is no text: said, and the conversation goes on without it
            print(f"tformer chat: error: {line}", file=sys.stderr)
            failed = True
            continue
        command = line.strip()
        if command == "/exit":
            break
        if command == "/reset":
            history = []
            continue
        if command == "/help":
            print(
                f"tformer chat: {hints}; a message that is one /word begins with // (//usr sends /usr)", file=sys.stderr
            )
            continue
        if COMMAND.fullmatch(command):  # a mistyped command is not the model's to answer
            print(
                f"tformer chat: error: unknown command {command}: the commands are {', '.join(COMMANDS)}",
                file=sys.stderr,
            )
            failed = True
            continue
        if not command:
            continue
        if command.startswith("/") and COMMAND.fullmatch(command[1:]):  # //usr: the message /usr
            line = command[1:]
        messages = [*system, *history, {"role": "user", "content": line}]
        seed = None if args.seed is None else args.seed + turn
        try:
            answer = lm.reply(model, tokenizer, messages, args.max_new_tokens, sampling, seed=seed, on_text=_show)
        except ValueError as err:  # this message, not the session: said, and the conversation goes on without it
            print(f"tformer chat: error: {err}", file=sys.stderr)
            failed = True
            continue
        except KeyboardInterrupt:  # Ctrl-C stops a reply, not the session (as ollama's and llama.cpp's chats)
            _show("\n")
            print(
                "tformer chat: the reply was stopped (Ctrl-C): neither it nor its message is kept; "
                "Ctrl-D or /exit ends",
                file=sys.stderr,
            )
            continue
        _show("\n")
        turn += 1
        if answer.dropped:
            print(
                f"tformer chat: note: the conversation outgrew the context ({context} tokens, {args.max_new_tokens} "
                f"kept for the reply): its oldest {answer.dropped} message(s) were dropped",
                file=sys.stderr,
            )
        history = [*history[answer.dropped :], messages[-1], {"role": "assistant", "content": answer.text}]
    return 2 if failed and not interactive else 0  # at a prompt, a refused line was said there and the talk went on


def _show(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _lines(interactive: bool) -> Iterator[str | ValueError]:
    """The lines of stdin as they come (not read to the end first: a person types them), strict UTF-8, without the
    line end; on a terminal after a ``> `` prompt on stderr. A line that is not text (bad UTF-8, a NUL) comes as
    the ValueError that says why, and the lines after it still come."""
    from tformer.text import check_text

    if sys.stdin is None:  # started with stdin closed
        raise ValueError("no input: stdin is closed; tformer chat reads the messages from it")
    source = getattr(sys.stdin, "buffer", sys.stdin)  # the bytes where there are: the text layer may not be UTF-8
    n = 0
    while True:
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
        raw = source.readline()
        if not raw:
            if interactive:  # Ctrl-D: the shell's prompt on a line of its own
                print(file=sys.stderr)
            return
        n += 1
        text = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
        if n == 1:
            text = text.removeprefix("\ufeff")  # a Windows editor's byte-order mark is no text
        line: str | ValueError
        try:
            line = check_text(text.removesuffix("\n").removesuffix("\r"), f"<stdin>:{n}")
        except ValueError as err:
            line = err
        yield line
