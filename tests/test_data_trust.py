"""Trust in data: downloads are verified (a local HTTP server that is slow, lies, serves corrupt or hostile
archives), and the data a user gives is the data used (a corpus directory's own validation file; a run
without validation data says so and never reports a loss of 0)."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from tformer.translation import download as dl
from tformer.translation.download import SOURCES, RemoteFile, download
from tformer.translation.pairs import load_splits, read_tsv

TSV = "I'm OK.\tJe vais bien.\nRun!\tCours !\n"


# --------------------------------------------------------------------------------------- a local server


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        server = self.server
        with server.lock:
            server.requests += 1
            over = server.requests > server.max_requests
        route = server.routes.get(self.path.rsplit("/", 1)[-1])
        if over or route is None:
            self.send_error(503 if over else 404)
            return
        route(self)


def serve(body: bytes, length: int | None = None):
    """A route answering ``body``, announcing ``length`` bytes (default: the truth)."""

    def route(h):
        h.send_response(200)
        h.send_header("Content-Length", str(len(body) if length is None else length))
        h.end_headers()
        h.wfile.write(body)

    return route


def trickle(h, seconds: float = 6.0):
    """A route that sends a byte every 50 ms (each read returns quickly: only an overall deadline stops it)."""
    h.send_response(200)
    h.send_header("Content-Length", "1000000")
    h.end_headers()
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            h.wfile.write(b"P")
            h.wfile.flush()
            time.sleep(0.05)
    except OSError:  # the client gave up
        pass


@pytest.fixture
def server():
    """An HTTP server on 127.0.0.1 only: at most 50 requests, shut down by the test (or after 120 s)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.routes, httpd.requests, httpd.max_requests, httpd.lock = {}, 0, 50, threading.Lock()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    guard = threading.Timer(120, httpd.shutdown)
    guard.daemon = True
    guard.start()
    yield httpd.routes, f"http://127.0.0.1:{httpd.server_address[1]}"
    guard.cancel()
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(zipfile.ZipInfo(name), data, zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def toy(monkeypatch):
    """A pinned two-file source ``toy`` (gzip), like Multi30k's: a.txt and b.txt with known size and digest."""
    files = {"a.txt": b"one\ntwo\n", "b.txt": "trois\nquatre \u00e9\n".encode()}
    remotes = [RemoteFile(f"https://example.invalid/{n}.gz", n, sha256=sha(d), size=len(d)) for n, d in files.items()]
    monkeypatch.setitem(SOURCES, "toy", remotes)
    return files


def leftovers(cache: Path) -> list[str]:
    """Every file under the cache (temp files start with a dot)."""
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())


# ------------------------------------------------------------------------------------------ good bytes


def test_good_download_lands_verified(server, tmp_path, capsys):
    routes, url = server
    routes["fra-eng.zip"] = serve(zip_bytes({"fra-eng/fra.txt": TSV.encode(), "fra-eng/_about.txt": b"about"}))
    path = download("tatoeba-eng-fra", tmp_path / "cache", url, sha256=sha(TSV.encode()).upper())
    assert path == tmp_path / "cache" / "tatoeba-eng-fra" / "tatoeba-eng-fra.tsv"
    assert path.read_bytes() == TSV.encode()
    assert read_tsv(path) == [("I'm OK.", "Je vais bien."), ("Run!", "Cours !")]
    assert f"sha256 {sha(TSV.encode())}, verified" in capsys.readouterr().out
    assert leftovers(tmp_path / "cache") == ["tatoeba-eng-fra/tatoeba-eng-fra.tsv"]
    assert path.stat().st_mode & 0o777 == 0o644


def test_pinned_gzip_source_verified(server, tmp_path, toy):
    routes, url = server
    for name, data in toy.items():
        routes[f"{name}.gz"] = serve(gzip.compress(data))
    target = download("toy", tmp_path / "cache", url)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == toy
    routes.clear()  # in the cache and verified: no request needed
    assert download("toy", tmp_path / "cache", url) == target


@pytest.mark.parametrize(
    "name, folder, commit",
    [
        ("multi30k", "multi30k/", "a3d2e0d26b56f3846f66a952536ffed4e401d05a"),
        ("tinyshakespeare", "", "6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e"),  # karpathy/char-rnn
    ],
)
def test_builtin_digests_match_the_shared_copies(name, folder, commit, shared_data):
    """The pinned sizes and digests are those of ../shared/data's copies (not the live server), and the URLs name
    the commit the copies came from (../shared/data/README.md)."""
    for remote in SOURCES[name]:
        data = shared_data(folder + remote.filename).read_bytes()
        assert (len(data), sha(data)) == (remote.size, remote.sha256), remote.filename
        assert f"/{commit}/" in remote.url


