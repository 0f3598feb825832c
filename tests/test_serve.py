"""tformer serve (issue 46, item 4): OpenAI's HTTP API over one model, called as users call it — with the real
``openai`` client (streaming and not), and with httpx for what a client library hides (the raw events, errors).

Each server is real: uvicorn in a thread on a free port of 127.0.0.1, in front of tiny random models (a SmolLM2-like
Llama with its chat template, a GPT-2 without one, a tiny translator). The answers are pinned against the library's
own entry points (tformer.lm.generate, tformer.lm.chat.reply, Translator.translate) and `tformer generate --greedy`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import torch

pytest.importorskip("transformers")
openai = pytest.importorskip("openai")


from tformer import Seq2SeqConfig, Seq2SeqTransformer, lm  # noqa: E402
from tformer.cli import main  # noqa: E402
from tformer.generation import SamplingConfig  # noqa: E402
from tformer.lm.chat import reply  # noqa: E402
from tformer.serve import Cancelled, Outcome, Served, Worker, create_app, listen, server_for  # noqa: E402
from tformer.serve import model as work  # noqa: E402
from tformer.serve.guard import Guard  # noqa: E402
from tformer.serve.protocol import MAX_BEAM, MAX_BODY, MAX_STOP, MAX_TEXTS  # noqa: E402
from tformer.tokenizers import train_tokenizer  # noqa: E402
from tformer.translation import Translator  # noqa: E402
from tformer.translation.toy_corpus import builtin_pairs  # noqa: E402
from tformer.translation.translator import TranslationCut  # noqa: E402
from tiny_chat_models import gpt2_dir, llama_chat_dir  # noqa: E402

PROMPT = "The quick brown fox"
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the capital of France?"},
]
ERROR_KEYS = {"message", "type", "param", "code"}


@dataclass
class Running:
    url: str  # the API's base: http://127.0.0.1:PORT/v1
    worker: Worker
    log: list[str] = field(default_factory=list)
    stop: Callable[[], None] = lambda: None  # as Ctrl-C stops tformer serve

    def client(self, api_key: str = "unused", **options) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key=api_key, max_retries=0, timeout=30, **options)


@contextlib.contextmanager
def running(served: Served, api_key: str | None = None, max_queue: int = 64):
    """A real server for ``served``: uvicorn in a thread (its event loop in debug mode), on a free port of 127.0.0.1."""
    sock = listen("127.0.0.1", 0)
    worker = Worker(max_queue)
    state = Running(f"http://127.0.0.1:{sock.getsockname()[1]}/v1", worker)
    app = create_app(served, worker, "127.0.0.1", api_key, state.log.append)
    server = server_for(app, worker)  # as tformer serve's: it stops the worker's requests when it stops
    server.config.timeout_graceful_shutdown = 30  # tformer serve's 3 s, made long: a request not ended at once shows
    # asyncio's debug mode refuses a call into the loop from another thread that is not call_soon_threadsafe's
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock]), debug=True), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    state.stop = lambda: setattr(server, "should_exit", True)
    try:
        yield state
    finally:
        server.should_exit = True
        thread.join(30)
        worker.close()
        sock.close()


def _translator_dir(path: Path) -> Path:
    """A tiny untrained translator saved as tformer saves one (its outputs are arbitrary, and deterministic)."""
    pairs = builtin_pairs()[::59][:20]
    tok = train_tokenizer("bpe", [t for p in pairs for t in p], vocab_size=200, min_frequency=1)
    cfg = Seq2SeqConfig.preset(
        "tiny", src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, share_embeddings=True, max_len=64
    )
    torch.manual_seed(0)
    Translator(Seq2SeqTransformer(cfg), tok, tok).save(path)
    return path


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("serve")
    return {
        "llama": llama_chat_dir(root / "llama"),
        "gpt2": gpt2_dir(root / "gpt2"),
        "translator": _translator_dir(root / "translator"),
    }


@pytest.fixture(scope="module")
def llama(dirs) -> Served:
    return Served.open(dirs["llama"], precision="fp32")


@pytest.fixture(scope="module")
def gpt2(dirs) -> Served:
    return Served.open(dirs["gpt2"], precision="fp32")


@pytest.fixture(scope="module")
def llama_server(llama):
    with running(llama) as server:
        yield server


@pytest.fixture(scope="module")
def gpt2_server(gpt2):
    with running(gpt2) as server:
        yield server


@pytest.fixture(scope="module")
def translator_server(dirs):
    with running(Served.open(dirs["translator"], precision="fp32")) as server:
        yield server


def _streamed(chunks, chat: bool) -> tuple[str, str | None, list]:
    """(the text, the finish reason, the chunks) of an openai stream."""
    chunks = list(chunks)
    texts = [(c.choices[0].delta.content or "") if chat else c.choices[0].text for c in chunks if c.choices]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1  # one chunk says why it ended
    return "".join(texts), finish[0], chunks


# --------------------------------------------------------------------------------------------- the answers


def test_models_lists_the_one_model_by_its_directory_name(llama_server, gpt2):
    client = llama_server.client()
    assert [m.id for m in client.models.list().data] == ["llama"]
    assert client.models.retrieve("llama").owned_by == "tformer"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4")
    listed = httpx.get(f"{llama_server.url}/models/", timeout=30)  # a trailing slash: the list, not a model named ''
    assert listed.status_code == 200 and [m["id"] for m in listed.json()["data"]] == ["llama"]
    assert Served(name="mine", family="gpt", describe="", max_new_tokens=1).name == "mine"  # --name


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_a_greedy_completion_is_tformer_generate_greedy(name, dirs, request, capsys):
    served, server = request.getfixturevalue(name), request.getfixturevalue(f"{name}_server")
    answer = server.client().completions.create(model=name, prompt=PROMPT, max_tokens=12, temperature=0)
    text = answer.choices[0].text
    assert text == lm.generate(served.model, served.tokenizer, PROMPT, 12, SamplingConfig())
    capsys.readouterr()
    argv = ["generate", "--model", str(dirs[name]), "--prompt", PROMPT, "--greedy", "--max-new-tokens", "12"]
    assert main([*argv, "--precision", "fp32"]) == 0
    assert capsys.readouterr().out == PROMPT + text + "\n"
    prompt_tokens = len(served.tokenizer.encode(PROMPT, add_special_tokens=True))
    usage = answer.usage
    assert (usage.prompt_tokens, usage.total_tokens) == (prompt_tokens, prompt_tokens + usage.completion_tokens)
    assert answer.choices[0].finish_reason == ("length" if usage.completion_tokens == 12 else "stop")
    assert answer.model == name and answer.object == "text_completion" and answer.id.startswith("cmpl-")
    line = server.log[-1]
    said = (
        rf"POST /v1/completions 200 [\d.]+ s \([\d.]+ s generating\) {usage.completion_tokens} tokens [\d.]+ tokens/s"
    )
    assert re.fullmatch(said, line), line


def test_a_chat_completion_is_tformer_lm_chat_reply(llama_server, llama):
    answer = llama_server.client().chat.completions.create(
        model="llama", messages=MESSAGES, max_tokens=10, temperature=0
    )
    expected = reply(llama.model, llama.tokenizer, MESSAGES, 10)
    message = answer.choices[0].message
    assert (message.role, message.content) == ("assistant", expected.text)
    assert answer.choices[0].finish_reason == expected.finish_reason
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (
        expected.prompt_tokens,
        expected.completion_tokens,
    )
    assert answer.object == "chat.completion" and answer.id.startswith("chatcmpl-")


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_a_stream_is_the_same_answer_in_pieces(chat, llama_server):
    client = llama_server.client()
    if chat:
        create, args = client.chat.completions.create, {"messages": MESSAGES}
    else:
        create, args = client.completions.create, {"prompt": PROMPT}
    whole = create(model="llama", max_tokens=15, temperature=0, **args)
    options = {"stream_options": {"include_usage": True}}
    text, finish, chunks = _streamed(
        create(model="llama", max_tokens=15, temperature=0, stream=True, **options, **args), chat
    )
    choice = whole.choices[0]
    assert text == (choice.message.content if chat else choice.text) and finish == choice.finish_reason
    assert len(chunks) >= 4 and len({c.id for c in chunks}) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert all("usage" in c.model_fields_set and c.usage is None for c in chunks[:-1])  # "usage": null, as OpenAI's
    if chat:
        assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].object == "chat.completion.chunk"


def test_the_events_on_the_wire_are_openais(llama_server):
    body = {"model": "llama", "messages": MESSAGES, "max_tokens": 5, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{llama_server.url}/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert all(e.startswith("data: {") for e in events[:-2])
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0]["delta"] == {} and chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_a_reply_sent_back_as_the_client_dumps_it_and_openais_other_fields_are_taken(llama_server):
    """A conversation replayed with the client's own reply (``model_dump()``: "refusal": null, "tool_calls": null,
    ...), a developer message (OpenAI's newer name of system), and store / metadata / service_tier (OpenAI's
    bookkeeping) are answered as the same conversation without them; a field that would change the answer is not."""
    client = llama_server.client()
    reply = client.chat.completions.create(model="llama", messages=MESSAGES, max_tokens=5, temperature=0)
    turn = reply.choices[0].message.model_dump()
    assert turn["refusal"] is None and "tool_calls" in turn  # what the client adds
    plain = {"role": "assistant", "content": turn["content"]}
    system = [{"role": "system", "content": "Answer briefly."}]

    def text(messages, **more):
        answer = client.chat.completions.create(model="llama", messages=messages, max_tokens=8, temperature=0, **more)
        return answer.choices[0].message.content

    again = [*MESSAGES, turn, {"role": "user", "content": "And then?"}]
    assert text(again) == text([*MESSAGES, plain, {"role": "user", "content": "And then?"}])
    developer = [{"role": "developer", "content": "Answer briefly."}, *MESSAGES]
    assert text(developer, store=False, metadata={"k": "v"}, service_tier="auto") == text([*system, *MESSAGES])
    with pytest.raises(openai.BadRequestError, match="reasoning_effort .* not supported"):
        text(MESSAGES, reasoning_effort="high")
    with pytest.raises(openai.BadRequestError, match="messages\\[0\\] has 'tool_calls'"):
        text([{**MESSAGES[0], "tool_calls": [{"id": "x"}]}])
    # what agent frameworks send: tool_calls: [] (none made), tools turned off by tool_choice "none", top_p 0 (greedy,
    # as OpenAI takes it), and newer SDKs' stream option include_obfuscation
    assert text([*MESSAGES[:-1], {**MESSAGES[-1], "tool_calls": []}]) == text(MESSAGES)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    assert text(MESSAGES, tools=[tool], tool_choice="none") == text(MESSAGES)
    with pytest.raises(openai.BadRequestError, match="tools .* not supported"):
        text(MESSAGES, tools=[tool], tool_choice="auto")
    sampled = client.chat.completions.create(model="llama", messages=MESSAGES, max_tokens=8, top_p=0, seed=1)
    assert sampled.choices[0].message.content == text(MESSAGES)
    streamed = client.chat.completions.create(
        model="llama", messages=MESSAGES, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True, "include_obfuscation": False},
    )  # fmt: skip
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == text(MESSAGES)


def test_a_seed_gives_the_same_text_again(llama_server, llama):
    client = llama_server.client()

    def sample(seed, stream=False):
        answer = client.completions.create(
            model="llama", prompt=PROMPT, max_tokens=20, temperature=1.0, top_p=0.9, seed=seed, stream=stream
        )
        return _streamed(answer, False)[0] if stream else answer.choices[0].text

    first = sample(3)
    assert sample(3) == first == sample(3, stream=True)
    assert first == lm.generate(llama.model, llama.tokenizer, PROMPT, 20, SamplingConfig(True, 1.0, None, 0.9), seed=3)
    assert sample(4) != first
    assert sample(3 + 2**32) == first and sample(-1) == sample(2**32 - 1)  # any 64-bit seed, modulo 2**32


def test_stop_strings_end_the_text_before_them(llama_server):
    client = llama_server.client()
    full = client.completions.create(model="llama", prompt=PROMPT, max_tokens=30, temperature=0).choices[0].text
    at = next(k for k in range(1, len(full) - 2) if "\ufffd" not in full[k : k + 2] and full.find(full[k : k + 2]) == k)
    stop = full[at : at + 2]
    for stops in (stop, [stop, "never-seen-text"]):
        answer = client.completions.create(model="llama", prompt=PROMPT, max_tokens=30, temperature=0, stop=stops)
        assert (answer.choices[0].text, answer.choices[0].finish_reason) == (full[:at], "stop")
        streamed = client.completions.create(
            model="llama", prompt=PROMPT, max_tokens=30, temperature=0, stop=stops, stream=True
        )
        assert _streamed(streamed, False)[:2] == (full[:at], "stop")


def test_max_tokens_is_capped_by_the_server_and_by_the_context(llama_server, llama):
    """max_tokens past the room the context leaves is a 400, as OpenAI's and vLLM's (a client asking for 16 tokens
    would otherwise get 1, told "length"); left out, it is that room (chat) at most."""
    client = llama_server.client()
    with pytest.raises(openai.BadRequestError, match="max_tokens asks for 100000 more: ask for at most") as refused:
        client.chat.completions.create(model="llama", messages=MESSAGES, max_tokens=100_000, temperature=0)
    assert refused.value.code == "context_length_exceeded"
    answer = client.chat.completions.create(model="llama", messages=MESSAGES, temperature=0)
    room = llama.context - answer.usage.prompt_tokens  # < the server's 512
    assert answer.usage.completion_tokens <= room
    if answer.choices[0].finish_reason == "length":
        assert answer.usage.completion_tokens == room
    with running(dataclasses.replace(llama, max_new_tokens=3)) as server:  # tformer serve --max-new-tokens 3
        small = server.client()
        for create, args in (
            (small.completions.create, {"prompt": PROMPT}),
            (small.chat.completions.create, {"messages": MESSAGES}),
        ):
            for asked in ({"max_tokens": 50}, {}):
                answer = create(model="llama", temperature=0, **asked, **args)
                if "max_tokens" in asked or "messages" in args:  # a completion's default is OpenAI's 16
                    assert answer.usage.completion_tokens <= 3
                    assert answer.choices[0].finish_reason == (
                        "length" if answer.usage.completion_tokens == 3 else "stop"
                    )


def test_a_nul_in_the_models_own_turn_comes_back_without_a_400(llama_server):
    """A client sends the conversation back with the assistant's turn as the model gave it, a NUL byte token too."""
    body = b'{"model": "llama", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}, '
    body += b'{"role": "assistant", "content": "\\u0000Hello"}, {"role": "user", "content": "Again"}]}'
    r = httpx.post(f"{llama_server.url}/chat/completions", content=body, timeout=60)
    assert r.status_code == 200, r.text


