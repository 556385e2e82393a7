"""HSKVPool: SGLang's token-to-KV pool for prepared models, in HieraSparse blocks.

One SGLang page (64 tokens) is one block. Per layer:
  * retrieval groups: a K and a V ``hs_kernels.BlockPool`` (dense slots + 2:4 sparse slots) and,
    per page, an int32 index map entry per retrieval group (``hs_kernels.format``). A page gets
    dense slots when SGLang allocates it; ``compress`` later moves its eligible blocks to sparse
    slots (per the decode sparsity); freeing the page returns whatever slots it holds.
  * streaming groups: plain per-token storage (they attend to sink + window only; the stored rest
    is what lets any cached prefix be reused, see sglang_hs/README.md).
Slots of a layer are shared by all its retrieval groups.
"""

from __future__ import annotations

import math

import torch
from hs_kernels import BLOCK_SIZE, NO_BLOCK, BlockPool, is_sparse, new_index_map, prune_blocks, slot_of
from sglang.srt.mem_cache.memory_pool import KVCache

from .settings import HSSettings
from .slot_stack import SlotStack

OPERANDS = ("k", "v")


def bytes_per_token(settings: HSSettings, head_dim: int, value_bytes: int, layers=None) -> float:
    """Pool bytes SGLang sizes by, per token of capacity (all layers of this rank)."""
    total = 0.0
    for groups in (settings.layers if layers is None else layers):
        n_r, n_s = len(groups.retrieval), len(groups.streaming)
        total += 2 * n_s * head_dim * value_bytes
        for s in (settings.decode.s_k, settings.decode.s_v):
            dense = (1 - s) + settings.dense_reserve
            sparse = s * (head_dim / 2 * value_bytes + head_dim / 8)  # values + int16 metadata
            total += n_r * (dense * head_dim * value_bytes + sparse + 4 / BLOCK_SIZE)  # + index entry
    return total


