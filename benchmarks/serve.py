"""``tformer serve`` against the library it serves (issue 46's serve goal): the time to the first token of a streamed
chat completion, through HTTP and the real ``openai`` client, beside :func:`tformer.lm.reply`'s on the same prompt in
the same process; then 20 streaming clients at once.

    python -m benchmarks.serve            # a SmolLM2-135M-shaped Llama (random weights): about 2 minutes
    python -m benchmarks.serve --quick    # a tiny twin: proves the script works

The model: ``benchmarks.decode_llama``'s SmolLM2-135M shape (30 × 576, GQA 9/3, 49,152-token table), random weights
(seeded), saved as a Hugging Face directory with a small byte-level BPE, ChatML's specials and SmolLM2's chat template
(the tokenizer's few hundred ids fit the model's table; the weights are random, so the text is too; the rows of the
tied table past the tokenizer's ids, of the specials and of byte pieces that are no text alone are zero, so that every
new token is text, streamed as it comes, and a reply runs to its length). The server runs
in this process (uvicorn in a thread, as ``tformer serve`` runs it) over :class:`tformer.serve.Served`, which loads
the directory as ``tformer serve`` does.

1. **Time to first token**, greedy, a two-turn conversation of about 60 prompt tokens, ``--repeats`` times with the
   two alternating: the library (``tformer.lm.reply`` on the served model and tokenizer, to its first ``on_text``)
   and the server (``client.chat.completions.create(stream=True)`` to the first chunk with content). The ratio of
   the medians is the goal's (≤ 1.2).
2. **20 concurrent streaming clients** (threads, one ``openai`` client each), each asking a different question,
   greedy, 24 new tokens at most: every answer complete (a finish reason) and equal to the one asked alone; the wall
   time of all, each client's time to its first token and to its end (the queue serves them one at a time).

Writes ``OUT/serve.json`` and ``OUT/serve.md`` with the machine and the commit.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from benchmarks.common import base_parser, machine_info, session, write_text  # noqa: E402
from benchmarks.memory import commit  # noqa: E402

CHATML = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SMOLLM2_TEMPLATE = (  # SmolLM2-135M-Instruct's chat_template, as it ships
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TEXTS = [
    "What is the capital of France? Paris is the capital of France.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "A language model predicts the next token from the tokens before it.",
] * 4
CONVERSATION = [
    {"role": "user", "content": "Hello! Can you tell me what a language model does?"},
    {"role": "assistant", "content": "A language model predicts the next token from the tokens before it."},
    {"role": "user", "content": "And what is the capital of France?"},
]
CLIENTS = 20


def make_model(directory: Path, quick: bool) -> Path:
    """The SmolLM2-135M-shaped Llama (random, seeded) with a ChatML BPE and SmolLM2's template, as a HF directory."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    from benchmarks import decode_llama

    c = decode_llama.QUICK if quick else decode_llama.FULL
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=min(400, c["vocab"]),
        special_tokens=CHATML,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TEXTS, trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=max(c["vocab"], tok.get_vocab_size()),
        hidden_size=c["d"],
        intermediate_size=c["ff"],
        num_hidden_layers=c["layers"],
        num_attention_heads=c["heads"],
        num_key_value_heads=c["kv_heads"],
        max_position_embeddings=2048,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = transformers.LlamaForCausalLM(config)
    # only whole text can win: the rows of the table past the tokenizer's ids, of the specials, and of the byte pieces
    # that are no text alone (a lone UTF-8 lead byte would hold the stream back until its character is complete) are 0
    silent = [i for i in range(tok.get_vocab_size()) if i < len(CHATML) or "\ufffd" in tok.decode([i])]
    with torch.no_grad():
        head = model.get_output_embeddings().weight  # (V, D), tied to the input table
        head[tok.get_vocab_size() :] = 0
        head[silent] = 0
    model.save_pretrained(directory)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|im_end|>"
    )
    fast.chat_template = SMOLLM2_TEMPLATE
    fast.save_pretrained(directory)
    return directory


class Server:
    """uvicorn in a thread on a free port of 127.0.0.1, serving ``served`` (what ``tformer serve`` runs)."""

    def __init__(self, served) -> None:
        import uvicorn

        from tformer.serve import Worker, create_app, listen

        self.sock = listen("127.0.0.1", 0)
        self.worker = Worker(64)
        app = create_app(served, self.worker, "127.0.0.1", None, lambda line: None)
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.worker.close()
        self.sock.close()


def library_first_token(served, messages: list[dict], max_new_tokens: int) -> float:
    """Seconds from calling ``tformer.lm.reply`` to its first text (greedy)."""
    from tformer.generation import SamplingConfig
    from tformer.lm import reply

    start = time.perf_counter()
    first: list[float] = []

    def on_text(text: str) -> None:
        if text and not first:
            first.append(time.perf_counter() - start)

    reply(served.model, served.tokenizer, messages, max_new_tokens, SamplingConfig(False), on_text=on_text)
    return first[0] if first else float("nan")


