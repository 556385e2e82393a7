"""python -m sglang_hs.launch_server on CPU over real HTTP: load with eviction, stats, bad input."""

import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("sglang")
pytest.importorskip("hs_prep")

import hs_kernels  # noqa: E402
import sglang_hs  # noqa: E402
from sglang_hs.server_process import ServerProcess, call, flush_cache  # noqa: E402
from sglang_hs.testing import cpu_env, prepare, tiny_model  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang_hs_server")
    model = prepare(tiny_model(str(root / "tiny")), str(root / "prepared"), 0.5)
    log = root / "placeholder_calls.log"
    args = ["--model-path", model, "--device", "cpu",
            "--dtype", "float32", "--max-total-tokens", "1536", "--context-length", "1024",
            "--mem-fraction-static", "0.05", "--disable-cuda-graph", "--sampling-backend", "pytorch",
            "--grammar-backend", "none", "--hs-retrieval-ratio", "0.5", "--hs-prefill-sv", "1", "--hs-decode-sk", "1", "--hs-decode-sv", "1",
            "--hs-dense-reserve", "1.0", "--enable-metrics",  # a 24-page pool: every page may be dense while a batch prefills
            "--warmups", "hs_prefill", "--chunked-prefill-size", "256"]  # added by default on CUDA only
    env = cpu_env(str(log), SGLANG_HS_STATS_FILE=str(root / "stats.json"))
    with ServerProcess(args, env, str(root / "server.log"), start_timeout_s=300) as proc:
        server_logs[proc.base] = root / "server.log"
        yield proc.base, log


server_logs = {}


def generate(base, text, n=6):
    return call(base + "/generate", {"text": text, "sampling_params": {"max_new_tokens": n, "temperature": 0}})


