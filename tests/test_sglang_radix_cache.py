"""HSRadixCache on a real pool, allocator and req_to_token pool (CPU): a prefilled request's compression and trim
wait, within ``outputs_first``, until the batch's outputs are out, and then leave the pool as an immediate call does."""

from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("sglang")

from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402

from sglang_hs import plugin  # noqa: E402
from sglang_hs.allocator import HSTokenAllocator  # noqa: E402
from sglang_hs.radix_cache import HSRadixCache  # noqa: E402
from sglang_hs.settings import LayerGroups  # noqa: E402
from sglang_hs.stats import HSStats  # noqa: E402
from sglang_hs.testing import small_pool  # noqa: E402

PAGES, PROMPT = 64, 1000


def prefilled(tmp_path, name):
    """A cache whose pool holds one prefilled prompt of PROMPT random tokens (same KV for every call), and its req."""
    pool = small_pool(LayerGroups(retrieval=(0, 1, 2), streaming=(3,)), 1.0, 1.0, PAGES, layers=2)
    allocator = HSTokenAllocator(PAGES * 64, 64, torch.float32, "cpu", pool, need_sort=False)
    rows = ReqToTokenPool(2, 4096, "cpu", False)
    cache = HSRadixCache(CacheInitParams(disable=False, req_to_token_pool=rows, token_to_kv_pool_allocator=allocator,
                                         page_size=64), pool, HSStats(str(tmp_path / f"{name}.json")))
    gen = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, 500, (PROMPT,), generator=gen).tolist()
    locs = allocator.alloc(-(-PROMPT // 64) * 64)[:PROMPT]
    for layer in range(2):
        pool.write(layer, locs, *(torch.randn(PROMPT, 4, 64, generator=gen) for _ in range(2)))
    row = 1  # row 0 is SGLang's padding row
    rows.req_to_token[row, :PROMPT] = locs.int()
    req = SimpleNamespace(req_pool_idx=row, extra_key=None, cache_protected_len=0, prefix_indices=locs[:0],
                          last_node=cache.root_node, origin_input_ids=tokens, priority=0, get_fill_ids=lambda: tokens)
    return cache, req


def pool_state(pool):
    return [pool.stream_index, pool.live, pool.pinned] + [l.index[op] for l in pool.layers for op in ("k", "v")]


def test_a_prefilled_request_is_compressed_and_trimmed_after_the_batch_outputs(tmp_path):
    now, later = prefilled(tmp_path, "now"), prefilled(tmp_path, "later")
    before = [t.clone() for t in pool_state(later[0].pool)]
    now[0].cache_unfinished_req(now[1])
    assert now[0].pool.blocks_compressed > 0 and now[0].pool.stream_pages_trimmed > 0

    cache, req = later
    with cache.outputs_first():
        cache.cache_unfinished_req(req)
        key = RadixKey(req.origin_input_ids).page_aligned(64)
        assert len(cache.match_prefix(MatchPrefixParams(key=key)).device_indices) == len(key)  # in the tree already
        assert cache.pool.blocks_compressed == cache.pool.stream_pages_trimmed == 0
        changed = [not torch.equal(a, b) for a, b in zip(before, pool_state(cache.pool))]
        assert changed == [False, False, True] + [False] * 4  # only the pin of the prompt's end
    assert (cache.pool.blocks_compressed, cache.pool.stream_pages_trimmed) == (now[0].pool.blocks_compressed,
                                                                              now[0].pool.stream_pages_trimmed)
    assert all(torch.equal(a, b) for a, b in zip(pool_state(now[0].pool), pool_state(cache.pool)))


class _Cache:
    def __init__(self):
        self.events = []

    @contextmanager
    def outputs_first(self):
        self.events.append("enter")
        yield
        self.events.append("exit")


@pytest.mark.parametrize("backend, extend, events", [("hs", True, ["enter", "process", "exit"]),
                                                      ("hs", False, ["process"]), ("triton", True, ["process"])])
def test_result_processing_of_an_hs_prefill_runs_within_outputs_first(backend, extend, events):
    cache = _Cache()
    scheduler = SimpleNamespace(tree_cache=cache, server_args=SimpleNamespace(attention_backend=backend))
    batch = SimpleNamespace(forward_mode=SimpleNamespace(is_extend=lambda: extend))
    out = plugin._outputs_before_pool_work(lambda s, b, r: cache.events.append("process") or r, scheduler, batch, 7)
    assert out == 7 and cache.events == events
