"""``tformer explore``'s server side: time from request to answer for each API call the page makes.

    python -m benchmarks.explore            # the toy and a 6-layer GPT at 32 and 256 tokens; a few minutes on 2 cores
    python -m benchmarks.explore --quick    # 16 tokens, one round: proves the script works (seconds)

Each call goes through the real app (``tformer.explore.server.create_app``, Starlette's in-process TestClient:
routing, the Host check, JSON in and out), one process, no socket. Calls:

* ``trace`` — a fresh trace (the session's LRU is emptied first): the forward pass with every tensor recorded,
  and the list of steps the page draws (no values);
* ``tensor`` — one attention-weights tensor of that trace, one head (what clicking a heatmap asks), and the
  whole logits tensor (the biggest answer of a GPT trace);
* ``decode`` — greedy decoding (GPT: 20 new tokens; the toy: its 4), each token with its top-10;
* ``sample`` — 20 sampled tokens with the distributions before and after the filters.

Models: the notes' toy (d_model 4, its own sentence of 4 tokens) and a GPT with 6 layers, d_model 256, 4 heads,
random weights, a character vocabulary, prompts of 32 and 256 tokens. The browser side (page drawn) is timed
by the page's own benchmark. Writes ``OUT/explore.json`` and ``OUT/explore.md``: median milliseconds per call.
"""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path

import torch

from benchmarks.common import Candidate, base_parser, compare, machine_info, session

PORT = 8765
GPT_6 = dict(d_model=256, n_heads=4, n_layers=6, d_ff=1024, max_len=320)
QUICK_GPT = dict(d_model=32, n_heads=4, n_layers=6, d_ff=64, max_len=64)


def _gpt_dir(root: Path, shape: dict) -> Path:
    from tformer import GPT, GPTConfig
    from tformer.lm import CharTokenizer

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
    p = base_parser(__doc__, "runs/bench")
    p.set_defaults(repeats=5, warmup=1)
    args = p.parse_args(argv)
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
    out.mkdir(parents=True, exist_ok=True)
    (out / "explore.json").write_text(json.dumps(payload, indent=2))
    lines = ["| model, input | call | median ms | min–max ms |", "|---|---|---:|---:|"]
    for group, stats in payload["results"].items():
        for name, st in stats.items():
            lines.append(
                f"| {group} | {name} | {1e3 / st['median']:.1f} | {1e3 / st['max']:.1f}–{1e3 / st['min']:.1f} |"
            )
    m = payload["machine"]
    text = f"# explore\n\n{payload['description']}\n\nMachine: {m['cpu_count']} CPUs, torch {m['torch']}.\n\n"
    (out / "explore.md").write_text(text + "\n".join(lines) + "\n")
    print(text + "\n".join(lines))
    return payload


if __name__ == "__main__":
    main()
