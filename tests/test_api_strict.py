"""Every Python entry point as strict as its flag (issue 44, items 3 and 6).

* Yes/no settings (item 3): every ``bool`` parameter of the public API — found by walking the signatures of what
  ``tformer`` and its packages export, so a new one is covered or this test fails — refuses anything but ``True`` or
  ``False``, naming it: ``overwrite="no"`` is a true string (``lm.setup(overwrite="no")`` deleted the old run), 1 an
  int. A few are exempt, each with its reason (:data:`EXEMPT`).
* The other settings (item 6): each parameter of the families' training entry points and of ``TrainConfig`` is
  checked, before anything is read or written, against the bound its flag parses with (``tformer.checks.SETTINGS``,
  or the entry point's own ``BOUNDS``): a string where a number belongs, a fraction where a count does, a value out
  of range, an unknown name, a device this machine lacks — each a one-line error naming the parameter. The flags of
  ``tformer train ...`` parse with those very bounds, so the command line says what it said.
"""

from __future__ import annotations

import importlib
import inspect
import math

import pytest
import torch

import test_text_and_boundary as boundary
import tformer
from tformer import checks

models = boundary.models  # the fixture: a tiny translator, character LM and BERT

# ------------------------------------------------------------------------------------ the yes/no settings

# What the public API is: what these modules export (their __all__), and the training configuration
PUBLIC = [
    "tformer",
    "tformer.lm",
    "tformer.translation",
    "tformer.bert",
    "tformer.generation",
    "tformer.models",
    "tformer.hf",
    "tformer.explore",
    "tformer.inspection",
    "tformer.tokenizers",
    "tformer.nn.from_torch",
    "tformer.fast",
]
EXTRA = {"tformer.training.config": ["TrainConfig"], "tformer.training.trainer": ["Trainer"]}


def _functions(obj):
    """``obj`` (a function, or a class: its constructor) and a class's public methods, defined in tformer."""
    yield obj
    if inspect.isclass(obj):
        for name in dir(obj):
            attr = inspect.getattr_static(obj, name)
            fn = attr.__func__ if isinstance(attr, (classmethod, staticmethod)) else attr
            if not name.startswith("_") and inspect.isfunction(fn) and fn.__module__.startswith("tformer"):
                yield fn


def yes_no_parameters() -> set[str]:
    """``module.qualname:parameter`` of every parameter annotated ``bool`` in the public API."""
    found = set()
    for name in PUBLIC + list(EXTRA):
        module = importlib.import_module(name)
        for export in EXTRA.get(name, module.__all__):
            for fn in _functions(getattr(module, export)):
                if not callable(fn) or not (inspect.isclass(fn) or inspect.isfunction(fn)):
                    continue
                if inspect.isclass(fn) and issubclass(fn, BaseException):  # a warning's class: no settings
                    continue
                for p in inspect.signature(fn).parameters.values():
                    kinds = (
                        [p.annotation.__name__] if isinstance(p.annotation, type) else str(p.annotation).split(" | ")
                    )
                    if "bool" in kinds:
                        found.add(f"{fn.__module__}.{fn.__qualname__}:{p.name}")
    return found


EXEMPT = {
    # a pass's own arguments, given by the model's code on every call, not settings a user sets
    "tformer.models.gpt.GPT.forward": "a forward pass's argument",
    "tformer.models.bert.Bert.forward": "a forward pass's argument",
    "tformer.models.seq2seq.Seq2SeqTransformer.forward": "a forward pass's argument",
    "tformer.models.seq2seq.Seq2SeqTransformer.decode": "a forward pass's argument (tgt_padded, as forward's)",
    "tformer.nn.attention.MultiHeadAttention.forward": "a forward pass's argument",
    "tformer.nn.layers.Decoder.forward": "a forward pass's argument",
    "tformer.nn.layers.DecoderLayer.forward": "a forward pass's argument",
    "tformer.nn.layers.EncoderDecoder.forward": "a forward pass's argument",
    "tformer.nn.scaled_dot_product.scaled_dot_product_attention": "attention's per-call arguments (the notes' function)",
    "tformer.nn.cache.KVCache.reorder": "a beam step's argument (a bool or a tensor of rows)",
    "tformer.models.checkpoint.PretrainedMixin.load_state_dict": "torch.nn.Module's own, passed to it unchanged",
    "tformer.models.config.ModelConfig.check_token_id": "the configs' own validation, called with literals",
    # the notes' parts: a model builds them from its config (checked: ModelConfig, LayerConfig); no flag sets them
    "tformer.nn.attention.MultiHeadAttention": "a part of the notes, built from a checked config",
    "tformer.nn.feedforward.FeedForward": "a part of the notes, built from a checked config",
    "tformer.nn.layers.Encoder": "a part of the notes, built from a checked config",
    "tformer.nn.layers.Decoder": "a part of the notes, built from a checked config",
    "tformer.nn.layers.DecoderLayer": "a part of the notes, built from a checked config",
    "tformer.nn.layers.EncoderDecoder": "a part of the notes, built from a checked config",
    # a task the family's setup builds: setup_classifier decides untrained_mlm (from scratch or --init), no flag does
    "tformer.bert.classification.ClassifyTask": "built by setup_classifier, which decides untrained_mlm",
}