# ------------------------------------------------------------------------------------------- bad bytes


def test_slow_server_meets_the_overall_deadline(server, tmp_path):
    routes, url = server
    routes["fra-eng.zip"] = lambda h: trickle(h, 60)
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=r"fra-eng\.zip: not complete within the 1 s deadline"):
        download("tatoeba-eng-fra", tmp_path / "cache", url, timeout=1)
    assert time.monotonic() - start < 30  # the per-read socket timeout alone would wait for the whole 60 s trickle
    assert leftovers(tmp_path / "cache") == []


def test_content_length_lies(server, tmp_path):
    routes, url = server
    body = zip_bytes({"fra.txt": TSV.encode()})
    routes["fra-eng.zip"] = serve(body, length=len(body) + 500)  # announces more than it sends
    with pytest.raises(
        ConnectionError, match=rf"fra-eng\.zip: the server announced {len(body) + 500:,} bytes and sent"
    ):
        download("tatoeba-eng-fra", tmp_path / "cache", url)
    routes["fra-eng.zip"] = serve(body, length=5 << 20)  # announces more than the cap: refused before reading
    with pytest.raises(ValueError, match=r"announces 5,242,880 bytes, more than the cap of 1,048,576"):
        download("tatoeba-eng-fra", tmp_path / "cache", url, max_mb=1)
    routes["fra-eng.zip"] = serve(body, length=len(body) - 40)  # announces less: the archive arrives cut short
    with pytest.raises(ValueError, match=r"fra-eng\.zip: not a valid zip archive"):
        download("tatoeba-eng-fra", tmp_path / "cache", url)
    assert leftovers(tmp_path / "cache") == []


def test_corrupt_archives_are_one_clear_error(server, tmp_path, toy):
    routes, url = server
    routes["fra-eng.zip"] = serve(os.urandom(3000))
    with pytest.raises(ValueError, match=r"fra-eng\.zip: not a valid zip archive"):
        download("tatoeba-eng-fra", tmp_path / "cache", url)
    routes["a.txt.gz"] = serve(b"\x1f\x8b\x08\x00" + os.urandom(200))  # a gzip header, then noise
    with pytest.raises(ValueError, match=r"a\.txt\.gz: not a valid gzip archive"):
        download("toy", tmp_path / "cache", url)
    routes["a.txt.gz"] = serve(gzip.compress(b"one\ntwo\n" * 500)[:-30])  # truncated
    with pytest.raises(ValueError, match=r"a\.txt\.gz: not a valid gzip archive"):
        download("toy", tmp_path / "cache", url)
    routes["fra-eng.zip"] = serve(zip_bytes({"fra.txt": b"\xff\xfe not UTF-8\t.\n"}))
    with pytest.raises(ValueError, match=r"tatoeba-eng-fra\.tsv is not UTF-8 text"):
        download("tatoeba-eng-fra", tmp_path / "cache", url)
    routes["fra-eng.zip"] = serve(zip_bytes({"fra.txt": b"<html>not pairs</html>\n"}))
    with pytest.raises(ValueError, match=r"is not tab-separated English<TAB>French lines"):
        download("tatoeba-eng-fra", tmp_path / "cache", url)
    routes["fra-eng.zip"] = serve(zip_bytes({"deu.txt": TSV.encode()}))
    with pytest.raises(ValueError, match=r"has 0 members named 'fra\.txt'"):
        download("tatoeba-eng-fra", tmp_path / "cache", url)
    assert leftovers(tmp_path / "cache") == []


