"""tformer explore as a careless or hostile client finds it (issue 32): a body over the cap is refused with 413 while
it streams in (chunked or declared), deep JSON and wrong JSON types are 400s that name the field, extreme sampling
settings and text that is not Unicode are answered or refused in one line (never a 500), the page's defaults fit a
model with a short context (so --export works), and a fuzz of bodies and of damaged model directories sees only
clear refusals. The servers here are real (uvicorn on a free port) where the transport matters."""

import contextlib
import http.client
import io
import json
import math
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

import tformer
from tformer import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer
from tformer.cli import main
from tformer.explore import Session
from tformer.explore.export import request_key
from tformer.explore.server import MAX_BODY, MAX_DEPTH, create_app
from tformer.explore.session import API_NAMES
from tformer.tokenizers import ByteBPETokenizer, CharTokenizer, train_tokenizer
from tformer.translation import Translator

TEXT = "To be, or not to be, that is the question."
SENTENCES = ["the cat sat on the mat.", "the dog ate a bone.", "a bird sang in the tree.", "I am good."]
PAIRS = [("I am good.", "Je vais bien."), ("the cat sat.", "le chat est assis."), ("a dog.", "un chien.")]
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """Tiny random models whose contexts are shorter than the page's old defaults, one per kind of tokenizer:
    char16 (a character GPT of context 16: the default text has 19 characters), bpe20 (a byte-level BPE GPT of
    context 20: the default text leaves fewer than 20 tokens to sample), bert8 (a BERT of context 8: the default
    "the cat sat on the [MASK]." is 9 with [CLS] and [SEP]), seq2seq3 (a translator of context 3: the default "I am good." is 4)."""
    root = tmp_path_factory.mktemp("trust")
    torch.manual_seed(0)
    char = CharTokenizer.train([TEXT])
    GPT(GPTConfig.preset("tiny", vocab_size=char.vocab_size, dropout=0.0, max_len=16)).save_pretrained(root / "char16")
    char.save(root / "char16")
    bpe = ByteBPETokenizer.train([TEXT * 3], vocab_size=280)
    GPT(GPTConfig.preset("tiny", vocab_size=bpe.vocab_size, dropout=0.0, max_len=20)).save_pretrained(root / "bpe20")
    bpe.save(root / "bpe20")
    wp = train_tokenizer("wordpiece", SENTENCES * 3, vocab_size=120, min_frequency=1)
    Bert(BertConfig.preset("tiny", vocab_size=wp.vocab_size, dropout=0.0, max_len=8)).save_pretrained(root / "bert8")
    wp.save(root / "bert8")
    src, tgt = (
        train_tokenizer("bpe", [p[0] for p in PAIRS] * 3, 80, 1),
        train_tokenizer("bpe", [p[1] for p in PAIRS] * 3, 80, 1),
    )
    config = Seq2SeqConfig.preset(
        "tiny", src_vocab_size=src.vocab_size, tgt_vocab_size=tgt.vocab_size, dropout=0.0, max_len=3
    )
    Translator(Seq2SeqTransformer(config).eval(), src, tgt).save(root / "seq2seq3")
    return root


SESSIONS: dict = {}


def _session(name, dirs=None) -> Session:
    if name not in SESSIONS:
        SESSIONS[name] = Session.open(None if name == "toy" else dirs / name)
    return SESSIONS[name]


def _client(session) -> TestClient:
    """In-process, with a bug answered as the server answers it (500) instead of raised into the test."""
    return TestClient(
        create_app(session, "127.0.0.1", 8765), base_url="http://127.0.0.1:8765", raise_server_exceptions=False
    )


