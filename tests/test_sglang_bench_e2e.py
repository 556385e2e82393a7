"""CPU: the end-to-end benchmark's synthetic checkpoint is one the hs extension accepts, its report computes the
ratios from the measured runs (the measurement itself runs on the GPU machine), and the whole run works over real
HTTP on a tiny model."""

import math

import pytest

pytest.importorskip("sglang")

from benchmarks.serving.bench_e2e import LLAMA_31_8B, context_length, decode_tpot, markdown, write_shape_checkpoint  # noqa: E402
from sglang_hs.settings import resolve  # noqa: E402


def test_shape_checkpoint_is_a_prepared_llama_8b(tmp_path):
    model = write_shape_checkpoint(tmp_path / "m", LLAMA_31_8B, retrieval_ratio=0.5)
    settings = resolve(str(model), hs_args={"retrieval_ratio": 0.5})
    assert len(settings.layers) == 32 and settings.num_kv_heads == 8
    assert all(g.retrieval == (0, 1, 2, 3) and g.streaming == (4, 5, 6, 7) for g in settings.layers)
    assert settings.recipe == "conservative"  # no calibration in a shape checkpoint


def test_report_ratios():
    run = lambda ctx, b, ttft, tpot, tps: {"context": ctx, "batch": b, "ttft_s": ttft, "tpot_s": tpot,  # noqa: E731
                                           "decode_tpot_s": tpot / 2, "tokens_per_s": tps}
    res = {"model": "m", "stock_backend": "triton", "output_tokens": 32, "prefix_tokens": 1000, "mem_fraction": 0.8,
           "date": "d", "device_name": "gpu", "command": "c",
           "stock": {"runs": [run(64, 1, 0.5, 0.020, 50.0), {"context": 128, "batch": 1, "error": "RuntimeError: too long"}],
                     "prefix": {"cold_ttft_s": 2.0, "cached_ttft_s": 0.1, "cached_tokens": [1000]},
                     "kv": {"capacity_tokens": 100_000, "kv_bytes_per_token": 4096}},
           "hs": {"runs": [run(64, 1, 0.4, 0.010, 100.0), run(128, 1, 0.8, 0.012, 80.0)], "first_ttft_s": 1.25,
                  "prefix": {"cold_ttft_s": 1.0, "cached_ttft_s": 0.05, "cached_tokens": [960]},
                  "kv": {"capacity_tokens": 350_000, "kv_bytes_per_token": 1170}}}
    text = markdown(res)
    assert "| 64 | 1 | 0.500 | 0.400 | 20.00 | 10.00 | 2.00 | 10.00 | 5.00 | 2.00 | 50.0 | 100.0 |" in text
    assert "| 128 | 1 | RuntimeError: too long | 0.800 |" in text
    assert "| stock | 1000 | - | 2.000 | 0.100 | 0.050 | [1000] | 4096 | 100000 |" in text  # no first-request figure
    assert "| hs | 1000 | 1.250 | 1.000 | 0.050 | 0.050 | [960] | 1170 | 350000 |" in text
    assert "KV capacity hs / stock at --mem-fraction-static 0.8: 3.50x" in text
    assert "stock / hs: 32K 3 / 10, 64K 1 / 5, 128K 0 / 2" in text


def test_decode_tpot_counts_only_gaps_after_every_first_token():
    # request a decodes between b's prefill chunks (gaps of 1.0), then both decode (gaps of 0.1)
    a = {"stamps": [0.0, 1.0, 2.0, 2.1, 2.2, 2.3], "tokens": [1, 2, 3, 4, 5, 6]}
    b = {"stamps": [2.0, 2.1, 2.2, 2.3], "tokens": [1, 2, 3, 4]}
    assert abs(decode_tpot([a, b]) - 0.1) < 1e-9
    assert math.isnan(decode_tpot([{"stamps": [0.0], "tokens": [1]}, {"stamps": [1.0], "tokens": [1]}]))


