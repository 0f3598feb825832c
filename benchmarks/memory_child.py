"""What ``benchmarks.memory`` measures inside each fresh process, and how it reads the process's memory.

Each measurement runs in a process of its own, forked from a server process that has imported torch, tformer and
transformers (the classes used here too) and done nothing else (``multiprocessing``'s forkserver, so that no
measurement pays those imports again: they are in every baseline; the server also ``gc.freeze()``s what they made, so
that a measurement's ``gc.collect`` walks its own objects only). The process first does the whole measurement once on a tiny twin of the
model (loaded from its own directory, the same work, or the same training step) and lets it go, so that the code
and libraries the work loads on first use (transformers' model modules, the kernels' libraries, tformer's
decoding loop, autograd and the optimizer) are in the baseline; then ``gc`` and glibc's ``malloc_trim(0)``, and
its resident set (VmRSS) is the baseline.

Peaks are the kernel's high-water mark of the resident set (VmHWM), reset to the current resident set before each
phase by writing 5 to ``/proc/self/clear_refs`` (Linux); where that cannot be written, ``ru_maxrss`` (the peak of
the process's whole life) stands in, and the JSON says which (``peak_method``).

* :func:`measure_use`: the load's peak above the baseline (``tformer.load`` / ``from_pretrained``), then the peak
  while the work runs (decoding; BERT's forward) and the resident set after it, then the same for a second call of
  the same work (a second prompt: what a session, a batch of lines or a second sentence holds), all above the
  baseline; then what the process gives back when the model goes (after the second call).
* :func:`measure_train`: the model loaded, its optimizer and the batch made, ``gc`` + ``malloc_trim``: the resident
  set before the step; then the peak during one training step, and what stays after it (the weights, gradients and
  AdamW's two moments), above the baseline. Above the baseline, not above the resident set before the step: a
  model whose weights are mapped from its file and read in on first use (``transformers``' ``from_pretrained``)
  has little resident before the step, and its step would seem to cost its weights' size more.

RssFile (pages of mapped files) is read beside VmRSS after the load and after the work (``loaded_file_mb``,
``resident_file_mb``): it shows which weights are the file's pages rather than the process's own memory.
"""

from __future__ import annotations

import ctypes
import gc
import resource
import time
import warnings

import torch
import transformers

import tformer  # noqa: F401  (the baseline holds its import, as a user's process does)
import tformer.generation  # noqa: F401
from benchmarks import memory_models as models

for _name in {*models.HF_CLASSES.values(), *models.HF_TRAIN_CLASSES.values()}:  # imported once, by the server
    getattr(transformers, _name)
gc.freeze()  # what the imports made is never collected: each gc.collect of a measurement sees its own objects only

transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*deprecated")  # quantize_dynamic's
MB = 2**20


def _status(field: str) -> float:
    """A field of ``/proc/self/status`` (kB there), in MB."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024 / MB
    raise RuntimeError(f"no {field} in /proc/self/status")


def rss_mb() -> float:
    """This process's resident set (VmRSS), MB."""
    return _status("VmRSS")


def reset_peak() -> bool:
    """Reset the kernel's high-water mark of the resident set to the current resident set; False where it cannot
    (then :func:`peak_mb` reads ``ru_maxrss``, the peak of the whole process)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_mb(reset: bool) -> float:
    """The peak resident set since the last :func:`reset_peak` (VmHWM), or of the whole process (``ru_maxrss``)."""
    return _status("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def trim() -> bool:
    """glibc's ``malloc_trim(0)``: freed heap pages back to the system; False where there is no glibc."""
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0) or True)
    except (OSError, AttributeError):
        return False


def _settle() -> float:
    gc.collect()
    trim()
    return rss_mb()


def _imported() -> float:
    torch.set_num_threads(1)
    return _settle()


