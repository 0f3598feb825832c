"""The floor under batch-1 decoding: how fast can one step go if it did nothing but its matmuls?

    python -m benchmarks.decode_floor           # a minute on 2 cores
    python -m benchmarks.decode_floor --quick   # tiny sizes, proves the script works

At batch 1 every decoding step multiplies one vector by every weight matrix of the decoder and the
output layer: the step streams all those weights from memory once. This benchmark times exactly
that, each linear layer of the ``benchmarks.decode`` models applied to one position (for
cross-attention only W_Q: its keys/values are cached), and reports it as "tokens/s if the step were
only its matmuls". Three layouts: PyTorch's (``F.linear``, weight stored (out, in)), the same
products with the weight stored transposed, (in, out), which the BLAS here streams faster, and
``tformer.fast.linear.Linear`` itself (with more than one thread: each product split between the threads,
by outputs or by inputs, all streamed at once). No decoder, in any library, runs faster than the first line without changing the
layout or the precision of its weights, or the number of cores that stream them. Writes ``OUT/decode_floor.json`` and ``OUT/decode_floor.md``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks.common import Candidate, base_parser, compare, machine_info, session, write_report
from benchmarks.decode import FULL, QUICK, _gpt_pair, _marian_pair


def step_weights(model: torch.nn.Module, decoder_only: bool) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """(weight, bias) of every matmul one cached decoding step does, in order."""
    return [
        (module.weight.detach()[start:end], None if module.bias is None else module.bias.detach()[start:end])
        for module, start, end in step_layers(model, decoder_only)
    ]


def step_layers(model: torch.nn.Module, decoder_only: bool) -> list[tuple[torch.nn.Linear, int, int]]:
    """(layer, first, last output feature) of every matmul one cached decoding step does, in order."""
    layers = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or not (decoder_only or name.startswith(("decoder", "output"))):
            continue
        cross = "cross_attn.qkv_proj" in name  # K/V of the source are cached: only W_Q runs per step
        layers.append((module, 0, module.in_features if cross else module.out_features))
    return layers


def floor_candidates(model: torch.nn.Module, decoder_only: bool, device: str) -> list[Candidate]:
    layers = step_layers(model, decoder_only)
    weights = step_weights(model, decoder_only)
    xs = [torch.randn(1, 1, w.shape[1], device=device) for w, _ in weights]
    transposed = [(w.t().contiguous(), b) for w, b in weights]  # (in, out)
    mb = sum(w.numel() * w.element_size() for w, _ in weights) / 1e6

    def linear_layout() -> float:
        with torch.inference_mode():
            for (w, b), x in zip(weights, xs):
                F.linear(x, w, b)
        return 1.0

    def transposed_layout() -> float:
        with torch.inference_mode():
            for (wt, b), x in zip(transposed, xs):
                y = x @ wt
                if b is not None:
                    y += b
        return 1.0

    def tformer_layout() -> float:
        with torch.inference_mode():
            for (layer, start, end), x in zip(layers, xs):
                layer.forward_rows(x, start, end)
        return 1.0

    extra = {"weights_mb": round(mb, 1), "matmuls": len(weights)}
    return [
        Candidate("matmuls only, F.linear (out, in)", linear_layout, extra=extra),
        Candidate("matmuls only, weight stored (in, out)", transposed_layout, extra=extra),
        Candidate("matmuls only, tformer.Linear", tformer_layout, extra=extra),
    ]


def stream_gbs(mb: int = 512, repeats: int = 7) -> float:
    """The machine's measured rate of reading memory, GB/s: the best of ``repeats`` sums of a float32 buffer of
    ``mb`` MB (far larger than any cache here), with torch's threads. A decoding step at batch 1 reads every weight
    once, so no step is faster than its weight bytes ÷ this rate."""
    import time

    buffer = torch.ones(mb * 250_000)  # mb MB of float32
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        buffer.sum()
        best = min(best, time.perf_counter() - start)
    return buffer.nbytes / best / 1e9


def step_bytes(model: torch.nn.Module, decoder_only: bool) -> dict:
    """Bytes of weights one cached batch-1 decoding step reads: float32 (4 per weight, bias included) and int8 (what
    ``tformer.quantize`` keeps: 1 per weight, a float32 scale per output feature, the float32 bias); the KV cache's
    reads are left out (they grow with the length and are the same for both)."""
    fp32 = int8 = 0
    for module, start, end in step_layers(model, decoder_only):
        n, k = end - start, module.in_features
        bias = 0 if module.bias is None else 4 * n
        fp32 += 4 * n * k + bias
        int8 += n * k + 4 * n + bias
    return {"fp32": fp32, "int8": int8}


def floor_report(model: torch.nn.Module, decoder_only: bool, measured: dict[str, float]) -> dict:
    """The floor of batch-1 decoding, tokens/s, per precision (the stream rate ÷ the step's weight bytes), and each
    ``measured`` tokens/s (``{"fp32": …, "int8": …}``) as a fraction of its precision's floor."""
    rate = stream_gbs()
    out: dict = {"stream_gb_per_s": round(rate, 2)}
    for precision, nbytes in step_bytes(model, decoder_only).items():
        floor = rate * 1e9 / nbytes
        row = {"weight_mb_per_step": round(nbytes / 1e6, 1), "floor_tokens_per_s": round(floor, 1)}
        if precision in measured:
            row["measured_tokens_per_s"] = round(measured[precision], 1)
            row["fraction_of_floor"] = round(measured[precision] / floor, 3)
        out[precision] = row
    return out


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench", "decode_floor.json", "decode_floor.md")
    p.set_defaults(repeats=5, warmup=1)
    args = p.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    results = {}
    with session(args):
        for name, pair, decoder_only in (("marian", _marian_pair, False), ("gpt", _gpt_pair, True)):
            _, ours = pair(sizes[name], args.device)
            reps = 1 if args.quick else 200  # one call = one step; time many steps per round
            run = [
                Candidate(c.name, (lambda f=c.run, reps=reps: sum(f() for _ in range(reps))), extra=c.extra)
                for c in floor_candidates(ours, decoder_only, args.device)
            ]
            results[name] = compare(
                run,
                args.repeats,
                args.warmup,
                args.device,
                not args.no_memory,
                anchor="matmuls only, F.linear (out, in)",
            )
        machine = machine_info(args, None)
    payload = {
        "benchmark": "decode_floor",
        "description": "batch-1 decoding steps/s if a step were only its matmuls",
        "machine": machine,
        "config": sizes,
        "results": results,
    }
    return write_report(args.out, "decode_floor", payload, "steps/s")


if __name__ == "__main__":
    main()
