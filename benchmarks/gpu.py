"""One GPU benchmark (issue 39, item 5): training, decoding and the Multi30k recipe on one CUDA GPU, in one call.

    python -m benchmarks.gpu                          # one CUDA GPU, within --budget-s 450 (7.5 minutes)
    python -m benchmarks.gpu --only train --only decode
    python -m benchmarks.gpu --recipe-steps 600 --gpu-steps 200   # a shorter (c)
    python -m benchmarks.gpu --quick                  # tiny sizes on the CPU, seconds: proves the script works
    python -m benchmarks.gpu --quick --device cuda    # tiny sizes on the GPU: the CUDA paths, before the full run

Parts (``--only``; each in its own try: an error is recorded in the report and the next part runs):

* **train** (a) — a GPT-2 124M step: 12 layers × 768, 12 heads, vocabulary 50,304, context 1,024, batch 8 × 1,024,
  dropout 0, PyTorch's fused AdamW, bf16 autocast, TF32 on (``tformer.fast.precision.use_tf32``, what ``auto`` does on
  a GPU). tformer's ``GPT`` (GPT-2's block: pre-LN, learned positions, gelu_tanh, tied head) with
  ``tformer.fast.speed_up`` applied and its loss ``tformer.fast.sequence_cross_entropy``, as the Trainer does; Hugging
  Face's ``GPT2LMHeadModel`` from a ``GPT2Config`` (random weights) with ``F.cross_entropy``. Each eager and with
  ``torch.compile(model)`` (the Trainer's ``--compile``; the loss outside the graph for both); four models, each with
  its optimizer; and tformer's ``Trainer`` stepping the same batch (``_SameBatch``: its real step, with gradient
  clipping, the schedule and the device-side skip of a non-finite step, the loss read every 10th step as at
  ``--log-every 10``), compiled but under ``--quick``, with its host reads a step counted. Tokens/s and model FLOPs utilisation as nanoGPT counts it: FLOPs a step = (6·N + 12·L·d·T)·B·T, N the
  parameters without the position table (the tied table counted once), against the bf16 matmul peak measured here
  (the best of (n, n) @ (n, n) products, n = 8192) and against the card's published dense bf16 peak
  (:data:`PUBLISHED_BF16_TFLOPS`; null for a card not in it).
* **decode** (b) — greedy decoding of the same model shape (Hugging Face's random weights, tformer's copy from
  ``tformer.hf.from_hf``), bf16 weights on a GPU with compute capability ≥ 8.0 (fp16 below, float32 on the CPU):
  16-token prompts, 128 new tokens, batches 1 and 16. tformer's eager loop (``generate_lm``: ``LMDecoder`` over its
  KV cache) and its static KV cache with the step compiled (``generate_lm(..., compile=True)``: on a GPU
  ``mode="reduce-overhead"``, a CUDA graph) vs HF ``generate`` (its dynamic cache) and HF ``generate`` with
  ``cache_implementation="static"`` and ``compile_config`` (its automatic ``torch.compile``, ``reduce-overhead``). HF's
  compile is known to fail in some transformers versions: a failure is recorded as that candidate's error. New
  tokens/s (exactly 128 per row: HF's EOS is held off by ``min_new_tokens``, tformer is given no ``eos_id``).
* **multi30k** (c) — ``tformer.translation`` on Multi30k en→fr (``--data``, ../shared/data/multi30k by default;
  skipped with the reason when absent): the README's tuned recipe (``--schedule cosine --lr 2e-3 --warmup-steps 300
  --batch-tokens 3000``, preset small) for ``--recipe-steps`` (2289, as issue 39 measured: ~117 s on an H100), and a
  GPU variant with 8× the tokens a step (``--gpu-batch-tokens 24000``, ``--gpu-lr 2e-3``, ``--gpu-warmup-steps 300``,
  ``--gpu-steps 1200``: on an H200 57.3 BLEU in 61 s of training, where issue 39's 400 steps at 4e-3 gave 42.1,
  docs/benchmarks.md), ``--precision auto`` (bf16 from compute capability 8.0). One evaluation at the end (the
  README's ``--eval-every 300`` evaluates on the way; here that time would only lengthen the call): validation loss,
  BLEU and chrF on the first 500 validation sentences, greedy. Wall-clock of ``fit`` (training and the evaluation),
  training seconds (the Trainer's clock: steps only), real target tokens/s over them.
* **memory** (d) — every candidate's peak: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``
  during one more call, beyond what was live before it (activations, gradients, caches, temporaries); with the
  weights and optimizer state the candidate keeps, the sum is what it needs alone. (c): the run's whole peak.
  On the CPU the torch profiler's allocation events stand in (:func:`benchmarks.common.peak_memory_mb`).

Timing (:func:`benchmarks.common.compare`): the candidates of a group alternate in one process, medians of
``--repeats`` rounds after ``--warmup`` rounds (decoding: ``--decode-repeats``, ``--decode-warmup``), ``torch.cuda.synchronize()`` around
each call; before that, each candidate's first call (compilation, CUDA graph capture, cuBLAS set-up) is timed apart
and reported as ``first_call_s``, not counted in the medians.

Time budget: ``--budget-s`` (450 s) is shared out as cumulative deadlines (train by 33%, decode by 60%, multi30k by
100%; a part may use what an earlier one left). The compiled candidates' first calls go first; one is not started
with under 60 s left (compiling), an eager one with under 10 s, a decoding batch with under 30 s. A Multi30k run gets ``minutes`` = the time left, less
its own set-up and evaluation and what the runs after it are expected to need (25 s + 0.1 s a step each), so it stops
at the deadline and the report says at which step. Each skip is recorded with its reason.

``--quick``: a 2-layer × 64 GPT (vocabulary 128, batch 2 × 64), 8 new tokens, (c) on the built-in corpus (or
``--data``) with the tiny preset for a handful of steps, one round each; on the CPU compile uses
``--compile-backend eager`` (dynamo's tracing without code generation). Writes ``OUT/gpu.json`` and ``OUT/gpu.md``.

Dimension legend: B batch, T sequence length, d model width, L layers, V vocabulary, N parameters, n matrix side.
"""

