"""hs-eval scoring on hand-made answers, Wilson intervals, KV bytes per token, summaries, CLI errors."""

import argparse
import math

import pytest

from sglang_hs.eval.scoring import contains, score, wilson


@pytest.mark.parametrize("output,answers,want", [
    (" 71432.", ["71432"], True),
    ("The pass key is 71432. It", ["71432"], True),
    ("714321", ["71432"], False),             # a longer number is not the answer
    ("1714320", ["71432"], False),
    ("the pass key. The pass key is", ["71432"], False),
    ("", ["71432"], False),
    (" 7143 2", ["71432"], False),
    ("ABCDE, FGHIJ, klmno, PQRST and UVWXY", ["ABCDE", "FGHIJ", "KLMNO", "PQRST", "UVWXY"], True),  # case-insensitive
    ("ABCDE, FGHIJ, KLMNO, PQRST", ["ABCDE", "FGHIJ", "KLMNO", "PQRST", "UVWXY"], False),          # one missing
    ("XABCDE FGHIJ KLMNO PQRST UVWXY", ["ABCDE", "FGHIJ", "KLMNO", "PQRST", "UVWXY"], False),      # not a whole word
])
def test_score_hand_made(output, answers, want):
    assert score(output, answers) is want


def test_score_needs_an_answer_and_contains_escapes():
    with pytest.raises(ValueError):
        score("x", [])
    assert contains("cost is 3.5 dollars", "3.5") and not contains("cost is 345", "3.5")


def test_wilson_known_values():
    lo, hi = wilson(8, 10)
    assert math.isclose(lo, 0.4902, abs_tol=1e-4) and math.isclose(hi, 0.9433, abs_tol=1e-4)
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and math.isclose(hi, 0.2775, abs_tol=1e-4)
    lo, hi = wilson(30, 30)
    assert math.isclose(lo, 0.8865, abs_tol=1e-4) and math.isclose(hi, 1.0)
    assert wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson(5, 4)


def test_kv_bytes_per_token_follows_the_size_model():
    from hs_kernels import model_bytes

    from sglang_hs.eval.settings import dense_bytes_per_token, kv_bytes_per_token

    facts = {"head_dim": 64, "retrieval_groups": 90, "total_groups": 90}
    assert dense_bytes_per_token(facts) == 90 * 64 * 2 * 2
    # S = 0: dense blocks plus one int32 index entry per block for K and for V
    assert kv_bytes_per_token(facts, 0, 0, 1024) == 90 * (64 * 64 * 2 * 2 * 16 + 2 * 16 * 4) / 1024
    # S = 1 with no sink/window: every block 2:4, exactly the size model (paper eq. 5)
    got = kv_bytes_per_token(facts, 1.0, 1.0, 1024, sink=0, window=0)
    assert math.isclose(got, model_bytes(1024, 64, 1.0, 1.0, num_kv_heads=90).total / 1024)
    # sink 128 + window 256 stay dense: 6 of 16 blocks
    mixed = kv_bytes_per_token(facts, 1.0, 1.0, 1024)
    want = (model_bytes(640, 64, 1.0, 1.0, num_kv_heads=90).total + model_bytes(384, 64, 0, 0, num_kv_heads=90).total) / 1024
    assert math.isclose(mixed, want)
    # streaming groups keep sink + window only
    half = {"head_dim": 64, "retrieval_groups": 30, "total_groups": 90}
    assert math.isclose(kv_bytes_per_token(half, 0, 0, 4096),
                        (30 * (64 * 64 * 4 * 64 + 2 * 64 * 4) + 60 * 384 * 64 * 4) / 4096)


def _results(rows_by_setting):
    return {"command": "hs-eval run ...", "date": "today", "machine": "test", "haystack_sources": ["filler"],
            "task_fingerprint": "abc", "settings": [
                {"setting": {"name": n, "description": n}, "dense_bytes_per_token": 100, "rows": rows}
                for n, rows in rows_by_setting.items()]}


