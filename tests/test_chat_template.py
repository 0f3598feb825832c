"""Chat templates (issue 46, item 1) against ``transformers`` itself, on tiny chat models with real templates.

* Rendering: our text and ids are ``transformers``' ``apply_chat_template``'s for SmolLM2's template (in
  tokenizer_config.json) and Qwen2.5's (chat_template.jinja), with and without a system message, over several turns,
  with and without the generation prompt; a template built to use every helper of the environment (loop controls,
  ``namespace``, ``tojson``, ``raise_exception``, ``{% generation %}``, the special tokens, ``tools``) renders the same.
* Files: where a template is read from (the .jinja file wins, a list's "default"), and a saved tokenizer keeps it
  where ``transformers`` reads the same one.
* Bad input: one ValueError naming the argument or the file.
* The conversation in a context (:func:`tformer.lm.chat_prompt_ids`) and the model's reply (:func:`tformer.lm.reply`):
  the oldest turns dropped whole, a system message kept; a greedy reply is ``transformers``' greedy ``generate`` on
  the same prompt, ending at ``<|im_end|>``.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")
from tformer import lm  # noqa: E402
from tformer.generation import SamplingConfig  # noqa: E402
from tformer.tokenizers import CharTokenizer, HFTokenizer, load_tokenizer  # noqa: E402
from tformer.tokenizers.chat_template import read_chat_template, render_chat  # noqa: E402
from tiny_chat_models import CHATML, byte_bpe, gpt2_dir, llama_chat_dir, qwen_chat_dir  # noqa: E402

SYSTEM = {"role": "system", "content": "You answer in one short sentence."}
CONVERSATIONS = {
    "one-user-turn": [{"role": "user", "content": "What is the capital of France?"}],
    "system-and-user": [SYSTEM, {"role": "user", "content": "Hello world!"}],
    "three-turns": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "def f(x):\n    return x * 2  # what is this?"},
    ],
    "system-and-turns": [
        SYSTEM,
        {"role": "user", "content": "The quick brown fox"},
        {"role": "assistant", "content": "jumps over the lazy dog."},
        {"role": "user", "content": "héllo ✓ 日本語, and <|im_end|> typed by a user"},
        {"role": "assistant", "content": " spaces  and\ttabs\n"},
    ],
}

# every helper and variable of the environment transformers renders with
HELPERS = (
    "{%- set ns = namespace(n=0) -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' %}{% continue %}{% endif -%}"
    "{%- set ns.n = ns.n + 1 -%}"
    "{{ bos_token }}[{{ ns.n }}] {{ m.role }}: {{ m.content | tojson }}{{ eos_token }}\n"
    "{%- if m.role == 'assistant' %}{% generation %}<{{ m.content }}>{% endgeneration %}{% endif -%}"
    "{%- if ns.n > 3 %}{% break %}{% endif -%}"
    "{% endfor -%}"
    "{{ dict(a=1, b=[2, 'é']) | tojson(indent=1) }}|{{ pad_token }}|{{ unk_token is defined }}|"
    "{{ tools is none }}|{{ documents is none }}|{{ strftime_now('%Y')[:2] }}"
    "{%- if add_generation_prompt %}\n  {{ 'ASSISTANT:' }}{% endif %}"
)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat")
    made = {
        "llama": llama_chat_dir(root / "llama"),
        "qwen": qwen_chat_dir(root / "qwen"),
        "gpt2": gpt2_dir(root / "gpt2"),
    }
    # Llama 3's way: a post-processor that starts every text with BOS (which a rendered template must not get twice),
    # and generation_config.json naming another BOS id than tokenizer_config.json's bos_token (the template's)
    bos = made["llama-bos"] = shutil.copytree(made["llama"], root / "llama-bos")
    (bos / "tokenizer.json").write_text(byte_bpe(CHATML, bos="<|im_start|>").to_str(), encoding="utf-8")
    generation = json.loads((bos / "generation_config.json").read_text())
    (bos / "generation_config.json").write_text(json.dumps({**generation, "bos_token_id": 0}))
    return made


def _theirs(directory):
    return transformers.AutoTokenizer.from_pretrained(directory)


# ------------------------------------------------------------------------------------------------ rendering


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("name", ["llama", "qwen", "llama-bos"])
def test_the_text_and_ids_are_transformers(dirs, name, conversation, add_generation_prompt):
    messages = CONVERSATIONS[conversation]
    ours, theirs = HFTokenizer.load(dirs[name]), _theirs(dirs[name])
    text = theirs.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)
    ids = theirs.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, return_dict=False)
    assert ours.apply_chat_template(messages, add_generation_prompt) == text
    assert ours.apply_chat_template(messages, add_generation_prompt, tokenize=True) == ids
    assert text.endswith("<|im_start|>assistant\n") == add_generation_prompt  # both templates' generation prompt


@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_every_helper_of_the_environment_renders_as_in_transformers(dirs, conversation):
    ours, theirs = HFTokenizer.load(dirs["llama"]), _theirs(dirs["llama"])
    for prompt in (True, False):
        expected = theirs.apply_chat_template(
            CONVERSATIONS[conversation], chat_template=HELPERS, add_generation_prompt=prompt, tokenize=False
        )
        ours.chat_template = HELPERS
        assert ours.apply_chat_template(CONVERSATIONS[conversation], prompt) == expected
    assert "<|im_start|>[1] user: " in expected and "|<|im_end|>|False|True|True|" in expected


def test_the_special_tokens_a_template_sees_are_tokenizer_config_jsons(dirs):
    """By the names tokenizer_config.json gives (bos_token <|im_start|>), not the ids generation_config.json gives
    (bos_token_id 0, <|endoftext|>, in llama-bos), as transformers passes them."""
    tok = HFTokenizer.load(dirs["llama-bos"])
    assert tok.bos_id == 0
    names = "{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ mask_token | default('none') }}"
    tok.chat_template = names
    theirs = _theirs(dirs["llama-bos"])
    expected = theirs.apply_chat_template(CONVERSATIONS["one-user-turn"], chat_template=names, tokenize=False)
    assert (
        tok.apply_chat_template(CONVERSATIONS["one-user-turn"]) == expected == "<|im_start|>|<|im_end|>|<|im_end|>|none"
    )


def test_messages_are_plain_data_before_the_template_sees_them():
    """None values are dropped (as transformers drops them), the reasoning is seen under its three names, and a
    message's extra keys are passed on."""
    template = "{% for m in messages %}{{ m.thinking }}/{{ m.reasoning_content }}/{{ m.name is defined }};{% endfor %}"
    messages = [{"role": "assistant", "content": "4", "reasoning": "2+2", "name": None}]
    assert render_chat(template, messages, False) == "2+2/2+2/False;"
    assert render_chat("{{ messages[0].name }}", [{"role": "user", "content": "", "name": "ann"}]) == "ann"


