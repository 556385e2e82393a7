"""sglang_hs on the real SmolLM2-135M-Instruct prepared by hs-prep (float32, CPU)."""

import os

import pytest

pytest.importorskip("sglang")
pytest.importorskip("hs_prep")

from sglang_hs.testing import prepare_embedded, use_cpu_placeholder  # noqa: E402

pytestmark = pytest.mark.slow

# real text: ~4 characters per token
PREFIX = " ".join(f"Note {i}: the library opens at nine, closes at five, and lends at most {i % 7 + 2} books per visit."
                  for i in range(40))
QUESTIONS = [" Question: when does the library open? Answer:", " Question: how many books can I borrow? Answer:"]
GREEDY = {"max_new_tokens": 10, "temperature": 0.0}


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    root = tmp_path_factory.mktemp("smollm2_serve")
    return {"r1": prepare_embedded(str(root / "r1"), 1.0), "r05": prepare_embedded(str(root / "r05"), 0.5)}


@pytest.fixture(scope="module")
def placeholder_log(tmp_path_factory):
    log = str(tmp_path_factory.mktemp("ph_smol") / "calls.log")
    use_cpu_placeholder(log)
    return log


def engine(model, hs_args=None, **kwargs):
    common = dict(device="cpu", dtype="float32", max_total_tokens=4096, mem_fraction_static=0.05,
                  disable_cuda_graph=True, log_level="error", sampling_backend="pytorch", grammar_backend="none")
    common.update(kwargs)
    if hs_args is None:
        import sglang

        return sglang.Engine(model_path=model, **common)
    from sglang_hs.engine import create

    return create(model, hs_args=hs_args, **common)


def test_ratio_one_sparsity_zero_equals_stock(smol, placeholder_log):
    prompts = ["The capital of France is", PREFIX[:1200] + QUESTIONS[0]]
    stock = engine(smol["r1"], attention_backend="torch_native")
    try:
        want = [stock.generate(p, GREEDY)["output_ids"] for p in prompts]
    finally:
        stock.shutdown()
    zero = {"prefill_sk": 0.0, "prefill_sv": 0.0, "decode_sk": 0.0, "decode_sv": 0.0}
    hs = engine(smol["r1"], hs_args=zero)
    try:
        got = [hs.generate(p, GREEDY)["output_ids"] for p in prompts]
    finally:
        hs.shutdown()
    assert got == want
    assert not os.path.exists(placeholder_log)


def test_sparse_cached_equals_cold(smol, placeholder_log):
    sparse = {"prefill_sk": 1.0, "prefill_sv": 1.0, "decode_sk": 1.0, "decode_sv": 1.0,
              "sink_tokens": 64, "window_tokens": 128, "stream_checkpoint": 256}
    hs = engine(smol["r05"], hs_args=sparse)
    try:
        hs.generate(PREFIX + QUESTIONS[0], GREEDY)
        cached = hs.generate(PREFIX + QUESTIONS[1], GREEDY)
        hs.flush_cache()
        cold = hs.generate(PREFIX + QUESTIONS[1], GREEDY)
    finally:
        hs.shutdown()
    assert cached["meta_info"]["cached_tokens"] >= 512 and cached["meta_info"]["cached_tokens"] % 256 == 0
    assert cold["meta_info"]["cached_tokens"] == 0
    assert cached["output_ids"] == cold["output_ids"]
    assert not os.path.exists(placeholder_log)
