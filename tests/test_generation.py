"""Decoder-only generation: cache vs recomputation, batched vs one-by-one, the logit filters on hand-made inputs."""

import math
import warnings

import pytest
import torch

from tformer import GPT, GPTConfig
from tformer.generation import (
    SamplingConfig,
    apply_repetition_penalty,
    choose_next,
    generate_lm,
    process_logits,
    top_k_filter,
    top_p_filter,
)

PROMPTS = [[5, 9, 3], [7, 1, 2, 8, 4, 6, 11], [12], [3, 3, 14, 15, 9]]


def _greedy_without_cache(model, prompt, steps):
    ids = list(prompt)
    for _ in range(steps):
        ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt) :]


@pytest.mark.parametrize("model", ["gpt", "gpt_rope"])
def test_cached_generation_equals_full_recomputation(request, model):
    gpt = request.getfixturevalue(model)
    for prompt in PROMPTS:
        assert generate_lm(gpt, [prompt], 20) == [_greedy_without_cache(gpt, prompt, 20)]


@pytest.mark.parametrize("model", ["gpt", "gpt_rope"])
def test_cached_logits_equal_full_logits_step_by_step(request, model):
    gpt = request.getfixturevalue(model)
    ids = torch.tensor([PROMPTS[1] + [2, 17, 30, 4, 4, 21, 8]])  # (1, 14)
    full = gpt(ids)  # (1, 14, V)
    cache = gpt.new_cache()
    first = gpt(ids[:, :7], cache=cache)
    steps = [gpt(ids[:, t : t + 1], cache=cache) for t in range(7, ids.shape[1])]
    torch.testing.assert_close(torch.cat([first, *steps], 1), full, atol=1e-5, rtol=0)


def test_a_cache_given_another_batch_says_so(gpt):
    """A cache filled by a batch of 2, then fed a batch of 3: one line naming the rows, not torch's size mismatch."""
    cache = gpt.new_cache()
    gpt(torch.tensor([[5, 9, 3], [3, 14, 15]]), cache=cache)
    assert repr(cache) == "KVCache(2 layers, 3 positions stored, 2 batch rows)"
    with pytest.raises(ValueError, match=r"this KV cache holds 2 batch row\(s\), got 3: a cache serves the batch"):
        gpt(torch.tensor([[1], [2], [3]]), cache=cache)


@pytest.mark.parametrize("model", ["gpt", "gpt_rope"])
@pytest.mark.parametrize("penalty", [1.0, 1.3])
def test_batched_prompts_of_different_lengths_equal_one_by_one(request, model, penalty):
    gpt = request.getfixturevalue(model)
    sampling = SamplingConfig(repetition_penalty=penalty)
    batched = generate_lm(gpt, PROMPTS, 15, sampling, pad_id=0)
    single = [generate_lm(gpt, [p], 15, sampling)[0] for p in PROMPTS]
    assert batched == single


def test_top_k_one_equals_greedy(gpt):
    sampled = generate_lm(gpt, PROMPTS, 12, SamplingConfig(do_sample=True, temperature=1.7, top_k=1), seed=3)
    assert sampled == generate_lm(gpt, PROMPTS, 12)


def test_same_seed_same_sample_different_seed_different_sample(gpt):
    sampling = SamplingConfig(do_sample=True, temperature=1.0, top_k=40, top_p=0.98)
    one = generate_lm(gpt, PROMPTS, 20, sampling, seed=1)
    assert one == generate_lm(gpt, PROMPTS, 20, sampling, seed=1)
    assert one != generate_lm(gpt, PROMPTS, 20, sampling, seed=2)


@pytest.mark.parametrize("p, kept", [(0.8, 2), (0.81, 3), (0.5, 1), (0.3, 1), (0.96, 4), (1.0, 4)])
def test_top_p_keeps_the_smallest_set_reaching_p(p, kept):
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    out = top_p_filter(logits, p)
    assert torch.isfinite(out).sum().item() == kept
    assert torch.isfinite(out[0, :kept]).all()  # the most likely ones are the ones kept
    shuffled = top_p_filter(logits[:, [2, 0, 3, 1]], p)  # order of the vocabulary does not matter
    assert torch.isfinite(shuffled).sum().item() == kept


