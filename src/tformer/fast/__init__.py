"""CPU fast paths, applied as swaps onto a plain model (in the spirit of gpt-fast's ``quantize.py`` / ``tp.py``).

:mod:`tformer.nn` is the readable reference, in plain PyTorch. What exists only for speed lives here, and
:func:`speed_up` puts it into a model built from those parts, in place, without changing its parameters' values,
its state dict's names or (beyond float rounding) its numbers:

================================  ===================================  ==================================================
swap                              reference it replaces                faster where
================================  ===================================  ==================================================
:func:`linear.swap_linear`        ``nn.Linear``                        decoding on the CPU (1 to 256 rows a product): a
                                                                       split between the threads, a transposed or a
                                                                       oneDNN-packed copy of the weight. Training and
                                                                       GPUs: ``F.linear`` itself.
:func:`dropout.swap_dropout`      ``nn.Dropout``; the attention        training on the CPU in float32/64: one random
                                  weights' dropout in                  64-bit word per four elements instead of a
                                  :func:`tformer.nn.attention.         double-precision draw per element (a third more
                                  scaled_dot_product_attention`        steps per second on a small LM with dropout 0.1).
:func:`attention.swap_attention`   the reference kernel of every         training and decoding, everywhere: the fused
                                  :class:`tformer.nn.attention.        kernel's own look-ahead mask, no mask where none
                                  MultiHeadAttention` (its one         hides anything, beams attending to their shared
                                  forward calls ``layer.kernel``)      source row without a copy, the cheaper CPU
                                                                       dropout mask on the weights.
:func:`norms.swap_norms`          :class:`tformer.nn.norms.RMSNorm`     everywhere, in float32: ``F.rms_norm``, one op
                                                                       for the formula's five (half the time of a
                                                                       decoding row).
:func:`losses.sequence_cross_     :func:`tformer.nn.losses.            training on the CPU: the backward written in one
entropy` (not a module: the       sequence_cross_entropy`              pass from the saved log-softmax, not three over
tasks' training loss)                                                  the (N, V) logits.
================================  ===================================  ==================================================

:func:`quantize.quantize` (``tformer.quantize``) is the one swap that changes the numbers: int8 linear layers for
inference (:mod:`tformer.fast.quantize`, :mod:`tformer.fast.int8`, ``tests/test_quantize.py``); :func:`speed_up` does
not apply it.

Each keeps its reference and a parity test (``tests/test_fast.py``); ``python -m benchmarks.train_step`` and
``python -m benchmarks.decode`` time them. :func:`speed_up` is the one call that chooses them: the
:class:`~tformer.training.Trainer` (``TrainConfig.fast``, default True) applies it to the model it trains, and
:func:`tformer.load` (``fast=True``, the default) to the model it loads, with ``inference=True``: the weights stored
in the layout decoding reads (:func:`linear.inference_layout`: the same values under the same names, but a linear
weight column-major, so ``model.state_dict()``'s tensors are not all contiguous: ``safetensors`` asks for
``.contiguous()`` first, as ``save_pretrained`` and :meth:`tformer.loader.Loaded.save` do; ``tformer.load(...,
fast=False)`` or :func:`linear.training_layout` gives PyTorch's own layout). A model built in Python (``GPT(config)``,
``from_hf``) runs the reference kernels until ``speed_up`` is applied to it. :func:`tformer.fast.kernels.kernels` reads the
choice off a model, and ``tformer info`` prints it. The decoding functions of :mod:`tformer.generation` run the
kernels the model has; what a decoding call keeps for speed (the layouts of the weights its steps read, its KV
cache) belongs to that call (:class:`linear.DecodingWeights`), never to the model. :func:`use_reference` chooses
the reference kernels again (``--no-fast``, ``TrainConfig(fast=False)``); there is no switch that turns a fast path
off from outside.
"""

from __future__ import annotations

from torch import nn

from tformer.checks import yes_no
from tformer.fast import attention, dropout, int8, linear, norms
from tformer.fast.losses import sequence_cross_entropy

__all__ = ["speed_up", "use_reference", "sequence_cross_entropy"]


def speed_up(model: nn.Module, inference: bool = False) -> nn.Module:
    """Choose the fast kernels for ``model``, in place (idempotent), and return it: fast
    :class:`~tformer.fast.linear.Linear` layers, the fast dropout mask, the fast attention kernel, the fast RMSNorm,
    and an int8 layer's own product (undoing :func:`use_reference`). The Parameters stay the same objects.
    ``inference=True``: a model made to decode, its weights stored in the layout a one-row product reads
    (:func:`linear.inference_layout`, the same values: no copy while it decodes); ``False``: PyTorch's own layout,
    training's numbers to the bit (:func:`linear.training_layout`). An object that is not an ``nn.Module`` (a stand-in
    model of a test, say) has nothing to choose and is returned as it is."""
    yes_no.check(inference, "inference")  # "no" is a true string: refused, not taken for True
    if isinstance(model, nn.Module):
        linear.swap_linear(model)
        dropout.swap_dropout(model)
        attention.swap_attention(model)
        norms.swap_norms(model)
        _exact_int8(model, False)
        (linear.inference_layout if inference else linear.training_layout)(model)
    return model


def use_reference(model: nn.Module) -> nn.Module:
    """Choose the reference kernels for ``model``, in place (idempotent), and return it: ``nn.Linear``,
    ``nn.Dropout``, :func:`tformer.nn.scaled_dot_product.attend`, :class:`tformer.nn.norms.RMSNorm`, an int8 layer's
    exact product of its dequantized weight; the weights in PyTorch's own layout. What ``--no-fast`` and
    ``TrainConfig(fast=False)`` run. The Parameters stay the same objects."""
    if isinstance(model, nn.Module):
        linear.training_layout(model)
        linear.to_plain_linear(model)
        dropout.to_plain_dropout(model)
        attention.use_reference_attention(model)
        norms.to_plain_norms(model)
        _exact_int8(model, True)
    return model


def _exact_int8(model: nn.Module, exact: bool) -> None:
    for module in model.modules():
        if isinstance(module, int8.Int8Linear):
            module.exact = exact
