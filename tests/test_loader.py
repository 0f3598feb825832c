"""The one loader (issue 30, items 1 and 9): ``tformer.load`` / ``tformer.detect`` read every kind of directory by
what its files declare, and every command reads every model through it, with the specials the model was trained
with.

* ``detect`` on each family's run and model directory (tformer 0.1's run layout too) and on Hugging Face BERT,
  GPT-2, Llama, Qwen2, Qwen3, Mistral, Gemma 3 and Marian directories written by ``transformers``' own
  ``save_pretrained``; each loads as the family it names;
* a Llama directory (``hidden_size`` and all) is never read as a BERT, even with no ``architectures``;
* a directory of the wrong family, or one tformer does not read, is one line through the CLI saying what was found
  and what the command needs;
* the matrix: ``trace``, ``plot attention``, ``info``, ``explore --export`` and the family's own command on a
  character GPT, a byte-level BPE GPT, a BPE translator, a WordPiece BERT (tformer's and a Hugging Face one) and a
  Hugging Face ``tokenizer.json`` Llama: the trace starts with the model's specials and the text's pieces, with the
  ids training, fill-mask, ``translate``, ``generate`` and the explorer give;
* ``info`` and ``plot curves`` take ``--model`` as well as the positional directory; ``embed --model RUN`` finds
  ``best/``;
* the Python API: ``Loaded`` is the same shape for every family — encode, run, save, export — and reads back what it
  writes with the same outputs.
"""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import tformer
from tformer.cli import main
from tformer.tokenizers import train_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FIXTURES = Path(__file__).parent / "fixtures" / "v0.1"  # tformer 0.1's runs: a translator, a char GPT, a BERT
TEXTS = ["the cat sat on the mat.", "a dog ran in the park, and the cat sat.", "héllo café — naïve"] * 4
TEXT = "the cat sat"


def _run_dir(directory: Path, model: Path) -> Path:
    """A training run's layout around a model directory: best/ and log.jsonl (what `tformer train` writes)."""
    shutil.copytree(model, directory / "best", ignore=shutil.ignore_patterns("last"))
    (directory / "log.jsonl").write_text('{"step": 1, "train_loss": 2.5, "lr": 0.001}\n{"step": 2, "val_loss": 2.4}\n')
    return directory


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> dict[str, Path]:
    """tformer's own directories: each family as a run and as a model directory, and tformer 0.1's run layout."""
    root = tmp_path_factory.mktemp("ours")
    out = {
        "translator run": _run_dir(root / "translator_run", FIXTURES / "translation"),
        "translator model": Path(shutil.copytree(FIXTURES / "translation", root / "translator_model")),
        "char GPT run (0.1)": Path(shutil.copytree(FIXTURES / "lm", root / "lm01")),  # model at the top, last/ beside
        "char GPT run": _run_dir(root / "lm_run", FIXTURES / "lm"),
        "BERT run": _run_dir(root / "bert_run", FIXTURES / "bert"),
        "BERT model": Path(shutil.copytree(FIXTURES / "bert", root / "bert_model")),
    }
    tok = train_tokenizer("byte_bpe", TEXTS, vocab_size=300)
    torch.manual_seed(0)
    gpt = tformer.GPT(
        tformer.GPTConfig(vocab_size=tok.vocab_size, n_layers=1, d_model=16, n_heads=2, d_ff=32, max_len=32)
    )
    out["byte-BPE GPT model"] = gpt.save_pretrained(root / "bpe_gpt")
    tok.save(out["byte-BPE GPT model"])
    return out


