"""Hugging Face model directories (tformer.hf.directory, the hf tokenizer) against transformers itself.

Tiny random Llama (sharded; tied and stored in bf16; with a sentencepiece-style tokenizer), Qwen3 and GPT-2 models
and BPE tokenizers trained here, saved with ``save_pretrained``: our loader gives transformers' logits, its tokenizer
transformers' ids and text, and ``tformer generate`` the continuation transformers' greedy ``generate`` gives, without
importing transformers. Crafted directories (an index pointing outside, a missing or truncated shard, a config.json
that is not an object, an unknown model_type, ...) are one line naming the file, exit status 2.
"""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

from tformer import lm  # noqa: E402
from tformer.cli import main  # noqa: E402
from tformer.generation import generate_lm  # noqa: E402
from tformer.hf import is_hf_dir  # noqa: E402
from tformer.tokenizers import Continuation, HFTokenizer  # noqa: E402

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, this is a tiny test of the tokenizer.",
    "héllo ünïcode ✓ 日本語 — naïve café",
    "def f(x):\n    return x * 2  # twice\n",
] * 3
SAMPLES = ["Hello world", "The lazy fox", " spaces  and\ttabs\n", "日本語 ✓ café", "<s> in text </s>", ""]
PROMPT = "The quick"


def _bpe(specials: list[str], bos: str | None, metaspace: bool = False) -> Tokenizer:
    """Byte-level BPE (GPT-2, Llama 3, SmolLM2), or with ``metaspace`` sentencepiece-style (Llama 2, Mistral v0.1:
    spaces as ``▁``, the first one stripped when decoding)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>" if metaspace else None))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    alphabet = [] if metaspace else pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=specials, initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator(TEXTS, trainer)
    if bos is None:  # GPT-2's: no special tokens added
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:  # Llama 3's: a template that starts every text with BOS
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    return tok


# the Llama-layout blocks: tiny, with large random weights (greedy text that does not repeat one token)
BLOCK = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
BLOCK.update(max_position_embeddings=64, initializer_range=0.2)


def _llama(tied: bool, metaspace: bool = False) -> tuple:
    specials = ["<s>", "</s>", "<pad>"] + (["<unk>"] if metaspace else [])
    tok = _bpe(specials, bos="<s>", metaspace=metaspace)
    config = transformers.LlamaConfig(
        vocab_size=tok.get_vocab_size() + 4,  # a few embedding rows past the tokenizer, as in Qwen
        **BLOCK,
        rms_norm_eps=1e-6,
        rope_theta=500.0,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=tied,
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    return transformers.LlamaForCausalLM(config), fast


def _qwen3() -> tuple:
    """Qwen3's block: RMSNorm on each head's queries and keys, a head width set apart from hidden / heads."""
    tok = _bpe(["<|endoftext|>", "<|im_end|>"], bos=None)
    config = transformers.Qwen3Config(
        vocab_size=tok.get_vocab_size(),
        **BLOCK,
        head_dim=24,
        bos_token_id=None,
        eos_token_id=1,
        tie_word_embeddings=True,
    )
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    return transformers.Qwen3ForCausalLM(config), fast


def _gpt2() -> tuple:
    tok = _bpe(["<|endoftext|>"], bos=None)
    config = transformers.GPT2Config(
        vocab_size=tok.get_vocab_size(),
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=64,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=0,
    )
    eot = "<|endoftext|>"
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=eot, eos_token=eot)
    return transformers.GPT2LMHeadModel(config), fast


VARIANTS = {  # name: (model and tokenizer, save_pretrained options)
    "llama-sharded": (lambda: _llama(tied=False), {"max_shard_size": "40KB"}),
    "llama-tied-bf16": (lambda: _llama(tied=True), {"dtype": torch.bfloat16}),
    "gpt2": (_gpt2, {}),
    "llama-metaspace": (lambda: _llama(tied=True, metaspace=True), {}),
    "qwen3": (_qwen3, {}),
}
BYTE_LEVEL = ["llama-sharded", "llama-tied-bf16", "gpt2", "qwen3"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name → (directory, the HF model read back from it in float32, eval mode, HF tokenizer)."""
    out = {}
    for name, (build, options) in VARIANTS.items():
        torch.manual_seed(0)
        model, fast = build()
        options = dict(options)
        directory = tmp_path_factory.mktemp(name)
        dtype = options.pop("dtype", None)
        model.to(dtype or torch.float32).save_pretrained(directory, **options)
        fast.save_pretrained(directory)
        # the reference: transformers' own reading of the directory, in float32 (bf16 weights upcast, as ours)
        reference = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
        out[name] = (directory, reference, fast)
    return out


