"""``tformer explore``'s server side: time from request to answer for each API call the page makes.

    python -m benchmarks.explore            # the toy and a 6-layer GPT at 32 and 256 tokens; a few minutes on 2 cores
    python -m benchmarks.explore --quick    # 16 tokens, one round: proves the script works (seconds)
    python -m benchmarks.explore --browser  # the same models in headless chromium: page drawn, per-view updates

Each call goes through the real app (``tformer.explore.server.create_app``, Starlette's in-process TestClient:
routing, the Host check, JSON in and out), one process, no socket. Calls:

* ``trace`` — a fresh trace (the session's LRU is emptied first): the forward pass with every tensor recorded,
  and the list of steps the page draws (no values);
* ``tensor`` — one attention-weights tensor of that trace, one head (what clicking a heatmap asks), and the
  whole logits tensor (the biggest answer of a GPT trace);
* ``decode`` — greedy decoding (GPT: 20 new tokens; the toy: its 4), each token with its top-10;
* ``sample`` — 20 sampled tokens with the distributions before and after the filters.

Models: the notes' toy (d_model 4, its own sentence of 4 tokens) and a GPT with 6 layers, d_model 256, 4 heads,
random weights, a character vocabulary, prompts of 32 and 256 tokens. Writes ``OUT/explore.json`` and
``OUT/explore.md``: median milliseconds per call.

``--browser``: the real server (uvicorn, in a thread of this process) and the page in headless Debian chromium
(Selenium + ``/usr/bin/chromium`` + ``/usr/bin/chromedriver``; ``TFORMER_CHROMIUM`` / ``TFORMER_CHROMEDRIVER``
override them). Each page load starts with the server's traces forgotten (a cold trace). Timed in the page
(``performance.now()``, polled every millisecond, until the DOM holds the result; the canvas is drawn by then):

* ``page drawn`` — from navigation start to the forward view drawn: the first ``[data-testid=step]`` and the
  heatmap canvas of the step the page opens by itself (info, trace, one tensor, its mask);
* ``click a step → its table`` — for a scores step (one head shown), an ``ffn_hidden`` step and the logits
  (a step not opened before in that page: the tensor is fetched, the heatmap and the table drawn);
* ``decode: greedy (request + draw)`` — the Decode button until the step controls are drawn; ``decode: next``
  — one step forward (drawn from the answer already there);
* ``sample: 20 tokens (request + draw)`` and ``sample: next`` (GPT only), the same way.

Writes ``OUT/explore-browser.json`` and ``OUT/explore-browser.md``: median (min–max) milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import string
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import Candidate, base_parser, compare, machine_info, session, write_text

PORT = 8765
GPT_6 = dict(d_model=256, n_heads=4, n_layers=6, d_ff=1024, max_len=320)
QUICK_GPT = dict(d_model=32, n_heads=4, n_layers=6, d_ff=64, max_len=64)


def _gpt_dir(root: Path, shape: dict) -> Path:
    from tformer import GPT, GPTConfig
    from tformer.tokenizers import CharTokenizer

    tok = CharTokenizer.train([string.ascii_letters + string.punctuation + " "])
    GPT(GPTConfig(vocab_size=tok.vocab_size, dropout=0.0, **shape)).save_pretrained(root / "gpt6")
    tok.save(root / "gpt6")
    return root / "gpt6"


def _client(s):
    from starlette.testclient import TestClient

    from tformer.explore.server import create_app

    return TestClient(create_app(s, "127.0.0.1", PORT), base_url=f"http://127.0.0.1:{PORT}")


def _candidates(s, text: str) -> list[Candidate]:
    client = _client(s)

    def post(name: str, **params) -> dict:
        r = client.post(f"/api/{name}", json=params)
        if r.status_code != 200:
            raise RuntimeError(f"{name}: {r.status_code} {r.text}")
        return r.json()

    answer = post("trace", text=text)
    weights = next(st["id"] for st in answer["steps"] if st["stage"] == "weights")
    logits = next(st["id"] for st in answer["steps"] if st["stage"] == "logits")

    def trace() -> float:
        s._traces.clear()  # a cold trace, computed again
        post("trace", text=text)
        return 1.0

    def tensor(id_: int, **extra):
        return lambda: float(bool(post("tensor", trace_id=answer["trace_id"], id=id_, **extra)))

    out = [
        Candidate("trace", trace),
        Candidate("tensor: attention weights, one head", tensor(weights, head=0)),
        Candidate("tensor: logits", tensor(logits)),
    ]
    decode = dict(text=text, **({"max_len": 20} if s.m.family == "gpt" else {}))  # the toy stops after 4
    out.append(
        Candidate(
            "decode: greedy" + ", 20 tokens" * ("max_len" in decode), lambda: float(bool(post("decode", **decode)))
        )
    )
    if s.m.family == "gpt":
        sample = dict(text=text, temperature=0.8, top_k=50, top_p=0.95, seed=0, steps=20)
        out.append(Candidate("sample: 20 tokens", lambda: float(bool(post("sample", **sample)))))
    return out


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench", "explore.json", "explore.md", "explore-browser.json", "explore-browser.md")
    p.add_argument("--browser", action="store_true", help="time the page in headless chromium instead of the API")
    p.set_defaults(repeats=5, warmup=1)
    args = p.parse_args(argv)
    if args.browser:
        return _browser_main(args)
    from tformer.explore import Session

    results: dict[str, dict] = {}
    with session(args), tempfile.TemporaryDirectory() as tmp:
        toy = Session.open(None)
        results["toy, 4 tokens"] = compare(_candidates(toy, "I am good."), args.repeats, args.warmup, memory=False)
        gpt = Session.open(_gpt_dir(Path(tmp), QUICK_GPT if args.quick else GPT_6))
        letters = (string.ascii_lowercase + " ") * 20
        for n in [16] if args.quick else [32, 256]:
            group = f"GPT 6 layers, {n} tokens"
            results[group] = compare(_candidates(gpt, letters[:n]), args.repeats, args.warmup, memory=False)
        machine = machine_info(args, None)
    payload = {
        "benchmark": "explore",
        "description": "tformer explore: milliseconds from request to answer per API call (in-process, no socket)",
        "machine": machine,
        "config": {"gpt": QUICK_GPT if args.quick else GPT_6, "torch_threads": torch.get_num_threads()},
        "results": results,
    }
    return _write(Path(args.out), payload)


def _write(out: Path, payload: dict) -> dict:
    write_text(out, "explore.json", json.dumps(payload, indent=2))
    lines = ["| model, input | call | median ms | min–max ms |", "|---|---|---:|---:|"]
    for group, stats in payload["results"].items():
        for name, st in stats.items():
            lines.append(
                f"| {group} | {name} | {1e3 / st['median']:.1f} | {1e3 / st['max']:.1f}–{1e3 / st['min']:.1f} |"
            )
    m = payload["machine"]
    text = f"# explore\n\n{payload['description']}\n\nMachine: {m['cpu_count']} CPUs, torch {m['torch']}.\n\n"
    write_text(out, "explore.md", text + "\n".join(lines) + "\n")
    print(text + "\n".join(lines))
    return payload


# ------------------------------------------------------------------------------------------------ browser

CHROMIUM = os.environ.get("TFORMER_CHROMIUM") or "/usr/bin/chromium"
CHROMEDRIVER = os.environ.get("TFORMER_CHROMEDRIVER") or "/usr/bin/chromedriver"
TIMEOUT_S = 120

# In the page: click `click` (a CSS selector; none: just wait), then poll every millisecond until `wait` (a CSS
# selector) matches, with `text` as its text content when given; answer the milliseconds, or the page's error.
_TIMED = """
const [click, wait, text, done] = arguments;
const t0 = performance.now();
if (click) document.querySelector(click).click();
(function poll() {
  const error = document.querySelector("[data-testid=error]");
  if (error && !error.hidden && error.textContent.trim()) return done({error: error.textContent.trim()});
  const hit = document.querySelector(wait);
  if (hit && (text === null || hit.textContent.trim() === text)) return done({ms: performance.now() - t0});
  setTimeout(poll, 1);
})();
"""
# After a navigation: milliseconds since navigation start when the forward view is drawn.
_DRAWN = """
const done = arguments[arguments.length - 1];
(function poll() {
  const error = document.querySelector("[data-testid=error]");
  if (error && !error.hidden && error.textContent.trim()) return done({error: error.textContent.trim()});
  if (document.querySelector("[data-testid=step]") && document.querySelector("#step-detail canvas.heatmap"))
    return done({ms: performance.now()});
  setTimeout(poll, 1);
})();
"""


@contextlib.contextmanager
def _served(s):
    """``s`` (a Session) under uvicorn on a free port, in a thread: the page's real server."""
    import socket
    import threading

    import uvicorn

    from tformer.explore.server import create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(s, "127.0.0.1", port), log_level="warning", access_log=False, lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextlib.contextmanager
