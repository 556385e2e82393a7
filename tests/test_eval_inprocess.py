"""hs-eval --in-process on CPU: sglang.Engine with the hs plugin in the test process, on a tiny random
Llama (byte tokenizer + a minimal chat template) prepared by the real hs-prep; warm vs cold pairs."""

import json
import os

import pytest

pytest.importorskip("sglang")
pytest.importorskip("hs_prep")

from sglang_hs.eval import haystack  # noqa: E402
from sglang_hs.eval.cli import main  # noqa: E402
from sglang_hs.eval.scoring import score  # noqa: E402
from sglang_hs.testing import byte_tokenizer, tiny_model, use_cpu_placeholder  # noqa: E402

pytestmark = pytest.mark.slow

TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


def test_in_process_warm_and_cold(tmp_path, monkeypatch):
    monkeypatch.setattr(haystack, "CACHE_DIR", tmp_path / "haystack")  # the generated filler, whatever is cached
    log = str(tmp_path / "placeholder_calls.log")
    use_cpu_placeholder(log)
    src = tiny_model(str(tmp_path / "tiny"))
    tok = byte_tokenizer()
    tok.chat_template = TEMPLATE
    tok.save_pretrained(src)  # hs-prep convert copies it into the prepared checkpoint
    out = tmp_path / "out"
    rc = main(["run", "--settings", "kv24-decode", "--in-process", "--model", src, "--ckpt-root", str(tmp_path / "ckpt"),
               "--tasks", "niah_multikey", "--lengths", "900", "--samples", "1", "--questions", "2", "--mode", "warmcold",
               "--offline", "--concurrency", "2", "--hs-set", "window_tokens=128", "--hs-set", "prefill_sv=1.0", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    block = res["settings"][0]
    rows = block["rows"]
    assert sorted((r["question"], r["cache"]) for r in rows) == [(0, "cold"), (0, "warm"), (1, "cold"), (1, "warm")]
    for r in rows:
        assert r["correct"] == score(r["output"], r["answers"])
        assert r["n_tokens"] < r["prompt_tokens"] <= 900 and r["latency_s"] > 0  # answer prefix sent after the question
        if r["cache"] == "cold":
            assert r["cached_tokens"] < 64, r
        else:  # all groups are retrieval groups: the whole shared context (page-aligned) is a prefix hit
            assert r["cached_tokens"] >= r["prompt_tokens"] - 200, r
    # the scheduler's published stats show the hs args reached the engine, --hs-set included
    stats = block["server"]["hs_stats"]
    assert stats["settings"]["prefill"] == {"s_k": 0.0, "s_v": 1.0}
    assert stats["settings"]["decode"] == {"s_k": 1.0, "s_v": 1.0}
    assert stats["settings"]["window_tokens"] == 128 == block["setting"]["hs"]["window_tokens"]
    assert stats["prefix_hit_tokens"] > 0 and stats["slot_problems"] == []
    assert "| kv24-decode | niah_multikey | 900 | warm | " in (out / "results.md").read_text()
    assert not os.path.exists(log), open(log).read()  # no placeholder sgl_kernel function was called
