"""Bad configurations give one-line errors before anything starts (launcher and ServerArgs checks)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("sglang")

from sglang_hs.settings import HSConfigError, resolve, split_hs_flags  # noqa: E402
from sglang_hs.testing import cpu_env, tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def unprepared(tmp_path_factory):
    return tiny_model(str(tmp_path_factory.mktemp("unprepared") / "m"), layers=1)


@pytest.fixture(scope="module")
def prepared(unprepared, tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared")
    config = json.load(open(f"{unprepared}/config.json"))
    config["hierasparse"] = {"format_version": 1, "tp_size": 1, "num_key_value_heads": 4, "retrieval_ratio": 0.5,
                             "layers": [{"num_retrieval": 2, "is_retrieval": [True, True, False, False]}]}
    (out / "config.json").write_text(json.dumps(config))
    return str(out)


def test_unprepared_model_is_refused_with_how_to_prepare(unprepared):
    with pytest.raises(HSConfigError, match="not a prepared checkpoint.*hs-prep convert"):
        resolve(unprepared, {})


@pytest.mark.parametrize("hs_args, page_size, message", [
    ({}, 16, "--page-size 64"),
    ({"decode_sk": 1.5}, 64, "sparsity out of range"),
    ({"prefill_sv": -0.1}, 64, "sparsity out of range"),
    ({"window_tokens": 0}, 64, "window-tokens"),
    ({"decode_kernel": "tilelang"}, 64, "--hs-decode-kernel must be one of auto, triton, cuda"),
])
def test_inconsistent_settings(prepared, hs_args, page_size, message):
    with pytest.raises(HSConfigError, match=message):
        resolve(prepared, hs_args, page_size=page_size)


def test_tp_layout_mismatch_and_unknown_flag(prepared):
    with pytest.raises(HSConfigError, match="balanced for tp_size=1"):
        resolve(prepared, {}, tp_size=2)
    with pytest.raises(HSConfigError, match="unknown flag --hs-bogus"):
        split_hs_flags(["--hs-bogus", "1"])
    hs, rest = split_hs_flags(["--model-path", "m", "--hs-decode-sk=0.5", "--hs-sink-tokens", "64"])
    assert hs == {"decode_sk": 0.5, "sink_tokens": 64} and rest == ["--model-path", "m"]


def test_uncalibrated_checkpoint_is_served_conservative_then_flags(prepared):
    s = resolve(prepared, {"decode_sv": 0.5})
    assert s.recipe == "conservative" and (s.prefill.s_k, s.prefill.s_v, s.decode.s_k, s.decode.s_v) == (0.0, 0.0, 0.0, 0.5)
    assert (s.sink_tokens, s.window_tokens) == (128, 256)
    assert [g.retrieval for g in s.layers] == [(0, 1, 2, 3)] and [g.streaming for g in s.layers] == [()]
    assert s.decode_kernel == "auto" and resolve(prepared, {"decode_kernel": "cuda"}).decode_kernel == "cuda"
    half = resolve(prepared, {"retrieval_ratio": 0.5})
    assert [g.retrieval for g in half.layers] == [(0, 1)] and [g.streaming for g in half.layers] == [(2, 3)]
    with pytest.raises(HSConfigError, match="retrieval-ratio must be in"):
        resolve(prepared, {"retrieval_ratio": 0.0})
    with pytest.raises(HSConfigError, match="retrieval-scope must be one of"):
        resolve(prepared, {"retrieval_ratio": 0.5, "retrieval_scope": "global"})


def test_calibrated_setting_is_the_default_and_flags_still_win(prepared, tmp_path):
    from sglang_hs.eval.calibrate import write_calibration

    ckpt = tmp_path / "calibrated"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(open(f"{prepared}/config.json").read())
    setting = {"retrieval_ratio": 0.25, "retrieval_scope": "layer", "prefill": {"s_k": 0.0, "s_v": 1.0},
               "decode": {"s_k": 0.0, "s_v": 1.0}, "sink_tokens": 64, "window_tokens": 512}
    write_calibration(ckpt, {"setting": setting, "chosen": "test"})
    assert [p.name for p in ckpt.iterdir()] == ["config.json"]  # nothing half-written beside it
    s = resolve(str(ckpt), {})
    assert s.recipe == "calibrated" and (s.prefill.s_v, s.decode.s_v, s.sink_tokens, s.window_tokens) == (1.0, 1.0, 64, 512)
    assert [g.retrieval for g in s.layers] == [(0,)]
    s = resolve(str(ckpt), {"retrieval_ratio": 1.0, "decode_sv": 0.0})
    assert [g.retrieval for g in s.layers] == [(0, 1, 2, 3)] and s.decode.s_v == 0.0 and s.prefill.s_v == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("extra, message", [
    ([], "not a prepared checkpoint"),
    (["--speculative-algorithm", "EAGLE"], None),
    (["--page-size", "32"], "--page-size 64"),
    (["--hs-decode-sk", "2"], "sparsity out of range"),
    (["--cuda-graph-backend-prefill", "full"], "prefill: breakable or disabled"),
    (["--cuda-graph-backend-decode", "breakable"], "decode CUDA graphs: full or disabled"),
    (["--kv-cache-dtype", "fp8_e4m3"], "--kv-cache-dtype fp8_e4m3 is not supported"),
])
def test_launcher_exits_with_one_line(unprepared, prepared, extra, message):
    model = unprepared if message == "not a prepared checkpoint" else prepared
    cmd = [sys.executable, "-m", "sglang_hs.launch_server", "--model-path", model, "--device", "cpu", *extra]
    r = subprocess.run(cmd, env=cpu_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("sglang_hs: error:")]
    assert len(lines) == 1, r.stderr[-2000:]
    if message:
        assert message in lines[0]


def test_warmup_prompt_covers_two_chunks_and_a_tail_within_the_server_limit():
    from sglang_hs.warmup import QUESTION_TOKENS, prompt_tokens

    assert prompt_tokens(8192, 131072) == 2 * 8192 + QUESTION_TOKENS
    assert prompt_tokens(None, 131072) == 2048 + QUESTION_TOKENS
    assert prompt_tokens(8192, 4096) + QUESTION_TOKENS + 2 == 4096  # capped: the question and two outputs fit
    assert prompt_tokens(256, 1535) == 2 * 256 + QUESTION_TOKENS  # the CPU server test's pool
    assert prompt_tokens(8192, 10) == 1


def test_warmup_meets_every_streaming_tile_height_fresh_and_on_the_cached_prompt():
    """The streaming kernel compiles once per tile height (``stream_rows`` of the query tokens and group size) and
    whether it splits its keys (a short call after a long prefix) or not; the warm-up reaches each before the server
    listens, for any group size."""
    import asyncio
    from types import SimpleNamespace

    from hs_kernels.gpu import stream_rows
    from sglang_hs import warmup

    sent = []

    async def record(req, _):
        sent.append(req.input_ids)
        yield

    manager = SimpleNamespace(server_args=SimpleNamespace(chunked_prefill_size=256), context_len=4096,
                              max_req_input_len=None, model_config=SimpleNamespace(vocab_size=1000),
                              generate_request=record)
    asyncio.run(warmup.hs_prefill("null", manager))
    n = len(warmup.SHORT_TOKENS)
    prompt, fresh, questions, short_questions = sent[0], sent[1:2 * n:2], sent[2:2 * n + 1:2], sent[2 * n + 1:]
    assert len(prompt) == warmup.prompt_tokens(256, 4096)
    # on the last short prompt, questions of every length: every bucket of short extends' graphs
    assert all(q[:len(fresh[-1])] == fresh[-1] for q in short_questions)
    assert [len(q) - len(fresh[-1]) for q in short_questions] == list(warmup.SHORT_TOKENS)
    assert all(q[:len(prompt)] == prompt for q in questions)
    lengths = [len(f) for f in fresh]
    assert lengths == [len(q) - len(prompt) for q in questions] and max(lengths) == warmup.QUESTION_TOKENS
    for group in range(1, 17):
        assert {stream_rows(n, group) for n in lengths} == {stream_rows(t, group) for t in range(1, 4097)}, group


@pytest.mark.parametrize("given, eager", [(None, True), ("disabled", True), ("breakable", False)])
def test_prefill_cuda_graphs_are_off_unless_breakable(prepared, given, eager):
    """hs prefill runs eagerly by default; SGLang's breakable prefill graphs (attention eager between captured
    segments) are opt-in."""
    from types import SimpleNamespace

    from sglang_hs import plugin

    args = SimpleNamespace(attention_backend="hs", radix_cache_backend=None, page_size=None, model_path=prepared,
                           tp_size=1, max_running_requests=None, warmups=None, device="cpu",
                           cuda_graph_backend_prefill=given, disable_prefill_cuda_graph=False)
    plugin._check_server_args(args)
    assert args.disable_prefill_cuda_graph == eager


@pytest.mark.parametrize("device, given, expect", [
    ("cuda", None, "hs_prefill"),  # the prefill variants compile before the server listens
    ("cpu", None, None),           # nothing to compile on CPU
    ("cuda", "voice_chat", "voice_chat"),  # the user's choice stands
])
def test_server_args_get_the_prefill_warmup_on_cuda(prepared, device, given, expect):
    from types import SimpleNamespace

    from sglang_hs import plugin

    args = SimpleNamespace(attention_backend="hs", radix_cache_backend=None, page_size=None, model_path=prepared,
                           tp_size=1, max_running_requests=None, warmups=given, device=device)
    plugin._check_server_args(args)
    assert args.warmups == expect


def test_a_failing_warmup_is_logged_and_the_server_starts(monkeypatch):
    import asyncio
    from types import SimpleNamespace

    from sglang_hs import warmup

    async def refuse(req, _):
        raise ValueError(f"refused {len(req.input_ids)} tokens")
        yield

    # the module's logger itself (SGLang's logging setup may disable loggers made before it)
    warnings = []
    monkeypatch.setattr(warmup, "logger", SimpleNamespace(warning=lambda msg, *a: warnings.append(msg % a),
                                                          info=lambda *a: None))
    manager = SimpleNamespace(server_args=SimpleNamespace(chunked_prefill_size=256), context_len=1024,
                              max_req_input_len=1000, model_config=SimpleNamespace(vocab_size=100),
                              generate_request=refuse)
    asyncio.run(warmup.hs_prefill("null", manager))
    assert warnings == ["hs: hs_prefill warm-up failed (ValueError: refused 640 tokens); the first requests will "
                        "compile their kernels"]


@pytest.mark.parametrize("disable_overlap, chunks", [(True, 1), (False, 2)])
def test_auto_reserve_holds_the_prefill_chunks_in_flight(prepared, monkeypatch, disable_overlap, chunks):
    """Under the overlap scheduler a prefill is compressed after the next batch is formed: two chunks are dense."""
    from types import SimpleNamespace

    from sglang_hs import plugin
    from sglang_hs.settings import auto_reserve_pages

    monkeypatch.setattr(plugin, "_settings", None)
    args = SimpleNamespace(model_path=prepared, page_size=64, chunked_prefill_size=1024, context_length=None,
                           max_running_requests=4, disable_overlap_schedule=disable_overlap)
    s = plugin.settings_for(args)
    assert s.auto_reserve_pages == auto_reserve_pages(chunks * 1024, 4, s.sink_tokens, s.window_tokens)
    assert s.auto_reserve_pages - auto_reserve_pages(1024, 4, s.sink_tokens, s.window_tokens) == (chunks - 1) * 16


class _Stream:
    def __init__(self):
        self.waits = []

    def wait_event(self, event):
        self.waits.append(("event", event))

    def wait_stream(self, stream):
        self.waits.append(("stream", stream))


@pytest.mark.parametrize("backend, wait", [("hs", ("stream", "forward")), ("triton", ("event", "snapshot"))])
def test_results_wait_for_the_whole_forward_under_hs(prepared, backend, wait):
    """SGLang's own barrier (hooked by the registered plugin), called after a decode graph's launch: with hs the
    schedule stream waits for the whole forward, not the graph's input snapshot; other backends keep the fast path."""
    from types import SimpleNamespace

    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.plugins.hook_registry import HookRegistry

    from sglang_hs import plugin

    plugin.register()
    HookRegistry.apply_hooks()  # as SGLang does at start-up; idempotent
    runner = SimpleNamespace(war_fastpath_read_done_event="snapshot")
    scheduler = SimpleNamespace(_war_barrier_enabled=True, model_worker=SimpleNamespace(war_fastpath_runner=runner),
                                schedule_stream=_Stream(), forward_stream="forward",
                                server_args=SimpleNamespace(attention_backend=backend))
    Scheduler._apply_war_barrier(scheduler)
    assert scheduler.schedule_stream.waits == [wait]
    assert runner.war_fastpath_read_done_event is None


