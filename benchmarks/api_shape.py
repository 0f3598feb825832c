"""The shape of the API, measured (issue 30): how big the CLI is, how many places declare each shared setting, and
how many times control passes from one tformer module to another on two everyday paths.

    python -m benchmarks.api_shape [--out runs/bench]

* ``cli_lines``: lines of ``src/tformer/cli/*.py``;
* ``declarations``: for each setting the three families share (``d_model``, ``n_heads``, ``dropout``, ...), the
  number of class bodies in ``src/tformer`` that declare a field of that name (``name: type = ...``; a function's
  parameters are not counted);
* ``module_switches``: with ``sys.setprofile``, the number of calls whose caller and callee are in different
  ``tformer`` modules (a Python function calling into another module's Python function; a loop over 16 sentences
  counts 16 times), the distinct (caller module, callee module) pairs among them, and the distinct modules visited, on (a) a batch of translation text → tokens → tensors → loss (``TranslationTask.loss``), (b) a GPT prompt
  → its first generated token (``tformer.lm.generate`` with ``max_new_tokens=1``).

Run it on two commits (e.g. in a ``git worktree``) to compare before and after.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

from benchmarks.common import report_dir, write_text

ROOT = Path(__file__).resolve().parents[1]
SHARED = ("d_model", "n_heads", "d_ff", "dropout", "max_len", "norm_first", "activation", "bias", "pad_id", "norm_eps")


def cli_lines() -> int:
    return sum(len(p.read_text(encoding="utf-8").splitlines()) for p in (ROOT / "src/tformer/cli").glob("*.py"))


def declarations() -> dict[str, int]:
    """For each shared setting, the classes in ``src/tformer`` whose body declares a field of that name."""
    counts = dict.fromkeys(SHARED, 0)
    for path in (ROOT / "src/tformer").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        if item.target.id in counts:
                            counts[item.target.id] += 1
    return counts


class _Switches:
    """Counts Python calls that go from one tformer module to another."""

    def __init__(self) -> None:
        self.count, self.modules, self.edges = 0, set(), set()

    def __call__(self, frame, event, arg) -> None:
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if callee.startswith("tformer"):
            self.modules.add(callee)
            if caller.startswith("tformer") and caller != callee:
                self.count += 1
                self.edges.add((caller, callee))

    def run(self, fn) -> dict:
        sys.setprofile(self)
        try:
            fn()
        finally:
            sys.setprofile(None)
        return {
            "switches": self.count,
            "distinct_switches": len(self.edges),
            "modules": len(self.modules),
            "module_list": sorted(self.modules),
        }


def translation_loss() -> dict:
    import torch

    from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
    from tformer.tokenizers import train_tokenizer
    from tformer.translation import TranslationTask, Translator

    pairs = [("I am good.", "Je vais bien."), ("She is tired.", "Elle est fatiguée.")] * 8
    tok = train_tokenizer("bpe", [x for p in pairs for x in p], 60)
    torch.manual_seed(0)
    config = Seq2SeqConfig.preset("tiny", src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size)
    translator = Translator(Seq2SeqTransformer(config), tok, tok)

    def path():
        task = TranslationTask(translator, pairs, [], batch_tokens=256)
        batch = task.train_batches(0)[0]
        task.loss(translator.model, batch)

    return _Switches().run(path)


def gpt_first_token() -> dict:
    import torch

    import tformer.lm as lm
    from tformer.models.gpt import GPT, GPTConfig
    from tformer.tokenizers import train_tokenizer

    tok = train_tokenizer("char", ["To be, or not to be, that is the question."])
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=tok.vocab_size)).eval()
    return _Switches().run(lambda: lm.generate(model, tok, "To be", max_new_tokens=1))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))  # its first paragraph
    parser.add_argument(
        "--out",
        default="runs/bench",
        type=report_dir("api_shape.json"),
        help="folder for api_shape.json (default: runs/bench)",
    )
    args = parser.parse_args(argv)
    result = {
        "cli_lines": cli_lines(),
        "declarations": declarations(),
        "translation_text_to_loss": translation_loss(),
        "gpt_prompt_to_first_token": gpt_first_token(),
    }
    write_text(args.out, "api_shape.json", json.dumps(result, indent=2))
    brief = {
        k: ({kk: vv for kk, vv in v.items() if kk != "module_list"} if isinstance(v, dict) else v)
        for k, v in result.items()
    }
    print(json.dumps(brief, indent=2))
    return result


if __name__ == "__main__":
    main()
