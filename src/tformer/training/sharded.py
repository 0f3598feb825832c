"""``--fsdp``: the weights, their gradients and AdamW's moments sharded over the processes of a torchrun job (FSDP2).

    torchrun --nproc-per-node 4 -m tformer train lm --fsdp ...

PyTorch's ``fully_shard`` is applied to each encoder and decoder layer, then to the task's whole loss
(:class:`~tformer.training.distributed.TaskLoss`: the embeddings, norms and heads, which a task may call without the
model's own forward). Each process keeps 1/N of every parameter, of its gradient and of AdamW's moments. A layer's
weights are gathered for its forward and its backward and freed after; the gradients are reduce-scattered (summed, see
fp16 below), so N processes make the update one process makes on the same global batch.

What a run writes does not change: for ``best/``, ``last/`` and the kept checkpoints every process takes part in
gathering each tensor whole (:func:`whole_state`), and rank 0 writes it from a CPU copy of the model
(:func:`plain_copy`). A run saved with ``--fsdp`` resumes without it, with another process count, or with it again
(:func:`load_whole`, :func:`shard_optimizer_state`). Every process evaluates, inside the root's forward (each
forward needs them all to gather the weights, :func:`within`); rank 0 logs and writes.

fp16: the gradients are summed over the processes, not averaged as DDP's are, so each process's loss is scaled as one
process scales a micro-batch's, and float16 overflows at the same loss scale as in one process on the same global
batch (a torch whose FSDP2 cannot be set to sum averages, and the losses are scaled as for DDP). PyTorch's
``GradScaler`` unscales the sharded gradients, and its check for overflow takes the maximum over the processes
(DTensor's rule for that operation); the trainer decides a skip from the gradient norm, which :func:`full` makes
whole. So every process skips the same steps, the ones one process would skip.

Built on the ``meta`` device: a new model (and a resumed one) is built whole on rank 0 alone, on the CPU; every other
process builds it on the ``meta`` device (:func:`building`: shapes, no memory). The model stays off the GPU until it
is sharded (``fully_shard`` moves rank 0's one layer at a time as it cuts it), then each process makes room for its own
shards only and receives their values from rank 0's weights (:func:`materialize`), one tensor at a time. So no process
but rank 0 ever holds the whole model, and no GPU does. A pretrained model (``--init``) is still read whole by every
process.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from tformer.nn.layers import DecoderLayer, EncoderLayer
from tformer.training import distributed
from tformer.training.distributed import TaskLoss, World

__all__ = [
    "building",
    "materialize",
    "shard",
    "within",
    "plain_copy",
    "full",
    "whole",
    "whole_state",
    "load_whole",
    "copy_whole_",
    "whole_optimizer_state",
    "shard_optimizer_state",
]


def _dtensor():
    from torch.distributed.tensor import DTensor, distribute_tensor

    return DTensor, distribute_tensor


def shard(task, model: nn.Module, forward_model: nn.Module, world: World) -> nn.Module:
    """``model``'s layers and then the task's loss over ``forward_model`` (the model or its compiled forward) made
    FSDP2 modules, in place; returns the loss module (the root), which the trainer calls as it calls DDP's."""
    from torch.distributed.fsdp import fully_shard

    if world.size == 1:
        raise ValueError(
            "--fsdp shards the model over the processes of a torchrun job, and this run has one process: run it "
            "with torchrun --nproc-per-node N (N > 1), or without --fsdp"
        )
    sharded = [module for module in model.modules() if isinstance(module, (EncoderLayer, DecoderLayer))]
    for module in sharded:
        fully_shard(module)
    root = TaskLoss(task, forward_model)
    fully_shard(root)
    # the processes' gradients summed, as one process sums its micro-batches' (sum-only reductions: gloo has no
    # pre-multiplied sum); a torch without these settings averages, as DDP does (root.sums_gradients says which)
    fsdp_modules = [cast(Any, m) for m in (*sharded, root)]
    root.sums_gradients = all(hasattr(m, "set_force_sum_reduction_for_comms") for m in fsdp_modules)
    if root.sums_gradients:
        for fsdp_module in fsdp_modules:
            fsdp_module.set_gradient_divide_factor(1.0)
            fsdp_module.set_force_sum_reduction_for_comms(True)
    return root


def building(fsdp: bool) -> contextlib.AbstractContextManager:
    """Where a run builds its new model: on the ``meta`` device (shapes alone, no memory) in the processes of an
    ``--fsdp`` job other than rank 0, which receive their shards of rank 0's weights once it is sharded
    (:func:`materialize`); where it is (the CPU) everywhere else. Rank 0 builds it whole, from the run's seed."""
    return torch.device("meta") if fsdp and not distributed.is_main_process() else contextlib.nullcontext()


