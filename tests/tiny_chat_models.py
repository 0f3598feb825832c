"""Tiny random chat models saved as Hugging Face directories, for the tests of fine-tuning, chat and serve (issue 46).

    llama_chat_dir(path)   a Llama-layout model (GQA, untied) with a byte-level BPE, ChatML specials and SmolLM2's
                           chat template in tokenizer_config.json, as SmolLM2-135M-Instruct ships it
    qwen_chat_dir(path)    a Qwen2-layout model (Q/K/V bias, tied) with Qwen2.5's chat template written as
                           chat_template.jinja, as transformers >= 4.43 saves it
    gpt2_dir(path)         a GPT-2 with no chat template (Conv1D weights, fused c_attn)

Each is saved with ``save_pretrained`` by ``transformers`` itself, the tokenizer trained here on a few lines; the
templates are the models' own text (data, not code). Importing this module needs ``transformers``.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, this is a tiny test of the tokenizer.",
    "What is the capital of France? Paris is the capital of France.",
    "user assistant system You are a helpful AI assistant.",
    "def f(x):\n    return x * 2  # twice\n",
] * 3

# SmolLM2-135M-Instruct's chat_template (tokenizer_config.json), verbatim
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Qwen2.5-Instruct's chat template without its tool-calling branches (the part a plain chat renders), verbatim
QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    '    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or '
    '(message.role == "assistant" and not message.tool_calls) %}\n'
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

CHATML = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BLOCK = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


def byte_bpe(specials: list[str], bos: str | None = None, vocab_size: int = 320) -> Tokenizer:
    """A byte-level BPE (GPT-2's, SmolLM2's) trained on :data:`TEXTS`; ``bos``: a post-processor that adds it."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TEXTS, trainer)
    if bos is None:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    return tok


def llama_chat_dir(path: str | Path, seed: int = 0) -> Path:
    """A tiny SmolLM2-like chat model: Llama layout, ChatML, the template in tokenizer_config.json."""
    path = Path(path)
    tok = byte_bpe(CHATML)
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        **BLOCK,
        max_position_embeddings=128,
        initializer_range=0.2,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=False,
    )
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|im_end|>"
    )
    fast.chat_template = SMOLLM2_TEMPLATE
    fast.save_pretrained(path, save_jinja_files=False)  # the template inside tokenizer_config.json
    return path


def qwen_chat_dir(path: str | Path, seed: int = 0) -> Path:
    """A tiny Qwen2.5-like chat model: Qwen2 layout (Q/K/V bias, tied), the template as chat_template.jinja."""
    path = Path(path)
    tok = byte_bpe(CHATML)
    torch.manual_seed(seed)
    config = transformers.Qwen2Config(
        vocab_size=tok.get_vocab_size(),
        **BLOCK,
        max_position_embeddings=128,
        initializer_range=0.2,
        bos_token_id=None,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    transformers.Qwen2ForCausalLM(config).save_pretrained(path)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = QWEN25_TEMPLATE
    fast.save_pretrained(path)  # transformers 5 writes chat_template.jinja
    if not (path / "chat_template.jinja").is_file():
        (path / "chat_template.jinja").write_text(QWEN25_TEMPLATE, encoding="utf-8")
    return path


def gpt2_dir(path: str | Path, seed: int = 0) -> Path:
    """A tiny GPT-2 (no chat template)."""
    path = Path(path)
    tok = byte_bpe(["<|endoftext|>"])
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=tok.get_vocab_size(),
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=128,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=0,
    )
    transformers.GPT2LMHeadModel(config).save_pretrained(path)
    eot = "<|endoftext|>"
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=eot, eos_token=eot).save_pretrained(path)
    return path


def gpt_neox_dir(path: str | Path, seed: int = 0) -> Path:
    """A tiny GPT-NeoX with the sequential block (tformer's RoPE GPT with an MLP; no chat template)."""
    path = Path(path)
    tok = byte_bpe(["<|endoftext|>"])
    torch.manual_seed(seed)
    config = transformers.GPTNeoXConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
        use_parallel_residual=False,
        rotary_pct=1.0,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=0,
    )
    transformers.GPTNeoXForCausalLM(config).save_pretrained(path)
    eot = "<|endoftext|>"
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=eot, eos_token=eot).save_pretrained(path)
    return path
