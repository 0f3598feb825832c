"""Chat templates: the Jinja text a chat model ships to turn a conversation into the one string it was trained on.

    template = read_chat_template("SmolLM2-135M-Instruct")        # None when the directory has none
    text = render_chat(template, [{"role": "user", "content": "Hi"}], bos_token="<|im_start|>")
    # '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, ...<|im_end|>\\n<|im_start|>user\\nHi<|im_end|>\\n'
    # '<|im_start|>assistant\\n'                                    (the generation prompt: the model answers next)

Where a Hugging Face directory keeps it (``transformers`` 5 reads the same places, in the same order):

    chat_template.jinja      the template as a file of its own (how ``save_pretrained`` writes it since 4.43)
    tokenizer_config.json    "chat_template": the template as a string, or a list of {"name", "template"} of which
                             the one named "default" is the chat template (others, such as "tool_use", are not read)

The file wins over the config. Rendering is ``transformers``' ``apply_chat_template`` rendering (checked against it
in tests/test_chat_template.py): the same Jinja environment (sandboxed and immutable: a template from the Hub is
untrusted code; ``trim_blocks`` and ``lstrip_blocks``; ``{% break %}`` / ``{% continue %}``; a ``{% generation %}``
block renders its body), the same helpers (``raise_exception(message)``, the ``tojson`` filter without HTML escaping,
``strftime_now(format)``, ``dict(...)``, ``namespace(...)``) and the same variables: ``messages``,
``add_generation_prompt``, ``tools`` and ``documents`` (None here), and whatever the caller adds (the tokenizer's
special tokens by name: ``bos_token``, ``eos_token``, ...). Messages are plain data before the template sees them:
keys whose value is None are dropped, ``reasoning_content`` / ``thinking`` / ``reasoning`` are one field under all
three names.

This module knows Jinja and the files; it knows nothing about tokenizers, models or generation.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tformer.checks import check_yes_no
from tformer.readers import read_json_object, read_text_file
from tformer.text import check_text

__all__ = ["TEMPLATE_FILE", "read_chat_template", "render_chat", "check_messages"]

TEMPLATE_FILE = "chat_template.jinja"
CONFIG = "tokenizer_config.json"
REASONING = ("reasoning_content", "thinking", "reasoning")  # one message field under the names templates read


def read_chat_template(directory: str | Path, prefix: str = "") -> str | None:
    """The chat template of the Hugging Face directory ``directory``: ``chat_template.jinja``, else
    ``tokenizer_config.json``'s ``chat_template`` (a string, or the list entry named "default"); None when neither
    has one. A template that is not valid Jinja, or a config field of another shape, is a ValueError naming the file."""
    directory = Path(directory)
    path, config = directory / (prefix + TEMPLATE_FILE), directory / (prefix + CONFIG)
    template: str | None = None
    if path.is_file():
        # read as text files are read in Python (transformers too): \r\n and \r are \n
        template = read_text_file(path, "chat template").replace("\r\n", "\n").replace("\r", "\n")
    elif config.is_file():
        path, template = config, _from_config(read_json_object(config, "tokenizer config").get("chat_template"), config)
    if template is not None:
        _compile(template, repr(str(path)))  # not Jinja: said now, naming the file
    return template


def _from_config(value: Any, path: Path) -> str | None:
    """tokenizer_config.json's ``chat_template``: a string, or a list of {"name", "template"} → the "default" one."""
    if value is None or isinstance(value, str):
        return value
    shape = 'a string or a list of {"name": ..., "template": ...} objects'
    if not isinstance(value, list) or not all(
        isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str) for t in value
    ):
        raise ValueError(f"{str(path)!r}: chat_template must be {shape}, got {_shown(value)}")
    named = {t["name"]: t["template"] for t in value}
    if "default" not in named:
        raise ValueError(
            f"{str(path)!r}: chat_template lists the templates {sorted(named)} and none is named 'default', "
            "the one a chat uses"
        )
    return named["default"]


