"""bf16 and int8 inference (issue 33): quality per precision against float32, and int8's speed, in one process.

    python -m benchmarks.quantize                         # trains a char GPT (300 steps), a BERT (700): minutes
    python -m benchmarks.quantize --no-speed              # the quality measures only (they need no quiet machine)
    python -m benchmarks.quantize --run runs/lm           # a GPT run or model directory instead (its text: --data)
    python -m benchmarks.quantize --quick                 # tiny sizes, one round: proves the script works (seconds)

bf16 and int8 are reached as ``--precision bf16`` / ``--precision int8`` reach them (``tformer.fast.precision``'s
``choose`` and ``apply``: the weights in bfloat16; int8 linear layers), each on a copy of the float32 model.

* **Quality**, on a character GPT trained in-process on Tiny Shakespeare (``tformer.lm.train``, preset
  ``shakespeare-char-6min``, ``--steps`` steps) or the one ``--run`` names: validation perplexity over the last
  10% of the text (``tformer.lm.evaluate_stream``, as training reports it) in float32, bf16, int8 with the
  machine's kernels, and int8 with the reference product (the dequantized weights in float32: what the weights'
  rounding alone costs); bf16's and int8's largest difference of the logits to float32's over the first validation
  blocks, absolute and relative to the largest float32 logit; how many of ``--new-tokens`` greedy tokens from a
  validation prompt equal float32's. The MiniLM sentence encoder (all-MiniLM-L6-v2's real weights, when the
  package that ships them is installed): the cosine of each bf16 and int8 embedding (``SentenceEncoder.encode``,
  what ``tformer embed`` prints from) to its float32 one, over ``--batch-size`` Multi30k sentences. Fill-mask top-1
  agreement of a BERT trained here and the SmolLM2-135M-shaped Llama's perplexity on its own sampled text, with
  the KL divergence of its next-token distributions: :mod:`benchmarks.quantize_quality` says how.
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

Writes ``OUT/quantize.json`` and ``OUT/quantize.md`` (the speed table, then the quality table: a column per
precision); the machine (CPU model and class) is in both. ``--no-speed`` leaves out every timing (and the ONNX part).
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

from benchmarks.common import (
    SHARED_DATA,
    Candidate,
    base_parser,
    compare,
    machine_info,
    markdown_table,
    session,
    write_report,
    write_text,
)
from benchmarks.quantize_quality import PRECISIONS, at_precision, fill_mask_and_own_text, markdown

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


def logits_gap(f32, other, val, blocks: int) -> dict:
    """Largest |other − float32| logit over ``blocks`` validation blocks, absolute and relative to the largest
    |logit|, and the mean gap."""
    T = f32.config.max_len
    n = min(blocks, (len(val) - 1) // T)
    x = val[: n * T].view(n, T)  # (n, T)
    with torch.inference_mode():
        a, b = f32(x), other(x).float()  # (n, T, V)
    gap = (a - b).abs().max().item()
    return {"max_abs": gap, "relative": gap / a.abs().max().item(), "mean_abs": (a - b).abs().mean().item()}


def greedy_agreement(f32, other, prompt: list[int], n: int) -> dict:
    """How many of ``n`` greedy tokens ``other`` gives as float32 does: all positions, and before the first one
    that differs."""
    from tformer.generation import generate_lm

    a, b = generate_lm(f32, [prompt], n)[0], generate_lm(other, [prompt], n)[0]
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
    return {"equal": sum(x == y for x, y in zip(a, b)), "of": len(a), "equal_prefix": first}


def file_sizes(f32, q8, work: Path) -> dict:
    f32.save_pretrained(work / "fp32")
    q8.save_pretrained(work / "int8")
    a, b = (work / "fp32" / "model.safetensors").stat().st_size, (work / "int8" / "model.safetensors").stat().st_size
    return {"float32_bytes": a, "int8_bytes": b, "ratio": b / a}


def minilm_cosine(batch: int) -> dict:
    """Cosine of bf16's and int8's MiniLM sentence embeddings (real weights) to float32's, over ``batch`` Multi30k
    sentences, each precision's embeddings made as ``tformer embed`` makes them (``SentenceEncoder.encode``)."""
    from tformer.bert.embeddings import SentenceEncoder, minilm_path

    try:
        path = minilm_path()
    except FileNotFoundError as err:
        return {"skipped": str(err)}
    encoder = SentenceEncoder.from_sentence_transformers(str(path))
    lines = (SHARED_DATA / "multi30k" / "val.en").read_text(encoding="utf-8").splitlines()[:batch]
    f32 = encoder.model
    a = encoder.encode(lines, batch_size=batch)  # (B, D), unit length
    out: dict = {"sentences": len(lines)}
    for name in PRECISIONS[1:]:
        other = SentenceEncoder(at_precision(f32, name, "batched"), encoder.tokenizer, encoder.max_length)
        b = other.encode(lines, batch_size=batch).float()  # (B, D)
        cos = torch.nn.functional.cosine_similarity(a, b, dim=-1)  # (B,): bf16's unit length is only near 1
        out[name] = {"min": cos.min().item(), "mean": cos.mean().item()}
    return out


