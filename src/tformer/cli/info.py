"""``tformer info MODEL`` (or ``--model MODEL``): what a directory holds (family, kind, config, parameter count,
tokenizer), read by ``tformer.load``; ``tformer info --system``: the processor, its class and the features that
decide which kernels run fast (:mod:`tformer.machine`)."""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path

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


# What a config field's None means in the model built from it: the field it follows, with its value
_NONE_MEANS = {
    "attn_dropout": lambda c: f"dropout, {c.dropout}",
    "ffn_dropout": lambda c: f"dropout, {c.dropout}",
    "n_kv_heads": lambda c: f"n_heads, {c.n_heads}",
    "final_norm": lambda c: f"norm_first, {c.norm_first}",
    "qkv_bias": lambda c: f"bias, {c.bias}",
    "attn_scale": lambda c: f"1/√head_dim, {c.head_dim**-0.5:.4g}",
    "rope_local_base": lambda c: f"rope_base, {c.rope_base}",
}


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
    adapter = _peft_adapter(directory)
    if adapter:
        print(adapter)
    n_params, n_int8 = count_parameters(model)
    held = f" ({n_int8:,} of them int8)" if n_int8 else ""
    held += _untrained(loaded)
    print(f"{type(model).__name__} ({model.model_type}), {n_params:,} parameters{held}: {loaded.kind.describe()}")
    for field, value in dataclasses.asdict(model.config).items():
        means = _NONE_MEANS.get(field) if value is None else None
        print(f"  {field:18s} {value}" + (f" (= {means(model.config)})" if means else ""))
    print(f"  {'tokenizer':18s} {_tokenizers(loaded)}")
    print(f"  {'kernels':18s} {_kernels(model)}")
    lora = _lora(loaded.kind.path)
    if lora:
        print(f"  {'lora':18s} {lora}")
    if loaded.kind.source == "run":
        print(f"  {'run':18s} {describe_run(loaded.kind.path)}")
    return 0


def _lora(path) -> str | None:
    """A LoRA model's pairs, from its ``config.json`` record (the parameters above count them merged), and its PEFT
    adapter; None for a model without."""
    from tformer.hf.peft import ADAPTER_WEIGHTS
    from tformer.models.checkpoint import CONFIG_NAME, LORA, model_dir
    from tformer.readers import read_json_object

    try:
        directory = model_dir(path)
        record = read_json_object(directory / CONFIG_NAME, "model config").get(LORA)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    adapter = directory / ADAPTER_WEIGHTS
    return (
        f"rank {record.get('r')}, alpha {record.get('alpha')}, dropout {record.get('dropout')}, "
        f"{sum(len(p) for p in (record.get('layers') or {}).values())} pairs (merged into the weights when loaded; "
        "tformer merge writes them so)" + (f"; PEFT adapter: {adapter}" if adapter.is_file() else "")
    )


def _peft_adapter(path) -> str | None:
    """What a PEFT adapter directory (no config.json of its own) is, for the line above its base's description:
    ``PEFT LoRA adapter: rank 2, alpha 4, dropout 0.05 on k_proj, q_proj, on the base /models/llama; merged:``.
    None for any other directory."""
    from tformer.hf.peft import ADAPTER_CONFIG
    from tformer.models.checkpoint import CONFIG_NAME
    from tformer.readers import read_json_object

    directory = Path(path)
    if not (directory / ADAPTER_CONFIG).is_file() or (directory / CONFIG_NAME).is_file():
        return None
    try:
        adapter = read_json_object(directory / ADAPTER_CONFIG, "PEFT adapter config")
    except (OSError, ValueError):
        return None
    targets = adapter.get("target_modules")
    on = ", ".join(sorted(targets)) if isinstance(targets, list) else str(targets)
    return (
        f"PEFT {str(adapter.get('peft_type')).replace('LORA', 'LoRA')} adapter: rank {adapter.get('r')}, "
        f"alpha {adapter.get('lora_alpha')}, "
        f"dropout {adapter.get('lora_dropout')} on {on}, on the base {adapter.get('base_model_name_or_path')}; "
        "that base with the pairs merged into it:"
    )


def _kernels(model) -> str:
    """The kernels the loaded model runs (:mod:`tformer.fast.kernels`, read off its modules: chosen by the load)."""
    from tformer.fast.kernels import describe_kernels

    return f"{describe_kernels(model)} (training and decoding; --no-fast: the reference ones)"