def render_chat(template: str, messages: Any, add_generation_prompt: bool = True, **variables: Any) -> str:
    """The text of the conversation ``messages`` (a list of {"role": str, "content": str}, other keys passed on) in
    ``template``; ``add_generation_prompt``: end with what opens the assistant's reply; ``variables``: more names the
    template sees (``bos_token="<s>"``). Bad messages, a template that is not Jinja or one that refuses the
    conversation (``raise_exception``, an error while rendering): one ValueError saying which."""
    if not isinstance(template, str):
        raise ValueError(f"template must be the text of a Jinja chat template (a string), got {_shown(template)}")
    check_yes_no(add_generation_prompt=add_generation_prompt)
    chat = [_reasoning(_plain(m)) for m in check_messages(messages)]
    names = {"tools": None, "documents": None, **_plain(variables)}
    compiled = _compile(template, "template")
    try:
        return compiled.render({**names, "messages": chat, "add_generation_prompt": add_generation_prompt})
    except jinja2.TemplateError as err:  # raise_exception(...), an undefined name called, the sandbox refusing
        raise ValueError(f"the chat template refused these messages: {err.message or type(err).__name__}") from None
    except (ArithmeticError, AttributeError, LookupError, TypeError, ValueError) as err:  # Python's, in the template
        raise ValueError(f"the chat template failed on these messages: {type(err).__name__}: {err}") from None


def check_messages(messages: Any) -> list[dict]:
    """``messages`` itself when it is a non-empty list of dicts, each with a string ``role`` and ``content``."""
    expected = 'a non-empty list of {"role": str, "content": str} dicts'
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError(f"messages must be {expected}, got {_shown(messages)}")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{i}] must be a {{'role': str, 'content': str}} dict, got {_shown(message)}")
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                raise ValueError(
                    f"messages[{i}][{key!r}] must be a string, got {_shown(message.get(key))} "
                    f"(each message is a {{'role': str, 'content': str}} dict)"
                )
            # no lone surrogate, no NUL, except in the model's own turns (a byte token 0x00 it generated)
            check_text(message[key], f"messages[{i}][{key!r}]", nul=key == "content" and message["role"] == "assistant")
    return list(messages)


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:60] + '…'}"


def _plain(value: Any) -> Any:
    """``value`` rebuilt from plain JSON-like types, so that the template sees no object with methods of its own: a
    subclass of str, int or float becomes the base type, a mapping a dict (None values dropped from messages later),
    anything else a placeholder ``<TypeName>`` (templates test for media keys, they never read them)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):  # an enum's or another subclass's methods are not the template's to call
        return str.__str__(value)
    if isinstance(value, (int, float)):
        return int(value) if isinstance(value, int) else float(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return f"<{type(value).__name__}>"


def _reasoning(message: dict) -> dict:
    """A message as templates read it: no key whose value is None, and its reasoning (the first of :data:`REASONING`
    it has) also as ``thinking`` (what the gpt-oss templates read) and ``reasoning_content`` (what the others read)."""
    message = {k: v for k, v in message.items() if v is not None}
    reasoning = next((message[k] for k in REASONING if k in message), None)
    if reasoning is None:
        return message
    return {"thinking": reasoning, **message, "reasoning_content": reasoning}


# ------------------------------------------------------------------------------------------ the Jinja environment


class _Generation(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: marks the assistant's part for training masks; renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


def _raise_exception(message: Any) -> None:
    raise jinja2.TemplateError(str(message))


def _tojson(value: Any, ensure_ascii: bool = False, indent=None, separators=None, sort_keys: bool = False) -> str:
    """JSON as templates expect it (Jinja's own ``tojson`` escapes ``<``, ``>``, ``&`` and ``'`` for HTML)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _Dict:
    """``dict(...)`` and ``dict.fromkeys(...)`` in a template, without the type itself (no attribute to climb)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any) -> dict:
        return dict.fromkeys(*args)


class _Namespace(jinja2.utils.Namespace):
    """Jinja's ``namespace(...)``, refusing names that start with ``_`` (a way towards Python's internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # Jinja's own signature: namespace(self=...) stays a name
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a chat template may not set {name!r} on a namespace")


@functools.lru_cache(maxsize=1)
def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, dict=_Dict(), namespace=_Namespace)
    return env


def _compile(template: str, where: str) -> jinja2.Template:
    """``template`` compiled (once: a chat renders it every turn); not Jinja: a ValueError naming ``where``."""
    try:
        return _compiled(template)
    except jinja2.TemplateSyntaxError as err:
        raise ValueError(f"{where}: the chat template is not valid Jinja (line {err.lineno}: {err.message})") from None


@functools.lru_cache(maxsize=16)
def _compiled(template: str) -> jinja2.Template:
    return _environment().from_string(template)
