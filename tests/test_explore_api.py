"""tformer explore's API: every number it sends is the model's own (the trace, greedy/beam decoding, sampling,
fill-mask), for the toy, a translation model, a GPT, a BERT and a Hugging Face GPT-2 converted with from_hf;
the beam_search hook only watches; Host/Origin/size checks; the export; the command's start and Ctrl-C."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch
from starlette.testclient import TestClient

from tformer import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer
from tformer.bert import fill_mask
from tformer.cli import main
from tformer.explore import Session
from tformer.explore.export import export_html, request_key
from tformer.explore.server import create_app
from tformer.generation import beam_search, generate_lm, translate_ids
from tformer.inspection import trace
from tformer.tokenizers import ByteBPETokenizer, CharTokenizer, train_tokenizer
from tformer.tokens import LM_EOT, TRANSLATION_EOS, TRANSLATION_SOS
from tformer.translation import Translator

PORT = 8765
BASE = f"http://127.0.0.1:{PORT}"
TEXT = "To be, or not to be, that is the question."
SENTENCES = ["the cat sat on the mat.", "the dog ate a bone.", "a bird sang in the tree.", "I am good."]
PAIRS = [("I am good.", "Je vais bien."), ("the cat sat.", "le chat est assis."), ("a dog.", "un chien.")]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ------------------------------------------------------------------------------------ small model directories


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """Random tiny models of each family saved with their tokenizers (equality needs no training)."""
    root = tmp_path_factory.mktemp("explore")
    torch.manual_seed(0)
    src, tgt = (
        train_tokenizer("bpe", [p[0] for p in PAIRS] * 3, 80, 1),
        train_tokenizer("bpe", [p[1] for p in PAIRS] * 3, 80, 1),
    )
    config = Seq2SeqConfig.preset(
        "tiny", src_vocab_size=src.vocab_size, tgt_vocab_size=tgt.vocab_size, dropout=0.0, max_len=24
    )
    Translator(Seq2SeqTransformer(config).eval(), src, tgt).save(root / "seq2seq")
    char = CharTokenizer.train([TEXT])
    GPT(GPTConfig.preset("tiny", vocab_size=char.vocab_size, dropout=0.0, max_len=64)).save_pretrained(root / "gpt")
    char.save(root / "gpt")
    gemma_like = dict(  # today's decoder options: the page must show their steps too
        norm="rmsnorm",
        norm_weight_offset=1.0,
        ffn="geglu",
        n_kv_heads=2,
        qk_norm=True,
        positional="rope",
        sandwich_norm=True,
        sliding_window=4,
        sliding_window_pattern=2,
        bias=False,
    )
    GPT(GPTConfig.preset("tiny", vocab_size=char.vocab_size, dropout=0.0, max_len=64, **gemma_like)).save_pretrained(
        root / "gemma_like"
    )
    char.save(root / "gemma_like")
    pythia_like = dict(positional="rope", parallel_residual=True, rope_dim=8, activation="gelu")  # GPT-NeoX's block
    GPT(GPTConfig.preset("tiny", vocab_size=char.vocab_size, dropout=0.0, max_len=64, **pythia_like)).save_pretrained(
        root / "pythia_like"
    )
    char.save(root / "pythia_like")
    wp = train_tokenizer("wordpiece", SENTENCES * 3, vocab_size=120, min_frequency=1)
    Bert(BertConfig.preset("tiny", vocab_size=wp.vocab_size, dropout=0.0, max_len=32)).save_pretrained(root / "bert")
    wp.save(root / "bert")
    import transformers  # a dev dependency: no skip that would hide the other families too

    from tformer.hf import from_hf

    bpe = ByteBPETokenizer.train([TEXT * 3], vocab_size=280)
    hf_config = transformers.GPT2Config(
        vocab_size=bpe.vocab_size, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=2, eos_token_id=2
    )
    hf = transformers.GPT2LMHeadModel(hf_config).eval()
    with torch.no_grad():  # HF zero-inits biases and sets LayerNorms to 1/0: randomise so every weight matters
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    from_hf(hf).save_pretrained(root / "hf_gpt2")
    bpe.save(root / "hf_gpt2")
    return root


SESSIONS: dict = {}


def _session(name, dirs=None):
    """One Session per model for the whole module (the toy trains for a second; the others load)."""
    if name not in SESSIONS:
        SESSIONS[name] = Session.open(None if name == "toy" else dirs / name)
    return SESSIONS[name]


def _client(session):
    return TestClient(create_app(session, "127.0.0.1", PORT), base_url=BASE)


@pytest.fixture(params=["toy", "seq2seq", "gpt", "bert", "hf_gpt2"])
def served(request, dirs):
    session = _session(request.param, dirs)
    return _client(session), session


def _post(client, name, **params):
    r = client.post(f"/api/{name}", json=params)
    assert r.status_code == 200, r.text
    return r.json()


def _array(values) -> np.ndarray:
    return np.array(values, dtype=np.float64)  # "-inf" strings parse as -inf


def _inputs(session, text):
    """The family's own encoding of ``text``, and ``tformer.inspection.trace``'s arguments for it."""
    m = session.m
    if m.family == "seq2seq":
        target = "Je vais bien" if m.source == "toy" else "le chat"
        if m.source == "toy":
            src = [m.src.vocab.index(w) for w in ["I", "am", "good", "."]]
            tgt = [m.tgt.vocab.index(w) for w in ["Je", "vais", "bien"]]
        else:
            tr = Translator.load(m.source)
            src, tgt = tr.encode_sources([text])[0].tolist(), tr.tgt_tokenizer.encode(target)
        return {"text": text, "target": target}, (src, [TRANSLATION_SOS] + tgt)
    if m.family == "gpt":
        return {"text": text}, (m.tgt.tokenizer.encode(text),)
    wp = m.tgt.tokenizer
    ids, types = wp.pair(wp.encode(text), wp.encode("a bird sang."), m.config.max_len)
    return {"text": text, "text_b": "a bird sang."}, (ids, [wp.id_to_token(i) for i in ids], types)


# ----------------------------------------------------------------------------------------------- the trace


def test_every_number_of_the_trace_is_the_models_own(served):
    client, session = served
    text = "the cat sat on the [MASK]." if session.m.family == "bert" else "I am good."
    params, args = _inputs(session, text)
    answer = _post(client, "trace", **params)
    model = session.m.model
    expected = trace(model, *args)  # (src, tgt) | (ids,) | (ids, tokens, token_type_ids)
    steps = [s for s in answer["steps"] if s["stage"] not in ("ffn_hidden", "ffn_activation")]
    assert [(s["stage"], s["where"]) for s in steps] == [(e.stage, e.where) for e in expected.entries]
    for step, entry in zip(steps, expected.entries):
        got = _post(client, "tensor", trace_id=answer["trace_id"], id=step["id"])
        want = entry.tensor[0] if entry.dims[0] == "B" else entry.tensor
        assert got["shape"] == list(want.shape) and step["shape"] == list(entry.tensor.shape)
        np.testing.assert_allclose(_array(got["values"]), want.double().numpy(), rtol=1e-5, atol=1e-30)
        assert step["formula"] and got["dims"] == list(entry.dims[1:] if entry.dims[0] == "B" else entry.dims)
    # Q·Kᵀ is a step of its own, just before the scaled scores: the page shows the product and then / √d_k
    qk = next(s for s in answer["steps"] if s["stage"] == "qk")
    q, k, product, scores = (
        _array(_post(client, "tensor", trace_id=answer["trace_id"], id=qk["id"] + d)["values"]) for d in (-3, -2, 0, 1)
    )
    assert [answer["steps"][qk["id"] + d]["stage"] for d in (-3, -2, 1)] == ["q", "k", "scores"]
    assert qk["dims"] == ["B", "H", "Tq", "Tk"] and qk["formula"].startswith("Q·Kᵀ")
    np.testing.assert_allclose(product, q @ k.swapaxes(-1, -2), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(scores, product / np.sqrt(q.shape[-1]), rtol=1e-5, atol=1e-6)
    weights = next(s for s in answer["steps"] if s["stage"] == "weights")
    head = _post(client, "tensor", trace_id=answer["trace_id"], id=weights["id"], head=1)
    want = expected.get("weights", weights["block"], weights["layer"], weights["kind"]).tensor[0, 1]
    np.testing.assert_allclose(_array(head["values"]), want.double().numpy(), rtol=1e-5, atol=1e-30)
    top, want_top = answer["top_k"][-1]["candidates"], expected.top_k[-1]["candidates"]
    assert [c[1] for c in top] == [c[1] for c in want_top] and top[0][2] == pytest.approx(want_top[0][2])
    # the feed-forward inside: activation(W₁ output) is W₂'s input, and W₂ of it is the FFN's output
    ffn = [s for s in answer["steps"] if s["stage"].startswith("ffn")][:3]
    assert [s["stage"] for s in ffn] == ["ffn_hidden", "ffn_activation", "ffn"]
    hidden, act, out = (_array(_post(client, "tensor", trace_id=answer["trace_id"], id=s["id"])["values"]) for s in ffn)
    module = model.get_submodule(ffn[2]["where"])
    np.testing.assert_allclose(act, module.activation(torch.tensor(hidden)).numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        out, module.linear2(torch.tensor(act).float()).detach().double().numpy(), rtol=1e-4, atol=1e-4
    )


def test_a_gated_feed_forward_shows_gate_up_and_their_product(dirs):
    """SwiGLU/GeGLU on the page: gate, up, act(gate) ⊙ up (W_down's input), then W_down of it is the FFN's output;
    the sandwich norms' formula says a norm comes before and after; every traced number is the model's own."""
    session = _session("gemma_like", dirs)
    client, model = _client(session), session.m.model
    answer = _post(client, "trace", text="I am good.")
    expected = trace(model, session.m.tgt.tokenizer.encode("I am good."))
    steps = [s for s in answer["steps"] if s["stage"] != "ffn_gated"]
    assert [(s["stage"], s["where"]) for s in steps] == [(e.stage, e.where) for e in expected.entries]
    ffn = [s for s in answer["steps"] if s["stage"].startswith("ffn")][:4]
    assert [s["stage"] for s in ffn] == ["ffn_gate", "ffn_up", "ffn_gated", "ffn"]
    gate, up, gated, out = (
        torch.tensor(_array(_post(client, "tensor", trace_id=answer["trace_id"], id=s["id"])["values"])).float()
        for s in ffn
    )
    module = model.get_submodule(ffn[3]["where"])
    assert torch.allclose(gated, module.activation(gate) * up, rtol=1e-4, atol=1e-5)
    assert torch.allclose(out, module.down_proj(gated).detach(), rtol=1e-4, atol=1e-4)
    assert ffn[2]["formula"].startswith("h = GELU(gate) ⊙ up") and "GELU" in ffn[0]["formula"]
    norms = [s["formula"] for s in answer["steps"] if s["stage"] == "add_norm"]
    assert norms and all("a norm before and after" in f for f in norms)


def test_a_parallel_residual_and_a_partial_rotary_say_so_on_the_page(dirs):
    """Pythia's block: the second add & norm's feed-forward reads the layer's input (not add_norm1's sum), and RoPE
    turns the first rope_dim dims of each head; the page's formulas say both, and its numbers are the model's."""
    session = _session("pythia_like", dirs)
    client, model = _client(session), session.m.model
    answer = _post(client, "trace", text="I am good.")
    expected = trace(model, session.m.tgt.tokenizer.encode("I am good."))
    steps = [s for s in answer["steps"] if s["stage"] not in ("ffn_hidden", "ffn_activation")]
    assert [(s["stage"], s["where"]) for s in steps] == [(e.stage, e.where) for e in expected.entries]
    norms = [s for s in answer["steps"] if s["stage"] == "add_norm"]
    assert [s["formula"].endswith("(parallel residual)") for s in norms] == [False, True] * model.config.n_layers
    q = next(s for s in answer["steps"] if s["stage"] == "q")
    assert "its first 8 of 16 dims rotated by RoPE" in q["formula"], q["formula"]
    second = norms[1]  # layer 0's output: x + attn(norm1(x)) + ff(norm3(x)), x the layer's input
    got = torch.tensor(_array(_post(client, "tensor", trace_id=answer["trace_id"], id=second["id"])["values"]))
    layer_out = [e for e in expected.entries if e.stage == "add_norm" and e.layer == 0][1].tensor[0]
    assert torch.allclose(got.float(), layer_out, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------------ decoding


def test_greedy_decode_is_the_familys_own_greedy(served):
    client, session = served
    m = session.m
    if m.family == "bert":
        r = client.post("/api/decode", json={"text": "a"})
        assert r.status_code == 400 and "seq2seq or gpt" in r.json()["error"]
        return
    text = "I am good." if m.family == "seq2seq" else "To be"
    answer = _post(client, "decode", text=text, mode="greedy")
    ids = [s["id"] for s in answer["steps"]]
    assert [s["cache_len"] for s in answer["steps"]] == [len(s["input"]) for s in answer["steps"]]
    assert all(a["cache_len"] < b["cache_len"] for a, b in zip(answer["steps"], answer["steps"][1:]))
    if m.source == "toy":
        src = torch.tensor([[m.src.vocab.index(w) for w in ["I", "am", "good", "."]]])
        assert ids == translate_ids(m.model, src, TRANSLATION_SOS, TRANSLATION_EOS, 15)[0] + [TRANSLATION_EOS]
        assert answer["output"] == "Je vais bien"
    elif m.family == "seq2seq":
        tr = Translator.load(m.source)
        assert answer["output"] == tr.translate([text])[0]
    else:
        prompt = m.tgt.tokenizer.encode(text)
        assert ids == generate_lm(m.model, [prompt], 20, eos_id=LM_EOT)[0]
        assert answer["output"] == m.tgt.tokenizer.decode([i for i in ids if i != LM_EOT])
    reference = "Je vais bien" if m.source == "toy" else ("le chat" if m.family == "seq2seq" else " or not")
    forced = _post(client, "decode", text=text, reference=reference)["teacher_forced"]
    assert all(0 <= f["prob_expected"] <= f["prob_predicted"] <= 1 for f in forced)
    if m.source == "toy":
        assert [f["expected"] for f in forced] == ["Je", "vais", "bien", "<eos>"]


def test_a_hugging_face_llama_directory_opens_with_its_own_tokenizer_and_eos(tmp_path):
    """A downloaded-style directory (config.json, safetensors, tokenizer.json; no tformer files): the page traces
    the model's own numbers, and greedy decoding stops at the directory's EOS as `tformer generate` does."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from tformer import lm

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator([TEXT] * 20, trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=0,
        eos_token_id=1,
    )
    hf = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # make the EOS likely, so that the greedy steps do stop at it
        hf.lm_head.weight[1] = hf.model.norm.weight * 0.0 + 3.0
    hf.save_pretrained(tmp_path)
    fast.save_pretrained(tmp_path)
    session = Session.open(tmp_path)
    client, model = _client(session), session.m.model
    assert session.m.family == "gpt" and model.config.n_kv_heads == 2
    answer = _post(client, "trace", text="To be")
    ids = lm.load(tmp_path)[1].encode("To be")
    expected = trace(model, ids)
    steps = [s for s in answer["steps"] if s["stage"] != "ffn_gated"]  # (the page's own look inside SwiGLU)
    assert [(s["stage"], s["where"]) for s in steps] == [(e.stage, e.where) for e in expected.entries]
    step = next(s for s in answer["steps"] if s["stage"] == "logits")
    logits = _post(client, "tensor", trace_id=answer["trace_id"], id=step["id"])
    np.testing.assert_allclose(_array(logits["values"]), hf(torch.tensor([ids])).logits[0].detach().double(), atol=1e-4)
    steps = _post(client, "decode", text="To be", mode="greedy")["steps"]
    assert [s["id"] for s in steps] == generate_lm(model, [ids], 20, eos_id=1)[0] and steps[-1]["id"] == 1


