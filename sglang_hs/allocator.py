"""HSTokenAllocator: SGLang's paged token allocator, tied to HSKVPool's block slots.

SGLang's PagedTokenToKVPoolAllocator places new tokens with Triton kernels (alloc_extend/alloc_decode),
which fail on CPU: there the same placement is done in PyTorch (SGLang's own alloc_extend_naive for
extend, whose comparisons read the GPU: host syncs, so CUDA keeps the kernels). Every page handed out or
released is reported to the pool so that dense/sparse block slots follow the pages exactly. SGLang counts capacity in pages; a new page also needs dense
block slots (it is compressed later) and a stream slot (trimmed later), so when those run short the
radix cache is asked to evict leaves (their pages hand back their slots) before the allocation fails.
"""

from __future__ import annotations

import logging

import torch
from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.srt.mem_cache.allocator.paged import (PagedTokenToKVPoolAllocator, alloc_decode_kernel, alloc_extend_kernel,
                                                  alloc_extend_naive, next_power_of_2)
from sglang.srt.utils import get_num_new_pages

logger = logging.getLogger("sglang_hs")


class HSTokenAllocator(PagedTokenToKVPoolAllocator):
    tree_cache = None  # set by HSRadixCache: evicted for dense slots

    def _can_take(self, num_pages: int) -> bool:
        if self.need_sort and num_pages > len(self.free_pages):
            self.merge_and_sort_free()
        while self._slot_pages() < num_pages and self.tree_cache is not None:
            short = num_pages - self._slot_pages()
            if not self.tree_cache.evict(EvictParams(num_tokens=short * self.page_size)).num_tokens_evicted:
                break
        if num_pages <= len(self.free_pages) and num_pages > self._slot_pages():
            logger.error("hs: %d new pages needed, free pages exist but only %d have dense block and stream slots "
                         "(nothing left to evict); raise --hs-dense-reserve or lower --chunked-prefill-size / --max-running-requests",
                         num_pages, self._slot_pages())
        return num_pages <= len(self.free_pages) and num_pages <= self._slot_pages()

    def _slot_pages(self) -> int:
        """New pages the pool has block and stream slots for."""
        return min(self._kvcache.free_dense_pages(), self._kvcache.free_stream_pages())

    def _take(self, num_pages: int) -> torch.Tensor:
        pages, self.free_pages = self.free_pages[:num_pages], self.free_pages[num_pages:]
        self._kvcache.on_alloc_pages(pages)
        return pages

    def alloc(self, need_size: int):
        num_pages = need_size // self.page_size
        if not self._can_take(num_pages):
            return None
        pages = self._take(num_pages)
        return (pages[:, None] * self.page_size + torch.arange(self.page_size, device=self.device)).reshape(-1)

    def alloc_extend(self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                     extend_num_tokens: int, num_new_pages: int = None):
        if num_new_pages is None:
            num_new_pages = get_num_new_pages(seq_lens=seq_lens_cpu, page_size=self.page_size, prefix_lens=prefix_lens_cpu)
        if not self._can_take(num_new_pages):
            return None
        out = torch.empty((extend_num_tokens,), dtype=torch.int64, device=self.device)
        if out.is_cuda:
            alloc_extend_kernel[(len(prefix_lens),)](prefix_lens, seq_lens, last_loc, self.free_pages, out,
                                                     next_power_of_2(len(prefix_lens)), self.page_size)
        else:
            alloc_extend_naive(prefix_lens, seq_lens, last_loc, self.free_pages, out, self.page_size, self.device)
        self._take(num_new_pages)
        return out

    def alloc_decode(self, seq_lens, seq_lens_cpu, last_loc):
        # counted on the host copy: a step that opens no page then costs no sync and no pool bookkeeping
        num_new_pages = get_num_new_pages(seq_lens=seq_lens_cpu, page_size=self.page_size, decode=True)
        if not self._can_take(num_new_pages):
            return None
        if not num_new_pages:
            return (last_loc + 1).to(torch.int64)
        if last_loc.is_cuda:  # a masked write would read the mask on the host
            out = torch.empty((len(seq_lens),), dtype=torch.int64, device=self.device)
            alloc_decode_kernel[(len(seq_lens),)](seq_lens, last_loc, self.free_pages, out,
                                                  next_power_of_2(len(seq_lens)), self.page_size)
            self._take(num_new_pages)
            return out
        out = (last_loc + 1).to(torch.int64)
        out[(seq_lens - 1) % self.page_size == 0] = self._take(num_new_pages) * self.page_size
        return out

    def _release_page_ids(self, *page_ids: torch.Tensor):
        pages = torch.cat(page_ids) if len(page_ids) > 1 else page_ids[0]
        self._kvcache.on_free_pages(pages)
        super()._release_page_ids(pages)

    def clear(self):
        super().clear()
        if hasattr(self._kvcache, "reset_slots"):
            self._kvcache.reset_slots()