@pytest.mark.parametrize("given, expect", [(None, "1"), ("0", "0")])
def test_consecutive_prefills_are_not_overlapped_unless_the_user_says(prepared, monkeypatch, given, expect):
    from types import SimpleNamespace

    from sglang_hs import plugin

    if given is None:
        monkeypatch.delenv(plugin.CONSECUTIVE_PREFILL_OVERLAP, raising=False)
    else:
        monkeypatch.setenv(plugin.CONSECUTIVE_PREFILL_OVERLAP, given)
    args = SimpleNamespace(attention_backend="hs", radix_cache_backend=None, page_size=None, model_path=prepared,
                           tp_size=1, max_running_requests=None, warmups=None, device="cpu")
    plugin._check_server_args(args)
    assert os.environ[plugin.CONSECUTIVE_PREFILL_OVERLAP] == expect


@pytest.mark.parametrize("backend, pool_asked", [("hs", 0), ("triton", 1)])
def test_models_fused_kv_write_is_off_under_hs(monkeypatch, backend, pool_asked):
    """Qwen3-MoE's RoPE kernel may write K/V into SGLang's flat buffers (CUDA, bf16); under hs it must not: hs's pools
    are blocks. The registered hook answers False without asking the pool; other backends get SGLang's answer."""
    from types import SimpleNamespace

    import sglang.srt.runtime_context as runtime_context
    from sglang.srt.models import utils
    from sglang.srt.plugins.hook_registry import HookRegistry

    from sglang_hs import plugin

    plugin.register()
    HookRegistry.apply_hooks()
    execution = SimpleNamespace(kernel=SimpleNamespace(attention_backend=backend))
    monkeypatch.setattr(runtime_context, "get_exec", lambda: execution)
    asked = []
    monkeypatch.setattr(utils, "get_token_to_kv_pool", lambda: asked.append(1) or SimpleNamespace(dtype=None))
    got = utils.enable_fused_set_kv_buffer(SimpleNamespace())
    assert got is False and len(asked) == pool_asked  # off the GPU SGLang says False too, after asking the pool