def test_decode_tpot_divides_events_of_several_tokens():
    """With --stream-interval 4 each event after the first carries 4 tokens: 0.4 s per event is 0.1 s per token."""
    a = {"stamps": [0.0, 0.4, 0.8, 1.2], "tokens": [1, 5, 9, 13]}
    b = {"stamps": [0.0, 0.4, 0.8, 0.9], "tokens": [1, 5, 9, 10]}  # the last event: one token after 0.1 s
    assert abs(decode_tpot([a, b]) - 0.1) < 1e-9


def test_context_length_stays_within_the_models_limit():
    from types import SimpleNamespace as NS

    ctx = lambda **kw: context_length(NS(**{"question_tokens": 64, **kw}))  # noqa: E731
    assert ctx(contexts=[32768, 65536], prefix=32768, output_tokens=32, max_positions=131072) == 65536 + 256
    assert ctx(contexts=[131072], prefix=32768, output_tokens=32, max_positions=131072) == 131072
    assert ctx(contexts=[512], prefix=1024, output_tokens=4, max_positions=None) == 1024 + 68 + 256
    assert ctx(contexts=[512], prefix=1024, output_tokens=4, max_positions=None, question_tokens=512) == 1024 + 516 + 256
    assert ctx(contexts=[200000], prefix=0, output_tokens=4, max_positions=131072) == 200256  # SGLang refuses it


def test_hs_flags_go_to_the_hs_engine_only():
    from types import SimpleNamespace as NS

    from benchmarks.serving.bench_e2e import server_args

    args = NS(device="cuda", dtype="bfloat16", mem_fraction=0.85, contexts=[1024], prefix=0, question_tokens=64, output_tokens=4,
              max_positions=None, extra=["--cuda-graph-max-bs-decode", "16"], shape="llama-3.1-8b",
              stock_backend="triton", hs_flags="--hs-decode-kernel cuda")
    hs, hs_module = server_args("hs", "m", args)
    stock, stock_module = server_args("stock", "m", args)
    assert hs[-2:] == ["--hs-decode-kernel", "cuda"] and "--hs-decode-kernel" not in stock
    assert "--cuda-graph-max-bs-decode" in hs and "--cuda-graph-max-bs-decode" in stock
    assert (hs_module, stock_module) == ("sglang_hs.launch_server", "sglang.launch_server")


@pytest.mark.slow
def test_both_engines_end_to_end_on_cpu_with_profiles(tmp_path):
    """The whole benchmark over real HTTP on the tiny prepared model (CPU, float32): stock and hs each measured, the
    questions hit the cached prefix, and each engine's two profiles (cold, and a question on the cached prefix) are
    written, the hs one naming the prefix match."""
    import json

    pytest.importorskip("hs_prep")
    from benchmarks.serving.bench_e2e import main
    from sglang_hs.testing import prepare, tiny_model

    model = prepare(tiny_model(str(tmp_path / "tiny")), str(tmp_path / "prepared"), 0.5)
    out = tmp_path / "out"
    assert main(["--out", str(out), "--model", model, "--device", "cpu", "--dtype", "float32", "--stock-backend",
                 "torch_native", "--contexts", "256", "--batches", "1", "--output-tokens", "2", "--prefix", "192",
                 "--questions", "1", "--question-tokens", "64", "--profile-steps", "2",
                 "--hs-flags", "--hs-dense-reserve 1.0", "--", "--max-total-tokens", "2048", "--disable-cuda-graph",
                 "--sampling-backend", "pytorch", "--grammar-backend", "none"]) == 0
    res = json.loads((out / "results.json").read_text())
    for engine in ("stock", "hs"):
        assert "error" not in res[engine] and "profile_errors" not in res[engine], res[engine]
        prefix = res[engine]["prefix"]
        assert prefix["cached_tokens"] == [192] and prefix["cached_ttfts_s"] == [prefix["cached_ttft_s"]]
        for name in (engine, f"{engine}-cached"):
            assert (out / f"profile-{name}.md").read_text().startswith("Trace ")
    assert "| hs.match_prefix |" in (out / "profile-hs-cached.md").read_text()
    assert (out / "results.md").exists()