def test_top_k_filter_keeps_the_k_largest():
    out = top_k_filter(torch.tensor([[1.0, 4.0, 3.0, 2.0]]), 2)
    assert out.tolist() == [[-math.inf, 4.0, 3.0, -math.inf]]


def test_temperature_divides_the_logits():
    logits = torch.tensor([[2.0, 1.0, -1.0]])
    hot = process_logits(logits, SamplingConfig(do_sample=True, temperature=2.0))
    assert hot.tolist() == [[0.0, -0.5, -1.5]]  # (logits - max) / T: the top at 0, so nothing can overflow
    torch.testing.assert_close(hot.softmax(-1), (logits / 2.0).softmax(-1))  # the same distribution as logits / T
    # lower temperature sharpens: the top token gets more probability
    assert (
        process_logits(logits, SamplingConfig(True, 0.5)).softmax(-1)[0, 0]
        > logits.softmax(-1)[0, 0]
        > hot.softmax(-1)[0, 0]
    )


def test_repetition_penalty_on_a_hand_made_example():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0]])
    previous = torch.tensor([[0, 1, 0]])  # tokens 0 (twice) and 1 were seen
    out = apply_repetition_penalty(logits, previous, 2.0)
    assert out.tolist() == [[1.0, -2.0, 0.5, 3.0]]  # positive divided, negative multiplied, once per token
    assert (
        choose_next(
            torch.tensor([[3.0, 2.9]]), SamplingConfig(repetition_penalty=1.5), previous=torch.tensor([[0]])
        ).item()
        == 1
    )


def test_stop_tokens_and_stop_callback_end_rows(gpt):
    free = generate_lm(gpt, PROMPTS[:2], 10)
    stopped = generate_lm(gpt, PROMPTS[:2], 10, stop_ids=[free[0][3]])
    assert stopped[0] == free[0][: free[0].index(free[0][3]) + 1]
    calls = []
    out = generate_lm(gpt, PROMPTS[:2], 10, stop=lambda step, ids: (calls.append(step), [step == 2, step == 5])[1])
    assert out == [free[0][:3], free[1][:6]] and calls == list(range(6))


@pytest.mark.parametrize("model", ["gpt", "gpt_rope"])
def test_finished_rows_leave_the_batch_and_the_others_decode_as_before(request, model):
    gpt = request.getfixturevalue(model)
    free = generate_lm(gpt, PROMPTS, 10)  # prompts of 4 lengths: left padding, attention mask and positions
    ends_at = [2, 5, None, 0]  # the step at which stop() ends each row; None: never
    sizes, seen = [], []
    hook = gpt.register_forward_pre_hook(lambda m, args: sizes.append(args[0].shape[0]))
    try:
        out = generate_lm(
            gpt,
            PROMPTS,
            10,
            on_token=lambda step, ids: seen.append(ids.tolist()),
            stop=lambda step, ids: [step == e for e in ends_at],
        )
    finally:
        hook.remove()
    assert out == [free[0][:3], free[1][:6], free[2], free[3][:1]]
    assert sizes == [4, 3, 3, 2, 2, 2, 1, 1, 1, 1]  # the prompts, then one step each for the rows still running
    assert seen[0] == [row[0] for row in free]
    assert seen[1] == [free[0][1], free[1][1], free[2][1], 0] and seen[6] == [0, 0, free[2][6], 0]  # pad_id once ended
    eos = free[2][0]  # ends row 2 at once, and any other row that makes it
    assert generate_lm(gpt, PROMPTS, 10, eos_id=eos) == [
        row[: row.index(eos) + 1] if eos in row else row for row in free
    ]


