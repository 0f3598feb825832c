"""Checkpoints written by tformer 0.1.0 still load and give the outputs they gave then (tests/fixtures/v0.1)."""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from tformer.bert import fill_mask, load_masked_lm
from tformer.models.gpt import GPT
from tformer.tokenizers import load_tokenizer
from tformer.translation import Translator

ROOT = Path(__file__).parent / "fixtures" / "v0.1"
EXPECTED = load_file(str(ROOT / "expected.safetensors"))
TEXTS = json.loads((ROOT / "expected.json").read_text())


def test_translation_checkpoint_loads_with_the_same_logits_and_translations():
    t = Translator.load(ROOT / "translation")
    src = t.encode_sources(["I am good.", "We are going home."])
    assert torch.equal(src, EXPECTED["seq2seq_src"])
    with torch.no_grad():
        logits = t.model(src, EXPECTED["seq2seq_tgt"])
    torch.testing.assert_close(logits, EXPECTED["seq2seq_logits"], atol=1e-5, rtol=1e-5)
    assert t.translate(["I am good.", "We are going home."], max_new_tokens=8) == TEXTS["translations"]


def test_lm_checkpoint_loads_with_the_same_logits():
    model, tokenizer = GPT.from_pretrained(ROOT / "lm"), load_tokenizer(ROOT / "lm")
    ids = torch.tensor([tokenizer.encode("ROMEO: good morrow")])
    assert torch.equal(ids, EXPECTED["lm_ids"])
    with torch.no_grad():
        torch.testing.assert_close(model(ids), EXPECTED["lm_logits"], atol=1e-5, rtol=1e-5)


def test_bert_checkpoint_loads_with_the_same_hidden_states_and_fill_mask():
    model, tokenizer = load_masked_lm(ROOT / "bert")
    ids = torch.tensor([tokenizer.encode("the king is dead")])
    assert torch.equal(ids, EXPECTED["bert_ids"])
    with torch.no_grad():
        torch.testing.assert_close(model(ids), EXPECTED["bert_hidden"], atol=1e-5, rtol=1e-5)
    got = fill_mask(model, tokenizer, "the king [MASK] the crown .", top_k=3)
    assert [[tok for tok, _ in row] for row in got] == [[tok for tok, _ in row] for row in TEXTS["fill_mask"]]
    for row, want in zip(got, TEXTS["fill_mask"]):
        for (_, p), (_, q) in zip(row, want):
            assert abs(p - q) < 1e-6