@contextlib.contextmanager
def _serving(session):
    """The explorer's app under uvicorn (as ``tformer explore`` runs it) on a free port, in a thread; yields the port."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    app = create_app(session, "127.0.0.1", port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    start = time.monotonic()
    while not server.started and time.monotonic() - start < 30:
        time.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture(scope="module")
def port(dirs):
    with _serving(_session("bpe20", dirs)) as p:
        yield p


def _response(sock: socket.socket) -> tuple[int, dict]:
    """Read one HTTP response (status, JSON body) from a raw socket; a reset after it is fine (the server closed a
    connection whose body it did not read)."""
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < _length(data):
            more = sock.recv(65536)
            if not more:
                break
            data += more
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body[: _length(data)])


def _length(data: bytes) -> int:
    head = data.partition(b"\r\n\r\n")[0].decode("latin-1").lower()
    return next((int(line.split(":")[1]) for line in head.split("\r\n") if line.startswith("content-length:")), 0)


def _assert_refused(r, status: int, *words: str) -> None:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert "\n" not in error and all(w in error for w in words), error


# ---------------------------------------------------------------------------------------- 7. request handling


def test_a_chunked_body_over_the_cap_is_refused_while_it_streams(port):
    """A chunked body (no Content-Length) of 4 x the cap, and no end: the server answers 413 and closes without
    waiting for the rest. Reading the whole body first (the old code) never answers: the body never ends."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        head = f"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nTransfer-Encoding: chunked\r\n\r\n"
        sock.sendall(head.encode())
        chunk = b" " * 16384  # JSON whitespace: only the size is wrong
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):  # the server may close while we send
            for _ in range(4 * MAX_BODY // len(chunk)):
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        status, answer = _response(sock)
    assert status == 413 and answer["error"] == f"the request body has more than {MAX_BODY} bytes"
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:  # the server still serves
        body = b'{"text": "To be"}'
        sock.sendall(
            b"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
            % (port, len(body), body)
        )
        status, answer = _response(sock)
    assert status == 200 and answer["tokens"]["decoder"]


def test_a_declared_oversize_body_is_refused_before_it_is_read(port):
    """Content-Length: 1 GB and not a byte sent: 413 at once (the old code said 400)."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(f"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {10**9}\r\n\r\n".encode())
        status, answer = _response(sock)
    assert status == 413 and answer["error"] == f"the request body has {10**9} bytes, at most {MAX_BODY}"


def test_deep_json_is_refused_before_it_is_parsed(dirs):
    """Python's JSON parser recurses: 5000 open brackets were a RecursionError (a 500). Brackets inside a string
    are text, not nesting."""
    client = _client(_session("bpe20", dirs))
    _assert_refused(
        client.post("/api/trace", content=b"[" * 5000 + b"]" * 5000), 400, f"nests deeper than {MAX_DEPTH} levels"
    )
    _assert_refused(client.post("/api/trace", json={"text": "[{" * 40}), 400, "text has 80 tokens, at most 20")


@pytest.mark.parametrize(
    "body, words",
    [
        (b'{"text": ' + b"[" * 40 + b"]" * 40 + b"}", [f"nests deeper than {MAX_DEPTH} levels"]),
        (b'{"text": "To be \xff"}', ["not UTF-8 (byte 0xff at position 16)"]),
        (b"[]", ["must be a JSON object, got a list of 0 items"]),
        (b'"To be"', ["must be a JSON object, got 'To be'"]),
        (b'{"text": ', ["not valid JSON"]),
        (b'{"text": ' + b"9" * 5000 + b"}", ["not valid JSON"]),  # past Python's 4300-digit limit
    ],
)
def test_bodies_that_are_no_json_object_are_400s(dirs, body, words):
    _assert_refused(_client(_session("bpe20", dirs)).post("/api/trace", content=body), 400, *words)


@pytest.mark.parametrize(
    "name, params, message",
    [
        ("trace", {"text": True}, "trace: text must be a string, got true"),
        ("trace", {"text": ["To be"]}, "trace: text must be a string, got a list of 1 item"),
        ("trace", {"text": {"a": 1}}, "trace: text must be a string, got an object with 1 field"),
        ("trace", {"text": 12}, "trace: text must be a string, got 12"),
        ("tensor", {"trace_id": 3, "id": 0}, "tensor: trace_id must be a string of at most 100 characters, got 3"),
        ("decode", {"text": "To be", "max_len": "4"}, "decode: max_len must be an integer in [1, 18], got '4'"),
        ("decode", {"text": "To be", "max_len": True}, "decode: max_len must be an integer in [1, 18], got true"),
        ("decode", {"text": "To be", "max_len": 2.5}, "decode: max_len must be an integer in [1, 18], got 2.5"),
        ("decode", {"text": "To be", "max_len": 1e300}, "decode: max_len must be in [1, 18], got 1e+300"),
        (
            "decode",
            {"text": "To be", "mode": ["beam"]},
            "decode: mode must be one of greedy, beam, got a list of 1 item",
        ),
        ("sample", {"text": "To be", "top_p": "0.5"}, "sample: top_p must be a number in (0, 1], got '0.5'"),
        ("sample", {"text": "To be", "temperature": False}, "sample: temperature must be a number in [0.001, 100]"),
        (
            "sample",
            {"text": "To be", "seed": 10**40},
            "sample: seed must be in [0, 9223372036854775807], got 10000000…",
        ),
        ("decode", {"text": "To be", "reference": 5}, "decode: reference must be a string, got 5"),
    ],
)
def test_wrong_json_types_are_400s_naming_the_field(dirs, name, params, message):
    """Each field's JSON type and range are checked; the message says the field, what it must be and what came (in
    JSON's words: true, a list); a boolean is not a number."""
    _assert_refused(_client(_session("bpe20", dirs)).post(f"/api/{name}", json=params), 400, message)


# ------------------------------------------------------------------------------------------- 4. sampling


@pytest.mark.parametrize("top_p", [1e-300, 5e-324, 1e-50])  # 0 in float32: no token was kept (a 500)
def test_extreme_sampling_settings_are_answered_with_finite_numbers_or_refused_with_the_range(dirs, top_p):
    """The issue's values: a top-p so small no token passed is answered (the top token survives, every number
    finite); a temperature of 1e-45 is refused with the allowed range; a repetition penalty is no setting of the
    page (a 400 naming the field)."""
    client = _client(_session("bpe20", dirs))
    r = client.post("/api/sample", json={"text": "To be", "seed": 3, "steps": 8, "top_p": top_p})
    assert r.status_code == 200, r.text
    steps = r.json()["steps"]
    assert steps
    for step in steps:
        assert step["kept"] == 1 and [i for _, i, _ in step["after"]] == [step["id"]]  # the top token, alone
        assert step["before"][0][1] == step["id"] and step["prob_after"] == 1.0
        assert all(math.isfinite(p) and 0 < p <= 1 for _, _, p in step["before"]) and math.isfinite(step["prob_before"])
    for params, refusal in [
        ({"temperature": 1e-45}, "sample: temperature must be in [0.001, 100], got 1e-45"),
        ({"repetition_penalty": 1e-40}, "sample: unknown field 'repetition_penalty'"),
    ]:
        _assert_refused(client.post("/api/sample", json={"text": "To be", "top_p": top_p, **params}), 400, refusal)


@pytest.mark.parametrize("top_p", [0, -1e-300, -0.0])
def test_a_top_p_of_zero_or_below_is_refused_naming_its_range(dirs, top_p):
    r = _client(_session("bpe20", dirs)).post("/api/sample", json={"text": "To be", "top_p": top_p})
    _assert_refused(r, 400, f"sample: top_p must be in (0, 1], got {top_p:g}")


# ------------------------------------------------------------------------------------- 6. text that is no Unicode


@pytest.mark.parametrize(
    "name, params, field, at",
    [
        ("trace", {"text": "To \ud800be"}, "text", 4),
        ("decode", {"text": "To be", "reference": "\udc80"}, "reference", 1),
        ("sample", {"text": "\udfffTo be"}, "text", 1),
        ("compare", {"text": "To be", "text2": "or \ud800", "other": "input"}, "text2", 4),
    ],
)
def test_a_lone_surrogate_is_refused_naming_the_field(dirs, name, params, field, at):
    """JSON can carry a lone surrogate ("\\ud800"), which no tokenizer takes (a TypeError, a 500) and UTF-8 cannot
    write: a 400 naming the field and where, as the CLI refuses such text."""
    body = json.dumps(params).encode()  # ensure_ascii: the surrogate travels as the escape \\udXXX
    code = ord(next(c for c in params[field] if 0xD800 <= ord(c) <= 0xDFFF))
    r = _client(_session("bpe20", dirs)).post(f"/api/{name}", content=body)
    _assert_refused(r, 400, f"{name}: {field} is not valid Unicode (lone surrogate U+{code:04X} at character {at})")


def test_a_bug_is_a_500_that_says_so(dirs, monkeypatch):
    """A failure that is no user mistake stays visible: 500, and the page's line says it is a bug to report."""
    session = _session("bpe20", dirs)
    monkeypatch.setattr(session, "info", lambda p: 1 / 0)
    r = _client(session).post("/api/info", json={})
    assert r.status_code == 500
    assert r.json()["error"].startswith(
        "internal error, a bug in tformer explore (ZeroDivisionError: division by zero)"
    )
    assert "please report it" in r.json()["error"]


# ----------------------------------------------------------------------------------- 11. defaults fit the model


@pytest.mark.parametrize("name", ["char16", "bpe20", "bert8", "seq2seq3"])
def test_the_pages_defaults_fit_a_short_context_and_export_works(dirs, tmp_path, name):
    """Every default request (the page's first ones, and an export's) answers 200 for a model whose context is
    shorter than the defaults were written for; `explore --export` of it succeeds and holds those answers."""
    session = _session(name, dirs)
    client = _client(session)
    info = client.post("/api/info", json={}).json()
    defaults = info["defaults"]
    assert "trace" in defaults and defaults["trace"]["text"] == info["default_text"]
    for request, params in defaults.items():
        r = client.post(f"/api/{'decode' if request == 'beam' else request}", json=params)
        assert r.status_code == 200, (request, r.text)
    context = session.m.config.max_len
    if session.m.family == "gpt":
        prompt = len(session.m.tgt.encode(info["default_text"])[0])
        assert 1 <= defaults["sample"]["steps"] == min(20, context - prompt)
    if session.m.family == "bert":
        assert "[MASK]" in defaults["fill_mask"]["text"] and "nsp" in defaults
    page = tmp_path / "page.html"
    assert main(["explore", "--model", str(dirs / name), "--export", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert json.dumps(request_key("trace", defaults["trace"]), ensure_ascii=False)[1:-1] in html.replace("\\u003c", "<")


# --------------------------------------------------------------------------------------------------- fuzz

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),  # NaN and the infinities too (json.dumps writes them; Python's json reads them)
    st.text(max_size=30),
    st.sampled_from(["\ud800", "a\udc80b", "[MASK]", "greedy", "beam", "input", "model", "t0000"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
# each API's own fields, and values they could take: in range, at the edges, past them, of another type
_API_FIELDS = {
    "info": (),
    "trace": ("text", "target", "text_b"),
    "decode": ("text", "mode", "beam_size", "length_penalty", "max_len", "reference"),
    "sample": ("text", "temperature", "top_k", "top_p", "seed", "steps"),
    "fill_mask": ("text", "top_k"),
    "nsp": ("text", "text_b"),
    "compare": ("text", "text2", "other", "target", "target2", "text_b", "text_b2"),
    "tensor": ("trace_id", "id", "head", "row"),
    "tensor_diff": ("trace_a", "trace_b", "id", "head", "row"),
}
_TEXTS = st.text(min_size=1, max_size=40) | st.sampled_from(["I am good.", "To be", "the [MASK].", "a\ud800", " "])
_NEAR = {
    "text": _TEXTS,
    "mode": st.sampled_from(["greedy", "beam", "nucleus"]),
    "other": st.sampled_from(["input", "model", "both"]),
    "temperature": st.sampled_from([1e-300, 1e-3, 0.7, 1.0, 100.0, 101.0]) | st.floats(-1.0, 200.0),
    "top_p": st.sampled_from([5e-324, 1e-300, 1e-45, 0.5, 1.0]) | st.floats(-1.0, 2.0),
    "length_penalty": st.floats(-1.0, 6.0),
    "id": st.integers(0, 60),
}
_REQUIRED = {"text", "text_b", "other", "trace_id", "trace_a", "trace_b", "id"}
_ANY = st.one_of(st.none(), st.booleans(), st.integers(-3, 70), st.sampled_from([2**63, 1.5, "3"]), _TEXTS)


@st.composite
def _bodies(draw, trace_id: str):
    """(api, body): a near-valid body of an API's own fields (a known trace id among the ids), or anything."""
    api = draw(st.sampled_from([*API_NAMES, "nothing"]))
    fields = _API_FIELDS.get(api, ())
    near = {f: _NEAR.get(f, st.sampled_from([trace_id, "t0"]) if f.startswith("trace") else _ANY) for f in fields}
    required = {f: near[f] for f in fields if f in _REQUIRED and (api != "trace" or f == "text")}
    optional = {f: near[f] | _ANY for f in fields if f not in required}
    good = st.fixed_dictionaries(required, optional=optional).map(json.dumps).map(str.encode)
    body = draw(
        st.one_of(
            good,
            good,
            st.binary(max_size=300),
            _VALUES.map(json.dumps).map(str.encode),
            st.sampled_from([1, 32, 33, 999, 1000, 5000, 30000]).map(lambda n: b"[" * n + b"]" * n),
            st.sampled_from([1, 32, 33, 999, 1000, 5000, 30000]).map(lambda n: b'{"text": ' + b'{"a": ' * n),
        )
    )
    return api, body


def _post(port: int, api: str, body: bytes) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # a hang is a failure, not a stuck test
    try:
        conn.request("POST", f"/api/{api}", body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("name", ["bpe20", "toy"])
def test_fuzz_bodies_get_answers_or_one_line_refusals_never_a_500(dirs, name):
    """Random bodies to every POST endpoint of a real server: an API's own fields with values in range, at the
    edges, past them or of another type (a trace's real id among the ids), bytes, JSON of any shape, deep nesting.
    Each is answered (200) or refused with one JSON line (400/404/413); never a 500, never a hang (30 s each)."""
    with _serving(_session(name, dirs)) as port:
        status, text = _post(port, "trace", b'{"text": "I am good."}')
        assert status == 200
        trace_id = json.loads(text)["trace_id"]

        @FUZZ
        @given(request=_bodies(trace_id))
        def post(request):
            status, text = _post(port, *request)
            assert status in (200, 400, 404, 413), (status, text[:300])
            answer = json.loads(text)
            if status != 200:
                assert isinstance(answer["error"], str) and answer["error"] and "\n" not in answer["error"]

        post()


_DAMAGE = st.sampled_from(["delete", "truncate", "bytes", "json", "field", "drop_field"])
# ints that are wrong, small, or too large to describe a model: never a size that would really be allocated
_FIELD_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.sampled_from([-(2**63), -1, 0, 1, 2, 3, 4, 7, 8, 16, 10**15, 2**64]),
        st.sampled_from([-1.0, 0.0, 0.5, 1.5, 1e300, math.nan, math.inf]),
        st.text(max_size=8),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def healthy(dirs, tmp_path_factory):
    """One intact directory per family and tokenizer, copied and damaged by the fuzz below."""
    root = tmp_path_factory.mktemp("healthy")
    for name in ("char16", "bpe20", "bert8", "seq2seq3"):
        shutil.copytree(dirs / name, root / name)
    return root


def _damage(directory: Path, file: str, kind: str, at: int, value, blob: bytes) -> None:
    path = directory / file
    data = path.read_bytes()
    if kind == "delete":
        path.unlink()
    elif kind == "truncate":
        path.write_bytes(data[: at % (len(data) + 1)])
    elif kind == "bytes":
        path.write_bytes(blob)
    elif kind == "json":
        path.write_text(json.dumps(value))
    else:  # one field of a JSON object set to a value of any type, or left out
        with contextlib.suppress(ValueError):
            obj = json.loads(data)
            if isinstance(obj, dict) and obj:
                key = sorted(obj)[at % len(obj)]
                if kind == "field":
                    obj[key] = value
                else:
                    del obj[key]
                path.write_text(json.dumps(obj))


def test_fuzz_damaged_model_directories_are_loaded_or_refused_in_one_line(healthy):
    """A directory with one file deleted, truncated, replaced by bytes or by any JSON, or one config/tokenizer field
    set to a value of any type or left out: the explorer's loader (and its first answer), tformer.load_pretrained
    and `tformer explore --model DIR --export` load it or refuse it with one line (ValueError or OSError) that
    names the file or directory; never another exception, never a traceback."""
    families = sorted(p.name for p in healthy.iterdir())

    @FUZZ
    @given(
        family=st.sampled_from(families),
        pick=st.integers(0, 100),
        kind=_DAMAGE,
        at=st.integers(0, 10**6),
        value=_FIELD_VALUES,
        blob=st.binary(max_size=64),
    )
    def load(family, pick, kind, at, value, blob):
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp) / family
            shutil.copytree(healthy / family, directory)
            files = sorted(p.name for p in directory.iterdir())
            _damage(directory, files[pick % len(files)], kind, at, value, blob)
            for load in (lambda d: Session.open(d).call("info", {}), tformer.load_pretrained):
                try:
                    load(directory)
                except (ValueError, OSError) as err:
                    message = str(err)
                    assert "\n" not in message and str(directory) in message, message
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code = main(["explore", "--model", str(directory), "--export", str(Path(tmp) / "page.html")])
            lines = err.getvalue().strip().splitlines()
            assert code == 0 and not lines or code in (1, 2) and len(lines) == 1, err.getvalue()
            assert code == 0 or lines[0].startswith("tformer explore: error: ") and str(directory) in lines[0]

    load()
