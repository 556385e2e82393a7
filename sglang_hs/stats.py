"""HSStats: compressed vs dense bytes, blocks by kind, prefix hits, pool slot accounting.

Kept in the scheduler process (which owns the pool and the radix cache), logged, and published as
JSON to a file that the HTTP server's GET /hs/stats reads (the two live in different processes),
and as Prometheus gauges when SGLang's metrics are on (metrics.py).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time

import hs_kernels
from hs_kernels import NO_BLOCK

from .metrics import HSMetrics, metrics_enabled

logger = logging.getLogger("sglang_hs")

ENV_STATS_FILE = "SGLANG_HS_STATS_FILE"
PUBLISH_QUIET_S = 0.25  # idle this long with nothing changed before the stats are published


def stats_file() -> str:
    return os.environ.get(ENV_STATS_FILE) or os.path.join(tempfile.gettempdir(), f"sglang_hs_stats_{os.getpid()}.json")


# the folders this process loaded the extension and its kernels from: which tree served (an A/B that swaps trees can
# check it did)
LOADED_CODE = {"sglang_hs": os.path.dirname(os.path.abspath(__file__)),
               "hs_kernels": os.path.dirname(os.path.abspath(hs_kernels.__file__))}


class HSStats:
    def __init__(self, path: str | None = None, log_interval_s: float = 30.0):
        self.path = path or stats_file()
        self.log_interval_s = log_interval_s
        self.pool = self.cache = None
        self.prefix_queries = self.prefix_query_tokens = self.prefix_hit_tokens = 0
        self.prefix_cut_backs = 0  # matches shortened to a stored streaming window
        self._last_log = self._last_publish = self._changed_at = 0.0  # equal: unpublished, so dirty
        self.metrics = None  # HSMetrics, made on first publish if SGLang's metrics are on

    def attach(self, pool, cache):
        self.pool, self.cache = pool, cache

    def on_match(self, query_tokens: int, hit_tokens: int, cut_back: bool = False):
        self.prefix_queries += 1
        self.prefix_cut_backs += int(cut_back)
        self.prefix_query_tokens += query_tokens
        self.prefix_hit_tokens += hit_tokens

    def snapshot(self) -> dict:
        out = {
            "prefix_queries": self.prefix_queries,
            "prefix_query_tokens": self.prefix_query_tokens,
            "prefix_hit_tokens": self.prefix_hit_tokens,
            "blocks_compressed": self.pool.blocks_compressed if self.pool is not None else 0,
            "stream_pages_trimmed": self.pool.stream_pages_trimmed if self.pool is not None else 0,
            "prefix_cut_backs": self.prefix_cut_backs,
            "code": LOADED_CODE,
        }
        if self.pool is not None:
            counts = self.pool.block_counts()
            out.update(counts)
            dense_equiv = (counts["dense_blocks"] + counts["sparse_blocks"]) and self._dense_block_bytes()
            stored = counts["dense_bytes"] + counts["sparse_bytes"]
            out["retrieval_dense_equivalent_bytes"] = (counts["dense_blocks"] + counts["sparse_blocks"]) * dense_equiv
            out["compression_ratio"] = out["retrieval_dense_equivalent_bytes"] / stored if stored else 1.0
            out["pool_bytes"] = self.pool.get_kv_size_bytes()
            out["pages_in_use"] = self.pages_in_use()
            out["head_dim"] = self.pool.head_dim
            out["value_bytes"] = self.pool.layers[0].pools["k"].dense.element_size()
            out["slot_problems"] = self.pool.slot_problems()
            out["settings"] = self.pool.settings.summary()
        if self.cache is not None:
            out["tree_tokens"] = self.cache.total_size()
            out["evictable_tokens"] = self.cache.evictable_size()
            alloc = self.cache.token_to_kv_pool_allocator
            out["free_pages"] = len(alloc.free_pages) + len(alloc.release_pages)
        return out

    def _dense_block_bytes(self) -> int:
        for layer in self.pool.layers:
            if layer.n_r:
                return layer.pools["k"].dense[0:1].nbytes
        return 0

    def pages_in_use(self) -> int:
        """Pages holding blocks (page 0, SGLang's padding page, excluded)."""
        for layer in self.pool.layers:
            if layer.n_r:
                return int((layer.index["k"][1:, 0] != NO_BLOCK).sum())
        return -1

    @property
    def dirty(self) -> bool:
        """Something changed since the last publish."""
        return self._changed_at >= self._last_publish

    def changed(self):
        self._changed_at = time.monotonic()

    def on_idle(self):
        """The scheduler is idle (SGLang calls this on every pass of its loop then, at least once a second): publish
        what changed once nothing has for ``PUBLISH_QUIET_S``, so that a client's next request, sent as its last
        answer ends, does not wait behind the snapshot."""
        if self.dirty and time.monotonic() - self._changed_at >= PUBLISH_QUIET_S:
            self.publish()

    def maybe_publish(self):
        """While the scheduler is busy (it may never go idle under load): at most once a second."""
        if time.monotonic() - self._last_publish >= 1.0:
            self.publish()

    def publish(self):
        now = time.monotonic()
        self._last_publish = now
        snap = self.snapshot()
        tmp = f"{self.path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(snap, f)
        os.replace(tmp, self.path)
        if self.metrics is None and metrics_enabled():
            self.metrics = HSMetrics()
        if self.metrics is not None:
            self.metrics.update(snap)
        if now - self._last_log >= self.log_interval_s:
            logger.info("hs stats: %s", {k: v for k, v in snap.items() if k not in ("settings", "code")})
            self._last_log = now


def read_published(path: str | None = None) -> dict:
    path = path or stats_file()
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"error": "no hs stats published yet"}