def test_generation_slides_past_the_context_window():
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=20, max_len=8, dropout=0.0)).eval()
    calls = []

    def positions_used(args, kwargs):  # positions=None means counted on from the cache's length
        ids, given, start = args[0], kwargs["positions"], kwargs["cache"].length
        return given if given is not None else torch.arange(start, start + ids.shape[1])[None]

    hook = model.register_forward_pre_hook(
        lambda m, args, kwargs: calls.append((args[0], positions_used(args, kwargs))), with_kwargs=True
    )
    try:
        out = generate_lm(model, [[1, 2, 3]], 30)[0]
    finally:
        hook.remove()
    assert len(out) == 30
    assert out[:6] == _greedy_without_cache(model, [1, 2, 3], 6)  # inside the window: unchanged
    seq = [1, 2, 3] + out
    # after 5 fed tokens the 8 positions are full: the cache is rebuilt from the last 3/4 (6 tokens), positions from 0
    ids, positions = calls[6]
    assert ids.tolist() == [seq[3:9]] and positions.tolist() == [list(range(6))]


def test_a_tensor_of_prompts_works_like_the_lists_and_a_bad_shape_is_named(gpt):
    prompts = torch.tensor([[5, 9, 3], [3, 14, 15]])  # (B, T), as HF's input_ids
    assert generate_lm(gpt, prompts, 6) == generate_lm(gpt, prompts.tolist(), 6)
    with pytest.raises(ValueError, match=r"prompts as a tensor must have shape \(B, T\), got \(3,\)"):
        generate_lm(gpt, torch.tensor([5, 9, 3]), 6)


def test_a_padded_tensor_of_prompts_reads_its_attention_mask_as_hugging_face_does(gpt):
    """Left- or right-padded, a batch with its attention_mask continues each prompt as its own list of ids; the
    pads read as prompt tokens (without the mask) give other tokens, so the mask is not vacuous."""
    padded = torch.tensor([[0, 0, 5, 9], [3, 14, 15, 7], [6, 2, 0, 0]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]])
    lists = [[5, 9], [3, 14, 15, 7], [6, 2]]
    expected = generate_lm(gpt, lists, 6)
    assert generate_lm(gpt, padded, 6, attention_mask=mask) == expected
    assert generate_lm(gpt, padded, 6, attention_mask=mask.bool()) == expected
    assert generate_lm(gpt, padded, 6) != expected
    for bad, said in (
        (mask[:, :3], r"attention_mask must have the prompts' shape \(3, 4\), got \(3, 3\)"),
        (mask * 2, r"attention_mask must hold 1 \(a token\) or 0 \(padding\)"),
        (mask.float(), r"attention_mask must hold 1"),
        (torch.tensor([[0, 0, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0]]), r"attention_mask\[1\] marks no token"),
    ):
        with pytest.raises(ValueError, match=said):
            generate_lm(gpt, padded, 6, attention_mask=bad)
    with pytest.raises(TypeError, match="attention_mask is for prompts given as a \\(B, T\\) tensor"):
        generate_lm(gpt, lists, 6, attention_mask=mask)


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_a_length_that_is_not_a_positive_integer_is_named(gpt, bad):
    with pytest.raises(ValueError, match=rf"max_new_tokens must be an integer in \[1, 100000\], got {bad!r}"):
        generate_lm(gpt, [[5, 9, 3]], bad)


def test_a_prompt_longer_than_the_context_is_read_from_its_end_and_said(gpt):
    """As the command line notes it: the library warns, naming the prompt, rather than cut in silence."""
    from tformer.generation import PromptCut

    context = gpt.config.max_len
    long = [[(i % 40) + 3 for i in range(context + 8)], [5, 9]]
    said = rf"prompts\[0\] has {context + 8} tokens, more than the model's context of {context}: it is read from its"
    with pytest.warns(PromptCut, match=rf"{said} last {context - 1}"):
        cut = generate_lm(gpt, long, 3)
    assert cut[0] == generate_lm(gpt, [long[0][-(context - 1) :]], 3)[0]
    full = rf"prompts\[0\] has {context} tokens, as many as the model's context of {context}: it is read from its last"
    with pytest.warns(PromptCut, match=full):  # a prompt that fills the context is not "more than" it
        generate_lm(gpt, [long[0][:context]], 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        generate_lm(gpt, [long[0][: context - 1]], 1)  # it fits with one new token: nothing said
