"""Values at the edges (issue 32): sampling settings that would break the distribution, weights that are not finite
or not floating point, Hugging Face config fields of the wrong type or range, and sizes with no bound.

* sampling: the filters keep the most likely token and a finite distribution for any allowed value (hypothesis
  over extreme ones); ``generate`` / ``translate --sample`` with a temperature of 1e-45 or a top-p of 1e-300 are
  greedy, the explorer's sampling answers; a repetition penalty out of its range is refused by the flag;
* weights: NaN, inf, an integer or a boolean tensor in a tformer checkpoint, a Hugging Face decoder directory (one
  file or sharded) or a Hugging Face BERT is one line naming the file and the tensor;
* Hugging Face config.json: each field the converters read, of the wrong type or out of range, is one line naming
  it; a rotary model's parameter estimate has no position table;
* sizes: a 1 MB line is cut before it is tokenized (with a warning), beams, lengths and new tokens are bounded,
  numeric flags refuse what would overflow, ``trace --layer`` names a layer the model has.

Everything goes through the real command line (``tformer.cli.main`` in-process, one ``python -m tformer`` pair for
memory), on tiny models built here with ``tests/test_inputs.py``'s helpers.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from test_inputs import TEXT, _hf_bert_dir, _tiny
from tformer import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer
from tformer.cli import main
from tformer.cli import validate as flags
from tformer.generation import (
    MAX_BEAM,
    MAX_LENGTH_PENALTY,
    MAX_NEW_TOKENS,
    SamplingConfig,
    apply_repetition_penalty,
    beam_search,
    choose_next,
    generate_lm,
    process_logits,
)
from tformer.hf import export
from tformer.translation import Translator

# ------------------------------------------------------------------------------------------------ helpers


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line_error(argv: list[str], capsys, *words: str) -> str:
    """``argv`` fails with exit status 2 and one line on stderr that holds each of ``words``."""
    code, out, err = _run(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (argv, code, err)
    assert lines[0].startswith("tformer "), err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def _usage_error(argv: list[str], capsys, *words: str) -> str:
    """``argv`` is refused by argparse (a flag's validator): exit status 2, the last line names the flag."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert exit_info.value.code == 2 and "Traceback" not in err, err
    for word in words:
        assert word in last, (word, last)
    return last


def _byte_bpe() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TEXT] * 5, trainer)
    return tok


