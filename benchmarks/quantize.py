"""int8 inference (issue 33): ``tformer.quantize(model, "int8")`` against float32, quality and speed, in one process.

    python -m benchmarks.quantize                         # trains a char GPT for 300 steps first (a minute or two)
    python -m benchmarks.quantize --run runs/lm           # a GPT run or model directory instead (its text: --data)
    python -m benchmarks.quantize --quick                 # tiny sizes, one round: proves the script works (seconds)

* **Quality**, on a character GPT trained in-process on Tiny Shakespeare (``tformer.lm.train``, preset
  ``shakespeare-char-6min``, ``--steps`` steps) or the one ``--run`` names: validation perplexity over the last
  10% of the text (``tformer.lm.evaluate_stream``, as training reports it) in float32, int8 with the machine's
  kernels, and int8 with the reference product (the dequantized weights in float32: what the weights' rounding
  alone costs); the largest difference of the logits over the first validation blocks, absolute and relative to
  the largest float32 logit; how many of ``--new-tokens`` greedy tokens from a validation prompt equal float32's.
  The MiniLM sentence encoder (all-MiniLM-L6-v2's real weights, when the package that ships them is installed):
  the cosine of each int8 embedding to its float32 one, over ``--batch-size`` Multi30k sentences.
* **Size**: ``model.safetensors`` of the GPT saved in float32 and in int8 (bytes and ratio).
* **Speed** (alternating rounds, medians; ``benchmarks.common.compare``): greedy decoding at batch 1, new tokens/s,
  float32 (tformer's fast paths) vs int8, for the trained GPT and for a GPT of ``benchmarks.decode``'s size (6 × 384,
  vocab 8000, random weights: speed does not depend on what the weights learned); and one batched forward of a
  MiniLM-shaped BERT encoder (6 × 384, FFN 1536, vocab 30522; ``--batch-size`` × 128 tokens), sentences/s. Each
  int8 candidate runs the kernel ``tformer.fast.quantize.kernel_for`` picks on this machine class; ``--kernels all``
  adds each kernel forced (``dynamic`` with fbgemm, oneDNN, 7-bit x; ``bf16``) for comparison.
* **ONNX Runtime**: the MiniLM-shaped encoder exported to ONNX (``torch.onnx.export``), in float32 and in ONNX
  Runtime's dynamic int8 (``onnxruntime.quantization.quantize_dynamic``), on the same batch, when ``onnxruntime``
  and ``onnx`` are installed (they are not tformer's dependencies; ``--no-onnx`` leaves them out); otherwise the
  report says it was not measured. The largest gap of each one's hidden states to float32's is in the report,
  beside tformer int8's.

Writes ``OUT/quantize.json`` and ``OUT/quantize.md``; the machine (CPU model and class) is in both.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from benchmarks.common import SHARED_DATA, Candidate, base_parser, compare, machine_info, session, write_report

SIZES = {
    "full": dict(steps=300, preset="shakespeare-char-6min", prompt=32, new_tokens=128, batch=32, seq=128),
    "quick": dict(steps=3, preset="shakespeare-char", prompt=8, new_tokens=8, batch=2, seq=16),
}
BIG_GPT = dict(d_model=384, n_heads=6, n_layers=6, d_ff=1536, vocab_size=8000, max_len=512)  # benchmarks.decode's
QUICK_GPT = dict(d_model=32, n_heads=4, n_layers=1, d_ff=64, vocab_size=100, max_len=64)
MINILM = dict(d_model=384, n_heads=12, n_layers=6, d_ff=1536, vocab_size=30522, max_len=512)
QUICK_BERT = dict(d_model=32, n_heads=4, n_layers=1, d_ff=64, vocab_size=100, max_len=64)


@contextlib.contextmanager
def kernels(choice):
    """Every int8 product on this machine class runs ``choice`` (a ``tformer.fast.int8.Kernel``; None: the table's
    own choice) inside this block."""
    from tformer.fast import int8
    from tformer.machine import describe

    cls = describe().machine_class
    saved = int8.KERNELS.get(cls)
    if choice is not None:
        int8.KERNELS[cls] = (choice, choice)
    try:
        yield
    finally:
        if saved is None:
            int8.KERNELS.pop(cls, None)
        else:
            int8.KERNELS[cls] = saved


def kernel_variants(which: str) -> dict:
    """name -> kernel: None (the machine's own), and with ``all`` each kernel forced."""
    from tformer.fast.int8 import Kernel

    variants: dict = {"int8": None}
    if which == "all":
        variants |= {
            "int8 dynamic (fbgemm)": Kernel("dynamic", "fbgemm"),
            "int8 dynamic (onednn)": Kernel("dynamic", "onednn"),
            "int8 dynamic (fbgemm, 7-bit x)": Kernel("dynamic", "fbgemm", True),
            "int8 bf16 (x in bfloat16)": Kernel("bf16"),
        }
    return variants


# ---------------------------------------------------------------------------------------------------- quality


def trained_gpt(args, sizes: dict, work: Path):
    """(model, tokenizer, validation ids) of the GPT of ``--run``, or of one trained here for ``steps`` steps."""
    from tformer import lm
    from tformer.lm import encode_documents, read_documents, split_ids

    run = Path(args.run) if args.run else work / "lm"
    if not args.run:
        extra = dict(max_len=32, batch_size=4, eval_blocks=4) if args.quick else {}
        lm.train(args.data, run, sizes["preset"], max_steps=sizes["steps"], progress=False, overwrite=True, **extra)
    model, tok = lm.load(run)
    _, val = split_ids(encode_documents(tok, read_documents(args.data)), 0.1)
    return model, tok, val


def perplexity(model, tok, val, max_blocks: int | None) -> float:
    from tformer.lm import evaluate_stream

    r = evaluate_stream(model, val, torch.tensor(tok.unit_lengths()), model.config.max_len, 32, max_blocks)
    return r["val_ppl"]


def logits_gap(f32, q8, val, blocks: int) -> dict:
    """Largest |int8 − float32| logit over ``blocks`` validation blocks, absolute and relative to the largest |logit|."""
    T = f32.config.max_len
    n = min(blocks, (len(val) - 1) // T)
    x = val[: n * T].view(n, T)  # (n, T)
    with torch.inference_mode():
        a, b = f32(x), q8(x)  # (n, T, V)
    gap = (a - b).abs().max().item()
    return {"max_abs": gap, "relative": gap / a.abs().max().item(), "mean_abs": (a - b).abs().mean().item()}


def greedy_agreement(f32, q8, prompt: list[int], n: int) -> dict:
    """How many of ``n`` greedy tokens int8 gives as float32 does: all positions, and before the first difference."""
    from tformer.generation import generate_lm

    a, b = generate_lm(f32, [prompt], n)[0], generate_lm(q8, [prompt], n)[0]
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
    return {"equal": sum(x == y for x, y in zip(a, b)), "of": len(a), "equal_prefix": first}


def file_sizes(f32, q8, work: Path) -> dict:
    f32.save_pretrained(work / "fp32")
    q8.save_pretrained(work / "int8")
    a, b = (work / "fp32" / "model.safetensors").stat().st_size, (work / "int8" / "model.safetensors").stat().st_size
    return {"float32_bytes": a, "int8_bytes": b, "ratio": b / a}


def minilm_cosine(batch: int) -> dict:
    """Cosine of int8 to float32 MiniLM sentence embeddings (real weights), over ``batch`` Multi30k sentences."""
    from tformer import quantize
    from tformer.bert.embeddings import SentenceEncoder, mean_pool, minilm_path

    try:
        path = minilm_path()
    except FileNotFoundError as err:
        return {"skipped": str(err)}
    encoder = SentenceEncoder.from_sentence_transformers(str(path))
    lines = (SHARED_DATA / "multi30k" / "val.en").read_text(encoding="utf-8").splitlines()[:batch]
    ids, mask = encoder.tokenize(lines)  # (B, T) each
    f32 = encoder.model.eval()
    q8 = quantize(copy.deepcopy(f32), "int8")
    with torch.inference_mode():
        a, b = mean_pool(f32(ids, attention_mask=mask), mask), mean_pool(q8(ids, attention_mask=mask), mask)  # (B, D)
    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1)  # (B,)
    return {"sentences": len(lines), "min": cos.min().item(), "mean": cos.mean().item()}


# ---------------------------------------------------------------------------------------------------- speed


def decode_candidates(f32, variants: dict, prompt: list[int], n: int) -> list[Candidate]:
    from tformer import quantize
    from tformer.generation import generate_lm

    q8 = quantize(copy.deepcopy(f32), "int8", keep_float=False)

    def run(model, choice):
        def go() -> float:
            with kernels(choice):
                return len(generate_lm(model, [prompt], n)[0])

        return go

    return [Candidate("float32", run(f32, None))] + [Candidate(k, run(q8, c)) for k, c in variants.items()]


def encoder_candidates(config: dict, variants: dict, batch: int, seq: int) -> tuple[list[Candidate], object]:
    from tformer import quantize
    from tformer.fast import fast_view
    from tformer.models.bert import Bert, BertConfig

    torch.manual_seed(0)
    f32 = Bert(BertConfig(**config)).eval()
    q8 = quantize(copy.deepcopy(f32), "int8", keep_float=False)
    ids = torch.randint(5, config["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids, dtype=torch.bool)

    def run(model, choice):
        view = fast_view(model)

        def go() -> float:
            with kernels(choice), torch.inference_mode():
                view(ids, attention_mask=mask)
            return batch

        return go

    candidates = [Candidate("float32", run(f32, None))] + [Candidate(k, run(q8, c)) for k, c in variants.items()]
    return candidates, (f32, ids, mask)


def onnx_candidates(f32, ids, mask, work: Path) -> tuple[list[Candidate], dict]:
    """ONNX Runtime float32 and dynamic int8 of the same encoder and batch, if onnxruntime and onnx are installed."""
    try:
        import onnxruntime as ort
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as err:
        return [], {"skipped": f"onnxruntime is not installed ({err})"}

    class Encoder(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask):
            return self.bert(ids, attention_mask=mask)

    path, qpath = work / "encoder.onnx", work / "encoder.int8.onnx"
    try:
        torch.onnx.export(Encoder(f32).eval(), (ids, mask), str(path), input_names=["ids", "mask"], dynamo=False)
        quantize_dynamic(str(path), str(qpath), weight_type=QuantType.QInt8)
    except Exception as err:  # an exporter that cannot trace the model: say so, measure the rest
        return [], {"skipped": f"export failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}"}
    finally:
        f32.eval()  # the exporter restores the mode of the module it was given, and with it of the model's
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    feeds = {"ids": ids.numpy(), "mask": mask.numpy()}
    candidates, info = [], {"onnxruntime": ort.__version__}
    with torch.inference_mode():
        expected = f32(ids, attention_mask=mask)  # (B, T, D)
    for name, p in (("ONNX Runtime float32", path), ("ONNX Runtime int8 (dynamic)", qpath)):
        session_ = ort.InferenceSession(str(p), options, providers=["CPUExecutionProvider"])
        candidates.append(Candidate(name, lambda s=session_: (s.run(None, feeds), ids.shape[0])[1]))
        got = torch.from_numpy(session_.run(None, feeds)[0])
        info[f"{name}: max |hidden - float32| / max |hidden|"] = _relative_gap(expected, got)
    return candidates, info


def _relative_gap(expected: torch.Tensor, got: torch.Tensor) -> float:
    return ((got - expected).abs().max() / expected.abs().max()).item()


# ---------------------------------------------------------------------------------------------------- main


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench")
    p.add_argument("--run", default=None, help="a GPT run or model directory (default: train one here)")
    p.add_argument(
        "--data", default=str(SHARED_DATA / "tinyshakespeare.txt"), help="the GPT's text (validation: last 10%%)"
    )
    p.add_argument("--steps", type=int, default=None, help="training steps of the GPT trained here (default 300)")
    p.add_argument("--kernels", choices=("auto", "all"), default="auto", help="all: also time each int8 kernel forced")
    p.add_argument("--no-onnx", action="store_true", help="leave ONNX Runtime out even when it is installed")
    p.set_defaults(repeats=5, warmup=1)
    args = p.parse_args(argv)
    sizes = dict(SIZES["quick" if args.quick else "full"])
    if args.steps is not None:
        sizes["steps"] = args.steps
    from tformer import quantize
    from tformer.fast.int8 import kernel_for
    from tformer.fast.int8 import reference as int8_reference
    from tformer.machine import describe
    from tformer.models.gpt import GPT, GPTConfig

    variants = kernel_variants(args.kernels)
    results: dict[str, dict] = {}
    quality: dict = {}
    with session(args), tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        f32, tok, val = trained_gpt(args, sizes, work)
        q8 = quantize(copy.deepcopy(f32), "int8", keep_float=False)
        max_blocks = 8 if args.quick else None
        quality["perplexity"] = {"float32": perplexity(f32, tok, val, max_blocks)}
        for name, choice in variants.items():
            with kernels(choice):
                quality["perplexity"][name] = perplexity(q8, tok, val, max_blocks)
        with int8_reference():
            quality["perplexity"]["int8 reference (dequantized weights)"] = perplexity(q8, tok, val, max_blocks)
        base = quality["perplexity"]["float32"]
        quality["perplexity_change"] = {k: v / base - 1 for k, v in quality["perplexity"].items()}
        quality["logits"] = logits_gap(f32, q8, val, 4 if args.quick else 32)
        prompt = val[: sizes["prompt"]].tolist()
        quality["greedy"] = greedy_agreement(f32, q8, prompt, sizes["new_tokens"])
        quality["file_size"] = file_sizes(f32, q8, work)
        quality["minilm_cosine"] = minilm_cosine(sizes["batch"])

        results["char GPT decode b1"] = compare(
            decode_candidates(f32, variants, prompt, sizes["new_tokens"]),
            args.repeats,
            args.warmup,
            memory=not args.no_memory,
        )
        torch.manual_seed(0)
        big = GPT(GPTConfig(**(QUICK_GPT if args.quick else BIG_GPT))).eval()
        big_prompt = torch.randint(1, big.config.vocab_size, (16,), generator=torch.Generator().manual_seed(1)).tolist()
        results["GPT 6x384 decode b1"] = compare(
            decode_candidates(big, variants, big_prompt, sizes["new_tokens"]),
            args.repeats,
            args.warmup,
            memory=not args.no_memory,
        )
        encoder, (bert, ids, mask) = encoder_candidates(
            QUICK_BERT if args.quick else MINILM, variants, sizes["batch"], sizes["seq"]
        )
        ort_candidates, ort_info = [], {"skipped": "--no-onnx"}
        if not args.no_onnx:
            ort_candidates, ort_info = onnx_candidates(bert, ids, mask, work)
        q_bert = quantize(copy.deepcopy(bert), "int8")
        with torch.inference_mode():  # the same measure for tformer's int8 encoder, on the same batch
            quality["encoder_hidden_gap_int8"] = _relative_gap(
                bert(ids, attention_mask=mask), q_bert(ids, attention_mask=mask)
            )
        results[f"MiniLM-shaped encoder b{sizes['batch']}x{sizes['seq']}"] = compare(
            encoder + ort_candidates, args.repeats, args.warmup, memory=not args.no_memory
        )
        machine = machine_info(args, None)
    m = describe()
    payload = {
        "benchmark": "quantize",
        "description": (
            "tformer.quantize(model, 'int8') vs float32: decoding new tokens/s (batch 1) and encoder sentences/s; "
            "quality and file size in 'quality'"
        ),
        "machine": machine,
        "config": {**sizes, "big_gpt": BIG_GPT, "encoder": MINILM, "kernels": args.kernels},
        "kernels_picked": {
            "decoding (1 row)": list(kernel_for(m.machine_class, 1, m.features)),
            "batched": list(kernel_for(m.machine_class, sizes["batch"] * sizes["seq"], m.features)),
        },
        "quality": quality,
        "onnxruntime": ort_info,
        "results": results,
    }
    report = write_report(args.out, "quantize", payload, "tokens or sentences/s")
    _print_quality(quality)
    return report


def _print_quality(quality: dict) -> None:
    print("\nquality:")
    for name, ppl in quality["perplexity"].items():
        print(f"  perplexity {name:40s} {ppl:.4f} ({100 * quality['perplexity_change'][name]:+.2f}%)")
    lg, g, fs = quality["logits"], quality["greedy"], quality["file_size"]
    print(f"  logits: max |int8 - float32| {lg['max_abs']:.4f} ({100 * lg['relative']:.2f}% of the largest logit)")
    print(f"  greedy: {g['equal']}/{g['of']} tokens equal, the first {g['equal_prefix']} in a row")
    print(f"  file: float32 {fs['float32_bytes']:,} bytes, int8 {fs['int8_bytes']:,} ({fs['ratio']:.3f}x)")
    cos = quality["minilm_cosine"]
    if "skipped" not in cos:
        print(f"  MiniLM embeddings: cosine to float32 min {cos['min']:.5f}, mean {cos['mean']:.5f}")
    if math.isnan(lg["max_abs"]):
        raise RuntimeError("the int8 logits are NaN")


if __name__ == "__main__":
    main()
