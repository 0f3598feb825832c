"""Supervised fine-tuning of a language model on instruction data: the loss on the answers only.

    {"prompt": "What is the capital of France?", "response": "Paris."}            one JSONL line: a question and its answer
    {"messages": [{"role": "system", "content": "..."}, {"role": "user", ...}, {"role": "assistant", ...}, ...]}

* :func:`read_conversations` reads such a JSONL file (every line the same kind) into conversations, lists of
  ``{"role", "content"}`` messages (a prompt/response line is a user turn and an assistant turn); a file of plain text,
  a folder or a JSONL of ``{"text"}`` is not instruction data (None): it trains as continued pretraining.
* :func:`encode_conversation` renders a conversation with the model's chat template as the model will see it when it
  answers (``tokenizer.apply_chat_template``): each assistant turn is the text the template adds between the
  conversation up to it *with the generation prompt* and the conversation through it, so the prompt tokens are the
  ones ``tformer chat`` and ``serve`` feed, and the turn's own end (``<|im_end|>``) is learned. Labels are the ids of
  the assistant turns, -100 (ignored) elsewhere. A model without a template takes prompt/response lines only, as the
  prompt's ids, then the response's and the end of text.
* :class:`SFTTask` (for the :class:`~tformer.training.trainer.Trainer`): shuffled batches of examples, padded on the
  right (a causal model's real positions never see the padding), the loss summed over the answer tokens.

Dimension legend: B batch, T the longest example of a batch (at most max_len + 1 ids), V vocabulary.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import torch

from tformer.fast.losses import sequence_cross_entropy
from tformer.text import check_text, decode_utf8

__all__ = ["IGNORE", "read_conversations", "encode_conversation", "SFTTask", "sft_task"]

IGNORE = -100  # a label the loss skips (PyTorch's ignore_index default)
ROLES = ("system", "user", "assistant")


def read_conversations(path: str | Path, text_field: str = "text") -> list[list[dict[str, str]]] | None:
    """The conversations of the JSONL file ``path`` (``prompt``/``response`` or ``messages`` lines), or None when
    ``path`` is not instruction data (a text file, a folder, a JSONL of ``text_field``: its first line says, the rest
    is not read). A line of another kind than the first, or a malformed one, is a ValueError naming FILE:LINE."""
    path = Path(path)
    if path.suffix != ".jsonl" or not path.is_file():
        return None
    conversations: list[list[dict[str, str]]] = []
    kind = None
    for n, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise ValueError(f"{where}: not a JSON object") from None
        if not isinstance(record, dict):
            raise ValueError(f"{where}: not a JSON object")
        this = (
            "messages"
            if "messages" in record
            else "prompt"
            if "prompt" in record
            else "text"
            if text_field in record
            else None
        )
        if this is None:
            raise ValueError(
                f"{where}: expected a {text_field!r}, 'prompt' and 'response', or 'messages' field, got "
                f"{sorted(record)[:5]}"
            )
        if kind is None:
            kind = this
            if kind == "text":
                return None  # plain documents (tformer.lm.data.read_documents reads them)
        elif this != kind:
            raise ValueError(f"{where}: a {this!r} line in a file of {kind!r} lines (one kind per file)")
        conversations.append(_conversation(record, kind, where))
    if kind is None:
        raise ValueError(f"--data {str(path)!r} holds no JSONL lines")
    return conversations


def _lines(path: Path):
    """The lines of a UTF-8 file, one at a time (strict UTF-8, errors naming the line)."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            yield decode_utf8(raw, str(path), n).removesuffix("\n").removesuffix("\r")


