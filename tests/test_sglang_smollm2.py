"""sglang_hs on the real SmolLM2-135M-Instruct prepared by hs-prep (float32, CPU).

Greedy outputs are compared token by token, and the logprobs of the chosen tokens must agree to
TIE: in float32 hs and stock SGLang (or a cached and a cold run) differ only in summation order
(measured here: at most ~2e-5 in any logprob, smallest top-2 margin along these outputs 0.028).
A different token is accepted only at a position whose top-2 margin is below TIE in one of the runs
(a true near-tie of the model), never elsewhere.
"""

import os

import pytest

pytest.importorskip("sglang")
pytest.importorskip("hs_prep")

from sglang_hs.testing import cpu_engine, flush_cache, greedy_divergence, prepare_embedded, use_cpu_placeholder  # noqa: E402

pytestmark = pytest.mark.slow

PREFIX = " ".join(f"Note {i}: the library opens at nine, closes at five, and lends at most {i % 7 + 2} books per visit."
                  for i in range(24))
QUESTIONS = [" Question: I am planning a visit next week with my two children, who both love reading adventure stories and"
             " would like to borrow as many books as they can carry home. We can only come in the late afternoon, after"
             " school ends and after their swimming lesson. When does the library open, and how late can we still arrive? Answer:",
             " Question: my grandmother reads three novels a week and asked me to pick up a stack of mystery books for her"
             " on Saturday morning, together with a few large print editions and an audio book for her long train journey"
             " to the coast. How many books can I borrow for her in a single visit? Answer:"]
GREEDY = {"max_new_tokens": 10, "temperature": 0.0}
TIE = 1e-3
SINK, WINDOW, CHECKPOINT = 64, 64, 128
POOL = {"max_total_tokens": 4096}


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    root = tmp_path_factory.mktemp("smollm2_serve")
    return {"r1": prepare_embedded(str(root / "r1"), 1.0), "r05": prepare_embedded(str(root / "r05"), 0.5)}


@pytest.fixture(scope="module")
def placeholder_log(tmp_path_factory):
    log = str(tmp_path_factory.mktemp("ph_smol") / "calls.log")
    use_cpu_placeholder(log)
    return log


@pytest.fixture(scope="module")
def tokenize(smol):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smol["r1"])
    return lambda text: tok(text)["input_ids"]


def generate(eng, ids):
    return eng.generate(input_ids=ids, sampling_params=GREEDY, return_logprob=True, top_logprobs_num=2)


def assert_same_greedy(got, want):
    first, diff, margin = greedy_divergence(got, want)
    assert diff < TIE, f"logprobs of the same greedy tokens differ by {diff}: {got['output_ids']} vs {want['output_ids']}"
    assert first is None or margin < TIE, (f"greedy outputs differ at token {first}, where the top-2 logprob margin is "
                                           f"{margin:.4g} (no tie): {got['output_ids']} vs {want['output_ids']}")


def test_ratio_one_sparsity_zero_equals_stock(smol, placeholder_log, tokenize):
    prompts = [tokenize("The capital of France is"), tokenize(PREFIX[:800] + QUESTIONS[0])]
    stock = cpu_engine(smol["r1"], attention_backend="torch_native", **POOL)
    try:
        want = [generate(stock, p) for p in prompts]
    finally:
        stock.shutdown()
    zero = {"prefill_sk": 0.0, "prefill_sv": 0.0, "decode_sk": 0.0, "decode_sv": 0.0}
    hs = cpu_engine(smol["r1"], hs_args=zero, **POOL)
    try:
        got = [generate(hs, p) for p in prompts]
    finally:
        hs.shutdown()
    for g, w in zip(got, want):
        assert g["output_ids"] and g["meta_info"]["cached_tokens"] == 0
        assert_same_greedy(g, w)  # same tokens, the same stop (EOS or length)
    assert not os.path.exists(placeholder_log), open(placeholder_log).read()


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "no-overlap"])
def test_sparse_cached_equals_cold(smol, placeholder_log, tokenize, overlap):
    """With SGLang's overlap scheduler (the default) and without it."""
    one, two = (tokenize(PREFIX + q) for q in QUESTIONS)
    diverge = next(i for i, (a, b) in enumerate(zip(one, two)) if a != b)
    matched = diverge // 64 * 64  # the radix match, page-aligned
    reuse = diverge // CHECKPOINT * CHECKPOINT  # the last checkpoint whose streaming window is stored
    end_window = (len(one) + GREEDY["max_new_tokens"] - 1) // 64 * 64 - WINDOW  # window before the first sequence's end
    # README: cached == cold holds when the new suffix after the reuse point is longer than window + 64;
    # the match is cut back (matched is not a checkpoint, and the first sequence's end window lies beyond it)
    assert reuse < matched <= end_window and len(two) - reuse > WINDOW + 64

    sparse = {"retrieval_ratio": 0.5, "prefill_sk": 1.0, "prefill_sv": 1.0, "decode_sk": 1.0, "decode_sv": 1.0,
              "sink_tokens": SINK, "window_tokens": WINDOW, "stream_checkpoint": CHECKPOINT}
    hs = cpu_engine(smol["r05"], hs_args=sparse, disable_overlap_schedule=not overlap, **POOL)
    try:
        first = generate(hs, one)
        cached = generate(hs, two)
        flush_cache(hs)
        cold = generate(hs, two)
    finally:
        hs.shutdown()
    assert first["meta_info"]["cached_tokens"] == 0
    assert cached["meta_info"]["cached_tokens"] == reuse
    assert cold["meta_info"]["cached_tokens"] == 0
    assert cold["output_ids"]
    assert_same_greedy(cached, cold)
    assert not os.path.exists(placeholder_log), open(placeholder_log).read()


@pytest.mark.slow
def test_demo_serves_with_its_own_flags(smol):
    """The README's main job, serving half: stock SGLang and the hs server (its small static memory fraction takes
    SGLang's profiled-budget path with the auto reserve) answer both questions, the second from the prefix cache, and
    hs at its default (conservative) setting answers as stock does."""
    import re
    import subprocess
    import sys

    from sglang_hs.testing import cpu_env

    r = subprocess.run([sys.executable, "-m", "sglang_hs.demo", smol["r05"]], env=cpu_env(), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    cached = [int(n) for n in re.findall(r"(\d+) from the prefix cache", r.stdout)]  # per question: stock, then hs
    assert len(cached) == 4 and cached[:2] == [0, 0] and min(cached[2:]) > 0, r.stdout[-2000:]
    assert r.stdout.count("the document says:") == 2 and r.stdout.count("same answer from both: yes") == 2, r.stdout[-2000:]
    assert '"dense_reserve": "auto"' in r.stdout