def describe_run(out: Path) -> str:
    """A run's progress in one line, from ``last/state.json`` and ``log.jsonl``: ``step 6 of 6 (last/), 0.4 s of
    training; best val_loss 4.0923 at step 6 (best/, the model above)``. What cannot be read is said, not raised."""
    parts = []
    try:
        state = json.loads((out / "last" / "state.json").read_text(encoding="utf-8"))
        config = state.get("train_config") or {}
        total = f" of {config['max_steps']}" if config.get("max_steps") else ""
        parts.append(f"step {state['step']}{total} (last/), {float(state['elapsed']):.1f} s of training")
        stop = _stopped_early(state)
        if stop:
            parts[-1] += f", stopped at {stop}"
        best = state.get("best")
    except FileNotFoundError:
        parts.append("no last/ state (the run saved none)")
        best = None
    except (OSError, ValueError, KeyError, TypeError) as err:
        parts.append(f"last/state.json unreadable ({type(err).__name__})")
        best = None
    where = _best_record(out / "log.jsonl", best) if best is not None else None
    if best is not None and isinstance(state.get("best_step"), int):  # the state says where (runs of 0.2.0 on)
        where = (where[0] if where else "metric", state["best_step"], state.get("best_ema") is True)
    if where is not None:
        ema = (state.get("train_config") or {}).get("ema")
        kind = f": the moving average of the weights, --ema {ema:g}" if where[2] and ema else ""
        parts.append(f"best {where[0]} {best:.4f} at step {where[1]} (best/, the model above{kind})")
    elif best is not None:
        parts.append(f"best {best:.4f} (best/, the model above)")
    return "; ".join(parts)


def _stopped_early(state: dict) -> str | None:
    """The limit other than ``--max-steps`` that ended the run of ``state`` (``--patience 3 (3 evaluations in a row
    without a better one)``, ``--minutes``, ``--epochs``), in the CLI's words; None when none did."""
    from tformer.training.config import TrainConfig, budget_reached, patience_spent

    names = {f.name for f in dataclasses.fields(TrainConfig)}
    try:
        cfg = TrainConfig(**{k: v for k, v in state["train_config"].items() if k in names})
        reached = patience_spent(cfg, int(state.get("stale_evals", 0))) or budget_reached(
            cfg, int(state["step"]), int(state.get("epoch", 0)), float(state["elapsed"])
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return None if reached is None or reached.startswith("--max-steps") else reached


def _best_record(log: Path, best: float) -> tuple[str, int, bool] | None:
    """(metric, step, whether it is the moving average's) of the evaluation in ``log`` whose value is ``best``."""
    try:
        lines = log.read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError):
        return None
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        for metric in ("bleu", "accuracy", "val_loss"):  # the families' metrics (task.metric), the first that fits
            for ema in (False, True):  # --ema: the moving average's score beside (ema_val_loss)
                if isinstance(record, dict) and record.get("ema_" * ema + metric) == best and "step" in record:
                    return metric, record["step"], ema
    return None


def _untrained(loaded) -> str:
    """How many of a BERT's parameters are pretraining heads that never trained: a Hugging Face directory's that it
    lacks (a sentence-transformers encoder, a classifier; transformers' own count leaves them out), a classifier's."""
    from tformer.bert.fill_mask import untrained_heads

    heads = untrained_heads(loaded)
    if not heads:
        return ""
    model = loaded.model
    others = {id(p) for name, p in model.named_parameters() if not name.startswith(heads)}  # tied: the embedding's
    own = {id(p): p.numel() for head in heads for p in getattr(model, head).parameters() if id(p) not in others}
    why = "the directory lacks, at their random init" if loaded.kind.source == "hf" else "that never trained"
    return f" ({sum(own.values()):,} of them in the {' and '.join(heads)} {why})"


def count_parameters(model) -> tuple[int, int]:
    """(the model's parameters, how many of them it holds in int8). An int8 layer's values are buffers, not
    ``parameters()``: the count is that of the same model in float (built from its config on the meta device: no
    memory), so that quantizing never changes it; the int8 ones are counted from the int8 layers' shapes (a head
    that shares an int8 table's values once)."""
    import torch

    from tformer.fast.int8 import Int8Linear
    from tformer.fast.int8_embedding import Int8Embedding

    int8 = 0
    for m in model.modules():
        if isinstance(m, Int8Embedding):
            int8 += m.num_embeddings * m.embedding_dim
        elif isinstance(m, Int8Linear) and not m.shares_values:
            int8 += m.in_features * m.out_features
    if not int8:
        return sum(p.numel() for p in model.parameters()), 0
    with torch.device("meta"):
        float_twin = type(model)(model.config)
    return sum(p.numel() for p in float_twin.parameters()), int8


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