@pytest.mark.parametrize("k", [1, 3])
def test_beam_tree_and_output_are_beam_searchs(dirs, k):
    for name in ("toy", "seq2seq"):
        session = _session(name, dirs)
        client = _client(session)
        answer = _post(client, "decode", text="I am good.", mode="beam", beam_size=k, length_penalty=0.6)
        if name == "toy":
            src = torch.tensor([[4, 5, 6, 7]])
            best = beam_search(session.m.model, src, TRANSLATION_SOS, TRANSLATION_EOS, k, 15, 0.6)[0]
            assert answer["output"] == "Je vais bien"
        else:
            tr = Translator.load(session.m.source)
            best = beam_search(
                tr.model, tr.encode_sources(["I am good."]), TRANSLATION_SOS, TRANSLATION_EOS, k, 23, 0.6
            )[0]
            assert answer["output"] == tr.translate(["I am good."], beam=k, length_penalty=0.6)[0]
        assert answer["best"] == [session.m.tgt.vocab[i] for i in best]
        nodes = answer["nodes"]
        assert all(n["parent"] is None or n["parent"] < n["id"] for n in nodes)
        for step in answer["steps"]:
            assert 1 <= len(step["alive"]) + len(step["finished"]) and len(step["alive"]) <= k
            assert all(nodes[i]["status"] == "alive" and nodes[i]["step"] == step["step"] for i in step["alive"])
        chosen = nodes[answer["best_node"]]
        assert chosen["status"] == "finished"
        assert chosen["score"] == max(nodes[i]["score"] for s in answer["steps"] for i in s["finished"])


