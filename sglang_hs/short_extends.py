"""Short extends replayed from CUDA graphs (``--hs-extend-graph-tokens N``).

An eager extend layer costs the host about 0.7 ms whatever its size (five Triton launches and the Python around
them), so eagerly a 64-token question on a cached 4K prefix takes two to three times stock SGLang's time to its first
token (docs/performance.md). An extend of at most N tokens (questions on cached prefixes, short prompts)
with no chunk block pruned in flight runs instead as decode rows, one per query token (``HSAttnBackend.decode_layer``:
the tokens' K/V written, then the decode kernels over each row's blocks and the streaming kernel over its sink and
window). Those are the keys the prefill path reads, through work that depends on device tensors only: per bucket of
rows (8, 16, ... N) the rows' metadata and each layer are captured once in CUDA graphs and then replayed, a few copies
and one replay a layer. The Triton decode reads a request's blocks once for a tile of its rows
(``hs_kernels.gpu.decode_tile_rows``, 16 for Llama-3.1-8B), so a batch qualifies while the blocks its tiles read stay
within ``MAX_TILE_BLOCKS`` (``MAX_ROW_BLOCKS`` where each row reads its own).
"""

from __future__ import annotations

import logging

import torch
from hs_kernels import BLOCK_SIZE

from .ranges import ranged

logger = logging.getLogger("sglang_hs")

MIN_ROWS = 8
# bounds on the blocks an extend's rows read (per KV head, over all tiles) that keep their GPU time well under the
# eager extend's host time (about 15 ms for 32 layers; a tile's block read costs about nine of a row's: docs/kernels.md)
MAX_ROW_BLOCKS = 1 << 13  # each row reading its own blocks
MAX_TILE_BLOCKS = 1 << 11  # a request's rows sharing their reads a tile at a time


def bucket_sizes(max_tokens: int) -> list[int]:
    """Row counts that graphs are captured for: powers of two from ``MIN_ROWS`` below ``max_tokens``, then it."""
    sizes = []
    while (size := MIN_ROWS << len(sizes)) < max_tokens:
        sizes.append(size)
    return sizes + [max_tokens]


class CudaGraphs:
    """Captures calls into CUDA graphs, one memory pool per bucket (a bucket's graphs replay in the order they were
    captured: the metadata, then layer after layer)."""

    def __init__(self):
        self.pools = {}

    def __call__(self, fn, bucket: int):
        """``fn()`` run once (its kernels compile and load outside the capture), then captured: ``(graph, the
        captured call's outputs)``, which hold results only once the graph is replayed. Only this thread's CUDA
        calls are checked while capturing (SGLang's other threads go on)."""
        fn()
        if bucket not in self.pools:
            self.pools[bucket] = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pools[bucket], capture_error_mode="thread_local"):
            out = fn()
        return graph, out


class RowBucket:
    """Static inputs of ``size`` decode rows and the graphs that read them: request rows, sequence lengths and the
    count of real rows (the metadata graph's), token locations and q, k, v (each layer graph's). Rows past ``tokens``
    are padding: length 1, written to SGLang's padding page 0."""

    def __init__(self, size: int, device):
        self.size = size
        self.tokens = 0
        self.req_rows = torch.zeros(size, dtype=torch.int64, device=device)
        self.seq_lens = torch.ones(size, dtype=torch.int64, device=device)
        self.count = torch.zeros((), dtype=torch.int64, device=device)
        self.index = torch.arange(size, device=device)
        self.locs = torch.zeros(size, dtype=torch.int64, device=device)
        self.qkv = None  # [size, heads, D] each, at the first layer
        self.step = None  # (graph, DecodeStep)
        self.layers = {}  # layer id -> (graph, out [size, H_q, D])
        self.failed = False  # a capture failed: the bucket's extends run eagerly


