"""The Python API answers as clearly as the command line (issue 41, item 6).

Each public entry point checks its arguments before it works, in the words of the flag that sets the same thing
(``batch_size must be a positive integer, got -1``, as ``--batch-size`` says it), naming the parameter, what it got
and what it takes: ``Translator.translate`` / ``evaluate``, ``tformer.load``, ``generate_lm``, ``lm.generate``,
``fill_mask``, ``SentenceEncoder.encode``, ``TextClassifier.predict``, ``Loaded.encode``, ``from_hf`` and the
families' training entry points (``lm.setup``, ``translation.setup``, ``bert.setup``, ``bert.setup_classifier``,
``TrainConfig``). A text with a lone surrogate or a NUL is refused by ``tformer.text``'s check, never by a
``TypeError`` from inside ``tokenizers``. The bounds are one table (``tformer.checks.SETTINGS``) that the flags
parse with too.
"""

from __future__ import annotations

import re

import pytest
import torch

import test_text_and_boundary as boundary
import tformer
from tformer import Bert, BertConfig
from tformer.bert import SentenceEncoder, TextClassifier, fill_mask
from tformer.generation import generate_lm

models = boundary.models  # the fixture: a tiny translator, character LM and BERT
TOO_MANY = "an integer in [1, 100000]"


@pytest.fixture(scope="module")
def api(models):
    """What the entry points are called on."""
    from tformer import lm
    from tformer.translation import Translator

    gpt, char = lm.load(models["lm"])
    bert = tformer.load(models["bert"])
    torch.manual_seed(0)
    head = Bert(BertConfig(**{**bert.config.to_dict(), "num_labels": 2})).eval()
    return {
        "translator": Translator.load(models["translation"]),
        "gpt": gpt,
        "char": char,
        "bert": bert,
        "encoder": SentenceEncoder.from_loaded(bert),
        "classifier": TextClassifier(head, bert.tokenizer, ["no", "yes"]),
        "models": models,
    }


def _translate(**kw):
    return lambda a: a["translator"].translate(**{"sentences": ["the cat"], **kw})


def _generate_lm(prompts, n=3, **kw):
    return lambda a: generate_lm(a["gpt"], prompts, n, **kw)


def _lm_generate(prompt="the", n=3, **kw):
    from tformer import lm

    return lambda a: lm.generate(a["gpt"], a["char"], prompt, n, **kw)


def _load(**kw):
    return lambda a: tformer.load(kw.pop("path", a["models"]["lm"]), **kw)


def _setup(family: str, **kw):
    from tformer import bert, lm, translation

    setup = {
        "lm": lm.setup,
        "translation": translation.setup,
        "bert": bert.setup,
        "classify": bert.setup_classifier,
    }[family]
    return lambda a: setup("no-such-data.txt", "no-such-run", **{"max_steps": 1, **kw})


