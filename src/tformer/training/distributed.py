"""Data-parallel training over several processes, launched by ``torchrun``.

    torchrun --nproc-per-node 2 -m tformer train translation --out runs/x ...      # one machine
    torchrun --nnodes 2 --node-rank R --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
             --nproc-per-node 8 -m tformer train lm ...                               # several machines

Every process holds the whole model. At each optimizer step the Trainer takes the next
``accum_steps × world_size`` batches; process ``r`` runs batches ``r, r + world, …`` of them and
scales its loss by the token count of the *whole* group, so summing the gradients of all processes
gives exactly the gradient one process would get on the same global batch. The sum is PyTorch's
``DistributedDataParallel`` (:func:`data_parallel`): bucketed all-reduces overlapped with the last micro-batch's
backward (``no_sync`` for the others), each process's loss scaled by the process count since DDP averages.
Only rank 0 logs, evaluates and writes checkpoints.

Backends: ``gloo`` on CPU, ``nccl`` on GPUs (each process takes ``cuda:LOCAL_RANK``).
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "World",
    "init",
    "shutdown",
    "is_main_process",
    "say",
    "from_rank0",
    "TaskLoss",
    "data_parallel",
    "shares",
    "all_sum",
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
    The garbage collection first frees what the training left in reference cycles (FSDP2's state hangs
    on the model's hooks, with its device mesh and collectives): otherwise it outlives the group and is
    freed during the interpreter's exit, which aborted rank 0 now and then in the same way. The barrier
    makes no process leave while another still talks to it.
    """
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


class TaskLoss(torch.nn.Module):
    """``task.loss(model, batch)`` as a module's forward, so that ``DistributedDataParallel`` wraps the whole loss: a
    task may call the model's parts (``model.classifier``, BERT's heads), which DDP's wrapper does not pass on.
    ``run``: call it instead (an evaluation), inside this module's forward: FSDP2 gathers the weights around it."""

    sums_gradients = False  # FSDP2 set to sum the processes' gradients (sharded.shard); DDP averages them

    def __init__(self, task, model: torch.nn.Module) -> None:
        super().__init__()
        self.task, self.model = task, model

    def forward(self, batch, run=None):
        return run() if run is not None else self.task.loss(self.model, batch)


def data_parallel(task, model: torch.nn.Module, world: World) -> Any:
    """With several processes, the task's loss over ``model`` wrapped in PyTorch's ``DistributedDataParallel``:
    gradients averaged in buckets while backward runs (overlapped with it), into the gradients' own memory
    (``gradient_as_bucket_view``); None with one process. The task moves its batches to the device itself; the
    buffers are the config's, the same in every process, never synced at each forward. A task whose loss leaves
    parameters unused says so (``leaves_parameters_unused``: BERT's pretraining heads when it classifies); those keep
    no gradient, as with one process (``find_unused_parameters``). Other tasks use every parameter, so DDP does not
    walk the autograd graph at each step to look for unused ones (it warns that the walk was for nothing)."""
    if world.size == 1:
        return None
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    unused = bool(getattr(task, "leaves_parameters_unused", False))
    # torch 2.13 names broadcast_buffers forward_sync_buffers (the old name warns); older releases have only the old
    newer = "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    buffers: dict[str, Any] = {"forward_sync_buffers" if newer else "broadcast_buffers": False}
    return DistributedDataParallel(
        TaskLoss(task, model), gradient_as_bucket_view=True, find_unused_parameters=unused, **buffers
    )


def shares(group: list, world: World) -> list[tuple[object, bool]]:
    """This process's micro-batches of ``group``: batches ``rank, rank + size, ...``, each with whether it counts.
    Every process runs as many as the one with the most (DDP all-reduces at each process's last backward, so all
    must run the same number): a process short of one repeats its last batch (or the group's first) with a weight
    of 0."""
    mine = [(batch, True) for batch in group[world.rank :: world.size]]
    most = -(-len(group) // world.size)
    filler = mine[-1][0] if mine else group[0]
    return mine + [(filler, False)] * (most - len(mine))


def all_sum(world: World, numbers: list, device: str) -> list:
    """``numbers`` (floats or 0-d tensors) summed over all processes, in one all-reduce on ``device`` (nccl's is a
    GPU); as they are with one process."""
    if world.size == 1:
        return numbers
    flat = torch.stack([torch.as_tensor(n, dtype=torch.float64, device=device) for n in numbers])
    dist.all_reduce(flat)
    return flat.tolist()


def broadcast_parameters(model: torch.nn.Module, world: World, values: bool = True) -> None:
    """Make every process start from rank 0's weights (after checking that every process built the same model);
    ``values=False``: the check alone (``--fsdp`` hands out rank 0's weights once they are sharded)."""
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
    for _, tensor in named if values else []:
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
