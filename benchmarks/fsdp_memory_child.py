"""One process of a ``benchmarks.fsdp_memory`` run: ``tformer ARGS`` (as torchrun starts it, or alone), with this
process's memory read around the run and written to ``OUT/memory-rank{RANK}.json``.

    python -m benchmarks.fsdp_memory_child OUT train lm ...

The baseline is the resident set once torch and tformer are imported (``gc`` + ``malloc_trim``). ``Trainer.fit`` is
wrapped to read the high-water mark (VmHWM) when training starts, the peak of building the model, sharding it and making
the optimizer (``setup_peak_mb``), and the resident set then (``setup_resident_mb``); the mark is then reset, and at the
end of ``fit`` (the steps, the evaluation and the files written: rank 0 gathers each tensor whole) it is
``training_peak_mb``, beside the resident set then (``end_resident_mb``: the weights, gradients and AdamW's moments this
process keeps, and what glibc keeps of what it freed). All in MB above the baseline, read as
:mod:`benchmarks.memory_child` reads them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from benchmarks.memory_child import peak_mb, reset_peak, rss_mb, trim
from tformer.cli import main as tformer_main
from tformer.training.trainer import Trainer


def main(argv: list[str]) -> int:
    out, args = Path(argv[0]), argv[1:]
    torch.set_num_threads(1)
    trim()
    baseline = rss_mb()
    can_reset = reset_peak()
    record: dict = {"rank": int(os.environ.get("RANK", "0")), "baseline_mb": baseline, "peak_reset": can_reset}
    fit = Trainer.fit

    def measured_fit(self, *a, **k):
        record["setup_peak_mb"] = peak_mb(can_reset) - baseline
        record["setup_resident_mb"] = rss_mb() - baseline
        reset_peak()
        try:
            return fit(self, *a, **k)
        finally:
            record["training_peak_mb"] = peak_mb(can_reset) - baseline
            record["end_resident_mb"] = rss_mb() - baseline

    Trainer.fit = measured_fit  # type: ignore[method-assign]
    code = tformer_main(args)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"memory-rank{record['rank']}.json").write_text(json.dumps(record))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