@pytest.fixture(scope="module")
def hf(tmp_path_factory) -> dict[str, Path]:
    """Hugging Face directories written by transformers' own save_pretrained: tiny random models of each model_type
    tformer reads; the decoders with a byte-level BPE tokenizer.json whose template starts every text with <s>
    (Llama 3's way), the BERT with a WordPiece tokenizer.json."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    lib = Tokenizer(models.BPE())
    lib.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    lib.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"], initial_alphabet=alphabet, show_progress=False
    )
    lib.train_from_iterator(TEXTS, trainer)
    lib.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 0)]
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=lib, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    v = len(fast)
    wordpiece = train_tokenizer("wordpiece", TEXTS, vocab_size=120, min_frequency=1)
    block = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=v)
    decoder = dict(
        block, num_key_value_heads=1, max_position_embeddings=64, bos_token_id=0, eos_token_id=1, pad_token_id=2
    )
    t = transformers
    built = {
        "gpt2": t.GPT2LMHeadModel(t.GPT2Config(n_embd=32, n_layer=1, n_head=2, n_positions=64, vocab_size=v)),
        "llama": t.LlamaForCausalLM(t.LlamaConfig(**decoder)),
        "qwen2": t.Qwen2ForCausalLM(t.Qwen2Config(**decoder)),
        "qwen3": t.Qwen3ForCausalLM(t.Qwen3Config(head_dim=16, **decoder)),
        "mistral": t.MistralForCausalLM(t.MistralConfig(sliding_window=None, **decoder)),
        "gemma3_text": t.Gemma3ForCausalLM(t.Gemma3TextConfig(head_dim=16, sliding_window=4, **decoder)),
        "bert": t.BertForMaskedLM(
            t.BertConfig(**dict(block, vocab_size=wordpiece.vocab_size), max_position_embeddings=64)
        ),
        "marian": t.MarianMTModel(
            t.MarianConfig(
                d_model=32,
                encoder_layers=1,
                decoder_layers=1,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                vocab_size=v,
                max_position_embeddings=64,
                pad_token_id=2,
                eos_token_id=1,
                decoder_start_token_id=2,
            )
        ),
    }
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for name, model in built.items():
        torch.manual_seed(0)
        out[name] = root / name
        model.save_pretrained(out[name])
        if name == "bert":
            wordpiece.save(out[name])
        elif name != "marian":  # transformers' Marian tokenizer is SentencePiece: none here
            fast.save_pretrained(out[name])
    return out


# ------------------------------------------------------------------------------------------------ detect


OURS = {  # name -> (source, family, model files under the directory)
    "translator run": ("run", "seq2seq", "best"),
    "translator model": ("model", "seq2seq", ""),
    "char GPT run (0.1)": ("run", "gpt", ""),
    "char GPT run": ("run", "gpt", "best"),
    "byte-BPE GPT model": ("model", "gpt", ""),
    "BERT run": ("run", "bert", "best"),
    "BERT model": ("model", "bert", ""),
}
CLASSES = {"seq2seq": tformer.Seq2SeqTransformer, "gpt": tformer.GPT, "bert": tformer.Bert}


@pytest.mark.parametrize("name", OURS)
def test_detect_and_load_tformers_own_runs_and_model_directories(ours, name):
    source, family, files = OURS[name]
    kind = tformer.detect(ours[name])
    assert (kind.source, kind.family, kind.model_type) == (source, family, family)
    assert kind.files == ours[name] / files if files else kind.files == ours[name]
    loaded = tformer.load(ours[name])
    assert type(loaded.model) is CLASSES[family] and not loaded.model.training
    assert loaded.directory == kind.files and loaded.missing is None
    assert loaded.tokenizer is not None and loaded.target_tokenizer is not None
    if family != "seq2seq":
        assert loaded.target_tokenizer is loaded.tokenizer  # what the model writes is read by the same tokenizer


HF_FAMILY = {
    "bert": "bert",
    "gpt2": "gpt",
    "llama": "gpt",
    "qwen2": "gpt",
    "qwen3": "gpt",
    "mistral": "gpt",
    "gemma3_text": "gpt",
    "marian": "seq2seq",
}


@pytest.mark.parametrize("model_type", HF_FAMILY)
def test_detect_and_load_hugging_face_directories(hf, model_type):
    kind = tformer.detect(hf[model_type])
    assert (kind.source, kind.family, kind.model_type) == ("hf", HF_FAMILY[model_type], model_type)
    assert kind.describe() == f"{tformer.loader.FAMILIES[kind.family]} (a Hugging Face {model_type} directory)"
    loaded = tformer.load(hf[model_type])
    assert type(loaded.model) is CLASSES[kind.family]
    if model_type == "marian":  # transformers' Marian tokenizer is SentencePiece: the model loads, the reason is said
        assert loaded.tokenizer is None and "source.spm" in loaded.missing and loaded.start_id == 2
        with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
            loaded.encode("the cat")
    else:
        assert loaded.tokenizer.kind == ("wordpiece" if model_type == "bert" else "hf")


def test_a_llama_directory_is_never_read_as_a_bert(hf, tmp_path, capsys):
    """``"hidden_size" in config`` made fill-mask (and once the explorer) read Llama directories as BERT."""
    bare = Path(shutil.copytree(hf["llama"], tmp_path / "llama"))
    config = json.loads((bare / "config.json").read_text())
    assert "hidden_size" in config
    for key in ("architectures", "transformers_version"):  # nothing declared but the model_type
        config.pop(key, None)
    (bare / "config.json").write_text(json.dumps(config))
    for directory in (hf["llama"], bare):
        assert tformer.detect(directory).family == "gpt"
        assert main(["fill-mask", "--model", str(directory), "a [MASK]"]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"tformer fill-mask: error: --model {str(directory)!r} holds a GPT (a Hugging Face llama directory); "
            "this command needs a BERT\n"
        )


# ------------------------------------------------------------------------------------------------ refusals


WRONG = [  # command, the directory it gets, what the command needs
    (["embed", "a cat", "a dog"], "char GPT run", "a BERT", "a GPT (a tformer train lm run)"),
    (["fill-mask", "a [MASK]"], "translator run", "a BERT", "a seq2seq translator (a tformer train translation run)"),
    (["classify", "x"], "byte-BPE GPT model", "a BERT", "a GPT (a tformer model directory)"),
    (["generate", "--max-new-tokens", "2"], "BERT run", "a GPT", "a BERT (a tformer train bert run)"),
    (
        ["evaluate-lm", "--data", "TEXTFILE"],
        "translator model",
        "a GPT",
        "a seq2seq translator (a tformer model directory)",
    ),
    (["translate", "x"], "char GPT run (0.1)", "a seq2seq translator", "a GPT (a tformer train lm run)"),
]


@pytest.mark.parametrize("argv, name, needed, found", WRONG, ids=[w[0][0] for w in WRONG])
def test_a_directory_of_another_family_is_one_line_saying_what_it_holds(
    ours, tmp_path, capsys, argv, name, needed, found
):
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat.\n" * 3)
    argv = [str(text) if a == "TEXTFILE" else a for a in argv]
    directory = str(ours[name])
    assert main([argv[0], "--model", directory, *argv[1:]]) == 2
    err = capsys.readouterr().err
    command = "evaluate-lm" if argv[0] == "evaluate-lm" else argv[0]
    assert err == f"tformer {command}: error: --model {directory!r} holds {found}; this command needs {needed}\n"


def _unknown(kind: str, directory: Path) -> str:
    """A directory tformer does not read, and the words its one line must hold."""
    directory.mkdir()
    if kind == "no config.json":
        (directory / "notes.txt").write_text("not a model")
        return "holds no model: it has no config.json"
    if kind == "prepared data":  # tformer data prepare's folder: said so, where it is taken
        (directory / "manifest.json").write_text(json.dumps({"kind": "tformer-prepared", "task": "lm"}))
        read = "tformer reads its own run and model directories and Hugging Face ones"
        return (
            f"holds no model: it has no config.json ({read}); it is data tformer data prepare made: give it as --data"
        )
    if kind == "unknown model_type":
        (directory / "config.json").write_text(json.dumps({"model_type": "t5", "architectures": ["T5Model"]}))
        return (
            "has model_type='t5'; tformer reads its own seq2seq, gpt and bert and the Hugging Face types bert, gemma3"
        )
    if kind == "tformer config, unknown model_type":
        (directory / "config.json").write_text(json.dumps({"model_type": "gpt3", "d_model": 8}))
        return "has model_type='gpt3'; tformer reads its own seq2seq, gpt and bert and the Hugging Face types"
    shutil.copytree(FIXTURES / "lm", directory / "last", ignore=shutil.ignore_patterns("last"))  # a run, no best yet
    (directory / "log.jsonl").write_text('{"step": 1, "train_loss": 3.0}\n')
    return f"is a training run with no best model yet (no evaluation has finished); its latest state is in {str(directory / 'last')!r}"


@pytest.mark.parametrize(
    "kind",
    ["no config.json", "prepared data", "unknown model_type", "tformer config, unknown model_type", "no best yet"],
)
@pytest.mark.parametrize(
    "command", [["trace", "x"], ["info"], ["explore", "--export", "PAGE"], ["generate"], ["embed", "x"]]
)
def test_a_directory_tformer_does_not_read_is_one_line(tmp_path, capsys, kind, command):
    directory = tmp_path / "dir"
    words = _unknown(kind, directory)
    argv = [tmp_path / "page.html" if a == "PAGE" else a for a in command]
    argv = [command[0], "--model", str(directory), *map(str, argv[1:])]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"tformer {command[0]}: error: ") and words in err, err
    assert not (tmp_path / "page.html").exists()
    assert "--model" in err, err  # the argument that named it


# ------------------------------------------------------------------------------------------------ the matrix


MATRIX = {  # model -> where it comes from, the tokenizer kind it has
    "char GPT": ("ours", "char GPT run (0.1)", "char"),
    "byte-BPE GPT": ("ours", "byte-BPE GPT model", "byte_bpe"),
    "BPE translator": ("ours", "translator run", "bpe"),
    "WordPiece BERT": ("ours", "BERT run", "wordpiece"),
    "Hugging Face BERT": ("hf", "bert", "wordpiece"),
    "tokenizer.json Llama": ("hf", "llama", "hf"),
    "Marian (tformer export)": ("export", "translator model", "bpe"),
}


@pytest.fixture(scope="module")
def matrix(ours, hf, tmp_path_factory) -> dict[str, Path]:
    """Each model of the matrix; a Hugging Face Marian directory is tformer's translator exported (transformers'
    own has a SentencePiece tokenizer tformer does not read)."""
    out = {
        name: (ours if where == "ours" else hf)[key] for name, (where, key, _) in MATRIX.items() if where != "export"
    }
    out["Marian (tformer export)"] = tformer.load(ours["translator model"]).export(tmp_path_factory.mktemp("hf") / "m")
    return out


def _expected(loaded) -> tuple[dict[str, list[int]], dict[str, list[str]]]:
    """The ids each block of the trace must start from, computed by the family's own code: training's BERT layout,
    ``translate``'s source batch and <sos>, what ``generate`` feeds a GPT; and their pieces."""
    tok = loaded.tokenizer
    if loaded.family == "bert":
        ids = {"encoder": tok.single(tok.encode(TEXT), loaded.config.max_len)[0]}  # [CLS] … [SEP], as in training
    elif loaded.family == "seq2seq":
        from tformer.translation import Translator

        src = Translator.load(loaded.kind.path).encode_sources([TEXT])[0].tolist()
        ids = {"encoder": src, "decoder": [2]}  # the decoder starts from <sos>
    else:
        ids = {"decoder": tok.encode(TEXT, add_special_tokens=True)}  # what `generate` and the explorer feed it
    names = {
        block: [loaded.target_tokenizer.id_to_token(i) if block == "decoder" else tok.id_to_token(i) for i in row]
        for block, row in ids.items()
    }
    return ids, names