def _chromium():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).is_file():
            raise SystemExit(
                f"benchmarks.explore --browser: {path} not found (apt-get install chromium chromium-driver)"
            )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--window-size=1400,1000", "--proxy-server=127.0.0.1:9"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_script_timeout(TIMEOUT_S)
    try:
        yield driver
    finally:
        driver.quit()


def _ms(driver, script: str, *args) -> float:
    answer = driver.execute_async_script(script, *args)
    if "error" in answer:
        raise RuntimeError(f"the page shows an error: {answer['error']}")
    return float(answer["ms"])


def _browser_rounds(driver, url: str, s, loads: int, warmup: int, clicks: int) -> dict[str, list[float]]:
    """``warmup + loads`` page loads of ``url``; per load, the page drawn and each view's updates."""
    times: dict[str, list[float]] = {}

    def keep(name: str, ms: float, load: int) -> None:
        if load >= warmup:
            times.setdefault(name, []).append(ms)

    for load in range(warmup + loads):
        s._traces.clear()  # a cold trace: computed again for this page
        driver.get(url)
        keep("page drawn (navigation → forward view with its heatmap)", _ms(driver, _DRAWN), load)
        steps = driver.execute_script("return window.explore.state.trace.steps")
        shown = driver.execute_script("return window.explore.state.stepId")
        for stage, label in (("scores", "scores"), ("ffn_hidden", "ffn_hidden"), ("logits", "logits")):
            picks = [st["id"] for st in steps if st["stage"] == stage and st["id"] != shown]
            if not picks:
                continue
            step_id = picks[load % len(picks)]  # another layer each load
            click = f'[data-testid=step][data-step-id="{step_id}"]'
            ms = _ms(driver, _TIMED, click, "#step-detail [data-testid=tensor-table]", None)
            keep(f"click a step → its table: {label}", ms, load)
        for view, testid, label in (("decode", "decode", "decode: greedy"), ("sample", "sample", "sample: 20 tokens")):
            if view == "decode" and s.m.family not in ("seq2seq", "gpt") or view == "sample" and s.m.family != "gpt":
                continue
            tab, nxt = f"#tabs button[data-view={view}]", f"[data-testid={testid}-next]"
            keep(f"{label}: open the tab (request + draw)", _ms(driver, _TIMED, tab, nxt, None), load)
            at = len(driver.find_elements("css selector", f"[data-testid={testid}-token]"))
            for k in range(at + 1, at + 1 + clicks):
                if not driver.find_element("css selector", nxt).is_enabled():
                    break
                token = f"#view-{view} .chips [data-testid={testid}-token]:nth-child({k})"
                keep(f"{view}: next step (draw)", _ms(driver, _TIMED, nxt, token, None), load)
    return times


