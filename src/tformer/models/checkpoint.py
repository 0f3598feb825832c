"""Checkpoints: ``save_pretrained(dir)`` / ``from_pretrained(dir)``.

A model directory holds ``config.json`` (the config fields plus ``model_type``) and
``model.safetensors`` (the weights); the Hugging Face layout is written by :func:`tformer.hf.export` (``tformer
export MODEL --to hf OUT``), a layer above the models. Both are written atomically (temp file + rename), so an interrupted save never leaves a half-written checkpoint behind. Nothing is unpickled: weights go
through safetensors, everything else through JSON. Tied weights are stored once. Loading refuses, naming the file
and the tensor, a weight that is not floating point (it would be cast silently) or that holds NaN or inf.

An int8 model (:func:`tformer.fast.quantize.quantize`) saves its int8 weights and their scales as they are, and its
``config.json`` says so: a ``quantization`` object (the method and the quantized layers) beside the config fields.
``from_pretrained`` builds the model, puts int8 layers where that object says, and reads the weights into them; a
float model refuses int8 weights (``load_state_dict``), so fine-tuning from an int8 model's state is one line, not
a silent copy of the layers it has and none of the ones it lacks.

The config is read back with ``config_class.from_dict``, which maps the field names of older
releases to today's, so checkpoints written by tformer 0.1 still load.

A training run directory keeps its best model in ``OUT/best/`` (swapped in as a whole, see
:mod:`tformer.files`); tformer 0.1 kept it at the top of ``OUT``. Every loader goes through
:func:`model_dir`, so ``from_pretrained(OUT)`` and ``--model OUT`` find it in either layout.
:func:`check_vocab` is the check a family's loader makes that a tokenizer and a model belong together.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, cast

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from tformer.fast.quantize import INT8_MODULES, apply_record, quantization_record
from tformer.files import atomic_write, current_dir
from tformer.models.config import ModelConfig
from tformer.models.loading import DTYPES, check_finite, no_init, read_header, read_into
from tformer.nn import lora
from tformer.readers import check_finite_weights, check_layers, read_json_object, safetensors_shapes

__all__ = [
    "load_pretrained",
    "model_dir",
    "check_vocab",
    "CONFIG_NAME",
    "WEIGHTS_NAME",
    "BEST_DIR",
    "DECODING_FILE",
    "read_decoding",
]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
QUANTIZATION = "quantization"  # config.json's record of an int8 model's layers (tformer.fast.quantize)
LORA = "lora"  # config.json's record of a model's LoRA layers (tformer.nn.lora): their pairs are in the weights file
BEST_DIR = "best"  # a training run's best model: OUT/best/
DECODING_FILE = "decoding.json"  # a model directory's own decoding settings (tformer evaluate --tune-length-penalty)
_SIZE_FIELDS = (  # the config fields a weight's shape may follow
    "vocab_size",
    "src_vocab_size",
    "tgt_vocab_size",
    "max_len",
    "n_segments",
    "num_labels",
    "d_model",
    "d_ff",
    "n_heads",
    "n_kv_heads",
    "head_dim",
)
_MODEL_TYPES: dict[str, Any] = {}  # model_type -> model class


def _unique_state(model: torch.nn.Module, copy: bool = True) -> dict[str, torch.Tensor]:
    """State dict with tied tensors kept once (the first name wins): contiguous CPU tensors to save (``copy``; a
    contiguous CPU tensor is itself, not a copy), or the model's own tensors, to fill."""
    seen: set[tuple[int, int]] = set()
    state = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if key in seen:
            continue
        seen.add(key)
        state[name] = tensor.detach().contiguous().cpu() if copy else tensor.detach()
    return state


