"""hs-eval calibrate's ladder on fake measurements: which rungs it tries, which it keeps, what it writes."""

import json

import pytest

from sglang_hs.eval.calibrate import Ladder, climb, passes, setting_of, write_calibration
from sglang_hs.settings import resolve
from sglang_hs.testing import prepare, tiny_model


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("cal")
    return prepare(tiny_model(str(root / "tiny"), layers=2, kv_heads=4, heads=8), str(root / "r05"), 0.5)


def fake_measure(correct_of):
    """Rows of 2 tasks x 1 length, 10 samples each; ``correct_of(hs) -> correct answers per task``."""
    tried = []

    def measure(setting):
        tried.append(setting.name)
        correct = correct_of(setting.hs)
        return [{"task": task, "length": 1024, "cache": "cold", "correct": i < correct[task]}
                for task in ("a", "b") for i in range(10)]
    return measure, tried


def test_a_cell_fails_below_keep_of_stock():
    stock = {("a", 1024): [10, 10], ("b", 1024): [8, 10]}
    assert passes(stock, {("a", 1024): [10, 10], ("b", 1024): [8, 10]}, 0.95)[0]
    ok, failed = passes(stock, {("a", 1024): [10, 10], ("b", 1024): [7, 10]}, 0.95)
    assert not ok and failed == ["b@1024: 7 vs stock 8"]


def test_sparsity_that_loses_answers_is_not_chosen(prepared, tmp_path):
    # 2:4 loses task b, streaming a quarter of the groups keeps everything, half loses task a
    def correct(hs):
        if hs["decode_sv"] or hs["decode_sk"]:
            return {"a": 10, "b": 5}
        return {"a": 10 if hs["retrieval_ratio"] >= 0.75 else 6, "b": 9}

    measure, tried = fake_measure(correct)
    best = climb(Ladder(prepared, measure, 0.95, 1024, lambda m: None))
    assert tried[:2] == ["stock", "v24"]  # kv24 not tried once v24 fails
    assert "kv24" not in tried and "combined" not in tried
    assert best["name"] in ("s25-model", "s25-layer") and best["passes"]
    assert best["kv_vs_dense"] < 1.0


def test_nothing_passes_and_stock_is_kept(prepared):
    measure, tried = fake_measure(lambda hs: {"a": 10, "b": 9} if hs["retrieval_ratio"] == 1.0 and not any(
        hs[k] for k in ("prefill_sk", "prefill_sv", "decode_sk", "decode_sv")) else {"a": 1, "b": 1})
    best = climb(Ladder(prepared, measure, 0.95, 1024, lambda m: None))
    assert best["name"] == "stock"
    assert setting_of(best)["retrieval_ratio"] == 1.0 and setting_of(best)["decode"] == {"s_k": 0.0, "s_v": 0.0}


def test_the_chosen_setting_is_what_the_launcher_serves(prepared, tmp_path):
    measure, _ = fake_measure(lambda hs: {"a": 10, "b": 10})  # everything passes: the sparsest rung wins
    ladder = Ladder(prepared, measure, 0.95, 4096, lambda m: None)
    best = climb(ladder)
    assert best["name"] == "combined" and best["kv_vs_dense"] == min(e["kv_vs_dense"] for e in ladder.table)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(open(f"{prepared}/config.json").read())
    write_calibration(ckpt, {"setting": setting_of(best), "chosen": best["name"], "table": ladder.table})
    served = resolve(str(ckpt), {})
    assert served.recipe == "calibrated"
    assert (served.decode.s_k, served.decode.s_v) == (best["hs"]["decode_sk"], best["hs"]["decode_sv"])
    assert json.loads((ckpt / "config.json").read_text())["hierasparse"]["calibration"]["chosen"] == "combined"


def test_an_unprepared_checkpoint_is_refused(tmp_path):
    tiny = tiny_model(str(tmp_path / "m"), layers=1)
    with pytest.raises(ValueError, match="not a prepared checkpoint"):
        write_calibration(tiny, {"setting": {}})


def test_a_window_that_covers_the_prompts_is_not_evidence(prepared):
    # streaming loses answers with the narrow window; the wide one (2560 tokens) would see all of a 1024-token prompt
    measure, tried = fake_measure(lambda hs: {"a": 10, "b": 9} if hs["retrieval_ratio"] == 1.0 and not hs["decode_sv"]
                                  else {"a": 2, "b": 2})
    best = climb(Ladder(prepared, measure, 0.95, 1024, lambda m: None))
    assert not any(name.endswith("-wide") for name in tried)
    assert best["name"] == "stock" and best["kv_vs_dense"] == 1.0
