"""HSKVPool: SGLang's token-to-KV pool for prepared models, in HieraSparse blocks.

One SGLang page (64 tokens) is one block. Per layer:
  * retrieval groups: a K and a V ``hs_kernels.BlockPool`` (dense slots + 2:4 sparse slots) and,
    per page, an int32 index map entry per retrieval group (``hs_kernels.format``). A page gets
    dense slots when SGLang allocates it; ``compress`` later moves its eligible blocks to sparse
    slots (per the decode sparsity); freeing the page returns whatever slots it holds.
  * streaming groups: 64-token pages in a smaller pool of stream slots, one slot id per SGLang page
    for all layers (``stream_index``). A page gets a stream slot when allocated; ``trim_stream``
    takes it back once no query can see it any more (stream_window.py: sink, checkpoint windows,
    windows before sequence ends and running requests' windows stay).
Slots of a layer are shared by all its retrieval groups.
"""

from __future__ import annotations

import math

import torch
from hs_kernels import (BLOCK_SIZE, NO_BLOCK, BlockPool, SparsityConfig, compress_magnitude, is_sparse, loss_free_selection,
                        new_index_map, select_sparse_blocks, slot_of, write_tokens)
from sglang.srt.mem_cache.memory_pool import KVCache

from .ranges import ranged
from .settings import HSSettings
from .slot_stack import SlotStack, SlotStacks, layout_of
from .stream_window import keep_mask, live_pages, reusable_pages

OPERANDS = ("k", "v")
COMPRESS_BLOCKS = 4096  # blocks gathered for one launch of the compressor (64 MiB at head_dim 128, 16-bit)


def check(ok: torch.Tensor, message: str) -> None:
    """Raise RuntimeError(message) unless ``ok`` is all true; on CUDA a device-side assert instead
    (no host sync on the per-layer path; a failure stops the process, as bookkeeping bugs should)."""
    if ok.is_cuda:
        torch._assert_async(ok.all(), message)
    elif not bool(ok.all()):
        raise RuntimeError(message)


