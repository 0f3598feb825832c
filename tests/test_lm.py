"""Language modelling: tokenizers, documents, blocks, bits per character, memorisation, resume, the CLI."""

import json
import math

import pytest
import torch

from tformer import GPT, GPTConfig
from tformer.cli import main
from tformer.generation import generate_lm
from tformer.lm import LMTask, TextStream, encode_documents, evaluate_stream, read_documents, split_ids
from tformer.tokenizers import ByteBPETokenizer, CharTokenizer, load_tokenizer
from tformer.tokens import LM_EOT as EOT
from tformer.tokens import LM_PAD as PAD
from tformer.tokens import LM_SPECIALS as SPECIALS
from tformer.tokens import LM_UNK as UNK
from tformer.training.trainer import TrainConfig, Trainer, lr_factor

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n"
SPEECH = (
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n\n"
    "All:\nResolved. resolved.\n\nFirst Citizen:\nFirst, you know Caius Marcius is chief enemy to the people.\n\n"
)


def test_char_tokenizer_round_trip_and_specials_first(tmp_path):
    tok = CharTokenizer.train([TEXT])
    assert tok.itos[:3] == SPECIALS == ["<unk>", "<pad>", "<|endoftext|>"]
    assert tok.vocab_size == 3 + len(set(TEXT))
    assert tok.decode(tok.encode(TEXT)) == TEXT
    assert tok.encode("FQ")[1] == UNK  # "Q" is not in the training text
    tok.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again.kind == "char" and again.itos == tok.itos


def test_byte_bpe_round_trip_any_text_and_bytes_per_token(tmp_path):
    tok = ByteBPETokenizer.train([SPEECH * 3], vocab_size=300)
    assert [tok.tokenizer.id_to_token(i) for i in range(3)] == SPECIALS
    text = "Café — 東京 🙂 resolved, speak!"
    ids = tok.encode(text)
    assert UNK not in ids and tok.decode(ids) == text
    lengths = tok.unit_lengths()
    assert sum(lengths[i] for i in ids) == len(text.encode("utf-8"))
    tok.save(tmp_path)
    assert load_tokenizer(tmp_path).encode(text) == ids
    with pytest.raises(FileNotFoundError, match="has no tokenizer"):
        load_tokenizer(tmp_path / "nowhere")


