"""HSMetrics: the hs stats as Prometheus gauges ``sglang_hs:<name>`` when SGLang runs with --enable-metrics.

SGLang's metrics are prometheus_client in multiprocess mode (PROMETHEUS_MULTIPROC_DIR is set before its
processes start); gauges made in the scheduler process, where the stats live, are served by SGLang's
own GET /metrics next to its ``sglang:*`` metrics, with the same multiprocess mode it uses for gauges.
"""

from __future__ import annotations

GAUGES = {
    "prefix_queries": "prefix matches asked of the hs radix cache",
    "prefix_query_tokens": "tokens of those matches' keys",
    "prefix_hit_tokens": "tokens reused from the cache",
    "prefix_cut_backs": "matches shortened to a stored streaming window",
    "blocks_compressed": "retrieval blocks moved from dense to 2:4 sparse slots",
    "stream_pages_trimmed": "streaming pages given back outside every window",
    "dense_blocks": "retrieval blocks held dense",
    "sparse_blocks": "retrieval blocks held 2:4 compressed",
    "dense_bytes": "bytes of dense retrieval blocks",
    "sparse_bytes": "bytes of compressed retrieval blocks (values + metadata)",
    "stream_pages": "pages holding streaming-group KV",
    "stream_pages_pinned": "of those, pages pinned as the window before a branch point or a prompt's end",
    "stream_bytes": "bytes of streaming-group KV",
    "compression_ratio": "retrieval blocks: dense-equivalent bytes / stored bytes",
    "pages_in_use": "pool pages in use",
}


def metrics_enabled() -> bool:
    try:
        from sglang.srt.runtime_context import get_observability

        return bool(get_observability().enable_metrics)
    except Exception:  # no runtime context (tests that build the stats by hand)
        return False


class HSMetrics:
    def __init__(self):
        from prometheus_client import Gauge  # after SGLang set PROMETHEUS_MULTIPROC_DIR

        self.gauges = {k: Gauge(f"sglang_hs:{k}", doc, multiprocess_mode="mostrecent") for k, doc in GAUGES.items()}

    def update(self, snapshot: dict):
        for key, gauge in self.gauges.items():
            if isinstance(snapshot.get(key), (int, float)):
                gauge.set(snapshot[key])
