"""Data for translation: readers, normalisation, filtering, grouped splits, tokenizers, batches, download."""

import http.server
import io
import threading
import zipfile

import pytest
import torch

from tformer.tokenizers import BPETokenizer, train_tokenizer
from tformer.tokens import TRANSLATION_EOS as EOS
from tformer.tokens import TRANSLATION_PAD as PAD
from tformer.tokens import TRANSLATION_SOS as SOS
from tformer.tokens import TRANSLATION_SPECIALS as SPECIALS
from tformer.translation.batching import make_batch, token_budget_batches
from tformer.translation.download import download
from tformer.translation.pairs import filter_pairs, group_references, normalize, read_aligned, read_tsv, split_pairs
from tformer.translation.toy_corpus import builtin_pairs


def test_normalize_unifies_spaces_before_punctuation():
    assert normalize("Cours\u202f!") == "Cours !"
    assert normalize("Quoi\u00a0?") == "Quoi ?"
    assert normalize("  Je   vais  bien. ") == "Je vais bien."
    assert normalize("e\u0301te\u0301") == "été"  # NFD → NFC


def test_read_tsv_two_and_three_columns(tmp_path):
    f = tmp_path / "pairs.tsv"
    f.write_text(
        "Run!\tCours\u202f!\tCC-BY 2.0 (France) Attribution: tatoeba.org #906328\nI'm OK.\tJe vais bien.\n",
        encoding="utf-8",
    )
    assert read_tsv(f) == [("Run!", "Cours !"), ("I'm OK.", "Je vais bien.")]


def test_a_blank_tsv_line_of_spaces_is_skipped_as_an_empty_one_is_by_both_readers(tmp_path):
    from tformer.data.pairs import read_pairs

    f = tmp_path / "pairs.tsv"
    f.write_text("A dog.\tUn chien.\n\n   \n \t \nA cat.\tUn chat.\n", encoding="utf-8")
    expected = [("A dog.", "Un chien."), ("A cat.", "Un chat.")]
    assert read_tsv(f) == expected and list(read_pairs([f])) == expected


def test_read_tsv_rejects_one_column(tmp_path):
    f = tmp_path / "bad.tsv"
    f.write_text("only one column\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.tsv:1"):
        read_tsv(f)


def test_read_aligned_and_length_mismatch(tmp_path):
    (tmp_path / "a.en").write_text("A dog.\nA cat.\n")
    (tmp_path / "a.fr").write_text("Un chien.\nUn chat.\n")
    (tmp_path / "b.fr").write_text("Un chien.\n")
    assert read_aligned(tmp_path / "a.en", tmp_path / "a.fr") == [("A dog.", "Un chien."), ("A cat.", "Un chat.")]
    with pytest.raises(ValueError, match="differ in length"):
        read_aligned(tmp_path / "a.en", tmp_path / "b.fr")


def test_filter_counts_empty_and_long():
    kept, stats = filter_pairs([("a", "b"), ("", "x"), ("y", ""), ("z" * 50, "w")], max_chars=10)
    assert kept == [("a", "b")] and (stats.kept, stats.empty, stats.too_long) == (1, 2, 1)


def test_split_groups_by_source_and_is_deterministic():
    pairs = [(f"s{i}", f"t{i}-{j}") for i in range(200) for j in range(1 + i % 3)]
    a, b = split_pairs(pairs, 0.1, 0.1, seed=3), split_pairs(pairs, 0.1, 0.1, seed=3)
    assert a == b
    assert split_pairs(pairs, 0.1, 0.1, seed=4).valid != a.valid
    sources = [{s for s, _ in part} for part in (a.train, a.valid, a.test)]
    assert not (sources[0] & sources[1]) and not (sources[0] & sources[2]) and not (sources[1] & sources[2])
    assert len(sources[1]) == 20 and len(sources[2]) == 20
    assert sorted(a.train + a.valid + a.test) == sorted(pairs)  # every reference kept, none duplicated


def test_group_references_pads_with_empty_strings():
    sources, refs = group_references([("a", "x1"), ("b", "y1"), ("a", "x2")])
    assert sources == ["a", "b"] and refs == [["x1", "y1"], ["x2", ""]]


def test_shared_tatoeba_reads_and_normalises(shared_data):
    pairs = read_tsv(shared_data("tatoeba-eng-fra.tsv"))
    assert len(pairs) == 162_928
    assert ("I'm OK.", "Je vais bien.") in pairs
    assert not any("\u202f" in t or "\u00a0" in t for _, t in pairs)