from __future__ import annotations

import functools
import gc
import inspect
import json
import os
import re
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F

from benchmarks.common import SHARED_DATA, Candidate, base_parser, compare, machine_info, session, write_text

PARTS = ("train", "decode", "multi30k")
SHARES = {"train": 0.33, "decode": 0.27, "multi30k": 0.40}  # of --budget-s, given as cumulative deadlines
MIN_LEFT_COMPILE, MIN_LEFT_EAGER, MIN_LEFT_GROUP = 60.0, 10.0, 30.0  # seconds a start needs
# (c): seconds a run's tokenizer, data and evaluation take, and a step: what is kept for the runs still to come
M30K_OVERHEAD_S, M30K_STEP_S = 25.0, 0.1
FULL = {
    "gpt": dict(vocab=50304, d=768, heads=12, layers=12, ctx=1024, batch=8),
    "decode": dict(prompt=16, new_tokens=128, batches=[1, 16]),
    "matmul_n": 8192,
}
QUICK = {
    "gpt": dict(vocab=128, d=64, heads=4, layers=2, ctx=64, batch=2),
    "decode": dict(prompt=4, new_tokens=8, batches=[1, 16]),
    "matmul_n": 256,
}
# Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's datasheets, TFLOP/s; first match on the device name wins.
PUBLISHED_BF16_TFLOPS: tuple[tuple[str, float | None, str], ...] = (
    (r"\bH100\b.*\bNVL\b", None, "H100 NVL: not in this table"),
    (r"\bH100\b.*\bPCIe\b", 756.0, "H100 PCIe, dense bf16"),
    (r"\bH100\b", 989.0, "H100 SXM, dense bf16"),
    (r"\bH200\b", 989.0, "H200, dense bf16"),
    (r"\bA100\b", 312.0, "A100, dense bf16"),
    (r"\bL4\b", 121.0, "L4, dense bf16"),
    (r"\bT4\b", 65.0, "T4, dense fp16 (no bf16 tensor cores)"),
)
RECIPE = dict(schedule="cosine", lr=2e-3, warmup_steps=300, batch_tokens=3000)  # README.md's tuned Multi30k flags


class Report:
    """What the parts find: results by group, extra sections, errors and skips, against one time budget."""

    def __init__(self, budget_s: float, parts: list[str]) -> None:
        self.start = time.perf_counter()
        total, so_far = sum(SHARES[p] for p in parts), 0.0
        self.deadline = {}
        for p in parts:
            so_far += SHARES[p] / total * budget_s
            self.deadline[p] = self.start + so_far
        self.results: dict[str, dict] = {}
        self.sections: dict[str, dict] = {}  # what each part says beside its timings (config, FLOPs, runs)
        self.errors: dict[str, str] = {}
        self.skipped: dict[str, str] = {}

    def left(self, part: str) -> float:
        return self.deadline[part] - time.perf_counter()

    def may_start(self, part: str, what: str, need: float) -> bool:
        left = self.left(part)
        if left >= need:
            return True
        self.skipped[what] = f"time budget: {left:.0f} s left for {part}, {need:.0f} s needed to start"
        return False

    def error(self, what: str, err: BaseException) -> None:
        traceback.print_exception(err)
        self.errors[what] = f"{type(err).__name__}: {err}"[:2000]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _mb(tensors) -> float:
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


def _free(device: str) -> None:
    """Between parts: drop compiled graphs and cached blocks, so each part's memory is its own."""
    torch.compiler.reset()
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------ the device


def gpu_info(device: str) -> dict | None:
    if not device.startswith("cuda"):
        return None
    dev = torch.device(device)
    props = torch.cuda.get_device_properties(dev)
    major, minor = torch.cuda.get_device_capability(dev)
    return {
        "name": props.name,
        "compute_capability": f"{major}.{minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
        "multiprocessors": props.multi_processor_count,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }


def published_bf16_tflops(name: str | None) -> tuple[float | None, str]:
    """The card's published dense bf16 peak (fp16 for a T4) by its name; (None, why) for a card not in the table."""
    for pattern, tflops, what in PUBLISHED_BF16_TFLOPS:
        if name and re.search(pattern, name, re.IGNORECASE):
            return tflops, what
    return None, f"{name or 'this device'}: not in the table"