class PretrainedMixin(torch.nn.Module):
    """An ``nn.Module`` with ``save_pretrained`` / ``from_pretrained`` and a ``config`` (a :class:`ModelConfig`)."""

    model_type: str = ""
    config_class: type[ModelConfig] = ModelConfig
    stacks: ClassVar[dict[str, str]] = {}  # the layer stacks' name prefixes ({i}: a layer) -> the field counting them
    config: ModelConfig

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.model_type:
            _MODEL_TYPES[cls.model_type] = cls

    def save_pretrained(self, directory: str | os.PathLike, format: str = "tformer") -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory`` in tformer's own names; returns it.

        ``format`` is ``"tformer"``, the only one: a Hugging Face directory is written by ``tformer.hf.export(model,
        DIR, tokenizer)`` (``tformer export MODEL --to hf OUT``), which knows every family's layout.
        """
        if format == "hf":
            raise ValueError(
                "save_pretrained(format='hf') is gone: write a Hugging Face directory with "
                "tformer.hf.export(model, DIR, tokenizer) or `tformer export MODEL --to hf OUT`"
            )
        if format != "tformer":
            raise ValueError(f"save_pretrained format must be 'tformer', got {format!r}")
        config = {"model_type": self.model_type, **self.config.to_dict()}
        record = quantization_record(self)
        if record is not None:
            config[QUANTIZATION] = record
        lora_record = lora.lora_record(self)
        if lora_record is not None:
            config[LORA] = lora_record
        state = _unique_state(cast(torch.nn.Module, self))
        text = json.dumps(config, indent=2, sort_keys=True) + "\n"
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write(directory / WEIGHTS_NAME, lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
        atomic_write(directory / CONFIG_NAME, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        return directory

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike,
        map_location: str | torch.device = "cpu",
        prepare: Callable[[torch.nn.Module], Any] | None = None,
    ):
        """The model saved in ``directory`` (a ``save_pretrained`` directory, or a training run's: its best model).
        ``prepare(model)`` runs on the model built, before its weights are read in (:func:`tformer.load` chooses the
        kernels there and the layout the weights are read into, so that no weight is copied after the load)."""
        directory = model_dir(directory)
        config = _read_config(directory, expected_type=cls.model_type)
        record = config.pop(QUANTIZATION, None)
        lora_record = config.pop(LORA, None)
        try:
            model_config = cls.config_class.from_dict(config)
        except (TypeError, ValueError) as err:  # unknown fields, invalid values
            raise ValueError(f"{str(directory / CONFIG_NAME)!r}: {err}") from None
        _check_sizes(cls, model_config, directory)  # before a model of the config's sizes is built
        with no_init():  # its parameters are filled from the file: not initialised first (issue 40)
            model = cast(Any, cls)(model_config)
        if record is not None:  # an int8 model: int8 layers where config.json names them, filled from the file
            apply_record(model, record, repr(str(directory / CONFIG_NAME)))
        if lora_record is not None:  # LoRA layers where config.json names them, their pairs filled from the file
            lora.apply_record(model, lora_record, repr(str(directory / CONFIG_NAME)))
        if prepare is not None:
            prepare(model)
        _load_weights(model, directory / WEIGHTS_NAME, map_location)
        return model.eval()

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False):
        """``nn.Module.load_state_dict``, refusing int8 weights (``NAME.weight_int8``, from an int8 model) for a
        layer of this model that is float: copying the rest would leave that layer's weights as they were."""
        layers = dict(self.named_modules())
        for key in state_dict:
            name, _, field = key.rpartition(".")
            if field == "weight_int8" and not isinstance(layers.get(name), INT8_MODULES):
                raise ValueError(
                    f"the weights to load are an int8 model's ({key!r}, tformer.quantize) but {name!r} of this "
                    f"{type(self).__name__} is a float layer: it needs float weights (the float32 model the int8 "
                    "one was made from)"
                )
        return super().load_state_dict(state_dict, strict, assign)


def load_pretrained(
    directory: str | os.PathLike,
    map_location: str | torch.device = "cpu",
    prepare: Callable[[torch.nn.Module], Any] | None = None,
):
    """Load any tformer model directory, choosing the class from ``model_type`` in ``config.json`` (``prepare``: as
    :meth:`PretrainedMixin.from_pretrained`'s)."""
    directory = model_dir(directory)
    config_type = _read_config(directory, expected_type=None)["model_type"]
    return _MODEL_TYPES[config_type].from_pretrained(directory, map_location, prepare)


def model_dir(directory: str | os.PathLike) -> Path:
    """Where the model files of ``directory`` are: ``directory/best`` for a training run written by tformer 0.2 on,
    else ``directory`` itself (a ``save_pretrained`` directory, a run of tformer 0.1, ``OUT/last``)."""
    directory = Path(directory)
    best = current_dir(directory / BEST_DIR)
    return best if (best / CONFIG_NAME).is_file() else directory


def check_vocab(directory: str | os.PathLike, tokenizer_file: str, tokenizer_size: int, field: str, size: int) -> None:
    """Raise a ValueError naming both files unless the tokenizer's vocabulary has the size the config says."""
    if tokenizer_size != size:
        directory = Path(directory)
        raise ValueError(
            f"{str(directory / tokenizer_file)!r} has {tokenizer_size} tokens but {str(directory / CONFIG_NAME)!r} "
            f"says {field}={size}: the tokenizer and the model do not belong together (files from different runs?)"
        )


def _read_config(directory: Path, expected_type: str | None) -> dict[str, Any]:
    """``config.json`` as a dict (``model_type`` included), checked to name a known (or the expected) family."""
    path = directory / CONFIG_NAME
    if not directory.is_dir():
        raise FileNotFoundError(f"checkpoint directory {str(directory)!r} does not exist")
    if not path.is_file():
        if (directory / "last" / CONFIG_NAME).is_file():
            raise FileNotFoundError(
                f"{str(directory)!r} is a training run with no best model yet (no evaluation has finished); "
                f"its latest state is in {str(directory / 'last')!r}"
            )
        raise FileNotFoundError(f"{str(path)!r} is missing: {directory} is not a tformer checkpoint")
    config = read_json_object(path, "model config")  # empty, binary, truncated, not an object: one line naming it
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in _MODEL_TYPES:
        raise ValueError(f"{str(path)!r} has model_type={model_type!r}, expected one of {sorted(_MODEL_TYPES)}")
    if expected_type is not None and model_type != expected_type:
        raise ValueError(f"{str(path)!r} holds a {model_type!r} model, not a {expected_type!r} model")
    return config


def _check_sizes(cls: type[PretrainedMixin], config: ModelConfig, directory: Path) -> None:
    """config.json's sizes against the shapes model.safetensors declares in its header (no tensor is read), before a
    model of those sizes exists: the layer counts first (a model of 100,000 layers is not built to learn that the
    file holds two), then every weight against the model built on the ``meta`` device (shapes, no memory). A weight
    that disagrees is one line naming the config fields its shape comes from, the tensor and both files."""
    config_path, weights_path = repr(str(directory / CONFIG_NAME)), repr(str(directory / WEIGHTS_NAME))
    if not (directory / WEIGHTS_NAME).is_file():
        return  # said by _load_weights
    found = safetensors_shapes(directory / WEIGHTS_NAME)  # not safetensors, truncated: one line naming it
    for prefix, field in cls.stacks.items():
        count = getattr(config, field)
        check_layers(found, prefix, f"{field}={count}", count, config_path, weights_path)
    expected = _meta_shapes(cls, config)
    missing = sorted(set(expected) - {name.removesuffix("_int8") for name in found})
    if missing:  # a size no weight holds would go unchecked into the model
        raise ValueError(f"{weights_path} does not match the config: missing {missing[:5]}")
    for name, shape in found.items():
        ours = name.removesuffix("_int8")  # an int8 layer's values have its float weight's shape
        if ours not in expected or name.endswith(".weight_scale") or tuple(shape) == expected[ours]:
            continue
        wanted = expected[ours]
        axis = next((i for i in range(min(len(shape), len(wanted))) if shape[i] != wanted[i]), 0)
        fields = ", ".join(_fields_behind(cls, config, ours, axis, wanted)) or f"shape {wanted}"
        raise ValueError(
            f"{config_path} says {fields}, but tensor {name!r} in {weights_path} has shape {tuple(shape)}, where the "
            f"config gives {wanted}: the config and the weights do not belong together"
        )


def _meta_shapes(cls: type[PretrainedMixin], config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Each weight's shape in a model of ``config``, built on the ``meta`` device (no memory for its tensors); a tied
    weight once, under its first name, as :func:`_unique_state` saves it."""
    with torch.device("meta"):
        state = cast(Any, cls)(config).state_dict(keep_vars=True)
    seen: set[int] = set()
    shapes = {}
    for name, tensor in state.items():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            shapes[name] = tuple(tensor.shape)
    return shapes


def _fields_behind(cls: type[PretrainedMixin], config: ModelConfig, name: str, axis: int, wanted: tuple) -> list[str]:
    """The size fields of ``config`` that axis ``axis`` of weight ``name`` follows (``d_model=64``): those whose
    doubling changes it, found on ``meta`` models (a field whose double is not a valid config is left out)."""
    behind = []
    for field in [f.name for f in dataclasses.fields(config) if f.name in _SIZE_FIELDS]:
        value = getattr(config, field)
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        try:
            changed = _meta_shapes(cls, config.replace(**{field: 2 * value})).get(name)
        except ValueError:
            continue
        if changed is not None and len(changed) > axis and changed[axis] != wanted[axis]:
            behind.append(f"{field}={value}")
    return behind


def _load_weights(model: torch.nn.Module, path: Path, map_location) -> None:
    """Fill ``model`` (built by :func:`~tformer.models.loading.no_init`) from the safetensors file ``path``: the
    file's names, shapes and dtypes are checked against the model first (from its header: nothing read), then each
    tensor is read straight into the parameter it fills, and checked finite (:mod:`tformer.models.loading`: no
    second copy of the weights). An int8 model, or a ``map_location`` other than the CPU, reads the file whole."""
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} is missing: the checkpoint has no weights")
    expected = _unique_state(model, copy=False)
    if torch.device(map_location).type != "cpu" or any(t.dtype == torch.int8 for t in expected.values()):
        return _load_whole(model, path, map_location, expected)
    header, _ = read_header(path)
    found = {name: (DTYPES[entry["dtype"]], tuple(entry["shape"])) for name, entry in header.items()}
    _check_against(path, expected, found)
    read_into(path, expected, lambda name, tensor: check_finite(name, tensor, path))


def _check_against(path: Path, expected: Mapping[str, torch.Tensor], found: Mapping[str, tuple]) -> None:
    """The file's tensors (``found``: name -> (dtype, shape)) are the model's, of its shapes, floating point where
    the model's are (an integer weight would be cast silently), int8 where the model's layer is int8."""
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    wrong = sorted(k for k in set(found) & set(expected) if tuple(found[k][1]) != tuple(expected[k].shape))
    for name in sorted(set(found) & set(expected)):
        dtype = found[name][0]
        if expected[name].is_floating_point() and not dtype.is_floating_point:
            raise ValueError(
                f"{str(path)!r}: tensor {name!r} has dtype {str(dtype).removeprefix('torch.')}; "
                "a weight must be floating point (float32, bfloat16 or float16)"
            )
        if expected[name].dtype == torch.int8 and dtype != torch.int8:  # an int8 model's weights
            raise ValueError(
                f"{str(path)!r}: tensor {name!r} has dtype {str(dtype).removeprefix('torch.')}; "
                f"{CONFIG_NAME} says this layer is int8"
            )
    if missing or unexpected or wrong:
        details = []
        if missing:
            details.append(f"missing {missing[:5]}")
        if unexpected:
            details.append(f"unexpected {unexpected[:5]}")
        if wrong:
            details.append(
                "shape mismatch "
                + ", ".join(f"{k}: file {tuple(found[k][1])} vs model {tuple(expected[k].shape)}" for k in wrong[:5])
            )
        raise ValueError(f"{str(path)!r} does not match the config: " + "; ".join(details))


def _load_whole(model: torch.nn.Module, path: Path, map_location, expected: Mapping[str, torch.Tensor]) -> None:
    """The file read whole (safetensors' ``load_file``), checked, and loaded by ``load_state_dict``."""
    try:
        state = load_file(str(path), device=str(map_location))
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"{str(path)!r} is not a readable safetensors file (truncated or corrupted?): {err}") from None
    _check_against(path, expected, {name: (t.dtype, tuple(t.shape)) for name, t in state.items()})
    check_finite_weights(state, path)
    model.load_state_dict(state, strict=False)


def has_lora_record(directory: str | os.PathLike) -> bool:
    """Whether the model directory ``directory``'s ``config.json`` records LoRA layers (a run from ``--init`` with
    ``--lora-r``): its weights then hold the pairs beside the frozen ones."""
    path = Path(directory) / CONFIG_NAME
    return path.is_file() and LORA in read_json_object(path, "model config")


def read_decoding(directory: str | os.PathLike) -> dict[str, Any]:
    """The decoding settings a model directory keeps, by Hugging Face's names: ``length_penalty`` and the
    ``num_beams`` it goes with. From ``decoding.json`` (tformer's, written by ``tformer evaluate
    --tune-length-penalty``: ``length_penalty`` and ``tuned_on.beam``), else from a Hugging Face directory's
    ``generation_config.json``; ``{}`` when it keeps none. A value out of its bounds is one line naming the file."""
    from tformer import checks

    own, hf = Path(directory) / DECODING_FILE, Path(directory) / "generation_config.json"
    if own.is_file():
        path, data = own, read_json_object(own, "decoding settings")
        tuned = data.get("tuned_on")
        found = {"length_penalty": data.get("length_penalty"), "num_beams": (tuned or {}).get("beam")}
        if found["length_penalty"] is None or not isinstance(tuned, (dict, type(None))):
            raise ValueError(f"{str(own)!r}: expected {{'length_penalty': a number, 'tuned_on': {{...}}}}, got {data}")
    elif hf.is_file():
        path, data = hf, read_json_object(hf, "generation config")
        found = {"length_penalty": data.get("length_penalty"), "num_beams": data.get("num_beams")}
    else:
        return {}
    for key, check in (("length_penalty", checks.length_penalty), ("num_beams", checks.beam_size)):
        value = found[key]
        if value is not None and (isinstance(value, bool) or not check.accepts(value)):
            raise ValueError(f"{str(path)!r}: {key!r} is {value!r}, expected {check.allowed}")
    return {k: v for k, v in found.items() if v is not None}
