"""``OUT/log.jsonl``: a training run's records, one strict-JSON object a line (a non-finite number is written as
null), appended as they come. The first record of each session (the run's start, each ``--resume``) also holds
``"machine"`` (:func:`tformer.machine.describe`: CPU model, class, features; and the device) and ``"precision"``, so
that every speed in the log names the machine that ran it, a resumed run's new machine included."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from tformer.checks import log_sinks
from tformer.files import WriteError, atomic_write, machine_reason
from tformer.machine import describe
from tformer.training.state import dumps

__all__ = ["RunLog", "CSV_NAME", "TENSORBOARD_DIR", "scalars"]

CSV_NAME, TENSORBOARD_DIR = "log.csv", "tensorboard"  # what --log-to writes into OUT (resume.RUN_FILES)
_FIRST = ("step", "epoch")  # the CSV's first columns
_SECTIONS = ("train_", "val_", "ema_", "test_")  # a field's prefix that becomes a TensorBoard section


def scalars(record: dict) -> dict[str, float | int]:
    """The numbers of ``record`` (not a bool, a null, a string or the machine's description)."""
    return {k: v for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


_VALIDATION = ("bleu", "chrf", "accuracy")  # validation scores logged without val_: in the val section too


def _tag(name: str) -> str:
    if name in _VALIDATION or name.startswith("ema_") and name[4:] in _VALIDATION:
        return f"{'ema' if name.startswith('ema_') else 'val'}/{name.removeprefix('ema_')}"
    for section in _SECTIONS:
        if name.startswith(section) and len(name) > len(section):
            return f"{section[:-1]}/{name[len(section) :]}"
    return name


class _Csv:
    """``OUT/log.csv``: see the module's docstring."""

    def __init__(self, out: Path) -> None:
        self.path, self.jsonl = out / CSV_NAME, out / "log.jsonl"
        self.columns: list[str] | None = None

    def write(self, record: dict) -> None:
        row = scalars(record)
        if self.columns is None or not row.keys() <= set(self.columns):
            self._rewrite()  # log.jsonl holds the record already
            return
        with open(self.path, "a", encoding="utf-8", newline="") as f:
            csv.DictWriter(f, self.columns).writerow(row)

    def _rewrite(self) -> None:
        rows = [scalars(json.loads(line)) for line in self.jsonl.read_text(encoding="utf-8").splitlines() if line]
        seen: dict[str, None] = dict.fromkeys(_FIRST)
        for row in rows:
            seen.update(dict.fromkeys(row))
        self.columns = columns = list(seen)

        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                writer = csv.DictWriter(f, columns)
                writer.writeheader()
                writer.writerows(rows)

        atomic_write(self.path, write)


class _TensorBoard:
    """``OUT/tensorboard/``: see the module's docstring."""

    def __init__(self, out: Path, first_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package (TrainConfig checks)

        new = not (out / TENSORBOARD_DIR).exists()
        self.writer = SummaryWriter(log_dir=str(out / TENSORBOARD_DIR), purge_step=first_step)
        if new:  # --log-to tensorboard added on --resume: the log's earlier records first, as log.csv gets them
            for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines():
                record = json.loads(line) if line else {}
                if isinstance(record.get("step"), int) and record["step"] < first_step:
                    self.write(record)

    def write(self, record: dict) -> None:
        for name, value in scalars(record).items():
            if name != "step":
                self.writer.add_scalar(_tag(name), value, record["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class RunLog:
    """Appends records to ``out/log.jsonl`` (rank 0 only: ``main``); a full disk is one line naming the file."""

    def __init__(
        self, out: Path, main: bool, device: object, precision: str, log_to: str | tuple = (), about: dict | None = None
    ) -> None:
        self.path, self.main, self.device, self.precision = out / "log.jsonl", main, device, precision
        self.about = about or {}  # what the session's first record says of the losses (the label smoothing)
        self.log_to = log_sinks.names(log_to, "log_to")  # TrainConfig's, checked
        self._machine_logged = False
        self._sinks: list[Any] | None = None  # made at the first record (a resumed run's log is cut back by then)

    def append(self, record: dict) -> None:
        if not self.main:
            return
        line = record
        if not self._machine_logged:
            machine = {**describe().to_dict(), "device": str(self.device)}
            line = {**record, "machine": machine, "precision": self.precision, **self.about}
            self._machine_logged = True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(dumps(line) + "\n")
            if self._sinks is None:
                self._sinks = [_Csv(self.path.parent) if s == "csv" else _TensorBoard(self.path.parent, record["step"])
                               for s in self.log_to]  # fmt: skip
            for sink in self._sinks:
                sink.write(record)
        except WriteError:  # a rewrite of log.csv: named already
            raise
        except OSError as err:  # a full disk says so here first: the log grows between two saves
            where = getattr(err, "filename", None) or self.path
            message = (
                f"could not append to {where}: {machine_reason(err)}; what was saved before in "
                f"{self.path.parent} (best/, last/) is left as it was"
            )
            raise WriteError(err.errno, err.strerror, where, message) from err

    def close(self) -> None:
        """Close what the sinks hold open (TensorBoard's writer); a later record opens them again."""
        for sink in self._sinks or []:
            if hasattr(sink, "close"):
                sink.close()
        self._sinks = None