def test_documents_from_a_folder_or_jsonl_are_separated_by_endoftext(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in [("b.txt", "second"), ("a.txt", "first"), ("c.txt", "third"), ("skip.md", "not me")]:
        (folder / name).write_text(text, encoding="utf-8")
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text(
        "\n".join(json.dumps({"text": t, "id": i}) for i, t in enumerate(["first", "second", "third"])) + "\n"
    )
    tok = CharTokenizer.train(["firstsecondthird"])
    for source in (folder, jsonl):
        docs = read_documents(source)
        assert docs == ["first", "second", "third"]
        ids = encode_documents(tok, docs)
        assert tok.decode(ids.tolist(), skip_special_tokens=False) == "first<|endoftext|>second<|endoftext|>third"
        assert (ids == EOT).sum() == 2
    (tmp_path / "bad.jsonl").write_text('{"body": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_documents(tmp_path / "bad.jsonl")


def test_split_keeps_the_last_tenth_for_validation():
    train, val = split_ids(torch.arange(100))
    assert train.tolist() == list(range(90)) and val.tolist() == list(range(90, 100))


def test_blocks_are_contiguous_seeded_per_epoch_and_shifted_by_one():
    ids = torch.arange(3, 200)
    task = LMTask(CharTokenizer("ab"), ids, ids, max_len=8, batch_size=4, batches_per_epoch=3, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(task.train_batches(1), task.train_batches(1)))
    assert not torch.equal(task.train_batches(1)[0], task.train_batches(2)[0])
    seen = []
    model = lambda x: (seen.append(x), torch.zeros(*x.shape, 300))[1]  # noqa: E731
    model.parameters = lambda: iter([torch.zeros(1)])
    loss, n = task.loss(model, torch.tensor([0, 150]))
    assert seen[0].tolist() == [list(range(3, 11)), list(range(153, 161))] and n == 16
    assert loss.item() == pytest.approx(16 * math.log(300))


def _tiny(vocab, max_len=64):
    torch.manual_seed(0)
    return GPT(GPTConfig.preset("tiny", vocab_size=vocab, max_len=max_len, dropout=0.0, pad_id=PAD)).eval()


def test_bits_per_character_is_loss_over_ln2_and_bits_per_byte_counts_bytes():
    tok = CharTokenizer.train([SPEECH])
    ids = encode_documents(tok, [SPEECH])
    model = _tiny(tok.vocab_size)
    r = evaluate_stream(model, ids, torch.tensor(tok.unit_lengths()), max_len=32)
    assert r["tokens"] == len(ids) - 1  # every prediction once, the short last block included
    assert r["val_bpc"] == pytest.approx(r["val_loss"] / math.log(2))
    assert r["val_ppl"] == pytest.approx(math.exp(r["val_loss"]))
    first = evaluate_stream(model, ids[:33], torch.tensor(tok.unit_lengths()), max_len=32)
    direct = torch.nn.functional.cross_entropy(model(ids[None, :32])[0], ids[1:33]).item()
    assert first["val_loss"] == pytest.approx(direct, rel=1e-5)

    bpe = ByteBPETokenizer.train([SPEECH], vocab_size=280)
    text = "Speak, café, speak — résolu."
    ids = encode_documents(bpe, [text])
    r = evaluate_stream(_tiny(bpe.vocab_size), ids, torch.tensor(bpe.unit_lengths()), max_len=16)
    n_bytes = len(text.encode("utf-8")) - len(
        bpe.decode(ids[:1].tolist()).encode("utf-8")
    )  # the first token is never predicted
    assert r["val_bpc"] == pytest.approx(r["val_loss"] * r["tokens"] / math.log(2) / n_bytes)


@pytest.fixture(scope="module")
def memorised(tmp_path_factory):
    """A tiny GPT trained (through LMTask + Trainer) until it has learnt TEXT by heart."""
    out = tmp_path_factory.mktemp("memorised")
    tok = CharTokenizer.train([TEXT])
    ids = encode_documents(tok, [TEXT])
    model = _tiny(tok.vocab_size).train()
    task = LMTask(tok, ids, ids, max_len=len(ids) - 1, batch_size=1, batches_per_epoch=40, eval_blocks=None)
    cfg = TrainConfig(
        out_dir=str(out),
        lr=3e-3,
        schedule="constant",
        warmup_steps=10,
        max_steps=80,
        progress=False,
        log_every=50,
        weight_decay=0.0,
    )
    result = Trainer(model, task, cfg).fit()
    return out, tok, result


def test_tiny_model_memorises_a_short_text(memorised):
    out, tok, result = memorised
    assert result["val_loss"] < 0.05
    model = GPT.from_pretrained(out)
    prompt = tok.encode(TEXT[:6])
    new = generate_lm(model, [prompt], len(TEXT) - 6)[0]
    assert tok.decode(prompt + new) == TEXT


def test_generate_and_evaluate_lm_commands(memorised, tmp_path, capsys):
    out, tok, result = memorised
    assert (
        main(
            ["generate", "--model", str(out), "--prompt", TEXT[:6], "--greedy", "--max-new-tokens", str(len(TEXT) - 6)]
        )
        == 0
    )
    assert capsys.readouterr().out == TEXT + "\n"
    assert (
        main(["generate", "--model", str(out), "--prompt", "First", "--greedy", "--stop", "proceed", "--stop", "hear"])
        == 0
    )
    assert capsys.readouterr().out == "First Citizen:\nBefore we \n"
    args = [
        "generate",
        "--model",
        str(out),
        "--prompt",
        "F",
        "--seed",
        "1",
        "--num-samples",
        "2",
        "--max-new-tokens",
        "20",
        "--temperature",
        "1.5",
        "--top-k",
        "0",
        "--top-p",
        "1",
    ]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0 and capsys.readouterr().out == first  # same seed, same samples
    samples = first.split("\n" + "-" * 40 + "\n")
    assert len(samples) == 2 and samples[0] != samples[1]  # sample i uses seed + i

    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    assert main(["evaluate-lm", "--model", str(out), "--data", str(tmp_path / "text.txt")]) == 0
    line = capsys.readouterr().out
    loss, bpc = float(line.split("loss ")[1].split()[0]), float(line.split("bits per character ")[1].split()[0])
    assert f"tokens {len(TEXT) - 1}" in line and loss < 0.05 and bpc == pytest.approx(loss / math.log(2), abs=1e-3)
    # the folder data prepare makes of the text with the run's tokenizer: the same score, memory-mapped
    prepare = ["data", "prepare", "lm", "--data", str(tmp_path / "text.txt"), "--data-cache", str(tmp_path / "c")]
    assert main([*prepare, "--tokenizer-dir", str(out / "best")]) == 0
    folder = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["evaluate-lm", "--model", str(out), "--data", folder, "--max-len", "100000"]) == 0
    again, err = capsys.readouterr()
    assert again == line and "note: --max-len 100000 is past the model's context: scores blocks of" in err


def test_text_stream_holds_back_a_possible_stop_string():
    tok = CharTokenizer.train(["abcxyz"])
    stream = TextStream(tok, ["xy"])
    pieces = [stream.push(i) for i in tok.encode("abxcxyz")]
    assert pieces == ["a", "b", "", "xc", "", "", ""] and stream.stopped
    assert stream.flush() == "" and stream.text == "abxc"


def _losses(out):
    return [
        (r["step"], r["train_loss"])
        for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())
        if "train_loss" in r
    ]