def server_first_token(client, model: str, messages: list[dict], max_tokens: int) -> tuple[float, str, str | None]:
    """Seconds from ``create(stream=True)`` to the first chunk with content; the whole text and the finish reason."""
    start = time.perf_counter()
    first, pieces, finish = None, [], None
    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0, stream=True
    )
    for chunk in stream:
        choice = chunk.choices[0] if chunk.choices else None
        if choice is None:
            continue
        if choice.delta.content:
            if first is None:
                first = time.perf_counter() - start
            pieces.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
    return (first if first is not None else float("nan")), "".join(pieces), finish


def question(i: int) -> list[dict]:
    return [{"role": "user", "content": f"Question {i}: what is {i} plus {i + 1}?"}]


def main(argv=None) -> dict:
    args = base_parser(__doc__.splitlines()[0], "runs/bench", "serve/serve.json", "serve/serve.md").parse_args(argv)
    with session(args):
        return _measure(args)


def _measure(args) -> dict:
    import openai

    from tformer.serve import Served

    repeats = max(args.repeats, 3)  # first-token measurements of each (--quick: 3)
    with tempfile.TemporaryDirectory() as tmp:
        directory = make_model(Path(tmp) / "smollm2-shaped", args.quick)
        served = Served.open(directory, name="bench", precision="fp32", max_new_tokens=64)
        with Server(served) as server:
            client = openai.OpenAI(base_url=server.url, api_key="-", max_retries=0, timeout=600)
            prompt_tokens = len(served.tokenizer.apply_chat_template(CONVERSATION, tokenize=True))
            library_first_token(served, CONVERSATION, 4)  # warm both paths
            server_first_token(client, "bench", CONVERSATION, 4)
            lib, srv = [], []
            for _ in range(repeats):  # alternating
                lib.append(library_first_token(served, CONVERSATION, 8))
                srv.append(server_first_token(client, "bench", CONVERSATION, 8)[0])
            alone = {i: server_first_token(client, "bench", question(i), 24) for i in range(CLIENTS)}

            def one(i: int) -> dict:
                started = time.perf_counter()
                first, text, finish = server_first_token(client, "bench", question(i), 24)
                return {"first_s": first, "end_s": time.perf_counter() - started, "text": text, "finish": finish}

            start = time.perf_counter()
            with ThreadPoolExecutor(CLIENTS) as pool:
                together = list(pool.map(one, range(CLIENTS)))
            wall = time.perf_counter() - start
    same = sum(r["text"] == alone[i][1] and r["finish"] is not None for i, r in enumerate(together))
    result = {
        "machine": machine_info(args, None),
        "commit": commit(),
        "quick": args.quick,
        "prompt_tokens": prompt_tokens,
        "first_token_library_s": lib,
        "first_token_server_s": srv,
        "first_token_library_median_s": statistics.median(lib),
        "first_token_server_median_s": statistics.median(srv),
        "first_token_ratio": statistics.median(srv) / statistics.median(lib),
        "concurrent": {
            "clients": CLIENTS,
            "complete_and_equal": same,
            "wall_s": wall,
            "first_s": [r["first_s"] for r in together],
            "end_s": [r["end_s"] for r in together],
        },
    }
    cpu, revision = result["machine"]["cpu"], result["commit"]
    changed = " (with uncommitted changes in src/)" if revision["src_changed"] else ""
    md = [
        "# serve",
        "",
        f"Machine: {cpu['cpu']}, class {cpu['machine_class']}, {cpu['cores']} cores, torch {torch.__version__}; "
        f"commit {revision['commit']}{changed}.",
        "",
        f"Time to first token, greedy, a conversation of {prompt_tokens} prompt tokens, median of {repeats} alternating:",
        "",
        "| path | first token s (median) | min |",
        "|---|---:|---:|",
        f"| tformer.lm.reply (the library) | {statistics.median(lib):.4f} | {min(lib):.4f} |",
        f"| tformer serve + openai client, stream=True | {statistics.median(srv):.4f} | {min(srv):.4f} |",
        "",
        f"Ratio server ÷ library: **{result['first_token_ratio']:.3f}** (goal ≤ 1.2).",
        "",
        f"{CLIENTS} streaming clients at once: {same} of {CLIENTS} complete and equal to the answer asked alone; all in "
        f"{wall:.2f} s; first token after {min(r['first_s'] for r in together):.3f}–{max(r['first_s'] for r in together):.3f} s, "
        f"done after {min(r['end_s'] for r in together):.3f}–{max(r['end_s'] for r in together):.3f} s (one worker, a FIFO queue).",
    ]
    out = Path(args.out) / "serve"
    write_text(out, "serve.json", json.dumps(result, indent=2) + "\n")
    write_text(out, "serve.md", "\n".join(md) + "\n")
    print("\n".join(md))
    return result


if __name__ == "__main__":
    main()