def idle_stats(base, timeout_s=30.0):
    """/hs/stats once the scheduler is idle: a response can reach the client a moment before the
    scheduler has handed its request's pages to the radix tree (seen on a loaded 2-core machine)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, stats = call(base + "/hs/stats")
        assert status == 200
        if stats["pages_in_use"] * 64 == stats["tree_tokens"] or time.monotonic() > deadline:
            return stats
        time.sleep(0.2)


def test_concurrent_overlapping_prefixes_evict_without_leaks(server):
    base, log = server
    prefixes = [f"document {d}: " + "lorem ipsum dolor sit amet " * 21 for d in range(4)]
    prompts = [p + f"question {q}?" for p in prefixes for q in range(4)]  # 16 requests, ~600 tokens each
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda t: generate(base, t), prompts))
    assert all(status == 200 for status, _ in results), [r for r in results if r[0] != 200][:2]
    assert all(len(body["output_ids"]) == 6 for _, body in results)
    assert sum(body["meta_info"]["cached_tokens"] for _, body in results) > 0
    stats = idle_stats(base)
    assert stats["slot_problems"] == []
    assert stats["prefix_hit_tokens"] > 0 and stats["sparse_blocks"] > 0
    # idle: every page in use belongs to the radix tree; 16 x 600 tokens > 1536 forced eviction
    assert stats["pages_in_use"] * 64 == stats["tree_tokens"] <= 1536, stats
    flush_cache(base)  # retried while SGLang still releases the last request (400), raises if never flushed
    time.sleep(1)
    status, stats = call(base + "/hs/stats")
    assert stats["pages_in_use"] == 0 and stats["dense_blocks"] == 0 and stats["sparse_blocks"] == 0
    assert stats["stream_pages"] == 0 and stats["slot_problems"] == []
    assert not log.exists(), log.read_text()
    assert log.with_suffix(".loaded").exists()  # the placeholder was in use (and never called)


def test_prometheus_metrics(server):
    base, _ = server
    generate(base, "metrics please " * 10)
    time.sleep(1.5)
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    assert "sglang:num_running_reqs" in text  # SGLang's own
    for name in ("sglang_hs:dense_blocks", "sglang_hs:sparse_blocks", "sglang_hs:stream_pages", "sglang_hs:prefix_hit_tokens"):
        assert name in text, name


def test_long_decode_trims_streaming_pages(server):
    """Decoding across page boundaries gives back streaming pages behind the window (a trimmed page
    that is still read would fail the request)."""
    base, log = server
    _, before = call(base + "/hs/stats")
    status, body = generate(base, "a long story begins here. " * 20, n=160)  # 520 + 160 tokens
    assert status == 200 and len(body["output_ids"]) == 160
    time.sleep(1)
    _, stats = call(base + "/hs/stats")
    assert stats["stream_pages_trimmed"] > before["stream_pages_trimmed"] and stats["slot_problems"] == []
    assert not log.exists(), log.read_text()


def test_requests_done_at_their_first_token_while_another_decodes(server):
    """A request that ends at its first token (max_new_tokens 1 here; an end-of-sequence token likewise) frees its pages
    while the decode batch formed with it is launched; the server survives it (it once crashed: "streaming KV of a
    trimmed page was needed") and its bookkeeping stays sound."""
    base, log = server
    ids = [10 + (7 * i) % 480 for i in range(300)]
    with ThreadPoolExecutor(1) as pool:
        long = pool.submit(call, base + "/generate", {"input_ids": ids, "sampling_params": {
            "max_new_tokens": 400, "temperature": 0, "ignore_eos": True}})
        time.sleep(0.3)
        short = [call(base + "/generate", {"input_ids": [20 + i + (11 * j) % 400 for j in range(70)],
                                           "sampling_params": {"max_new_tokens": 1, "temperature": 0}}) for i in range(8)]
        status, body = long.result()
    assert all(s == 200 and len(b["output_ids"]) == 1 for s, b in short), short
    assert status == 200 and len(body["output_ids"]) == 400
    assert idle_stats(base)["slot_problems"] == [] and not log.exists()


def test_a_question_filling_its_last_page_reuses_the_whole_cached_prefix(server):
    """A 512-token prefix (not a checkpoint) and 64-token questions: each prompt ends at a page boundary. The window
    before the prompt's last page is pinned when the prefill's results are processed; the next decode step, launched
    before that, once trimmed it first, and every later question reused only the sink (128 of 512 tokens)."""
    base, _ = server
    prefix = [11 + (13 * i) % 470 for i in range(512)]
    cached = []
    for q in range(3):
        status, body = call(base + "/generate", {"input_ids": prefix + [30 + q] * 64,
                                                 "sampling_params": {"max_new_tokens": 2, "temperature": 0}})
        assert status == 200
        cached.append(body["meta_info"]["cached_tokens"])
    assert cached[1:] == [512, 512], cached


def test_too_long_request_is_refused_and_server_stays_up(server):
    base, _ = server
    status, body = generate(base, "x" * 3000)
    assert status == 400 and "context length" in body.lower()
    status, body = generate(base, "still serving")
    assert status == 200 and len(body["output_ids"]) == 6


def test_token_ids_outside_the_vocabulary_are_refused_and_server_stays_up(server):
    """Stock SGLang 0.5.17 crashes on such ids (the embedding's index error kills the scheduler); hs refuses them."""
    base, _ = server
    for bad, shown in (([5, 512, 7], "512"), ([5, -1, 7], "-1")):
        status, body = call(base + "/generate", {"input_ids": bad, "sampling_params": {"max_new_tokens": 2}})
        assert status == 400 and f"token id {shown}, outside the vocabulary [0, 512)" in str(body)
    status, body = call(base + "/generate", {"input_ids": [5, 511, 7], "sampling_params": {"max_new_tokens": 2}})
    assert status == 200 and len(body["output_ids"]) == 2


def test_warmup_ran_the_prefill_shapes_before_listening(server):
    """The hs_prefill warm-up: a prompt of two 256-token chunks and a 128-token tail (its chunks read a prefix of
    their own), then prompts of 1-128 tokens alone and as questions on its cached prefix, and questions of as many
    lengths on the 128-token prompt, all before the first request was accepted."""
    base, _ = server
    text = server_logs[base].read_text(errors="replace")
    done = text.index("hs: hs_prefill warm-up done (a 640-token prompt, then prompts of 1/2/4/8/16/32/64/128 tokens, "
                      "alone and on its cached prefix, and as many questions on the last)")
    assert text.index("Running warmup hs_prefill") < done
    assert "Could not find custom warmup" not in text


def test_benchmark_stream_keeps_the_greedy_output_ids(server):
    """bench_e2e's streamed request returns the whole output's ids (the last event's), the same as a plain request's."""
    from benchmarks.serving.bench_e2e import stream_one

    base, _ = server
    ids = list(range(100, 180))
    streamed = stream_one(base, ids, 5)
    status, plain = call(base + "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 5, "temperature": 0}})
    assert status == 200 and streamed["completion_tokens"] == 5
    assert streamed["output_ids"] == plain["output_ids"] and len(plain["output_ids"]) == 5


def test_profile_of_a_question_on_a_cached_prefix(server, tmp_path):
    """bench_e2e's profile of a question on a cached prefix, over real HTTP with SGLang's profiler: the question hits the
    prefix the unprofiled request cached, and the trace's summary names the hs ranges of its prefill (the prefix match,
    the extend)."""
    from benchmarks.serving.bench_e2e import profile_run

    base, _ = server
    ids = [10 + (37 * i) % 490 for i in range(256 + 32)]  # within the tiny model's vocabulary (512)
    before = idle_stats(base)["prefix_hit_tokens"]
    text = profile_run(base, tmp_path / "profile", ids, 2, cached=256, timeout_s=120)
    assert idle_stats(base)["prefix_hit_tokens"] - before >= 192
    ranges = text.split("| GPU kernels")[0]
    assert "| hs.match_prefix |" in ranges and "| hs.forward_extend |" in ranges


def test_stats_name_the_code_that_serves(server):
    """/hs/stats names the folders the server loaded the extension and kernels from (here: this checkout's), so that a
    run which swaps trees can check which one served."""
    base, _ = server
    status, stats = call(base + "/hs/stats")
    here = {"sglang_hs": sglang_hs.__path__[0], "hs_kernels": hs_kernels.__path__[0]}
    assert status == 200 and set(stats["code"]) == set(here)
    assert all(os.path.samefile(stats["code"][name], path) for name, path in here.items())
