"""The glass box: a trace holds the very numbers the model used, and the toy reproduces the notes."""

import json
import math
import re

import pytest
import torch

from tformer import GPT, GPTConfig
from tformer.cli import main
from tformer.inspection import top_k_probs, toy_seq2seq, trace
from tformer.nn import hooks
from tformer.nn.attention import MultiHeadAttention

SRC = [[5, 6, 7, 8, 0, 0]]  # two padding positions: the cross-attention and encoder masks block them
TGT = [[2, 9, 10, 11]]


@pytest.fixture(scope="module")
def toy():
    return toy_seq2seq()


@pytest.fixture(scope="module")
def toy_trace(toy):
    return toy.trace(k=3, max_new_tokens=5)


def _forward(family, model):
    if family == "seq2seq":
        return model(torch.tensor(SRC), torch.tensor(TGT))
    if family == "gpt":
        return model(torch.tensor(TGT))
    return model.pretraining_logits(torch.tensor(SRC))[0]


def _traced_and_direct(family, request):
    model = request.getfixturevalue(family)
    with torch.no_grad():
        tr = trace(model, SRC, TGT) if family == "seq2seq" else trace(model, TGT if family == "gpt" else SRC)
        with hooks.capture(model, lambda name: name.endswith(".hook_weights")):  # the inspection path: a trace's
            inspected = _forward(family, model)
        return tr, inspected, _forward(family, model)