def materialize(model: nn.Module, plain: nn.Module | None, world: World, device: str) -> None:
    """Fill every process's shards and buffers of the sharded ``model`` with rank 0's whole weights (``plain``: its
    CPU copy, :func:`plain_copy`; None on the others), one tensor at a time. A process that built its model on the
    ``meta`` device (:func:`building`) first makes room for its own shards and buffers on ``device``. All processes
    must call it; it also hands every process rank 0's random state, as if each had built the model itself."""
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        model.to_empty(device=device)
    source = {**dict(plain.named_parameters()), **dict(plain.named_buffers())} if plain is not None else {}
    DTensor, _ = _dtensor()
    with torch.no_grad():
        for name, target in [*model.named_parameters(), *model.named_buffers()]:
            if world.is_main:
                whole = source[name].detach()
            else:  # its values come from rank 0 (distribute_tensor scatters rank 0's, a broadcast copies them)
                whole = torch.empty(target.shape, dtype=target.dtype)
            if isinstance(target, DTensor):
                copy_whole_(target, whole)
            else:
                whole = whole.to(target.device, target.dtype)
                torch.distributed.broadcast(whole, src=0)
                target.copy_(whole)
    torch.set_rng_state(distributed.broadcast_object(torch.get_rng_state(), world))


def within(root: nn.Module | None, run: Callable[[], Any]) -> Any:
    """``run()`` (an evaluation) as the root's forward with ``--fsdp``, so that FSDP2 gathers the root's own weights
    (embeddings, norms, heads: an evaluation may call the model's parts) around it, each layer still its own as it
    runs; just ``run()`` without (None)."""
    return run() if root is None else root(None, run)


def plain_copy(model: nn.Module, world: World) -> nn.Module | None:
    """Rank 0's copy of ``model`` on the CPU, made before it is sharded, into which :func:`whole_state` is loaded for
    each save (the same class, layers and kernels, so its files are the unsharded model's); None on the others."""
    return copy.deepcopy(model).cpu() if world.is_main else None


def full(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor whole where it is (a shard gathered from every process, each of which must call it; a plain tensor as
    it is): the gradient norm that ``clip_grad_norm_`` returns over sharded gradients, say."""
    DTensor, _ = _dtensor()
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def whole(tensor: torch.Tensor, keep: bool) -> torch.Tensor | None:
    """A tensor whole on the CPU (:func:`full`, then copied); None where ``keep`` is false (the gathered copy dropped
    at once)."""
    gathered = full(tensor)
    return gathered.detach().cpu() if keep else None


def whole_state(model: nn.Module, world: World) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` with every tensor whole, on rank 0's CPU (empty on the others; all must call it)."""
    state = {name: whole(t, world.is_main) for name, t in model.state_dict().items()}
    return {name: t for name, t in state.items() if t is not None}


def copy_whole_(target: torch.Tensor, source: torch.Tensor) -> None:
    """``target.copy_(source)`` where ``target`` may be a shard: this process's part of the whole ``source``."""
    DTensor, distribute_tensor = _dtensor()
    if isinstance(target, DTensor):
        source = distribute_tensor(source.to(target.device, target.dtype), target.device_mesh, target.placements)
    target.copy_(source)


def load_whole(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """``model.load_state_dict(state)`` from whole tensors (a saved model) into a model that may be sharded."""
    DTensor, distribute_tensor = _dtensor()
    own = model.state_dict()
    for name, value in list(state.items()):
        target = own.get(name)
        if isinstance(target, DTensor) and tuple(value.shape) == tuple(target.shape):
            value = value.to(target.device, target.dtype)
            state[name] = distribute_tensor(value, target.device_mesh, target.placements)
    model.load_state_dict(state)


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's parameters in the order of its ``state_dict()``'s indices."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def whole_optimizer_state(optimizer: torch.optim.Optimizer, world: World) -> dict:
    """``optimizer.state_dict()`` with each moment whole (rank 0; every process must call it): the same file as an
    unsharded run writes. The optimizer's own state is not touched."""
    DTensor, _ = _dtensor()
    saved = optimizer.state_dict()
    state = {}
    for index in sorted(saved["state"]):
        moments = {}
        for key, value in saved["state"][index].items():
            moments[key] = whole(value, world.is_main) if isinstance(value, DTensor) else value
        state[index] = moments
    return {"state": state if world.is_main else {}, "param_groups": saved["param_groups"]}


def shard_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict) -> dict:
    """A whole optimizer state (an unsharded run's, or :func:`whole_optimizer_state`'s) with each moment cut into this
    process's shard of its parameter, to load into an optimizer over sharded parameters (unchanged for plain ones)."""
    DTensor, distribute_tensor = _dtensor()
    params = _params(optimizer)
    state = {}
    for index, moments in saved["state"].items():
        param = params[int(index)] if int(index) < len(params) else None
        shaped = {}
        for key, value in moments.items():
            if isinstance(param, DTensor) and torch.is_tensor(value) and tuple(value.shape) == tuple(param.shape):
                value = distribute_tensor(value.to(param.device), param.device_mesh, param.placements)
            shaped[key] = value
        state[index] = shaped
    return {**saved, "state": state}
