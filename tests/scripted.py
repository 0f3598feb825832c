"""Shared by the tests of the Trainer's choices (early stopping, checkpoint averaging) and of resident memory.

:class:`ScriptedTask` is the smallest task the Trainer takes whose evaluations say what a test wants: next-token loss
on fixed rows, each evaluation returning the next of the scores given (then the last again; None: no validation
data; a dict: all of the evaluation's scores) and keeping a copy of the weights it was given;
:func:`straight_and_resumed` trains one run straight through and
the same run cut and resumed. :data:`PEAK_MB` is the code a child process ends with to print
its own peak resident memory.
"""

import torch

VOCAB = 17

PEAK_MB = r"""
def peak_mb():  # VmHWM: this program's own peak (ru_maxrss keeps the parent's across fork and exec)
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"peak_mb": peak_mb()}))
"""


class ScriptedTask:
    def __init__(self, scores: list, metric: str = "val_loss", higher_is_better: bool = False) -> None:
        self.metric, self.higher_is_better = metric, higher_is_better
        self.scores, self.seen = list(scores), []
        self.rows = torch.randint(1, VOCAB, (4, 9), generator=torch.Generator().manual_seed(0))

    def train_batches(self, epoch: int) -> list[torch.Tensor]:
        return [self.rows[:2], self.rows[2:]]

    def count_tokens(self, batch: torch.Tensor) -> int:
        return batch[:, 1:].numel()

    def loss(self, model, batch):
        logits = model(batch[:, :-1])
        return torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="sum"), 16

    def evaluate(self, model) -> dict:
        score = self.scores.pop(0) if len(self.scores) > 1 else self.scores[0]
        self.seen.append({k: v.clone() for k, v in model.state_dict().items()})
        return {} if score is None else dict(score) if isinstance(score, dict) else {self.metric: score}

    def save_extra(self, directory) -> None:
        pass


def straight_and_resumed(model, config, tmp_path):
    """The same run twice: uninterrupted (``OUT/straight``), and cut at step 2 then resumed (``OUT/cut``); returns both
    trainers. ``model()`` makes the model, ``config(out, **changes)`` the TrainConfig."""
    from tformer.training.trainer import Trainer

    straight = Trainer(model(), ScriptedTask([1.0]), config(tmp_path / "straight"))
    straight.fit()
    Trainer(model(), ScriptedTask([1.0]), config(tmp_path / "cut", max_steps=2)).fit()
    resumed = Trainer(model(), ScriptedTask([1.0]), config(tmp_path / "cut"))
    resumed.resume()
    resumed.fit()
    return straight, resumed