def test_resume_through_the_cli_equals_the_uninterrupted_run(tmp_path):
    data = tmp_path / "speech.txt"
    data.write_text(SPEECH * 6, encoding="utf-8")
    args = [
        "train",
        "lm",
        "--data",
        str(data),
        "--preset",
        "tiny",
        "--max-len",
        "16",
        "--batch-size",
        "4",
        "--batches-per-epoch",
        "5",
        "--eval-blocks",
        "8",
        "--log-every",
        "1",
        "--schedule",
        "inverse_sqrt",
        "--warmup-steps",
        "3",
        "--dropout",
        "0.1",
        "--no-progress",
    ]
    assert main(args + ["--out", str(tmp_path / "full"), "--max-steps", "12"]) == 0
    assert main(args + ["--out", str(tmp_path / "cut"), "--max-steps", "7"]) == 0
    assert main(args + ["--out", str(tmp_path / "cut"), "--max-steps", "12", "--resume"]) == 0
    full, cut = _losses(tmp_path / "full"), _losses(tmp_path / "cut")
    assert [s for s, _ in full] == list(range(1, 13))
    assert cut == full  # every step's loss, bit for bit
    assert (tmp_path / "full" / "best" / "char_tokenizer.json").is_file() and GPT.from_pretrained(
        tmp_path / "full"
    ).config.max_len == 16


def test_train_lm_settings_come_from_the_flag_then_the_recipe_then_the_default():
    from tformer.cli import build_parser
    from tformer.lm import RECIPES, resolve

    def resolved(*flags):  # the flags as `tformer train lm` parses them (unset: None), resolved by the library
        args = build_parser().parse_args(["train", "lm", "--data", __file__, "--out", "y", *flags])  # --data must exist
        names = ("tokenizer", "batch_size", "lr", "warmup_steps", "weight_decay", "vocab_size", "max_len", "dropout")
        return resolve(args.preset, **{k: getattr(args, k) for k in names})

    recipe = RECIPES["shakespeare-char-6min"]
    six = resolved("--preset", "shakespeare-char-6min")
    assert (six["weight_decay"], six["lr"], six["batch_size"]) == (
        recipe["weight_decay"],
        recipe["lr"],
        recipe["batch_size"],
    )
    assert six["model"]["max_len"] == recipe["max_len"] and six["model"]["positional"] == "rope"
    flagged = resolved("--preset", "shakespeare-char-6min", "--weight-decay", "0.05", "--lr", "1e-4")
    assert (flagged["weight_decay"], flagged["lr"]) == (0.05, 1e-4)
    plain = resolved("--preset", "tiny")
    assert (plain["weight_decay"], plain["lr"], plain["warmup_steps"], plain["model"]) == (0.01, 1e-3, 100, {})


def test_cosine_over_a_time_budget_decays_with_the_time_used():
    cfg = TrainConfig(out_dir="unused", schedule="cosine", minutes=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_factor(4, cfg, 0.0) == pytest.approx(0.5)  # warmup is counted in steps
    assert lr_factor(1000, cfg, 0.5) == pytest.approx(0.55)
    assert lr_factor(1000, cfg, 1.0) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="max_steps or minutes"):
        TrainConfig(out_dir="unused", schedule="cosine", epochs=1)