def test_translate(translator_server, dirs):
    translator = Translator.load(dirs["translator"])
    texts = ["I am good.", "The cat is small."]
    for body, expected in (
        ({"text": texts}, translator.translate(texts)),
        ({"text": texts[0], "beam": 2}, translator.translate(texts[:1], beam=2)),
        ({"text": texts, "max_new_tokens": 3}, translator.translate(texts, max_new_tokens=3)),
        ({"text": texts, "max_new_tokens": 10**6}, translator.translate(texts, max_new_tokens=512)),  # capped
    ):
        r = httpx.post(f"{translator_server.url}/translate", json=body, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["translations"] == expected and r.json()["model"] == "translator"
    assert [m.id for m in translator_server.client().models.list().data] == ["translator"]
    small = Served.open(dirs["translator"], precision="fp32", max_new_tokens=2)  # tformer serve --max-new-tokens 2
    with running(small) as server:  # more asked than the server allows: capped, as a completion's max_tokens is
        r = httpx.post(f"{server.url}/translate", json={"text": texts, "max_new_tokens": 50}, timeout=60)
        assert r.status_code == 200, r.text
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TranslationCut)
            assert r.json()["translations"] == translator.translate(texts, max_new_tokens=2)
        cut = [str(w.message) for w in caught if issubclass(w.category, TranslationCut)]
        assert r.json()["warnings"] == cut and cut  # a translation cut by the limit is said, as a cut source is


