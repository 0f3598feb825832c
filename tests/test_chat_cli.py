"""``tformer chat`` (issue 46, item 3): a REPL over the chat template, driven through stdin as a pipe drives it.

Each reply is :func:`tformer.lm.reply`'s for the conversation so far (the history kept, ``--system`` first);
``/reset`` clears the history, ``/exit`` and the end of the input end; a conversation that outgrows the context drops
its oldest turns with one line on stderr; a message too long for the context is refused and the chat goes on; a
model without a chat template is refused in one line naming ``--model``.
"""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

pytest.importorskip("transformers")
from tformer import lm  # noqa: E402
from tformer.cli import main  # noqa: E402
from tformer.generation import SamplingConfig  # noqa: E402
from tiny_chat_models import gpt2_dir, llama_chat_dir, qwen_chat_dir  # noqa: E402

GREEDY = ["--greedy", "--max-new-tokens", "6"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat-cli")
    return {
        "llama": llama_chat_dir(root / "llama"),
        "qwen": qwen_chat_dir(root / "qwen"),
        "gpt2": gpt2_dir(root / "gpt2"),
    }


def _chat(monkeypatch, capsys, directory, lines: str, *flags: str) -> tuple[int, str, str]:
    """``tformer chat --model DIRECTORY FLAGS`` with ``lines`` piped to its stdin: (status, stdout, stderr)."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines.encode("utf-8")), encoding="utf-8"))
    capsys.readouterr()
    code = main(["chat", "--model", str(directory), *flags])
    out, err = capsys.readouterr()
    return code, out, err


def _replies(directory, turns: list[list[str]], system: str = "", max_new_tokens: int = 6, dropped=None) -> str:
    """What the chat prints for ``turns`` (each a list of user messages after a reset): every greedy reply of
    :func:`tformer.lm.reply` to the history so far, a line end after each. The history loses what a reply dropped
    (each count appended to ``dropped``)."""
    model, tok = lm.load(directory)
    out = []
    for messages in turns:
        head = [{"role": "system", "content": system}] if system else []
        history: list[dict] = []
        for text in messages:
            history.append({"role": "user", "content": text})
            answer = lm.reply(model, tok, head + history, max_new_tokens, SamplingConfig(False))
            history = [*history[answer.dropped :], {"role": "assistant", "content": answer.text}]
            out.append(answer.text + "\n")
            if dropped is not None and answer.dropped:
                dropped.append(answer.dropped)
    return "".join(out)


@pytest.mark.parametrize("name", ["llama", "qwen"])
def test_each_reply_continues_the_conversation_and_reset_clears_it(dirs, monkeypatch, capsys, name):
    lines = "Hi\nWhat is the capital of France?\n\n/reset\nHello world\n/exit\nnot read\n"
    code, out, err = _chat(monkeypatch, capsys, dirs[name], lines, *GREEDY)
    assert code == 0, err
    expected = _replies(dirs[name], [["Hi", "What is the capital of France?"], ["Hello world"]])
    assert out == expected  # an empty line is no message; nothing after /exit is read
    assert err == ""  # nothing dropped, nothing refused, no prompt on a pipe


def test_an_unknown_command_is_refused_not_sent_and_a_doubled_slash_sends_the_word(dirs, monkeypatch, capsys):
    lines = "/help\n/rest\n//usr\n/reset\n/usr/bin is a folder\n"
    code, out, err = _chat(monkeypatch, capsys, dirs["llama"], lines, *GREEDY)
    assert code == 2
    assert out == _replies(dirs["llama"], [["/usr"], ["/usr/bin is a folder"]])
    help_line, refused = err.splitlines()
    assert help_line.startswith("tformer chat: /reset to clear the conversation") and "/help" in help_line
    assert refused == "tformer chat: error: unknown command /rest: the commands are /reset, /exit, /help"


def test_the_system_message_starts_every_conversation_and_the_end_of_input_ends(dirs, monkeypatch, capsys):
    code, out, err = _chat(monkeypatch, capsys, dirs["llama"], "Hi\n/reset\nHi", "--system", "Be brief.", *GREEDY)
    assert code == 0, err
    assert out == _replies(dirs["llama"], [["Hi"], ["Hi"]], system="Be brief.")
    assert out.count("\n") == 2  # the same first reply after /reset: the history, not the system message, went


def test_a_conversation_that_outgrows_the_context_drops_its_oldest_turns_with_a_note(dirs, monkeypatch, capsys):
    flags = ["--greedy", "--max-new-tokens", "40", "--system", "Be brief."]
    said = ["Hi", "Hello", "How are you?", "Bye", "Thanks"]
    code, out, err = _chat(monkeypatch, capsys, dirs["llama"], "\n".join(said) + "\n", *flags)
    assert code == 0, err
    dropped: list[int] = []
    assert out == _replies(dirs["llama"], [said], "Be brief.", 40, dropped)
    assert len(dropped) >= 2 and all(n % 2 == 0 for n in dropped)  # whole turns: a message and its reply
    note = "tformer chat: note: the conversation outgrew the context (128 tokens, 40 kept for the reply): its oldest"
    assert err.splitlines() == [f"{note} {n} message(s) were dropped" for n in dropped]  # what went stays gone


def test_a_message_too_long_for_the_context_is_refused_and_the_chat_goes_on(dirs, monkeypatch, capsys):
    code, out, err = _chat(monkeypatch, capsys, dirs["llama"], "word " * 200 + "\nHi\n", *GREEDY)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("tformer chat: error: the last message alone takes") and "more than the 122" in line
    assert out == _replies(dirs["llama"], [["Hi"]])


def test_a_model_without_a_chat_template_is_refused_in_one_line(dirs, monkeypatch, capsys):
    code, out, err = _chat(monkeypatch, capsys, dirs["gpt2"], "Hi\n", *GREEDY)
    assert (code, out) == (2, "")
    assert err == (
        f"tformer chat: error: --model {str(dirs['gpt2'])!r} has no chat template (chat_template.jinja, or "
        "chat_template in tokenizer_config.json): tformer chat needs a chat model's; `tformer generate` continues "
        "a text\n"
    )
    code, _, err = _chat(monkeypatch, capsys, dirs["llama"], "Hi\n", "--max-new-tokens", "128")
    assert code == 2 and err.startswith("tformer chat: error: --max-new-tokens 128 leaves no room for the conversation")
    assert len(err.strip().splitlines()) == 1


def test_it_reads_a_real_pipe_and_streams_the_reply(dirs):
    """The command as a user runs it: ``printf ... | tformer chat``; stdin is a pipe, not a terminal."""
    out = subprocess.run(
        [sys.executable, "-m", "tformer", "chat", "--model", str(dirs["qwen"]), *GREEDY],
        input="Hi\n/exit\n",
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == _replies(dirs["qwen"], [["Hi"]])


def test_the_default_reply_length_fits_a_small_context(dirs, monkeypatch, capsys):
    """The default --max-new-tokens (300) would leave no room in a context of 128: it is a quarter of it then."""
    code, out, err = _chat(monkeypatch, capsys, dirs["llama"], "Hi there\n", "--greedy")
    assert code == 0 and "Traceback" not in err, err
    assert out == _replies(dirs["llama"], [["Hi there"]], max_new_tokens=32)


def test_a_nul_the_model_said_is_kept_in_the_conversation_not_refused(dirs):
    """A byte-level model can sample the byte 0x00: its turn goes back into the history (chat, serve's clients), and
    the next reply must not refuse it; a user's NUL is still refused."""
    model, tok = lm.load(dirs["llama"])
    said = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "\x00Hello"}]
    answer = lm.reply(model, tok, [*said, {"role": "user", "content": "Again"}], 3, SamplingConfig(False))
    assert answer.text is not None
    with pytest.raises(ValueError, match=r"messages\[0\]\['content'\]: holds a NUL"):
        lm.reply(model, tok, [{"role": "user", "content": "H\x00i"}], 3, SamplingConfig(False))