@pytest.mark.parametrize("name", MATRIX)
def test_trace_encodes_as_the_model_reads_and_as_every_other_path(matrix, name, tmp_path, capsys):
    from tformer.explore import Session

    directory = matrix[name]
    loaded = tformer.load(directory)
    assert loaded.tokenizer.kind == MATRIX[name][2]
    ids, names = _expected(loaded)
    out = tmp_path / "trace.json"
    steps = [] if loaded.family == "bert" else ["--max-new-tokens", "1"]  # (a BERT generates nothing: refused)
    argv = ["trace", "--model", str(directory), TEXT, *steps, "--json", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    traced = json.loads(out.read_text())
    fed = {e["block"]: e for e in traced["entries"] if e["stage"] == "tokens"}
    assert {block: e["values"][0] for block, e in fed.items()} == ids
    assert traced["tokens"] == names
    first = names["encoder" if loaded.family != "gpt" else "decoder"]
    if loaded.family == "bert":
        assert first[0] == "[CLS]" and first[-1] == "[SEP]" and ids["encoder"][0] == loaded.tokenizer.cls_id
    elif name == "tokenizer.json Llama":
        assert first[0] == "<s>" and ids["decoder"][0] == 0  # the template's BOS, as transformers adds it
    elif loaded.family == "seq2seq":
        assert names["decoder"] == ["<sos>"] and ids["encoder"][-1] != loaded.tokenizer.eos_id  # the bare source
    session = Session.open(directory)  # the explorer reads the model the same way
    if loaded.family == "gpt":  # (its labels are the text each id decodes to)
        assert session.m.encode(TEXT, session.m.tgt)[0] == ids["decoder"]
    else:
        assert session.call("trace", {"text": TEXT})["tokens"]["encoder"] == names["encoder"]


@pytest.mark.parametrize("name", MATRIX)
def test_plot_attention_info_and_export_read_every_model(matrix, name, tmp_path, capsys, monkeypatch):
    """A translator given no --target is drawn reading its own greedy translation (said), not <sos> alone."""
    import tformer.inspection.plots as plots

    directory = str(matrix[name])
    loaded = tformer.load(directory)
    png = tmp_path / "attn.png"
    drawn, plot = [], plots.plot_attention  # the rows (queries) each picture is drawn with
    monkeypatch.setattr(
        plots, "plot_attention", lambda w, cols, rows, *a: drawn.append(rows) or plot(w, cols, rows, *a)
    )
    assert main(["plot", "attention", "--model", directory, TEXT, "--out", str(png)]) == 0, capsys.readouterr().err
    assert png.read_bytes()[:4] == b"\x89PNG"
    err = capsys.readouterr().err
    if loaded.family == "seq2seq":
        translator = tformer.translation.Translator.load(directory)
        (own,) = translator.translate([TEXT], max_new_tokens=loaded.model.config.max_len - 1)
        assert f"the decoder reads the model's own translation, {own!r}" in err
        assert len(drawn[0]) > 1 and drawn[0][0] == translator.tgt_tokenizer.id_to_token(translator.start_id)
    assert main(["info", directory]) == 0
    info = capsys.readouterr().out
    assert info.splitlines()[0].endswith(f": {loaded.kind.describe()}") and " parameters" in info.splitlines()[0]
    assert f"tokenizer          {MATRIX[name][2]}" in info or f"source {MATRIX[name][2]}" in info
    c = loaded.model.config  # a field whose None follows another says which, and what the model uses
    if c.n_kv_heads is None:
        assert f"n_kv_heads         None (= n_heads, {c.n_heads})" in info
    if getattr(c, "final_norm", False) is None:
        assert f"final_norm         None (= norm_first, {c.norm_first})" in info
    page = tmp_path / "page.html"
    assert main(["explore", "--model", directory, "--export", str(page)]) == 0, capsys.readouterr().err
    assert f'"family":"{loaded.family}"' in page.read_text(encoding="utf-8")


FAMILY_COMMANDS = {  # model -> the family's own command and what its output starts with
    "char GPT": (["generate", "--prompt", TEXT, "--greedy", "--max-new-tokens", "3"], TEXT),
    "byte-BPE GPT": (["generate", "--prompt", TEXT, "--greedy", "--max-new-tokens", "3"], TEXT),
    "tokenizer.json Llama": (["generate", "--prompt", TEXT, "--greedy", "--max-new-tokens", "3"], TEXT),
    "BPE translator": (["translate", "I am good.", "We are going home."], "Je mangeons la maison.\nNous aien.\n"),
    "Marian (tformer export)": (
        ["translate", "I am good.", "We are going home."],
        "Je mangeons la maison.\nNous aien.\n",
    ),
    "WordPiece BERT": (["fill-mask", "the [MASK] sat"], "the [MASK] sat\n  [MASK] 1: "),
    "Hugging Face BERT": (["embed", "a cat", "a dog"], "[0] a cat\n[1] a dog\n"),
}


@pytest.mark.parametrize("name", FAMILY_COMMANDS)
def test_the_familys_own_command_reads_every_kind(matrix, name, capsys):
    argv, start = FAMILY_COMMANDS[name]
    assert main([argv[0], "--model", str(matrix[name]), *argv[1:]]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.startswith(start) and out.strip()


def test_embed_finds_a_runs_best_model(ours, capsys):
    """``embed --model RUN`` said the run "has no config.json" (it is in best/)."""
    assert main(["embed", "--model", str(ours["BERT run"]), "the king", "the queen"]) == 0, capsys.readouterr().err
    rows = capsys.readouterr().out.strip().splitlines()[-2:]
    assert rows[0].split()[1] == "1.0000" and rows[1].split()[2] == "1.0000"  # each sentence is itself


def test_info_and_plot_curves_take_model_as_every_command_does(ours, tmp_path, capsys):
    run = str(ours["translator run"])
    assert main(["info", run]) == 0
    positional = capsys.readouterr().out
    assert main(["info", "--model", run]) == 0
    assert capsys.readouterr().out == positional
    png = tmp_path / "curves.png"
    assert main(["plot", "curves", "--model", run, "--out", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(SystemExit) as exit_:  # one or the other
        main(["info", run, "--model", run])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_classify_init_reads_any_bert_and_refuses_another_family(ours, hf, tmp_path, capsys):
    """``train classify --init`` read tformer's own BERT directories only (Bert.from_pretrained)."""
    from tformer.bert import TextClassifier, train_classifier

    data = tmp_path / "animals.tsv"
    data.write_text("".join(f"{t}\t{'animal' if 'cat' in t or 'dog' in t else 'thing'}\n" for t in TEXTS))
    gpt = str(ours["char GPT run"])
    argv = ["train", "classify", "--data", str(data), "--out", str(tmp_path / "no"), "--init", gpt, "--max-steps", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"tformer train classify: error: --init {gpt!r} holds a GPT (a tformer train lm run); this command needs a BERT\n"
    )
    out = tmp_path / "cls"
    train_classifier(data, out, init=hf["bert"], max_len=32, max_steps=0, batch_size=4, valid=2, progress=False)
    classifier, base = TextClassifier.load(out), tformer.load(hf["bert"]).model.state_dict()
    trunk = [name for name in base if name.startswith(("embed.", "encoder."))]  # BertForMaskedLM has no pooler
    assert trunk and all(torch.equal(classifier.model.state_dict()[name], base[name]) for name in trunk)


# ------------------------------------------------------------------------------------------------ the Python API


@pytest.mark.parametrize("name", ["BPE translator", "char GPT", "WordPiece BERT"])
def test_loaded_is_one_shape_encode_run_save_export(matrix, name, tmp_path):
    pytest.importorskip("transformers")
    loaded = tformer.load(matrix[name])
    batch = loaded.encode(TEXT)  # the model's own argument names, the specials it was trained with
    assert set(batch) == ({"src", "tgt"} if loaded.family == "seq2seq" else {"ids"})
    with torch.no_grad():
        out = loaded.model(**batch)
        again = tformer.load(loaded.save(tmp_path / "saved"))
        assert torch.equal(again.model(**again.encode(TEXT)), out)  # the same ids, the same outputs
        exported = tformer.load(loaded.export(tmp_path / "hf"))
        assert exported.kind.source == "hf" and exported.family == loaded.family
        torch.testing.assert_close(exported.model(**exported.encode(TEXT)), out, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="needs a BERT" if loaded.family != "bert" else "needs a GPT"):
        tformer.load(matrix[name], family="bert" if loaded.family != "bert" else "gpt")


def test_save_costs_no_other_file(ours, tmp_path):
    """Loaded.save writes a directory whole, as tformer merge does: never into a run (whose --overwrite would then
    delete what it saved), a model it reads or a folder of the user's; again only with overwrite=True (the
    parameter named, not the flag), and only over a directory it wrote."""
    loaded = tformer.load(ours["byte-BPE GPT model"])
    run = shutil.copytree(ours["char GPT run (0.1)"], tmp_path / "run")
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    for target in (run, run / "best", tmp_path):  # a run, a model inside one, a folder holding one
        with pytest.raises(ValueError):
            loaded.save(target, overwrite=True)
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty; pass overwrite=True"):
        loaded.save(tmp_path / "mine")
    with pytest.raises(ValueError, match="notes.txt"):
        loaded.save(tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"
    saved = loaded.save(tmp_path / "saved")
    with pytest.raises(ValueError, match="not empty; pass overwrite=True"):
        loaded.save(saved)
    assert tformer.load(loaded.save(saved, overwrite=True)).kind.source == "model"