# (entry point, call, exception, the message: the parameter, what it got, what it takes)
CASES = [
    ("translate", _translate(batch_size=-1), ValueError, "batch_size must be a positive integer, got -1"),
    ("translate", _translate(batch_size=0), ValueError, "batch_size must be a positive integer, got 0"),
    ("translate", _translate(max_new_tokens=0), ValueError, f"max_new_tokens must be {TOO_MANY}, got 0"),
    ("translate", _translate(beam=0), ValueError, "beam must be an integer in [1, 64], got 0"),
    ("translate", _translate(length_penalty=-1.0), ValueError, "length_penalty must be a number in [0, 10], got -1.0"),
    ("translate", _translate(seed=-1), ValueError, "seed must be an integer in [0, 2**32 - 1], got -1"),
    ("translate", _translate(sampling="greedy"), ValueError, "sampling must be a SamplingConfig or None, got str"),
    (
        "translate",
        _translate(sentences=["fine", "bad \ud800 text"]),
        ValueError,
        "sentences[1]: not valid UTF-8 (lone surrogate U+D800 at column 5)",
    ),
    ("translate", _translate(sentences=["a\x00b"]), ValueError, "sentences[0]: holds a NUL character at column 2"),
    ("translate", _translate(sentences=5), TypeError, "sentences must be a list of strings, got an int (5)"),
    (
        "evaluate",
        lambda a: a["translator"].evaluate(["the cat", "the dog"], [["le chat"]]),
        ValueError,
        "references[0] has 1 sentences, sources has 2",
    ),
    (
        "load",
        _load(family="gtp"),
        ValueError,
        "family must be one of 'seq2seq', 'gpt', 'bert' (or a list of them, or None for any), got 'gtp'",
    ),
    ("load", _load(device="gpu"), ValueError, "device must be cpu, cuda, cuda:N or mps, got 'gpu'"),
    ("load", _load(dtype=torch.int8), ValueError, "dtype must be None (as stored) or a floating torch.dtype"),
    ("load", _load(path=5), TypeError, "path must be a directory (a str or a path), got int 5"),
    (
        "generate_lm",
        _generate_lm("ROMEO:"),
        TypeError,
        "prompts must be token ids (a list of lists of ints, or a (B, T) tensor), got text 'ROMEO:'",
    ),
    ("generate_lm", _generate_lm([[1, 999]]), ValueError, "prompts[0] holds 999: token ids are integers in [0, "),
    ("generate_lm", _generate_lm([[1, 2]], 0), ValueError, f"max_new_tokens must be {TOO_MANY}, got 0"),
    ("generate_lm", _generate_lm([[1, 2]], seed=-1), ValueError, "seed must be an integer in [0, 2**32 - 1], got -1"),
    ("lm.generate", _lm_generate([1, 2]), TypeError, "prompt must be a string (the text to continue), got list"),
    ("lm.generate", _lm_generate("a \udce9"), ValueError, "prompt: not valid UTF-8 (byte 0xe9 at column 3)"),
    ("lm.generate", _lm_generate(n=0), ValueError, f"max_new_tokens must be {TOO_MANY}, got 0"),
    ("lm.generate", _lm_generate(stop=[5]), TypeError, "stop[0] must be a string, got an int (5)"),
    (
        "fill_mask",
        lambda a: fill_mask(a["bert"].model, a["bert"].tokenizer, "the [MASK] sat", top_k=0),
        ValueError,
        "top_k must be an integer in [1, 1000000], got 0",
    ),
    (
        "fill_mask",
        lambda a: fill_mask(a["bert"].model, a["bert"].tokenizer, "the [MASK] \ud800", top_k=2),
        ValueError,
        "text: not valid UTF-8 (lone surrogate U+D800 at column 12)",
    ),
    (
        "encode",
        lambda a: a["encoder"].encode("one sentence"),
        TypeError,
        "sentences must be a list of strings (wrap one text in a list), got a str ('one sentence')",
    ),
    (
        "encode",
        lambda a: a["encoder"].encode(["a cat"], batch_size=0),
        ValueError,
        "batch_size must be a positive integer, got 0",
    ),
    (
        "encode",
        lambda a: a["encoder"].encode(["a \x00 cat"]),
        ValueError,
        "sentences[0]: holds a NUL character at column 3",
    ),
    ("predict", lambda a: a["classifier"].predict(["a cat", 5]), TypeError, "texts[1] must be a string, got an int"),
    ("predict", lambda a: a["classifier"].predict("a \ud800"), ValueError, "texts[0]: not valid UTF-8 (lone"),
    ("Loaded.encode", lambda a: a["bert"].encode(5), TypeError, "text must be a string, got int 5"),
    ("Loaded.encode", lambda a: a["bert"].encode("\ud800"), ValueError, "text: not valid UTF-8 (lone surrogate"),
    (
        "from_hf",
        lambda a: tformer.from_hf({"model_type": "gpt2"}, [torch.zeros(1)]),
        TypeError,
        "state must map weight names to tensors (a state_dict), got list",
    ),
    (
        "from_hf",
        lambda a: tformer.from_hf({"model_type": "gpt2"}, {}, dtype=torch.int8),
        ValueError,
        "dtype must be None or a floating torch.dtype",
    ),
    ("lm.setup", _setup("lm", batch_size=0), ValueError, "batch_size must be a positive integer, got 0"),
    ("lm.setup", _setup("lm", max_len="64"), ValueError, "max_len must be a positive integer, got '64'"),
    ("translation.setup", _setup("translation", max_steps=-5), ValueError, "max_steps must be an integer >= 0, got -5"),
    ("translation.setup", _setup("translation", batch_tokens=0), ValueError, "batch_tokens must be a positive int"),
    ("bert.setup", _setup("bert", valid=-1), ValueError, "valid must be a fraction in [0, 1) or a whole count >= 1"),
    ("bert.setup", _setup("bert", seed=-1), ValueError, "seed must be an integer in [0, 2**32 - 1], got -1"),
    ("setup_classifier", _setup("classify", lr=0), ValueError, "lr must be a finite number > 0, got 0"),
    ("setup_classifier", _setup("classify", vocab_size=3), ValueError, "vocab_size must be an integer >= 6"),
    (
        "TrainConfig",
        lambda a: __import__("tformer.training.config").training.config.TrainConfig("x", epochs=0),
        ValueError,
        "epochs must be a positive integer, got 0",
    ),
]


