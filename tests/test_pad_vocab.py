"""A language model's token table and head padded to a multiple of rows (``GPTConfig.vocab_multiple``, ``tformer train
lm --pad-vocab``, issue 48): the padding rows are no words, so the logits, the loss, decoding and an export are those
of the words alone; a new model is padded to 64 rows by default, a pretrained one (``--init``) never."""

import json

import pytest
import torch

from tformer import GPT, GPTConfig
from tformer.cli import main
from tformer.generation import generate_lm
from tformer.generation.samplers import SamplingConfig

V = 70


def _pair(seed=0, **fields):
    """An unpadded GPT and the same words' weights in a table padded to 128 rows; the padding rows of the head are
    made to win every argmax and most of every softmax, were their logits not cut off."""
    torch.manual_seed(seed)
    plain = GPT(GPTConfig.preset("tiny", vocab_size=V, dropout=0.0, **fields)).eval()
    padded = GPT(plain.config.replace(vocab_multiple=64)).eval()
    state = plain.state_dict()
    hidden = plain(torch.tensor([[5, 6, 7]]), head=False)[0, -1].detach()  # a final hidden state
    for key in GPT.word_tables:
        if key in state:
            rows = 50.0 * hidden / hidden.norm()  # (D,): a logit of ~50 × |h| for each padding row
            state[key] = torch.cat([state[key], rows.expand(padded.config.table_rows - V, -1)])
    padded.load_state_dict(state)
    return plain, padded


@pytest.mark.parametrize("fields", [{}, dict(tie_embeddings=False, final_softcap=30.0)])
def test_a_padded_model_gives_the_words_logits_only(fields):
    plain, padded = _pair(**fields)
    assert padded.config.table_rows == 128 and padded.output.weight.shape == (128, 64)
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    with torch.no_grad():
        want, got = plain(ids), padded(ids)
        raw = padded.output(padded(torch.tensor([[5, 6, 7]]), head=False))  # before the cut: the padding wins
    assert got.shape == (2, 4, V)
    assert torch.equal(got, want)
    assert int(raw[0, -1].argmax()) >= V  # (so a missing cut would show in decoding's first token, below)


def test_decoding_never_chooses_a_padding_row():
    plain, padded = _pair()
    prompt = [[5, 6, 7]]
    assert generate_lm(padded, prompt, 12) == generate_lm(plain, prompt, 12)  # greedy
    sampled = generate_lm(padded, prompt, 40, SamplingConfig(temperature=1.5), seed=0)
    assert all(0 <= t < V for t in sampled[0])
    assert sampled == generate_lm(plain, prompt, 40, SamplingConfig(temperature=1.5), seed=0)


def test_a_new_run_is_padded_to_64_rows_unless_told(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat, and the dog ran in the fog.\n" * 200)
    common = ["train", "lm", "--data", str(text), "--max-steps", "2", "--no-progress", "--max-len", "16"]
    main([*common, "--out", str(tmp_path / "a")])
    main([*common, "--out", str(tmp_path / "b"), "--pad-vocab", "1"])
    default = GPT.from_pretrained(tmp_path / "a")
    vocab = default.config.vocab_size
    assert default.config.vocab_multiple == 64 and default.output.weight.shape[0] == 64 * -(-vocab // 64)
    assert default(torch.tensor([[4, 5]])).shape[-1] == vocab
    unpadded = json.loads((tmp_path / "b" / "best" / "config.json").read_text())
    assert unpadded["vocab_multiple"] == 1 and GPT.from_pretrained(tmp_path / "b").output.weight.shape[0] == vocab


def test_pad_vocab_is_refused_with_init_and_out_of_bounds(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat.\n" * 50)
    model = tmp_path / "m"
    GPT(GPTConfig.preset("tiny", vocab_size=V)).save_pretrained(model)
    with pytest.raises(ValueError, match="--pad-vocab"):
        import tformer.lm

        tformer.lm.setup(text, tmp_path / "run", init=model, pad_vocab=64, max_steps=1)
    with pytest.raises(SystemExit):
        main(["train", "lm", "--data", str(text), "--out", str(tmp_path / "r"), "--pad-vocab", "0"])
    assert "--pad-vocab: must be an integer in [1, 4096] (1 = no padding), got 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="GPTConfig.vocab_multiple must be at most 4096"):
        GPTConfig.preset("tiny", vocab_size=V, vocab_multiple=8192)


@pytest.mark.parametrize("fields", [{}, dict(tie_embeddings=False)])
def test_a_padded_model_starts_as_the_unpadded_one(fields):
    """The same seed draws the same words' weights whatever the padding: its rows are 0 and take no random number."""
    torch.manual_seed(0)
    plain = GPT(GPTConfig.preset("tiny", vocab_size=V, **fields))
    torch.manual_seed(0)
    padded = GPT(GPTConfig.preset("tiny", vocab_size=V, vocab_multiple=64, **fields))
    for key, want in plain.state_dict().items():
        got = padded.state_dict()[key]
        assert torch.equal(got[:V] if key in GPT.word_tables else got, want), key
        assert key not in GPT.word_tables or not got[V:].any()


def test_a_padded_run_trains_as_the_unpadded_one(tmp_path):
    """Training leaves the padding rows 0 (no logit of theirs reaches the loss): the padded run is the unpadded run."""
    import tformer.lm

    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat, and the dog ran in the fog.\n" * 200)
    runs = {}
    for multiple in (1, 64):
        trainer = tformer.lm.setup(
            text,
            tmp_path / str(multiple),
            "tiny",
            pad_vocab=multiple,
            max_len=16,
            max_steps=6,
            log_every=1,
            precision="fp32",
            log=lambda s: None,
        )
        trainer.fit()
        runs[multiple] = trainer
    losses = [[r["train_loss"] for r in _records(tmp_path / str(m)) if "train_loss" in r] for m in (1, 64)]
    assert len(losses[0]) == 6 and losses[0] == pytest.approx(losses[1], rel=1e-5)
    head = runs[64].model.output.weight
    assert head.shape[0] == 64 and not head[runs[64].model.config.vocab_size :].any()


def _records(run):
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