def _config(cls, family):
    sizes = {"gpt": {"vocab_size": 10}, "bert": {"vocab_size": 10}, "seq2seq": {"src_vocab_size": 10}}[family]
    if family == "seq2seq":
        sizes["tgt_vocab_size"] = 10
    return lambda a, kw: cls.preset("tiny", **sizes, **kw)


def _seq2seq(a):
    translator = a["translator"]
    return translator.model, torch.tensor([[3, 4, 5]]), translator.start_id, translator.eos_id


def _setup(family):
    from tformer import bert, lm, translation

    fn = {"lm": lm.setup, "translation": translation.setup, "bert": bert.setup, "classify": bert.setup_classifier}
    return lambda a, kw: fn[family]("no-such-data.txt", a["tmp"] / "run", **{"max_steps": 1, **kw})


def _tiny_gpt():
    return boundary._tiny(tformer.GPT, tformer.GPTConfig, vocab_size=10)


# How each is called with one parameter set (kw): every other argument valid
CALLS = {
    "tformer.lm.run.setup": _setup("lm"),
    "tformer.translation.run.setup": _setup("translation"),
    "tformer.bert.run.setup": _setup("bert"),
    "tformer.bert.run.setup_classifier": _setup("classify"),
    "tformer.translation.run.prepare": lambda a, kw: tformer.translation.prepare(None, a["tmp"] / "run", **kw),
    "tformer.translation.run.train_tokenizers": lambda a, kw: tformer.translation.train_tokenizers(None, **kw),
    "tformer.training.config.TrainConfig": lambda a, kw: _train_config(**kw),
    "tformer.models.config.ModelConfig": _config(tformer.GPTConfig, "gpt"),  # its fields, in a family's config
    "tformer.models.gpt.GPTConfig": _config(tformer.GPTConfig, "gpt"),
    "tformer.models.bert.BertConfig": _config(tformer.BertConfig, "bert"),
    "tformer.models.seq2seq.Seq2SeqConfig": _config(tformer.Seq2SeqConfig, "seq2seq"),
    "tformer.nn.layers.LayerConfig": lambda a, kw: tformer.LayerConfig(d_model=8, n_heads=2, d_ff=16, **kw),
    "tformer.generation.samplers.SamplingConfig": lambda a, kw: tformer.generation.SamplingConfig(**kw),
    "tformer.generation.generate.generate_lm": lambda a, kw: tformer.generation.generate_lm(
        a["gpt"], [[1, 2]], 2, **kw
    ),
    "tformer.generation.generate.translate_ids": lambda a, kw: tformer.generation.translate_ids(
        *_seq2seq(a), max_len=2, **kw
    ),
    "tformer.generation.beam.beam_search": lambda a, kw: tformer.generation.beam_search(
        *_seq2seq(a), beam_size=2, max_len=2, **kw
    ),
    "tformer.generation.static.StaticLMDecoder": lambda a, kw: tformer.generation.StaticLMDecoder(a["gpt"], **kw),
    "tformer.generation.static.StaticSeq2SeqDecoder": lambda a, kw: tformer.generation.StaticSeq2SeqDecoder(
        _seq2seq(a)[0], 1, **kw
    ),
    "tformer.lm.run.generate": lambda a, kw: tformer.lm.generate(a["gpt"], a["char"], "the", 2, **kw),
    "tformer.translation.translator.Translator.translate": lambda a, kw: a["translator"].translate(["the cat"], **kw),
    "tformer.loader.load": lambda a, kw: tformer.load(a["models"]["lm"], **kw),
    "tformer.lm.run.load": lambda a, kw: tformer.lm.load(a["models"]["lm"], **kw),
    "tformer.translation.translator.Translator.load": lambda a, kw: tformer.translation.Translator.load(
        a["models"]["translation"], **kw
    ),
    "tformer.loader.Loaded.export": lambda a, kw: tformer.load(a["models"]["lm"]).export(a["tmp"] / "export", **kw),
    "tformer.loader.Loaded.save": lambda a, kw: tformer.load(a["models"]["lm"]).save(a["tmp"] / "saved", **kw),
    "tformer.hf.export.export": lambda a, kw: tformer.hf.export(a["gpt"], a["tmp"] / "export", a["char"], **kw),
    "tformer.fast.quantize.quantize": lambda a, kw: tformer.quantize(_tiny_gpt(), "int8", **kw),
    "tformer.fast.speed_up": lambda a, kw: tformer.fast.speed_up(_tiny_gpt(), **kw),
    "tformer.tokenizers.base.Tokenizer.encode": lambda a, kw: a["char"].encode("the", **kw),
    "tformer.tokenizers.base.Tokenizer.encode_batch": lambda a, kw: a["char"].encode_batch(["the", "a"], **kw),
    "tformer.tokenizers.base.Tokenizer.tokens": lambda a, kw: a["char"].tokens("the", **kw),
    "tformer.tokenizers.base.Tokenizer.decode": lambda a, kw: a["char"].decode([4, 5], **kw),
    "tformer.tokenizers.base.Tokenizer.apply_chat_template": lambda a, kw: a["char"].apply_chat_template(
        [{"role": "user", "content": "the"}], **kw
    ),
    "tformer.translation.batching.token_budget_batches": lambda a, kw: tformer.translation.token_budget_batches(
        [([1, 2], [3])], 100, 0, **kw
    ),
    "tformer.translation.pairs.load_splits": lambda a, kw: tformer.translation.load_splits("builtin", **kw),
    "tformer.translation.pairs.split_corpus": lambda a, kw: tformer.translation.split_corpus([("a", "b")] * 4, **kw),
}


