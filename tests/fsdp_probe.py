"""``tformer`` as torchrun runs it, recording what each process's model was when ``--fsdp`` handed out rank 0's weights
(``tformer.training.sharded.materialize``; tests/test_fsdp.py): the devices of its parameters before and after, and
whether the process held the whole CPU copy. Each process writes ``fsdp-rank{RANK}.json`` in the working folder, and
``fsdp-exit{RANK}.json`` once the command has left the process group: how many FSDP2 states were still alive (ones the
interpreter's exit would free after the group's end: what aborted rank 0 now and then)."""

import gc
import json
import os
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
code = main(sys.argv[1:])
alive = sum(type(o).__name__ == "FSDPState" for o in gc.get_objects())
Path(f"fsdp-exit{os.environ.get('RANK', '0')}.json").write_text(json.dumps({"fsdp_states_alive": alive}))
sys.exit(code)
