"""``OUT/log.jsonl``: a training run's records, one strict-JSON object a line (a non-finite number is written as
null), appended as they come. The first record of each session (the run's start, each ``--resume``) also holds
``"machine"`` (:func:`tformer.machine.describe`: CPU model, class, features; and the device) and ``"precision"``, so
that every speed in the log names the machine that ran it, a resumed run's new machine included."""

from __future__ import annotations

from pathlib import Path

from tformer.files import WriteError, machine_reason
from tformer.machine import describe
from tformer.training.state import dumps

__all__ = ["RunLog"]


class RunLog:
    """Appends records to ``out/log.jsonl`` (rank 0 only: ``main``); a full disk is one line naming the file."""

    def __init__(self, out: Path, main: bool, device: object, precision: str) -> None:
        self.path, self.main, self.device, self.precision = out / "log.jsonl", main, device, precision
        self._machine_logged = False

    def append(self, record: dict) -> None:
        if not self.main:
            return
        line = record
        if not self._machine_logged:
            machine = {**describe().to_dict(), "device": str(self.device)}
            line = {**record, "machine": machine, "precision": self.precision}
            self._machine_logged = True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(dumps(line) + "\n")
        except OSError as err:  # a full disk says so here first: the log grows between two saves
            message = (
                f"could not append to {self.path}: {machine_reason(err)}; what was saved before in "
                f"{self.path.parent} (best/, last/) is left as it was"
            )
            raise WriteError(err.errno, err.strerror, self.path, message) from err
