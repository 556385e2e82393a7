"""The SGLang plugin (entry point group ``sglang.srt.plugins``, name ``hs``): ``register()``.

Uses only SGLang's extension points: the attention backend registry and its CLI choices, the
radix-cache backend registry, the warm-up registry (``warmup.py``), and HookRegistry hooks on the KV
pool / allocator builders, the pool sizing (bytes per token, the reserve's bytes), ServerArgs
validation, the tokenizer manager's request validation (token ids within the vocabulary) and, for the
overlap scheduler, the scheduler's barrier after a launch, its batch formation, result processing and
which batches it overlaps. Everything is inert
unless ``--attention-backend hs`` is selected.
"""

from __future__ import annotations

import logging
import os

from .chunked_prefill import prefill_chunk
from .settings import CONSERVATIVE, RESERVE_REQUESTS, HSConfigError, HSSettings, resolve

logger = logging.getLogger("sglang_hs")

BACKEND = "hs"
CONSECUTIVE_PREFILL_OVERLAP = "SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP"
_registered = False
_settings: HSSettings | None = None


def is_registered() -> bool:
    return _registered


def settings_for(server_args, tp_size: int = 1, tp_rank: int = 0) -> HSSettings:
    """This process's HSSettings (resolved once)."""
    global _settings
    if _settings is None:
        # under the overlap scheduler a prefill's blocks are compressed once its results are processed, after the
        # next batch is formed: two chunks' blocks can be dense at once
        chunks_in_flight = 1 if server_args.disable_overlap_schedule else 2
        _settings = resolve(server_args.model_path, page_size=server_args.page_size, tp_size=tp_size, tp_rank=tp_rank,
                            chunk_tokens=chunks_in_flight * (prefill_chunk(server_args) or server_args.context_length),
                            running_requests=server_args.max_running_requests)
    return _settings


def _active(server_args) -> bool:
    return getattr(server_args, "attention_backend", None) == BACKEND


# ---- hooks ----

def _check_server_args(self, *args, **kwargs):
    """Before ServerArgs.__post_init__ (fields still writable): fill hs defaults, refuse what it cannot serve."""
    if not _active(self):
        return
    if self.radix_cache_backend is None:
        self.radix_cache_backend = BACKEND
    if self.page_size is None:
        self.page_size = 64
    # under the overlap scheduler a prefill's results are processed after the next batch's launch, and its radix
    # cache work (compression, trims) syncs on that batch: SGLang's own switch keeps consecutive prefills apart
    # (at batch 8 x 4K, TTFT 0.90 -> 0.65 s, measured before the first tokens were sent ahead of that work); the
    # user's setting stands
    os.environ.setdefault(CONSECUTIVE_PREFILL_OVERLAP, "1")
    # prefill's per-request Python loops and host-side bookkeeping cannot be captured whole; SGLang's breakable
    # prefill graphs run attention eagerly between captured segments (opt-in: same tokens, 98 s more start-up, no gain
    # on a cached question, whose time is hs's eager attention; docs/performance.md); decode is captured whole
    # ("full"), its step metadata included
    if getattr(self, "cuda_graph_backend_prefill", None) != "breakable":
        self.disable_prefill_cuda_graph = True
    for name, allowed in (("cuda_graph_backend_prefill", (None, "breakable", "disabled")),
                          ("cuda_graph_backend_decode", (None, "full", "disabled"))):
        if getattr(self, name, None) not in allowed:
            raise HSConfigError(f"--{name.replace('_', '-')} {getattr(self, name)} is not supported with --attention-backend hs "
                                "(decode CUDA graphs: full or disabled; prefill: breakable or disabled)")
    if getattr(self, "cuda_graph_config", None) is not None:
        raise HSConfigError("--cuda-graph-config is not supported with --attention-backend hs (use --cuda-graph-max-bs-decode, "
                            "--disable-cuda-graph)")
    for name in ("prefill_attention_backend", "decode_attention_backend"):
        if getattr(self, name, None) not in (None, BACKEND):
            raise HSConfigError(f"--{name.replace('_', '-')} {getattr(self, name)} cannot be mixed with --attention-backend hs")
    if getattr(self, "speculative_algorithm", None):
        raise HSConfigError("speculative decoding is not supported with --attention-backend hs")
    if getattr(self, "enable_hierarchical_cache", False):
        raise HSConfigError("--enable-hierarchical-cache is not supported with --attention-backend hs")
    if getattr(self, "enable_mixed_chunk", False):
        raise HSConfigError("--enable-mixed-chunk is not supported with --attention-backend hs")
    if getattr(self, "kv_cache_dtype", "auto") not in ("auto", "bf16", "bfloat16"):
        raise HSConfigError(f"--kv-cache-dtype {self.kv_cache_dtype} is not supported with --attention-backend hs (its "
                            "dense and 2:4 blocks hold the model's dtype: auto, or bf16)")
    if self.radix_cache_backend != BACKEND:
        raise HSConfigError(f"--radix-cache-backend {self.radix_cache_backend} cannot be used with --attention-backend hs (it needs 'hs')")
    if self.warmups is None and _on_cuda(self):
        from . import warmup

        self.warmups = warmup.NAME  # the prefill variants compiled before the server listens
    settings = resolve(self.model_path, page_size=self.page_size, tp_size=self.tp_size)  # raises HSConfigError
    if settings.recipe == CONSERVATIVE:
        logger.warning("hs: %s has no calibrated setting (hs-eval calibrate writes one); serving the conservative "
                       "recipe, %s (README, 'Quality-safe defaults')", self.model_path, settings.describe())
    if settings.dense_reserve is None and self.max_running_requests is None:
        # the auto reserve holds this many requests' sinks and windows; SGLang admits requests by free
        # pages alone, and more running requests could use up the dense blocks (a scheduler error)
        self.max_running_requests = RESERVE_REQUESTS