def bf16_matmul_tflops(n: int, device: str, repeats: int = 5, inner: int = 10) -> float:
    """bfloat16 ``torch.matmul`` throughput on (n, n) @ (n, n): 2·n³ flops a product; the best of ``repeats`` runs of
    ``inner`` products between synchronisations."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)  # (n, n)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)  # (n, n)
    for _ in range(3):
        torch.matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        for _ in range(inner):
            torch.matmul(a, b)
        _sync(device)
        best = min(best, (time.perf_counter() - start) / inner)
    return 2 * n**3 / best / 1e12


# ----------------------------------------------------------------------------------------- shared machinery


class _Failed(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _guarded(c: Candidate) -> Candidate:
    def run() -> float:
        try:
            return c.run()
        except Exception as err:
            raise _Failed(c.name) from err

    return Candidate(c.name, run, c.flops, c.extra)


def first_calls(report: Report, part: str, group: str, candidates: list[Candidate], device: str) -> list[Candidate]:
    """Each candidate's first call, timed apart (compilation, graph capture, set-up): ``first_call_s``. A candidate
    that fails is recorded and left out; one the budget has no room for is skipped. The compiled ones go first (they
    need the most time), then the rest; the candidates keep their order in the report."""
    kept = []
    for c in sorted(candidates, key=lambda c: not c.extra.get("compiled")):
        what = f"{group} / {c.name}"
        if not report.may_start(part, what, MIN_LEFT_COMPILE if c.extra.get("compiled") else MIN_LEFT_EAGER):
            continue
        try:
            _sync(device)
            start = time.perf_counter()
            c.run()
            _sync(device)
            c.extra["first_call_s"] = time.perf_counter() - start
            kept.append(c)
        except Exception as err:
            report.error(what, err)
    return [c for c in candidates if c in kept]


def compare_safely(report: Report, group: str, candidates: list[Candidate], args, rounds: tuple[int, int], anchor: str):
    """:func:`compare` over the candidates that run (``rounds``: repeats, warmup); one that fails during the rounds is
    recorded and the rest timed again without it."""
    live = [_guarded(c) for c in candidates]
    while live:
        names = [c.name for c in live]
        try:
            return compare(live, *rounds, args.device, not args.no_memory, anchor if anchor in names else names[0])
        except _Failed as failed:
            report.error(f"{group} / {failed.name}", failed.__cause__ or failed)
            live = [c for c in live if c.name != failed.name]
    return {}


def _compiler(args) -> Callable:
    """``torch.compile`` as this run compiles: inductor on a GPU (the default), ``--compile-backend`` elsewhere."""
    return functools.partial(torch.compile, backend=args.compile_backend)


# ------------------------------------------------------------------------------------------ (a) training step


def gpt2_flops(c: dict) -> tuple[int, float]:
    """(N, FLOPs a training step) as nanoGPT's ``estimate_mfu`` counts: N without the position table (the tied token
    table counted once, as the head), FLOPs = (6·N + 12·L·d·T)·B·T."""
    d, L, V, T, B = c["d"], c["layers"], c["vocab"], c["ctx"], c["batch"]
    n = V * d + L * (12 * d * d + 13 * d) + 2 * d  # token table, L blocks (LNs, QKV, proj, MLP), final LN
    return n, (6 * n + 12 * L * d * T) * B * T


def _tformer_gpt2(c: dict, device: str):
    """tformer's GPT with GPT-2's block (GPTConfig's defaults: pre-LN, learned positions, gelu_tanh, tied head), the
    fast paths swapped in as the Trainer does."""
    from tformer import GPT, GPTConfig
    from tformer.fast import speed_up

    with torch.device(device):  # initialised where it trains
        model = GPT(
            GPTConfig(
                vocab_size=c["vocab"],
                d_model=c["d"],
                n_heads=c["heads"],
                n_layers=c["layers"],
                d_ff=4 * c["d"],
                max_len=c["ctx"],
                dropout=0.0,
            )
        )
    return speed_up(model)


def _hf_gpt2(c: dict, device: str, **config):
    import transformers

    with torch.device(device):
        return transformers.GPT2LMHeadModel(
            transformers.GPT2Config(
                vocab_size=c["vocab"],
                n_positions=c["ctx"],
                n_embd=c["d"],
                n_layer=c["layers"],
                n_head=c["heads"],
                **config,
            )
        )


def _train_step(model, forward, loss_fn, inputs, labels, device: str, autocast: torch.dtype | None):
    """One fused-AdamW step (zero_grad, forward and loss under autocast, backward, step) returning its tokens, and the
    bytes the candidate keeps (weights and optimizer state, after the first step)."""
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, fused=True)
    kind = torch.device(device).type

    def run() -> float:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(kind, dtype=autocast or torch.float32, enabled=autocast is not None):
            loss = loss_fn(forward(inputs), labels)
        loss.backward()
        opt.step()
        return labels.numel()

    def state_mb() -> float:
        return _mb(list(model.parameters()) + [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)])

    return run, state_mb


class _SameBatch:
    """A task for the Trainer that trains on one batch of ids again and again (the real step around it: clipping, the
    schedule, the skip of a non-finite step, the log's reads), with the Trainer's loss."""

    metric, higher_is_better = "val_loss", False

    def __init__(self, ids: torch.Tensor) -> None:
        from tformer.fast import sequence_cross_entropy

        self.ids, self.loss_fn = ids, sequence_cross_entropy  # (B, T + 1)

    def train_batches(self, epoch: int) -> list:
        return [0] * 1_000_000

    def count_tokens(self, batch) -> int:
        return self.ids[:, 1:].numel()

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        logits = model(self.ids[:, :-1])  # (B, T, V)
        return self.loss_fn(logits, self.ids[:, 1:], reduction="sum"), self.ids[:, 1:].numel()

    def evaluate(self, model) -> dict:
        return {}

    def save_extra(self, directory) -> None:
        pass


def trainer_step(c: dict, ids: torch.Tensor, args, out: str) -> tuple[Callable[[], float], ...]:
    """tformer's ``Trainer`` stepping ``_SameBatch`` (``--compile`` but on the CPU's ``--quick``, ``--log-every 10``: the
    loss read every tenth step, as ``tformer train lm`` does), and its host reads a step over 10 steps."""
    from tformer.training.trainer import TrainConfig, Trainer

    precision = "fp32" if args.train_precision == "fp32" else "bf16"
    cfg = TrainConfig(out, lr=6e-4, warmup_steps=10, device=args.device, precision=precision, compile=not args.quick,
                      progress=False, log_every=10, overwrite=True, max_steps=10**9)  # fmt: skip
    trainer = Trainer(_tformer_gpt2(c, args.device), _SameBatch(ids), cfg)

    def run() -> float:
        trainer._optimizer_step([0], time.perf_counter())
        if trainer.step % 10 == 0:
            trainer._settle()  # what the loop does at a log step
        return ids[:, 1:].numel()

    def reads_per_step() -> float:
        """Host reads in the next 10 steps, counted from a log step to the next (one of them logs)."""
        from torch.utils._python_dispatch import TorchDispatchMode

        while trainer.step % 10:
            run()
        counted = [0]

        class Reads(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, a=(), kw=None):
                counted[0] += func in (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default)
                return func(*a, **(kw or {}))

        tolist = torch.Tensor.tolist
        torch.Tensor.tolist = lambda t: (counted.append(0), tolist(t))[1]  # type: ignore[method-assign]
        try:
            with Reads():
                for _ in range(10):
                    run()
        finally:
            torch.Tensor.tolist = tolist  # type: ignore[method-assign]
        return (counted[0] + len(counted) - 1) / 10

    def state_mb() -> float:
        opt = trainer.optimizer
        return _mb(
            list(trainer.model.parameters())
            + [t for st in opt.state.values() for t in st.values() if torch.is_tensor(t)]
        )

    return run, reads_per_step, state_mb


def train_part(report: Report, args, sizes: dict, peaks: dict) -> None:
    from tformer.fast import sequence_cross_entropy
    from tformer.fast.precision import use_tf32

    c, group = sizes["gpt"], "train gpt2-124m" if not args.quick else "train gpt-tiny"
    tf32 = use_tf32(args.device)
    g = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, c["vocab"], (c["batch"], c["ctx"] + 1), generator=g).to(args.device)
    inputs, labels = ids[:, :-1], ids[:, 1:]  # (B, T) each
    autocast = None if args.train_precision == "fp32" else torch.bfloat16
    ours_loss = sequence_cross_entropy  # the Trainer's loss

    def hf_loss(logits, y):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))  # (B·T, V)

    compiled = _compiler(args)
    candidates, state = [], {}
    for name, is_ours, compile_it in (
        ("HF eager", False, False),
        ("HF compiled", False, True),
        ("tformer eager", True, False),
        ("tformer compiled", True, True),
    ):
        if is_ours:
            model = _tformer_gpt2(c, args.device)
        else:
            model = _hf_gpt2(c, args.device, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        module = compiled(model) if compile_it else model  # torch.compile(model), as the Trainer's --compile
        forward = module if is_ours else (lambda x, m=module: m(input_ids=x).logits)
        run, state[name] = _train_step(
            model, forward, ours_loss if is_ours else hf_loss, inputs, labels, args.device, autocast
        )
        params = sum(p.numel() for p in model.parameters())
        candidates.append(Candidate(name, run, extra={"params": params, "compiled": compile_it}))
    run, reads_per_step, state["tformer Trainer"] = trainer_step(c, ids, args, tempfile.mkdtemp(prefix="gpu-trainer-"))
    candidates.append(Candidate("tformer Trainer", run, extra={"params": params, "compiled": not args.quick}))
    kept = first_calls(report, "train", group, candidates, args.device)
    stats = compare_safely(report, group, kept, args, (args.repeats, args.warmup), anchor="HF eager")
    if "tformer Trainer" in stats:
        stats["tformer Trainer"]["host_reads_per_step"] = reads_per_step()  # at --log-every 10
    n, flops = gpt2_flops(c)
    measured, published = peaks["measured_bf16_tflops"], peaks["published_bf16_tflops"]
    for name, s in stats.items():
        s["state_mb"] = state[name]()
        if "peak_memory_mb" in s:
            s["peak_total_mb"] = s["state_mb"] + s["peak_memory_mb"]
        s["tflops"] = flops / s["median_seconds"] / 1e12
        s["mfu_measured_peak"] = s["tflops"] / measured if measured else None
        s["mfu_published_peak"] = s["tflops"] / published if published else None
    report.results[group] = stats
    report.sections["train"] = {
        "group": group,
        "config": {**c, "precision": args.train_precision, "tf32": tf32, "optimizer": "fused AdamW", "dropout": 0.0},
        "flops_per_step": flops,
        "n_params_for_flops": n,
        "tokens_per_step": c["batch"] * c["ctx"],
    }


# ------------------------------------------------------------------------------------------------ (b) decoding


def decode_dtype(args) -> torch.dtype:
    """What ``--precision auto`` decodes with on this device: bf16 from compute capability 8.0, fp16 below, float32 on
    the CPU (``--decode-precision`` overrides)."""
    from tformer.fast.precision import GPU_BF16_CAPABILITY, gpu_capability

    chosen = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}.get(args.decode_precision)
    if chosen is not None:
        return chosen
    capability = gpu_capability(args.device)
    if capability is None:
        return torch.float32
    return torch.bfloat16 if capability >= GPU_BF16_CAPABILITY else torch.float16


def _static_compile(args) -> tuple[object, str | None]:
    """What ``generate_lm``'s ``compile`` takes here, or why tformer's static cache is not available in this checkout."""
    from tformer.generation import generate_lm

    if "compile" not in inspect.signature(generate_lm).parameters:
        return None, "not available: tformer.generation.generate_lm has no compile argument in this checkout"
    if args.device.startswith("cuda") and args.compile_backend == "inductor":
        return True, None  # compile_step's choice: mode="reduce-overhead", a CUDA graph
    return functools.cache(_compiler(args)), None  # once per step function: later calls find its graphs


def _hf_static_kwargs(args) -> dict:
    import transformers

    if args.device.startswith("cuda") and args.compile_backend == "inductor":
        config = transformers.CompileConfig()  # HF's default: inductor, mode="reduce-overhead"
    else:
        config = transformers.CompileConfig(backend=args.compile_backend, mode="default")
        config._compile_all_devices = True  # HF compiles on a GPU only unless told
    return dict(cache_implementation="static", compile_config=config)


def decode_part(report: Report, args, sizes: dict) -> None:
    from tformer.fast import speed_up
    from tformer.hf import from_hf

    c, dc, dtype = sizes["gpt"], sizes["decode"], decode_dtype(args)
    n = dc["new_tokens"]
    hf = _hf_gpt2(c, args.device, bos_token_id=0, eos_token_id=0, pad_token_id=0).eval()
    ours = speed_up(from_hf(hf).to(args.device, dtype).eval(), inference=True)  # as tformer.load chooses them
    hf = hf.to(dtype)
    weights_mb = _mb(hf.parameters())
    compile_arg, unavailable = _static_compile(args)
    if unavailable:
        report.skipped["decode / tformer static cache + compile"] = unavailable
    report.sections["decode"] = {
        "config": {**dc, "model": c, "dtype": str(dtype).removeprefix("torch."), "greedy": True},
        "groups": [],
    }
    for batch in dc["batches"]:
        group = f"decode b{batch}"
        if not report.may_start("decode", group, MIN_LEFT_GROUP if not args.quick else 0.0):
            continue
        prompts = torch.randint(1, c["vocab"], (batch, dc["prompt"]), generator=torch.Generator().manual_seed(batch))
        prompts = prompts.to(args.device)  # (B, P)
        candidates = [
            Candidate("HF generate", _hf_generate(hf, prompts, n, {}), extra={"compiled": False}),
            Candidate("tformer eager loop", _tformer_generate(ours, prompts, n, False), extra={"compiled": False}),
        ]
        try:
            candidates.append(
                Candidate(
                    "HF static cache + compile",
                    _hf_generate(hf, prompts, n, _hf_static_kwargs(args)),
                    extra={"compiled": True},
                )
            )
        except Exception as err:  # no CompileConfig in this transformers
            report.error(f"{group} / HF static cache + compile", err)
        if compile_arg is not None:
            candidates.append(
                Candidate(
                    "tformer static cache + compile",
                    _tformer_generate(ours, prompts, n, compile_arg),
                    extra={"compiled": True},
                )
            )
        kept = first_calls(report, "decode", group, candidates, args.device)
        stats = compare_safely(report, group, kept, args, (args.decode_repeats, args.decode_warmup), "HF generate")
        for s in stats.values():
            s["weights_mb"] = weights_mb
            if "peak_memory_mb" in s:
                s["peak_total_mb"] = weights_mb + s["peak_memory_mb"]
        report.results[group] = stats
        report.sections["decode"]["groups"].append(group)


def _hf_generate(hf, prompts: torch.Tensor, n: int, extra: dict):
    def run() -> float:
        with torch.inference_mode():
            out = hf.generate(
                input_ids=prompts,
                attention_mask=torch.ones_like(prompts),
                do_sample=False,
                min_new_tokens=n,
                max_new_tokens=n,
                **extra,
            )  # (B, P + n)
        return (out.shape[1] - prompts.shape[1]) * prompts.shape[0]

    return run


def _tformer_generate(model, prompts: torch.Tensor, n: int, compile_arg):
    from tformer.generation import generate_lm
    from tformer.generation.static_cache import StaticCaches

    # one static cache for every call, as a server or a Translator keeps it: the CUDA graph recorded once, replayed
    kwargs = {} if compile_arg is False else {"compile": compile_arg, "caches": StaticCaches()}

    def run() -> float:
        return sum(len(row) for row in generate_lm(model, prompts, n, **kwargs))

    return run


# ----------------------------------------------------------------------------------------- (c) Multi30k runs


def multi30k_runs(args) -> tuple[str, dict]:
    """The data and the two runs' options (TrainConfig fields and translation settings)."""
    data = args.data or ("builtin" if args.quick else str(SHARED_DATA / "multi30k"))
    common = dict(precision=args.m30k_precision, seed=args.seed)
    if args.quick:
        common.update(preset="tiny", vocab_size=300, bleu_sentences=16)
    recipe = dict(RECIPE, max_steps=args.recipe_steps, **common)
    gpu = dict(
        RECIPE,
        batch_tokens=args.gpu_batch_tokens,
        lr=args.gpu_lr,
        warmup_steps=args.gpu_warmup_steps,
        max_steps=args.gpu_steps,
        **common,
    )
    if args.quick:
        recipe.update(batch_tokens=400, warmup_steps=2)
        gpu.update(batch_tokens=3200, warmup_steps=1)
    return data, {"README recipe": recipe, "GPU variant": gpu}


def _has_data(data: str) -> bool:
    return data == "builtin" or Path(data).is_file() or (Path(data) / "train.en").is_file()


def multi30k_part(report: Report, args) -> None:
    from tformer import translation

    data, runs = multi30k_runs(args)
    section: dict = {"data": data, "runs": {}}
    report.sections["multi30k"] = section
    if not _has_data(data):
        report.skipped["multi30k"] = f"no data: {data} has no train.en (give --data DIR)"
        return
    overhead, per_step = (2.0, 0.0) if args.quick else (M30K_OVERHEAD_S, M30K_STEP_S)  # tokenizer, evaluation
    names = list(runs)
    for i, (name, options) in enumerate(runs.items()):
        # the time left, less what the runs after this one are expected to need and this one's set-up and evaluation
        later = sum(overhead + per_step * runs[n]["max_steps"] for n in names[i + 1 :])
        seconds = report.left("multi30k") - later - overhead
        if seconds < (1 if args.quick else 20):
            report.skipped[f"multi30k / {name}"] = f"time budget: {report.left('multi30k'):.0f} s left for multi30k"
            continue
        try:
            section["runs"][name] = _translation_run(translation, data, name, options, seconds, args)
        except Exception as err:
            report.error(f"multi30k / {name}", err)


def _translation_run(translation, data: str, name: str, options: dict, seconds: float, args) -> dict:
    cuda = args.device.startswith("cuda")
    with tempfile.TemporaryDirectory(prefix="gpu-bench-m30k-") as out:
        start = time.perf_counter()
        trainer = translation.setup(
            data,
            out,
            device=args.device,
            eval_every=options["max_steps"],  # one evaluation, at the end
            minutes=seconds / 60,
            progress=False,
            overwrite=True,
            **options,
        )
        task, counted = trainer.task, [0]
        count = task.count_tokens

        def counting(batch) -> int:
            tokens = count(batch)
            counted[0] += tokens
            return tokens

        task.count_tokens = counting  # the Trainer counts each batch's real target tokens once, before its step
        setup_s = time.perf_counter() - start
        if cuda:
            _sync(args.device)
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        result = trainer.fit()
        _sync(args.device)
        wall = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    stopped = trainer.step < options["max_steps"]
    return {
        "options": options,
        "steps": trainer.step,
        "stopped_by_budget": stopped,
        "setup_s": setup_s,
        "fit_wall_s": wall,
        "train_s": trainer.elapsed,
        "tokens": counted[0],
        "tokens_per_s": counted[0] / trainer.elapsed if trainer.elapsed else None,
        "val_loss": result.get("val_loss"),
        "bleu": result.get("bleu"),
        "chrf": result.get("chrf"),
        "precision": trainer.precision.precision,
        "peak_memory_mb": peak,
    }


# ------------------------------------------------------------------------------------------------- the report


def goals(report: Report, quick: bool) -> list[dict]:
    """Issue 39's goals, judged from this run's numbers (``met`` None: not measured here, or ``--quick``)."""
    r = report.results
    train = report.sections.get("train", {}).get("group", "")
    static = "tformer static cache + compile"

    def stat(group: str, name: str, key: str = "median"):
        return r.get(group, {}).get(name, {}).get(key)

    def ratio(a, b):
        return a / b if a is not None and b else None

    b1, b1_hf = stat("decode b1", static), stat("decode b1", "HF generate")
    b16 = ratio(stat("decode b16", static), stat("decode b16", "HF generate"))
    gpu_run = report.sections.get("multi30k", {}).get("runs", {}).get("GPU variant", {})
    rows = [
        ("training MFU, tformer compiled (published peak)", stat(train, "tformer compiled", "mfu_published_peak"), 0.4),
        (
            "training tokens/s, tformer compiled / HF compiled",
            ratio(stat(train, "tformer compiled"), stat(train, "HF compiled")),
            1.5,
        ),
        ("decoding b1 tokens/s, tformer static cache + compile", b1, 2000.0),
        ("decoding b1, tformer static cache + compile / HF generate", ratio(b1, b1_hf), 10.0),
        ("decoding b16, tformer static cache + compile / HF generate", b16, 3.0),
        ("Multi30k GPU variant, validation BLEU (in <= 60 s of training)", gpu_run.get("bleu"), 59.0),
    ]
    out = [{"goal": g, "value": v, "target": t, "met": None if v is None or quick else v >= t} for g, v, t in rows]
    if gpu_run.get("train_s") is not None and out[-1]["met"]:
        out[-1]["met"] = gpu_run["train_s"] <= 60
    return out


def _f(x, spec: str = ",.0f") -> str:
    return "" if x is None else format(x, spec)


def _pct(x) -> str:
    return "" if x is None else f"{100 * x:.1f}%"


def markdown(payload: dict) -> str:
    m, sec = payload["machine"], payload["sections"]
    gpu = m["gpu"]
    if gpu:
        device = (
            f"GPU: {gpu['name']} (compute capability {gpu['compute_capability']}, {gpu['memory_gib']} GiB), "
            f"torch {m['torch']}, CUDA {gpu['cuda']}, transformers {m['transformers']}"
        )
    else:
        device = (
            f"Device: {m['device']} ({m['device_name']}; no GPU), torch {m['torch']}, transformers {m['transformers']}"
        )
    peaks = (
        f"bf16 matmul peak measured {_f(m['measured_bf16_tflops'], ',.1f')} TFLOP/s; published "
        f"{_f(m['published_bf16_tflops'], ',.0f') or 'unknown'} TFLOP/s ({m['published_peak_source']})"
    )
    lines = [f"# gpu\n\n{payload['description']}\n", f"{device}; {peaks}.", ""]
    if m["quick"]:
        lines += ["`--quick`: tiny sizes, one round; the numbers prove the script works, nothing more.", ""]
    res, parts = payload["results"], payload["config"]["parts"]
    titles = {"train": "(a) training step", "decode": "(b) greedy decoding", "multi30k": "(c) Multi30k en→fr"}
    for part in (p for p in parts if p not in sec):  # it failed before it had anything to say
        why = payload["errors"].get(part) or payload["skipped"].get(part) or "see errors and skips"
        lines += [f"## {titles[part]}", "", f"Not measured: {why.splitlines()[0]}", ""]
    if "train" in sec:
        t = sec["train"]
        lines += [
            f"## (a) training step, {t['group']}: {json.dumps(t['config'])}",
            "",
            "| group | candidate | median tokens/s | min–max | ratio | step ms | first call s | TFLOP/s | MFU (measured peak) | MFU (published peak) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, s in res.get(t["group"], {}).items():
            lines.append(
                f"| {t['group']} | {name} | {_f(s['median'])} | {_f(s['min'])}–{_f(s['max'])} | {s['ratio']:.2f}× | "
                f"{_f(1000 * s['median_seconds'], '.1f')} | {_f(s.get('first_call_s'), '.1f')} | "
                f"{_f(s['tflops'], '.3g')} | {_pct(s['mfu_measured_peak'])} | {_pct(s['mfu_published_peak'])} |"
            )
        reads = res.get(t["group"], {}).get("tformer Trainer", {}).get("host_reads_per_step")
        if reads is not None:
            lines += [
                "",
                f"tformer Trainer: {reads:.2f} host reads a step at --log-every 10 (issue 48's goal: at most 1).",
            ]
        lines.append("")
    if "decode" in sec:
        lines += [
            f"## (b) greedy decoding: {json.dumps(sec['decode']['config'])}",
            "",
            "| group | candidate | median new tokens/s | min–max | ratio | first call s |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for group in sec["decode"]["groups"]:
            for name, s in res.get(group, {}).items():
                lines.append(
                    f"| {group} | {name} | {_f(s['median'])} | {_f(s['min'])}–{_f(s['max'])} | {s['ratio']:.2f}× | "
                    f"{_f(s.get('first_call_s'), '.1f')} |"
                )
        lines.append("")
    if "multi30k" in sec:
        lines += [
            f"## (c) Multi30k en→fr on the device ({sec['multi30k']['data']})",
            "",
            "| run | steps | batch tokens | lr | setup s | fit wall s | train s | tokens/s | val loss | BLEU | peak MiB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, r in sec["multi30k"]["runs"].items():
            o = r["options"]
            steps = f"{r['steps']} of {o['max_steps']}" + (" (budget)" if r["stopped_by_budget"] else "")
            lines.append(
                f"| {name} | {steps} | {o['batch_tokens']} | {o['lr']:g} | {_f(r['setup_s'], '.1f')} | "
                f"{_f(r['fit_wall_s'], '.1f')} | {_f(r['train_s'], '.1f')} | {_f(r['tokens_per_s'])} | "
                f"{_f(r['val_loss'], '.3f')} | {_f(r['bleu'], '.1f')} | {_f(r['peak_memory_mb'], ',.0f')} |"
            )
        lines.append("")
    lines += [
        "## (d) peak memory (MiB): during one call beyond what was live before it, and with what the candidate keeps",
        "",
        "| group | candidate | peak during a call | kept (weights, optimizer state) | total |",
        "|---|---|---:|---:|---:|",
    ]
    for group, stats in res.items():
        for name, s in stats.items():
            kept = s.get("state_mb", s.get("weights_mb"))
            lines.append(
                f"| {group} | {name} | {_f(s.get('peak_memory_mb'), ',.1f')} | {_f(kept, ',.1f')} | "
                f"{_f(s.get('peak_total_mb'), ',.1f')} |"
            )
    quick = m["quick"]
    lines += ["", "## goals (issue 39)", "", "| goal | value | target | met |", "|---|---:|---:|---|"]
    for g in payload["goals"]:
        met = "yes" if g["met"] else "no" if g["met"] is not None else "not judged" if quick else "not measured"
        lines.append(f"| {g['goal']} | {_f(g['value'], ',.2f')} | {_f(g['target'], ',.2f')} | {met} |")
    if payload["errors"] or payload["skipped"]:
        lines += ["", "## errors and skips", ""]
        lines += [f"- error: {k}: {v.splitlines()[0] if v else ''}" for k, v in payload["errors"].items()]
        lines += [f"- skipped: {k}: {v}" for k, v in payload["skipped"].items()]
    lines += ["", f"Seconds per part: {json.dumps(payload['part_seconds'])}; total {payload['total_s']:.0f} s."]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------------- main


def _parser():
    p = base_parser(__doc__, "runs/bench", "gpu.json", "gpu.md")
    p.add_argument("--only", choices=PARTS, action="append", help="run only these parts (repeatable)")
    p.add_argument("--budget-s", type=float, default=450.0, help="seconds for all parts (see the time budget above)")
    p.add_argument("--decode-repeats", type=int, default=3, help="timed rounds of each decoding candidate")
    p.add_argument("--decode-warmup", type=int, default=1, help="untimed rounds of decoding (after the first call)")
    p.add_argument("--train-precision", choices=("bf16", "fp32"), default="bf16", help="(a): autocast dtype")
    p.add_argument("--decode-precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto")
    p.add_argument(
        "--compile-backend",
        default=None,
        help="torch.compile backend (default: inductor on a GPU, eager on the CPU: dynamo's tracing only)",
    )
    p.add_argument("--data", default=None, help="(c): a Multi30k directory (default ../shared/data/multi30k)")
    p.add_argument("--m30k-precision", default="auto", help="(c): --precision of both runs")
    p.add_argument("--recipe-steps", type=int, default=2289, help="(c): steps of the README recipe")
    p.add_argument("--gpu-steps", type=int, default=1200, help="(c): steps of the GPU variant")
    p.add_argument("--gpu-batch-tokens", type=int, default=24000, help="(c): the GPU variant's tokens a step")
    p.add_argument("--gpu-lr", type=float, default=2e-3, help="(c): the GPU variant's peak learning rate")
    p.add_argument("--gpu-warmup-steps", type=int, default=300, help="(c): the GPU variant's warm-up")
    p.set_defaults(repeats=10, warmup=3, device=None)
    return p


def main(argv=None) -> dict:
    args = _parser().parse_args(argv)
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() and not args.quick else "cpu"
        if not args.quick and args.device == "cpu":
            raise SystemExit(
                "benchmarks.gpu: no CUDA GPU here; --quick runs tiny sizes on the CPU (--device cpu forces)"
            )
    if args.compile_backend is None:
        args.compile_backend = "inductor" if args.device.startswith("cuda") else "eager"
    if args.quick:
        args.decode_repeats, args.decode_warmup = 1, 0
        args.recipe_steps, args.gpu_steps = min(args.recipe_steps, 5), min(args.gpu_steps, 3)
    sizes = QUICK if args.quick else FULL
    parts = [p for p in PARTS if p in (args.only or PARTS)]
    report = Report(args.budget_s, parts)
    part_seconds: dict[str, float] = {}
    with session(args):
        import transformers

        gpu = gpu_info(args.device)
        published, source = published_bf16_tflops(gpu["name"] if gpu else None)
        peaks = {"measured_bf16_tflops": None, "published_bf16_tflops": published}
        try:
            peaks["measured_bf16_tflops"] = bf16_matmul_tflops(sizes["matmul_n"], args.device, 2 if args.quick else 5)
        except Exception as err:
            report.error("bf16 matmul peak", err)
        for part in parts:
            start = time.perf_counter()
            try:
                if part == "train":
                    train_part(report, args, sizes, peaks)
                elif part == "decode":
                    decode_part(report, args, sizes)
                else:
                    multi30k_part(report, args)
            except Exception as err:
                report.error(part, err)
            _free(args.device)
            part_seconds[part] = round(time.perf_counter() - start, 1)
        machine = machine_info(args, None)
    from tformer.machine import describe

    machine.update(
        gpu=gpu,
        device_name=gpu["name"] if gpu else describe().to_dict()["cpu"],
        cuda=torch.version.cuda,
        transformers=transformers.__version__,
        measured_bf16_tflops=peaks["measured_bf16_tflops"],
        published_bf16_tflops=published,
        published_peak_source=source,
        compile_backend=args.compile_backend,
    )
    payload = {
        "benchmark": "gpu",
        "description": "GPT-2 124M training step and decoding, tformer vs Hugging Face, and the Multi30k recipe, "
        "on one device (tokens/s, MFU, peak memory, BLEU)",
        "machine": machine,
        "config": {"sizes": sizes, "parts": parts, "budget_s": args.budget_s},
        "results": report.results,
        "sections": report.sections,
        "errors": report.errors,
        "skipped": report.skipped,
        "part_seconds": part_seconds,
        "total_s": time.perf_counter() - report.start,
    }
    payload["goals"] = goals(report, args.quick)
    write_text(args.out, "gpu.json", json.dumps(payload, indent=2, default=str))
    text = markdown(payload)
    write_text(args.out, "gpu.md", text)
    print(text)
    return json.loads(json.dumps(payload, default=str))


if __name__ == "__main__":
    main()
