"""Precision as a choice: ``fp32``, ``bf16``, ``int8`` or ``auto``, which picks per machine class and kind of work
what measured fastest at equal quality, and says what it picked and why (``--precision`` on every command).

Kinds of work: ``training`` (bfloat16 autocast with float32 master weights, or float32), ``decoding`` (one token
per sequence and step: ``generate``, ``translate``), ``batched`` (whole sequences through an encoder: ``fill-mask``,
``embed``, ``classify``) and ``measuring`` (``evaluate``, ``evaluate-lm``, the explorer: the numbers are the
point, so ``auto`` keeps the float32 model they describe).

What ``auto`` picks, from the measurements in ``docs/benchmarks.md`` (machine classes: :mod:`tformer.machine`):

* decoding: int8 (:func:`tformer.fast.quantize.quantize`) on a class with 8-bit dot products (VNNI or AMX) for a
  model at least :data:`INT8_MIN_WIDTH` wide, else float32. On the avx512_bf16 class a SmolLM2-135M-shaped Llama
  (576 wide) decoded 1.74× faster in int8 and a 6-layer × 384 GPT 1.85×, with Tiny Shakespeare perplexity
  +0.01%; a 256-wide translator decoded greedily at 0.91× and a 128-wide GPT at 0.67× (the int8 kernel's fixed
  cost per call outweighs its savings on small products);
* batched work (``fill-mask``, ``embed``, ``classify``): float32. int8 encoded MiniLM's batches of 32 sentences
  3.2× faster (``benchmarks.bert_encode --int8``), but these commands print scores, and int8 moved MiniLM's
  cosine similarities by up to 0.012: ``--precision int8`` takes the speed;
* training: bfloat16 autocast (float32 master weights) on the classes :data:`TRAINING_BF16` lists, where it
  measured faster at equal quality (validation loss at equal steps within 1% of float32's); elsewhere float32. On
  the avx512_bf16 class it trained the Multi30k translator 1.9–2.0× faster end to end (2.4× a step), with a
  validation loss after 400 steps +0.8% above float32's on average over four seeds (−0.2% to +1.9% by seed; float32's
  own seeds spread over 6.6%), the character LM +0.8%, the built-in corpus −0.7%; on the amx class 1.6× faster end
  to end, its validation loss −1.0% (two seeds). ``--precision fp32`` trains in float32 where the last digits matter
  (a lesson's asserted numbers, a comparison with another library).

On a GPU (``--device cuda``) ``auto`` picks by the GPU's compute capability (:func:`gpu_capability`), as nanoGPT
and litgpt do: from 8.0 on (Ampere, Hopper, Ada, Blackwell) the tensor cores compute bfloat16 natively, so training
runs bfloat16 autocast and decoding holds bfloat16 weights; below (Turing's T4, Volta's V100: the GPUs of free
notebooks) ``fp16``, float16 autocast with a gradient scaler (:func:`gradient_scaler`) for training and float16
weights for decoding. ``torch.cuda.is_bf16_supported()`` is not asked: it answers yes on a T4, through emulation.
A training run on a GPU runs its float32 matrix products as TF32 (:func:`tf32_matmuls`, for the run only, whatever its
precision: the master weights' and fp32's products too, as nanoGPT does); ``measuring`` keeps float32.
These choices follow what the GPU generations are documented to do; docs/benchmarks.md says which were measured.

``bf16`` for inference holds the weights in bfloat16 (half the memory; numbers slightly different); ``fp16`` the
same in float16. For training ``fp16`` is float16 autocast with float32 master weights and a gradient scaler (the
loss scaled so that small gradients do not underflow float16; its state is saved in ``last/``): on a GPU, and on a
CPU where this torch has float16 autocast. ``int8`` is for inference only: training keeps float weights.

fp16's loss scale cannot run away (torch's ``GradScaler`` has no floor: a scale of 0 skips every step as an
overflow, for ever). The scale never goes below :data:`SCALE_FLOOR`, 1 (DeepSpeed's and Megatron's default
minimum): below 1 the scaler would shrink the gradients it exists to keep from underflowing, and gradients that
overflow float16 (above 65504) unscaled mean a diverging loss or values outside float16's range, which no scale
cures. Up to :data:`NORMAL_OVERFLOWS` skipped steps in a row are the scaler finding its level; the trainer counts
each one past that, and each overflow at the floor, as a bad step (``--max-bad-steps``). A scaler state read from a
file is checked first (:func:`scaler_state_problem`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import torch
from torch import nn

__all__ = [
    "PRECISIONS",
    "Choice",
    "choose",
    "apply",
    "for_inference",
    "normalize",
    "gpu_capability",
    "gradient_scaler",
    "halve_scale",
    "scaler_state_problem",
    "SCALE_FLOOR",
    "NORMAL_OVERFLOWS",
    "use_tf32",
    "tf32_applies",
    "tf32_matmuls",
    "INT8_MIN_WIDTH",
    "TRAINING_BF16",
    "GPU_BF16_CAPABILITY",
]

PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
WORK = ("training", "decoding", "batched", "measuring")
# the spellings of torch's dtypes (0.2.0's `generate --dtype`) -> today's
_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
# int8 pays from this model width on (d_model; measured on the avx512_bf16 class, greedy batch 1 against float32:
# 576 wide 1.74x, 384 wide 1.85x, 256 wide 0.91x (beam 5: 1.07x), 128 wide 0.67x)
INT8_MIN_WIDTH = 384
# machine classes on which bfloat16 autocast training measured faster than float32 at equal quality (validation
# loss at equal steps within 1% of float32's, issue 33's bar; docs/benchmarks.md, "bfloat16 training"), and why
TRAINING_BF16: dict[str, str] = {
    "avx512_bf16": "bf16 trained the Multi30k translator 1.9-2.0x faster than float32, validation loss +0.8% at 400 "
    "steps (mean of 4 seeds; the char LM +0.8%); --precision fp32 trains in float32",
    "amx": "bf16 trained the Multi30k translator 1.6x faster than float32, validation loss -1.0% at 400 steps (2 seeds); "
    "--precision fp32 trains in float32",
}
# compute capability from which a GPU's tensor cores compute bfloat16 natively (Ampere's 8.0)
GPU_BF16_CAPABILITY = (8, 0)
M = TypeVar("M", bound=nn.Module)
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Choice:
    """The precision in use and why (``str(choice)`` is the line the commands print)."""

    precision: str
    reason: str

    def __str__(self) -> str:
        return f"precision: {self.precision} ({self.reason})"

    @property
    def dtype(self) -> torch.dtype:
        """The float dtype of the weights (int8 layers keep their bias and the other modules in float32)."""
        return _DTYPES.get(self.precision, torch.float32)


def normalize(text: str) -> str:
    """``text`` as one of :data:`PRECISIONS` (``bfloat16`` -> ``bf16``); anything else is refused by name."""
    value = _ALIASES.get(text, text)
    if value not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {text!r}")
    return value


def _width(model: Any) -> int:
    config = getattr(model, "config", None)
    return int(getattr(config, "d_model", 0) or 0)


def gpu_capability(device: str = "cuda") -> tuple[int, int] | None:
    """The compute capability of the CUDA GPU ``device`` names, e.g. (9, 0) for an H100; None for any other device."""
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(dev)
    return int(major), int(minor)


def _gpu_choice(work: str, device: str, capability: tuple[int, int] | None) -> Choice:
    """``auto`` on a GPU: bf16 from :data:`GPU_BF16_CAPABILITY` on, fp16 below; float32 for measuring."""
    kind = torch.device(device).type
    if kind != "cuda" or capability is None:
        return Choice("fp32", f"auto: {device} keeps float32 (auto's GPU choices are for CUDA GPUs)")
    if work == "measuring":
        return Choice("fp32", "auto: this command measures the model, so it reads the float32 weights it was given")
    cap = f"{capability[0]}.{capability[1]}"
    if work == "batched":
        return Choice("fp32", "auto: the scores this command prints stay float32's (ask for bf16 or fp16: faster)")
    if capability >= GPU_BF16_CAPABILITY:
        what = "bfloat16 autocast" if work == "training" else "bfloat16 weights"
        return Choice("bf16", f"auto: a GPU of compute capability {cap} computes bfloat16 natively: {what}")
    what = "float16 autocast with a gradient scaler" if work == "training" else "float16 weights"
    return Choice("fp16", f"auto: a GPU of compute capability {cap} has no native bfloat16 (from 8.0): {what}")


def choose(
    precision: str,
    work: str,
    model: Any = None,
    device: str = "cpu",
    machine: Any = None,
    capability: tuple[int, int] | None = None,
) -> Choice:
    """The precision for ``work`` (:data:`WORK`): ``precision`` itself unless it is ``auto``; ``auto`` picks from the
    machine class (``machine``: :func:`tformer.machine.describe`'s, read here when not given), the device (on a CUDA
    GPU its compute capability: ``capability``, read from the device when not given) and the model's width. ``int8``
    for training is refused: training keeps float weights; so is ``fp16`` training where torch has no float16
    autocast for the device."""
    precision = normalize(precision)
    if work not in WORK:
        raise ValueError(f"work must be one of {', '.join(WORK)}, got {work!r}")
    if precision == "int8" and work == "training":
        raise ValueError(
            "--precision int8 is for inference: training keeps float weights (give auto, fp32, bf16 or fp16)"
        )
    if precision == "fp16" and work == "training":
        _check_fp16_training(device)
    saved = _saved_int8(model, precision)
    if saved is not None:  # a model that holds int8 weights: what runs is said as it is
        return saved
    if precision != "auto":
        return Choice(precision, "as asked")
    if torch.device(device).type != "cpu":
        return _gpu_choice(work, device, capability if capability is not None else gpu_capability(device))
    if machine is None:
        from tformer.machine import describe

        machine = describe()
    cls = machine.machine_class
    if work == "training":
        if cls in TRAINING_BF16:
            return Choice("bf16", f"auto: on the {cls} class {TRAINING_BF16[cls]}")
        return Choice("fp32", f"auto: bfloat16 training was not measured faster at equal quality on the {cls} class")
    if work == "measuring":
        return Choice("fp32", "auto: this command measures the model, so it reads the float32 weights it was given")
    if work == "batched":  # the printed numbers are the point: int8 moves MiniLM's similarities by up to 0.012
        return Choice("fp32", "auto: int8 would move the scores this command prints (ask for int8: ~3x faster)")
    if not {"avx512_vnni", "avx_vnni", "amx_int8"} & set(machine.features):
        return Choice("fp32", f"auto: the {cls} class has no 8-bit dot products (VNNI/AMX); int8 would not pay")
    width = _width(model)
    if width < INT8_MIN_WIDTH:
        return Choice("fp32", f"auto: a model {width} wide is too small for int8 to pay (from {INT8_MIN_WIDTH} on)")
    return Choice(
        "int8", f"auto: the {cls} class has 8-bit dot products and the model is {width} wide (from {INT8_MIN_WIDTH})"
    )


def _saved_int8(model: Any, precision: str) -> Choice | None:
    """The choice for a model that already holds int8 layers (read from an int8 directory, or quantized): ``auto``
    and ``int8`` run those; a float precision dequantizes them (:func:`tformer.dequantize`: q · scale), and says so.
    None for a float model."""
    from tformer.fast.quantize import is_quantized

    if not is_quantized(model):
        return None
    if precision == "int8":
        return Choice("int8", "as asked")
    if precision == "auto":
        return Choice("int8", "auto: the model holds int8 weights (tformer.quantize), with no float weights to read")
    name = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[precision]
    return Choice(precision, f"as asked: the model's int8 weights dequantized (q × scale) to {name}")


def _check_fp16_training(device: str) -> None:
    kind = torch.device(device).type
    if not torch.amp.autocast_mode.is_autocast_available(kind):
        raise ValueError(f"--precision fp16: this torch has no autocast on {kind} (give auto, fp32 or bf16)")
    try:
        with torch.autocast(device_type=kind, dtype=torch.float16):
            pass
    except (RuntimeError, AssertionError) as err:
        raise ValueError(f"--precision fp16: this torch cannot train in float16 on {kind} ({err})") from None


def gradient_scaler(choice: Choice, device: str) -> torch.amp.GradScaler | None:
    """A ``torch.amp.GradScaler`` for fp16 training on ``device`` (float16 gradients underflow without one: the loss
    is scaled up before the backward and the gradients down before the step); None for any other precision."""
    if choice.precision != "fp16":
        return None
    return torch.amp.GradScaler(torch.device(device).type)


# The lowest loss scale (see the module's notes): torch's GradScaler warns that a scale below 1 means "something is
# likely wrong"; DeepSpeed's min_loss_scale and Megatron's min-loss-scale default to 1 too.
SCALE_FLOOR = 1.0
# Skipped steps in a row that are the scaler finding its level, not a fault: from its start, 65536 = 2**16, 16
# halvings reach the floor; a scale grown over a long run (×2 every 2000 good steps) to 2**24 takes 24 to come back
# to 1. More in a row means that the gradients grew more than 2**24-fold from one step to the next: divergence.
NORMAL_OVERFLOWS = 24


def halve_scale(scaler: torch.amp.GradScaler) -> bool:
    """``scaler.update()`` after a step whose gradients overflowed (it multiplies the scale by its backoff
    factor, ½), kept at :data:`SCALE_FLOOR`; True when the floor stopped it (the scale would have gone below)."""
    scaler.update()
    if scaler.get_scale() >= SCALE_FLOOR:
        return False
    scaler.update(SCALE_FLOOR)
    return True


_FLOAT32_MAX = torch.finfo(torch.float32).max  # the scaler holds its scale in a float32 tensor


def scaler_state_problem(state: Any) -> str | None:
    """What is wrong with ``state``, a ``GradScaler.state_dict()`` read from a file as ``"scaler"`` (``"'scaler.scale'
    is 0, expected ..."``), or None: every field present, of its type and in its range, the scale within [:data:`SCALE_FLOOR`,
    float32's largest]."""
    if not isinstance(state, dict):
        return f"'scaler' is {_shown(state)}, expected the gradient scaler's state (an object)"

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    def whole(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    fields = {
        "scale": (
            f"a number from {SCALE_FLOOR:g} (the floor) to {_FLOAT32_MAX:.3g}",
            lambda v: number(v) and SCALE_FLOOR <= v <= _FLOAT32_MAX,
        ),
        "growth_factor": ("a number above 1", lambda v: number(v) and 1 < v <= _FLOAT32_MAX),
        "backoff_factor": ("a number between 0 and 1", lambda v: number(v) and 0 < v < 1),
        "growth_interval": ("a whole number >= 1", lambda v: whole(v) and v >= 1),
        "_growth_tracker": ("a whole number >= 0", lambda v: whole(v) and v >= 0),
    }
    for name, (expected, ok) in fields.items():
        if name not in state:
            return f"'scaler.{name}' is missing, expected {expected}"
        if not ok(state[name]):
            return f"'scaler.{name}' is {_shown(state[name])}, expected {expected}"
    return None


def _shown(value: Any) -> str:
    text = json.dumps(value) if value is not None else "null"
    return text if len(text) <= 40 else text[:37] + "..."


def tf32_applies(device: str) -> bool:
    """Whether float32 matrix products on ``device`` can run as TF32: a CUDA GPU's tensor cores."""
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


@contextlib.contextmanager
def tf32_matmuls(device: str) -> Iterator[None]:
    """While it is open, float32 matrix products and convolutions on a CUDA ``device`` run as TF32 (``set_float32_
    matmul_precision("high")``, ``cudnn.allow_tf32``); after it, the process's own settings are put back (a training
    run's choice is the run's, not the process's). On any other device it changes nothing."""
    if not tf32_applies(device):
        yield
        return
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]


def use_tf32(device: str) -> bool:
    """On a CUDA GPU, let float32 matrix products and convolutions run as TF32 on the tensor cores (PyTorch's
    ``set_float32_matmul_precision("high")``, what nanoGPT sets) and return True; elsewhere change nothing, False."""
    if not tf32_applies(device):
        return False
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    return True


def apply(model: M, choice: Choice) -> M:
    """``model`` in ``choice``'s precision, for inference: int8 linear layers and token embeddings
    (:func:`tformer.quantize`, without keeping the float weights: each int8 layer holds its values once, packed, so
    the model takes about a quarter of float32's memory) or the weights in bfloat16 / float16; float32 leaves it as
    it is. A model that holds int8 layers stays int8 under ``int8`` (its layers packed-only too) and is dequantized
    (:func:`tformer.dequantize`) for a float precision: what runs is what the choice says."""
    from tformer.fast.quantize import dequantize, is_quantized, pack_only, quantize

    if choice.precision == "int8":
        if not is_quantized(model):
            quantize(model, "int8", keep_float=False)  # in place
        pack_only(model)
        return model
    if is_quantized(model):
        dequantize(model)  # in place: float layers holding q × scale
    if choice.precision in ("bf16", "fp16"):
        return model.to(choice.dtype)
    return model


def for_inference(model: M, precision: str, work: str, device: str = "cpu", fast: bool = True) -> M:
    """``model`` in the precision :func:`choose` picks for ``work``; a choice other than the float32 the model was
    read in is said on stderr (one line: what and why), so that no number's origin is hidden. Then the kernels are
    chosen for the layers it has now (int8 ones included): the fast ones (``fast``), else the reference ones."""
    import sys

    from tformer.fast import speed_up, use_reference

    choice = choose(precision, work, model, device)
    if choice.precision != "fp32" or "dequantized" in choice.reason:  # not the float32 weights the model was read in
        print(str(choice), file=sys.stderr)
    model = apply(model, choice).eval()
    return cast(M, speed_up(model, inference=True) if fast else use_reference(model))