@pytest.mark.parametrize("name", VARIANTS)
def test_logits_equal_transformers(saved, name):
    directory, hf, _ = saved[name]
    model, _ = lm.load(directory)
    assert next(model.parameters()).dtype == torch.float32  # bf16 weights load as float32 by default
    ids = torch.randint(0, hf.config.vocab_size, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids).logits
    assert (model(ids) - expected).abs().max() <= 1e-5


def test_sharded_directory_is_read_from_its_index(saved):
    directory = saved["llama-sharded"][0]
    assert (directory / "model.safetensors.index.json").is_file() and not (directory / "model.safetensors").exists()
    assert len(list(directory.glob("model-*.safetensors"))) > 2


def test_dtype_option_keeps_the_stored_bf16(saved):
    directory, hf, _ = saved["llama-tied-bf16"]
    model, _ = lm.load(directory, dtype=None)
    assert next(model.parameters()).dtype == torch.bfloat16
    assert torch.equal(model.embed.token.weight.float(), hf.model.embed_tokens.weight)
    assert model.output.weight is model.embed.token.weight  # tied, as config.json says


def test_a_bfloat16_model_runs_in_bfloat16_like_transformers(saved, capsys):
    """RoPE's tables are float32 but used in the queries' dtype, so q, k and v stay bfloat16 (as in transformers):
    the logits are bfloat16, within bfloat16's rounding of transformers' own bfloat16 run, and the CLI's --dtype
    generates."""
    directory, _, _ = saved["llama-tied-bf16"]
    model, _ = lm.load(directory, dtype=torch.bfloat16)
    hf = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16).eval()
    ids = torch.randint(0, hf.config.vocab_size, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(ids), hf(ids).logits
    assert ours.dtype == torch.bfloat16 and (ours.float() - theirs.float()).abs().max() <= 0.05
    assert (
        main(
            [
                "generate",
                "--model",
                str(directory),
                "--prompt",
                "the",
                "--greedy",
                "--max-new-tokens",
                "5",
                "--dtype",
                "bfloat16",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("the")


@pytest.mark.parametrize("name", VARIANTS)
def test_tokenizer_gives_transformers_ids_and_text(saved, name):
    directory = saved[name][0]
    ours = HFTokenizer.load(directory)
    theirs = transformers.AutoTokenizer.from_pretrained(directory)
    raw = Tokenizer.from_file(str(directory / "tokenizer.json"))
    for text in SAMPLES:
        ids = ours.encode(text, add_special_tokens=True)  # as the model reads it: what transformers gives
        assert ids == theirs(text)["input_ids"] == raw.encode(text).ids, text
        assert ours.decode(ids, skip_special_tokens=False) == theirs.decode(ids) == raw.decode(ids, False)
        if "<s>" not in text and name in BYTE_LEVEL:  # byte-level BPE gives the text back exactly (after a BOS)
            bare = ids[1:] if ids[:1] == [ours.start_id] and name != "gpt2" else ids
            assert ours.decode(bare, skip_special_tokens=False) == ours.decode(ours.encode(text)) == text
    assert ours.eos_ids == ((0,) if name == "gpt2" else (1,))


def test_a_continuation_keeps_the_space_a_sentencepiece_decoder_strips(saved):
    """Decoded alone, "▁world" is "world"; after the prompt's ids it is " world", as the pipeline cuts it."""
    directory, _, fast = saved["llama-metaspace"]
    tok = HFTokenizer.load(directory)
    ids = tok.encode("Hello world", add_special_tokens=True)
    cut = next(i for i in range(2, len(ids)) if tok.id_to_token(ids[i]).startswith("▁"))
    assert tok.decode(ids[cut:]) == fast.decode(ids[cut:]) == tok.decode(ids[cut:]).lstrip()  # the space is gone
    assert Continuation(tok, ids[:cut]).decode(ids[cut:]) == " " + tok.decode(ids[cut:])


@pytest.mark.parametrize("add_bos", [True, False, None])
@pytest.mark.parametrize("post_processor", ["template", "bytelevel", "none"])
def test_bos_is_added_as_transformers_adds_it(saved, tmp_path, post_processor, add_bos):
    """tokenizer.json's post-processor decides; transformers 5 drops add_bos_token when tokenizer.json exists."""
    name = "llama-sharded" if post_processor == "template" else "gpt2"
    directory = tmp_path / name
    shutil.copytree(saved[name][0], directory)
    if post_processor == "none":
        tokenizer = json.loads((directory / "tokenizer.json").read_text())
        (directory / "tokenizer.json").write_text(json.dumps({**tokenizer, "post_processor": None}))
    if add_bos is not None:
        settings = json.loads((directory / "tokenizer_config.json").read_text())
        (directory / "tokenizer_config.json").write_text(json.dumps({**settings, "add_bos_token": add_bos}))
    ours, theirs = HFTokenizer.load(directory), transformers.AutoTokenizer.from_pretrained(directory)
    for text in SAMPLES[:4]:
        assert ours.encode(text, add_special_tokens=True) == theirs(text)["input_ids"]
        assert (ours.encode(text, add_special_tokens=True)[:1] == [theirs.bos_token_id]) == (
            post_processor == "template"
        )


def test_a_gpt2tokenizer_class_encodes_as_transformers_rebuilds_it(saved, tmp_path):
    """GPT-2 and SmolLM2 name tokenizer_class GPT2Tokenizer, which transformers 5 rebuilds from the vocabulary and
    merges (byte-level, no prefix space) instead of reading tokenizer.json whole: the ids still agree."""
    directory = tmp_path / "gpt2"
    shutil.copytree(saved["gpt2"][0], directory)
    settings = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**settings, "tokenizer_class": "GPT2Tokenizer"}))
    ours, theirs = HFTokenizer.load(directory), transformers.AutoTokenizer.from_pretrained(directory)
    assert type(theirs).__name__ == "GPT2Tokenizer"
    for text in SAMPLES:
        ids = ours.encode(text, add_special_tokens=True)
        assert ids == theirs(text)["input_ids"]
        assert ours.decode(ids, skip_special_tokens=False) == theirs.decode(ids)


def _greedy(hf, fast, prompt: str, n: int) -> list[int]:
    ids = torch.tensor([fast(prompt)["input_ids"]])
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False)
    return out[0, ids.shape[1] :].tolist()


