"""HSRadixCache: SGLang's radix cache whose cached pages are HieraSparse blocks.

Before a request's pages enter the tree (after each prefill chunk and when it finishes), its
blocks that have left the dense sink/window are compressed in place per the decode sparsity
(dense slots -> 2:4 sparse slots, the page id and its tree position unchanged). A later request
that matches the prefix gets those same pages: the backend reads them through the index maps,
so nothing is recomputed or decompressed into the pool. Eviction goes through the allocator,
which returns every slot a page holds. Sink blocks are never compressed, and (radix trees evict
leaves first) a prefix's first pages are the last of it to go.

Streaming groups keep only checkpointed windows (stream_window.py). A match is therefore cut back
to the largest point whose streaming window is stored; SGLang recomputes the rest as usual. The
recomputed copies of pages the tree already holds hand their streaming KV to the tree's pages
before SGLang frees them as duplicates, then the sequence's pages no query can see are trimmed.
The windows before a cut-back match point and before each prompt's last page are pinned (kept until
their pages are freed), so requests branching there later resume there.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

import torch

from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

from .ranges import ranged
from .stats import HSStats


class HSRadixCache(RadixCache):
    def __init__(self, params, pool, stats: HSStats):
        self.pool = pool
        self.stats = stats
        self._internal_match = False
        self._deferred: list[tuple[int, int]] | None = None  # (row, tokens) while a batch's outputs go out first
        self.held_releases: list | None = None  # finished requests' releases, until the decode formed with them is launched
        super().__init__(params)
        if self.token_to_kv_pool_allocator is not None:
            self.token_to_kv_pool_allocator.tree_cache = self
        stats.attach(pool, self)

    @ranged("hs.match_prefix")
    def match_prefix(self, params):
        result = super().match_prefix(params)
        if self._internal_match:
            return result
        matched = len(result.device_indices)
        reusable = self.pool.reusable_prefix(result.device_indices)
        if reusable < matched:  # re-match the shorter key: the tree splits there
            self.pool.pin_window(result.device_indices)
            result = super().match_prefix(dataclasses.replace(params, key=params.key[:reusable]))
        self.stats.on_match(len(params.key), len(result.device_indices), cut_back=reusable < matched)
        return result

    def _locs(self, row: int, num_tokens: int) -> torch.Tensor:
        return self.req_to_token_pool.req_to_token[row, :num_tokens].long()  # a copy (req_to_token is int32)

    def _adopt_recomputed(self, req, token_ids: list) -> torch.Tensor:
        """Hand the streaming KV of pages the request recomputed to the tree's copies (before SGLang frees the
        request's duplicates); return the token locs of the tree's pages for the sequence's longest cached prefix."""
        key = RadixKey(token_ids, req.extra_key).page_aligned(self.page_size)
        if not len(key):
            return self._locs(req.req_pool_idx, 0)
        tree = super().match_prefix(MatchPrefixParams(key=key)).device_indices
        own = self._locs(req.req_pool_idx, len(tree))
        if len(tree):
            self.pool.adopt_stream(own[::self.page_size] // self.page_size, tree[::self.page_size] // self.page_size)
        return tree

    def _compress_and_trim(self, row: int, num_tokens: int, chunked: bool = False):
        """A running sequence's blocks that left its window are compressed (``chunked``, its prefill not done: at the
        chunk sparsity, ``HSSettings.chunk``), and its pages no query sees trimmed."""
        locs = self._locs(row, num_tokens)
        self.pool.compress_row(row, locs, num_tokens, self.pool.settings.chunk if chunked else None)
        self.pool.trim_stream(row, locs, num_tokens, running=True)

    @contextmanager
    def outputs_first(self):
        """Within: a prefilled request's compression and trim (host syncs, which under the overlap scheduler wait for
        the whole forward in flight) are deferred to the end, so the batch's first tokens are sent before them. The
        tree insertion is not deferred; nothing reads the pools in between (the next batch is formed afterwards)."""
        self._deferred = []
        try:
            yield
            deferred = self._deferred
        finally:
            self._deferred = None
        for row, num_tokens, chunked in deferred:
            self._compress_and_trim(row, num_tokens, chunked)
        if deferred:
            self.stats.maybe_publish()

    def _pin_prompt_end(self, req, filled: int):
        """Once a request's prompt is prefilled (``filled`` tokens, its pages now the tree's): pin the window before the
        longest prefix a request with the same prompt can match (its length - 1, page-aligned), so that a regenerated
        answer, another sample, or a next turn that re-tokenizes this answer differently resumes there, not at the last
        checkpoint."""
        end = (len(req.origin_input_ids) - 1) // self.page_size * self.page_size
        if end > 0 and filled >= len(req.origin_input_ids):
            self.pool.pin_window(self.req_to_token_pool.req_to_token[req.req_pool_idx, :end].long())

    @ranged("hs.cache_unfinished_req")
    def cache_unfinished_req(self, req, chunked=False):
        fill = req.get_fill_ids()
        if self.disable:  # no tree (--disable-radix-cache): the request keeps its own pages, as SGLang's ChunkCache does
            req.prefix_indices = self._locs(req.req_pool_idx, len(fill))
        else:
            self._adopt_recomputed(req, fill)
            self._internal_match = True
            try:
                super().cache_unfinished_req(req, chunked=chunked)  # req_to_token now holds the tree's pages
            finally:
                self._internal_match = False
            self._pin_prompt_end(req, len(fill))
        self.stats.changed()
        if self._deferred is not None:
            self._deferred.append((req.req_pool_idx, len(fill), chunked))
            return
        self._compress_and_trim(req.req_pool_idx, len(fill), chunked)
        self.stats.maybe_publish()

    @ranged("hs.cache_finished_req")
    def cache_finished_req(self, req, is_insert: bool = True, *, kv_len_to_handle: int):
        if not self.disable and is_insert and not self.disable_finished_insert:
            row, n = req.req_pool_idx, kv_len_to_handle
            locs = self._locs(row, n)
            self.pool.compress_row(row, locs, n)
            tree = self._adopt_recomputed(req, (req.origin_input_ids + req.output_ids)[:n])
            locs[:len(tree)] = tree  # trim the pages the sequence keeps, not its duplicates about to be freed
            self.pool.trim_stream(row, locs, n, running=False)
        else:
            self.pool.release_window(req.req_pool_idx)
        super().cache_finished_req(req, is_insert, kv_len_to_handle=kv_len_to_handle)
        self.stats.changed()  # published when the scheduler is idle (after SGLang's deferred frees)

    def evict(self, params):
        result = super().evict(params)
        self.stats.changed()
        return result

    def reset(self):
        super().reset()
        if hasattr(self, "stats"):
            self.stats.changed()
