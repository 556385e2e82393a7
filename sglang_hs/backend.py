"""HSAttnBackend: SGLang attention backend "hs" on hs_kernels' entry points (Triton kernels on CUDA,
the PyTorch reference elsewhere).

Per layer, the KV groups split (from the prepared checkpoint) into
  * retrieval groups: the full context as HieraSparse blocks. Cached blocks are read as stored
    (dense or 2:4 compressed, per the decode sparsity, through the index maps); the chunk being
    prefilled is seen through the prefill sparsity (its eligible blocks pruned 2:4 in flight).
  * streaming groups: sink + recent window only (hs_kernels.streaming_attention), read through the
    pool's stream slots (pages outside every window are trimmed, see stream_window.py).
Query heads follow their KV group (GQA). The two halves write disjoint query heads.
"""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

import torch
from hs_kernels import gpu as hs_gpu
from hs_kernels import nvcc
from hs_kernels import (
    BLOCK_SIZE,
    PrefixSplit,
    decode_attention,
    eligible_range,
    loss_free_selection,
    prefill_attention,
    prefix_splits,
    select_sparse_blocks,
    stream_key_blocks,
    streaming_attention,
    streaming_keys,
    window_start,
)
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

from .kv_pool import HSKVPool, LayerStore, head_index
from .ranges import ranged, span
from .settings import HSSettings
from .short_extends import RowBucket, ShortExtends

logger = logging.getLogger("sglang_hs")
NO_NVCC = ("nvcc not found (set CUDA_HOME to a CUDA toolkit): the kernels on the sparse tensor cores (the CUDA decode, and "
           "on sm_90 the prefill over cached 2:4 blocks) are built with it at start, so the Triton kernels serve instead")


def reference_warning(head_dim: int, dtype: torch.dtype, group: int) -> str | None:
    """Why attention on a GPU would run the PyTorch reference (no kernel for the model's head_dim, dtype or GQA ratio
    ``group``), or None."""
    if hs_gpu.kernels_cover(head_dim, dtype, group):
        return None
    return (f"no GPU kernel for head_dim {head_dim}, {dtype} and {group} query heads per KV head (the kernels take "
            "float16 or bfloat16, head_dim 64, 128 or 256, at most 64 query heads per KV head): attention runs the "
            "PyTorch reference, far slower")


def join_heads(parts: list, n_heads: int) -> torch.Tensor:
    """A layer's output ``[T, n_heads, D]`` from each kind's ``(heads, out [T, heads, D])``: one concatenation where
    the kinds' heads are slices that tile ``[0, n_heads)`` in some order (prepared checkpoints put each kind together),
    else written into a new tensor by index."""
    if all(isinstance(heads, slice) for heads, _ in parts):
        ordered = sorted(parts, key=lambda part: part[0].start)
        bounds = [heads.start for heads, _ in ordered] + [n_heads]
        if bounds[0] == 0 and all(heads.stop == stop for (heads, _), stop in zip(ordered, bounds[1:])):
            return ordered[0][1] if len(ordered) == 1 else torch.cat([out for _, out in ordered], dim=1)
    first = parts[0][1]
    joined = first.new_empty(first.shape[0], n_heads, first.shape[2])
    for heads, out in parts:
        joined[:, heads] = out
    return joined


class ExtendSeq(NamedTuple):
    """One sequence of an extend batch: its rows ``[start, start + length)`` of the batch, at
    positions ``prefix ..``; each retrieval layer's index maps of its cached prefix (``HSKVPool.prefix_maps``);
    streaming keys (stream rows and int32 positions ``[1, N]``, and their ``stream_key_blocks``) and int32 query
    positions ``[1, length]``; ``splits``, filled at its first retrieval layer (``_prefix_reads``): each layer's
    prefix index maps and ``PrefixSplit`` where the CUDA prefix path may take the sequence."""
    start: int
    prefix: int
    length: int
    maps: dict
    stream_rows: torch.Tensor | None
    kpos: torch.Tensor | None
    key_blocks: tuple[torch.Tensor, torch.Tensor] | None
    qpos: torch.Tensor
    splits: dict