def test_beam_search_hook_only_watches(seq2seq):
    """on_step sees every step of every source; the result is the same with and without it."""
    src = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]])
    plain = beam_search(seq2seq, src, 2, 3, beam_size=3, max_len=12, length_penalty=0.7)
    seen = []
    watched = beam_search(
        seq2seq, src, 2, 3, beam_size=3, max_len=12, length_penalty=0.7, on_step=lambda *a: seen.append(a)
    )
    assert watched == plain
    assert {source for _, source, _ in seen} == {0, 1}
    for step, _, candidates in seen:
        alive = [c for c in candidates if c.status == "alive"]
        assert len(alive) <= 3 and sorted(c.slot for c in alive) == list(range(len(alive)))
        assert all(c.score is not None for c in candidates if c.status == "finished")
        assert [c.logp for c in candidates] == sorted((c.logp for c in candidates), reverse=True)
        assert all(c.beam == 0 for c in candidates) or step > 1


# ---------------------------------------------------------------------------------------- GPT and BERT


def test_sample_with_a_seed_is_tformer_generate_seed(dirs, capsys):
    session = _session("gpt", dirs)
    client = _client(session)
    answer = _post(client, "sample", text="To be", temperature=0.9, top_k=5, top_p=0.9, seed=7, steps=12)
    flags = ["--prompt", "To be", "--max-new-tokens", "12", "--temperature", "0.9", "--top-k", "5", "--top-p", "0.9"]
    assert main(["generate", "--model", str(dirs / "gpt"), *flags, "--seed", "7"]) == 0
    assert capsys.readouterr().out == "To be" + answer["output"] + "\n"
    for step in answer["steps"]:
        assert step["kept"] <= 5 and len(step["after"]) == step["kept"]
        assert sum(p for _, _, p in step["after"]) == pytest.approx(1.0, abs=1e-9)
        assert step["id"] in [i for _, i, _ in step["after"]]  # the drawn token survived the filters