@pytest.mark.parametrize("name", VARIANTS)
def test_generate_command_prints_transformers_greedy_continuation(saved, name, capsys):
    directory, hf, fast = saved[name]
    new = _greedy(hf, fast, PROMPT, 12)
    assert len(set(new)) > 2  # a real continuation, not one token over and over
    model, tok = lm.load(directory)
    assert generate_lm(model, [tok.encode(PROMPT, add_special_tokens=True)], 12, eos_id=tok.eos_ids[0])[0] == new
    assert main(["generate", "--model", str(directory), "--prompt", PROMPT, "--greedy", "--max-new-tokens", "12"]) == 0
    # the text transformers' text-generation pipeline gives: all ids, then cut, the special tokens left out (a random
    # model may well pick <s>: then the pipeline does not show it, and neither does tformer generate)
    prompt, skip = fast(PROMPT)["input_ids"], {"skip_special_tokens": True}
    text = fast.decode(prompt + new, **skip)[len(fast.decode(prompt, **skip)) :]
    assert text == fast.decode(new, **skip) or name not in BYTE_LEVEL  # byte-level: the new ids alone say it
    assert capsys.readouterr().out == PROMPT + text + "\n"


@pytest.mark.parametrize("template", [True, False])
def test_an_empty_prompt_starts_from_bos_as_transformers_generate(saved, tmp_path, template, capsys):
    """No prompt: the tokenizer's template gives [BOS]; with none, generation_config's bos_token_id (not the EOS)
    starts it, as transformers' generate starts with no input_ids."""
    directory, hf, fast = saved["llama-sharded"]
    if not template:
        directory = shutil.copytree(directory, tmp_path / "model")
        tokenizer = json.loads((directory / "tokenizer.json").read_text())
        (directory / "tokenizer.json").write_text(json.dumps({**tokenizer, "post_processor": None}))
        assert HFTokenizer.load(directory).encode("") == []
    new = hf.generate(max_new_tokens=8, do_sample=False)[0, 1:].tolist()  # starts from bos_token_id
    assert main(["generate", "--model", str(directory), "--greedy", "--max-new-tokens", "8"]) == 0
    bos = [hf.generation_config.bos_token_id]
    skip = {"skip_special_tokens": True}  # as the text-generation pipeline decodes
    assert capsys.readouterr().out == fast.decode(bos + new, **skip)[len(fast.decode(bos, **skip)) :] + "\n"


