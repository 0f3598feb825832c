"""Data-parallel training over several processes, launched by ``torchrun``.

    torchrun --nproc-per-node 2 -m tformer train translation --out runs/x ...      # one machine
    torchrun --nnodes 2 --node-rank R --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
             --nproc-per-node 8 -m tformer train lm ...                               # several machines

Every process holds the whole model. At each optimizer step the Trainer takes the next
``accum_steps × world_size`` batches; process ``r`` runs batches ``r, r + world, …`` of them and
scales its loss by the token count of the *whole* group, so summing the gradients of all processes
(one all-reduce per optimizer step, never per micro-batch) gives exactly the gradient one process
would get on the same global batch. Only rank 0 logs, evaluates and writes checkpoints.

Backends: ``gloo`` on CPU, ``nccl`` on GPUs (each process takes ``cuda:LOCAL_RANK``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = [
    "World",
    "init",
    "shutdown",
    "is_main_process",
    "say",
    "from_rank0",
    "sync_gradients",
    "broadcast_parameters",
    "gather_objects",
    "broadcast_object",
]


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init(device: str) -> tuple[World, str]:
    """Join the process group that torchrun describes in the environment; returns (world, device)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return World(), device
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device.startswith("cuda")
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    if cuda:
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(device)
    return World(dist.get_rank(), dist.get_world_size(), local_rank), device


def is_main_process() -> bool:
    """Whether this process is rank 0 (or runs alone), known from torchrun's environment before any group exists.

    Commands print, and write files into the run directory, only where this is true.
    """
    return int(os.environ.get("RANK", "0")) == 0


def say(text: str) -> None:
    """Print a line of a training run's report: once, from rank 0, when torchrun runs several processes."""
    if is_main_process():
        print(text, flush=True)


def from_rank0(make, device: str = "cpu"):
    """``make()`` run on rank 0 alone, its result (pickled) handed to every process; just ``make()`` without torchrun.

    For what every process must hold identically but would not rebuild identically: a tokenizer trained on the
    data (the ``tokenizers`` library's WordPiece trainer numbers its pieces in hash-map order, which differs
    between processes), so that all processes encode the data the same way. An error in ``make()`` is raised
    on every process, not on rank 0 alone while the others wait for its result.
    """
    world, _ = init(device)
    made, error = None, None
    if world.is_main:
        try:
            made = make()
        except Exception as err:  # noqa: BLE001 - handed to every process, then raised
            error = err
    made, error = broadcast_object((made, error), world)
    if error is not None:
        raise error
    return made


def shutdown() -> None:
    """Leave the process group once all processes are done (call it at the end of a torchrun job).

    Without it the group is torn down while the interpreter exits, and gloo's worker threads can
    abort the process ("terminate called without an active exception") after the work is saved.
    The barrier makes no process leave while another still talks to it.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def sync_gradients(model: torch.nn.Module, world: World, extra: list[float]) -> list[float]:
    """Sum every gradient (and the numbers in ``extra``) over all processes, in one all-reduce."""
    if world.size == 1:
        return extra
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat(
        [g.reshape(-1) for g in grads] + [torch.tensor(extra, dtype=grads[0].dtype, device=grads[0].device)]
    )
    dist.all_reduce(flat)
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n
    return flat[offset:].tolist()


def broadcast_parameters(model: torch.nn.Module, world: World) -> None:
    """Make every process start from rank 0's weights (after checking that every process built the same model)."""
    if world.size == 1:
        return
    named = list(model.named_parameters()) + list(model.named_buffers())
    shapes = [(name, tuple(t.shape)) for name, t in named]
    for rank, theirs in enumerate(gather_objects(shapes, world)):
        if theirs != shapes:
            diff = next(((a, b) for a, b in zip(shapes, theirs) if a != b), (len(shapes), len(theirs)))
            raise ValueError(
                f"process {world.rank} and process {rank} built different models (first difference: "
                f"{diff[0]} vs {diff[1]}); every process must build the same model from the same data"
            )
    for _, tensor in named:
        dist.broadcast(tensor.data, src=0)


def gather_objects(obj, world: World) -> list:
    """``obj`` of every rank, in rank order (on every rank)."""
    if world.size == 1:
        return [obj]
    out = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj, world: World):
    """Rank 0's ``obj`` on every rank."""
    if world.size == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]