# ---------------------------------------------------------------------------------------------------- speed


def decode_candidates(f32, variants: dict, prompt: list[int], n: int) -> list[Candidate]:
    from tformer import quantize
    from tformer.fast import speed_up
    from tformer.generation import generate_lm

    q8 = speed_up(quantize(copy.deepcopy(f32), "int8", keep_float=False), inference=True)
    f32 = speed_up(copy.deepcopy(f32), inference=True)  # the fast kernels, as tformer.load chooses them

    def run(model, choice):
        def go() -> float:
            with kernels(choice):
                return len(generate_lm(model, [prompt], n)[0])

        return go

    return [Candidate("float32", run(f32, None))] + [Candidate(k, run(q8, c)) for k, c in variants.items()]


def encoder_candidates(config: dict, variants: dict, batch: int, seq: int) -> tuple[list[Candidate], object]:
    from tformer import quantize
    from tformer.fast import speed_up
    from tformer.models.bert import Bert, BertConfig

    torch.manual_seed(0)
    f32 = Bert(BertConfig(**config)).eval()
    q8 = quantize(copy.deepcopy(f32), "int8", keep_float=False)
    ids = torch.randint(5, config["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids, dtype=torch.bool)

    def run(model, choice):
        def go() -> float:
            with kernels(choice), torch.inference_mode():
                model(ids, attention_mask=mask)
            return batch

        return go

    fast_f32 = speed_up(copy.deepcopy(f32), inference=True)  # the fast kernels, as tformer.load chooses them
    speed_up(q8, inference=True)
    candidates = [Candidate("float32", run(fast_f32, None))] + [Candidate(k, run(q8, c)) for k, c in variants.items()]
    return candidates, (f32, ids, mask)


def onnx_candidates(f32, ids, mask, work: Path, batches: list | None = None) -> tuple[list[Candidate], dict]:
    """ONNX Runtime float32 and dynamic int8 of the same encoder and batch, if onnxruntime and onnx are installed.
    ``batches`` ((ids, mask) pairs of any shapes): each candidate runs all of them (the graph is exported with a
    dynamic batch and length) and returns their sentence count; by default the one batch ``ids``, ``mask``."""
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
        axes = {name: {0: "batch", 1: "length"} for name in ("ids", "mask")}
        torch.onnx.export(
            Encoder(f32).eval(), (ids, mask), str(path), input_names=["ids", "mask"], dynamic_axes=axes, dynamo=False
        )
        quantize_dynamic(str(path), str(qpath), weight_type=QuantType.QInt8)
    except Exception as err:  # an exporter that cannot trace the model: say so, measure the rest
        return [], {"skipped": f"export failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}"}
    finally:
        f32.eval()  # the exporter restores the mode of the module it was given, and with it of the model's
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    feeds = {"ids": ids.numpy(), "mask": mask.numpy()}
    every = [{"ids": i.numpy(), "mask": m.numpy()} for i, m in (batches or [(ids, mask)])]
    sentences = sum(f["ids"].shape[0] for f in every)
    candidates, info = [], {"onnxruntime": ort.__version__}
    with torch.inference_mode():
        expected = f32(ids, attention_mask=mask)  # (B, T, D)
    for name, p in (("ONNX Runtime float32", path), ("ONNX Runtime int8 (dynamic)", qpath)):
        session_ = ort.InferenceSession(str(p), options, providers=["CPUExecutionProvider"])
        candidates.append(Candidate(name, lambda s=session_: ([s.run(None, f) for f in every], sentences)[1]))
        got = torch.from_numpy(session_.run(None, feeds)[0])
        info[f"{name}: max |hidden - float32| / max |hidden|"] = _relative_gap(expected, got)
        info[f"{name}: min cosine of mean-pooled embeddings to float32's"] = _pooled_cosine(expected, got, mask)
    return candidates, info


def _pooled_cosine(expected: torch.Tensor, got: torch.Tensor, mask: torch.Tensor) -> float:
    """The smallest cosine between the mean-pooled sentence embeddings of two (B, T, D) hidden states."""
    from tformer.bert.embeddings import mean_pool

    mask = mask.bool()
    return float(torch.nn.functional.cosine_similarity(mean_pool(expected, mask), mean_pool(got, mask), dim=-1).min())


def _relative_gap(expected: torch.Tensor, got: torch.Tensor) -> float:
    return ((got - expected).abs().max() / expected.abs().max()).item()


# ---------------------------------------------------------------------------------------------------- main


def char_gpt_quality(args, sizes: dict, variants: dict, work: Path) -> tuple[dict, object, list[int]]:
    """The char GPT's quality in float32, bf16 and int8 (each int8 kernel of ``variants``, and the reference
    product), and the file sizes; returns (quality, the float32 model, the validation prompt)."""
    from tformer.fast import speed_up, use_reference

    f32, tok, val = trained_gpt(args, sizes, work)
    bf16, q8 = at_precision(f32, "bf16", "measuring"), at_precision(f32, "int8", "measuring")
    max_blocks = 8 if args.quick else None
    ppl = {"float32": perplexity(f32, tok, val, max_blocks), "bf16": perplexity(bf16, tok, val, max_blocks)}
    for name, choice in variants.items():
        with kernels(choice):
            ppl[name] = perplexity(q8, tok, val, max_blocks)
    use_reference(q8)  # the exact product of the dequantized weights
    ppl["int8 reference (dequantized weights)"] = perplexity(q8, tok, val, max_blocks)
    speed_up(q8)
    prompt = val[: sizes["prompt"]].tolist()
    quality = {
        "perplexity": ppl,
        "perplexity_change": {k: v / ppl["float32"] - 1 for k, v in ppl.items()},
        "logits": {"bf16": logits_gap(f32, bf16, val, 4 if args.quick else 32)},
        "greedy": {"bf16": greedy_agreement(f32, bf16, prompt, sizes["new_tokens"])},
    }
    quality["logits"]["int8"] = logits_gap(f32, q8, val, 4 if args.quick else 32)
    quality["greedy"]["int8"] = greedy_agreement(f32, q8, prompt, sizes["new_tokens"])
    quality["file_size"] = file_sizes(f32, q8, work)
    return quality, f32, prompt


def speed(args, sizes: dict, variants: dict, gpt, prompt: list[int], work: Path) -> tuple[dict, dict, float]:
    """Decoding and encoder throughput, float32 against int8 (and ONNX Runtime): (results, ONNX Runtime's info,
    tformer int8's largest hidden-state gap on the MiniLM-shaped encoder, relative)."""
    from tformer.models.gpt import GPT, GPTConfig

    results = {}
    memory = not args.no_memory
    results["char GPT decode b1"] = compare(
        decode_candidates(gpt, variants, prompt, sizes["new_tokens"]), args.repeats, args.warmup, memory=memory
    )
    torch.manual_seed(0)
    big = GPT(GPTConfig(**(QUICK_GPT if args.quick else BIG_GPT))).eval()
    big_prompt = torch.randint(1, big.config.vocab_size, (16,), generator=torch.Generator().manual_seed(1)).tolist()
    results["GPT 6x384 decode b1"] = compare(
        decode_candidates(big, variants, big_prompt, sizes["new_tokens"]), args.repeats, args.warmup, memory=memory
    )
    encoder, (bert, ids, mask) = encoder_candidates(
        QUICK_BERT if args.quick else MINILM, variants, sizes["batch"], sizes["seq"]
    )
    ort_candidates, ort_info = [], {"skipped": "--no-onnx"}
    if not args.no_onnx:
        ort_candidates, ort_info = onnx_candidates(bert, ids, mask, work)
    q_bert = at_precision(bert, "int8", "batched")
    with torch.inference_mode():  # the measure ONNX Runtime's candidates get, for tformer's int8, on the same batch
        gap = _relative_gap(bert(ids, attention_mask=mask), q_bert(ids, attention_mask=mask))
    results[f"MiniLM-shaped encoder b{sizes['batch']}x{sizes['seq']}"] = compare(
        encoder + ort_candidates, args.repeats, args.warmup, memory=memory
    )
    return results, ort_info, gap


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench", "quantize.json", "quantize.md")
    p.add_argument("--run", default=None, help="a GPT run or model directory (default: train one here)")
    p.add_argument(
        "--data", default=str(SHARED_DATA / "tinyshakespeare.txt"), help="the GPT's text (validation: last 10%%)"
    )
    p.add_argument("--steps", type=int, default=None, help="training steps of the GPT trained here (default 300)")
    p.add_argument("--kernels", choices=("auto", "all"), default="auto", help="all: also time each int8 kernel forced")
    p.add_argument("--no-onnx", action="store_true", help="leave ONNX Runtime out even when it is installed")
    p.add_argument("--no-speed", action="store_true", help="quality only: no timing (nor ONNX Runtime)")
    p.set_defaults(repeats=5, warmup=1)
    args = p.parse_args(argv)
    sizes = dict(SIZES["quick" if args.quick else "full"])
    if args.steps is not None:
        sizes["steps"] = args.steps
    from tformer.fast.int8 import kernel_for
    from tformer.machine import describe

    variants = kernel_variants(args.kernels)
    results: dict[str, dict] = {}
    ort_info: dict = {"skipped": "--no-speed" if args.no_speed else "--no-onnx"}
    with session(args), tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        quality, gpt, prompt = char_gpt_quality(args, sizes, variants, work)
        quality["minilm_cosine"] = minilm_cosine(sizes["batch"])
        quality |= fill_mask_and_own_text(args.quick)
        if not args.no_speed:
            results, ort_info, quality["encoder_hidden_gap_int8"] = speed(args, sizes, variants, gpt, prompt, work)
        machine = machine_info(args, None)
    m = describe()
    payload = {
        "benchmark": "quantize",
        "description": (
            "bf16 and int8 against float32: quality per precision in 'quality' (and the table below); "
            "int8's decoding new tokens/s (batch 1) and encoder sentences/s"
        ),
        "machine": machine,
        "config": {**sizes, "big_gpt": BIG_GPT, "encoder": MINILM, "kernels": args.kernels, "speed": not args.no_speed},
        "kernels_picked": {
            "decoding (1 row)": list(kernel_for(m.machine_class, 1, m.features)),
            "batched": list(kernel_for(m.machine_class, sizes["batch"] * sizes["seq"], m.features)),
        },
        "quality": quality,
        "onnxruntime": ort_info,
        "results": results,
    }
    report = write_report(args.out, "quantize", payload, "tokens or sentences/s")
    md = Path(args.out) / "quantize.md"
    speed_table = markdown_table(results, "tokens or sentences/s")
    text = md.read_text(encoding="utf-8").replace(speed_table, speed_table if results else "Speed: not measured.")
    write_text(args.out, "quantize.md", text + "\n" + markdown(quality))
    print("\n" + markdown(quality))
    if any(math.isnan(quality["logits"][p]["max_abs"]) for p in PRECISIONS[1:]):
        raise RuntimeError(f"NaN logits: {quality['logits']}")
    return report


if __name__ == "__main__":
    main()
