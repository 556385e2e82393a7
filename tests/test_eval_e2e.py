"""hs-eval end to end on CPU: a real hs SGLang server (python -m sglang_hs.launch_server) serving the real
SmolLM2-135M-Instruct prepared by hs-prep, driven over real HTTP; warm (prefix-cache hit) vs cold."""

import json
import urllib.request

import pytest

pytest.importorskip("sglang")
pytest.importorskip("hs_prep")

from sglang_hs.eval.cli import main  # noqa: E402
from sglang_hs.eval.runner import Server  # noqa: E402
from sglang_hs.eval.scoring import score  # noqa: E402
from sglang_hs.eval.settings import kv_bytes_per_token, preset, prepare_checkpoint  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("hs_eval_e2e")
    setting = preset("old-default")  # half of each layer's groups streaming (2 of SmolLM2's 3 kept); prefill V 2:4, cache K+V 2:4
    try:
        ckpt = prepare_checkpoint(setting, root / "ckpt")
    except RuntimeError as e:
        pytest.skip(f"embedded SmolLM2 unavailable: {e}")
    with Server(ckpt, setting.hs_flags(), root / "server.log", context_length=2048, max_total_tokens=8192) as server:
        yield server, root, setting


def test_warm_and_cold_over_http(served):
    server, root, setting = served
    out = root / "out"
    rc = main(["run", "--url", server.url, "--name", setting.name, "--tasks", "niah_multikey", "--lengths", "448",
               "--samples", "1", "--questions", "2", "--mode", "warmcold", "--offline", "--concurrency", "2", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    rows = res["settings"][0]["rows"]
    assert len(rows) == 4  # 1 context x 2 questions x (cold, warm)
    assert sorted((r["id"], r["question"], r["cache"]) for r in rows) == sorted(
        (i, q, c) for i in {r["id"] for r in rows} for q in (0, 1) for c in ("cold", "warm"))
    for r in rows:
        assert r["correct"] == score(r["output"], r["answers"])
        assert 400 <= r["prompt_tokens"] <= 470
        if r["cache"] == "warm":
            # a hit, but with streaming groups sglang_hs reuses a prefix only up to a point whose streaming
            # window is stored (sink, every --hs-stream-checkpoint tokens, a cached sequence's end): here the sink
            assert r["cached_tokens"] >= 128, r
        else:
            assert (r["cached_tokens"] or 0) < 64, r  # None: no count reported (SGLang omits zero)
    # the server's own settings are read back (GET /hs/stats) and turned into KV bytes per token
    hs = res["settings"][0]["setting"]["hs"]
    assert (hs["prefill_sk"], hs["prefill_sv"], hs["decode_sk"], hs["decode_sv"]) == (0.0, 1.0, 1.0, 1.0)
    dense = res["settings"][0]["dense_bytes_per_token"]
    facts = res["settings"][0]["facts"]
    assert facts["retrieval_groups"] == 60 and facts["total_groups"] == 90  # 2 of 3 groups per layer kept
    every_group = {**facts, "retrieval_groups": facts["total_groups"]}
    for r in rows:  # at ~440 tokens no block lies outside sink + window, so only the streaming groups save
        assert r["kv_bytes_per_token"] == kv_bytes_per_token(facts, 1.0, 1.0, r["n_tokens"])
        assert r["kv_bytes_per_token"] < kv_bytes_per_token(every_group, 1.0, 1.0, r["n_tokens"])
        assert r["kv_bytes_per_token"] < 1.05 * dense  # whole pages: at most a page's rounding over dense
    summary = {(s["cache"]): s for s in res["summary"]}
    assert summary["cold"]["total"] == summary["warm"]["total"] == 2
    assert "| old-default | niah_multikey | 448 | warm |" in (out / "results.md").read_text()
    assert (out / "accuracy_vs_kv.png").stat().st_size > 1000
    with urllib.request.urlopen(server.url + "/hs/stats", timeout=30) as r:
        stats = json.loads(r.read())
    assert stats["prefix_hit_tokens"] > 0 and stats["slot_problems"] == []
