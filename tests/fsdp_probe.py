"""``tformer`` as torchrun runs it, recording what each process's model was when ``--fsdp`` handed out rank 0's weights
(``tformer.training.sharded.materialize``; tests/test_fsdp.py): the devices of its parameters before and after, and
whether the process held the whole CPU copy. Each process writes ``fsdp-rank{RANK}.json`` in the working folder."""

import json
import sys
from pathlib import Path

from tformer.cli import main
from tformer.training import sharded


def _recording(materialize):
    def recorded(model, plain, world, device):
        before = sorted({str(p.device) for p in model.parameters()})
        materialize(model, plain, world, device)
        after = sorted({str(p.device) for p in model.parameters()})
        record = {"before": before, "after": after, "whole_copy": plain is not None}
        Path(f"fsdp-rank{world.rank}.json").write_text(json.dumps(record))

    return recorded


sharded.materialize = _recording(sharded.materialize)
sys.exit(main(sys.argv[1:]))
