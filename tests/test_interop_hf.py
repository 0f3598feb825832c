"""Parity with Hugging Face transformers: randomly initialised small GPT-2 and BERT models (no download)
converted by ``from_hf`` give the same logits and hidden states."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tformer import GPT, Bert  # noqa: E402
from tformer.hf import from_hf  # noqa: E402
from tformer.hf.bert import config_from_hf as bert_config_from_hf  # noqa: E402
from tformer.hf.bert import state_from_hf as bert_state_from_hf  # noqa: E402

ATOL = 1e-4
VOCAB = 97


def _gpt2_config(**overrides):
    kwargs = dict(
        vocab_size=VOCAB,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return transformers.GPT2Config(**{**kwargs, **overrides})


def _bert_config(**overrides):
    kwargs = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=3,
    )
    return transformers.BertConfig(**{**kwargs, **overrides})


def _random_hf(cls, config, seed=0):
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():  # HF zero-inits biases and sets LayerNorms to 1/0: randomise so every weight matters
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


@pytest.fixture(scope="module")
def gpt2():
    return _random_hf(transformers.GPT2LMHeadModel, _gpt2_config())


@pytest.fixture(scope="module")
def bert_pretraining():
    return _random_hf(transformers.BertForPreTraining, _bert_config(), seed=1)


@pytest.fixture(scope="module")
def bert_batch():
    """Two sequences of length 12, the second padded after 7 tokens, with sentence-B segments."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1, VOCAB, (2, 12), generator=g)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 7:] = 0
    ids[1, 7:] = 0
    token_type_ids = torch.zeros_like(ids)
    token_type_ids[0, 6:] = 1
    token_type_ids[1, 4:7] = 1
    return ids, token_type_ids, mask


# --------------------------------------------------------------------------------------------- GPT-2