def test_fill_mask_and_nsp_are_the_models(dirs, capsys):
    session = _session("bert", dirs)
    client = _client(session)
    text = "the [MASK] sat on the [MASK]."
    answer = _post(client, "fill_mask", text=text, top_k=3)
    assert main(["fill-mask", "--model", str(dirs / "bert"), "--top-k", "3", text]) == 0
    printed = capsys.readouterr().out.splitlines()[1:]
    for line, mask in zip(printed, answer["masks"]):
        assert line.split(": ", 1)[1] == "  ".join(f"{t} {p:.4f}" for t, p in mask["candidates"])
        assert answer["tokens"][mask["position"]] == "[MASK]"
    assert [[list(c) for c in m] for m in fill_mask(session.m.model, session.m.tgt.tokenizer, text, 3)] == [
        m["candidates"] for m in answer["masks"]
    ]
    nsp = _post(client, "nsp", text="the cat sat.", text_b="a bird sang.")
    wp = session.m.tgt.tokenizer
    ids, types = wp.pair(wp.encode("the cat sat."), wp.encode("a bird sang."), 32)
    assert nsp["token_type_ids"] == types and nsp["tokens"][0] == "[CLS]"
    with torch.no_grad():
        want = session.m.model.pretraining_logits(torch.tensor([ids]), token_type_ids=torch.tensor([types]))[1].softmax(
            -1
        )[0, 0]
    assert nsp["is_next_prob"] == pytest.approx(float(want), abs=1e-7)