class ShortExtends:
    """The backend's short extends: ``begin`` before a forward (the bucket, or None where the extend does not
    qualify), ``layer`` for each of its layers. ``capture``: ``CudaGraphs``' contract; ``tile_rows``: how many rows of
    one request share their reads (1: each row reads its own, through any decode kernel; more: the rows are grouped,
    ``HSAttnBackend.step_metadata``); ``max_row_blocks``: the bound on the blocks an extend's rows read (default
    ``MAX_ROW_BLOCKS`` for rows alone, ``MAX_TILE_BLOCKS`` for tiles)."""

    def __init__(self, backend, max_tokens: int, capture=None, max_row_blocks: int | None = None,
                 tile_rows: int = 1):
        self.backend = backend
        self.max_tokens, self.tile_rows = max_tokens, tile_rows
        self.max_row_blocks = max_row_blocks or (MAX_ROW_BLOCKS if tile_rows == 1 else MAX_TILE_BLOCKS)
        self.capture = capture or CudaGraphs()
        self.buckets = {size: None for size in bucket_sizes(max_tokens)}

    def fits(self, prefixes: list[int], lengths: list[int]) -> bool:
        """Whether an extend of sequences ``lengths`` tokens long after ``prefixes`` runs as decode rows."""
        pairs = list(zip(prefixes, lengths))
        return (0 < sum(lengths) <= self.max_tokens
                and not any(self.backend.prunes_chunk(op, p, p + t) for p, t in pairs for op in ("k", "v"))
                and self.block_reads(prefixes, lengths) <= self.max_row_blocks)

    def block_reads(self, prefixes: list[int], lengths: list[int]) -> int:
        """Blocks that the rows of an extend read per KV head: each tile of ``tile_rows`` rows reads the blocks of
        each request it holds rows of, once."""
        reads, first = 0, 0
        for p, t in zip(prefixes, lengths):
            tiles = (first + t - 1) // self.tile_rows - first // self.tile_rows + 1
            reads += tiles * -(-(p + t) // BLOCK_SIZE)
            first += t
        return reads

    @ranged("hs.short_extend_begin")
    def begin(self, forward_batch) -> RowBucket | None:
        """The extend's bucket, its static inputs filled and its rows' metadata replayed (captured at the bucket's
        first use); None where the extend does not qualify (``fits``)."""
        prefixes = [int(p) for p in forward_batch.extend_prefix_lens_cpu]
        lengths = [int(t) for t in forward_batch.extend_seq_lens_cpu]
        if forward_batch.positions.dim() != 1 or not self.fits(prefixes, lengths):
            return None
        tokens = sum(lengths)
        size = min(s for s in self.buckets if s >= tokens)
        bucket = self.buckets[size] = self.buckets[size] or RowBucket(size, forward_batch.positions.device)
        if bucket.failed:
            return None
        bucket.tokens = tokens
        bucket.req_rows[:tokens] = torch.repeat_interleave(
            forward_batch.req_pool_indices, forward_batch.extend_seq_lens, output_size=tokens)
        bucket.seq_lens[:tokens] = forward_batch.positions + 1
        bucket.seq_lens[tokens:] = 1
        bucket.count.fill_(tokens)
        bucket.locs[:tokens] = forward_batch.out_cache_loc
        bucket.locs[tokens:] = 0  # never an earlier forward's locations
        if bucket.step is None:
            bucket.step = self._capture(
                bucket, lambda: self.backend.step_metadata(bucket.req_rows, bucket.seq_lens, self.backend.max_blocks,
                                                           grouped=self.tile_rows > 1,
                                                           live=bucket.index < bucket.count))
            if bucket.failed:
                return None
        bucket.step[0].replay()
        return bucket

    @ranged("hs.short_extend_layer")
    def layer(self, bucket: RowBucket, q, k, v, layer) -> torch.Tensor | None:
        """The layer's output ``[T, H_q * D]`` for the extend's q, k, v (``[T, heads * D]``), its K/V saved; None
        (nothing done: the layer runs eagerly) where the bucket's graphs failed."""
        if bucket.failed:
            return None
        t, d = bucket.tokens, layer.qk_head_dim
        if bucket.qkv is None:
            bucket.qkv = tuple(q.new_zeros(bucket.size, h, d)
                               for h in (layer.tp_q_head_num, layer.tp_k_head_num, layer.tp_k_head_num))
        for static, x in zip(bucket.qkv, (q, k, v)):
            static[:t] = x.reshape(t, -1, d)
        entry = bucket.layers.get(layer.layer_id)
        if entry is None:
            entry = self._capture(bucket, lambda: self.backend.decode_layer(*bucket.qkv, layer, bucket.locs,
                                                                             bucket.step[1]))
            if bucket.failed:
                return None
            bucket.layers[layer.layer_id] = entry
        entry[0].replay()
        return entry[1][:t].reshape(t, -1)

    def _capture(self, bucket: RowBucket, fn):
        """``capture(fn)`` for ``bucket``; where it fails, the bucket is given up (``failed``), with one warning."""
        try:
            return self.capture(fn, bucket.size)
        except Exception as e:  # graphs only save host time: the eager extend still serves every request
            logger.warning("hs: extends of up to %d tokens run eagerly: capturing their CUDA graph failed (%s: %s)",
                           bucket.size, type(e).__name__, e)
            bucket.failed = True
            return None
