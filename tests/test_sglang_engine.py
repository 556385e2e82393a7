"""sglang_hs through sglang.Engine on CPU with real (tiny, hs-prep-prepared) checkpoints."""

import json
import os
import time

import pytest

pytest.importorskip("sglang")
pytest.importorskip("hs_prep")

from hs_kernels import model_bytes  # noqa: E402

from sglang_hs.testing import cpu_engine, flush_cache, prepare, tiny_model, use_cpu_placeholder  # noqa: E402

pytestmark = pytest.mark.slow

# byte tokenizer: one token per character
PREFIX = "".join(f"line {i}: the quick brown fox jumps over the lazy dog. " for i in range(14))[:640]
SUFFIXES = ["Question one asks about foxes and dogs and many more animals. " * 7,
            "A second, different question about something else entirely here. " * 7,
            "Third: yet another question, about rivers and mountains far away. " * 7]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang_hs_models")
    src = tiny_model(str(root / "tiny"))
    return {"src": src, "r1": prepare(src, str(root / "r1"), 1.0), "r05": prepare(src, str(root / "r05"), 0.5)}


@pytest.fixture(scope="module")
def placeholder_log(tmp_path_factory):
    log = str(tmp_path_factory.mktemp("ph") / "calls.log")
    use_cpu_placeholder(log)
    return log


def engine(model, hs_args=None, **kwargs):
    return cpu_engine(model, hs_args, **{"max_total_tokens": 8192, **kwargs})


GREEDY = {"max_new_tokens": 12, "temperature": 0.0}


def test_ratio_one_sparsity_zero_equals_stock_torch_native(models, placeholder_log):
    prompts = ["hello world", PREFIX + SUFFIXES[0]]
    stock = engine(models["r1"], attention_backend="torch_native")
    try:
        want = [stock.generate(p, GREEDY)["output_ids"] for p in prompts]
    finally:
        stock.shutdown()
    zero = {"prefill_sk": 0.0, "prefill_sv": 0.0, "decode_sk": 0.0, "decode_sv": 0.0}
    hs = engine(models["r1"], hs_args=zero)
    try:
        got = [hs.generate(p, GREEDY)["output_ids"] for p in prompts]
    finally:
        hs.shutdown()
    assert got == want
    assert not os.path.exists(placeholder_log), open(placeholder_log).read()