# ------------------------------------------------------------------------------------------------- safety


def test_host_origin_and_input_caps():
    session = _session("toy")
    app = create_app(session, "127.0.0.1", PORT)
    ok = TestClient(app, base_url=BASE)
    assert ok.post("/api/info", json={}).status_code == 200
    assert TestClient(app, base_url=f"http://localhost:{PORT}").post("/api/info", json={}).status_code == 200
    rebound = TestClient(app, base_url=f"http://evil.example:{PORT}").post("/api/info", json={})
    assert rebound.status_code == 400 and "Host" in rebound.json()["error"]
    assert TestClient(app, base_url=f"http://127.0.0.1:{PORT + 1}").get("/").status_code == 400  # another port
    foreign = ok.post("/api/info", json={}, headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 400 and "Origin" in foreign.json()["error"]
    assert ok.post("/api/info", json={}, headers={"Origin": BASE}).status_code == 200
    assert "access-control-allow-origin" not in {k.lower() for k in foreign.headers}
    for params, message in [
        ({"text": "I am good. " * 10}, "text has 40 tokens, at most 16"),
        ({"text": "x" * 30_000}, "text has 30000 characters, at most 20000"),
        ({"text": "I am good.", "colour": 1}, "unknown field 'colour'"),
        ({"text": 3}, "text must be a string"),
    ]:
        r = ok.post("/api/trace", json=params)
        assert r.status_code == 400 and message in r.json()["error"] and "\n" not in r.json()["error"]
    r = ok.post("/api/decode", json={"text": "I am good.", "mode": "beam", "beam_size": 17})
    assert r.status_code == 400 and r.json()["error"] == "decode: beam_size must be in [1, 16], got 17"
    assert ok.post("/api/nothing", json={}).status_code == 404
    assert ok.post("/api/info", content=b"[not json").status_code == 400
    assert ok.post("/api/info", content=b"x" * 70_000).status_code == 413  # over MAX_BODY (64 KB)
    assert ok.get("/").status_code == 200 and "<html" in ok.get("/").text.lower()
    assert ok.get("/session.py").status_code == 404


# ------------------------------------------------------------------------------------------------- export


def test_export_embeds_the_answers_and_references_nothing_online(tmp_path):
    session = _session("toy")
    assert main(["explore", "--export", str(tmp_path / "page.html")]) == 0
    html = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert (tmp_path / "page.html").stat().st_mode & 0o777 == 0o644
    data = json.loads(re.search(r'<script type="application/json" id="tformer-data">(.*?)</script>', html, re.S)[1])
    answers = data["answers"]
    trace_answer = answers[request_key("trace", {"text": "I am good."})]
    served = session.call("trace", {"text": "I am good."})
    assert trace_answer["trace_id"] == served["trace_id"] and trace_answer["tokens"] == served["tokens"]
    assert [(s["stage"], s["shape"]) for s in trace_answer["steps"]] == [
        (s["stage"], s["shape"]) for s in served["steps"]
    ]
    weights = next(s["id"] for s in served["steps"] if s["stage"] == "weights")
    exported = answers[request_key("tensor", {"trace_id": served["trace_id"], "id": weights})]
    shown = session.call("tensor", {"trace_id": served["trace_id"], "id": weights})
    np.testing.assert_allclose(_array(exported["values"]), _array(shown["values"]), rtol=1e-5)
    assert not [k for k in answers if '"head"' in k]  # no per-head copies: the page slices heads itself
    for step in trace_answer["steps"]:
        assert answers[request_key("tensor", {"trace_id": trace_answer["trace_id"], "id": step["id"]})]
    assert answers[request_key("decode", {"text": "I am good.", "mode": "beam", "beam_size": 4})]["output"] == (
        "Je vais bien"
    )
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//|@import|url\(\s*["']?(https?:)?//""", html)
    assert "<script" in html and 'src="explore.js"' not in html  # the page's script is inlined
    assert export_html(session).count('<script type="application/json" id="tformer-data">') == 1


def _exported_info(html: str) -> dict:
    data = json.loads(re.search(r'id="tformer-data">(.*?)</script>', html, re.S)[1].replace("\\u003c", "<"))
    return data["answers"][request_key("info", {})]


def test_export_names_the_model_as_told_instead_of_its_local_path(dirs, tmp_path):
    """The header of an exported page shows info's name and source: by default the directory's name and path (on the
    lessons' pages a temporary /tmp/... path); name= and source= replace both, and the path is then nowhere in it."""
    session = _session("gpt", dirs)
    plain = _exported_info(export_html(session))
    assert (plain["name"], plain["source"]) == ("gpt", str(dirs / "gpt"))
    from tformer.explore.export import write_export

    page = write_export(session, tmp_path / "named.html", name="lesson 7's GPT", source="lesson 7: 1,200 steps")
    html = page.read_text(encoding="utf-8")
    named = _exported_info(html)
    assert (named["name"], named["source"]) == ("lesson 7's GPT", "lesson 7: 1,200 steps")
    assert str(dirs / "gpt") not in html
    assert {k: v for k, v in named.items() if k not in ("name", "source")} == {
        k: v for k, v in plain.items() if k not in ("name", "source")
    }
    assert session.call("info", {})["source"] == str(dirs / "gpt")  # the session itself is unchanged


def test_export_of_a_tensor_over_the_limit_holds_the_rows_the_page_asks_for(monkeypatch):
    import tformer.explore.session as session_module

    session = _session("toy")
    monkeypatch.setattr(session_module, "MAX_TENSOR_VALUES", 24)  # the toy's [T, V] logits are bigger than that
    info = session.call("info", {})
    assert info["max_tensor_values"] == 24
    answers = json.loads(
        re.search(r'id="tformer-data">(.*?)</script>', export_html(session), re.S)[1].replace("\\u003c", "<")
    )["answers"]
    trace_answer = answers[request_key("trace", info["defaults"]["trace"])]
    big = [s for s in trace_answer["steps"] if np.prod(s["shape"][1:] if s["dims"][0] == "B" else s["shape"]) > 24]
    assert big and any(s["stage"] == "logits" for s in big)
    for step in big:
        key = {"trace_id": trace_answer["trace_id"], "id": step["id"]}
        assert request_key("tensor", key) not in answers
        n = step["shape"][-2]
        rows = sorted({*range(min(n, 8)), n - 1})
        asked = [json.loads(k[7:]) for k in answers if k.startswith("tensor ")]
        assert sorted(a["row"] for a in asked if a["id"] == step["id"]) == rows
        for r in rows:  # each exported row is the server's row (the export traces in a session of its own)
            session.call("trace", info["defaults"]["trace"])
            want, got = session.call("tensor", {**key, "row": r}), answers[request_key("tensor", {**key, "row": r})]
            exact = ("shape", "dims", "rows", "cols")  # the numbers: to float32 rounding (decoding ran in between)
            assert {k: got[k] for k in exact} == {k: want[k] for k in exact}
            np.testing.assert_allclose(_array(got["values"]), _array(want["values"]), rtol=1e-5, atol=1e-7)
            assert (got["min"], got["max"]) == pytest.approx((want["min"], want["max"]), rel=1e-5)
        r = TestClient(create_app(session, "127.0.0.1", PORT), base_url=BASE).post("/api/tensor", json=key)
        assert r.status_code == 400 and "one row at a time" in r.json()["error"]


EXPORT_BOUND = 5_000_000  # bytes: an export is a file to mail to a class


def test_export_of_an_untrained_translator_stays_small_and_holds_its_numbers(tmp_path):
    """An untrained translator never says <eos>, so its greedy translation (the default trace's decoder input)
    would run to the context (256 tokens: a 22 MB file once). The export follows its first 32 tokens, keeps big
    tensors as rows, says so in info.export, and every number it holds is the model's own trace's."""
    from tformer.explore.export import EXPORT_TARGET_TOKENS

    torch.manual_seed(0)
    sentences = [p[0] for p in PAIRS] + SENTENCES
    src, tgt = train_tokenizer("bpe", sentences * 3, 200, 1), train_tokenizer("bpe", [p[1] for p in PAIRS] * 3, 200, 1)
    config = Seq2SeqConfig.preset("tiny", src_vocab_size=src.vocab_size, tgt_vocab_size=tgt.vocab_size, dropout=0.0)
    assert config.max_len >= 256
    Translator(Seq2SeqTransformer(config).eval(), src, tgt).save(tmp_path / "untrained")
    assert main(["explore", "--model", str(tmp_path / "untrained"), "--export", str(tmp_path / "page.html")]) == 0
    assert (tmp_path / "page.html").stat().st_size < EXPORT_BOUND
    html = (tmp_path / "page.html").read_text(encoding="utf-8")
    answers = json.loads(re.search(r'id="tformer-data">(.*?)</script>', html, re.S)[1].replace("\\u003c", "<"))
    answers = answers["answers"]
    info = answers["info {}"]
    assert info["export"]["target_tokens"] == EXPORT_TARGET_TOKENS  # the translation did reach the cap
    assert "first 32 tokens" in info["export"]["note"] and info["max_tensor_values"] <= 1 << 14
    tr = answers[request_key("trace", info["defaults"]["trace"])]
    assert len(tr["tokens"]["decoder"]) == EXPORT_TARGET_TOKENS + 1  # <sos> + 32
    model = Translator.load(tmp_path / "untrained")
    src_ids = model.encode_sources([info["default_text"]])[0].tolist()
    greedy = translate_ids(model.model, torch.tensor([src_ids]), TRANSLATION_SOS, TRANSLATION_EOS, 32)[0]
    expected = trace(model.model, src_ids, [TRANSLATION_SOS] + greedy)  # the model's own, on its first 32 tokens
    steps = [s for s in tr["steps"] if s["stage"] not in ("ffn_hidden", "ffn_activation")]
    assert [s["stage"] for s in steps] == [e.stage for e in expected.entries]
    rows_only = 0  # (the export loads the model its own way: float32 rounding apart, deep in the stack)
    for step, entry in zip(steps, expected.entries):
        want = (entry.tensor[0] if entry.dims[0] == "B" else entry.tensor).double().numpy()
        whole = answers.get(request_key("tensor", {"trace_id": tr["trace_id"], "id": step["id"]}))
        if whole is None:  # kept as rows 0..7 and the last
            rows_only += 1
            assert step["id"] in info["export"]["partial_steps"]
            for r in sorted({*range(min(want.shape[-2], 8)), want.shape[-2] - 1}):
                got = answers[request_key("tensor", {"trace_id": tr["trace_id"], "id": step["id"], "row": r})]
                np.testing.assert_allclose(_array(got["values"]), want[..., r, :], rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_allclose(_array(whole["values"]), want, rtol=1e-4, atol=1e-5)
    assert rows_only == len(info["export"]["partial_steps"])


def test_default_sample_fits_a_small_vocabulary(dirs):
    session = _session("gpt", dirs)  # a character GPT: fewer than 50 tokens
    vocab = len(session.m.tgt.vocab)
    assert vocab < 50
    info = session.call("info", {})
    assert info["defaults"]["sample"]["top_k"] == vocab and info["max_tensor_values"] == 1 << 21
    answer = _post(_client(session), "sample", **info["defaults"]["sample"])
    assert 1 <= len(answer["steps"]) <= 20 and all(s["kept"] <= vocab for s in answer["steps"])


# ------------------------------------------------------------------------------------------------ compare


@pytest.fixture(scope="module")
def second(dirs):
    """gpt_b / seq2seq_b: the gpt and seq2seq checkpoints with every weight moved a little (another step of a run);
    seq2seq_same: an exact copy of seq2seq."""
    import shutil

    for name in ("gpt", "seq2seq"):
        shutil.copytree(dirs / name, dirs / f"{name}_b")
        model = _session(name, dirs).m.model
        moved = type(model)(model.config).eval()
        with torch.no_grad():
            for p, q in zip(moved.parameters(), model.parameters()):
                p.copy_(q + 0.01 * torch.randn_like(q))
        moved.save_pretrained(dirs / f"{name}_b")
    shutil.copytree(dirs / "seq2seq", dirs / "seq2seq_same")
    return dirs


def _expect_diff(a: dict, b: dict) -> tuple[np.ndarray, np.ndarray]:
    """b − a from two tensor answers (0 where equal, infinities included), and the rounding both carry."""
    x, y = _array(a["values"]), _array(b["values"])
    with np.errstate(invalid="ignore"):
        d = np.where(x == y, 0.0, y - x)
    return d, 1e-5 * np.maximum(np.abs(np.nan_to_num(x, neginf=0)), np.abs(np.nan_to_num(y, neginf=0))) + 1e-12


def _assert_diff(got: dict, a: dict, b: dict) -> None:
    want, tol = _expect_diff(a, b)
    d = _array(got["values"])
    finite = np.isfinite(want)
    assert (np.isfinite(d) == finite).all() and (d[~finite] == want[~finite]).all()
    assert (np.abs(d[finite] - want[finite]) <= tol[finite]).all()


@pytest.mark.parametrize("name", ["gpt", "seq2seq"])
def test_compare_two_checkpoints_is_their_traces_difference(second, name):
    session = Session.open(second / name, second / f"{name}_b")
    alone = Session.open(second / f"{name}_b")
    client = _client(session)
    text = TEXT if name == "gpt" else "I am good."
    answer = _post(client, "compare", text=text, other="model")
    assert answer["a"] == _post(client, "trace", text=text)  # a: the first model's own trace
    assert _post(client, "info")["compare"]["source"] == str(second / f"{name}_b")
    if name == "seq2seq":  # b is fed the first model's greedy translation
        assert answer["b"]["tokens"]["decoder"] == answer["a"]["tokens"]["decoder"]
    want_b = alone.call("trace", {"text": text, "target": None})
    if name == "gpt":
        assert [s["shape"] for s in answer["b"]["steps"]] == [s["shape"] for s in want_b["steps"]]
    moved = 0
    for d in answer["diff"]:
        ta = _post(client, "tensor", trace_id=answer["a"]["trace_id"], id=d["id"])
        tb = _post(client, "tensor", trace_id=answer["b"]["trace_id"], id=d["id"])
        got = _post(client, "tensor_diff", trace_a=answer["a"]["trace_id"], trace_b=answer["b"]["trace_id"], id=d["id"])
        _assert_diff(got, ta, tb)
        want, tol = _expect_diff(ta, tb)
        assert d["max_abs_diff"] == pytest.approx(float(np.abs(want).max()), abs=float(tol.max()))
        assert got["max_abs_diff"] == pytest.approx(d["max_abs_diff"], rel=1e-6)
        moved += d["max_abs_diff"] > 1e-4
        if name == "gpt":  # b's tensors are the second model's own
            np.testing.assert_allclose(
                _array(tb["values"]),
                _array(alone.call("tensor", {"trace_id": want_b["trace_id"], "id": d["id"]})["values"]),
                rtol=1e-6,
            )
    assert moved > len(answer["diff"]) // 2
    assert next(d for d in answer["diff"] if d["stage"] in ("tokens", "ids", "token_ids"))["max_abs_diff"] == 0


def test_identical_checkpoints_differ_nowhere_and_another_family_is_refused(second, capsys, tmp_path):
    session = Session.open(second / "seq2seq", second / "seq2seq_same")
    answer = session.call("compare", {"text": "I am good.", "other": "model"})
    assert answer["diff"] and all(d["max_abs_diff"] == 0 and d["mean_abs_diff"] == 0 for d in answer["diff"])
    assert answer["a"]["trace_id"] != answer["b"]["trace_id"]
    for model, other in [("gpt", "bert"), ("seq2seq", "gpt"), (None, "seq2seq")]:
        args = ["explore", "--compare", str(second / other), "--export", str(tmp_path / "x.html")]
        assert main(args + (["--model", str(second / model)] if model else [])) != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(second / other) in err and "one family and shape" in err
        assert str(second / model) in err if model else "'toy'" in err
    assert not (tmp_path / "x.html").exists()


def test_compare_two_inputs_and_its_errors(dirs):
    session = _session("gpt", dirs)
    client = _client(session)
    answer = _post(client, "compare", text="To be", text2="or no", other="input")
    assert answer["b"] == _post(client, "trace", text="or no")
    ids = {a["trace_id"] for a in (answer["a"], answer["b"])}
    for d in answer["diff"]:
        ta, tb = (_post(client, "tensor", trace_id=t["trace_id"], id=d["id"]) for t in (answer["a"], answer["b"]))
        _assert_diff(
            _post(client, "tensor_diff", trace_a=answer["a"]["trace_id"], trace_b=answer["b"]["trace_id"], id=d["id"]),
            ta,
            tb,
        )
    assert len(ids) == 2
    longer = _post(client, "compare", text="To be", text2="To be, or not", other="input")
    logits = next(d for d in longer["diff"] if d["stage"] == "logits")
    assert logits["shape_a"] != logits["shape_b"] and logits["max_abs_diff"] is None
    for params, message in [
        (
            {"trace_a": longer["a"]["trace_id"], "trace_b": longer["b"]["trace_id"], "id": logits["id"]},
            f"tensor_diff: step {logits['id']} (logits) has shape {logits['shape_a']} in trace_a and "
            f"{logits['shape_b']} in trace_b",
        ),
        ({"trace_a": "t000", "trace_b": longer["b"]["trace_id"], "id": 0}, "trace_a 't000' is unknown"),
    ]:
        r = client.post("/api/tensor_diff", json=params)
        assert r.status_code == 400 and message in r.json()["error"], r.text
    for params, message in [
        ({"text": "To be", "other": "model"}, "compare: other 'model' needs a second checkpoint"),
        ({"text": "To be", "other": "input"}, "compare: text2 is required"),
        ({"text": "To be", "other": "both"}, "compare: other must be one of input, model"),
    ]:
        r = client.post("/api/compare", json=params)
        assert r.status_code == 400 and message in r.json()["error"], r.text


def test_export_with_compare_holds_both_traces_and_their_difference(second, tmp_path):
    page = tmp_path / "page.html"
    assert (
        main(["explore", "--model", str(second / "gpt"), "--compare", str(second / "gpt_b"), "--export", str(page)])
        == 0
    )
    html = page.read_text(encoding="utf-8")
    answers = json.loads(re.search(r'id="tformer-data">(.*?)</script>', html, re.S)[1])["answers"]
    info = answers[request_key("info", {})]
    text = info["default_text"]
    assert info["defaults"]["compare"] == {"text": text, "other": "model"}
    answer = answers[request_key("compare", info["defaults"]["compare"])]
    session = Session.open(second / "gpt", second / "gpt_b")
    assert answer == session.call("compare", {"text": text, "other": "model"})
    pair = {"trace_a": answer["a"]["trace_id"], "trace_b": answer["b"]["trace_id"]}
    for d in answer["diff"]:
        for t in (answer["a"], answer["b"]):
            assert request_key("tensor", {"trace_id": t["trace_id"], "id": d["id"]}) in answers
        got = answers[request_key("tensor_diff", {**pair, "id": d["id"]})]
        assert got == session.call("tensor_diff", {**pair, "id": d["id"]})


# ------------------------------------------------------------------------------------------------ command


def test_command_serves_refuses_a_foreign_host_and_stops_on_ctrl_c():
    proc = subprocess.Popen(
        [sys.executable, "-m", "tformer", "explore", "--no-browser", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)[0]
        request = urllib.request.Request(url + "api/info", data=b"{}", method="POST")
        assert json.loads(urllib.request.urlopen(request, timeout=30).read())["family"] == "seq2seq"
        request = urllib.request.Request(url + "api/info", data=b"{}", headers={"Host": "evil.example"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=30)
        assert err.value.code == 400
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, errors = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, errors
    assert out.strip().splitlines() == ["tformer explore: stopped"] and "Traceback" not in errors