class LayerStore:
    """Retrieval block pools, index maps and free lists, and streaming storage, of one layer."""

    def __init__(self, settings: HSSettings, layer_id: int, num_pages: int, head_dim: int, dtype, device):
        groups = settings.groups(layer_id)
        self.retrieval = torch.tensor(groups.retrieval, dtype=torch.long)
        self.streaming = torch.tensor(groups.streaming, dtype=torch.long)
        self.n_r, self.n_s = len(groups.retrieval), len(groups.streaming)
        self.pools, self.index, self.dense_free, self.sparse_free = {}, {}, {}, {}
        reserve_pages = math.ceil(settings.dense_reserve * num_pages)
        for op, s in (("k", settings.decode.s_k), ("v", settings.decode.s_v)):
            n_sparse = math.ceil(num_pages * self.n_r * s)
            n_dense = math.ceil(num_pages * self.n_r * (1 - s)) + reserve_pages * self.n_r
            self.pools[op] = BlockPool.allocate(op, head_dim, n_dense, n_sparse, dtype, device)
            self.index[op] = new_index_map(num_pages, self.n_r, device=device)
            self.dense_free[op] = SlotStack(n_dense, device)
            self.sparse_free[op] = SlotStack(n_sparse, device)
        self.stream_k = torch.zeros(num_pages * BLOCK_SIZE, self.n_s, head_dim, dtype=dtype, device=device)
        self.stream_v = torch.zeros_like(self.stream_k)

    def reset(self):
        for op in OPERANDS:
            self.index[op].fill_(NO_BLOCK)
            self.dense_free[op].reset()
            self.sparse_free[op].reset()

    def free_dense_pages(self) -> int:
        if not self.n_r:
            return 1 << 62
        return min(self.dense_free[op].free for op in OPERANDS) // self.n_r

    def on_alloc(self, pages: torch.Tensor):
        if not self.n_r:
            return
        for op in OPERANDS:
            slots = self.dense_free[op].pop(pages.numel() * self.n_r)
            self.index[op][pages] = slots.view(-1, self.n_r).to(torch.int32)

    def on_free(self, pages: torch.Tensor):
        if not self.n_r:
            return
        for op in OPERANDS:
            entries = self.index[op][pages].reshape(-1)
            entries = entries[entries != NO_BLOCK]
            sparse = is_sparse(entries)
            self.dense_free[op].push(slot_of(entries[~sparse]))
            self.sparse_free[op].push(slot_of(entries[sparse]))
            self.index[op][pages] = NO_BLOCK

    def write(self, locs: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """k, v ``[T, H_kv, D]`` of the tokens at ``locs``; retrieval rows go to their (dense) blocks."""
        if self.n_r:
            pages, rows = locs // BLOCK_SIZE, (locs % BLOCK_SIZE)[:, None]
            for op, x in (("k", k), ("v", v)):
                slots = self.index[op][pages].long()  # [T, n_r]
                if (slots < 0).any():
                    raise RuntimeError("write into a page without dense blocks (compressed or unallocated)")
                self.pools[op].dense[slots, rows] = x[:, self.retrieval].to(self.pools[op].dtype)
        if self.n_s:
            self.stream_k[locs] = k[:, self.streaming].to(self.stream_k.dtype)
            self.stream_v[locs] = v[:, self.streaming].to(self.stream_v.dtype)

    def compress(self, pages: torch.Tensor, num_tokens: int, settings: HSSettings) -> int:
        """Move the eligible dense blocks of one sequence's ``pages`` to sparse slots; return how many."""
        moved = 0
        for op in OPERANDS:
            s = settings.decode.sparsity(op)
            if not self.n_r or s == 0.0:
                continue
            index_t = self.index[op][pages].t().contiguous()  # [n_r, nb]
            blocks = self.pools[op].gather(index_t)
            sparse, mask = prune_blocks(blocks, op, num_tokens, s, settings.sink_tokens, settings.window_tokens)
            new = sparse & (index_t >= 0)
            n = min(int(new.sum()), self.sparse_free[op].free)
            if n == 0:
                continue
            if n < int(new.sum()):  # sparse pool short: keep the rest dense (still correct)
                keep = torch.nonzero(new.flatten())[:n].flatten()
                new = torch.zeros_like(new).flatten().index_fill_(0, keep, True).view_as(new)
            slots = self.sparse_free[op].pop(n)
            self.pools[op].store_sparse(slots, blocks[new], mask[new])
            self.dense_free[op].push(index_t[new].long())
            index_t[new] = (~slots).to(torch.int32)
            self.index[op][pages] = index_t.t()
            moved += n
        return moved

    def nbytes(self) -> int:
        tensors = [self.stream_k, self.stream_v, *self.index.values()]
        return sum(p.nbytes() for p in self.pools.values()) + sum(t.numel() * t.element_size() for t in tensors)


class HSKVPool(KVCache):
    def __init__(self, size: int, page_size: int, dtype: torch.dtype, head_num: int, head_dim: int,
                 layer_num: int, device: str, settings: HSSettings, start_layer=None, end_layer=None, **_):
        super().__init__(size, page_size, dtype, layer_num, device, False, start_layer, end_layer)
        if page_size != BLOCK_SIZE:
            raise ValueError(f"HSKVPool needs page size {BLOCK_SIZE}, got {page_size}")
        self.settings = settings
        self.head_num, self.head_dim = head_num, head_dim
        self.num_pages = size // page_size + 1  # + SGLang's dummy page 0 (padding writes)
        self.layers = [LayerStore(settings, self.start_layer + i, self.num_pages, head_dim, dtype, device)
                       for i in range(layer_num)]
        self.reset_slots()
        self._finalize_allocation_log(size)

    # ---- page lifecycle (called by HSTokenAllocator) ----

    def reset_slots(self):
        for layer in self.layers:
            layer.reset()
        self.on_alloc_pages(torch.tensor([0]))  # the dummy page is always writable

    def free_dense_pages(self) -> int:
        return min(layer.free_dense_pages() for layer in self.layers)

    def on_alloc_pages(self, pages: torch.Tensor):
        for layer in self.layers:
            layer.on_alloc(pages)

    def on_free_pages(self, pages: torch.Tensor):
        for layer in self.layers:
            layer.on_free(pages)

    def compress_sequence(self, locs: torch.Tensor, num_tokens: int) -> int:
        """Compress one sequence's blocks (token locs ``[num_tokens]``) per the decode sparsity."""
        if num_tokens < BLOCK_SIZE:
            return 0
        pages = locs[:num_tokens:BLOCK_SIZE] // BLOCK_SIZE
        return sum(layer.compress(pages, num_tokens, self.settings) for layer in self.layers)

    def layer(self, layer_id: int) -> LayerStore:
        return self.layers[layer_id - self.start_layer]

    # ---- SGLang KVCache interface ----

    def set_kv_buffer(self, layer, loc, cache_k, cache_v, *args, **kwargs):
        loc = getattr(loc, "loc", loc)
        layer_id = kwargs.get("layer_id_override") or layer.layer_id
        d = self.head_dim
        self.layer(layer_id).write(loc, cache_k.view(-1, self.head_num, d), cache_v.view(-1, self.head_num, d))

    def get_key_buffer(self, layer_id: int):
        return self.layer(layer_id).stream_k

    def get_value_buffer(self, layer_id: int):
        return self.layer(layer_id).stream_v

    def get_kv_buffer(self, layer_id: int):
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def get_kv_size_bytes(self):
        return sum(layer.nbytes() for layer in self.layers)

    # ---- accounting (stats) ----

    def block_counts(self) -> dict:
        """Used blocks (slots) and their bytes, over all layers, retrieval groups only (padding page 0 excluded)."""
        out = {"dense_blocks": 0, "sparse_blocks": 0, "dense_bytes": 0, "sparse_bytes": 0,
               "dense_blocks_k": 0, "sparse_blocks_k": 0, "dense_blocks_v": 0, "sparse_blocks_v": 0}
        for layer in self.layers:
            for op in OPERANDS:
                pool = layer.pools[op]
                nd, ns = layer.dense_free[op].used - layer.n_r, layer.sparse_free[op].used
                out["dense_blocks"] += nd
                out["sparse_blocks"] += ns
                out[f"dense_blocks_{op}"] += nd
                out[f"sparse_blocks_{op}"] += ns
                out["dense_bytes"] += nd * pool.dense[0:1].nbytes if pool.num_dense_slots else 0
                if pool.num_sparse_slots:
                    out["sparse_bytes"] += ns * (pool.values[0:1].nbytes + pool.meta[0:1].nbytes)
        return out