def references(sel: torch.Tensor, slots: torch.Tensor, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For each row ``r`` of ``sel`` (the entries of row ``r``'s own pool of ``capacity`` slots that are in use, their
    slots in ``slots``, same shape): how many entries are selected, and whether one slot is referenced twice (a slot
    past the capacity counts in the first, not in the second). Tensors ``[rows]``, read by the caller once for all."""
    rows = sel.shape[0]
    place = torch.arange(rows, device=sel.device).view(-1, *[1] * (sel.dim() - 1)) * capacity + slots
    place = torch.where(sel & (slots >= 0) & (slots < capacity), place, rows * capacity)  # the last bin: not counted
    place = place.flatten()
    refs = torch.zeros(rows * capacity + 1, dtype=torch.int32, device=sel.device)  # not bincount: it syncs for its size
    refs.scatter_add_(0, place, torch.ones_like(place, dtype=torch.int32))
    return sel.flatten(1).sum(1), (refs[:-1].view(rows, capacity) > 1).any(1)


def head_index(groups, per_group: int, device):
    """Heads ``g * per_group + i`` of ``groups``: a slice when they are contiguous (prepared
    checkpoints put each kind together, so indexing is a view), else an index on ``device``
    (a host index tensor would make every use a synchronising copy)."""
    heads = [g * per_group + i for g in groups for i in range(per_group)]
    if not heads:
        return slice(0, 0)
    if heads == list(range(heads[0], heads[-1] + 1)):
        return slice(heads[0], heads[-1] + 1)
    return torch.tensor(heads, dtype=torch.long, device=device)


def bytes_per_token(settings: HSSettings, head_dim: int, value_bytes: int, layers=None) -> float:
    """Pool bytes SGLang sizes by, per token of capacity (all layers of this rank); a reserve given
    as a fraction counts here, the auto reserve is a fixed amount (reserve_page_bytes)."""
    total = 0.0
    for groups in (settings.layers if layers is None else layers):
        n_r, n_s = len(groups.retrieval), len(groups.streaming)
        total += 2 * n_s * head_dim * value_bytes * settings.stream_fraction
        for s in (settings.decode.s_k, settings.decode.s_v):
            sparse = s * (head_dim / 2 * value_bytes + head_dim / 8)  # values + int16 metadata
            total += n_r * ((1 - s) * head_dim * value_bytes + sparse + 4 / BLOCK_SIZE)  # + index entry
    return total + (settings.dense_reserve or 0.0) * reserve_page_bytes(settings, head_dim, value_bytes, layers) / BLOCK_SIZE


def reserve_page_bytes(settings: HSSettings, head_dim: int, value_bytes: int, layers=None) -> int:
    """Bytes of one reserve page: dense K and V blocks of every retrieval group and a stream slot."""
    heads = sum(len(g.retrieval) + len(g.streaming) for g in (settings.layers if layers is None else layers))
    return 2 * heads * BLOCK_SIZE * head_dim * value_bytes


def slot_counts(settings: HSSettings, n_r: int, num_pages: int) -> dict[str, tuple[int, int]]:
    """Dense and sparse block slots, per operand, of a layer with ``n_r`` retrieval groups."""
    reserve_pages = settings.reserve_pages(num_pages)
    return {op: (math.ceil(num_pages * n_r * (1 - s)) + reserve_pages * n_r, math.ceil(num_pages * n_r * s))
            for op, s in (("k", settings.decode.s_k), ("v", settings.decode.s_v))}


class SlotTables:
    """The retrieval storage of the layers that have ``n_r`` retrieval groups, stacked per operand: one block pool
    (layer ``i``'s slots after layer ``i - 1``'s), index maps ``[layers, num_pages, n_r]`` and free lists
    (``SlotStacks``); each layer's ``LayerStore`` holds views of its share. A page's blocks get slots or give them back,
    and a sequence's blocks are compressed, in all those layers at once: one layer at a time (32 layers), opening a page
    took some 200 launches, freeing one 700 with 193 host syncs, and a compression a dozen launches a layer."""

    def __init__(self, settings: HSSettings, n_r: int, layers: int, num_pages: int, head_dim: int, dtype, device):
        self.settings, self.n_r, self.layers = settings, n_r, layers
        self.pools, self.index, self.dense_free, self.sparse_free, self.slots = {}, {}, {}, {}, {}
        for op, (n_dense, n_sparse) in slot_counts(settings, n_r, num_pages).items():
            self.pools[op] = BlockPool.allocate(op, head_dim, layers * n_dense, layers * n_sparse, dtype, device)
            self.index[op] = new_index_map(layers, num_pages, n_r, device=device)
            self.dense_free[op] = SlotStacks(layers, n_dense, device)
            self.sparse_free[op] = SlotStacks(layers, n_sparse, device)
            self.slots[op] = n_dense, n_sparse

    def layer_pool(self, op: str, row: int) -> BlockPool:
        """Layer ``row``'s share of the operand's pool (views)."""
        (n_dense, n_sparse), pool = self.slots[op], self.pools[op]
        return BlockPool(op, pool.dense[row * n_dense:(row + 1) * n_dense],
                         *(x[row * n_sparse:(row + 1) * n_sparse] for x in (pool.values, pool.meta)))

    def reset(self):
        for op in OPERANDS:
            self.index[op].fill_(NO_BLOCK)
            self.dense_free[op].reset()
            self.sparse_free[op].reset()

    def on_alloc(self, pages: torch.Tensor):
        for op in OPERANDS:
            slots = self.dense_free[op].pop(pages.numel() * self.n_r)
            self.index[op][:, pages] = slots.view(self.layers, -1, self.n_r).to(torch.int32)

    def on_free(self, pages: torch.Tensor):
        for op in OPERANDS:
            entries = self.index[op][:, pages].flatten(1)
            used, sparse, slots = entries != NO_BLOCK, is_sparse(entries), slot_of(entries)
            self.dense_free[op].push(slots, used & ~sparse)
            self.sparse_free[op].push(slots, used & sparse)
            self.index[op][:, pages] = NO_BLOCK

    def compress(self, op: str, s: float, pages: torch.Tensor, num_tokens: int) -> int:
        """``HSKVPool.compress_sequence`` of operand ``op`` at sparsity ``s`` in these layers (the sequence's pages
        ``pages``); how many blocks moved. Three host syncs, more with a loss pass or a short sparse pool."""
        cfg, n_r = self.settings, self.n_r
        (n_dense, n_sparse), pool = self.slots[op], self.pools[op]
        index_t = self.index[op][:, pages].transpose(1, 2).reshape(self.layers * n_r, -1)  # row l n_r + g: layer l, group g
        rows, cols = torch.nonzero(index_t >= 0, as_tuple=True)  # row-major: each layer's dense blocks in a run
        if not rows.numel():
            return 0
        layer_of = rows // n_r
        dense = layer_of * n_dense + index_t[rows, cols].long()  # slots of the stacked pool
        chosen = loss_free_selection(num_tokens, s, cfg.sink_tokens, cfg.window_tokens, cols.device)
        if chosen is not None:  # no loss pass
            chosen = chosen[cols]
        else:
            loss = torch.zeros(index_t.shape, dtype=torch.float32, device=index_t.device)
            unwritten = torch.full((COMPRESS_BLOCKS,), -1, dtype=torch.int32, device=rows.device)
            loss[rows, cols] = torch.cat([compress_magnitude(pool.dense[dense[a:a + COMPRESS_BLOCKS]], op, pool.values,
                                                             pool.meta, unwritten[:len(dense[a:a + COMPRESS_BLOCKS])])[2]
                                          for a in range(0, len(dense), COMPRESS_BLOCKS)])
            chosen = select_sparse_blocks(loss, num_tokens, s, cfg.sink_tokens, cfg.window_tokens)[rows, cols]
        chosen = torch.nonzero(chosen).flatten()
        want = torch.bincount(layer_of[chosen], minlength=self.layers).tolist()
        counts = [min(n, stack.free) for n, stack in zip(want, self.sparse_free[op].stacks)]  # pool short: rest dense
        if counts != want:  # each layer's first counts[l] chosen blocks (chosen runs layer by layer)
            layer, rank = layout_of(want)
            chosen = chosen[(rank < torch.tensor(counts)[layer]).to(rows.device)]
        if not chosen.numel():
            return 0
        layer, src = layer_of[chosen], dense[chosen]
        slots = self.sparse_free[op].pop_counts(counts)
        dst = (layer * n_sparse + slots).to(torch.int32)
        for a in range(0, len(src), COMPRESS_BLOCKS):
            compress_magnitude(pool.dense[src[a:a + COMPRESS_BLOCKS]], op, pool.values, pool.meta,
                               dst[a:a + COMPRESS_BLOCKS])
        self.dense_free[op].push_counts(src - layer * n_dense, counts)
        self.index[op][layer, pages[cols[chosen]], rows[chosen] % n_r] = ~slots.to(torch.int32)
        return len(src)


class LayerStore:
    """Retrieval block pools, index maps and free lists (views of ``tables``' row ``row``), and streaming storage,
    of one layer."""

    def __init__(self, settings: HSSettings, layer_id: int, num_pages: int, stream_slots: int, head_dim: int, dtype, device,
                 tables: SlotTables | None, row: int):
        self.groups, self.row = settings.groups(layer_id), row
        self.retrieval = head_index(self.groups.retrieval, 1, device)
        self.n_r, self.n_s = len(self.groups.retrieval), len(self.groups.streaming)
        self.pools, self.index, self.dense_free, self.sparse_free = {}, {}, {}, {}
        for op in OPERANDS:
            if tables is None:  # no retrieval group
                self.pools[op] = BlockPool.allocate(op, head_dim, 0, 0, dtype, device)
                self.index[op] = new_index_map(num_pages, 0, device=device)
                self.dense_free[op], self.sparse_free[op] = SlotStack(0, device), SlotStack(0, device)
            else:
                self.pools[op] = tables.layer_pool(op, row)
                self.index[op] = tables.index[op][row]
                self.dense_free[op] = tables.dense_free[op].stacks[row]
                self.sparse_free[op] = tables.sparse_free[op].stacks[row]
        self.stream_k = torch.zeros(stream_slots * BLOCK_SIZE, self.n_s, head_dim, dtype=dtype, device=device)
        self.stream_v = torch.zeros_like(self.stream_k)
        # write_tokens' views: a dense block per head and page; a stream slot per page for all streaming heads
        self.heads = {kind: torch.tensor(groups, dtype=torch.int32, device=device)
                      for kind, groups in (("retrieval", self.groups.retrieval), ("streaming", self.groups.streaming))}
        self.dests = {"retrieval": (self.pools["k"].dense[:, :, None], self.pools["v"].dense[:, :, None]),
                      "streaming": tuple(x.view(stream_slots, BLOCK_SIZE, self.n_s, head_dim)
                                         for x in (self.stream_k, self.stream_v))}

    def free_dense_pages(self) -> int:
        if not self.n_r:
            return 1 << 62
        return min(self.dense_free[op].free for op in OPERANDS) // self.n_r

    def write(self, locs: torch.Tensor, k: torch.Tensor, v: torch.Tensor, stream_index: torch.Tensor,
              errors: torch.Tensor):
        """k, v ``[T, H_kv, D]`` of the tokens at ``locs``: retrieval heads into their pages' dense blocks, streaming
        heads into their pages' stream slots (``stream_index``). A page without either sets ``errors``."""
        if self.n_r:
            write_tokens(k, v, locs, self.heads["retrieval"], self.index["k"], self.index["v"],
                         *self.dests["retrieval"], errors)
        if self.n_s:
            write_tokens(k, v, locs, self.heads["streaming"], stream_index[:, None], stream_index[:, None],
                         *self.dests["streaming"], errors)

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
        layer_groups = settings.layers[self.start_layer:self.start_layer + layer_num]
        self.has_stream = any(g.streaming for g in layer_groups)
        stream_slots = (min(self.num_pages, math.ceil((self.num_pages - 1) * settings.stream_fraction)
                            + settings.reserve_pages(self.num_pages - 1) + 1) if self.has_stream else 0)
        self.stream_index = torch.full((self.num_pages,), NO_BLOCK, dtype=torch.int64, device=device)
        self.stream_free = SlotStack(stream_slots, device)
        self.live = torch.zeros(self.num_pages, dtype=torch.int32, device=device)  # running windows per page
        self.pinned = torch.zeros(self.num_pages, dtype=torch.bool, device=device)  # windows before branch points
        self.write_errors = torch.zeros(1, dtype=torch.int32, device=device)  # set by writes to pages without slots
        self.live_by_row: dict[int, torch.Tensor] = {}
        self.compressed_at: dict[int, tuple] = {}  # compress_row's memo: row -> (tokens, sparsity) at its last call
        self.blocks_compressed = self.stream_pages_trimmed = 0  # since start, whoever asked (radix cache, decode steps)
        retrieval = [len(g.retrieval) for g in layer_groups]
        self.tables = {n_r: SlotTables(settings, n_r, retrieval.count(n_r), self.num_pages, head_dim, dtype, device)
                       for n_r in sorted(set(retrieval)) if n_r}
        rows = [retrieval[:i].count(n_r) for i, n_r in enumerate(retrieval)]
        self.layers = [LayerStore(settings, self.start_layer + i, self.num_pages, stream_slots, head_dim, dtype, device,
                                  self.tables.get(n_r), row) for i, (n_r, row) in enumerate(zip(retrieval, rows))]
        self.reset_slots()
        self._finalize_allocation_log(size)

    def chunk_warning(self, chunk_tokens: int) -> str | None:
        """One line if a full prefill chunk cannot get dense blocks and stream pages (pages are dense
        until compressed and hold a stream slot until trimmed); SGLang then fails that prefill."""
        need = -(-chunk_tokens // BLOCK_SIZE) + 1
        have = min(self.free_dense_pages(), self.free_stream_pages())
        if need <= have:
            return None
        return (f"a prefill chunk of {chunk_tokens} tokens needs {need} dense/stream pages, the pool has {have} "
                f"({self.num_pages - 1} pages, --hs-dense-reserve {self.settings.reserve_flag}); prompts that long "
                "will fail with 'Prefill out of memory': raise --hs-dense-reserve or lower --chunked-prefill-size")

    # ---- page lifecycle (called by HSTokenAllocator) ----

    def reset_slots(self):
        for tables in self.tables.values():
            tables.reset()
        self.stream_index.fill_(NO_BLOCK)
        self.stream_free.reset()
        self.live.zero_()
        self.pinned.zero_()
        self.live_by_row.clear()
        self.compressed_at.clear()
        self.on_alloc_pages(torch.tensor([0]))  # the dummy page is always writable

    def free_dense_pages(self) -> int:
        return min(layer.free_dense_pages() for layer in self.layers)

    def free_stream_pages(self) -> int:
        return self.stream_free.free if self.has_stream else 1 << 62

    def on_alloc_pages(self, pages: torch.Tensor):
        if not pages.numel():  # most decode steps and cached-prefix extends open no page
            return
        for tables in self.tables.values():
            tables.on_alloc(pages)
        if self.has_stream:
            self.stream_index[pages] = self.stream_free.pop(pages.numel())

    def on_free_pages(self, pages: torch.Tensor):
        for tables in self.tables.values():
            tables.on_free(pages)
        if self.has_stream:
            self._drop_stream(pages)
            self.live[pages] = 0  # a freed page belongs to no running window
            self.pinned[pages] = False

    # ---- streaming pages (checkpointed windows) ----

    def _drop_stream(self, pages: torch.Tensor):
        slots = self.stream_index[pages]
        self.stream_free.push(slots[slots != NO_BLOCK])
        self.stream_index[pages] = NO_BLOCK

    def stream_rows(self, locs: torch.Tensor) -> torch.Tensor:
        """Rows of the streaming storage holding the tokens at ``locs``."""
        slots = self.stream_index[locs // BLOCK_SIZE]
        check(slots >= 0, "streaming KV of a trimmed page was needed (checkpointed-window bookkeeping bug)")
        return slots * BLOCK_SIZE + locs % BLOCK_SIZE

    def _set_live(self, row: int, pages: torch.Tensor | None):
        old = self.live_by_row.pop(row, None)
        if old is not None:
            self.live.index_add_(0, old, torch.full_like(old, -1, dtype=torch.int32)).clamp_(min=0)
        if pages is not None:
            self.live.index_add_(0, pages, torch.ones_like(pages, dtype=torch.int32))
            self.live_by_row[row] = pages

    def register_window(self, row: int, locs: torch.Tensor, first_query: int, num_tokens: int):
        """A request of req_to_token ``row`` is about to run queries [first_query, num_tokens): protect
        the pages it reads from other sequences' trims."""
        if self.has_stream:
            self._set_live(row, (locs[:num_tokens:BLOCK_SIZE] // BLOCK_SIZE)[live_pages(first_query, num_tokens, self.settings.window_tokens)].clone())

    @ranged("hs.trim_stream")
    def trim_stream(self, row: int, locs: torch.Tensor, num_tokens: int, running: bool) -> int:
        """Take back the stream slots of this sequence's pages that no query can see any more; return how many.
        ``running``: the request continues at ``num_tokens`` (its window stays registered)."""
        if not self.has_stream:
            return 0
        self._set_live(row, None)
        pages = locs[:num_tokens:BLOCK_SIZE] // BLOCK_SIZE
        s = self.settings
        keep = keep_mask(num_tokens, s.sink_tokens, s.window_tokens, s.stream_checkpoint).to(pages.device)
        drop = pages[~keep & (self.live[pages] == 0) & ~self.pinned[pages] & (self.stream_index[pages] != NO_BLOCK)]
        self._drop_stream(drop)
        self.stream_pages_trimmed += drop.numel()
        if running:
            self.register_window(row, locs, num_tokens, num_tokens)
        return drop.numel()

    def pin_window(self, locs: torch.Tensor):
        """Keep, until the pages are freed, the streaming KV of the window before the end of a prefix (token locs,
        page-aligned) where requests branch (a match was cut back there, or a prompt ends there). Pages that lack it
        get it from the request that recomputes them (``adopt_stream``); later matches there are then whole."""
        if self.has_stream and locs.numel():
            window_pages = -(-self.settings.window_tokens // BLOCK_SIZE)
            self.pinned[(locs[::BLOCK_SIZE] // BLOCK_SIZE)[-window_pages:]] = True

    def release_window(self, row: int):
        if self.has_stream:
            self._set_live(row, None)

    def adopt_stream(self, own_pages: torch.Tensor, tree_pages: torch.Tensor):
        """A request recomputed pages the tree already holds (its own copies are about to be freed):
        tree pages without streaming KV take over the request's stream slots (same tokens, same KV)."""
        if not self.has_stream:
            return
        own, tree = self.stream_index[own_pages], self.stream_index[tree_pages]
        move = (own_pages != tree_pages) & (tree == NO_BLOCK) & (own != NO_BLOCK)
        # where, not a boolean index: no host sync (this runs before a prefilled batch's first tokens are sent)
        self.stream_index[tree_pages] = torch.where(move, own, tree)
        self.stream_index[own_pages] = torch.where(move, NO_BLOCK, own)

    def reusable_prefix(self, locs: torch.Tensor) -> int:
        """Tokens of a matched prefix (token locs, page-aligned) that can be reused as is."""
        if not self.has_stream or locs.numel() == 0:
            return locs.numel()
        stored = self.stream_index[locs[::BLOCK_SIZE] // BLOCK_SIZE] != NO_BLOCK
        return reusable_pages(stored.cpu(), self.settings.sink_tokens, self.settings.window_tokens) * BLOCK_SIZE

    def compress_row(self, row: int, locs: torch.Tensor, num_tokens: int, sparsity: SparsityConfig | None = None) -> int:
        """``compress_sequence`` for req_to_token ``row``, once per length and sparsity: under the overlap scheduler a
        request's first decode step compresses its prompt before the radix cache's call for it (which then moves
        nothing, and costs no sync). ``forget_row`` when the row's tokens change otherwise (an extend)."""
        key = (num_tokens, sparsity)
        if self.compressed_at.get(row) == key:
            return 0
        self.compressed_at[row] = key
        return self.compress_sequence(locs, num_tokens, sparsity)

    def forget_row(self, row: int):
        self.compressed_at.pop(row, None)

    @ranged("hs.compress_sequence")
    def compress_sequence(self, locs: torch.Tensor, num_tokens: int, sparsity: SparsityConfig | None = None) -> int:
        """Compress one sequence's blocks (token locs ``[num_tokens]``) per ``sparsity`` (default: the decode
        sparsity); return how many blocks moved to sparse slots. Only dense blocks are read: a sparse block scores
        loss 0, as its decompressed 2:4 data would, so it stays selected and the work per call follows the dense
        blocks, not the sequence. The layers of each retrieval count are selected and compressed at once
        (``SlotTables.compress``; per layer, the launches and syncs took 48 ms per 8K chunk of Llama-3.1-8B on
        the H200)."""
        if num_tokens < BLOCK_SIZE:
            return 0
        pages = locs[:num_tokens:BLOCK_SIZE] // BLOCK_SIZE
        sparsity = sparsity or self.settings.decode
        sparsities = [(op, sparsity.sparsity(op)) for op in OPERANDS]
        moved = sum(tables.compress(op, s, pages, num_tokens) for tables in self.tables.values()
                    for op, s in sparsities if s > 0.0)
        self.blocks_compressed += moved
        return moved

    def slot_problems(self) -> list[str]:
        """Slot accounting problems: empty when every used slot (each layer's dense and 2:4 block slots per operand,
        the stream slots) is referenced exactly once by an index map entry. All layers at once, one host read."""
        names, used, counts, twice = [], [], [], []

        def add(rows: list[str], stacks: list[SlotStack], sel: torch.Tensor, slots: torch.Tensor):
            n, dup = references(sel, slots, stacks[0].capacity)
            names.extend(rows)
            used.extend(stack.used for stack in stacks)
            counts.append(n)
            twice.append(dup)

        for n_r, tables in self.tables.items():
            position = [i for i, layer in enumerate(self.layers) if layer.n_r == n_r]  # the tables' rows, in order
            for op in OPERANDS:
                entries = tables.index[op]
                taken, slots = entries != NO_BLOCK, slot_of(entries)
                sparse = taken & is_sparse(entries)
                for kind, sel, free in (("dense", taken & ~sparse, tables.dense_free[op]),
                                        ("sparse", sparse, tables.sparse_free[op])):
                    add([f"layer {i} {op} {kind}" for i in position], free.stacks, sel, slots)
        add(["stream"], [self.stream_free], (self.stream_index != NO_BLOCK)[None], self.stream_index[None])
        read = torch.cat([torch.cat(counts), torch.cat(twice).long()]).tolist()
        problems = [f"{name}: {n} referenced, {u} used" for name, n, u in zip(names, read, used) if n != u]
        return problems + [f"{name}: a slot is referenced twice" for name, dup in zip(names, read[len(names):]) if dup]

    def layer(self, layer_id: int) -> LayerStore:
        return self.layers[layer_id - self.start_layer]

    def prefix_maps(self, pages: torch.Tensor) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """Each retrieval layer's K and V index maps at ``pages`` (by layer id), ``[n_r, len(pages)]`` each and
        contiguous, as the prefill kernels take them: one gather and one copy per operand and retrieval count."""
        maps = {n_r: [tables.index[op][:, pages].transpose(1, 2).contiguous() for op in OPERANDS]
                for n_r, tables in self.tables.items()}
        return {self.start_layer + i: (maps[layer.n_r][0][layer.row], maps[layer.n_r][1][layer.row])
                for i, layer in enumerate(self.layers) if layer.n_r}

    # ---- SGLang KVCache interface ----

    def set_kv_buffer(self, layer, loc, cache_k, cache_v, *args, **kwargs):
        loc = getattr(loc, "loc", loc)
        layer_id = kwargs.get("layer_id_override") or layer.layer_id
        d = self.head_dim
        self.write(layer_id, loc, cache_k.view(-1, self.head_num, d), cache_v.view(-1, self.head_num, d))

    @ranged("hs.write")
    def write(self, layer_id: int, locs: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        self.layer(layer_id).write(locs, k, v, self.stream_index, self.write_errors)
        if layer_id == self.start_layer + len(self.layers) - 1:  # once per forward: one check, not one per layer
            check(self.write_errors == 0, "write into a page without dense blocks or a stream slot (bookkeeping bug)")

    def get_key_buffer(self, layer_id: int):
        return self.layer(layer_id).stream_k

    def get_value_buffer(self, layer_id: int):
        return self.layer(layer_id).stream_v

    def get_kv_buffer(self, layer_id: int):
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def get_kv_size_bytes(self):
        return sum(layer.nbytes() for layer in self.layers) + self.stream_index.nbytes

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
        out["stream_pages"] = max(self.stream_free.used - 1, 0)  # page 0 (padding) excluded
        out["stream_pages_pinned"] = int((self.pinned & (self.stream_index != NO_BLOCK)).sum())
        out["stream_bytes"] = out["stream_pages"] * sum(2 * layer.stream_k[:BLOCK_SIZE].nbytes for layer in self.layers)
        return out