def _train_config(**kw):
    from tformer.training.config import TrainConfig

    return TrainConfig("unused", max_steps=1, **kw)


YES_NO = sorted(p for p in yes_no_parameters() if p.split(":")[0] not in EXEMPT)


@pytest.fixture(scope="module")
def api(models, tmp_path_factory):
    from tformer import lm
    from tformer.translation import Translator

    gpt, char = lm.load(models["lm"])
    return {
        "gpt": gpt,
        "char": char,
        "translator": Translator.load(models["translation"]),
        "models": models,
        "tmp": tmp_path_factory.mktemp("strict"),
    }


def test_every_yes_no_parameter_of_the_public_api_is_walked_or_exempt_with_a_reason():
    """The walk finds them (the ones issue 44 names among them), and each is called below or exempt: a new bool
    parameter fails here until it is one or the other; an entry for something gone fails too."""
    found = yes_no_parameters()
    for named in ("tformer.lm.run.setup:resume", "tformer.training.config.TrainConfig:overwrite"):
        assert named in found
    assert "tformer.generation.generate.generate_lm:compile" in found
    walked = {p.split(":")[0] for p in found}
    assert sorted(walked - set(CALLS) - set(EXEMPT)) == [], "call these in CALLS, or say in EXEMPT why not"
    assert sorted((set(CALLS) | set(EXEMPT)) - walked) == [], "no such bool parameter any more"


@pytest.mark.parametrize("value", ["no", 1], ids=["the-string-no", "the-int-1"])
@pytest.mark.parametrize("parameter", YES_NO)
def test_each_yes_no_parameter_takes_true_or_false_only_and_names_itself(api, parameter, value):
    where, name = parameter.split(":")
    with pytest.raises((ValueError, TypeError)) as raised:
        CALLS[where](api, {name: value})
    message = str(raised.value)
    assert f"{name} must be True" in message or f".{name} must be true or false" in message, message
    assert repr(value) in message and "\n" not in message, message


def test_yes_no_takes_true_false_and_where_it_may_a_function():
    """The check itself: a real bool passes; None, 0, 'False', a NumPy bool do not; compile takes a function."""
    np = pytest.importorskip("numpy")
    for good in (True, False):
        assert checks.yes_no.check(good, "x") is good
    for bad in (None, 0, 1.0, "False", "", np.bool_(True), torch.tensor(True)):
        with pytest.raises(checks.BadValue, match="^x must be True or False, got "):
            checks.yes_no.check(bad, "x")
    with pytest.raises(checks.BadValue, match=r"^resume must be True or False, got 1 of type int$"):
        checks.yes_no.check(1, "resume")
    step = checks.compile_option.check(torch.compile, "compile")
    assert step is torch.compile
    with pytest.raises(checks.BadValue, match="compile must be True, False or a function that compiles the step"):
        checks.compile_option.check("no", "compile")