def _row(correct, cache="cold", kv=50.0):
    return {"task": "passkey", "length": 1024, "depth": 0.5, "cache": cache, "correct": correct, "n_tokens": 1000,
            "kv_bytes_per_token": kv, "cached_tokens": None}


def test_summary_table_counts_and_outputs(tmp_path):
    from sglang_hs.eval.report import write_outputs

    res = write_outputs(_results({"full": [_row(True)] * 9 + [_row(False)], "aoh": [_row(True)] * 3 + [_row(False, "warm")]}),
                        tmp_path)
    by = {(s["setting"], s["cache"]): s for s in res["summary"]}
    assert (by["full", "cold"]["correct"], by["full", "cold"]["total"]) == (9, 10)
    assert (by["aoh", "cold"]["correct"], by["aoh", "cold"]["total"]) == (3, 3)
    assert (by["aoh", "warm"]["correct"], by["aoh", "warm"]["total"]) == (0, 1)
    md = (tmp_path / "results.md").read_text()
    assert "| full | passkey | 1024 | cold | 9 / 10 | 0.90 | [0.60, 0.98] | 50 | 0.50x |" in md
    assert "| full | passkey | 1024 | 9 / 10 |" in md and "| aoh | passkey | 1024 | 3 / 3 |" in md  # by depth (cold)
    assert (tmp_path / "accuracy_vs_kv.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_bad_input_is_one_line_and_nonzero(tmp_path, capsys):
    from sglang_hs.eval.cli import main

    assert main(["run", "--settings", "bogus", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown setting 'bogus'" in err[0]
    assert main(["report", str(tmp_path / "missing.json"), "--out", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["run", "--url", "http://127.0.0.1:9", "--out", str(tmp_path)]) == 2
    assert "no OpenAI-compatible server" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["run", "--settings", "full", "--lengths", "abc", "--out", str(tmp_path)])
    assert e.value.code == 2


def test_hs_set_overrides_every_setting_and_is_checked():
    from sglang_hs.eval.cli import _hs_set, build_parser

    args = build_parser().parse_args(["run", "--settings", "full", "--hs-set", "stream-checkpoint=256",
                                      "--hs-set", "decode_sv=0.5", "--out", "x"])
    assert args.hs_set == [("stream_checkpoint", 256), ("decode_sv", 0.5)]
    assert isinstance(args.hs_set[0][1], int)
    for bad in ("recipe=llama", "bogus=1", "window_tokens", "window_tokens=1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected KEY=VALUE|takes a int value"):
            _hs_set(bad)


def test_in_process_refuses_server_args(tmp_path, capsys):
    from sglang_hs.eval.cli import main

    assert main(["run", "--settings", "full", "--in-process", "--server-arg=--foo", "--out", str(tmp_path)]) == 2
    assert "--server-arg is for started servers" in capsys.readouterr().err


def test_warm_cold_pairs_are_counted_per_question(tmp_path):
    from sglang_hs.eval.report import write_outputs

    def row(i, q, cache, correct, out, cached, lat):
        return {**_row(correct, cache), "id": f"s{i}", "question": q, "output": out, "cached_tokens": cached,
                "latency_s": lat}

    rows = [row(0, 0, "cold", True, " 1234567.", 0, 10.0), row(0, 0, "warm", True, " 1234567.", 512, 2.0),
            row(0, 1, "cold", True, " 7654321.", 0, 10.0), row(0, 1, "warm", False, " 765432.", 512, 2.0),
            row(1, 0, "cold", False, " 11.", 0, 10.0), row(1, 0, "warm", False, " 11.", 448, 4.0),
            row(1, 1, "cold", True, " 2.", 0, 10.0)]  # no warm partner: not a pair
    write_outputs(_results({"recipe": rows}), tmp_path)
    md = (tmp_path / "results.md").read_text()
    assert "| recipe | 3 | 2 / 3 | 1 / 3 | 1 | 1 | 2 / 3 | 491 | 10.0 / 2.7 |" in md