def _browser_main(args) -> dict:
    """``--browser``: the toy and the 6-layer GPT at 32 and 256 tokens, timed in headless chromium."""
    from tformer.explore import Session

    loads, warmup, clicks = (1, 0, 2) if args.quick else (args.repeats, args.warmup, 5)
    results: dict[str, dict] = {}
    with session(args), tempfile.TemporaryDirectory() as tmp, _chromium() as driver:
        toy = Session.open(None)
        groups = [("toy, 4 tokens", toy, None)]
        gpt = Session.open(_gpt_dir(Path(tmp), QUICK_GPT if args.quick else GPT_6))
        letters = (string.ascii_lowercase + " ") * 20
        groups += [(f"GPT 6 layers, {n} tokens", gpt, letters[:n]) for n in ([16] if args.quick else [32, 256])]
        for group, s, text in groups:
            if text is not None:
                s.m.default_text = text  # the page traces info.default_text first
            with _served(s) as url:
                started = time.perf_counter()
                times = _browser_rounds(driver, url, s, loads, warmup, clicks)
                print(f"{group}: {time.perf_counter() - started:.1f} s", flush=True)
            results[group] = {
                name: dict(median=statistics.median(v), min=min(v), max=max(v), n=len(v)) for name, v in times.items()
            }
        machine = machine_info(args, None)
    version = _chromium_version()
    payload = {
        "benchmark": "explore-browser",
        "description": "tformer explore in headless chromium: milliseconds to the page drawn and per view update",
        "machine": {**machine, "chromium": version},
        "config": {"gpt": QUICK_GPT if args.quick else GPT_6, "loads": loads, "warmup_loads": warmup},
        "results": results,
    }
    out = Path(args.out)
    write_text(out, "explore-browser.json", json.dumps(payload, indent=2))
    lines = ["| model, input | what | median ms | min–max ms | n |", "|---|---|---:|---:|---:|"]
    for group, stats in results.items():
        for name, st in stats.items():
            lines.append(f"| {group} | {name} | {st['median']:.0f} | {st['min']:.0f}–{st['max']:.0f} | {st['n']} |")
    text = f"# explore (browser)\n\n{payload['description']}\n\nMachine: {machine['cpu_count']} CPUs, {version}.\n\n"
    write_text(out, "explore-browser.md", text + "\n".join(lines) + "\n")
    print(text + "\n".join(lines))
    return payload


def _chromium_version() -> str:
    import subprocess

    try:
        return subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return "chromium"


if __name__ == "__main__":
    main()
