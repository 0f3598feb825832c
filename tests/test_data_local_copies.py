"""``tformer data download NAME --from PATH`` (``download(..., local=PATH)``) and the Tiny Shakespeare source.

A copy already on disk (this project's ../shared/data, a file a user fetched by hand) goes into the cache only as a
download would: unpacked, checked against the pinned size and sha256, renamed into place, or refused in one line
with the cache as it was. Tiny Shakespeare is pinned like Multi30k (its digest is checked against the shared copy in
``tests/test_data_trust.py``); a mirror serving other bytes is refused. Local files and a server on 127.0.0.1 only.
"""

from __future__ import annotations

import builtins
import gzip
from dataclasses import replace

import pytest

import test_data_trust as trust
from test_data_trust import leftovers, serve, sha, tformer
from tformer.translation import download as dl
from tformer.translation.download import SOURCES, RemoteFile, download

server = trust.server  # the fixture: an HTTP server on 127.0.0.1

TEXT = b"First Citizen:\nBefore we proceed any further, hear me speak.\n"


@pytest.fixture
def pinned_toy_text(monkeypatch):
    """Tiny Shakespeare's source pinned to TEXT instead (the real file is not in the tests)."""
    (remote,) = SOURCES["tinyshakespeare"]
    monkeypatch.setitem(SOURCES, "tinyshakespeare", [replace(remote, sha256=sha(TEXT), size=len(TEXT))])
    return remote


def test_tinyshakespeare_is_one_pinned_file_of_the_char_rnn_commit():
    (remote,) = SOURCES["tinyshakespeare"]
    assert remote.url.startswith("https://raw.githubusercontent.com/karpathy/char-rnn/")
    assert remote.url.endswith("/data/tinyshakespeare/input.txt") and remote.filename == "tinyshakespeare.txt"
    assert remote.size == 1_115_394 and len(remote.sha256 or "") == 64


def test_a_local_copy_lands_verified(tmp_path, pinned_toy_text, capsys):
    copy = tmp_path / "mine.txt"
    copy.write_bytes(TEXT)
    cache = tmp_path / "cache"
    path = download("tinyshakespeare", cache, local=copy)
    assert path == cache / "tinyshakespeare" / "tinyshakespeare.txt" and path.read_bytes() == TEXT
    assert path.stat().st_mode & 0o777 == 0o644 and copy.read_bytes() == TEXT  # a copy: the original stays
    said = capsys.readouterr().out
    assert f"copied {copy} -> {path} ({len(TEXT)} bytes, sha256 {sha(TEXT)}, verified)" in said
    assert download("tinyshakespeare", cache, local=tmp_path / "gone.txt") == path  # cached and verified: kept
    assert leftovers(cache) == ["tinyshakespeare/tinyshakespeare.txt"]


def test_a_local_copy_with_other_bytes_is_refused_and_the_cache_kept(tmp_path, pinned_toy_text):
    cache = tmp_path / "cache"
    good = tmp_path / "good.txt"
    good.write_bytes(TEXT)
    path = download("tinyshakespeare", cache, local=good)
    other = tmp_path / "other.txt"
    other.write_bytes(TEXT.replace(b"hear", b"HEAR"))
    with pytest.raises(ValueError, match=rf"^{other}: refused: its sha256 is {sha(other.read_bytes())} .*expected"):
        download("tinyshakespeare", cache, local=other, force=True)
    assert path.read_bytes() == TEXT and leftovers(cache) == ["tinyshakespeare/tinyshakespeare.txt"]


def test_the_real_pin_refuses_anything_but_tiny_shakespeare(tmp_path):
    fake = tmp_path / "tinyshakespeare.txt"
    fake.write_bytes(TEXT)
    expected = "expected sha256 86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed, 1,115,394 bytes"
    with pytest.raises(ValueError, match=f"refused: its sha256 is {sha(TEXT)} .*; {expected}"):
        download("tinyshakespeare", tmp_path / "cache", local=tmp_path)  # a directory holding it
    assert leftovers(tmp_path / "cache") == []