def test_bombs_stop_at_the_cap(server, tmp_path, toy, monkeypatch):
    routes, url = server
    routes["a.txt.gz"] = serve(gzip.compress(b"\0" * (1 << 20)))  # 1 MiB of zeros in ~1 KiB
    with pytest.raises(ValueError, match=r"a\.txt\.gz: unpacks to more than 8 bytes \(the cap\)"):
        download("toy", tmp_path / "cache", url)  # a pinned size is the cap
    monkeypatch.setitem(SOURCES, "toy", [RemoteFile("https://example.invalid/a.txt.gz", "a.txt")])  # size unknown
    routes["a.txt.gz"] = serve(gzip.compress(b"\0" * (16 << 20), compresslevel=9))  # 16 MiB in ~16 KiB
    with pytest.raises(ValueError, match=r"unpacks to more than 1,048,576 bytes \(the cap\)"):
        download("toy", tmp_path / "cache", url, max_mb=1)  # --max-mb caps it
    # a zip member declaring more than the cap is refused before extraction
    routes["fra-eng.zip"] = serve(zip_bytes({"fra.txt": b"a\tb\n" * (1 << 19)}))  # 2 MiB
    with pytest.raises(ValueError, match=r"member 'fra\.txt' declares 2,097,152 bytes, more than the cap of 1,048,576"):
        download("tatoeba-eng-fra", tmp_path / "cache", url, max_mb=1)
    # a download larger than the cap stops while streaming (no Content-Length to refuse it up front)
    routes["b.txt.gz"] = serve(os.urandom(3 << 20), length=-1)
    monkeypatch.setitem(SOURCES, "toy", [RemoteFile("https://example.invalid/b.txt.gz", "b.txt")])
    with pytest.raises(ValueError, match=r"b\.txt\.gz: more than the cap of 1,048,576 bytes; stopped"):
        download("toy", tmp_path / "cache", url, max_mb=1)
    assert leftovers(tmp_path / "cache") == []


@pytest.mark.parametrize("name", ["../evil.txt", "fra-eng/../../evil.txt", "/tmp/tformer-evil.txt", "C:/evil.txt"])
def test_zip_path_traversal_is_refused(server, tmp_path, name):
    routes, url = server
    routes["fra-eng.zip"] = serve(zip_bytes({"fra-eng/fra.txt": TSV.encode(), name: b"pwned\t!\n"}))
    cache = tmp_path / "deep" / "cache"
    absolute = Path(name) if name.startswith("/tmp/") else None

    def stamp():  # the absolute target as it is (another run may have left one): the download must not touch it
        return absolute.stat().st_mtime_ns if absolute is not None and absolute.exists() else None

    before = stamp()
    with pytest.raises(ValueError, match=r"fra-eng\.zip: refused: the zip archive has a member outside its folder"):
        download("tatoeba-eng-fra", cache, url)
    assert leftovers(cache) == []
    assert not any("evil" in p.name for p in tmp_path.rglob("*"))
    assert stamp() == before


def test_sha256_mismatch_is_refused_and_the_old_file_kept(server, tmp_path, toy):
    routes, url = server
    cache = tmp_path / "cache"
    routes["fra-eng.zip"] = serve(zip_bytes({"fra.txt": TSV.encode()}))
    good = download("tatoeba-eng-fra", cache, url)
    routes["fra-eng.zip"] = serve(zip_bytes({"fra.txt": b"Hi.\tSalut.\n"}))
    with pytest.raises(
        ValueError, match=rf"fra-eng\.zip: refused: its sha256 is {sha(b'Hi.' + bytes([9]) + b'Salut.' + bytes([10]))}"
    ):
        download("tatoeba-eng-fra", cache, url, sha256=sha(TSV.encode()), force=True)
    assert good.read_bytes() == TSV.encode()
    assert leftovers(cache) == ["tatoeba-eng-fra/tatoeba-eng-fra.tsv"]
    # a pinned source: wrong content of the right size is refused too
    routes["a.txt.gz"] = serve(gzip.compress(b"six\ntwo\n"))
    with pytest.raises(ValueError, match=rf"a\.txt\.gz: refused: its sha256 is .* expected sha256 {sha(toy['a.txt'])}"):
        download("toy", cache, url)
    assert not (cache / "toy" / "a.txt").exists()
    # a cached file that no longer matches its pin is named, and left alone
    (cache / "toy").mkdir(exist_ok=True)
    (cache / "toy" / "a.txt").write_bytes(b"tampered")
    with pytest.raises(ValueError, match=r"toy/a\.txt \(already in the cache\): its sha256 is .*--force"):
        download("toy", cache, url)
    assert (cache / "toy" / "a.txt").read_bytes() == b"tampered"


def test_options_are_checked(tmp_path):
    with pytest.raises(ValueError, match="--sha256 must be 64 hexadecimal digits, got 'abc'"):
        download("tatoeba-eng-fra", tmp_path, sha256="abc")
    with pytest.raises(ValueError, match="--sha256 pins one file; multi30k has 6"):
        download("multi30k", tmp_path, sha256="0" * 64)
    with pytest.raises(ValueError, match="--url must be an http:// or https:// address, got 'file:///etc'"):
        download("multi30k", tmp_path, "file:///etc")
    with pytest.raises(ValueError, match="--timeout must be a number of seconds > 0"):
        download("multi30k", tmp_path, timeout=0)
    with pytest.raises(ValueError, match="unknown source 'nope'"):
        download("nope", tmp_path)
    assert leftovers(tmp_path) == []
    assert dl.DEFAULT_MAX_MB == 256