def kept_stream_pages(num_tokens, prompt_tokens, sink, window, checkpoint):
    """Pages of a cached sequence (its KV length) whose streaming KV stays: sink, the window before each
    checkpoint, the window before the page-aligned end, the (pinned) window before the prompt's last page."""
    end, prompt_end = num_tokens // 64 * 64, (prompt_tokens - 1) // 64 * 64
    spans = [(0, sink), (end - window, end), (prompt_end - window, prompt_end)]
    spans += [(c - window, c) for c in range(checkpoint, end + 1, checkpoint)]
    return {j for j in range(end // 64) for a, b in spans if 64 * j < b and 64 * j + 64 > a}


def test_cached_prefix_equals_cold_and_bytes_match_size_model(models, placeholder_log, tmp_path):
    stats_path = str(tmp_path / "stats.json")
    os.environ["SGLANG_HS_STATS_FILE"] = stats_path
    sink, window, checkpoint = 64, 128, 256
    sparse = {"retrieval_ratio": 0.5, "prefill_sk": 1.0, "prefill_sv": 1.0, "decode_sk": 1.0, "decode_sv": 1.0,
              "sink_tokens": sink, "window_tokens": window, "stream_checkpoint": checkpoint}
    hs = engine(models["r05"], hs_args=sparse)
    try:
        first = hs.generate(PREFIX + SUFFIXES[0], GREEDY)
        cached = hs.generate(PREFIX + SUFFIXES[1], GREEDY)
        again = hs.generate(PREFIX + SUFFIXES[2], GREEDY)
        time.sleep(1.5)  # stats are published when the scheduler goes idle
        with open(stats_path) as f:
            stats = json.load(f)
        flush_cache(hs)
        cold = hs.generate(PREFIX + SUFFIXES[1], GREEDY)
        flush_cache(hs)
        cold_again = hs.generate(PREFIX + SUFFIXES[2], GREEDY)
    finally:
        hs.shutdown()
        del os.environ["SGLANG_HS_STATS_FILE"]
    # the requests diverge at 640 (a page boundary, not a checkpoint): the streaming window before 640
    # is not stored, so the second one's reuse is cut back to checkpoint 512 and 512..640 is recomputed; that
    # window is kept from then on (pinned), so the third one reuses all 640
    assert len({SUFFIXES[i][0] for i in range(3)}) == 3 and len(PREFIX) == 640
    assert first["meta_info"]["cached_tokens"] == 0
    assert cached["meta_info"]["cached_tokens"] == 512
    assert again["meta_info"]["cached_tokens"] == 640
    assert cold["meta_info"]["cached_tokens"] == 0 and cold_again["meta_info"]["cached_tokens"] == 0
    assert cached["output_ids"] == cold["output_ids"] and again["output_ids"] == cold_again["output_ids"]
    assert stats["prefix_cut_backs"] == 1

    # streaming groups store exactly the checkpointed windows of the three cached sequences (shared pages once) and
    # the pinned window before their branch point, pages 8 and 9
    prompts = [r["meta_info"]["prompt_tokens"] for r in (first, cached, again)]
    kv_len = [p + r["meta_info"]["completion_tokens"] - 1 for p, r in zip(prompts, (first, cached, again))]
    one, two, three = (kept_stream_pages(n, p, sink, window, checkpoint) for n, p in zip(kv_len, prompts))
    assert stats["stream_pages"] == len(one | {8, 9}) + len({j for j in two if j >= 10}) + len({j for j in three if j >= 10})
    pinned = [{j for j in range(end // 64) if 64 * j + 64 > end - window} for end in ((p - 1) // 64 * 64 for p in prompts)]
    assert stats["stream_pages_pinned"] == len(pinned[0] | {8, 9}) + len(pinned[1]) + len(pinned[2])
    config = json.load(open(f"{models['r05']}/config.json"))
    n_s = sum(not r for layer in config["hierasparse"]["layers"] for r in layer["is_retrieval"])
    assert stats["stream_bytes"] == stats["stream_pages"] * 64 * n_s * 2 * stats["head_dim"] * stats["value_bytes"]
    assert stats["tree_tokens"] == sum(n // 64 * 64 for n in kv_len) - 2 * 640

    # storage of the cached blocks = paper eq. 5 at the measured sparsity, to the byte
    assert stats["slot_problems"] == []
    assert stats["sparse_blocks_k"] > 0 and stats["sparse_blocks_v"] > 0
    d, e = stats["head_dim"], stats["value_bytes"]
    expected = 0
    for op in ("k", "v"):
        blocks = stats[f"dense_blocks_{op}"] + stats[f"sparse_blocks_{op}"]
        s = stats[f"sparse_blocks_{op}"] / blocks
        b = model_bytes(blocks * 64, d, s, s, value_bytes=e)  # K and V at sparsity s; one operand is half
        expected += (b.den + b.nnz + b.e) / 2
    assert stats["dense_bytes"] + stats["sparse_bytes"] == pytest.approx(expected, rel=1e-9)
    assert stats["compression_ratio"] > 1.2
    assert not os.path.exists(placeholder_log)


def test_bf16_cached_prefix_equals_cold_bit_for_bit(models, placeholder_log):
    # In bf16 a last-bit fp32 difference in attention flips roundings; the reference attention gives a
    # query the same bits however the prefill was cut (cached prefix + recompute vs one cold chunk), so
    # cached and cold logprobs must be equal, as stock SGLang's are (docs/performance.md, bf16).
    sparse = {"retrieval_ratio": 0.5, "prefill_sk": 1.0, "prefill_sv": 1.0, "decode_sk": 1.0, "decode_sv": 1.0,
              "sink_tokens": 64, "window_tokens": 128, "stream_checkpoint": 256}
    hs = engine(models["r05"], hs_args=sparse, dtype="bfloat16")
    gen = lambda text: hs.generate(text, GREEDY, return_logprob=True, top_logprobs_num=5)  # noqa: E731
    try:
        gen(PREFIX + SUFFIXES[0])
        cached = gen(PREFIX + SUFFIXES[1])
        flush_cache(hs)
        cold = gen(PREFIX + SUFFIXES[1])
    finally:
        hs.shutdown()
    assert cached["meta_info"]["cached_tokens"] == 512 and cold["meta_info"]["cached_tokens"] == 0
    assert cached["output_ids"] == cold["output_ids"]
    assert cached["meta_info"]["output_top_logprobs"] == cold["meta_info"]["output_top_logprobs"]
    assert not os.path.exists(placeholder_log)


def test_the_same_prompt_again_resumes_at_its_end_after_a_long_answer(models, placeholder_log):
    """A regenerated answer (or another sample) matches the prompt up to its last token's page. The first answer ran
    far past its window, so that page's window is neither the cached sequence's end window nor a checkpoint's: it
    stays because the prompt's end was pinned once prefilled (without the pin the match is cut back to 1024)."""
    sparse = {"retrieval_ratio": 0.5, "prefill_sk": 1.0, "prefill_sv": 1.0, "decode_sk": 1.0, "decode_sv": 1.0,
              "sink_tokens": 64, "window_tokens": 128, "stream_checkpoint": 256}
    hs = engine(models["r05"], hs_args=sparse)
    prompt = PREFIX + SUFFIXES[2]
    try:
        first = hs.generate(prompt, {"max_new_tokens": 300, "temperature": 0.0, "ignore_eos": True})
        again = hs.generate(prompt, GREEDY)
    finally:
        hs.shutdown()
    n = first["meta_info"]["prompt_tokens"]
    end = (n - 1) // 64 * 64
    assert first["meta_info"]["completion_tokens"] == 300 and end == 1088  # not a checkpoint (256 k)
    assert again["meta_info"]["cached_tokens"] == end
    assert not os.path.exists(placeholder_log)


def test_disabled_radix_cache_answers_as_a_cold_request(models, placeholder_log):
    """--disable-radix-cache: a prompt of several chunks advances chunk by chunk (the request keeps its own pages, as
    with SGLang's ChunkCache) and answers as a cold request does with the cache on; nothing is reused."""
    sparse = {"retrieval_ratio": 0.5, "prefill_sk": 1.0, "prefill_sv": 1.0, "decode_sk": 1.0, "decode_sv": 1.0,
              "sink_tokens": 64, "window_tokens": 128, "stream_checkpoint": 256}
    prompt = PREFIX + SUFFIXES[0]
    answers = {}
    for disable in (False, True):
        hs = engine(models["r05"], hs_args=sparse, chunked_prefill_size=256, disable_radix_cache=disable)
        try:
            answers[disable] = [hs.generate(prompt, GREEDY) for _ in range(2)]
        finally:
            hs.shutdown()
    assert len(prompt) > 4 * 256
    assert [r["meta_info"]["cached_tokens"] for r in answers[True]] == [0, 0]
    assert answers[False][0]["meta_info"]["cached_tokens"] == 0 and answers[False][1]["meta_info"]["cached_tokens"] > 0
    assert all(r["output_ids"] == answers[False][0]["output_ids"] for r in answers[True])
    assert not os.path.exists(placeholder_log)