class DecodeStep(NamedTuple):
    """What every layer of a decode step reads the same way (``step_metadata``): each sequence's int32 block pages
    ``[B, max_blocks]`` (the decode kernels read each layer's index maps through them), int32 sequence lengths
    ``[B]``; with streaming groups, stream rows ``[B, span]``, int32 key positions ``[B, span]`` and their
    ``stream_key_blocks`` (lowest, highest ``[B, span / 64]``), int32 query positions ``[B, 1]`` (else None)."""
    pages: torch.Tensor
    seq_lens: torch.Tensor
    stream_rows: torch.Tensor | None = None
    kpos: torch.Tensor | None = None
    block_lo: torch.Tensor | None = None
    block_hi: torch.Tensor | None = None
    qpos: torch.Tensor | None = None
    groups: torch.Tensor | None = None


class HSAttnBackend(AttentionBackend):
    def __init__(self, model_runner):
        super().__init__()
        self.device = model_runner.device
        self.req_to_token_pool = model_runner.req_to_token_pool
        self.pool: HSKVPool = model_runner.token_to_kv_pool
        if not isinstance(self.pool, HSKVPool):
            raise RuntimeError("attention backend 'hs' needs the hs KV pool; start through sglang_hs (plugin not loaded in this process?)")
        self.settings: HSSettings = self.pool.settings
        on_kernels = False  # the GPU kernels take every layer (else the reference)
        if self.device != "cpu":  # on the CPU the reference is the path
            cfg = model_runner.model_config
            group = cfg.num_attention_heads // cfg.num_key_value_heads
            if warning := reference_warning(self.pool.head_dim, self.pool.dtype, group):
                logger.warning("hs: %s", warning)
            else:
                on_kernels = True
                if any(s.n_r for s in self.pool.layers):
                    self._prepare_kernels(group)
        self._heads = {}
        # decode streaming keys (hs_kernels.streaming_keys for every sequence at once): sink pages, then
        # whole pages covering any window
        self.sink_end = -(-self.settings.sink_tokens // BLOCK_SIZE) * BLOCK_SIZE
        self._stream_span = self.sink_end + -(-(self.settings.window_tokens + BLOCK_SIZE - 1) // BLOCK_SIZE) * BLOCK_SIZE
        self._decode = None  # per decode step, shared by all layers (step_metadata, at the first layer)
        self._width = None  # its block width: the longest sequence's (eager), or every graph's fixed one
        self.max_blocks = -(-self.req_to_token_pool.req_to_token.shape[1] // BLOCK_SIZE)  # any request's
        self._extend: list[ExtendSeq] | None = []  # per extend, likewise (_extend_metadata; None: not yet built)
        self._extend_args: list[tuple] = []  # its sequences' (locs, start, prefix, length)
        # the CUDA decode's balanced splits sum a row's blocks in a varying order: not under SGLang's deterministic mode
        self.balance = not (on_kernels and model_runner.server_args.enable_deterministic_inference)
        # the reference syncs the host, which a CUDA graph cannot hold; --disable-cuda-graph turns ours off too
        graphs = on_kernels and self.settings.extend_graph_tokens and not model_runner.server_args.disable_cuda_graph
        self.short_extends = None
        if graphs:  # the Triton decode packs an extend's rows (the CUDA decode, when asked for, reads each row's itself)
            tile_rows = 1 if self.settings.decode_kernel == "cuda" else hs_gpu.decode_tile_rows(group, self.pool.head_dim)
            self.short_extends = ShortExtends(self, self.settings.extend_graph_tokens, tile_rows=tile_rows)
        if self.settings.extend_graph_tokens and not graphs and self.device != "cpu":
            logger.info("hs: short extends (--hs-extend-graph-tokens) off: they replay CUDA graphs of the GPU kernels "
                        "(not the reference path, not with --disable-cuda-graph)")
        self._rows: RowBucket | None = None  # this extend's decode rows, where short_extends takes it
        self._prefilled: dict[int, int] = {}  # the last extend's rows -> tokens (_decode_bookkeeping)
        self.capturing_prefill = False  # SGLang is capturing prefill graphs (the plugin says so)

    def init_forward_metadata(self, forward_batch):
        """Eager forward. Before an extend: protect the streaming pages each request reads (its
        window before the prefix may be shared) and, unless it runs as decode rows (``short_extends``), resolve the
        layer-independent reads of each sequence (``_extend_metadata``). Before a decode step: ``_decode_bookkeeping``, then the
        step's layer-independent reads (``step_metadata``, at the first layer)."""
        mode = forward_batch.forward_mode
        if mode.is_extend():
            rows = forward_batch.req_pool_indices.tolist()
            req_to_token = self.req_to_token_pool.req_to_token
            self._extend_args = []
            self._prefilled = {}
            start = 0
            for row, p, t in zip(rows, forward_batch.extend_prefix_lens_cpu, forward_batch.extend_seq_lens_cpu):
                p, t = int(p), int(t)
                locs = req_to_token[row, :p + t].long()
                if not self.capturing_prefill:  # a capture's dummy requests touch only SGLang's padding page
                    self.pool.register_window(row, locs, p, p + t)
                    self.pool.forget_row(row)
                    self._prefilled[row] = p + t
                self._extend_args.append((locs, start, p, t))
                start += t
            short = self.short_extends if not self.capturing_prefill else None
            self._rows = short.begin(forward_batch) if short else None
            self._extend = None
            if self._rows is None:  # decode rows read none of it
                self._extend_seqs()
        elif mode.is_decode():
            self._decode_bookkeeping(forward_batch)
            self._width = None

    def _decode_bookkeeping(self, forward_batch):
        """A sequence whose last page just filled compresses what left its window and gives back streaming pages no
        query can see; one whose prefill was the last forward compresses its prompt as the radix cache will once the
        prefill's results are processed (with the first output token counted), so that cached and cold prompts decode
        alike wherever those results come after this step's launch (the plugin processes them first where it can, and
        ``compress_row``'s memo then makes this call free). Host work, outside any CUDA graph; the rows are read from
        the GPU only on such steps."""
        lens = forward_batch.seq_lens_cpu.tolist()
        prefilled, self._prefilled = self._prefilled, {}
        filled = [n - 1 >= BLOCK_SIZE and (n - 1) % BLOCK_SIZE == 0 for n in lens]
        if not prefilled and not any(filled):
            return
        req_to_token = self.req_to_token_pool.req_to_token
        for row, n, page_filled in zip(forward_batch.req_pool_indices.tolist(), lens, filled):
            if prefilled.get(row) == n - 1:
                # no trim: the radix cache pins the window before the prompt's last page when it processes the
                # prefill's results, then trims; were those results to come after this launch, a trim here would
                # drop that window
                self.pool.compress_row(row, req_to_token[row, :n].long(), n)
            elif page_filled:
                done = n - 1  # tokens stored before this step's token
                locs = req_to_token[row, :done].long()
                self.pool.compress_row(row, locs, done)
                self.pool.trim_stream(row, locs, done, running=True)

    # ---- CUDA graphs (decode only; the plugin turns prefill graphs off) ----

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int):
        """Nothing static: a graph computes its step's metadata at its first layer, from its input buffers, over
        block pages up to the longest context (``max_blocks``)."""

    def get_cuda_graph_seq_len_fill_value(self):
        return 1

    def init_forward_metadata_out_graph(self, forward_batch, in_capture: bool = False):
        """Before capturing (``in_capture``) or replaying a decode graph: the bookkeeping (not at capture). The step's
        metadata is then captured in the graph (``forward_decode``'s first layer): no host work for it at replay."""
        if not in_capture:
            self._decode_bookkeeping(forward_batch)
        self._width = self.max_blocks

    # ---- helpers ----

    def _query_heads(self, layer, store: LayerStore):
        """Query-head indices of the retrieval and streaming groups of ``layer``."""
        key = layer.layer_id
        if key not in self._heads:
            gs = layer.tp_q_head_num // layer.tp_k_head_num
            self._heads[key] = tuple(head_index(g, gs, self.device) for g in (store.groups.retrieval, store.groups.streaming))
        return self._heads[key]

    @staticmethod
    def _check_layer(layer):
        if layer.is_cross_attention or getattr(layer, "logit_cap", 0) or (layer.sliding_window_size or -1) > -1:
            raise ValueError("attention backend 'hs' supports plain causal self-attention only (no cross attention, logit cap or sliding window)")
        if layer.qk_head_dim != layer.v_head_dim:
            raise ValueError("attention backend 'hs' needs equal K and V head dims")

    def _prepare_kernels(self, group: int) -> None:
        """At start-up, for the retrieval groups on the GPU (``group`` query heads per KV head): check
        ``--hs-decode-kernel cuda``, and build (or load) the CUDA decode and prefill kernels where they apply, so that
        no request waits on nvcc."""
        from hs_kernels import cuda_decode, cuda_prefill

        if nvcc.find() is None:
            logger.warning("hs: %s", NO_NVCC)
        if self.settings.decode_kernel != "triton":
            fits = cuda_decode.supports(self.pool.head_dim, group)
            if self.settings.decode_kernel == "cuda" and not fits:
                raise RuntimeError(f"--hs-decode-kernel cuda needs nvcc (set CUDA_HOME), an sm_80+ GPU, head_dim in "
                                   f"{cuda_decode.HEAD_DIMS} and at most {cuda_decode.MAX_GROUP} query heads per KV head")
            if (fits and self.pool.dtype in (torch.float16, torch.bfloat16)
                    and (self.settings.decode_kernel == "cuda" or cuda_decode.built())):
                cuda_decode.warm_up(self.pool.head_dim, self.pool.dtype, torch.device(self.device))
        if self.pool.dtype in cuda_prefill.DTYPES and cuda_prefill.fits(self.pool.head_dim, group):
            cuda_prefill.built(group, self.pool.head_dim, self.pool.dtype)  # nvcc now, not under the first long chunk after a cached prefix

    def _save(self, layer, locs, k, v):
        """The new K/V of the tokens at ``locs`` (None: not saved) into the pool."""
        if locs is not None and k is not None and v is not None:
            d = layer.qk_head_dim
            self.pool.write(layer.layer_id, locs, k.view(-1, layer.tp_k_head_num, d), v.view(-1, layer.tp_k_head_num, d))

    def prunes_chunk(self, op: str, prefix_len: int, seq_len: int) -> bool:
        """Whether a block wholly inside the chunk ``[prefix_len, seq_len)`` may become sparse in prefill (not for a
        question in the window, a chunk inside one block, ...)."""
        cfg = self.settings.prefill
        first = -(-prefix_len // BLOCK_SIZE)  # first block wholly in the chunk
        return cfg.sparsity(op) > 0.0 and eligible_range(seq_len, cfg.sink_tokens, cfg.window_tokens)[1] > first

    @ranged("hs.prune_chunk")
    def _prune_chunk(self, x: torch.Tensor, op: str, prefix_len: int, seq_len: int) -> torch.Tensor:
        """The chunk's own K or V ``[t, n_r, D]`` as prefill attention sees it (prefill sparsity):
        the blocks wholly inside the chunk are candidates (the pruner's selection over the
        sequence's blocks, the others never chosen); only they are read."""
        if not self.prunes_chunk(op, prefix_len, seq_len):
            return x
        cfg = self.settings.prefill
        s = cfg.sparsity(op)
        first = -(-prefix_len // BLOCK_SIZE)
        skip = first * BLOCK_SIZE - prefix_len  # the chunk's tokens in the prefix's last block
        tiles = (x.shape[0] - skip) // BLOCK_SIZE  # a partial last block is never sparse
        sparse = loss_free_selection(seq_len, s, cfg.sink_tokens, cfg.window_tokens, x.device)
        if sparse is None:
            loss = torch.full((x.shape[1], -(-seq_len // BLOCK_SIZE)), math.inf, device=x.device)
            loss[:, first:first + tiles] = hs_gpu.tile_loss(x, op, tiles, skip)
            sparse = select_sparse_blocks(loss, seq_len, s, cfg.sink_tokens, cfg.window_tokens)
        return hs_gpu.prune_tiles(x, op, sparse.expand(x.shape[1], -1)[:, first:first + tiles], skip)

    def _extend_seqs(self) -> list[ExtendSeq]:
        """This extend's ``ExtendSeq``s, built once: before its first layer, or where a layer of an extend that runs as
        decode rows falls back to the eager path (padded q, a failed capture)."""
        if self._extend is None:
            self._extend = [self._extend_metadata(*args) for args in self._extend_args]
        return self._extend

    @ranged("hs.extend_metadata")
    def _extend_metadata(self, locs: torch.Tensor, start: int, prefix: int, length: int) -> "ExtendSeq":
        """What every layer reads the same way for one sequence of an extend. Streaming keys:
        ``hs_kernels.streaming_keys`` (sink and window in whole pages; those pages are stored)."""
        n, prefix_blocks = prefix + length, -(-prefix // BLOCK_SIZE)
        maps = self.pool.prefix_maps(locs[:prefix_blocks * BLOCK_SIZE:BLOCK_SIZE] // BLOCK_SIZE)
        rows = kpos = blocks = None
        if self.pool.has_stream:
            kpos = streaming_keys(prefix, n, self.settings.sink_tokens, self.settings.window_tokens, locs.device)
            rows = self.pool.stream_rows(locs[kpos])[None]
            kpos = kpos.to(torch.int32)[None]
            blocks = stream_key_blocks(kpos)
        qpos = torch.arange(prefix, n, dtype=torch.int32, device=locs.device)[None]
        return ExtendSeq(start, prefix, length, maps, rows, kpos, blocks, qpos, {})

    @ranged("hs.prefix_reads")
    def _prefix_reads(self, seq: ExtendSeq, layer_id: int, q: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, PrefixSplit | None]:
        """The layer's prefix index maps and, where the CUDA prefix path may take the sequence's chunk
        (``hs_kernels.gpu.cuda_prefix_pays`` on the queries ``q`` of the retrieval heads, at the bar of a given split),
        its ``PrefixSplit``: found for every layer at the first (``prefix_splits``: one host sync per sequence and
        forward, not one per layer)."""
        if layer_id in seq.splits:
            return seq.splits[layer_id]
        store, maps = self.pool.layer(layer_id), seq.maps[layer_id]
        if not hs_gpu.cuda_prefix_pays(q, store.pools["k"], store.pools["v"], maps[0], seq.prefix, given=True):
            return (*maps, None)
        stores = [self.pool.layer(i) for i in seq.maps]
        splits = prefix_splits([(other.pools["k"], other.pools["v"], *m) for other, m in zip(stores, seq.maps.values())],
                               seq.prefix)
        seq.splits.update({i: (*m, split) for (i, m), split in zip(seq.maps.items(), splits)})
        return seq.splits[layer_id]

    @ranged("hs.decode_metadata")
    def step_metadata(self, rows: torch.Tensor, seq_lens: torch.Tensor, max_blocks: int,
                      grouped: bool = False, live: torch.Tensor | None = None) -> DecodeStep:
        """``DecodeStep`` of decode rows: the query of row ``i`` is the last of ``seq_lens[i]`` tokens of request row
        ``rows[i]``. The pages of each row's blocks ``[B, max_blocks]`` and, with streaming groups, the
        streaming keys ``_extend_metadata`` would pass for a query at ``n - 1``, for all rows at once as stream
        rows and positions ``[B, span]``, padded with empty keys (position -1) after each row's own (a key keeps
        its index: a row's result does not depend on the batch). ``max_blocks``: a fixed width (CUDA graphs),
        or the longest row's. Tensor work only (it runs inside captured graphs): padding rows, ``live`` false (bool
        ``[B]``; default: rows of length 1, a decode graph's fill value, since a decoding sequence holds its prompt and
        a new token), read page 0 and no keys. ``grouped``: rows of one request are consecutive, its queries at
        successive lengths (an extend's tokens); their blocks are then read once per tile of rows
        (``DecodeStep.groups``: the request rows, -1 for padding)."""
        rows = rows.long()
        req_to_token = self.req_to_token_pool.req_to_token
        live = (seq_lens > self.get_cuda_graph_seq_len_fill_value() if live is None else live)[:, None]
        pages = req_to_token[rows, :max_blocks * BLOCK_SIZE:BLOCK_SIZE] // BLOCK_SIZE  # int32, as the kernels take it
        pages = torch.where(live, pages.clamp_(0, self.pool.num_pages - 1), 0)  # rows past a sequence's end are not read
        groups = torch.where(live[:, 0], rows, -1).to(torch.int32) if grouped else None
        if not self.pool.has_stream:
            return DecodeStep(pages, seq_lens.to(torch.int32), groups=groups)
        sink = self.sink_end
        start = window_start(seq_lens - 1, self.settings.window_tokens).clamp(min=sink)[:, None]
        j = torch.arange(self._stream_span, device=seq_lens.device)
        pos = torch.where(j < sink, j, start + j - sink)
        valid = (pos < seq_lens[:, None]) & live
        locs = req_to_token[rows[:, None], torch.where(valid, pos, 0)].long()
        locs = torch.where(valid, locs, 0)  # page 0 (padding writes) always has a stream slot
        kpos = torch.where(valid, pos, -1).to(torch.int32)
        return DecodeStep(pages, seq_lens.to(torch.int32), self.pool.stream_rows(locs), kpos, *stream_key_blocks(kpos),
                          (seq_lens - 1).to(torch.int32)[:, None], groups)

    # ---- forward ----

    @ranged("hs.forward_extend")
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        self._check_layer(layer)
        if self._rows is not None and save_kv_cache and k is not None and q.shape[0] == self._rows.tokens:
            out = self.short_extends.layer(self._rows, q, k, v, layer)
            if out is not None:
                return out
        self._save(layer, forward_batch.out_cache_loc if save_kv_cache else None, k, v)
        store = self.pool.layer(layer.layer_id)
        heads_r, heads_s = self._query_heads(layer, store)
        d = layer.qk_head_dim
        q_ = q.reshape(-1, layer.tp_q_head_num, d)
        k_ = k.view(-1, layer.tp_k_head_num, d)
        v_ = v.view(-1, layer.tp_k_head_num, d)
        s = self.settings
        # one sequence and no padding: no slicing, and the kinds' outputs joined without copies
        seqs = self._extend_seqs()
        whole = len(seqs) == 1 and seqs[0].start == 0 and seqs[0].length == q_.shape[0]
        o = None if whole else torch.empty_like(q_)
        for seq in seqs:
            p, n, rows = seq.prefix, seq.prefix + seq.length, slice(seq.start, seq.start + seq.length)
            qi, ki, vi = (q_, k_, v_) if whole else (q_[rows], k_[rows], v_[rows])
            parts = []
            if store.n_r:
                qr = qi[:, heads_r]
                k_idx, v_idx, split = self._prefix_reads(seq, layer.layer_id, qr)
                kc = self._prune_chunk(ki[:, store.retrieval], "k", p, n)
                vc = self._prune_chunk(vi[:, store.retrieval], "v", p, n)
                with span("hs.retrieval_attention"):
                    out, _ = prefill_attention(qr, kc, vc, store.pools["k"], store.pools["v"],
                                               k_idx, v_idx, p, layer.scaling, split=split)
                parts.append((heads_r, out))
            if store.n_s:
                # unsplit, keys read in place: an eager extend is host-bound and a sink and window are a few blocks
                with span("hs.streaming_attention"):
                    out, _ = streaming_attention(qi[None, :, heads_s], seq.qpos, store.stream_k, store.stream_v, seq.kpos,
                                                 s.sink_tokens, s.window_tokens, layer.scaling, key_blocks=seq.key_blocks,
                                                 k_rows=seq.stream_rows, splits=1)
                parts.append((heads_s, out[0]))
            if whole:
                return join_heads(parts, layer.tp_q_head_num).reshape(-1, layer.tp_q_head_num * d)
            for heads, out in parts:
                o[rows, heads] = out
        return o.reshape(-1, layer.tp_q_head_num * d)

    @ranged("hs.forward_decode")
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        self._check_layer(layer)
        if layer.layer_id == self.pool.start_layer:  # once a step; inside a graph, captured with it
            width = self._width or -(-int(forward_batch.seq_lens_cpu.max()) // BLOCK_SIZE)
            self._decode = self.step_metadata(forward_batch.req_pool_indices, forward_batch.seq_lens, width)
        q_ = q.reshape(-1, layer.tp_q_head_num, layer.qk_head_dim)
        out = self.decode_layer(q_, k, v, layer, forward_batch.out_cache_loc if save_kv_cache else None, self._decode)
        return out.reshape(-1, layer.tp_q_head_num * layer.qk_head_dim)

    def decode_layer(self, q: torch.Tensor, k, v, layer, locs, step: DecodeStep) -> torch.Tensor:
        """One layer of decode rows (``step``): the rows' new K/V saved at ``locs`` (None: not saved), then each
        row's query ``q [B, H_q, D]`` over its keys. Returns ``[B, H_q, D]``; host syncs none."""
        self._save(layer, locs, k, v)
        store = self.pool.layer(layer.layer_id)
        heads_r, heads_s = self._query_heads(layer, store)
        parts = []
        if store.n_r:
            with span("hs.retrieval_attention"):
                out, _ = decode_attention(q[:, heads_r], store.pools["k"], store.pools["v"], store.index["k"],
                                          store.index["v"], step.seq_lens, layer.scaling,
                                          kernel=self.settings.decode_kernel, pages=step.pages, groups=step.groups,
                                          balance=self.balance)
            parts.append((heads_r, out))
        if store.n_s:
            with span("hs.streaming_attention"):
                out, _ = streaming_attention(q[:, None, heads_s], step.qpos, store.stream_k, store.stream_v, step.kpos,
                                             self.settings.sink_tokens, self.settings.window_tokens, layer.scaling,
                                             key_blocks=(step.block_lo, step.block_hi), k_rows=step.stream_rows)
            parts.append((heads_s, out[:, 0]))
        return join_heads(parts, layer.tp_q_head_num)

    def support_triton(self):
        return False
