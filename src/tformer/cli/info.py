"""``tformer info DIR``: what a checkpoint holds (family, config, parameter count)."""

from __future__ import annotations

import dataclasses

from tformer.cli.validate import existing_dir


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="describe a saved model directory")
    p.add_argument("model", type=existing_dir, help="model directory written by save_pretrained")
    p.set_defaults(func=run)


def run(args) -> int:
    from tformer.models.checkpoint import load_pretrained

    model = load_pretrained(args.model)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{type(model).__name__} ({model.model_type}), {n_params:,} parameters")
    for field, value in dataclasses.asdict(model.config).items():
        print(f"  {field:18s} {value}")
    return 0