def _check_input_ids(self, obj, input_ids, *args, **kwargs):
    """Before TokenizerManager._validate_one_request: refuse token ids outside the vocabulary (a 400). SGLang 0.5.17
    has such a check but never calls it, and one such id crashes the scheduler, failing every running request."""
    if input_ids and _active(self.server_args):
        vocab, low, high = self.model_config.vocab_size, min(input_ids), max(input_ids)
        if low < 0 or high >= vocab:
            raise ValueError(f"input_ids hold token id {low if low < 0 else high}, outside the vocabulary [0, {vocab})")


def _on_cuda(server_args) -> bool:
    """Whether the server will run on CUDA (before ServerArgs resolves ``device`` None)."""
    if server_args.device is not None:
        return server_args.device == "cuda"
    import torch

    return torch.cuda.is_available()


def _build_pool(original, self, *, sizes, **kwargs):
    if not _active(self.server_args):
        return original(self, sizes=sizes, **kwargs)
    from sglang.srt.runtime_context import get_parallel

    from .kv_pool import HSKVPool

    par = get_parallel()
    settings = settings_for(self.server_args, par.attn_tp_size, par.attn_tp_rank)
    pool = HSKVPool(
        sizes.max_total_num_tokens,
        page_size=self.pool_page_size,
        dtype=self.kv_cache_dtype,
        head_num=self.model_config.get_num_kv_heads(par.attn_tp_size),
        head_dim=self.model_config.head_dim,
        layer_num=self.layer_info.num_effective_layers,
        device=self.device,
        settings=settings,
        start_layer=self.layer_info.start_layer,
        end_layer=self.layer_info.end_layer,
    )
    warning = pool.chunk_warning(min(prefill_chunk(self.server_args) or 1 << 62, sizes.max_total_num_tokens,
                                     self.model_config.context_len))
    if warning:
        logger.warning("hs: %s", warning)
    logger.info("hs: KV pool of %d tokens, %d reserve pages (dense blocks and stream slots for the prefill chunks in flight and "
                "the running requests' sinks and windows)", sizes.max_total_num_tokens, settings.reserve_pages(pool.num_pages))
    return pool