# -------------------------------------------------------------------------------------- keys and refusals


def test_an_api_key_is_required_when_set(llama):
    with running(llama, api_key="s3cret") as server:
        with pytest.raises(openai.AuthenticationError):
            server.client("wrong").models.list()
        with pytest.raises(openai.AuthenticationError):
            server.client("wrong").completions.create(model="llama", prompt="x", max_tokens=2)
        assert server.client("s3cret").completions.create(model="llama", prompt="x", max_tokens=2).choices
        r = httpx.get(f"{server.url}/models", timeout=30)  # no key at all
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert r.json()["error"]["code"] == "invalid_api_key" and set(r.json()["error"]) == ERROR_KEYS


def _too_long(n: int) -> str:
    return " ".join(["fox"] * n)


BAD = [  # (endpoint, body (bytes: as they are), status, param, code)
    ("completions", b"{not json", 400, None, None),
    ("completions", b"[1, 2]", 400, None, None),
    ("completions", b"\xff\xfe{}", 400, None, None),
    ("completions", b"[" * 100_000, 400, None, None),
    ("completions", {"prompt": "x"}, 400, "model", None),
    ("completions", {"model": "gpt-4", "prompt": "x"}, 404, "model", "model_not_found"),
    ("completions", {"model": "llama", "prompt": "x", "temperature": 3}, 400, "temperature", None),
    ("completions", {"model": "llama", "prompt": "x", "temperature": "hot"}, 400, "temperature", None),
    ("completions", {"model": "llama", "prompt": "x", "top_p": -0.1}, 400, "top_p", None),
    (
        "completions",
        {"model": "llama", "prompt": "x", "max_tokens": 10**6},
        400,
        "max_tokens",
        "context_length_exceeded",
    ),
    ("completions", {"model": "llama", "prompt": "x", "max_tokens": 0}, 400, "max_tokens", None),
    ("completions", {"model": "llama", "prompt": "x", "max_tokens": True}, 400, "max_tokens", None),
    ("completions", {"model": "llama", "prompt": "x", "seed": 2**64}, 400, "seed", None),
    ("completions", {"model": "llama", "prompt": "x", "seed": 1.5}, 400, "seed", None),
    ("completions", {"model": "llama", "prompt": "x", "n": 2}, 400, "n", "unsupported_value"),
    ("completions", {"model": "llama", "prompt": "x", "logprobs": 2}, 400, "logprobs", "unsupported_value"),
    ("completions", {"model": "llama", "prompt": "x", "stop": ["a"] * 5}, 400, "stop", None),
    ("completions", {"model": "llama", "prompt": "x", "bogus": 1}, 400, "bogus", "unknown_parameter"),
    ("completions", {"model": "llama", "prompt": [1, 2, 3]}, 400, "prompt", None),
    ("completions", {"model": "llama", "prompt": ["a", "b"]}, 400, "prompt", None),
    ("completions", b'{"model": "llama", "prompt": "a\\u0000b"}', 400, "prompt", None),
    ("completions", b'{"model": "llama", "prompt": "a\\ud800b"}', 400, "prompt", None),
    ("completions", {"model": "llama", "prompt": _too_long(200)}, 400, "prompt", "context_length_exceeded"),
    (
        "completions",
        {"model": "llama", "prompt": _too_long(200), "stream": True},
        400,
        "prompt",
        "context_length_exceeded",
    ),
    (
        "completions",
        {"model": "llama", "prompt": "x", "stream_options": {"include_usage": True}},
        400,
        "stream_options",
        None,
    ),
    ("chat/completions", {"model": "llama", "messages": []}, 400, "messages", None),
    (
        "chat/completions",
        b'{"model": "llama", "messages": [{"role": "user", "content": "a\\u0000"}]}',
        400,
        "messages[0].content",
        None,
    ),
    ("chat/completions", {"model": "llama", "messages": [{"role": "robot", "content": "x"}]}, 400, "messages", None),
    (
        "chat/completions",
        {"model": "llama", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        400,
        "messages",
        None,
    ),
    (
        "chat/completions",
        {"model": "llama", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
        400,
        "tools",
        "unsupported_value",
    ),
    (
        "chat/completions",
        {"model": "llama", "messages": [{"role": "user", "content": _too_long(200)}], "stream": True},
        400,
        "messages",
        "context_length_exceeded",
    ),
    ("translate", {"text": "x"}, 404, None, "unsupported_endpoint"),
]


@pytest.mark.parametrize("endpoint, body, status, param, code", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_a_bad_request_gets_openais_error_shape(endpoint, body, status, param, code, llama_server):
    url = f"{llama_server.url}/{endpoint}"
    r = httpx.post(url, content=body, timeout=60) if isinstance(body, bytes) else httpx.post(url, json=body, timeout=60)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == ERROR_KEYS and error["type"] == "invalid_request_error"
    assert (error["param"], error["code"]) == (param, code), error
    assert error["message"] and "\n" not in error["message"] and "Traceback" not in error["message"]


def test_the_other_familys_endpoints_say_which_to_use(gpt2_server, translator_server):
    r = httpx.post(f"{gpt2_server.url}/chat/completions", json={"model": "gpt2", "messages": MESSAGES}, timeout=30)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "no_chat_template")
    with pytest.raises(openai.BadRequestError, match="no chat template"):
        gpt2_server.client().chat.completions.create(model="gpt2", messages=MESSAGES)
    r = httpx.post(f"{translator_server.url}/completions", json={"model": "translator", "prompt": "x"}, timeout=30)
    assert (r.status_code, r.json()["error"]["code"]) == (404, "unsupported_endpoint")
    assert "/v1/translate" in r.json()["error"]["message"]
    for body in ({"text": []}, {"text": [1]}, {"text": "x", "beam": 0}, {"text": "x", "max_new_tokens": 0}):
        r = httpx.post(f"{translator_server.url}/translate", json=body, timeout=30)
        assert r.status_code == 400 and set(r.json()["error"]) == ERROR_KEYS, body


def test_unknown_routes_methods_hosts_and_origins(llama_server):
    url = llama_server.url
    for r, status in (
        (httpx.get(f"{url}/nothing", timeout=30), 404),
        (httpx.get(f"{url}/completions", timeout=30), 405),
        (httpx.get(f"{url}/models", headers={"Host": "evil.example"}, timeout=30), 400),
        (httpx.get(f"{url}/models", headers={"Origin": "http://evil.example"}, timeout=30), 403),
    ):
        assert r.status_code == status and set(r.json()["error"]) == ERROR_KEYS
        assert "access-control-allow-origin" not in r.headers
    assert httpx.get(f"{url}/models", headers={"Host": "LOCALHOST."}, timeout=30).status_code == 200  # as DNS reads it


def test_allowed_hosts_are_answered_on_a_loopback_address_and_only_there(dirs, monkeypatch, capsys):
    """--allowed-host: the name a reverse proxy or a container forwards, answered besides this machine's own."""
    guard = Guard(None, True, None, allowed_hosts=("Proxy.Example.",))
    for host in ("proxy.example", "PROXY.example:8000", "localhost:8000", "[::1]:8000"):
        assert guard.refusal({"host": host}) is None, host
    refused = guard.refusal({"host": "evil.example:8000"})
    assert refused is not None and refused.status == 400 and "--allowed-host NAME" in str(refused)
    assert Guard(None, False, None).refusal({"host": "any.example"}) is None  # off a loopback address: any name
    seen = {}
    monkeypatch.setattr("tformer.serve.serve", lambda *a, **kw: seen.update(kw))
    argv = ["serve", "--model", str(dirs["translator"]), "--port", "0", "--allowed-host", "a.example"]
    assert main([*argv, "--allowed-host", "b.example"]) == 0 and seen["allowed_hosts"] == ("a.example", "b.example")
    assert main([*argv, "--host", "0.0.0.0"]) == 2  # every name is answered there already: said, not ignored
    assert "--allowed-host a.example is for a server on a loopback address" in capsys.readouterr().err


def test_a_body_too_large_is_413(llama_server):
    url = f"{llama_server.url}/completions"
    big = b'{"model": "llama", "prompt": "' + b"x" * MAX_BODY + b'"}'
    r = httpx.post(url, content=big, timeout=30)  # declared: refused before it is read
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"

    def chunks():
        for _ in range(20):
            yield b"x" * (MAX_BODY // 10)

    r = httpx.post(url, content=chunks(), timeout=30)  # chunked: refused as it passes the cap
    assert r.status_code == 413 and set(r.json()["error"]) == ERROR_KEYS
    host, port = url.split("/")[2].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:  # a size declared: refused before the body
        raw.sendall(
            f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {2 * MAX_BODY}\r\n\r\n{{".encode()
        )
        assert raw.recv(100).startswith(b"HTTP/1.1 413 ")


# ------------------------------------------------------------------------------ the queue and its clients


def test_twenty_concurrent_streaming_clients_get_their_whole_answers(llama_server):
    client = llama_server.client()
    asks = [
        {"messages": [{"role": "user", "content": f"Tell me about fox number {i}."}], "seed": i, "temperature": 0.8}
        for i in range(20)
    ]
    expected = []
    for ask in asks:  # one at a time
        answer = client.chat.completions.create(model="llama", max_tokens=12, **ask)
        expected.append((answer.choices[0].message.content, answer.choices[0].finish_reason))
    got: list = [None] * 20
    start = threading.Barrier(20, timeout=60)

    def user(i: int) -> None:
        own = llama_server.client()  # twenty users, twenty clients
        start.wait()
        got[i] = _streamed(own.chat.completions.create(model="llama", max_tokens=12, stream=True, **asks[i]), True)[:2]

    threads = [threading.Thread(target=user, args=(i,), daemon=True) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert got == expected
    assert len({text for text, _ in expected}) > 1  # the prompts and seeds differ, and so do the answers


@pytest.fixture
def fake_work(monkeypatch):
    """/v1/completions answered by a stand-in generation: a token of "x" every 5 ms, ``tokens`` of them (the prompt
    says how many), waiting for ``release`` when the prompt is "wait"; it records what it ran and what was cancelled."""
    record = {"ran": [], "cancelled": [], "release": threading.Event()}

    def slow(served, request, emit):
        record["ran"].append(request.prompt)
        if request.prompt == "wait":
            record["release"].wait(30)
        if request.prompt == "boom":
            raise RuntimeError("boom")
        n = int(request.prompt) if request.prompt.isdigit() else 1
        try:
            for _ in range(n):
                emit("x")
                time.sleep(0.005)
        except Cancelled:
            record["cancelled"].append(request.prompt)
            raise
        return Outcome("x" * n, 1, n, "length")

    monkeypatch.setattr(work, "complete", slow)
    return record


def test_a_client_that_disconnects_stops_its_generation_and_the_queue_moves_on(llama, fake_work):
    with running(llama) as server:
        body = {"model": "llama", "prompt": "4000", "stream": True}  # 20 s of tokens
        with httpx.stream("POST", f"{server.url}/completions", json=body, timeout=30) as r:
            next(r.iter_lines())  # the first event, then the client goes
        deadline = time.monotonic() + 10
        while "4000" not in fake_work["cancelled"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fake_work["cancelled"] == ["4000"]
        answer = server.client().completions.create(model="llama", prompt="3")
        assert answer.choices[0].text == "xxx"
        # a request whose client gives up while it waits is never run
        waiting = threading.Thread(
            target=lambda: server.client().completions.create(model="llama", prompt="wait"), daemon=True
        )
        waiting.start()
        deadline = time.monotonic() + 10  # "wait" running (not job "3" still clearing out: then "5" would run first)
        while fake_work["ran"][-1] != "wait" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fake_work["ran"][-1] == "wait"
        _ask_and_give_up(server, "5")  # waiting behind "wait"
        fake_work["release"].set()
        waiting.join(30)
        assert server.client().completions.create(model="llama", prompt="2").choices[0].text == "xx"
    assert fake_work["ran"] == ["4000", "3", "wait", "2"]
    assert any(line.startswith("POST /v1/completions 200") and "client gone" in line for line in server.log)


def test_the_log_gives_the_rate_of_the_generation_not_of_its_wait_in_the_queue(llama, fake_work):
    with running(llama) as server:
        first = threading.Thread(target=lambda: server.client().completions.create(model="llama", prompt="wait"))
        first.start()
        deadline = time.monotonic() + 10
        while fake_work["ran"][-1:] != ["wait"] and time.monotonic() < deadline:
            time.sleep(0.01)
        behind = threading.Thread(target=lambda: server.client().completions.create(model="llama", prompt="20"))
        behind.start()  # 20 tokens, 5 ms each, after a second in the queue
        time.sleep(1.0)
        fake_work["release"].set()
        first.join(30)
        behind.join(30)
    (line,) = [x for x in server.log if " 20 tokens " in x]
    total, generating, rate = map(
        float, re.fullmatch(r".* 200 ([\d.]+) s \(([\d.]+) s generating\) 20 tokens ([\d.]+) tokens/s", line).groups()
    )
    assert total >= 0.9 and generating < 0.6 and rate == pytest.approx(20 / generating, rel=0.05, abs=0.2), line


def test_a_server_that_stops_ends_every_request_at_once_with_a_503_not_cut_off(llama, fake_work):
    """Ctrl-C or SIGTERM during a long stream: the stream ends on the error event, a request waiting behind it gets a
    503 in OpenAI's shape, both at once (not after uvicorn's graceful wait, cut off)."""
    with running(llama) as server:
        body = {"model": "llama", "prompt": "4000", "stream": True}  # 20 s of tokens
        plain: list = []

        def wait_behind() -> None:
            plain.append(httpx.post(f"{server.url}/completions", json={"model": "llama", "prompt": "2"}, timeout=30))

        with httpx.stream("POST", f"{server.url}/completions", json=body, timeout=30) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            waiting = threading.Thread(target=wait_behind, daemon=True)
            waiting.start()
            deadline = time.monotonic() + 10
            while server.worker.waiting < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server.worker.waiting == 1
            start = time.monotonic()
            server.stop()
            events = [line for line in lines if line.startswith("data: ")]
        waiting.join(30)
        assert time.monotonic() - start < 15  # at once: uvicorn would wait its graceful 30 s here, then cut the stream
    last = json.loads(events[-1][len("data: ") :])
    assert last["error"]["code"] == "server_shutting_down" and set(last["error"]) == ERROR_KEYS
    assert plain[0].status_code == 503 and plain[0].json()["error"]["code"] == "server_shutting_down"
    assert fake_work["ran"] == ["4000"]  # the waiting one never ran


def _ask_and_give_up(server, prompt: str) -> None:
    """A client that asks for ``prompt`` on a raw socket, waits until its request is queued, then goes; returns once
    the server has cancelled the request."""
    host, port = server.url.split("/")[2].split(":")
    body = json.dumps({"model": "llama", "prompt": prompt}).encode()
    before = server.worker.waiting
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        head = f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        raw.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        deadline = time.monotonic() + 10
        while server.worker.waiting == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.worker.waiting == before + 1
        queued = server.worker.jobs.queue[-1]
    deadline = time.monotonic() + 10  # the connection closed: the waiting request is cancelled
    while not queued.cancelled.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queued.cancelled.is_set()


def test_a_client_that_gave_up_leaves_its_place_in_a_full_queue(llama, fake_work):
    """--max-queue counts requests whose clients still wait: one that gave up (a client's timeout, then its retry)
    does not make the next a 503, and is answered at once, not when the worker reaches it."""
    with running(llama, max_queue=1) as server:
        running_one = threading.Thread(
            target=lambda: server.client().completions.create(model="llama", prompt="wait"), daemon=True
        )
        running_one.start()
        deadline = time.monotonic() + 10
        while "wait" not in fake_work["ran"] and time.monotonic() < deadline:
            time.sleep(0.01)
        _ask_and_give_up(server, "5")
        answers: list = []
        asked = threading.Thread(
            target=lambda: answers.append(
                httpx.post(f"{server.url}/completions", json={"model": "llama", "prompt": "2"}, timeout=30)
            ),
            daemon=True,
        )
        asked.start()
        deadline = time.monotonic() + 10
        while not any("client gone" in line for line in server.log) and time.monotonic() < deadline:
            time.sleep(0.01)
        gone_while_busy = "wait" == fake_work["ran"][-1] and not fake_work["release"].is_set()
        fake_work["release"].set()
        asked.join(30)
        running_one.join(30)
    assert answers[0].status_code == 200 and answers[0].json()["choices"][0]["text"] == "xx"
    assert gone_while_busy  # "5" was answered (499) while "wait" still ran
    assert fake_work["ran"] == ["wait", "2"]


def test_a_full_queue_is_503(llama, fake_work):
    with running(llama, max_queue=1) as server:
        answers: list = []
        threads = [
            threading.Thread(
                target=lambda p=p: answers.append(server.client().completions.create(model="llama", prompt=p)),
                daemon=True,
            )
            for p in ("wait", "2")
        ]
        threads[0].start()
        deadline = time.monotonic() + 10
        while "wait" not in fake_work["ran"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fake_work["ran"] == ["wait"]
        threads[1].start()
        while server.worker.waiting < 1 and time.monotonic() < deadline + 10:
            time.sleep(0.01)
        assert server.worker.waiting == 1
        r = httpx.post(f"{server.url}/completions", json={"model": "llama", "prompt": "1"}, timeout=30)
        fake_work["release"].set()
        for t in threads:
            t.join(30)
    assert r.status_code == 503 and r.json()["error"]["code"] == "queue_full" and r.headers["retry-after"] == "1"
    assert r.json()["error"]["type"] == "server_error" and "--max-queue" in r.json()["error"]["message"]
    assert len(answers) == 2


def test_a_bug_is_a_500_in_the_same_shape_with_its_traceback_on_stderr(llama, fake_work, capsys):
    with running(llama) as server:
        r = httpx.post(f"{server.url}/completions", json={"model": "llama", "prompt": "boom"}, timeout=30)
        with pytest.raises(openai.APIError, match="boom"):
            list(server.client().completions.create(model="llama", prompt="boom", stream=True))
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert "a bug in tformer serve (RuntimeError: boom)" in r.json()["error"]["message"]
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: boom" in err


# ------------------------------------------------------------------------------------------------ command


def test_help_says_one_worker_and_a_fifo_queue(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "one worker thread" in out and "in the order they came" in out and "--max-queue" in out
    limits = (
        f"a request body of {MAX_BODY >> 20} MiB, {MAX_STOP} stop strings, {MAX_TEXTS} texts and a beam of {MAX_BEAM}"
    )
    assert limits in out  # the numbers the server holds to


def test_a_non_local_host_without_a_key_warns(dirs, monkeypatch, capsys):
    calls = []

    def serve(*args, sock, **kwargs):
        calls.append(args)
        sock.close()

    monkeypatch.setattr("tformer.serve.serve", serve)
    monkeypatch.delenv("TFORMER_API_KEY", raising=False)
    model = ["serve", "--model", str(dirs["gpt2"]), "--precision", "fp32", "--port", "0"]
    assert main([*model, "--host", "0.0.0.0"]) == 0
    assert "warning: --host 0.0.0.0 without an API key" in capsys.readouterr().err
    assert main([*model, "--host", "0.0.0.0", "--api-key", "k"]) == 0
    monkeypatch.setenv("TFORMER_API_KEY", "from-env")
    assert main([*model, "--host", "0.0.0.0", "--name", "mine"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert [(c[0].name, c[1], c[3]) for c in calls] == [
        ("gpt2", "0.0.0.0", None),
        ("gpt2", "0.0.0.0", "k"),
        ("mine", "0.0.0.0", "from-env"),
    ]


def test_a_bert_is_refused_in_one_line(bert, tmp_path, capsys):
    bert.save_pretrained(tmp_path / "bert")
    assert main(["serve", "--model", str(tmp_path / "bert")]) == 2
    loading, err = capsys.readouterr().err.strip().split("\n")  # the error: one line, after the loading line
    assert loading.startswith("tformer serve: loading ")
    assert err.startswith("tformer serve: error: --model") and "holds a BERT" in err


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])  # Ctrl-C; a service manager's stop
def test_tformer_serve_serves_until_ctrl_c_or_sigterm(dirs, stop):
    proc = subprocess.Popen(
        [sys.executable, "-m", "tformer", "serve", "--model", str(dirs["gpt2"]), "--port", "0", "--precision", "fp32"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "TFORMER_API_KEY": "k"},
    )
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/v1", line)[0]
        assert line.startswith("tformer serve: a GPT (a Hugging Face gpt2 directory), served as model 'gpt2', at http")
        assert "/v1/completions" in line and "API key required" in line
        client = openai.OpenAI(base_url=url, api_key="k", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list().data] == ["gpt2"]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="not-k", max_retries=0, timeout=60).models.list()
        proc.send_signal(stop)
        out, errors = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, errors
    assert out.strip().splitlines()[-1] == "tformer serve: stopped" and "Traceback" not in errors
    assert "GET /v1/models 200" in errors and "GET /v1/models 401" in errors
    assert errors.startswith(f"tformer serve: loading {dirs['gpt2']} ...\n")  # said before the model loads


def test_an_address_that_cannot_be_listened_on_says_which_flag_to_change():
    """A port in use: --port; an address that is not this machine's, or no address at all: --host."""
    taken = listen("127.0.0.1", 0)
    try:
        with pytest.raises(OSError, match=r"Address already in use\): choose another --port"):
            listen("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()
    with pytest.raises(OSError, match=r"give --host an address of this machine"):
        listen("nonsense.invalid", 0)
    with pytest.raises(ValueError, match=r"--host '' is empty"):  # not every interface, unsaid
        listen("", 0)


def test_a_taken_port_is_said_before_the_model_loads_and_a_key_a_header_cannot_carry_is_refused(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv("TFORMER_API_KEY", raising=False)
    taken = listen("127.0.0.1", 0)
    (tmp_path / "empty").mkdir()
    missing = ["serve", "--model", str(tmp_path / "empty")]  # no model: loading it would fail, the port is said first
    try:
        assert main([*missing, "--port", str(taken.getsockname()[1])]) == 1  # an OSError
        assert "choose another --port" in capsys.readouterr().err
    finally:
        taken.close()
    assert main([*missing, "--host", ""]) == 2
    assert "--host '' is empty" in capsys.readouterr().err
    assert main([*missing, "--api-key", "clé"]) == 2
    assert "--api-key has 1 character(s) an Authorization header cannot carry ('é')" in capsys.readouterr().err
    monkeypatch.setenv("TFORMER_API_KEY", "two words")
    assert main([*missing, "--port", "0"]) == 2
    assert "$TFORMER_API_KEY has 1 character(s)" in capsys.readouterr().err


def test_an_empty_model_name_is_refused_not_replaced(tmp_path, capsys):
    """--name '' would fall back to the directory's name in silence: refused, as an empty value is everywhere."""
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", str(tmp_path), "--name", ""])
    assert exit_.value.code == 2 and "argument --name: must be a non-empty string, got ''" in capsys.readouterr().err


def test_characters_a_character_model_lacks_are_said_in_the_log_not_read_as_unk_in_silence(tmp_path):
    """As tformer generate says it on stderr: a prompt a character model cannot spell is answered, and its log line
    names the characters read as <unk>."""
    from tformer import GPT, GPTConfig

    tok = train_tokenizer("char", ["First Citizen: speak, speak."])
    GPT(GPTConfig.preset("tiny", vocab_size=tok.vocab_size)).save_pretrained(tmp_path / "char" / "best")
    tok.save(tmp_path / "char" / "best")
    with running(Served.open(tmp_path / "char" / "best", precision="fp32")) as server:  # a run's best/: the run's name
        client = server.client()
        client.completions.create(model="char", prompt="First €€ ¥", max_tokens=2)
        client.completions.create(model="char", prompt="First", max_tokens=2)
    unknown = [line for line in server.log if "lacks" in line]
    assert unknown == [next(line for line in server.log if line.startswith("POST /v1/completions 200"))] and unknown[
        0
    ].endswith("the prompt has 2 character(s) the vocabulary lacks (€ ¥): each read as <unk>")