def test_the_shared_copy_goes_into_the_cache(tmp_path, shared_data):
    path = download("tinyshakespeare", tmp_path / "cache", local=shared_data("tinyshakespeare.txt"))
    assert path.read_bytes() == shared_data("tinyshakespeare.txt").read_bytes()


def test_a_directory_of_several_files_by_cache_name_or_url_name(tmp_path, monkeypatch, capsys):
    files = {"a.txt": b"one\ntwo\n", "b.txt": "trois\nquatre \u00e9\n".encode()}
    remotes = [RemoteFile(f"https://example.invalid/{n}.gz", n, sha256=sha(d), size=len(d)) for n, d in files.items()]
    monkeypatch.setitem(SOURCES, "toy", remotes)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "a.txt").write_bytes(files["a.txt"])  # unpacked, under its cache name
    (mirror / "b.txt.gz").write_bytes(gzip.compress(files["b.txt"]))  # as its URL serves it
    target = download("toy", tmp_path / "cache", local=mirror)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == files
    assert capsys.readouterr().out.count("verified") == 2


def test_local_paths_that_cannot_stand_for_the_source_are_one_line_each(tmp_path, monkeypatch):
    copy = tmp_path / "t.txt"
    copy.write_bytes(TEXT)
    with pytest.raises(ValueError, match=r"^--from '.*nowhere' is not a file or a directory holding it$"):
        download("tinyshakespeare", tmp_path / "cache", local=tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"^--from '.*t\.txt' is not a directory holding its files$"):
        download("multi30k", tmp_path / "cache", local=copy)
    with pytest.raises(ValueError, match=r"^--from '.*' has no train\.en or train\.en\.gz$"):
        download("multi30k", tmp_path / "cache", local=tmp_path)
    with pytest.raises(TypeError, match=r"^local \(--from\) must be a path, got 3$"):
        download("tinyshakespeare", tmp_path / "cache", local=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^--url and --from: give one"):
        download("tinyshakespeare", tmp_path / "cache", "http://127.0.0.1:9/", local=copy)
    assert leftovers(tmp_path / "cache") == []


def test_an_unreadable_local_copy_is_one_line(tmp_path, monkeypatch):
    copy = tmp_path / "t.txt"
    copy.write_bytes(TEXT)

    def refusing(file, *args, **kwargs):  # what a mode of 0 does (root reads such a file anyway)
        if str(file) == str(copy):
            raise PermissionError(13, "Permission denied", str(file))
        return builtins.open(file, *args, **kwargs)

    monkeypatch.setattr(dl, "open", refusing, raising=False)
    with pytest.raises(ValueError, match=r"^--from: '.*t\.txt' cannot be read \(Permission denied\)$"):
        download("tinyshakespeare", tmp_path / "cache", local=copy)
    assert leftovers(tmp_path / "cache") == []


def test_a_mirror_serving_other_bytes_is_refused(server, tmp_path):
    routes, url = server
    routes["input.txt"] = serve(TEXT)
    with pytest.raises(ValueError, match=rf"^{url}/input\.txt: refused: its sha256 is {sha(TEXT)}"):
        download("tinyshakespeare", tmp_path / "cache", url)
    assert leftovers(tmp_path / "cache") == []


def test_a_mirror_serving_the_pinned_bytes_lands(server, tmp_path, pinned_toy_text):
    routes, url = server
    routes["input.txt"] = serve(TEXT)
    assert download("tinyshakespeare", tmp_path / "cache", url).read_bytes() == TEXT


def test_cli_from_a_local_copy(tmp_path):
    cache = tmp_path / "cache"
    fake = tmp_path / "fake.txt"
    fake.write_bytes(TEXT)
    r = tformer("data", "download", "tinyshakespeare", "--cache", str(cache), "--from", str(fake))
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{fake}: refused: its sha256 is {sha(TEXT)}" in lines[0] and leftovers(cache) == []
    r = tformer("data", "download", "tinyshakespeare", "--from", str(fake), "--url", "http://127.0.0.1:9/")
    assert r.returncode != 0 and "--url and --from: give one" in r.stderr and "Traceback" not in r.stderr
