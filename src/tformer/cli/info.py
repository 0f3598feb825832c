"""``tformer info MODEL`` (or ``--model MODEL``): what a directory holds (family, kind, config, parameter count,
tokenizer), read by ``tformer.load``; ``tformer info --system``: the processor, its class and the features that
decide which kernels run fast (:mod:`tformer.machine`)."""

from __future__ import annotations

import dataclasses
import types

from tformer.cli.validate import existing_dir


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="describe a model directory of any kind, or this machine (--system)")
    model = p.add_mutually_exclusive_group()
    model.add_argument(
        "model",
        metavar="MODEL",
        nargs="?",
        type=existing_dir,
        help="a run, model or Hugging Face directory of any family (tformer.load); or give it as --model MODEL",
    )
    model.add_argument("--model", dest="model_flag", metavar="MODEL", type=existing_dir, help="the same as MODEL")
    p.add_argument(
        "--system",
        action="store_true",
        help="describe this machine: CPU, cores, ISA features (AVX2, AVX-512, AVX512_BF16, VNNI, AMX), PyTorch's view",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    if args.system:
        _system()
    directory, flag = (args.model, "MODEL") if args.model is not None else (args.model_flag, "--model")
    if directory is None:
        if not args.system:
            raise ValueError("give a model directory (tformer info DIR) or --system")  # or --model DIR
        return 0
    from tformer.loader import load

    loaded = load(directory, flag=flag, strict=False)  # what the directory holds, even a tokenizer of another run
    model = loaded.model
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{type(model).__name__} ({model.model_type}), {n_params:,} parameters: {loaded.kind.describe()}")
    for field, value in dataclasses.asdict(model.config).items():
        print(f"  {field:18s} {value}")
    print(f"  {'tokenizer':18s} {_tokenizers(loaded)}")
    return 0


def _tokenizers(loaded) -> str:
    """``char, 65 ids``; a translator's ``source bpe, 8000 ids; target bpe, 8000 ids``; or why there is none."""
    if loaded.tokenizer is None:
        return f"none ({loaded.missing})"
    pairs = [("", loaded.tokenizer)]
    if loaded.family == "seq2seq":
        pairs = [("source ", loaded.tokenizer), ("target ", loaded.target_tokenizer)]
    return "; ".join(
        f"{side}{tok.kind}, {tok.vocab_size:,} ids" if tok is not None else f"{side}none" for side, tok in pairs
    )


def _system() -> None:
    import torch

    from tformer.machine import FEATURES, describe

    m = describe()
    print(f"cpu               {m.cpu}")
    print(f"cores             {m.cores} (PyTorch uses {m.threads} threads)")
    print(f"machine class     {m.machine_class}")
    print(f"features          {' '.join(f if f in m.features else f'-{f}' for f in FEATURES)}")
    print(f"torch             {torch.__version__}, CPU capability {m.torch_capability}")
    from tformer.fast.precision import INT8_MIN_WIDTH, choose

    wide = types.SimpleNamespace(config=types.SimpleNamespace(d_model=INT8_MIN_WIDTH))  # a model just wide enough
    for work in ("training", "decoding", "batched", "measuring"):  # what --precision auto picks here, and why
        print(f"{'auto, ' + work:18s}{choose('auto', work, wide, machine=m)}")
    _gpus(wide)


def _gpus(model) -> None:
    """Each CUDA GPU: name, memory, compute capability, and what ``--precision auto`` picks on it."""
    import torch

    from tformer.fast.precision import choose, gpu_capability

    if not torch.cuda.is_available():
        cuda = torch.version.cuda
        why = "this torch is a CPU build" if cuda is None else f"none found (this torch has CUDA {cuda})"
        print(f"{'gpu':18s}none: {why}")
        return
    for i in range(torch.cuda.device_count()):
        props, device = torch.cuda.get_device_properties(i), f"cuda:{i}"
        cap = gpu_capability(device)
        print(f"{'gpu ' + str(i):18s}{props.name}, {props.total_memory / 2**30:.0f} GiB, compute capability {cap}")
        for work in ("training", "decoding"):
            print(f"{'  auto, ' + work:18s}{choose('auto', work, model, device=device)}")