def test_no_fast_generates_the_same_text_with_plain_modules(memorised, capsys, monkeypatch):
    """``--no-fast`` loads the model with the reference kernels (plain modules), the text is the same. The default
    loads it with the fast ones, and decodes with them."""
    from torch import nn

    import tformer.lm
    from tformer.fast.linear import Linear as FastLinear

    out, tok, result = memorised
    loaded, ran = [], []  # the models loaded; the class of the output layer each forward ran

    def load(*a, **k):
        loaded.append(real_load(*a, **k))
        loaded[-1][0].output.register_forward_hook(lambda module, args, out: ran.append(type(module)))
        return loaded[-1]

    real_load = tformer.lm.load
    monkeypatch.setattr(tformer.lm, "load", load)
    args = ["generate", "--model", str(out), "--prompt", TEXT[:6], "--greedy", "--max-new-tokens", str(len(TEXT) - 6)]
    assert main([*args, "--no-fast"]) == 0
    assert capsys.readouterr().out == TEXT + "\n"
    assert ran and set(ran) == {nn.Linear}
    ran.clear()
    assert main(args) == 0
    assert capsys.readouterr().out == TEXT + "\n"
    assert ran and set(ran) == {FastLinear}  # the default loads the model with the fast kernels
    no_fast, default = (model for model, _ in loaded)
    assert not any(isinstance(m, FastLinear) for m in no_fast.modules())  # --no-fast: the reference ones
    assert type(default.output) is FastLinear


def test_a_diverged_runs_perplexity_is_inf_not_a_300_digit_clamp(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat. a dog ran in the fog. " * 100)
    args = ["train", "lm", "--data", str(text), "--preset", "tiny", "--max-len", "16", "--batch-size", "4"]
    args += [
        "--lr",
        "10",
        "--warmup-steps",
        "1",
        "--clip",
        "0",
        "--max-steps",
        "3",
        "--no-progress",
        "--precision",
        "fp32",
    ]
    assert main([*args, "--out", str(tmp_path / "r")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    records = [json.loads(line) for line in (tmp_path / "r" / "log.jsonl").read_text().splitlines()]
    losses = [r["val_loss"] for r in records if "val_loss" in r]
    assert losses[-1] >= 700  # the loss such a rate reaches: hundreds to thousands of nats, exp() past float64
    assert ", ppl inf," in last and [r["val_ppl"] for r in records if "val_ppl" in r][-1] is None  # JSON null


def test_characters_a_character_model_lacks_are_said_not_read_as_unk_in_silence(memorised, tmp_path, capsys):
    out, tok, _ = memorised
    argv = ["generate", "--model", str(out), "--prompt", "First €€ ¥", "--greedy", "--max-new-tokens", "2"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "note: --prompt has 2 character(s) the model's vocabulary lacks (€ ¥): it reads each as <unk>" in err
    (tmp_path / "t.txt").write_text("First € Citizen ¥¥\n", encoding="utf-8")
    assert main(["evaluate-lm", "--model", str(out), "--data", str(tmp_path / "t.txt")]) == 0
    assert (
        "note: 3 character(s) of --data are not in the model's vocabulary: scored as <unk>" in capsys.readouterr().err
    )
    (tmp_path / "ok.txt").write_text(TEXT, encoding="utf-8")
    assert main(["evaluate-lm", "--model", str(out), "--data", str(tmp_path / "ok.txt")]) == 0
    assert "note" not in capsys.readouterr().err


def test_a_setups_log_takes_every_line_of_the_run_so_a_caller_can_silence_it(tmp_path, capsys):
    """``log=`` took the setup's lines, but the trainer printed its own (the precision, notes, the resume) to stdout:
    the only way to silence a run from Python was redirect_stdout. Now all of it goes where ``log`` says."""
    from tformer import lm

    data = tmp_path / "text.txt"
    data.write_text("the cat sat on the mat.\n" * 60, encoding="utf-8")
    kw = dict(preset="tiny", max_len=16, batch_size=2, batches_per_epoch=2, warmup_steps=5, progress=False)
    got: list[str] = []
    lm.train(data, tmp_path / "run", max_steps=2, log=got.append, **kw)
    lm.train(data, tmp_path / "run", max_steps=4, log=got.append, resume=True, **kw)
    assert capsys.readouterr().out == ""
    said = "\n".join(got)
    assert "precision: " in said and "--warmup-steps 5" in said and "resuming " in said, said
