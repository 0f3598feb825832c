"""A Hugging Face model directory (``save_pretrained``, a Hub snapshot, or ``tformer export``) as a tformer model,
without ``transformers``.

    SmolLM2-135M/
      config.json                      model_type (gpt2, gpt_neox, llama, mistral, qwen2, qwen3, gemma3_text, bert,
                                       marian)
      model.safetensors                the weights; or, sharded:
      model.safetensors.index.json     {"weight_map": {HF name: shard file}} + the shards it names
      tokenizer.json, ...              the tokenizer (read by the tokenizer room, not here)

:func:`declares_hf` tells such a config.json from tformer's own (whose ``model_type`` is "gpt", "bert" or "seq2seq"
and which names no ``architectures``); :func:`load_hf_dir` reads any of them, :func:`load_hf_model` a decoder
(the LM family's loader), :func:`read_hf_bert_dir` + :func:`bert_from_hf_dir` a BERT (fill-mask, sentence
embeddings). Only safetensors are read (nothing is unpickled), and only files inside the directory: an index that
names a shard elsewhere ("../x", an absolute path) is refused (links the directory holds are followed: a Hub cache
snapshot links each file to its blob). Every bad input is one ``ValueError`` / ``FileNotFoundError`` naming its
file: a config.json that is not a JSON object or names an unknown model_type, a missing or truncated shard, a
weight the index names but its shard lacks, weights that do not fit the config, a weight that is not floating point
(an integer or boolean tensor would be cast silently) or that holds NaN or inf (both name the file and the tensor),
a config field of the wrong type or out of range (naming the field). bf16 / fp16 weights load as float32 unless
``dtype`` says otherwise.

The names and layouts change on the way through the architecture modules (:mod:`tformer.hf.registry`).

Dimension legend: V vocabulary size, D model dim.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tformer.hf import bert, common, gpt2, gpt_neox, llama, registry, sizes
from tformer.models.bert import Bert, BertConfig
from tformer.models.config import ModelConfig
from tformer.models.gpt import GPT, GPTConfig
from tformer.models.loading import DTYPES, check_finite, fill, read_header, read_into, read_tensors
from tformer.readers import load_safetensors, read_json_object, safetensors_shapes

__all__ = [
    "declares_hf",
    "is_hf_dir",
    "read_hf_config",
    "read_hf_weights",
    "check_hf_sizes",
    "weight_names",
    "load_hf_model",
    "load_hf_dir",
    "read_hf_bert_dir",
    "bert_from_hf_dir",
    "CONFIG",
    "WEIGHTS",
    "INDEX",
    "HF_MODEL_TYPES",
]

CONFIG, WEIGHTS, INDEX = "config.json", "model.safetensors", "model.safetensors.index.json"
HF_MODEL_TYPES = registry.DECODER_TYPES  # the decoder-only model_types read as a GPT
_NOT_WEIGHTS = (
    gpt2.IGNORED,
    gpt_neox.IGNORED,
    llama.IGNORED,
    bert.IGNORED,
)  # buffers a converter skips: their dtype is not checked


def declares_hf(config: Mapping[str, Any]) -> bool:
    """A config.json (as a dict) declares a Hugging Face model: it names ``architectures`` or a
    ``transformers_version`` (``save_pretrained`` writes both), or a ``model_type`` only Hugging Face writes (llama,
    marian, ...). tformer's own name neither and say "seq2seq", "gpt" or "bert"; a "bert" that names neither is
    Hugging Face's when it lacks the ``d_model`` every tformer config holds (a hand-written BERT config). The one rule
    :func:`tformer.loader.detect` and :func:`is_hf_dir` read directories by."""
    if config.get("architectures") or "transformers_version" in config:
        return True
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type in ("seq2seq", "gpt"):
        return False
    return model_type != "bert" or "d_model" not in config


def is_hf_dir(directory: str | os.PathLike) -> bool:
    """``directory`` holds a Hugging Face model: its config.json says so (:func:`declares_hf`)."""
    path = Path(directory) / CONFIG
    if not path.is_file():
        return False
    return declares_hf(read_json_object(path, "model config"))  # not an object: one line naming it


def _config(path: Path, hf: dict[str, Any]) -> ModelConfig:
    """Our config for ``hf``, read from ``path``; a missing field or a bad value is one line naming the file."""
    try:
        return registry.config_from_hf(hf)
    except KeyError as err:  # a field the converter needs
        raise ValueError(f"model config {str(path)!r} lacks the field {err.args[0]!r}") from None
    except (ValueError, TypeError) as err:  # a value out of range or of the wrong type
        raise ValueError(f"model config {str(path)!r}: {_first_line(err)}") from None


def read_hf_config(directory: str | os.PathLike) -> tuple[dict[str, Any], GPTConfig]:
    """config.json as a dict and as our :class:`GPTConfig`; what our GPT cannot express is a ValueError naming it."""
    path = Path(directory) / CONFIG
    hf = read_json_object(path, "model config")
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or model_type not in HF_MODEL_TYPES:
        raise ValueError(
            f"model config {str(path)!r} has model_type={model_type!r}; tformer reads the decoder-only "
            f"types {', '.join(sorted(HF_MODEL_TYPES))}"
        )
    config = _config(path, hf)
    assert isinstance(config, GPTConfig)
    return hf, config


def read_hf_weights(directory: str | os.PathLike) -> tuple[dict[str, torch.Tensor], Path]:
    """The weights (Hugging Face names, as stored: bf16 stays bf16 until copied into the model, half the memory
    of float32) of ``directory``, and the file that lists them (model.safetensors or the index)."""
    source, files = _weight_files(Path(directory))
    if source.name == WEIGHTS:
        return _floating(read_tensors(source), source), source  # finite, checked as read
    state: dict[str, torch.Tensor] = {}
    for shard, names in files.items():
        assert names is not None
        _lacks(shard, names, read_header(shard)[0], source)  # before a tensor is read
        state.update(_floating(read_tensors(shard, names), shard))  # empty, truncated, NaN: one line naming it
    return state, source


def weight_names(directory: str | os.PathLike) -> set[str]:
    """The names of the weights a Hugging Face directory holds (safetensors headers, or the index's ``weight_map``),
    read without a tensor: which heads a checkpoint has (a sentence-transformers BERT has no ``cls.*``)."""
    _, files = _weight_files(Path(directory))
    return {name for file, names in files.items() for name in (safetensors_shapes(file) if names is None else names)}


def check_hf_sizes(directory: str | os.PathLike, hf: Mapping[str, Any], shapes: sizes.Shapes | None = None) -> None:
    """The sizes of ``directory``'s config.json (``hf``) against the shapes its weights files declare in their headers
    (:mod:`tformer.hf.sizes`; no tensor is read), before a model of those sizes is built: a field that disagrees is
    one line naming it, the tensor and the file. ``shapes``: what the config gives (default: by its model_type)."""
    directory = Path(directory)
    source, files = _weight_files(directory)
    found: dict[str, tuple[int, ...]] = {}
    held_by: dict[str, Path] = {}
    for file, names in files.items():
        header = safetensors_shapes(file)  # empty, truncated, not safetensors: one line naming it
        if names is not None:
            _lacks(file, names, header.keys(), source)
        for name in header if names is None else names:
            found[name], held_by[name] = header[name], file
    shapes = registry.shapes(hf) if shapes is None else shapes
    sizes.check(
        shapes, found, f"model config {str(directory / CONFIG)!r}", lambda name: repr(str(held_by.get(name, source)))
    )


def _weight_files(directory: Path) -> tuple[Path, dict[Path, set[str] | None]]:
    """The file that lists the weights (model.safetensors, or the index of a sharded directory) and each file to read
    with the weight names it holds (None: all of them, a single file)."""
    single, index = directory / WEIGHTS, directory / INDEX
    if single.is_file():
        return single, {single: None}
    if not index.is_file():
        others = [n for n in ("pytorch_model.bin", "model.bin", "tf_model.h5") if (directory / n).exists()]
        found = f" (found {', '.join(others)}: tformer never unpickles weights)" if others else ""
        raise FileNotFoundError(f"weights file {str(single)!r} is missing, and so is {str(index)!r}{found}")
    return index, dict(_shards(directory, index))


def _lacks(shard: Path, names: set[str], held: Iterable[str], index: Path) -> None:
    absent = sorted(names - set(held))
    if absent:
        raise ValueError(
            f"weights file {str(shard)!r} lacks {len(absent)} weight(s) that {str(index)!r} puts there, "
            f"e.g. {absent[0]!r}"
        )


def _floating(tensors: dict[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
    """``tensors``, each a floating-point one (but the buffers the converters skip: GPT-2's old mask, BERT's
    position ids): an integer or boolean weight would be cast into the model without a word."""
    for name, tensor in tensors.items():
        if not tensor.is_floating_point() and not any(p.search(name) for p in _NOT_WEIGHTS):
            raise ValueError(
                f"weights file {str(path)!r}: tensor {name!r} has dtype {str(tensor.dtype).removeprefix('torch.')}; "
                "a weight must be floating point (float32, bfloat16 or float16)"
            )
    return tensors


def _shards(directory: Path, index: Path) -> dict[Path, set[str]]:
    """The shard files of a safetensors index, each with the weight names it holds; every shard must be a file
    inside ``directory`` (a crafted index must not read a file elsewhere)."""
    weight_map = read_json_object(index, "weights index").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"weights index {str(index)!r} has no 'weight_map' object (weight name → shard file)")
    shards: dict[Path, set[str]] = {}
    for name, file in weight_map.items():
        # by name only: a link the directory itself holds is its owner's choice (the Hub cache links every file of a
        # snapshot to ../../blobs/), a name in the index is not
        if not isinstance(file, str) or not file or Path(file).anchor or ".." in Path(file).parts:
            raise ValueError(
                f"weights index {str(index)!r} puts {name!r} in {file!r}: a shard must be a file name inside "
                f"{str(directory)!r}"
            )
        path = directory / file
        if not path.is_file():
            raise FileNotFoundError(f"weights file {str(path)!r} is missing (named by {str(index)!r})")
        shards.setdefault(path, set()).add(name)
    return shards


def _load_dir(
    directory: Path,
    config: ModelConfig,
    dtype: torch.dtype | None,
    prepare: Callable[[nn.Module], None] | None = None,
) -> nn.Module:
    """The model of ``config`` holding the weights of ``directory`` in ``dtype`` (None: as stored).

    A decoder's weights are first worked out on the meta device (names, shapes, dtypes from the files' headers: a
    file that does not fit the config is refused before a byte of a weight is read); each one the converter only
    renames is then read straight into the parameter it fills (in that parameter's layout, a block of rows at a time
    where ``prepare`` made it column-major), and only those it changes (Q, K, V fused; GPT-2's matrices transposed)
    are read into memory of their own and copied in. The peak stays about the model's size. A converter that must
    look at the values (a tied head stored twice is compared with the embedding) reads them all, as a translator
    and a BERT do."""
    source, files = _weight_files(directory)
    if not isinstance(config, GPTConfig):
        return _load(config, *read_hf_weights(directory), dtype)
    meta: dict[str, torch.Tensor] = {}  # HF name -> a tensor of its shape and dtype, no data
    where: dict[str, Path] = {}
    for file, names in files.items():
        header = read_header(file)[0]
        if names is not None:
            _lacks(file, names, header, source)
        held = header if names is None else names
        shapes = {n: torch.empty(header[n]["shape"], dtype=DTYPES[header[n]["dtype"]], device="meta") for n in held}
        meta.update(_floating(shapes, file))
        where.update(dict.fromkeys(held, file))
    try:
        planned = registry.state_from_hf(meta, config)
    except NotImplementedError:  # the converter compares values: read every weight
        return _load(config, *read_hf_weights(directory), dtype)
    except (ValueError, KeyError) as err:
        raise _misfit(source, err, config, set(meta)) from None
    by_id = {id(t): name for name, t in meta.items()}
    renamed = {ours: by_id[id(t)] for ours, t in planned.items() if id(t) in by_id}  # ours -> HF name, same tensor
    model = registry.build(config, empty=True).to(dtype or _stored_dtype(planned))
    try:
        common.check_fit(model, planned)  # every weight used, every parameter filled, shapes equal
    except ValueError as err:
        raise _misfit(source, err, config, set(meta)) from None
    if prepare is not None:
        prepare(model)
    params = model.state_dict()  # detached, sharing the parameters' memory (and layout)
    for file in files:
        targets = {hf: params[ours] for ours, hf in renamed.items() if where[hf] == file}
        read_into(file, targets, _finite_in(file))
    layers: dict[str, set[str]] = {}  # the weights the converter changes, a layer at a time (Q, K, V fuse in one)
    for name in set(meta) - set(renamed.values()):
        layers.setdefault(_layer(name), set()).add(name)
    unfilled = set(planned) - set(renamed)
    for group in layers.values():
        state = dict(meta)
        for file in files:
            if mine := {n for n in group if where[n] == file}:
                state.update(_floating(read_tensors(file, mine), file))
        converted = registry.state_from_hf(state, config)
        del state
        filled = {k: t for k, t in converted.items() if k not in renamed and t.device.type != "meta"}
        unfilled -= filled.keys()
        fill(model, filled)  # copied into the model's own tensors (their layout kept), each dropped as it goes
    if unfilled:  # a converter that mixes layers: say so rather than leave a weight unread
        raise RuntimeError(f"tformer could not place {sorted(unfilled)[:3]} from {str(source)!r} a layer at a time")
    return model.eval()


def _finite_in(path: Path) -> Callable[[str, torch.Tensor], None]:
    return lambda name, tensor: check_finite(name, tensor, path)


def _layer(name: str) -> str:
    """The layer a weight's name puts it in ("model.layers.3.self_attn.q_proj.weight" -> "3"; "" for none)."""
    match = re.search(r"\.(\d+)\.", name)
    return match.group(1) if match else ""


def _load(config: ModelConfig, state: Mapping[str, torch.Tensor], source: Path, dtype: torch.dtype | None) -> nn.Module:
    """A model of ``config`` holding ``state`` (Hugging Face names) in ``dtype`` (None: as stored); weights that do
    not fit the config are one line naming ``source``."""
    held = set(state)  # the file's names: a weight it lacks is named as the file would name it
    try:
        ours = registry.state_from_hf(state, config)  # a name with no counterpart, a missing K/V, an untied head
    except (ValueError, KeyError) as err:
        raise _misfit(source, err, config, held) from None
    if isinstance(state, dict):
        state.clear()  # the weights live on in ``ours``; each goes as it is copied in (no second copy whole)
    model = registry.build(config, empty=True).to(dtype or _stored_dtype(ours))
    try:
        registry.load_state(model, ours, owned=True)  # every weight used, every parameter filled, shapes equal
    except (ValueError, RuntimeError, KeyError) as err:
        raise _misfit(source, err, config, held) from None
    return model.eval()


def _hf_names(config: ModelConfig) -> set[str]:
    """The Hugging Face names of every weight a model of ``config`` has, from a twin of fake tensors (no memory)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        return set(registry.state_to_hf(registry.build(config, empty=True).state_dict(), config))


def load_hf_model(
    directory: str | os.PathLike, device: str | torch.device = "cpu", dtype: torch.dtype | None = torch.float32
) -> GPT:
    """The GPT (in eval mode) of the Hugging Face decoder directory ``directory``, on ``device``, in ``dtype`` (None:
    as the weights are stored)."""
    hf, config = read_hf_config(directory)
    check_hf_sizes(directory, hf)  # before the weights are read and a model of the config's sizes is built
    model = _load_dir(Path(directory), config, dtype)
    assert isinstance(model, GPT)
    return model.to(device)


def load_hf_dir(
    directory: str | os.PathLike,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = torch.float32,
    prepare: Callable[[nn.Module], None] | None = None,
) -> nn.Module:
    """The tformer model (in eval mode) of any Hugging Face directory tformer reads: a decoder as a GPT, a BERT, a
    Marian translator; an unknown ``model_type`` is one line naming the file and the types tformer reads.
    ``prepare(model)``: called on a decoder's model before its weights are read into it (it may choose kernels and
    allocate a weight in another layout, which the file is then read into: no copy after the load)."""
    path = Path(directory) / CONFIG
    hf = read_json_object(path, "model config")
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or model_type not in registry.MODULES:
        raise ValueError(
            f"model config {str(path)!r} has model_type={model_type!r}; tformer reads the Hugging Face types "
            f"{', '.join(sorted(registry.MODULES))}"
        )
    if model_type == "bert":
        _, bert_config, bert_state = read_hf_bert_dir(directory)
        model = bert_from_hf_dir(directory, bert_config, bert_state)
        return model.to(device) if dtype is None else model.to(device, dtype)
    config = _config(path, hf)
    check_hf_sizes(directory, hf)  # before the weights are read and a model of the config's sizes is built
    return _load_dir(Path(directory), config, dtype, prepare).to(device)


def read_hf_bert_dir(directory: str | os.PathLike) -> tuple[dict[str, Any], BertConfig, dict[str, torch.Tensor]]:
    """The ``config.json`` (as a dict), our :class:`BertConfig` and the weights of a Hugging Face BERT directory.

    Checked before any model is built: a missing, empty, binary, truncated or non-object ``config.json``, a
    config that is not BERT's or whose values are out of range (the size limit of
    :data:`tformer.models.config.MAX_PARAMETERS` included), a ``model.safetensors`` that is missing or not
    readable, a weight that is not floating point: each is one ``ValueError`` / ``FileNotFoundError`` that names
    the file.
    """
    directory = Path(directory)
    config_path, weights_path = directory / CONFIG, directory / WEIGHTS
    config = read_json_object(config_path, "model config")
    try:
        bert_config = bert.config_from_hf(config)
    except (ValueError, TypeError) as err:  # missing fields; values of the wrong type or out of range
        raise ValueError(f"model config {str(config_path)!r}: {err}") from None
    check_hf_sizes(directory, config, bert.shapes(config))  # before the weights are read and the model is built
    state = load_safetensors(weights_path)  # NaN / inf: one line naming the file and the tensor
    for name, tensor in state.items():  # an integer or boolean weight would be cast without a word
        if not tensor.is_floating_point() and not bert.IGNORED.search(name):
            raise ValueError(
                f"weights file {str(weights_path)!r}: tensor {name!r} has dtype "
                f"{str(tensor.dtype).removeprefix('torch.')}; a weight must be floating point"
            )
    return config, bert_config, state


def bert_from_hf_dir(directory: str | os.PathLike, config: BertConfig, state: Mapping[str, torch.Tensor]) -> Bert:
    """A :class:`Bert` of ``config`` holding ``state`` (from :func:`read_hf_bert_dir`); weights that do not fit
    the config (names, shapes) are a ``ValueError`` naming the weights file."""
    weights_path = Path(directory) / WEIGHTS
    try:
        return bert.load_state(Bert(config), bert.state_from_hf(state)).eval()
    except (ValueError, RuntimeError, KeyError) as err:  # unknown names, shapes that differ, a missing Q/K/V
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"weights file {str(weights_path)!r} does not fit its config.json: {reason}") from None


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def _misfit(
    source: Path, err: Exception, config: ModelConfig | None = None, held: frozenset[str] | set[str] = frozenset()
) -> ValueError:
    """The refusal of weights that do not fit the config; weights the file lacks are named in the file's own words
    (``lm_head.weight``, not tformer's ``output.weight``)."""
    lacks: list[str] = []
    if config is not None and "missing" in str(err):
        try:
            lacks = sorted(_hf_names(config) - held)
        except Exception:  # the names cannot be worked out: the message below still says what is wrong
            lacks = []
    if lacks:
        shown = ", ".join(repr(n) for n in lacks[:5]) + (f" and {len(lacks) - 5} more" if len(lacks) > 5 else "")
        return ValueError(f"weights file {str(source)!r} lacks {shown}, which its config.json asks for")
    return ValueError(f"weights file {str(source)!r} does not fit its config.json: {_first_line(err)}")


def _stored_dtype(state: dict[str, torch.Tensor]) -> torch.dtype:
    """The dtype the weights were stored in (that of the first floating-point tensor; float32 if none)."""
    return next((t.dtype for t in state.values() if t.is_floating_point()), torch.float32)