def measure_use(spec: dict) -> dict:
    """Load, then one unit of work (see the module docstring); ``spec``: lib, name, precision, paths, twin (the tiny
    twin's paths), quick; optionally sizes and twin_sizes (the work's, in place of ``memory_models.sizes``'), and
    second=False: the work once only."""
    lib, name, precision = spec["lib"], spec["name"], spec["precision"]
    imported = _imported()
    twin = models.load(lib, name, precision, spec["twin"])
    models.work(lib, name, twin, spec.get("twin_sizes") or models.sizes(name, True))()
    del twin
    baseline, file_baseline = _settle(), _status("RssFile")
    reset = reset_peak()
    start = time.perf_counter()
    model = models.load(lib, name, precision, spec["paths"])
    load_s = time.perf_counter() - start
    load_peak = peak_mb(reset) - baseline
    loaded, loaded_file = _settle() - baseline, _status("RssFile") - file_baseline
    run = models.work(lib, name, model, spec.get("sizes") or models.sizes(name, spec["quick"]))
    reset_peak()
    start = time.perf_counter()
    run()
    work_s = time.perf_counter() - start
    work_peak = peak_mb(reset) - baseline
    gc.collect()
    after_gc, after_file = rss_mb(), _status("RssFile") - file_baseline
    trimmed = trim()
    after_trim = rss_mb()
    second_peak = second = second_trim = None
    if spec.get("second", True):
        reset_peak()
        run()  # the same work again: what a second prompt, batch or sentence costs
        second_peak = peak_mb(reset) - baseline
        gc.collect()
        second = rss_mb() - baseline
        trim()
        second_trim = rss_mb() - baseline
    weights = models.tensor_bytes(model)
    from tformer.fast.quantize import quantized_embeddings, quantized_modules

    linears = len(quantized_modules(model)) if lib == "tformer" else None
    tables = quantized_embeddings(model) if lib == "tformer" else None
    del model, run  # what the process gives back when the model goes: what the model itself held
    held = (after_trim if second_trim is None else second_trim + baseline) - _settle()
    return {
        "lib": lib,
        "model": name,
        "precision": precision,
        "imported_mb": imported,
        "baseline_mb": baseline,
        "above_import_mb": baseline - imported,
        "load_peak_mb": load_peak,
        "loaded_mb": loaded,
        "loaded_file_mb": loaded_file,
        "work_peak_mb": work_peak,
        "resident_mb": after_gc - baseline,
        "resident_file_mb": after_file,
        "resident_trimmed_mb": after_trim - baseline if trimmed else None,
        "second_peak_mb": second_peak,
        "resident_second_mb": second,
        "resident_second_trimmed_mb": second_trim if trimmed else None,
        "held_by_model_mb": held,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_method": "VmHWM reset per phase" if reset else "ru_maxrss (whole process)",
        "tensor_bytes": weights,
        "int8_linears": linears,
        "int8_tables": tables,
        "load_s": load_s,
        "work_s": work_s,
    }


def measure_train(spec: dict) -> dict:
    """One training step's peak (see the module docstring); ``spec`` as :func:`measure_use`'s, float32 only."""
    lib, name = spec["lib"], spec["name"]
    imported = _imported()
    twin = models.load(lib, name, "fp32", spec["twin"], train=True)
    models.train_step(lib, name, twin, models.sizes(name, True))()
    del twin
    baseline = _settle()
    model = models.load(lib, name, "fp32", spec["paths"], train=True)
    step = models.train_step(lib, name, model, models.sizes(name, spec["quick"]))
    before = _settle()
    reset = reset_peak()
    step()
    peak = peak_mb(reset)
    after = _settle()
    return {
        "lib": lib,
        "model": name,
        "imported_mb": imported,
        "baseline_mb": baseline,
        "before_step_mb": before - baseline,
        "step_peak_mb": peak - baseline,
        "step_peak_above_before_mb": peak - before,
        "after_step_mb": after - baseline,
        "peak_method": "VmHWM reset before the step" if reset else "ru_maxrss (whole process)",
        "tensor_bytes": models.tensor_bytes(model),
        "params": sum(p.numel() for p in model.parameters()),
    }