def test_none_for_a_yes_no_setting_is_refused_not_taken_for_false(api):
    from tformer import lm

    with pytest.raises(ValueError, match="^overwrite must be True or False, got None"):
        lm.setup("no-such-data.txt", api["tmp"] / "run", max_steps=1, overwrite=None)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished lm run (best/, last/, log.jsonl) and its data; what a refusal must leave as it is."""
    from tformer import lm

    root = tmp_path_factory.mktemp("finished")
    data, out = root / "text.txt", root / "run"
    data.write_text(boundary.TEXT * 20, encoding="utf-8")
    lm.train(data, out, preset="tiny", max_len=16, batch_size=2, max_steps=1, batches_per_epoch=1, progress=False)
    return data, out


def _files(out) -> list[str]:
    return sorted(f"{p.relative_to(out).as_posix()} {p.stat().st_size}" for p in out.rglob("*") if p.is_file())


def test_a_string_no_for_overwrite_deletes_nothing(finished_run):
    """The case issue 44 found: lm.setup(overwrite="no") on a finished run deleted best/, last/ and log.jsonl."""
    from tformer import lm

    data, out = finished_run
    before = _files(out)
    assert any(f.startswith("log.jsonl ") for f in before) and any(f.startswith("last/") for f in before)
    with pytest.raises(ValueError, match="^overwrite must be True or False, got 'no'$"):
        lm.setup(data, out, preset="tiny", max_steps=2, overwrite="no")
    assert _files(out) == before


@pytest.mark.parametrize("family", ["lm", "translation", "bert", "classify"])
def test_missing_data_is_refused_before_an_overwrite_deletes_the_old_run(finished_run, family):
    """``setup("typo.txt", run, overwrite=True)`` deleted the old run, then found no data: now the data is read
    first (the flag checks --data exists when it is parsed)."""
    from tformer import bert, lm, translation

    fn = {"lm": lm.setup, "translation": translation.setup, "bert": bert.setup, "classify": bert.setup_classifier}
    _, out = finished_run
    before = _files(out)
    with pytest.raises(FileNotFoundError, match="no-such-data"):
        fn[family](str(out.parent / "no-such-data.txt"), out, max_steps=1, overwrite=True)
    assert _files(out) == before


# ------------------------------------------------------------------------------------- the other settings


def _setups():
    from tformer import bert, lm, translation

    return {"lm": lm.setup, "translation": translation.setup, "bert": bert.setup, "classify": bert.setup_classifier}


def _bounds(family: str) -> dict:
    from tformer.bert import run as bert_run
    from tformer.lm import run as lm_run
    from tformer.translation import run as translation_run

    own = {"lm": lm_run.BOUNDS, "translation": translation_run.BOUNDS, "bert": bert_run.BOUNDS}
    return {**checks.SETTINGS, **own["bert" if family == "classify" else family]}


NOT_SETTINGS = {  # parameters checked elsewhere, by what reads them (the tests of each say how)
    "data": "a file or directory: its reader names it (missing, empty, not UTF-8)",
    "out_dir": "the run directory: start_run checks it, and TrainConfig that it is a str or a path",
    "log": "a function that prints a line",
    "tokenizer_dir": "a directory: the tokenizer's reader names it",
    "init": "a model directory: tformer.load names it",
    "valid_data": "a file or directory, as data: its reader names it",
    "data_cache": "a directory made when first written to: a write that fails names it (tformer.files)",
    "train_options": "TrainConfig's fields, walked below",
}


def _bad_values(bound) -> list:
    """Values ``bound`` must refuse: the wrong type, out of range, an unknown name."""
    if isinstance(bound, checks.YesNo):
        return ["no", 1]
    if isinstance(bound, checks.Choice):
        return ["no-such-name", 5]
    if isinstance(bound, checks.Text):
        return [5, ""]
    if isinstance(bound, checks.Sinks):
        return [5, "wandb", ("csv", "csv")]
    bad = ["7", None if bound.kind is float else 2.5, math.nan if bound.kind is float else None]
    if bound.low is not None:
        bad.append(bound.low if bound.low_open else bound.low - 1)
    if bound.high is not None:
        bad.append(bound.high if bound.high_open else bound.high + 1)
    if bound.whole_from is not None:  # a count from there on: 1.5 is neither a fraction nor a count
        bad.append(bound.whole_from + 0.5)
    return [b for b in bad if b is not None]


def _train_config_fields():
    import dataclasses

    from tformer.training.config import TrainConfig

    return [f.name for f in dataclasses.fields(TrainConfig) if f.name != "out_dir"]


SETTINGS_CASES = list(
    dict.fromkeys(
        [(family, name) for family, fn in _setups().items() for name in inspect.signature(fn).parameters]
        + [("lm", name) for name in _train_config_fields()]  # TrainConfig's, through lm.setup's **train_options
    )
)
SETTINGS_CASES = [(family, name) for family, name in SETTINGS_CASES if name not in NOT_SETTINGS]


OWN_CHECKS = {  # TrainConfig's fields that it checks itself (a pair, a choice, this machine's devices): bad values
    "betas": [(0.9,), (0.9, 1.5), "0.9, 0.98"],
    "precision": ["int8", "fp64"],
    "schedule": ["linear"],
    "optimizer": ["sgd", 5],
    "device": ["gpu", 5, *([] if torch.cuda.is_available() else ["cuda"])],
}


def test_every_parameter_of_each_setup_has_a_bound_or_a_reason():
    """A new parameter of a setup (or field of TrainConfig) has a bound, or says here who checks it."""
    unbounded = [(f, n) for f, n in SETTINGS_CASES if n not in _bounds(f) and n not in OWN_CHECKS]
    assert unbounded == [], "give these a bound (tformer.checks.SETTINGS or the family's BOUNDS)"


@pytest.mark.parametrize("family, name", SETTINGS_CASES, ids=[f"{f}-{n}" for f, n in SETTINGS_CASES])
def test_each_setting_of_each_setup_refuses_a_wrong_type_or_range_before_anything_is_read(api, family, name):
    bound = _bounds(family).get(name)
    for value in _bad_values(bound) if bound is not None else OWN_CHECKS[name]:
        with pytest.raises((ValueError, TypeError)) as raised:  # the data does not exist: a late check says so
            _setup(family)(api, {name: value})
        message = str(raised.value)
        assert message.startswith(f"{name} ") and "\n" not in message, (value, message)


def test_a_device_this_machine_lacks_is_one_line_naming_it(api):
    """lm.setup(device="cuda") on a CPU-only build ended in torch's AssertionError after the data was read."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(ValueError) as raised:
        _setup("lm")(api, {"device": "cuda"})
    assert str(raised.value) == (
        "device 'cuda' is not available on this machine (torch.cuda.is_available() is False); use device='cpu'"
    )


