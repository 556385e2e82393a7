"""HieraSparse KV block format, reference attention and GPU kernels.

Pure PyTorch, device-agnostic; imports only torch. The block format is specified in
``hs_kernels.format``; kernels/API.md lists the public API.
"""

from . import format, gpu
from .attention import merge_attention, streaming_keys, window_start
from .gpu import (  # GPU kernels on CUDA, else the reference
    PrefixSplit, compress_magnitude, decode_attention, prefill_attention, prefill_compressed_attention, prefix_splits,
    stream_key_blocks, streaming_attention, write_tokens)
from .chunk_blocks import ChunkBlocks, chunk_as_dense, compress_chunk
from .compressed_kv import CompressedKV, compress_sequence, to_blocks
from .compressor import compress_24, compress_blocks, decompress_24, decompress_blocks
from .format import (
    BLOCK_SIZE,
    DEFAULT_SINK_TOKENS,
    DEFAULT_WINDOW_TOKENS,
    INDEX_DTYPE,
    META_DTYPE,
    NO_BLOCK,
    encode_dense,
    encode_sparse,
    is_sparse,
    new_index_map,
    slot_of,
)
from .pool import BlockPool
from .pruner import (
    MaskProducer,
    SparsityConfig,
    block_loss,
    element_mask,
    eligible_blocks,
    eligible_range,
    loss_free_selection,
    magnitude_mask,
    prune_blocks,
    select_sparse_blocks,
)
from .size_model import (
    SizeBreakdown,
    baseline_bytes,
    compression_ratio,
    decode_speedup,
    measured_bytes,
    measured_sparsity,
    model_bytes,
    prefill_speedup,
)

__all__ = [
    "format", "BLOCK_SIZE", "DEFAULT_SINK_TOKENS", "DEFAULT_WINDOW_TOKENS", "INDEX_DTYPE", "META_DTYPE",
    "NO_BLOCK", "encode_dense", "encode_sparse", "is_sparse", "new_index_map", "slot_of",
    "compress_24", "decompress_24", "compress_blocks", "decompress_blocks",
    "MaskProducer", "SparsityConfig", "magnitude_mask", "element_mask", "block_loss", "eligible_blocks", "eligible_range",
    "select_sparse_blocks", "loss_free_selection", "prune_blocks",
    "BlockPool", "CompressedKV", "compress_sequence", "to_blocks", "ChunkBlocks", "compress_chunk", "chunk_as_dense",
    "gpu", "compress_magnitude", "decode_attention", "prefill_attention", "prefill_compressed_attention",
    "PrefixSplit", "prefix_splits",
    "streaming_attention", "streaming_keys", "stream_key_blocks", "write_tokens",
    "window_start", "merge_attention",
    "SizeBreakdown", "baseline_bytes", "model_bytes", "compression_ratio", "prefill_speedup",
    "decode_speedup", "measured_bytes", "measured_sparsity",
]