def test_a_line_that_is_not_text_is_refused_and_the_chat_goes_on(dirs, monkeypatch, capsys):
    """Bad UTF-8 on one line: that line is refused naming it, the next is answered (the session does not end)."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"bad \xff byte\nHi\n"), encoding="utf-8"))
    capsys.readouterr()
    code = main(["chat", "--model", str(dirs["llama"]), *GREEDY])
    out, err = capsys.readouterr()
    assert code == 2 and "<stdin>:1: not valid UTF-8" in err
    assert out == _replies(dirs["llama"], [["Hi"]])


def test_ctrl_c_during_a_reply_stops_it_and_the_chat_goes_on_without_that_turn(dirs, monkeypatch, capsys):
    expected = _replies(dirs["llama"], [["Hi"]])  # "Hi" begins the conversation anew
    real, calls = lm.reply, []

    def interrupted_once(*args, **kwargs):
        calls.append(args[2][-1]["content"])
        if len(calls) == 1:
            kwargs["on_text"]("half a rep")
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(lm, "reply", interrupted_once)
    code, out, err = _chat(monkeypatch, capsys, dirs["llama"], "Tell me a long story\nHi\n", *GREEDY)
    assert code == 0 and "the reply was stopped (Ctrl-C)" in err
    assert out == "half a rep\n" + expected
    assert calls == ["Tell me a long story", "Hi"]


def test_ctrl_c_at_the_prompt_ends_the_chat_as_the_end_of_input_does(dirs, monkeypatch, capsys):
    expected = _replies(dirs["llama"], [["Hi"]])

    class Typed:  # a person's stdin: "Hi", then Ctrl-C while the next line is read
        lines = [b"Hi\n"]

        def readline(self):
            if self.lines:
                return self.lines.pop(0)
            raise KeyboardInterrupt

        def isatty(self):
            return False

    monkeypatch.setattr(sys, "stdin", Typed())
    capsys.readouterr()
    code = main(["chat", "--model", str(dirs["llama"]), *GREEDY])
    out, err = capsys.readouterr()
    assert (code, out) == (0, expected) and "error" not in err and "interrupted" not in err


def test_a_system_message_the_template_refuses_is_said_once_at_the_start(dirs, tmp_path, monkeypatch, capsys):
    """Mistral's template takes no system role (it raises): --system is refused before any message, not each one."""
    import json
    import shutil

    mistral = tmp_path / "mistral"
    shutil.copytree(dirs["llama"], mistral)
    (mistral / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((mistral / "tokenizer_config.json").read_text())
    config["chat_template"] = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for m in messages %}{{ '[' + m['role'] + '] ' + m['content'] + '\n' }}{% endfor %}"
    )
    (mistral / "tokenizer_config.json").write_text(json.dumps(config))
    code, out, err = _chat(monkeypatch, capsys, mistral, "hi\nhello\n", *GREEDY, "--system", "Be brief")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "--system: this model's chat template refuses a system message" in err and "System role not supported" in err
    code, out, _ = _chat(monkeypatch, capsys, mistral, "hi\n", *GREEDY)  # without --system it chats
    assert code == 0 and out.endswith("\n")