# ------------------------------------------------------------------------------------------------ files


def test_where_the_template_is_read_from(dirs, tmp_path):
    assert (
        read_chat_template(dirs["llama"])
        == json.loads((dirs["llama"] / "tokenizer_config.json").read_text())["chat_template"]
    )
    assert read_chat_template(dirs["qwen"]) == (dirs["qwen"] / "chat_template.jinja").read_text(encoding="utf-8")
    assert read_chat_template(dirs["gpt2"]) is None and HFTokenizer.load(dirs["gpt2"]).chat_template is None
    assert read_chat_template(tmp_path) is None  # no file at all

    both = shutil.copytree(dirs["llama"], tmp_path / "both")
    (both / "chat_template.jinja").write_bytes(b"{{ 'from the file' }}\r\n{{ 'crlf' }}\r\n")
    assert read_chat_template(both) == _theirs(both).chat_template == "{{ 'from the file' }}\n{{ 'crlf' }}\n"

    named = shutil.copytree(dirs["gpt2"], tmp_path / "named")
    config = json.loads((named / "tokenizer_config.json").read_text())
    templates = [{"name": "tool_use", "template": "{{ 'tools' }}"}, {"name": "default", "template": "{{ 'chat' }}"}]
    (named / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": templates}))
    assert read_chat_template(named) == "{{ 'chat' }}"
    assert _theirs(named).apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == "chat"
    assert load_tokenizer(named).apply_chat_template([{"role": "user", "content": "x"}]) == "chat"


def test_a_saved_tokenizer_keeps_its_template_where_transformers_reads_the_same(dirs, tmp_path):
    messages = CONVERSATIONS["system-and-turns"]
    for name in ("llama", "qwen"):
        tok = HFTokenizer.load(dirs[name])
        out = tmp_path / name
        tok.save(out)
        assert (out / "chat_template.jinja").read_text(encoding="utf-8") == tok.chat_template
        assert "chat_template" not in json.loads((out / "tokenizer_config.json").read_text())  # one place, one text
        again, theirs = HFTokenizer.load(out), _theirs(out)
        assert again.chat_template == theirs.chat_template == tok.chat_template == read_chat_template(dirs[name])
        assert again.apply_chat_template(messages) == theirs.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
    # a tokenizer without a template saved over one that had it: no stale template left for transformers to find
    HFTokenizer.load(dirs["gpt2"]).save(tmp_path / "llama")
    assert (
        not (tmp_path / "llama" / "chat_template.jinja").exists() and _theirs(tmp_path / "llama").chat_template is None
    )


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "messages, says",
    [
        ("Hi", 'messages must be a non-empty list of {"role": str, "content": str} dicts, got str \'Hi\''),
        ([], "messages must be a non-empty list"),
        (["Hi"], "messages[0] must be a {'role': str, 'content': str} dict, got str 'Hi'"),
        ([{"role": "user"}], "messages[0]['content'] must be a string, got NoneType None"),
        ([{"role": "user", "content": "a"}, {"role": 1, "content": "b"}], "messages[1]['role'] must be a string"),
        ([{"role": "user", "content": "a\x00b"}], "messages[0]['content']: holds a NUL character"),
    ],
)
def test_bad_messages_are_one_value_error_naming_them(dirs, messages, says):
    tok = HFTokenizer.load(dirs["llama"])
    with pytest.raises(ValueError) as raised:
        tok.apply_chat_template(messages)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_a_template_that_refuses_or_is_not_jinja_says_so(dirs, tmp_path):
    refuses = "{% if messages[0].role != 'system' %}{{ raise_exception('Conversations must start with a system message') }}{% endif %}"
    with pytest.raises(ValueError, match="^the chat template refused these messages: Conversations must start with"):
        render_chat(refuses, CONVERSATIONS["one-user-turn"])
    assert render_chat(refuses, CONVERSATIONS["system-and-user"]) == ""
    with pytest.raises(ValueError, match=r"^the chat template failed on these messages: TypeError: "):
        render_chat("{{ messages[0].content + 1 }}", CONVERSATIONS["one-user-turn"])
    with pytest.raises(ValueError, match=r"^template: the chat template is not valid Jinja \(line 2: "):
        render_chat("ok\n{% if %}", CONVERSATIONS["one-user-turn"])
    with pytest.raises(ValueError, match="^template must be the text of a Jinja chat template"):
        render_chat(None, CONVERSATIONS["one-user-turn"])
    with pytest.raises(ValueError, match="^add_generation_prompt must be True or False, got 'no'"):
        render_chat("", CONVERSATIONS["one-user-turn"], "no")
    broken = shutil.copytree(dirs["qwen"], tmp_path / "broken")
    (broken / "chat_template.jinja").write_text("{% for m in messages %}\n{{ m.content }\n", encoding="utf-8")
    path = str(broken / "chat_template.jinja")
    with pytest.raises(ValueError, match=f"^{path!r}: the chat template is not valid Jinja \\(line 2: "):
        HFTokenizer.load(broken)
    config = json.loads((broken / "tokenizer_config.json").read_text())
    (broken / "chat_template.jinja").unlink()
    (broken / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": [{"name": "tool_use"}]}))
    with pytest.raises(ValueError, match="chat_template must be a string or a list of"):
        HFTokenizer.load(broken)
    (broken / "tokenizer_config.json").write_text(
        json.dumps({**config, "chat_template": [{"name": "tool_use", "template": "x"}]})
    )
    with pytest.raises(ValueError, match=r"lists the templates \['tool_use'\] and none is named 'default'"):
        HFTokenizer.load(broken)


def test_a_tokenizer_without_a_template_says_so_in_one_line(dirs):
    for tok in (CharTokenizer.train(["abc"]), HFTokenizer.load(dirs["gpt2"])):
        with pytest.raises(ValueError, match=f"^this {tok.kind} tokenizer has no chat template") as raised:
            tok.apply_chat_template(CONVERSATIONS["one-user-turn"])
        assert "\n" not in str(raised.value)


# ------------------------------------------------------------------------------------------------ the context


def _long_chat(turns: int, system: bool) -> list[dict]:
    messages = [SYSTEM] if system else []
    for i in range(turns):
        messages.append({"role": "user", "content": f"Question {i}: what is the capital of France?"})
        messages.append({"role": "assistant", "content": f"Answer {i}: Paris is the capital of France."})
    return [*messages, {"role": "user", "content": "And the last question?"}]


@pytest.mark.parametrize("system", [True, False], ids=["with-system", "no-system"])
def test_the_oldest_turns_are_dropped_whole_and_the_system_message_kept(dirs, system):
    tok = HFTokenizer.load(dirs["llama"])
    messages = _long_chat(6, system)
    full = tok.apply_chat_template(messages, tokenize=True)
    assert lm.chat_prompt_ids(tok, messages, len(full)) == (full, 0)
    head = messages[:1] if system else []
    for keep in (4, 2, 0):  # the last `keep` turns, then the last message
        kept = head + messages[len(messages) - 1 - 2 * keep :]
        fits = tok.apply_chat_template(kept, tokenize=True)
        ids, dropped = lm.chat_prompt_ids(tok, messages, len(fits))
        assert (ids, dropped) == (fits, len(messages) - len(kept))
        assert dropped % 2 == 0 and kept[len(head)]["role"] == "user"
        assert (tok.decode(ids).count(SYSTEM["content"]) == 1) == system
    with pytest.raises(
        ValueError, match="alone takes? .* tokens in the chat template, more than the 10 the context"
    ) as e:
        lm.chat_prompt_ids(tok, messages, 10)
    assert ("the system message and the last message" in str(e.value)) == system


def _ends_early(directory, messages, max_new_tokens):
    """Rewrite the model's output row of <|im_end|> (a scaled copy of the row of a token greedy decoding picks) until
    transformers' greedy reply to ``messages`` ends with it; returns that reply's ids and the prompt's length."""
    tok = _theirs(directory)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    width = prompt["input_ids"].shape[1]
    for _ in range(5):
        new = model.generate(**prompt, max_new_tokens=max_new_tokens, do_sample=False)[0, width:].tolist()
        if end in new[:-1] or new[-1:] == [end]:
            model.save_pretrained(directory)
            return new, width
        with torch.no_grad():
            head = model.get_output_embeddings().weight
            head[end] = head[new[min(3, len(new) - 1)]] * 1.5
    raise AssertionError("greedy decoding never reached <|im_end|>")


@pytest.mark.parametrize("name", ["llama", "qwen"])
def test_a_greedy_reply_is_transformers_greedy_generate_ending_at_the_end_of_turn(name, tmp_path):
    directory = {"llama": llama_chat_dir, "qwen": qwen_chat_dir}[name](tmp_path / name)
    messages = CONVERSATIONS["system-and-user"]
    new, width = _ends_early(directory, messages, 30)
    assert width + 30 <= 128  # the model's context: nothing dropped, no window sliding
    assert new[-1] == 2 and len(new) < 30  # the model's end of turn, <|im_end|>, before the limit
    model, tok = lm.load(directory)
    shown: list[str] = []
    answer = lm.reply(model, tok, messages, 30, SamplingConfig(False), on_text=shown.append)
    expected = _theirs(directory).decode(new[:-1], skip_special_tokens=False)
    assert answer == lm.ChatReply(expected, width, len(new), "stop", 0)
    assert "".join(shown) == expected and "<|im_end|>" not in expected
    # cut short: the same first tokens, "length"
    short = lm.reply(model, tok, messages, 2, SamplingConfig(False))
    assert short.finish_reason == "length" and short.completion_tokens == 2
    assert expected.startswith(short.text)


def test_a_reply_leaves_room_for_its_tokens_by_dropping_the_oldest_turns(dirs):
    model, tok = lm.load(dirs["llama"])
    messages = [{"role": "system", "content": "Be brief."}]
    messages += [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}] * 2
    messages += [{"role": "user", "content": "Bye"}]
    full = len(tok.apply_chat_template(messages, tokenize=True))
    answer = lm.reply(model, tok, messages, 8, SamplingConfig(False), max_context=full + 7)
    assert answer.dropped == 2 and answer.prompt_tokens + 8 <= full + 7
    assert lm.reply(model, tok, messages, 8, SamplingConfig(False), max_context=full + 8).dropped == 0
    with pytest.raises(ValueError, match=r"^max_context must be an integer in \[1, 128\]"):
        lm.reply(model, tok, messages, 8, max_context=129)
    with pytest.raises(ValueError, match="^max_new_tokens=128 leaves no room for the conversation"):
        lm.reply(model, tok, messages, 128)
