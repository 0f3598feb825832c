"""``tformer info DIR``: what a checkpoint holds (family, config, parameter count); ``tformer info --system``: the
processor, its class and the features that decide which kernels run fast (:mod:`tformer.machine`)."""

from __future__ import annotations

import dataclasses

from tformer.cli.validate import existing_dir


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="describe a saved model directory, or this machine (--system)")
    p.add_argument("model", nargs="?", type=existing_dir, help="model directory written by save_pretrained")
    p.add_argument(
        "--system",
        action="store_true",
        help="describe this machine: CPU, cores, ISA features (AVX2, AVX-512, AVX512_BF16, VNNI, AMX), PyTorch's view",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    if args.system:
        _system()
    if args.model is None:
        if not args.system:
            raise ValueError("give a model directory (tformer info DIR) or --system")
        return 0
    from tformer.models.checkpoint import load_pretrained

    model = load_pretrained(args.model)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{type(model).__name__} ({model.model_type}), {n_params:,} parameters")
    for field, value in dataclasses.asdict(model.config).items():
        print(f"  {field:18s} {value}")
    return 0


def _system() -> None:
    import torch

    from tformer.machine import FEATURES, describe

    m = describe()
    print(f"cpu               {m.cpu}")
    print(f"cores             {m.cores} (PyTorch uses {m.threads} threads)")
    print(f"machine class     {m.machine_class}")
    print(f"features          {' '.join(f if f in m.features else f'-{f}' for f in FEATURES)}")
    print(f"torch             {torch.__version__}, CPU capability {m.torch_capability}")