@pytest.mark.parametrize("backend, pending, now, env, expect", [
    ("hs", "extend", "decode", "0", True),  # the decode step after an hs prefill waits for the prefill's results
    ("hs", "middle chunk", "decode", "0", False),  # no first token to send: SGLang's overlap stays
    ("hs", "decode", "decode", "0", False),
    ("hs", None, "decode", "0", False),  # nothing pending
    ("hs", "extend", "extend", "0", False),  # consecutive prefills: SGLang's own switch decides
    ("hs", "extend", "extend", "1", True),
    ("triton", "extend", "decode", "0", False),  # other backends keep SGLang's answer
])
def test_the_decode_step_after_an_hs_prefill_waits_for_its_results(monkeypatch, backend, pending, now, env, expect):
    """Through the registered hooks on SGLang's real ``Scheduler.is_disable_overlap_for_batch``, batch result processor
    and ``Scheduler._apply_war_barrier``. Before a decode step the last batch object reports decode, as SGLang's does
    once it runs the prefill's requests on; the copy queued with the prefill's result says extend. A request released while the results
    are processed is released only after the decode's launch."""
    from types import SimpleNamespace

    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.managers.scheduler_components import batch_result_processor
    from sglang.srt.mem_cache import common
    from sglang.srt.plugins.hook_registry import HookRegistry

    from sglang_hs import plugin

    plugin.register()
    HookRegistry.apply_hooks()
    monkeypatch.setenv(plugin.CONSECUTIVE_PREFILL_OVERLAP, env)
    released = []
    monkeypatch.setattr(common, "release_kv_cache", lambda req, cache, *a, **kw: released.append(req))

    def batch(mode):
        chunk = SimpleNamespace(inflight_middle_chunks=int(mode == "middle chunk"))  # counted from its launch
        return SimpleNamespace(forward_mode=SimpleNamespace(is_extend=lambda: mode in ("extend", "middle chunk"),
                                                            is_decode=lambda: mode == "decode"),
                               spec_algorithm=SimpleNamespace(is_none=lambda: True), reqs=[chunk])

    cache = SimpleNamespace(held_releases=None)
    scheduler = SimpleNamespace(server_args=SimpleNamespace(attention_backend=backend, disaggregation_mode="null"),
                                require_mlp_sync=False, result_queue=[(batch(pending), None)] if pending else [],
                                tree_cache=cache, model_worker=SimpleNamespace(), _war_barrier_enabled=False)
    last = batch("decode" if now == "decode" else pending)  # a prefill's batch object run on is in decode mode
    assert Scheduler.is_disable_overlap_for_batch(scheduler, batch(now), last_batch=last) is expect
    held = expect and now == "decode"
    assert (cache.held_releases == []) if held else cache.held_releases is None
    if held:
        batch_result_processor.release_kv_cache("done at its first token", cache)
        assert released == []  # the decode formed with it is not launched yet
        Scheduler._apply_war_barrier(scheduler)
        assert released == ["done at its first token"] and cache.held_releases is None