@pytest.mark.parametrize("family", ["seq2seq", "gpt", "bert"])
def test_traced_logits_equal_the_models_logits(family, request):
    tr, inspected, fused = _traced_and_direct(family, request)
    assert tr.model_type == family
    # the very numbers: bit-identical to the model run with its attention recorded
    torch.testing.assert_close(tr.get("logits").tensor, inspected, atol=0, rtol=0)
    torch.testing.assert_close(tr.get("probs").tensor, inspected.softmax(-1), atol=0, rtol=0)
    # and the fast path (fused attention kernel, other summation order) agrees to float32 rounding
    torch.testing.assert_close(tr.get("logits").tensor, fused, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(tr.get("probs").tensor, fused.softmax(-1), atol=1e-6, rtol=0)


@pytest.mark.parametrize("family", ["seq2seq", "gpt", "bert"])
def test_traced_weights_applied_to_traced_v_give_the_traced_context(family, request):
    tr = _traced_and_direct(family, request)[0]
    model = request.getfixturevalue(family)
    weights = tr.select(stages=["weights"])
    assert len(weights) == {"seq2seq": 6, "gpt": 2, "bert": 2}[family]  # one per attention module
    # a layer or block the trace lacks is said, with what it has (an empty list read as "nothing happened there")
    for kwargs, said in (({"layer": 7}, r"layer=7: this trace has no such layer; it has \[0, 1\]"),
                         ({"block": "encoderr"}, r"block='encoderr': this trace has no such block; it has \["),
                         ({"layer": lambda e: True}, r"layer=<function")):  # fmt: skip
        with pytest.raises(ValueError, match=said):
            tr.select(**kwargs)
    for w in weights:
        v, ctx, out = (tr.get(s, w.block, w.layer, w.kind) for s in ("v", "context", "attn_output"))
        torch.testing.assert_close(w.tensor @ v.tensor, ctx.tensor, atol=1e-6, rtol=0)
        b, h, tq, dh = ctx.tensor.shape
        merged = ctx.tensor.transpose(1, 2).reshape(b, tq, h * dh)  # (B, Tq, D)
        torch.testing.assert_close(model.get_submodule(w.where).out_proj(merged), out.tensor, atol=1e-6, rtol=0)


def test_traced_stages_chain_into_each_other(seq2seq):
    """Embedding = token + position; add & norm = LayerNorm(x + sublayer(x)); FFN reads add & norm 1."""
    tr = trace(seq2seq, SRC, TGT)
    get = lambda stage, **kw: tr.get(stage, block="encoder", **kw).tensor  # noqa: E731
    torch.testing.assert_close(get("embedding"), get("token_embedding") + get("positional"), atol=1e-6, rtol=0)
    layer = seq2seq.encoder.layers[0]
    norm1, norm2 = (e.tensor for e in tr.select(layer=0, stages=["add_norm"], block="encoder"))
    torch.testing.assert_close(
        norm1, layer.add_norm1.norm(get("embedding") + get("attn_output", layer=0)), atol=1e-6, rtol=0
    )
    torch.testing.assert_close(get("ffn", layer=0), layer.ff(norm1), atol=1e-6, rtol=0)
    torch.testing.assert_close(norm2, layer.add_norm2.norm(norm1 + get("ffn", layer=0)), atol=1e-6, rtol=0)
    assert tr.get("add_norm", block="encoder", layer=1).tensor.shape == (1, 6, 64)


@pytest.mark.parametrize("softcap", [None, 2.0])
def test_qk_is_the_unscaled_product_of_the_traced_q_and_k(seq2seq, softcap):
    """Each attention's ``qk`` is Q·Kᵀ of its own traced Q and K, and its ``scores`` are that / √Dh (then capped)."""
    model = seq2seq
    if softcap is not None:
        model = GPT(GPTConfig.preset("tiny", vocab_size=16, dropout=0.0, attn_softcap=softcap)).eval()
    tr = trace(model, SRC, TGT) if softcap is None else trace(model, TGT)
    attentions = {(e.block, e.layer, e.kind) for e in tr.select(stages=["qk"])}
    assert len(attentions) == len([m for m in model.modules() if isinstance(m, MultiHeadAttention)])
    stages = [e.stage for e in tr.entries]
    assert all(stages[i + 1] == "scores" for i, s in enumerate(stages) if s == "qk")
    for block, layer, kind in attentions:
        q, k, qk, scores = (tr.get(s, block, layer, kind).tensor for s in ("q", "k", "qk", "scores"))
        assert qk.shape == scores.shape and tr.get("qk", block, layer, kind).dims == ("B", "H", "Tq", "Tk")
        assert torch.equal(qk, q @ k.transpose(-2, -1))
        scaled = qk / math.sqrt(q.shape[-1])
        assert torch.equal(scores, scaled if softcap is None else softcap * torch.tanh(scaled / softcap))
    if softcap is not None:
        assert "soft-capped" in tr.get("scores").note and tr.get("scores").tensor.abs().max() < softcap


def test_the_notes_say_the_scale_and_heads_the_model_used():
    """A Gemma-3-like attention (its own scale, a head size apart from D / H, shared K/V heads, QK-norm): the notes and
    the explorer's formulas say what ran, not the paper's 1/√(D / H)."""
    from tformer.explore.formulas import formula

    config = GPTConfig.preset("tiny", vocab_size=16, dropout=0.0, attn_scale=0.1, head_dim=24, n_kv_heads=2)
    tr = trace(GPT(config.replace(qk_norm=True, norm="rmsnorm", positional="rope")).eval(), TGT)
    q, k, qk, scores = (tr.get(s) for s in ("q", "k", "qk", "scores"))
    torch.testing.assert_close(scores.tensor, qk.tensor * 0.1, rtol=1e-6, atol=0)
    assert scores.note == "Q·Kᵀ × 0.1, the model's scale (not 1/√Dh = 0.2041)"
    assert formula("scores", "decoder", "self", scores.note) == "scores = Q·Kᵀ × s, s = 0.1 (the model's, not 1/√d_k)"
    rope = ", then rotated by RoPE (its position's angles)"  # the Q and K traced are those the scores used
    assert q.note == f"queries Q = RMSNorm(x)·W_Q, split into 4 heads of Dh = 24, each head RMS-normed (QK-norm){rope}"
    assert formula("q", "decoder", "self", q.note) == (
        "Q = RMSNorm(x)·W_Q, split into h heads of d_k = 24 columns (then QK-norm), then rotated by RoPE"
    )
    assert k.note.startswith(f"keys K = RMSNorm(x)·W_K, each head RMS-normed (QK-norm){rope}")
    assert k.note.endswith("(2 heads, each shared by 2 query heads: shown repeated)") and k.tensor.shape[1] == 4
    plain = trace(GPT(GPTConfig.preset("tiny", vocab_size=16, dropout=0.0)).eval(), TGT).get("scores").note
    assert plain == "Q·Kᵀ / √Dh = Q·Kᵀ × 0.25" and formula("scores", "decoder", "self", plain) == "scores = Q·Kᵀ / √d_k"


def test_each_add_and_norm_names_the_sub_layer_it_follows(seq2seq, gpt, bert):
    """A GPT layer has no cross-attention: its second add & norm (add_norm3) says so instead of leaving a gap."""
    notes = [e.note.split(" [")[1] for e in trace(gpt, TGT).select(layer=0, stages=["add_norm"])]
    assert notes == [
        "add_norm1, after self-attention]",
        "add_norm3, after the feed-forward; no cross-attention here, so no add_norm2]",
    ]
    decoder = trace(seq2seq, SRC, TGT).select(layer=0, stages=["add_norm"], block="decoder")
    assert [e.note.split(" [")[1] for e in decoder] == [
        "add_norm1, after self-attention]",
        "add_norm2, after cross-attention]",
        "add_norm3, after the feed-forward]",
    ]
    assert trace(gpt, TGT).get("ffn", layer=0).note == f"Linear(D, F) → {gpt.config.activation} → Linear(F, D)"
    act = bert.config.activation  # a BERT's output head is more than one Linear: said as it runs
    assert (
        trace(bert, SRC).get("logits").note
        == f"MLM head: dense → {act} → LayerNorm → Linear (tied to the token embedding) → logits"
    )
    assert trace(gpt, TGT).get("logits").note == "output head → logits"
    encoder = trace(seq2seq, SRC, TGT).select(layer=0, stages=["add_norm"], block="encoder")
    assert [e.note.split(" [")[1] for e in encoder] == [
        "add_norm1, after self-attention]",
        "add_norm2, after the feed-forward]",
    ]


def test_q_is_what_its_note_says_it_is(seq2seq, gpt):
    """Post-LN (the notes' model): Q = x·W_Q of the layer's input; pre-LN (GPT-2): Q = LayerNorm(x)·W_Q, the norm
    first. A learner who multiplies the traced input by the weights gets the traced Q."""
    for model, tr, block, norm in (
        (seq2seq, trace(seq2seq, SRC, TGT), "encoder", False),
        (gpt, trace(gpt, TGT), "decoder", True),
    ):
        q, x = tr.get("q", block=block, layer=0), tr.get("embedding", block=block)
        layer = getattr(model, block).layers[0]
        assert q.note.startswith("queries Q = LayerNorm(x)·W_Q" if norm else "queries Q = x·W_Q"), q.note
        attn, h = layer.self_attn, layer.self_attn.n_heads
        with torch.no_grad():
            inp = layer.add_norm1.norm(x.tensor) if norm else x.tensor
            mine = attn.qkv_proj(inp)[..., : attn.q_dim].unflatten(-1, (h, -1)).transpose(1, 2)
        torch.testing.assert_close(q.tensor, mine, atol=1e-6, rtol=0)


def test_stages_come_in_data_flow_order(seq2seq):
    stages = [(e.block, e.stage) for e in trace(seq2seq, SRC, TGT).entries]
    order = [
        ("encoder", "token_embedding"),
        ("encoder", "positional"),
        ("encoder", "embedding"),
        ("encoder", "q"),
        ("encoder", "qk"),
        ("encoder", "scores"),
        ("encoder", "weights"),
        ("encoder", "add_norm"),
        ("encoder", "ffn"),
        ("decoder", "embedding"),
        ("decoder", "weights"),
        ("output", "logits"),
        ("output", "probs"),
    ]
    positions = [stages.index(s) for s in order]
    assert positions == sorted(positions)


def test_masked_positions_are_exactly_zero_in_recorded_weights(seq2seq):
    tr = trace(seq2seq, SRC, TGT)
    n_blocked = 0
    for w in tr.select(stages=["weights"]):
        mask = tr.get("mask", w.block, w.layer, w.kind).tensor  # (B, Tq, Tk) 1 = may attend
        blocked = (mask == 0)[:, None].expand_as(w.tensor)
        assert torch.all(w.tensor[blocked] == 0)
        assert torch.all(w.tensor[~blocked] > 0)
        n_blocked += int(blocked.sum())
    assert n_blocked > 0  # padding (encoder, cross) and look-ahead (decoder self) were all exercised


def _printed_grid(text: str, header: str, n_rows: int) -> list[list[str]]:
    """The value cells of the first grid printed after the section ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if header in line)
    grid_start = start + 3 if lines[start + 1].strip().startswith("[") else start + 2
    return [line.split()[1:] for line in lines[grid_start : grid_start + n_rows]]


def test_masked_positions_print_as_exact_zero(toy_trace):
    text = toy_trace.format(stages=["weights"], head=0)
    cells = _printed_grid(text, "decoder layer 0 self-attention · weights", 4)
    for i, row in enumerate(cells):
        assert row[i + 1 :] == ["0"] * (3 - i)  # the future is blocked: printed exactly "0"
        assert all(c != "0" for c in row[: i + 1])  # the past is not (even a tiny weight prints 0.0000)


def test_toy_reproduces_the_notes_positional_row_and_translation(toy_trace):
    pe = toy_trace.get("positional", block="encoder").tensor  # (T, D)
    expected = torch.tensor([0.84147098, 0.54030231, 0.00999983, 0.99995000])
    torch.testing.assert_close(pe[1], expected, atol=1e-6, rtol=0)
    assert re.search(r"pos 1\s+0\.8415\s+0\.5403\s+0\.0100\s+0\.9999", toy_trace.format(stages=["positional"]))
    assert [s["token"] for s in toy_trace.steps] == ["Je", "vais", "bien", "<eos>"]
    assert [c["candidates"][0][0] for c in toy_trace.top_k] == ["Je", "vais", "bien", "<eos>"]
    assert toy_trace.get("q", "decoder", 0, "cross").tensor.shape == (1, 2, 4, 2)


def test_top_k_probs_reproduces_the_notes_softmax_example():
    top = top_k_probs(torch.tensor([45.0, 40.0, 49.0]), ["bien", "Je", "vais"], k=3)
    assert [(t, i) for t, i, _ in top] == [("vais", 2), ("bien", 0), ("Je", 1)]
    assert [p for _, _, p in top] == pytest.approx([0.9819, 0.0180, 0.0001], abs=1e-4)
    assert sum(p for _, _, p in top) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="logits"):
        top_k_probs(torch.zeros(2, 3))


def test_format_filters_layer_head_and_stage(toy_trace):
    text = toy_trace.format(layer=0, head=1, stages=["weights", "mask"])
    sections = [line for line in text.splitlines() if line.startswith("──")]
    assert len(sections) == 6 and all("· weights" in s or "· mask" in s for s in sections)
    assert "[B=0, H=1]" in text and "H=0" not in text
    assert "generated" not in text and "pos 1" not in text
    with pytest.raises(ValueError, match="head"):
        toy_trace.format(head=2)
    with pytest.raises(ValueError, match="stages"):
        toy_trace.format(stages=["attention"])
    for select in (toy_trace.format, toy_trace.to_dict):  # a layer the model lacks: said, not an empty selection
        with pytest.raises(ValueError, match=r"layer must be in \[0, 1\) for this model, got 1"):
            select(layer=1)


def test_the_python_api_is_where_the_readme_says_and_refuses_text_for_ids(gpt):
    import tformer

    assert tformer.inspection.trace is trace  # README: tformer.inspection.trace(model, ...)
    with pytest.raises(TypeError, match="ids takes token ids, got the text 'to be': encode it first"):
        tformer.inspection.trace(gpt, "to be")


def test_large_tensors_are_summarised(seq2seq):
    text = trace(seq2seq, SRC, TGT).format(stages=["masked_scores"], max_full=16)
    assert "mean" in text and "corner" in text and "entries are -inf" in text


def test_to_json_writes_the_same_numbers(toy_trace, tmp_path):
    data = json.loads(toy_trace.to_json(tmp_path / "t.json").read_text())
    entries = [e for e in data["entries"] if e["stage"] == "weights" and e["kind"] == "cross"]
    assert entries[0]["dims"] == ["B", "H", "Tq", "Tk"]
    torch.testing.assert_close(torch.tensor(entries[0]["values"]), toy_trace.get("weights", kind="cross").tensor)
    masked = next(
        e for e in data["entries"] if e["stage"] == "masked_scores" and e["block"] == "decoder" and e["kind"] == "self"
    )
    assert masked["values"][0][0][0][1] == "-inf"
    assert [s["token"] for s in data["generation"]] == ["Je", "vais", "bien", "<eos>"]


def test_trace_plot_attention_draws_the_traced_weights(toy_trace):
    fig = toy_trace.plot_attention(block="decoder", layer=0, kind="cross")
    weights = toy_trace.get("weights", "decoder", 0, "cross").tensor[0]  # (H, Tq, Tk)
    for h in range(2):
        torch.testing.assert_close(
            torch.tensor(fig.axes[h].images[0].get_array()), weights[h].double(), atol=1e-7, rtol=0
        )
    with pytest.raises(ValueError, match="no 'weights' entry"):
        toy_trace.plot_attention(block="encoder", kind="cross")


def test_trace_refuses_unknown_models_and_bad_ids(gpt):
    with pytest.raises(TypeError, match="model"):
        trace(torch.nn.Linear(2, 2), [1, 2])
    with pytest.raises(ValueError, match="ids"):
        trace(gpt, [[1, 2], [3, 4]])


def test_cli_trace_toy_prints_the_walk_through(capsys):
    assert main(["trace", "--toy"]) == 0
    out = capsys.readouterr().out
    assert "decoder layer 0 cross-attention · weights" in out
    assert "generated: Je vais bien <eos>" in out
    assert re.search(r"pos 1\s+0\.8415\s+0\.5403", out)


def test_cli_trace_json(tmp_path, capsys):
    path = tmp_path / "trace.json"
    assert main(["trace", "--toy", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    assert data["tokens"]["decoder"] == ["<sos>", "Je", "vais", "bien"]
    assert {"q", "weights", "add_norm", "ffn", "logits"} <= {e["stage"] for e in data["entries"]}
    assert data["top_k"] and data["generation"]


def test_trace_json_holds_what_layer_head_and_stage_select_as_the_printout_does(tmp_path, capsys):
    whole = tmp_path / "whole.json"
    assert main(["trace", "--toy", "--json", str(whole)]) == 0
    capsys.readouterr()
    path = tmp_path / "some.json"
    argv = ["trace", "--toy", "--layer", "0", "--head", "1", "--stage", "weights,q", "--json", str(path)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    data, every = json.loads(path.read_text()), json.loads(whole.read_text())["entries"]
    places = [(e["block"], e["layer"], e["kind"], e["stage"]) for e in data["entries"]]
    assert places and all(layer == 0 and stage in ("weights", "q") for _, layer, _, stage in places)
    assert printed.count("── ") == len(places)  # the entries printed, no more
    assert data["top_k"] == data["generation"] == []  # (outside the layers, as the printout leaves them out)
    for e in data["entries"]:
        key = lambda x: (x["block"], x["layer"], x["kind"], x["stage"], x["where"])  # noqa: E731
        full = next(f for f in every if key(f) == key(e))
        h = e["dims"].index("H")
        assert e["head"] == 1 and e["shape"][h] == 1 and full["shape"][h] > 1
        assert torch.equal(torch.tensor(e["values"]), torch.tensor(full["values"]).narrow(h, 1, 1))
    top = tmp_path / "top.json"
    assert main(["trace", "--toy", "--stage", "top_k", "--json", str(top)]) == 0
    data = json.loads(top.read_text())
    assert data["entries"] == [] and data["top_k"] and data["generation"] == []


def _word_tokenizer(words: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def test_cli_trace_model_dir_with_tokenizers_and_ids(seq2seq, gpt, tmp_path, capsys):
    s2s_dir, gpt_dir = seq2seq.save_pretrained(tmp_path / "s2s"), gpt.save_pretrained(tmp_path / "gpt")
    specials = ["<pad>", "<unk>", "<sos>", "<eos>"]
    _word_tokenizer(specials + ["I", "am", "good", "."]).save(str(s2s_dir / "src_tokenizer.json"))
    _word_tokenizer(specials + ["Je", "vais", "bien"]).save(str(s2s_dir / "tgt_tokenizer.json"))
    assert (
        main(["trace", "--model", str(s2s_dir), "I am good.", "--target", "Je vais bien", "--max-new-tokens", "3"]) == 0
    )
    out = capsys.readouterr().out
    assert "encoder tokens: I am good ." in out and "decoder tokens: <sos> Je vais bien" in out
    assert "step 3:" in out
    assert (
        main(["trace", "--model", str(gpt_dir), "--ids", "5 6 7", "--stage", "generation", "--max-new-tokens", "2"])
        == 0
    )
    assert "step 2: fed" in capsys.readouterr().out
    assert main(["trace", "--model", str(gpt_dir), "--prompt", "to be"]) == 2
    assert "--ids" in capsys.readouterr().err
    assert main(["trace", "--model", str(gpt_dir), "--ids", "5 99999"]) == 2  # named by the flag, not the library
    assert "--ids holds the id 99999, outside the model's vocabulary [0, " in capsys.readouterr().err
    assert main(["trace", "--model", str(s2s_dir), "--ids", "4 5", "--target-ids", "2 -1", "--stage", "tokens"]) == 2
    assert "--target-ids holds the id -1, outside the model's vocabulary [0, " in capsys.readouterr().err
    assert main(["trace", "--model", str(s2s_dir), "--ids", "4 5 6", "--stage", "tokens"]) == 0
    assert "encoder tokens: I am good" in capsys.readouterr().out  # ids named by the model's tokenizer


@pytest.fixture(scope="module")
def char_gpt(tmp_path_factory):
    """A character GPT (context 16) whose tokens include a space and a newline."""
    from tformer.tokenizers import train_tokenizer

    tok = train_tokenizer("char", ["to be\nor not"])
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=tok.vocab_size, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=16, dropout=0.0)
    directory = GPT(config).save_pretrained(tmp_path_factory.mktemp("char") / "gpt")
    tok.save(directory)
    return directory


def test_cli_trace_shows_whitespace_tokens_and_says_when_the_context_cut_generation(char_gpt, capsys):
    """A space, a newline and a tab print as ␣ ↵ ⇥ (as tformer explore shows them): never invisible, never a broken
    line; generation that the context cuts before --max-new-tokens is said, with the numbers."""
    assert main(["trace", "--model", str(char_gpt), "--prompt", "to be\nor", "--max-new-tokens", "20"]) == 0
    captured = capsys.readouterr()
    assert "decoder tokens: t o ␣ b e ↵ o r" in captured.out
    grid = next(line for line in captured.out.splitlines() if line.strip().startswith("t ") and "␣" in line)
    assert grid.split() == ["t", "o", "␣", "b", "e", "↵", "o", "r"]  # the ids grid's header: one column a token
    steps = [line.split() for line in captured.out.splitlines() if line.startswith("    step ")]
    assert len(steps) == 8 and all(len(words) == 7 for words in steps[1:])  # "step N: fed X → Y (p=...)": one line
    generated = next(line for line in captured.out.splitlines() if line.startswith("    generated:"))
    assert len(generated.split()) == 1 + 8
    assert "generation stopped after 8 of 20 step(s): the model's context is 16 tokens, the prompt holds 8" in (
        captured.err
    )
    from tformer.inspection.format import shown

    assert [shown(t) for t in (" ", "\n", "\t", "", "a b")] == ["␣", "↵", "⇥", "∅", "a␣b"]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["I am good.", "--prompt", "other"], "TEXT and --prompt were both given"),
        (["I am good.", "--ids", "5 6"], "TEXT and --ids were both given"),
        (["--ids", "5", "--target", "x", "--target-ids", "2"], "--target and --target-ids were both given"),
        (["--toy", "hi"], "--toy traces the notes' 'I am good .', its own input: leave out TEXT"),
        (["GPT", "--prompt", "to", "--target", "x"], "--target is a translation model's decoder input"),
        (["BERT", "--ids", "5 6", "--max-new-tokens", "3"], "--max-new-tokens: --model"),
    ],
)
def test_cli_trace_refuses_two_inputs_or_one_its_model_does_not_read(argv, words, char_gpt, tmp_path, capsys):
    """Given two ways, or to a model that does not read it, an input was used or ignored in silence: refused."""
    from tformer import Bert, BertConfig

    model = {"GPT": ["--model", str(char_gpt)], "BERT": ["--model", str(tmp_path / "bert")]}
    if argv[0] == "BERT":
        Bert(BertConfig(vocab_size=20, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=16)).save_pretrained(
            tmp_path / "bert"
        )
    argv = [*model.get(argv[0], [] if argv[0] == "--toy" else ["--toy"]), *argv[1 if argv[0] in model else 0 :]]
    assert main(["trace", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_toy_trains_where_gradients_are_switched_off():
    """The toy trains itself when it is first asked for; a learner's notebook may have switched gradients off
    before that (torch.set_grad_enabled(False), torch.no_grad()). It used to fail there with 'element 0 of tensors
    does not require grad'."""
    with torch.no_grad():
        toy = toy_seq2seq(train_steps=2, seed=31)  # steps and seed of its own: not a cached result, it trains here
        assert not torch.is_grad_enabled()  # and the caller's mode is left as it was
    assert all(torch.isfinite(p).all() for p in toy.model.parameters())