# ------------------------------------------------------------------------------------ through the CLI


def tformer(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tformer", *args], capture_output=True, text=True, timeout=timeout)


def test_cli_download_good_then_hostile_servers(server, tmp_path):
    routes, url = server
    cache = tmp_path / "cache"
    routes["fra-eng.zip"] = serve(zip_bytes({"fra-eng/fra.txt": TSV.encode()}))
    ok = tformer("data", "download", "tatoeba-eng-fra", "--url", url, "--cache", str(cache))
    good = cache / "tatoeba-eng-fra" / "tatoeba-eng-fra.tsv"
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip().endswith(str(good)) and good.read_bytes() == TSV.encode()

    cases = {  # route -> (extra flags, what the one-line message must say)
        "slow": (trickle, ["--timeout", "1"], "not complete within the 1 s deadline"),
        "traversal": (serve(zip_bytes({"fra.txt": TSV.encode(), "../x.txt": b"x"})), [], "outside its folder"),
        "mismatch": (serve(zip_bytes({"fra.txt": b"Hi.\tSalut.\n"})), ["--sha256", sha(TSV.encode())], "refused"),
        "corrupt": (serve(b"PK\x03\x04 not really a zip"), [], "not a valid zip archive"),
    }
    for case, (route, flags, says) in cases.items():
        routes["fra-eng.zip"] = route
        r = tformer("data", "download", "tatoeba-eng-fra", "--url", url, "--cache", str(cache), "--force", *flags)
        assert r.returncode != 0, case
        assert "Traceback" not in r.stderr + r.stdout, (case, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and f"{url}/fra-eng.zip" in lines[0] and says in lines[0], (case, r.stderr)
        assert good.read_bytes() == TSV.encode(), case  # the earlier good file is intact
        assert leftovers(cache) == ["tatoeba-eng-fra/tatoeba-eng-fra.tsv"], case


# ------------------------------------------------------------------------ the data a user gives is used


def write_multi30k(directory: Path, n_train: int = 60, n_val: int = 7, val: bool = True) -> None:
    directory.mkdir(parents=True)
    parts = {"train": n_train, "val": n_val} if val else {"train": n_train}
    for part, n in parts.items():
        (directory / f"{part}.en").write_text("".join(f"{part} sentence {i} .\n" for i in range(n)), encoding="utf-8")
        (directory / f"{part}.fr").write_text("".join(f"{part} phrase {i} .\n" for i in range(n)), encoding="utf-8")


def test_directory_with_val_trains_on_all_of_train_and_validates_on_val(tmp_path, capsys):
    write_multi30k(tmp_path / "m30k")
    split = load_splits(str(tmp_path / "m30k"), "en", "fr", valid=0.3, test=0.3)
    assert split.train == [(f"train sentence {i} .", f"train phrase {i} .") for i in range(60)]
    assert split.valid == [(f"val sentence {i} .", f"val phrase {i} .") for i in range(7)]
    assert split.test == []
    line = capsys.readouterr().out
    assert "60 train pairs (all of train.*), 7 validation pairs (val.*)" in line and "--valid/--test not used" in line
    # without val.*: the 90/5/5 split of train.* as before
    write_multi30k(tmp_path / "bare", val=False)
    split = load_splits(str(tmp_path / "bare"), "en", "fr", valid=0.05, test=0.05)
    assert (len(split.train), len(split.valid), len(split.test)) == (54, 3, 3)
    assert all(s.startswith("train") for s, _ in split.valid)
    # half a validation pair of files is an error that names the missing file
    (tmp_path / "m30k" / "val.fr").unlink()
    with pytest.raises(FileNotFoundError, match="has val.en but no val.fr"):
        load_splits(str(tmp_path / "m30k"), "en", "fr")


def test_cli_translation_on_a_directory_validates_on_val(tmp_path):
    write_multi30k(tmp_path / "m30k")
    out = tmp_path / "run"
    r = tformer(
        "train", "translation", "--data", str(tmp_path / "m30k"), "--out", str(out), "--preset", "tiny",
        "--vocab-size", "60", "--max-steps", "2", "--no-progress", "--bleu-sentences", "3", timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "60 train pairs (all of train.*), 7 validation pairs (val.*)" in r.stdout
    valid = (out / "data" / "valid.tsv").read_text(encoding="utf-8").splitlines()
    assert valid == [f"val sentence {i} .\tval phrase {i} ." for i in range(7)]
    done = [line for line in r.stdout.splitlines() if line.startswith("done:")]
    assert len(done) == 1 and "val_loss" in done[0] and "BLEU" in done[0]


# ------------------------------------------------------------------ no validation data: said, never a 0


def _eval_records(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return [r for r in records if "train_loss" not in r]


def test_translation_without_validation_says_so(tmp_path):
    from tformer import translation

    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"sentence {i} .\tphrase {i} .\n" for i in range(40)), encoding="utf-8")
    trainer, result = translation.train(
        str(data), tmp_path / "run", preset="tiny", vocab_size=60, valid=0, test=0, max_steps=2, progress=False
    )
    assert result == {"step": 2, "epoch": trainer.epoch} and trainer.best is None
    assert all(set(r) == {"step", "epoch"} for r in _eval_records(tmp_path / "run"))
    assert translation.Translator.load(tmp_path / "run").translate(["sentence 1 ."])  # the latest model is kept
    # BLEU not computed: the best model is picked by the validation loss, not by a BLEU of 0
    trainer, result = translation.train(
        str(data), tmp_path / "run2", preset="tiny", vocab_size=60, bleu_sentences=0, max_steps=2, progress=False
    )
    losses = [r["val_loss"] for r in _eval_records(tmp_path / "run2")]
    assert "bleu" not in result and trainer.task.metric == "val_loss" and trainer.best == min(losses) > 0


def test_lm_bert_classify_without_validation_say_so(tmp_path):
    import torch

    from tformer import bert, lm
    from tformer.lm.task import evaluate_stream

    text = tmp_path / "text.txt"
    text.write_text("To be, or not to be.\nThat is the question.\nWhether tis nobler.\n\n" * 10, encoding="utf-8")
    trainer, result = lm.train(text, tmp_path / "lm", "tiny", valid=0, max_len=16, max_steps=2, progress=False)
    assert set(result) == {"step", "epoch"} and trainer.best is None
    with pytest.raises(ValueError, match=r"nothing to score: the text has 1 token"):
        evaluate_stream(trainer.model, torch.tensor([3]), torch.ones(trainer.model.config.vocab_size, dtype=torch.long))
    trainer, result = bert.train(
        text, tmp_path / "bert", preset="tiny", vocab_size=200, valid=0, max_steps=2, progress=False
    )
    assert set(result) == {"step", "epoch"} and trainer.best is None
    tsv = tmp_path / "labels.tsv"
    tsv.write_text("".join(f"text number {i}\t{'ab'[i % 2]}\n" for i in range(20)), encoding="utf-8")
    trainer, result = bert.train_classifier(
        tsv, tmp_path / "cls", preset="tiny", vocab_size=200, valid=0, max_steps=2, progress=False
    )
    assert set(result) == {"step", "epoch"} and trainer.best is None
    assert bert.TextClassifier.load(tmp_path / "cls").labels == ["a", "b"]  # the latest model is kept


def test_cli_translation_and_classify_without_validation_done_lines(tmp_path, capsys):
    from tformer.cli import main

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"sentence {i} .\tphrase {i} .\n" for i in range(40)), encoding="utf-8")
    labels = tmp_path / "labels.tsv"
    labels.write_text("".join(f"text number {i}\t{'ab'[i % 2]}\n" for i in range(20)), encoding="utf-8")
    common = ["--preset", "tiny", "--vocab-size", "60", "--max-steps", "2", "--no-progress"]
    for family, data, none in (
        ("translation", pairs, ["--valid", "0", "--test", "0"]),
        ("classify", labels, ["--valid", "0"]),
    ):
        out = tmp_path / family
        assert main(["train", family, "--data", str(data), "--out", str(out), *none, *common]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "no validation data" in next(line for line in lines if line.startswith("data:")), family
        assert [line for line in lines if line.startswith("done:")] == [
            f"done: step 2, no validation data (the model kept is the latest) -> {out}"
        ], family


def test_cli_lm_without_validation_done_line(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("abcdefgh " * 200, encoding="utf-8")
    r = tformer(
        "train", "lm", "--data", str(text), "--out", str(tmp_path / "run"), "--valid", "0",
        "--max-len", "16", "--max-steps", "2", "--no-progress", timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "no validation data" in next(line for line in r.stdout.splitlines() if line.startswith("data:"))
    done = [line for line in r.stdout.splitlines() if line.startswith("done:")]
    assert done == [f"done: step 2, no validation data (the model kept is the latest) -> {tmp_path / 'run'}"]
    assert "val_loss" not in r.stdout