def test_generation_stops_at_any_eos_of_generation_config(saved, tmp_path, capsys):
    directory = tmp_path / "eos"
    shutil.copytree(saved["llama-sharded"][0], directory)
    hf, fast = saved["llama-sharded"][1:]
    new = _greedy(hf, fast, PROMPT, 12)
    stop_at = next(i for i in range(3, 12) if new[i] not in new[:i])  # its first appearance ends the text
    settings = json.loads((directory / "generation_config.json").read_text())
    settings["eos_token_id"] = [1, new[stop_at]]
    (directory / "generation_config.json").write_text(json.dumps(settings))
    again = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    assert _greedy(again, fast, PROMPT, 12) == new[: stop_at + 1]  # transformers stops there too
    assert main(["generate", "--model", str(directory), "--prompt", PROMPT, "--greedy", "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out == PROMPT + fast.decode(new[:stop_at]) + "\n"  # the EOS itself is not shown
    # a fine-tuned or merged model (its tokenizer saved) and an export keep every end id, and stop there too
    ends = (1, new[stop_at])
    HFTokenizer.load(directory).save(tmp_path / "saved")
    assert HFTokenizer.load(tmp_path / "saved").eos_ids == ends
    assert main(["export", str(directory), "--to", "hf", str(tmp_path / "hf")]) == 0
    capsys.readouterr()
    exported = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert tuple(exported.generation_config.eos_token_id) == ends
    assert _greedy(exported, fast, PROMPT, 12) == new[: stop_at + 1]


def test_loader_and_cli_do_not_import_transformers(saved):
    directory = saved["llama-sharded"][0]
    code = (
        "import sys\n"
        "from tformer.cli import main\n"
        f"assert main(['generate', '--model', {str(directory)!r}, '--prompt', 'Hi', '--greedy', "
        "'--max-new-tokens', '3']) == 0\n"
        "assert 'transformers' not in sys.modules, 'transformers was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Hi")


def test_evaluate_lm_scores_a_hugging_face_model_as_transformers_does(saved, tmp_path, capsys):
    """Loss and perplexity, the same as transformers' loss on the same ids; bits per byte of the text (its tokens have
    no unit tformer knows): the loss summed over the predicted tokens, over the bytes they hold."""
    directory, hf, fast = saved["gpt2"]
    (tmp_path / "text.txt").write_text(TEXTS[0], encoding="utf-8")
    assert main(["evaluate-lm", "--model", str(directory), "--data", str(tmp_path / "text.txt")]) == 0
    line = capsys.readouterr().out.strip()
    ids = torch.tensor([fast(TEXTS[0])["input_ids"]])
    with torch.no_grad():
        expected = float(hf(ids, labels=ids).loss)
    assert line.startswith(f"tokens {ids.shape[1] - 1}  loss "), line
    assert float(line.split("loss ")[1].split()[0]) == pytest.approx(expected, abs=1e-4)
    held = len(TEXTS[0].encode()) - len(fast.decode(ids[0, :1]).encode())  # the first token is never predicted
    bits = expected * (ids.shape[1] - 1) / math.log(2) / held
    assert float(line.split("bits per byte ")[1]) == pytest.approx(bits, abs=2e-4), line


def test_a_hub_cache_snapshot_of_links_to_blobs_loads(saved, tmp_path):
    """The Hub cache keeps snapshots/REV/FILE as links to ../../blobs/HASH: links the directory holds are followed
    (only a name in the index that leaves the directory is refused)."""
    directory, hf, _ = saved["llama-sharded"]
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "rev"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    for i, file in enumerate(sorted(directory.iterdir())):
        shutil.copy(file, blobs / f"blob{i}")
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", f"blob{i}"))
    model, _ = lm.load(snapshot)
    ids = torch.arange(12)[None]
    with torch.no_grad():
        assert (model(ids) - hf(ids).logits).abs().max() <= 1e-5


def test_tformer_directories_keep_their_own_loader(tmp_path, capsys):
    """A `tformer train lm`-style directory (config.json with model_type "gpt", our byte BPE) is not a Hugging Face
    one: it loads and generates as before, stopping at <|endoftext|>."""
    from tformer import GPT, GPTConfig
    from tformer.tokenizers import ByteBPETokenizer
    from tformer.tokens import LM_EOT as EOT

    tok = ByteBPETokenizer.train(TEXTS, 300)
    torch.manual_seed(0)
    GPT(GPTConfig.preset("tiny", vocab_size=tok.vocab_size, dropout=0.0)).save_pretrained(tmp_path)
    tok.save(tmp_path)
    assert not is_hf_dir(tmp_path)
    model, loaded = lm.load(tmp_path)
    assert loaded.kind == "byte_bpe"
    new = generate_lm(model, [tok.encode(PROMPT)], 10, eos_id=EOT)[0]
    assert main(["generate", "--model", str(tmp_path), "--prompt", PROMPT, "--greedy", "--max-new-tokens", "10"]) == 0
    assert (
        capsys.readouterr().out == PROMPT + tok.decode([i for i in new if i != EOT], skip_special_tokens=False) + "\n"
    )


# ------------------------------------------------------------------------------------------- crafted dirs


INDEX = "model.safetensors.index.json"


def _edit(path: Path, change) -> None:
    """Rewrite the JSON file ``path`` after ``change(data)`` has changed it in place."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _point_outside(d: Path, target: str) -> str:
    weight_map = json.loads((d / INDEX).read_text())["weight_map"]
    key = next(iter(weight_map))
    shutil.copy(d / weight_map[key], d.parent / "outside.safetensors")  # a valid shard: only the check refuses it
    _edit(d / INDEX, lambda index: index["weight_map"].update({key: target}))
    return target


def _outside_relative(d: Path) -> str:
    return _point_outside(d, "../outside.safetensors")


def _outside_absolute(d: Path) -> str:
    return _point_outside(d, str(d.parent / "outside.safetensors"))


def _missing_shard(d: Path) -> str:
    shard = sorted(d.glob("model-*.safetensors"))[1]
    shard.unlink()
    return shard.name


def _truncated_shard(d: Path) -> str:
    shard = sorted(d.glob("model-*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes()[:100])
    return shard.name


def _weight_not_in_its_shard(d: Path) -> str:
    weight_map = json.loads((d / INDEX).read_text())["weight_map"]
    key = next(k for k in weight_map if "layers.1." in k)
    other = next(f for f in sorted(set(weight_map.values())) if f != weight_map[key])
    _edit(d / INDEX, lambda index: index["weight_map"].update({key: other}))
    return other


def _no_weights(d: Path) -> str:
    (d / INDEX).unlink()
    return "model.safetensors"


def _weight_dropped(d: Path) -> str:
    _edit(d / INDEX, lambda index: index["weight_map"].pop("model.norm.weight"))
    return INDEX


def _config_not_object(d: Path) -> str:
    (d / "config.json").write_text("[1, 2, 3]")
    return "config.json"


def _unknown_model_type(d: Path) -> str:
    _edit(d / "config.json", lambda c: c.update(model_type="falcon", architectures=["FalconForCausalLM"]))
    return "config.json"


def _tokenizer_larger_than_the_model(d: Path) -> str:
    size = json.loads((d / "config.json").read_text())["vocab_size"]
    extra = [{"id": size + i, "content": f"<extra_{i}>", "special": True} for i in range(2)]
    flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}

    def add(tokenizer: dict) -> None:
        tokenizer["added_tokens"] += [{**flags, **token} for token in extra]
        tokenizer["model"]["vocab"].update({t["content"]: t["id"] for t in extra})

    _edit(d / "tokenizer.json", add)
    return "tokenizer.json"


def _no_tokenizer(d: Path) -> str:
    (d / "tokenizer.json").unlink()
    return "tokenizer.json"


CRAFTED = [
    _outside_relative,
    _outside_absolute,
    _missing_shard,
    _truncated_shard,
    _weight_not_in_its_shard,
    _no_weights,
    _weight_dropped,
    _config_not_object,
    _unknown_model_type,
    _tokenizer_larger_than_the_model,
    _no_tokenizer,
]


@pytest.mark.parametrize("craft", CRAFTED, ids=lambda f: f.__name__.strip("_"))
def test_crafted_directories_are_one_line_naming_the_file(saved, tmp_path, capsys, craft):
    directory = tmp_path / "model"
    shutil.copytree(saved["llama-sharded"][0], directory)
    named = craft(directory)
    assert main(["generate", "--model", str(directory), "--prompt", "x", "--max-new-tokens", "2"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tformer generate: error: "), captured.err
    assert named in lines[0] and "Traceback" not in captured.err
    assert captured.out == ""