@pytest.mark.parametrize("head_dim, dtype, group, named", [
    (128, "bfloat16", 4, None), (64, "float16", 3, None), (256, "bfloat16", 64, None), (96, "bfloat16", 4, "head_dim 96"),
    (128, "float32", 4, "torch.float32"), (128, "bfloat16", 128, "128 query heads")])
def test_a_gpu_model_without_kernels_is_told_it_runs_the_reference(head_dim, dtype, group, named):
    import torch

    from sglang_hs.backend import reference_warning

    warning = reference_warning(head_dim, getattr(torch, dtype), group)
    assert warning is None if named is None else named in warning and "PyTorch reference" in warning


@pytest.mark.parametrize("found", [None, "/usr/local/cuda/bin/nvcc"])
def test_a_gpu_server_without_nvcc_is_told_its_cuda_kernels_are_off(monkeypatch, caplog, found):
    import logging
    from types import SimpleNamespace as NS

    import torch

    from hs_kernels import nvcc
    from sglang_hs.backend import NO_NVCC, HSAttnBackend
    from sglang_hs.settings import LayerGroups
    from sglang_hs.testing import small_pool

    pool = small_pool(LayerGroups((0,), (1,)), 1.0, 1.0, 8)
    backend = HSAttnBackend(NS(device="cpu", req_to_token_pool=NS(req_to_token=torch.zeros(1, 64)), token_to_kv_pool=pool))
    monkeypatch.setattr(nvcc, "find", lambda: found)
    with caplog.at_level(logging.WARNING, logger="sglang_hs"):
        backend._prepare_kernels(4)  # what a GPU server runs at start
    assert (NO_NVCC in caplog.text) == (found is None)


@pytest.mark.slow
def test_launcher_refuses_a_port_in_use_at_once(prepared):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cmd = [sys.executable, "-m", "sglang_hs.launch_server", "--model-path", prepared, "--device", "cpu",
               "--port", str(taken.getsockname()[1])]
        r = subprocess.run(cmd, env=cpu_env(), capture_output=True, text=True, timeout=300)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("sglang_hs: error:")]
    assert r.returncode == 2 and len(lines) == 1 and "cannot listen on 127.0.0.1:" in lines[0], r.stderr[-2000:]