def _build_allocator(original, self, *, sizes, token_to_kv_pool, token_to_kv_pool_allocator=None, **kwargs):
    if not _active(self.server_args) or token_to_kv_pool_allocator is not None:
        return original(self, sizes=sizes, token_to_kv_pool=token_to_kv_pool,
                        token_to_kv_pool_allocator=token_to_kv_pool_allocator, **kwargs)
    from .allocator import HSTokenAllocator

    return HSTokenAllocator(sizes.max_total_num_tokens, page_size=self.pool_page_size, dtype=self.kv_cache_dtype,
                            device=self.device, kvcache=token_to_kv_pool, need_sort=False)


def _cell_size(original, self, kvc, num_layers):
    if not _active(kvc.server_args):
        return original(self, kvc, num_layers)
    import torch
    from sglang.srt.runtime_context import get_parallel

    from .kv_pool import bytes_per_token, reserve_page_bytes

    par = get_parallel()
    settings = settings_for(kvc.server_args, par.attn_tp_size, par.attn_tp_rank)
    layers = settings.layers[kvc.layer_info.start_layer:kvc.layer_info.end_layer]
    value_bytes = torch._utils._element_size(kvc.kv_cache_dtype)
    if settings.dense_reserve is None:
        self.hs_reserve = (settings.auto_reserve_pages, reserve_page_bytes(settings, kvc.model_config.head_dim, value_bytes, layers))
    return int(round(bytes_per_token(settings, kvc.model_config.head_dim, value_bytes, layers)))