def test_gpt2_logits_match(gpt2):
    ours = from_hf(gpt2)
    assert isinstance(ours, GPT) and not ours.training
    ids = torch.randint(0, VOCAB, (3, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (gpt2(ids).logits - ours(ids)).abs().max().item()
    assert diff <= ATOL


@pytest.mark.parametrize("activation, ours_name", [("gelu", "gelu"), ("relu2", "relu2")])
def test_gpt2_other_activations_match(activation, ours_name):
    hf = _random_hf(transformers.GPT2LMHeadModel, _gpt2_config(activation_function=activation))
    ours = from_hf(hf)
    assert ours.config.activation == ours_name
    ids = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert (hf(ids).logits - ours(ids)).abs().max().item() <= ATOL


def test_gpt2_and_bert_drop_nothing_inside_the_feed_forward_as_in_transformers():
    """GPT-2's MLP and BERT's intermediate layer have no dropout of their own (the residual one comes after them):
    a model read from either has ``ffn_dropout`` 0, so fine-tuning it drops what transformers drops."""
    from tformer.hf.gpt2 import config_from_hf as gpt2_config_from_hf

    gpt2 = gpt2_config_from_hf(_gpt2_config(resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1).to_dict())
    bert = bert_config_from_hf(_bert_config(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1).to_dict())
    for config, model in ((gpt2, GPT(gpt2)), (bert, Bert(bert))):
        assert (config.dropout, config.ffn_dropout) == (0.1, 0.0)
        assert {m.dropout.p for name, m in model.named_modules() if name.endswith(".ff")} == {0.0}


def test_gpt2_model_without_head_uses_tied_embedding(gpt2):
    ours = from_hf(gpt2.transformer)  # a GPT2Model
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (gpt2(ids).logits - ours(ids)).abs().max().item() <= ATOL


def _greedy(step, prompt: torch.Tensor, n: int) -> list[int]:
    ids = prompt
    for _ in range(n):
        next_id = step(ids)[:, -1].argmax(-1, keepdim=True)  # (1, 1)
        ids = torch.cat([ids, next_id], dim=1)
    return ids[0, prompt.shape[1] :].tolist()


def test_gpt2_greedy_tokens_match(gpt2):
    ours = from_hf(gpt2)
    prompt = torch.tensor([[5, 17, 42]])
    with torch.no_grad():
        theirs = _greedy(lambda ids: gpt2(ids).logits, prompt, 10)
        mine = _greedy(ours, prompt, 10)
    assert mine == theirs


@pytest.mark.parametrize(
    "field, value",
    [
        ("scale_attn_by_inverse_layer_idx", True),
        ("reorder_and_upcast_attn", True),
        ("activation_function", "silu"),
        ("scale_attn_weights", False),
    ],
)
def test_gpt2_unsupported_config_refused(field, value):
    model = transformers.GPT2LMHeadModel(_gpt2_config(**{field: value}))
    with pytest.raises(ValueError, match=field):
        from_hf(model)


# ---------------------------------------------------------------------------------------------- BERT


def test_bert_pretraining_matches(bert_pretraining, bert_batch):
    ids, token_type_ids, mask = bert_batch
    ours = from_hf(bert_pretraining)
    assert isinstance(ours, Bert)
    with torch.no_grad():
        out = bert_pretraining(ids, attention_mask=mask, token_type_ids=token_type_ids, output_hidden_states=True)
        hidden = ours(ids, token_type_ids=token_type_ids, attention_mask=mask)
        mlm, nsp = ours.pretraining_logits(ids, token_type_ids=token_type_ids, attention_mask=mask)
    assert (out.hidden_states[-1] - hidden).abs().max().item() <= ATOL
    assert (out.prediction_logits - mlm).abs().max().item() <= ATOL
    assert (out.seq_relationship_logits - nsp).abs().max().item() <= ATOL


def test_bert_sequence_classification_matches(bert_batch):
    model = _random_hf(transformers.BertForSequenceClassification, _bert_config(), seed=2)
    ids, token_type_ids, mask = bert_batch
    ours = from_hf(model)
    assert ours.config.num_labels == 3
    with torch.no_grad():
        diff = (
            (
                model(ids, attention_mask=mask, token_type_ids=token_type_ids).logits
                - ours.classify(ids, token_type_ids=token_type_ids, attention_mask=mask)
            )
            .abs()
            .max()
            .item()
        )
    assert diff <= ATOL


@pytest.mark.parametrize("cls", ["BertModel", "BertForMaskedLM"])
def test_bert_without_some_heads_converts(cls, bert_batch):
    model = _random_hf(getattr(transformers, cls), _bert_config(), seed=3)
    ids, token_type_ids, mask = bert_batch
    ours = from_hf(model)
    assert ours.classifier is None
    with torch.no_grad():
        out = model(ids, attention_mask=mask, token_type_ids=token_type_ids, output_hidden_states=True)
        assert (
            out.hidden_states[-1] - ours(ids, token_type_ids=token_type_ids, attention_mask=mask)
        ).abs().max().item() <= ATOL
        if cls == "BertForMaskedLM":
            assert (
                out.logits - ours.mlm_head(ours(ids, token_type_ids=token_type_ids, attention_mask=mask))
            ).abs().max().item() <= ATOL


def test_bert_relative_positions_refused():
    config = {**_bert_config().to_dict(), "position_embedding_type": "relative_key"}
    with pytest.raises(ValueError, match="position_embedding_type"):
        bert_config_from_hf(config)


def test_bert_unknown_weight_refused(bert_pretraining):
    state = dict(bert_pretraining.state_dict())
    state["bert.encoder.layer.0.attention.self.distance_embedding.weight"] = torch.zeros(3, 3)
    with pytest.raises(ValueError, match="distance_embedding"):
        bert_state_from_hf(state)


def test_from_hf_refuses_other_models():
    with pytest.raises(TypeError, match="from_hf expects"):
        from_hf(torch.nn.Linear(2, 2))
