"""What processor this is, in the terms that decide which kernels run fast: :func:`describe`.

The machines tformer runs on differ in what their CPUs can do, and a speed figure means little without the class
of machine that produced it. Three classes matter today (issue 33):

* **avx2** — AVX2 and FMA, no AVX-512 (e.g. AMD Zen 3, older Intel): bfloat16 products run far slower than float32;
* **avx512_bf16** — AVX-512 with the AVX512_BF16 dot products (AMD Zen 4 and Zen 5, Intel Cooper Lake): bfloat16
  products roughly twice as fast as float32;
* **amx** — Intel's AMX tiles for bfloat16 and int8 (Sapphire Rapids and later): bfloat16 several times faster.

A machine with AVX-512 but no bf16 instructions is ``avx512``; anything else is ``basic``. :func:`describe` reads the
CPU's model name and feature flags from the operating system (``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS) and
adds PyTorch's own view (``torch.backends.cpu.get_cpu_capability()``: the widest vector ISA its kernels dispatch
to). ``tformer info --system`` prints it; every training run records it in its log, and every benchmark in its JSON.
This module knows nothing about models: it only reads the machine.
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Machine", "describe", "machine_class", "FEATURES"]

# The feature flags that decide kernel choices, by the name Linux's /proc/cpuinfo gives them.
FEATURES = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8", "amx_tile")


@dataclass(frozen=True)
class Machine:
    """One machine's processor: model name, logical CPUs PyTorch may use, the features of :data:`FEATURES` it has,
    PyTorch's dispatch capability, and the class :func:`machine_class` derives from the features."""

    cpu: str
    cores: int
    threads: int  # torch.get_num_threads(): what PyTorch's kernels use
    features: tuple[str, ...]
    torch_capability: str
    machine_class: str

    def to_dict(self) -> dict:
        return {**asdict(self), "features": list(self.features)}

    def summary(self) -> str:
        """One line for logs and benchmark headers: ``AMD EPYC 9R45 · 2 cores · avx512_bf16 (torch: AVX512)``."""
        return f"{self.cpu} · {self.cores} cores · {self.machine_class} (torch: {self.torch_capability})"


def machine_class(features: tuple[str, ...] | set[str] | list[str]) -> str:
    """``amx``, ``avx512_bf16``, ``avx512``, ``avx2`` or ``basic``: the class of a CPU with these feature flags."""
    have = set(features)
    if {"amx_bf16", "amx_tile"} <= have:
        return "amx"
    if {"avx512f", "avx512_bf16"} <= have:
        return "avx512_bf16"
    if "avx512f" in have:
        return "avx512"
    if {"avx2", "fma"} <= have:
        return "avx2"
    return "basic"


def _cpuinfo(text: str) -> tuple[str, set[str]]:
    """The model name and the flags of the first processor in a ``/proc/cpuinfo`` text."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first processor's
    name = fields.get("model name", "")
    if "cpu family" in fields and "model" in fields:  # a VM may show only "AMD EPYC": the family tells Zen 3 from 5
        name = f"{name} (family {fields['cpu family']}, model {fields['model']})".strip()
    return name, set(fields.get("flags", fields.get("Features", "")).split())


def _read_cpu() -> tuple[str, set[str]]:
    """The CPU's model name and feature flags, from the operating system; empty where it says nothing."""
    info = Path("/proc/cpuinfo")
    if info.is_file():
        try:
            return _cpuinfo(info.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            pass
    if platform.system() == "Darwin":  # no /proc: sysctl names the model and (on Intel Macs) the features
        try:
            name = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5
            ).stdout.strip()
            feats = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.features", "machdep.cpu.leaf7_features"],
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout
            return name, {f.lower().replace(".", "_") for f in feats.split()}
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor(), set()


def describe() -> Machine:
    """This machine (read afresh each call; cheap)."""
    import torch

    name, flags = _read_cpu()
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):  # an old or unusual build
        capability = "unknown"
    features = tuple(f for f in FEATURES if f in flags)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return Machine(
        cpu=name or platform.machine() or "unknown CPU",
        cores=cores,
        threads=torch.get_num_threads(),
        features=features,
        torch_capability=capability,
        machine_class=machine_class(features),
    )