@pytest.mark.parametrize("entry, call, error, message", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_entry_point_names_the_parameter_what_it_got_and_what_it_takes(api, entry, call, error, message):
    with pytest.raises(error) as raised:
        call(api)
    assert message in str(raised.value), (entry, str(raised.value))
    assert "\n" not in str(raised.value)


def test_the_flags_parse_with_the_bounds_the_library_checks():
    """One table of bounds: every flag whose setting tformer.checks.SETTINGS names parses with that very bound; a
    flag without a value (--resume, --no-fast) is a setting that takes True or False only."""
    from tformer.checks import SETTINGS, YesNo
    from tformer.cli.flags import FLAGS

    stricter = {"--max-steps": "a run of 0 steps: the library's way to carry a model over, not the command line's"}
    shared = {flag: f for flag, f in FLAGS.items() if (f.dest or flag[2:].replace("-", "_")) in SETTINGS}
    assert len(shared) >= 25, sorted(shared)
    for flag, f in shared.items():
        name, bound = f.dest or flag[2:].replace("-", "_"), f.type
        if f.action in ("store_true", "store_false"):
            assert isinstance(SETTINGS[name], YesNo), flag
            continue
        if flag in stricter:
            assert bound.low > SETTINGS[name].low and bound.high == SETTINGS[name].high, flag
            continue
        assert bound is SETTINGS[name] or repr(bound) == repr(SETTINGS[name]), (flag, bound, SETTINGS[name])


def test_a_bad_flag_and_a_bad_parameter_say_the_same_words(models, capsys):
    """``--batch-size 0`` and ``batch_size=0`` differ only in the name they give."""
    from tformer.cli import main

    with pytest.raises(SystemExit):  # argparse's usage error
        main(["translate", "--model", str(models["translation"]), "--batch-size", "0", "the cat"])
    flag = capsys.readouterr().err.strip().splitlines()[-1]
    said = re.sub(r"^.*argument --batch-size: ", "", flag)
    from tformer.translation import Translator

    with pytest.raises(ValueError) as raised:
        Translator.load(models["translation"]).translate(["the cat"], batch_size=0)
    assert str(raised.value) == f"batch_size {said}", (flag, raised.value)


def test_data_and_out_dir_given_as_something_else_than_a_path_are_named(tmp_path):
    """``lm.train(["a text", ...], out)``: pathlib's "expected str, bytes or os.PathLike object, not list" from inside
    tformer, naming no parameter; ``out_dir=None`` the same. The parameter is named, before anything is read."""
    from tformer import bert, lm, translation

    for call, said in (
        (
            lambda: lm.train(["some text"] * 10, tmp_path / "a", max_steps=1),
            r"^data must be a path \(a str or os.PathLike\), got \['some text'",
        ),  # fmt: skip
        (lambda: translation.train([("a", "b")] * 10, tmp_path / "b", max_steps=1), r"^data must be a path"),
        (lambda: bert.train_classifier({"a": "x"}, tmp_path / "c", max_steps=1), r"^data must be a path"),
        (
            lambda: lm.train(tmp_path / "no.txt", None, max_steps=1),
            r"^out_dir must be a path \(a str or os.PathLike\), got None",
        ),  # fmt: skip
        (
            lambda: lm.train(tmp_path / "no.txt", tmp_path / "d", max_steps=1, valid_data=3),
            r"^valid_data must be a path",
        ),  # fmt: skip
    ):
        with pytest.raises(ValueError, match=said):
            call()
    assert list(tmp_path.iterdir()) == []  # nothing written