def test_builtin_corpus_has_the_notes_example_and_grammar():
    pairs = dict(builtin_pairs())
    assert pairs["I am good."] == "Je vais bien."
    assert pairs["She is tired."] == "Elle est fatiguée."  # agreement
    assert pairs["They are happy."] == "Ils sont heureux."
    assert pairs["I like music."] == "J'aime la musique."  # elision
    assert pairs["I do not eat an apple."] == "Je ne mange pas de pomme."  # partitive after negation
    assert pairs["Does she have a dog?"] == "Est-ce qu'elle a un chien ?"
    assert len(pairs) > 1000


def test_tokenizer_specials_first_and_round_trip(tmp_path):
    texts = [t for pair in builtin_pairs() for t in pair]
    tok = train_tokenizer("bpe", texts, vocab_size=300)
    assert [tok.id_to_token(i) for i in range(4)] == SPECIALS and (PAD, SOS, EOS) == (0, 2, 3)
    for text in ["Je vais bien.", "Est-ce qu'elle a un chien ?", "I do not eat an apple."]:
        assert tok.decode(tok.encode(text)) == text
    assert tok.decode([SOS] + tok.encode("Je vais bien.") + [EOS]) == "Je vais bien."  # the specials are skipped
    tok.save(tmp_path, "tgt_")
    again = BPETokenizer.load(tmp_path, "tgt_")
    assert again.encode("Je vais bien.") == tok.encode("Je vais bien.") and again.vocab_size == tok.vocab_size


def test_make_batch_teacher_forcing_offsets():
    batch = make_batch([([5, 6, 7], [10, 11, 12]), ([8], [13])])
    assert batch.tgt_in.tolist() == [[SOS, 10, 11, 12], [SOS, 13, PAD, PAD]]
    assert batch.tgt_out.tolist() == [[10, 11, 12, EOS], [13, EOS, PAD, PAD]]
    assert batch.src.tolist() == [[5, 6, 7], [8, PAD, PAD]]
    real = batch.tgt_out != PAD
    # labels are the inputs shifted left by one: input t+1 == label t wherever both are real tokens
    assert torch.equal(
        batch.tgt_in[:, 1:][real[:, :-1] & (batch.tgt_in[:, 1:] != PAD)],
        batch.tgt_out[:, :-1][real[:, :-1] & (batch.tgt_in[:, 1:] != PAD)],
    )
    assert batch.n_tokens == 6


def test_token_budget_batches_respect_budget_and_cover_everything():
    g = torch.Generator().manual_seed(0)
    pairs = [
        ([1] * int(torch.randint(1, 30, (1,), generator=g)), [1] * int(torch.randint(1, 30, (1,), generator=g)))
        for _ in range(300)
    ]
    batches = token_budget_batches(pairs, batch_tokens=200, seed=1)
    assert sorted(i for b in batches for i in b) == list(range(300))
    for b in batches:
        longest = max(max(len(pairs[i][0]), len(pairs[i][1]) + 1) for i in b)
        assert longest * len(b) <= 200 or len(b) == 1
    assert batches == token_budget_batches(pairs, batch_tokens=200, seed=1)
    assert batches != token_budget_batches(pairs, batch_tokens=200, seed=2)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def local_server(tmp_path):
    """An HTTP server on 127.0.0.1 serving tmp_path/www."""
    www = tmp_path / "www"
    www.mkdir()
    handler = lambda *a, **k: _Quiet(*a, directory=str(www), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield www, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_download_from_local_server(local_server, tmp_path):
    www, url = local_server
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("fra-eng/fra.txt", "I'm OK.\tJe vais bien.\n")
        z.writestr("fra-eng/_about.txt", "about")
    (www / "fra-eng.zip").write_bytes(buf.getvalue())
    path = download("tatoeba-eng-fra", tmp_path / "cache", base_url=url)
    assert path == tmp_path / "cache" / "tatoeba-eng-fra" / "tatoeba-eng-fra.tsv"
    assert read_tsv(path) == [("I'm OK.", "Je vais bien.")]
    (www / "fra-eng.zip").unlink()  # cached: a second call does not fetch again
    assert download("tatoeba-eng-fra", tmp_path / "cache", base_url=url) == path


def test_download_errors_are_clear(local_server, tmp_path):
    _, url = local_server
    with pytest.raises(
        ConnectionError,
        match="could not download .*; without the network, give a copy on disk: tformer data download NAME --from PATH",
    ):
        download("tatoeba-eng-fra", tmp_path / "c", base_url=url)  # 404
    with pytest.raises(ValueError, match="unknown source"):
        download("nope", tmp_path / "c")