LLAMA = dict(norm="rmsnorm", ffn="swiglu", positional="rope", bias=False)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    """tformer directories (a character GPT, a translator: max_len 32, d_model 8) and a Hugging Face BERT, made
    with ``tests/test_inputs.py``'s helpers."""
    from tformer.tokenizers import CharTokenizer, train_tokenizer
    from tformer.translation import Translator

    root = tmp_path_factory.mktemp("models")
    char = CharTokenizer.train([TEXT])
    _tiny(GPT, GPTConfig, vocab_size=char.vocab_size, n_layers=1).save_pretrained(root / "lm_char")
    char.save(root / "lm_char")
    tok = train_tokenizer("bpe", [TEXT] * 5, vocab_size=40, min_frequency=1)
    sizes = dict(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, n_encoder_layers=1, n_decoder_layers=1)
    Translator(_tiny(Seq2SeqTransformer, Seq2SeqConfig, **sizes), tok, tok).save(root / "translation")
    wp = train_tokenizer("wordpiece", [TEXT] * 5, vocab_size=60, min_frequency=1)
    _hf_bert_dir(root / "hf_bert", _tiny(Bert, BertConfig, vocab_size=wp.vocab_size, n_layers=1), wp)
    return {name: root / name for name in ("lm_char", "translation", "hf_bert")}


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory) -> dict[str, Path]:
    """Hugging Face decoder directories (config.json in Hugging Face names, model.safetensors, tokenizer.json),
    written by tformer's own ``tformer.hf.export``: a Llama and a GPT-2, and the Llama sharded."""
    root = tmp_path_factory.mktemp("hf")
    tok = _byte_bpe()
    out = {}
    for name, options in (("llama", LLAMA), ("gpt2", {})):
        torch.manual_seed(0)
        model = GPT(
            GPTConfig(
                vocab_size=tok.get_vocab_size(),
                d_model=16,
                n_heads=2,
                n_layers=1,
                d_ff=32,
                max_len=32,
                dropout=0.0,
                **options,
            )
        )
        out[name] = export(model, root / name)
        tok.save(str(out[name] / "tokenizer.json"))
        (out[name] / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    out["llama_sharded"] = shutil.copytree(out["llama"], root / "llama_sharded")
    tensors = load_file(str(out["llama_sharded"] / "model.safetensors"))
    names = sorted(tensors)
    halves = {
        "model-00001-of-00002.safetensors": names[: len(names) // 2],
        "model-00002-of-00002.safetensors": names[len(names) // 2 :],
    }
    for file, part in halves.items():
        save_file({k: tensors[k] for k in part}, str(out["llama_sharded"] / file))
    weight_map = {k: file for file, part in halves.items() for k in part}
    (out["llama_sharded"] / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (out["llama_sharded"] / "model.safetensors").unlink()
    return out


def _copy(directory: Path, tmp_path: Path) -> Path:
    return shutil.copytree(directory, tmp_path / directory.name)


def _edit_weight(path: Path, change) -> str:
    """Rewrite the safetensors file ``path`` with ``change(name, tensor)`` applied to its largest tensor (returned
    as None: unchanged); returns that tensor's name."""
    tensors = load_file(str(path))
    name = max(sorted(tensors), key=lambda k: tensors[k].numel())
    tensors[name] = change(tensors[name])
    save_file(tensors, str(path))
    return name


def _edit_config(directory: Path, change) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))


# ---------------------------------------------------------------------------------------------- sampling

LOGITS = st.lists(
    st.one_of(st.floats(-1e4, 1e4), st.sampled_from([-math.inf, 3e38, -3e38, 0.0])), min_size=7, max_size=7
).filter(lambda row: any(math.isfinite(x) for x in row))


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(LOGITS, min_size=2, max_size=2),
    temperature=st.one_of(st.floats(5e-324, 1e300), st.sampled_from([5e-324, 1e-45, 1e-30, 1e300])),
    top_k=st.one_of(st.none(), st.integers(1, 10)),
    top_p=st.one_of(st.none(), st.floats(5e-324, 1.0), st.sampled_from([5e-324, 1e-300, 1e-8])),
    penalty=st.one_of(st.floats(5e-324, 1e300), st.sampled_from([1e-40, 1e40, 1.0])),
    seen=st.lists(st.integers(0, 6), min_size=0, max_size=4),
)
def test_the_filters_keep_the_top_token_and_a_finite_distribution(rows, temperature, top_k, top_p, penalty, seen):
    logits = torch.tensor(rows)  # (2, 7)
    previous = torch.tensor([seen, seen], dtype=torch.long)  # (2, T)
    config = SamplingConfig(True, temperature, top_k, top_p, penalty)
    probs = process_logits(logits, config, previous).softmax(-1)  # (2, 7)
    assert torch.isfinite(probs).all() and torch.allclose(probs.sum(-1), torch.ones(2))
    penalized = apply_repetition_penalty(logits.clamp(max=torch.finfo(torch.float32).max), previous, penalty)
    assert torch.isfinite(penalized.amax(-1)).all()  # the arithmetic stays finite
    scaled = process_logits(logits, SamplingConfig(True, temperature, None, None, penalty), previous)  # no filter
    top = scaled == scaled.amax(-1, keepdim=True)  # (2, 7) the most likely token(s) (ties: float rounding)
    assert top.gather(1, penalized.argmax(-1, keepdim=True)).all()  # the temperature keeps the order
    assert ((probs * top).sum(-1) > 0).all()  # and a top token survives every filter
    drawn = choose_next(logits, config, torch.Generator().manual_seed(0), previous)  # (2,)
    assert (probs.gather(1, drawn[:, None]) > 0).all()


@pytest.mark.parametrize("bad", [dict(temperature=math.nan), dict(repetition_penalty=math.inf)])
def test_non_finite_sampling_settings_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SamplingConfig(True, **bad)


GENERATE = ["--prompt", "the", "--max-new-tokens", "10", "--seed", "0"]


def test_generate_with_a_tiny_temperature_or_top_p_is_greedy(dirs, capsys):
    model = ["generate", "--model", str(dirs["lm_char"])]
    code, greedy, err = _run([*model, *GENERATE, "--greedy"], capsys)
    assert code == 0, err
    for extreme in (["--temperature", "1e-45"], ["--top-p", "1e-300"], ["--temperature", "1e-45", "--top-p", "1e-300"]):
        code, out, err = _run([*model, *GENERATE, *extreme], capsys)
        err = "".join(line for line in err.splitlines(True) if not line.startswith("KV cache: "))  # (issue 40)
        assert code == 0 and out == greedy and err == "", (extreme, err)
    _usage_error([*model, "--repetition-penalty", "1e-40"], capsys, "--repetition-penalty", "[0.01, 100]", "1e-40")


def test_a_prompt_longer_than_the_context_is_said_to_be_cut(dirs, capsys):
    """The model reads its context's worth (the prompt's last max_len - 1 tokens): said, as a cut source is."""
    model = ["generate", "--model", str(dirs["lm_char"]), "--max-new-tokens", "2", "--greedy"]
    code, _, err = _run([*model, "--prompt", "the " * 20], capsys)  # 80 characters, a context of 32
    assert code == 0 and "note: --prompt is 81 tokens, more than the model's context of 32: it reads the last 31" in err
    assert "warning" not in err  # said once, in the command's words (the library's PromptCut is for Python)
    code, _, err = _run([*model, "--prompt", "the " * 7 + "the"], capsys)  # 31 characters: 32 tokens, the context
    assert (
        code == 0 and "note: --prompt is 32 tokens, as many as the model's context of 32: it reads the last 31" in err
    )
    code, _, err = _run([*model, "--prompt", "the"], capsys)
    assert code == 0 and "note: --prompt" not in err


def test_a_cut_source_is_one_warning_line_in_evaluate_too(dirs, tmp_path, capsys):
    """tformer's own warnings are one line in every command, as translate said them (evaluate printed Python's two)."""
    (tmp_path / "src.txt").write_text("the cat sat on the mat. " * 20 + "\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("le chat\n", encoding="utf-8")
    argv = ["evaluate", "--model", str(dirs["translation"]), "--src", str(tmp_path / "src.txt")]
    code, _, err = _run([*argv, "--ref", str(tmp_path / "ref.txt")], capsys)
    assert code == 0 and "SourceTruncated" not in err
    lines = [line for line in err.splitlines() if "longer than the model reads" in line]
    assert len(lines) == 1 and lines[0].startswith("tformer evaluate: warning: source sentence 1 is longer")


def test_cut_translations_are_one_warning_line_in_evaluate(dirs, tmp_path, capsys):
    """Translations that reach --max-new-tokens without ending are said (BLEU scores them cut): one line, each
    sentence once however many length penalties --tune-length-penalty tries, named by its --src line."""
    (tmp_path / "src.txt").write_text("the cat sat.\n\na bird sang.\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("le chat\n\nun oiseau\n", encoding="utf-8")
    model = shutil.copytree(dirs["translation"], tmp_path / "model")  # the tuned penalty is kept beside the model
    argv = ["evaluate", "--model", str(model), "--src", str(tmp_path / "src.txt")]
    said = (
        "tformer evaluate: warning: translation 1 reached 2 tokens without its end token: cut there "
        "(--max-new-tokens 2); and 1 more so (--src lines 3)"
    )
    for extra in ([], ["--tune-length-penalty", "--beam", "2"]):
        code, out, err = _run([*argv, "--ref", str(tmp_path / "ref.txt"), "--max-new-tokens", "2", *extra], capsys)
        assert code == 0 and "BLEU" in out and err.splitlines() == [said], (extra, err)  # an untrained model: all cut


def test_a_sampling_flag_that_greedy_decoding_does_not_use_is_said(dirs, capsys):
    """As transformers warns when do_sample is off: --temperature with --greedy, --top-k without --sample."""
    code, _, err = _run(
        ["generate", "--model", str(dirs["lm_char"]), *GENERATE, "--greedy", "--temperature", "2", "--seed", "3"],
        capsys,
    )
    assert code == 0 and "note: --greedy takes the most likely token: --temperature, --seed not used" in err
    code, _, err = _run(
        ["translate", "--model", str(dirs["translation"]), "the cat.", "--top-k", "3", "--seed", "1"], capsys
    )
    assert code == 0 and "note: --top-k, --seed shape sampling only (--sample): not used" in err
    code, _, err = _run(
        ["translate", "--model", str(dirs["translation"]), "the cat.", "--top-k", "3", "--sample"], capsys
    )
    assert code == 0 and "note:" not in err


def test_sampling_with_beams_is_refused_and_a_length_penalty_without_beams_is_said(dirs, tmp_path, capsys):
    """--sample with --beam 3 is not transformers' sampled beams: refused (it was beam search, the flag dropped);
    --length-penalty with --beam 1 ranks nothing: said, as transformers warns of it with num_beams=1."""
    model = ["--model", str(dirs["translation"])]
    code, out, err = _run(["translate", *model, "the cat.", "--sample", "--beam", "3", "--seed", "1"], capsys)
    assert code == 2 and not out and "--sample with --beam 3: beam search keeps the likeliest beams" in err
    with pytest.raises(ValueError, match="sampling with beam=3"):
        Translator.load(dirs["translation"]).translate(["the cat."], beam=3, sampling=SamplingConfig(True))
    note = "note: --length-penalty ranks the beams of beam search (--beam 2 or more): not used with --beam 1"
    (tmp_path / "src.txt").write_text("the cat.\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("le chat.\n", encoding="utf-8")
    files = ["--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "ref.txt"), "--max-new-tokens", "3"]
    for argv in (["translate", *model, "the cat.", "--max-new-tokens", "3"], ["evaluate", *model, *files]):
        code, _, err = _run([*argv, "--length-penalty", "0.6"], capsys)
        assert code == 0 and note in err, (argv, err)
        code, _, err = _run([*argv, "--length-penalty", "0.6", "--beam", "2"], capsys)
        assert code == 0 and "--length-penalty" not in err, (argv, err)


def test_translate_sample_with_a_tiny_temperature_or_top_p_is_greedy(dirs, capsys):
    model = ["translate", "--model", str(dirs["translation"]), "the cat sat on the mat.", "a bird sang."]
    code, greedy, said = _run(model, capsys)
    assert code == 0, said
    for extreme in (["--temperature", "1e-45"], ["--top-p", "1e-300"]):
        code, out, err = _run([*model, "--sample", "--seed", "3", *extreme], capsys)
        assert code == 0 and out == greedy and err == said, (extreme, err)  # the same translations cut, if any


def test_the_explorers_sampling_with_a_tiny_top_p_answers(dirs):
    from starlette.testclient import TestClient

    from tformer.explore import Session
    from tformer.explore.server import create_app

    client = TestClient(create_app(Session.open(dirs["lm_char"]), "127.0.0.1", 8765), base_url="http://127.0.0.1:8765")
    answer = client.post("/api/sample", json=dict(text="the", temperature=0.5, top_k=0, top_p=1e-300, seed=0, steps=6))
    assert answer.status_code == 200, answer.text
    steps = answer.json()["steps"]
    assert len(steps) == 6 and all(s["kept"] == 1 and s["after"][0][1] == s["id"] for s in steps)


# ------------------------------------------------------------------------------------------------ weights

NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
# a directory kind, its weights file and the command that loads it
LOADERS = {
    "tformer lm": ("lm_char", "model.safetensors", ["generate", "--max-new-tokens", "3"]),
    "tformer translation": ("translation", "model.safetensors", ["translate", "the cat"]),
    "hf bert": ("hf_bert", "model.safetensors", ["fill-mask", "the [MASK] sat"]),
    "hf llama": ("llama", "model.safetensors", ["generate", "--max-new-tokens", "3"]),
    "hf llama, shard 2": ("llama_sharded", "model-00002-of-00002.safetensors", ["generate", "--max-new-tokens", "3"]),
}


def _model_dir(kind: str, dirs, hf_dirs) -> Path:
    return hf_dirs[kind] if kind in hf_dirs else dirs[kind]


@pytest.mark.parametrize("value", list(NON_FINITE))
@pytest.mark.parametrize("loader", list(LOADERS))
def test_non_finite_weights_are_refused_naming_the_file_and_the_tensor(loader, value, dirs, hf_dirs, tmp_path, capsys):
    kind, file, argv = LOADERS[loader]
    work = _copy(_model_dir(kind, dirs, hf_dirs), tmp_path)

    def poison(tensor):
        tensor = tensor.clone()
        tensor.view(-1)[tensor.numel() // 2] = NON_FINITE[value]
        return tensor

    name = _edit_weight(work / file, poison)
    line = _one_line_error([argv[0], "--model", str(work), *argv[1:]], capsys, file, repr(name), "NaN/inf")
    assert ("1 NaN" if value == "nan" else "1 inf") in line


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
@pytest.mark.parametrize("loader", ["tformer lm", "tformer translation", "hf bert", "hf llama", "hf llama, shard 2"])
def test_integer_and_boolean_weights_are_refused_naming_the_tensor_and_dtype(
    loader, dtype, dirs, hf_dirs, tmp_path, capsys
):
    kind, file, argv = LOADERS[loader]
    work = _copy(_model_dir(kind, dirs, hf_dirs), tmp_path)
    name = _edit_weight(work / file, lambda tensor: (tensor * 100).to(dtype))
    dtype_name = str(dtype).removeprefix("torch.")
    _one_line_error([argv[0], "--model", str(work), *argv[1:]], capsys, file, repr(name), dtype_name, "floating point")


# ------------------------------------------------------------------------------- Hugging Face config.json

# (directory, field, value): each a value the old loader took, cast, or refused without naming the field
HF_FIELDS = [
    ("llama", "rope_theta", -5),
    ("llama", "rope_theta", 0),
    ("llama", "rope_parameters.rope_theta", -1.0),
    ("llama", "rope_parameters", 5),
    ("llama", "rope_scaling", [1]),
    ("llama", "tie_word_embeddings", "no"),
    ("llama", "attention_dropout", "0.1"),
    ("llama", "hidden_size", True),
    ("llama", "num_hidden_layers", "2"),
    ("llama", "num_key_value_heads", "2"),
    ("llama", "max_position_embeddings", 0),
    ("llama", "rms_norm_eps", -1e-6),
    ("llama", "vocab_size", 1.5),
    ("llama", "layer_types", "full_attention"),
    ("llama", "sliding_window", "4"),
    ("gpt2", "n_inner", "64"),
    ("gpt2", "n_embd", 16.0),
    ("gpt2", "layer_norm_epsilon", 0),
    ("gpt2", "resid_pdrop", 1.5),
    ("gpt2", "scale_attn_weights", "no"),
    ("gpt2", "tie_word_embeddings", None),
]


@pytest.mark.parametrize("kind, field, value", HF_FIELDS, ids=lambda x: str(x))
def test_hugging_face_config_fields_are_checked_naming_the_field(kind, field, value, hf_dirs, tmp_path, capsys):
    work = _copy(hf_dirs[kind], tmp_path)

    def change(config):
        *parents, key = field.split(".")
        target = config
        for parent in parents:
            target = target[parent]
        target[key] = value

    _edit_config(work, change)
    _one_line_error(["generate", "--model", str(work), "--max-new-tokens", "2"], capsys, "config.json", f"{field}=")


BERT_FIELDS = [
    ("hidden_dropout_prob", "0.1"),
    ("attention_probs_dropout_prob", 1.0),
    ("layer_norm_eps", -1e-12),
    ("type_vocab_size", True),
    ("max_position_embeddings", 32.0),
    ("pad_token_id", "0"),
]


@pytest.mark.parametrize("field, value", BERT_FIELDS, ids=lambda x: str(x))
def test_hugging_face_bert_config_fields_are_checked_naming_the_field(field, value, dirs, tmp_path, capsys):
    work = _copy(dirs["hf_bert"], tmp_path)
    _edit_config(work, lambda config: config.update({field: value}))
    _one_line_error(["fill-mask", "--model", str(work), "the [MASK] sat"], capsys, "config.json", f"{field}=")


def test_a_missing_hugging_face_field_is_named(hf_dirs, tmp_path, capsys):
    work = _copy(hf_dirs["llama"], tmp_path)
    _edit_config(work, lambda config: config.pop("intermediate_size"))
    argv = ["generate", "--model", str(work), "--max-new-tokens", "2"]
    _one_line_error(argv, capsys, "config.json", "lacks the field 'intermediate_size'")


def test_a_rotary_model_has_no_position_table_in_its_estimate(hf_dirs, tmp_path, capsys):
    """max_position_embeddings of 2 billion: no table of that many rows exists for RoPE, so the model loads (a
    learned table of 2e9 × 16 would pass the parameter limit) and generates."""
    rope = GPTConfig(vocab_size=300, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=2_000_000_000, **LLAMA)
    learned = rope.replace(positional="learned", max_len=1000)
    assert learned.approx_parameters() - rope.approx_parameters() == 1000 * 16
    work = _copy(hf_dirs["llama"], tmp_path)
    _edit_config(work, lambda config: config.update(max_position_embeddings=2_000_000_000))
    code, out, err = _run(["generate", "--model", str(work), "--prompt", "the", "--max-new-tokens", "3"], capsys)
    assert code == 0 and out.startswith("the"), err


@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_a_position_table_of_a_hundred_million_rows_is_refused_before_it_is_built(dirs, tmp_path, capsys, positional):
    """max_len 10⁸ with d_model 8 passes the parameter limit (8·10⁸) but its table would take 3.2 GB (explorer fuzz:
    10⁸ with d_model 64 asks for 25 GB): a config.json asking for it is one line naming max_len, nothing allocated."""
    work = tmp_path / "lm"
    shutil.copytree(dirs["lm_char"], work)
    config = json.loads((work / "config.json").read_text())
    config.update(max_len=100_000_000, positional=positional)
    (work / "config.json").write_text(json.dumps(config))
    _one_line_error(["info", str(work)], capsys, "GPTConfig.max_len must be at most 1,048,576", "100,000,000")
    assert GPTConfig.preset("tiny", vocab_size=10, positional="rope", max_len=10**8).max_len == 10**8  # no table


# -------------------------------------------------------------------------------------------------- sizes


def test_the_flags_bounds_are_the_librarys():
    assert flags.beam_size.high == MAX_BEAM and flags.length_penalty.high == MAX_LENGTH_PENALTY
    assert flags.max_new_tokens.high == MAX_NEW_TOKENS


def test_a_one_megabyte_line_is_cut_before_the_tokenizer_sees_it(dirs, monkeypatch, capsys):
    from tformer.tokenizers import BPETokenizer

    seen: list[int] = []
    encode_batch = BPETokenizer.encode_batch

    def spy(self, texts, *args, **kwargs):
        seen.extend(len(t) for t in texts)
        return encode_batch(self, texts, *args, **kwargs)

    monkeypatch.setattr(BPETokenizer, "encode_batch", spy)
    line = "the cat sat on the mat. " * 44_000  # 1,056,000 characters
    code, out, err = _run(["translate", "--model", str(dirs["translation"]), "a bird sang.", line], capsys)
    assert code == 0 and len(out.splitlines()) == 2, err
    cut = "reached 31 tokens without its end token: cut there (the model's max_len 32 - 1; --max-new-tokens 128"
    assert err == (  # in the input's order
        f"tformer translate: warning: translation 1 {cut} cannot go past it)\n"  # the fixture's untrained model
        "tformer translate: warning: source sentence 2 is longer than the model reads (1,055,999 characters): "
        "translating its first 32 tokens (max_len=32)\n"  # the fixture's max_len; the text is stripped first
        f"tformer translate: warning: translation 2 {cut} cannot go past it)\n"
    )
    assert max(seen) <= 32 * 64  # max_len · MAX_CHARS_PER_TOKEN


def _peak_rss_mib(argv: list[str], stdin: str) -> float:
    """The peak resident memory of ``python -m tformer ARGV`` reading ``stdin``, in MiB (its own process only)."""
    code = (
        "import resource, subprocess, sys\n"
        "proc = subprocess.run([sys.executable, '-m', 'tformer', *sys.argv[1:]], input=sys.stdin.read(), text=True, "
        "capture_output=True)\n"
        "assert proc.returncode == 0, proc.stderr\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)\n"
    )
    result = subprocess.run([sys.executable, "-c", code, *argv], input=stdin, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return float(result.stdout)


def test_a_one_megabyte_line_costs_what_a_sentence_costs(dirs):
    argv = ["translate", "--model", str(dirs["translation"])]
    short = _peak_rss_mib(argv, "the cat sat on the mat.\n")
    long = _peak_rss_mib(argv, "the cat sat on the mat. " * 44_000 + "\n")
    assert long - short < 60, (short, long)  # was ~200 MiB more: the tokenizer's offsets for every character


def test_beams_are_bounded_by_the_limit_and_the_vocabulary(dirs, capsys):
    model = ["translate", "--model", str(dirs["translation"]), "the cat"]
    _usage_error([*model, "--beam", "65"], capsys, "--beam", "[1, 64]")
    _usage_error([*model, "--beam", "250000"], capsys, "--beam", "[1, 64]")
    vocab = json.loads((dirs["translation"] / "config.json").read_text())["tgt_vocab_size"]
    _one_line_error([*model, "--beam", str(vocab + 1)], capsys, f"target vocabulary size ({vocab} tokens)")
    assert _run([*model, "--beam", str(vocab)], capsys)[0] == 0


def test_beam_search_refuses_what_would_overflow(seq2seq):
    src = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match=r"length_penalty must be in \[-10, 10\]"):
        beam_search(seq2seq, src, 2, 3, beam_size=2, max_len=5, length_penalty=1e308)
    with pytest.raises(ValueError, match="beam_size must be at most 64"):
        beam_search(seq2seq, src, 2, 3, beam_size=65, max_len=5)


def test_numeric_flags_refuse_what_would_overflow(dirs, tmp_path, capsys):
    translate = ["translate", "--model", str(dirs["translation"]), "--beam", "2", "the cat"]
    _usage_error([*translate, "--length-penalty", "1e308"], capsys, "--length-penalty", "[0, 10]")
    download = ["data", "download", "tatoeba-eng-fra", "--cache", str(tmp_path), "--url", "http://127.0.0.1:9/"]
    _usage_error([*download, "--timeout", "1e10"], capsys, "--timeout", "(0, 86400]")
    _usage_error([*download, "--max-mb", "1e308"], capsys, "--max-mb", "(0, 1048576]")


def test_new_tokens_are_bounded(dirs, gpt, capsys):
    argv = ["generate", "--model", str(dirs["lm_char"]), "--max-new-tokens", str(10**12)]
    _usage_error(argv, capsys, "--max-new-tokens", "[1, 100000]")
    with pytest.raises(ValueError, match=r"max_new_tokens must be an integer in \[1, 100000\]"):  # the flag's words
        generate_lm(gpt, [[1, 2]], 10**12)


def test_trace_refuses_a_layer_the_model_lacks_as_it_refuses_a_head(dirs, capsys):
    model = ["trace", "--model", str(dirs["lm_char"]), "--ids", "4 5 6", "--max-new-tokens", "0"]
    assert _run([*model, "--layer", "0"], capsys)[0] == 0
    _one_line_error([*model, "--layer", "1"], capsys, "--layer must be in [0, 1) for this model, got 1")
    _one_line_error([*model, "--layer", "99"], capsys, "--layer must be in [0, 1)", "got 99")
    _one_line_error([*model, "--head", "99"], capsys, "--head must be in [0, 2)")  # the flag, not the parameter
    _one_line_error([*model, "--stage", "bogus"], capsys, "--stage: unknown stage(s) ['bogus']; choose from")
    _one_line_error([*model, "--stage", ","], capsys, "--stage ',' names no stage; choose from")  # not ignored