def _pool_sizes(original, self, available_bytes, page_size):
    """The auto reserve is a fixed number of pages (not per token): its bytes come off the budget first.
    A budget too small for all of it gets the most pages that each carry their reserve share (the
    pool caps the reserve at its own size)."""
    pages, page_bytes = getattr(self, "hs_reserve", (0, 0))
    per_page = self._cell_size * page_size
    if available_bytes >= pages * (per_page + page_bytes):
        return original(self, available_bytes - pages * page_bytes, page_size)
    return original(self, available_bytes * per_page // (per_page + page_bytes), page_size)


def _support_triton(original, backend):
    """SGLang picks Triton helpers unless the backend is on its hard-coded torch list; hs is torch."""
    return False if backend == BACKEND else original(backend)


def _get_last_loc(original, req_to_token, req_pool_indices, prefix_lens):
    from sglang.srt.mem_cache.allocation import get_last_loc_torch
    from sglang.srt.runtime_context import get_exec

    if get_exec().kernel.attention_backend == BACKEND:
        return get_last_loc_torch(req_to_token, req_pool_indices, prefix_lens)
    return original(req_to_token, req_pool_indices, prefix_lens)


def _no_fused_kv_write(original, forward_batch, *args, **kwargs):
    """Some models (Qwen3-MoE on CUDA in bf16) let their RoPE kernel write K/V straight into SGLang's flat buffers; hs
    keeps K/V in block pools and writes them itself, so that path stays off."""
    from sglang.srt.runtime_context import get_exec

    if get_exec().kernel.attention_backend == BACKEND:
        return False
    return original(forward_batch, *args, **kwargs)


def _whole_forward_barrier(original, scheduler):
    """Under the overlap scheduler, the work queued after a launch (result processing: compression, trims, freed
    slots reused) must wait for the whole forward in flight, which reads the pools until its last layer; SGLang's fast
    path would wait only for a decode graph's snapshot of its inputs."""
    runner = getattr(scheduler.model_worker, "war_fastpath_runner", None)
    if runner is not None and _active(scheduler.server_args):
        runner.war_fastpath_read_done_event = None
    return original(scheduler)


def _register_formed_windows(plan, scheduler, *args, **kwargs):
    """After SGLang forms an extend batch: the pages its requests will read are registered (``register_window``, as the
    backend does again at the launch) from now on. Under the overlap scheduler SGLang may process the previous batch's
    results, and so trim, between forming a batch, whose prefix matches counted on those windows, and launching it."""
    batch = getattr(plan, "batch_to_run", None)
    if batch is None or not _active(scheduler.server_args) or not batch.forward_mode.is_extend():
        return
    pool, req_to_token = scheduler.tree_cache.pool, scheduler.req_to_token_pool.req_to_token
    for req in batch.reqs:
        p, end = len(req.prefix_indices), req.extend_range.end
        pool.register_window(req.req_pool_idx, req_to_token[req.req_pool_idx, :end].long(), p, end)


def _outputs_before_pool_work(original, scheduler, batch, result, *args, **kwargs):
    """A prefilled batch's first tokens are sent before its requests' compression and trims (``outputs_first``):
    their host syncs would make the first tokens wait, under the overlap scheduler for the decode step in flight."""
    outputs_first = getattr(scheduler.tree_cache, "outputs_first", None)  # absent if SGLang wraps the cache
    if outputs_first is None or not (_active(scheduler.server_args) and batch.forward_mode.is_extend()):
        return original(scheduler, batch, result, *args, **kwargs)
    with outputs_first():
        return original(scheduler, batch, result, *args, **kwargs)


def _first_tokens_before_decode(original, scheduler, batch, last_batch=None):
    """Under the overlap scheduler, the decode step right after an hs prefill is launched once the prefill's results
    are processed (first tokens sent, prompt-end windows pinned, prompts compressed), as SGLang does for consecutive
    prefills: launched first, its own compression of the prompts (host syncs on the prefill in flight) came before
    the first tokens. The prefill's batch object may be the decode batch by now (SGLang runs it on in decode mode when
    nothing else runs), so the copy queued with its result says whether it was a prefill, and whether some request
    of it gets its first token (a middle chunk gets none: then SGLang's overlap stays). Requests that finish in that
    processing are still in the decode batch: their release waits for its launch (``_release_held``)."""
    if original(scheduler, batch, last_batch=last_batch):
        return True
    pending = getattr(scheduler, "result_queue", None)
    if not (_active(scheduler.server_args) and scheduler.server_args.disaggregation_mode == "null" and batch
            and batch.forward_mode.is_decode() and pending and pending[0][0].forward_mode.is_extend()
            and any(req.inflight_middle_chunks <= 0 for req in pending[0][0].reqs)):  # a middle chunk has no token
        return False
    scheduler.tree_cache.held_releases = []
    return True


def _hold_release(original, req, tree_cache, *args, **kwargs):
    held = getattr(tree_cache, "held_releases", None)
    if held is None:
        return original(req, tree_cache, *args, **kwargs)
    held.append((req, args, kwargs))


def _release_held(result, scheduler, *args, **kwargs):
    """Right after a launch: the releases held while the previous prefill's results were processed."""
    cache = getattr(scheduler, "tree_cache", None)
    held = getattr(cache, "held_releases", None)
    if held is not None:
        from sglang.srt.mem_cache import common

        cache.held_releases = None
        for req, a, kw in held:
            common.release_kv_cache(req, cache, *a, **kw)


def _prefill_graph_capture(original, runner, *args, **kwargs):
    """SGLang's prefill graph capture runs the attention of dummy requests (eagerly, at each break): the hs backend
    is told, so that they leave the pool's bookkeeping alone."""
    backend = runner.model_runner.attn_backend
    if not hasattr(backend, "capturing_prefill"):
        return original(runner, *args, **kwargs)
    backend.capturing_prefill = True
    try:
        return original(runner, *args, **kwargs)
    finally:
        backend.capturing_prefill = False


def _on_idle(scheduler, *args, **kwargs):
    """Before SGLang's idle housekeeping, which may sleep until a request comes (--sleep-on-idle): a publish after it
    would delay that request."""
    stats = getattr(getattr(scheduler, "tree_cache", None), "stats", None)
    if stats is not None:
        stats.on_idle()


# ---- registries ----

def _create_backend(runner):
    from .backend import HSAttnBackend

    return HSAttnBackend(runner)


def _create_radix_cache(ctx):
    from .radix_cache import HSRadixCache
    from .stats import HSStats

    pool = ctx.params.token_to_kv_pool_allocator.get_kvcache()
    if ctx.disable_radix_cache:
        ctx.params.disable = True
    return HSRadixCache(ctx.params, pool, HSStats())


def register() -> None:
    """Entry point: make 'hs' selectable as attention backend and radix cache. Idempotent."""
    global _registered
    if _registered:
        return
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS, register_attention_backend
    from sglang.srt.mem_cache.registry import get_radix_cache_factory, register_radix_cache_backend
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.srt.entrypoints.warmup import warmup
    from sglang.srt.server_args import ATTENTION_BACKEND_CHOICES, add_attention_backend_choices

    from . import warmup as hs_warmup
    from .stats import ENV_STATS_FILE, stats_file

    if BACKEND not in ATTENTION_BACKEND_CHOICES:
        add_attention_backend_choices([BACKEND])
    if BACKEND not in ATTENTION_BACKENDS:
        register_attention_backend(BACKEND)(_create_backend)
    if get_radix_cache_factory(BACKEND) is None:
        register_radix_cache_backend(BACKEND, _create_radix_cache)
    cfg = "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator"
    HookRegistry.register(f"{cfg}._build_token_to_kv_pool", _build_pool, HookType.AROUND)
    HookRegistry.register(f"{cfg}._build_token_to_kv_pool_allocator", _build_allocator, HookType.AROUND)
    HookRegistry.register("sglang.srt.model_executor.pool_configurator.DefaultPoolConfigurator._compute_cell_size",
                          _cell_size, HookType.AROUND)
    HookRegistry.register("sglang.srt.model_executor.pool_configurator.DefaultPoolConfigurator.calculate_pool_sizes",
                          _pool_sizes, HookType.AROUND)
    HookRegistry.register("sglang.srt.managers.scheduler.Scheduler.on_idle", _on_idle, HookType.BEFORE)
    HookRegistry.register("sglang.srt.managers.scheduler.Scheduler._apply_war_barrier", _whole_forward_barrier,
                          HookType.AROUND)
    HookRegistry.register("sglang.srt.managers.scheduler.Scheduler._apply_war_barrier", _release_held, HookType.AFTER)
    HookRegistry.register("sglang.srt.managers.scheduler.Scheduler.is_disable_overlap_for_batch",
                          _first_tokens_before_decode, HookType.AROUND)
    HookRegistry.register("sglang.srt.managers.scheduler_components.batch_result_processor.release_kv_cache",
                          _hold_release, HookType.AROUND)
    HookRegistry.register("sglang.srt.managers.scheduler.Scheduler.get_next_batch_to_run", _register_formed_windows,
                          HookType.AFTER)
    HookRegistry.register("sglang.srt.managers.scheduler.Scheduler.process_batch_result", _outputs_before_pool_work,
                          HookType.AROUND)
    HookRegistry.register("sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner.capture",
                          _prefill_graph_capture, HookType.AROUND)
    HookRegistry.register("sglang.srt.utils.common.support_triton", _support_triton, HookType.AROUND)
    HookRegistry.register("sglang.srt.mem_cache.allocation.get_last_loc", _get_last_loc, HookType.AROUND)
    HookRegistry.register("sglang.srt.models.utils.enable_fused_set_kv_buffer", _no_fused_kv_write, HookType.AROUND)
    HookRegistry.register("sglang.srt.server_args.ServerArgs.__post_init__", _check_server_args, HookType.BEFORE)
    HookRegistry.register("sglang.srt.managers.tokenizer_manager.TokenizerManager._validate_one_request",
                          _check_input_ids, HookType.BEFORE)
    warmup(hs_warmup.NAME)(hs_warmup.hs_prefill)
    # one stats file per server, shared by its processes (children inherit the environment)
    os.environ.setdefault(ENV_STATS_FILE, stats_file())
    _registered = True
    logger.info("sglang_hs plugin registered (attention backend, radix cache and KV pool 'hs')")