def _conversation(record: dict[str, Any], kind: str, where: str) -> list[dict[str, str]]:
    if kind == "prompt":
        for field in ("prompt", "response"):
            if not isinstance(record.get(field), str):
                raise ValueError(f"{where}: field {field!r} must be a string")
        messages = [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": record["response"]}]
        if isinstance(record.get("system"), str):
            messages.insert(0, {"role": "system", "content": record["system"]})
    else:
        raw = record["messages"]
        if not isinstance(raw, list) or not raw:
            raise ValueError(f"{where}: 'messages' must be a non-empty list of {{'role', 'content'}} objects")
        messages = []
        for i, m in enumerate(raw):
            if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                raise ValueError(
                    f"{where}: messages[{i}] must be {{'role': one of {list(ROLES)}, 'content': a string}}, got {m!r:.80}"
                )
            messages.append({"role": m["role"], "content": m["content"]})
    for m in messages:
        check_text(m["content"], f"{where}: {m['role']} content")
    if not any(m["role"] == "assistant" for m in messages):
        raise ValueError(f"{where}: the conversation has no assistant turn to learn")
    return messages


def encode_conversation(tokenizer, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    """(ids, labels) of one conversation: labels are the ids of the assistant turns, :data:`IGNORE` elsewhere."""
    if getattr(tokenizer, "chat_template", None) is None:
        return _plain(tokenizer, messages)
    pieces: list[tuple[str, bool]] = []  # (text, learned)
    done = ""
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = tokenizer.apply_chat_template(messages[:i], add_generation_prompt=True)
        through = tokenizer.apply_chat_template(messages[: i + 1], add_generation_prompt=False)
        if not prompt.startswith(done) or not through.startswith(prompt):
            raise ValueError(
                "the chat template does not render a conversation as the text of its earlier turns followed by the "
                "next one, so the answers' tokens cannot be told apart; train on plain text instead"
            )
        pieces += [(prompt[len(done) :], False), (through[len(prompt) :], True)]
        done = through
    whole = tokenizer.apply_chat_template(messages, add_generation_prompt=False)
    if whole.startswith(done) and len(whole) > len(done):
        pieces.append((whole[len(done) :], False))
    ids: list[int] = []
    labels: list[int] = []
    for text, learned in pieces:
        part = tokenizer.encode(text, add_special_tokens=False) if text else []
        ids += part
        labels += part if learned else [IGNORE] * len(part)
    return ids, labels


def _plain(tokenizer, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    """A model without a chat template: the prompt's ids (as ``generate`` encodes a prompt), then the response's and
    the end of text, learned."""
    roles = [m["role"] for m in messages]
    if roles != ["user", "assistant"]:
        raise ValueError(
            "this model's tokenizer has no chat template (chat_template.jinja, or chat_template in "
            "tokenizer_config.json), so only prompt/response lines can be trained on, not a conversation of "
            f"{roles}"
        )
    if tokenizer.eos_id is None:
        raise ValueError("this model's tokenizer has no end-of-text token to end a response with")
    prompt = tokenizer.encode(messages[0]["content"], add_special_tokens=True)
    response = tokenizer.encode(messages[1]["content"]) + [tokenizer.eos_id]
    return prompt + response, [IGNORE] * len(prompt) + response


class SFTTask:
    """Fine-tuning on encoded conversations (for the Trainer): ``metric`` val_loss per answer token."""

    metric, higher_is_better = "val_loss", False
    rate_unit = "answer tok"  # count_tokens counts the tokens learned (the assistant's), not the prompts'
    cross_entropy = staticmethod(sequence_cross_entropy)  # a kernel the Trainer chooses, as LMTask's

    def __init__(
        self,
        tokenizer,
        train: list[tuple[list[int], list[int]]],
        valid: list[tuple[list[int], list[int]]],
        batch_size: int,
        pad_id: int,
        seed: int = 0,
    ) -> None:
        if not train:
            raise ValueError("no training example has an answer token left within --max-len")
        self.tokenizer, self.train, self.valid = tokenizer, train, valid
        self.batch_size, self.pad_id, self.seed = batch_size, pad_id, seed

    def _collate(self, rows: list[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, labels), (B, T) each, padded on the right (ids with ``pad_id``, labels with :data:`IGNORE`)."""
        longest = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(rows), longest), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), longest), IGNORE, dtype=torch.long)
        for i, (x, y) in enumerate(rows):
            ids[i, : len(x)] = torch.tensor(x)
            labels[i, : len(y)] = torch.tensor(y)
        return ids, labels

    def train_batches(self, epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        order = list(range(len(self.train)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        chunks = [order[k : k + self.batch_size] for k in range(0, len(order), self.batch_size)]
        return [self._collate([self.train[i] for i in c]) for c in chunks]

    @staticmethod
    def count_tokens(batch: tuple[torch.Tensor, torch.Tensor]) -> int:
        return int((batch[1][:, 1:] != IGNORE).sum())

    def loss(self, model, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, int]:
        device = next(model.parameters()).device
        ids, labels = (t.to(device) for t in batch)
        logits = model(ids[:, :-1])  # (B, T-1, V): each position predicts the next id
        target = labels[:, 1:]  # (B, T-1)
        loss = self.cross_entropy(logits, target, ignore_index=IGNORE, reduction="sum")
        return loss, int((target != IGNORE).sum())

    @torch.no_grad()
    def evaluate(self, model) -> dict:
        """Validation loss per answer token and its perplexity; ``{}`` without validation examples."""
        if not self.valid:
            return {}
        was_training = model.training
        model.eval()
        nats, tokens = 0.0, 0
        for k in range(0, len(self.valid), self.batch_size):
            ids, labels = self._collate(self.valid[k : k + self.batch_size])
            loss, n = self.loss(model, (ids, labels))
            nats, tokens = nats + float(loss), tokens + n
        model.train(was_training)
        loss_per_token = nats / max(tokens, 1)
        return {"val_loss": loss_per_token, "val_ppl": math.exp(loss_per_token) if loss_per_token < 700 else math.inf}

    def save_extra(self, directory) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(directory)


def sft_task(tok, conversations: list, block: int, rows: int, valid: float, seed: int, log) -> SFTTask:
    """The fine-tuning task of ``conversations``: each encoded (answers learned), cut at ``block`` + 1 ids (one
    without an answer token left is dropped, said), ``valid`` of them (a fraction) held out, seeded."""
    examples, cut, dropped = [], 0, 0
    for messages in conversations:
        ids, labels = encode_conversation(tok, messages)
        if len(ids) > block + 1:
            ids, labels, cut = ids[: block + 1], labels[: block + 1], cut + 1
        if all(y == IGNORE for y in labels[1:]):
            dropped += 1
            continue
        examples.append((ids, labels))
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    n_valid = round(valid * len(examples)) if valid else 0
    if valid and len(examples) > 1:
        n_valid = max(n_valid, 1)
    train = [examples[i] for i in order[n_valid:]]
    held = [examples[i] for i in order[:n_valid]]
    answers = sum(sum(y != IGNORE for y in labels) for _, labels in train)
    notes = [f"{cut} cut at --max-len {block}"] if cut else []
    if dropped:
        notes.append(f"{dropped} dropped (no answer token within --max-len)")
    template = "the model's chat template" if tok.chat_template is not None else "prompt + response (no chat template)"
    log(
        f"data: {len(conversations)} conversations, {len(train)} train / {len(held)} validation"
        + (f" ({', '.join(notes)})" if notes else "")
        + f"; {answers:,} answer tokens learned, rendered with {template}"
    )
    pad = tok.pad_id if tok.pad_id is not None else tok.eos_id
    return SFTTask(tok, train, held, rows, pad if pad is not None else 0, seed)