@pytest.mark.parametrize(
    "family, option, says",
    [
        ("lm", "max_step", "tformer.lm.setup() got an unknown option 'max_step'; did you mean 'max_steps'"),
        (
            "translation",
            "label_smothing",
            "tformer.translation.setup() got an unknown option 'label_smothing'; did you mean 'label_smoothing'",
        ),  # (its own parameter, misspelled)
        ("bert", "warmup", "tformer.bert.setup() got an unknown option 'warmup'; did you mean 'warmup_steps'"),
        ("classify", "zzz", "tformer.bert.setup_classifier() got an unknown option 'zzz'; the options are"),
    ],
)
def test_an_unknown_option_is_named_with_the_closest_before_anything_is_read(api, family, option, says):
    """A misspelled option reached TrainConfig and read ``TrainConfig.__init__() got an unexpected keyword argument``,
    naming neither the function called nor what was meant."""
    with pytest.raises(TypeError) as raised:
        _setup(family)(api, {option: 1})
    assert str(raised.value).startswith(says) and "\n" not in str(raised.value), str(raised.value)
    assert not (api["tmp"] / "run").exists()


def _train_parsers():
    import argparse

    from tformer.cli import build_parser

    def sub(parser, name):
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return action.choices[name]

    train = sub(build_parser(), "train")
    return {family: sub(train, family) for family in ("lm", "translation", "bert", "classify")}


def test_the_train_flags_parse_with_the_bounds_each_setup_checks():
    """``tformer train FAMILY``'s flags and ``FAMILY.setup`` take the same values: a number flag parses with the bound
    the entry point checks (equal words), a flag without a value is a yes/no setting, a flag of choices a Choice of
    the same names. --max-steps alone is stricter: the library trains 0 steps to carry a model over."""
    import argparse

    compared = 0
    for family, parser in _train_parsers().items():
        bounds = _bounds(family)
        for action in parser._actions:
            if action.dest not in bounds or action.dest == "max_steps":
                continue
            bound, compared = bounds[action.dest], compared + 1
            if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
                assert isinstance(bound, checks.YesNo), (family, action.dest)
            elif action.choices is not None:
                assert isinstance(bound, checks.Choice) or action.dest == "precision", (family, action.dest)
                if isinstance(bound, checks.Choice):
                    assert set(bound.options) == set(action.choices), (family, action.dest)
            elif action.type is not None:
                assert repr(action.type) == repr(bound), (family, action.dest, action.type, bound)
    assert compared >= 4 * 20, compared
