"""The quality benchmarks (BLEU, LM loss, BERT accuracy within a time budget) run in --quick mode and write their JSON."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks/ lives next to src/
SHARED = ROOT.parent / "shared" / "data"


def test_translation_bleu_quick(tmp_path):
    from benchmarks.translation_bleu import main

    result = main(["--corpus", "builtin", "--minutes", "0.03", "--quick", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "bleu.json").read_text())
    assert saved == json.loads(json.dumps(result))
    for decoder in ("greedy", "beam5"):
        assert 0 <= saved[decoder]["bleu"] <= 100 and saved[decoder]["sentences_per_s"] > 0
        assert saved[decoder]["signature"].startswith("nrefs:")
    assert saved["steps"] > 0 and saved["test_sentences"] == 20


@pytest.mark.skipif(not (SHARED / "tinyshakespeare.txt").is_file(), reason="../shared/data/tinyshakespeare.txt missing")
def test_lm_shakespeare_quick(tmp_path):
    from benchmarks.lm_shakespeare import main

    main(["--minutes", "0.02", "--quick", "--out", str(tmp_path)])
    (r,) = json.loads((tmp_path / "lm_shakespeare.json").read_text())
    assert r["steps"] > 0 and 0 < r["val_loss"] < 5  # a 68-character vocabulary: chance is ln 68 ≈ 4.2
    anchor = r["nanogpt_recipe"]  # nanoGPT's recipe, same budget, same process
    assert anchor["steps"] > 0 and 0 < anchor["val_loss"] < 5 and anchor["tokens_per_step"] == 4 * 16


@pytest.mark.skipif(not (SHARED / "tinyshakespeare.txt").is_file(), reason="../shared/data/tinyshakespeare.txt missing")
def test_lm_recipes_quick_trains_two_recipes_side_by_side_each_with_its_settings(tmp_path):
    """Two recipes, one process each on one core, side by side; ``--set`` gives each run its own options (the first
    none), and the run trains with them."""
    from benchmarks.lm_recipes import main

    recipes = ["shakespeare-char-6min", "shakespeare-char-6min-llama"]
    main(["--minutes", "0.02", "--quick", "--recipes", *recipes, "--out", str(tmp_path)]
         + ["--set", "", "optimizer=muon,lr=4e-3"])  # fmt: skip
    (r,) = json.loads((tmp_path / "lm_recipes.json").read_text())
    assert r["side_by_side"] and [run["recipe"] for run in r["runs"]] == recipes
    for run in r["runs"]:
        assert run["threads"] == 1 and run["steps"] > 0 and 0 < run["val_loss"] < 5
    plain, muon = r["runs"]
    assert "optimizer" not in plain["args"] and (muon["args"]["optimizer"], muon["args"]["lr"]) == ("muon", 4e-3)
    runs = tmp_path / "0.02min"
    trained = [  # what each run trained with
        json.loads((runs / name / "last" / "state.json").read_text())["train_config"]
        for name in (recipes[0], f"{recipes[1]}-optimizer=muon,lr=4e-3")
    ]
    assert [(t["optimizer"], t["lr"]) for t in trained] == [("adamw", 2e-3), ("muon", 4e-3)]


def test_lm_shakespeare_picks_the_recipe_tuned_for_the_budget():
    from benchmarks.lm_shakespeare import recipe_for
    from tformer.lm import RECIPES

    assert [recipe_for(m) for m in (1, 1.5, 3, 6, 10, 30, 60)] == [
        "shakespeare-char",
        "shakespeare-char",
        "shakespeare-char",
        "shakespeare-char-6min",
        "shakespeare-char-6min",
        "shakespeare-char-30min",
        "shakespeare-char-30min",
    ]
    layers = [RECIPES[recipe_for(m)]["model"]["n_layers"] for m in (1.5, 6, 30)]
    assert layers == sorted(layers) and layers[0] < layers[-1]  # the longer the budget, the deeper the model


@pytest.mark.skipif(not (SHARED / "tinyshakespeare.txt").is_file(), reason="../shared/data/tinyshakespeare.txt missing")
def test_bert_pretrain_quick(tmp_path):
    from benchmarks.bert_pretrain import main

    main(["--minutes", "0.02", "--quick", "--out", str(tmp_path)])
    (r,) = json.loads((tmp_path / "bert_pretrain.json").read_text())
    assert 0 <= r["mlm_acc"] <= 1 and 0 <= r["nsp_acc"] <= 1 and 0 < r["mlm_majority_baseline"] < 1
    assert r["nsp_chance"] == 0.5 and r["steps"] > 0
