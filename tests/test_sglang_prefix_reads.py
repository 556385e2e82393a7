"""The backend's reads of a cached prefix in an extend, on CPU (the real backend and pool, SGLang's ForwardMode): each
layer's attention gets its own layer's index maps; where the CUDA prefix path may take the sequence, every layer's
prefix split is found once, at the first layer (``hs_kernels.prefix_splits``: one host sync per forward, not one per
layer), and each layer gets its own. The GPU parts (the split kernel, ``prefill_attention(split=...)``) are tested on
the GPU in tests/test_kernels_gpu_cuda_prefix.py."""

from types import SimpleNamespace as NS

import pytest
import torch

pytest.importorskip("sglang")

from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

from hs_kernels import PrefixSplit  # noqa: E402
from sglang_hs.backend import HSAttnBackend  # noqa: E402
from sglang_hs.settings import LayerGroups  # noqa: E402
from sglang_hs.testing import small_pool  # noqa: E402

LAYERS, H_KV, GROUP, D = 3, 2, 2, 64
PREFIX, CHUNK, ROW = 640, 60, 1  # the cached prefix: pages 1 .. 10; the chunk: page 11


@pytest.fixture
def backend():
    pool = small_pool(LayerGroups((0, 1), ()), 1.0, 1.0, 40, layers=LAYERS, head_dim=D)
    req_to_token = torch.zeros(4, 1024, dtype=torch.int32)
    pages = torch.arange(1, 1 + -(-(PREFIX + CHUNK) // 64))
    pool.on_alloc_pages(pages)
    req_to_token[ROW, :PREFIX + CHUNK] = (pages[:, None] * 64 + torch.arange(64)).flatten()[:PREFIX + CHUNK].int()
    for i, store in enumerate(pool.layers):  # entries that tell the layers and operands apart
        for j, op in enumerate(("k", "v")):
            store.index[op][pages] = (100 * i + 10 * j + torch.arange(H_KV * len(pages)).view(-1, H_KV)).int()
    return HSAttnBackend(NS(device="cpu", req_to_token_pool=NS(req_to_token=req_to_token), token_to_kv_pool=pool))


def extend(backend, monkeypatch, pays: bool):
    """Run every layer's ``forward_extend`` for one sequence; return what ``prefix_splits`` and each layer's
    ``prefill_attention`` were given."""
    found, seen = [], []

    def splits(layers, prefix_len):
        found.append((layers, prefix_len))
        no_maps = [torch.zeros(H_KV, 0, dtype=torch.int32)] * 4
        return [PrefixSplit(torch.tensor([i]), torch.tensor([]), (1, 1), *no_maps) for i in range(len(layers))]

    def attention(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, scale, split=None):
        seen.append((k_pool, k_index, v_index, split))
        return torch.zeros_like(q), None

    def paying(*args, given=False):
        assert given  # the split is found beforehand: the rule of a given split
        return pays

    monkeypatch.setattr("sglang_hs.backend.hs_gpu.cuda_prefix_pays", paying)
    monkeypatch.setattr("sglang_hs.backend.prefix_splits", splits)
    monkeypatch.setattr("sglang_hs.backend.prefill_attention", attention)
    batch = NS(forward_mode=ForwardMode.EXTEND, req_pool_indices=torch.tensor([ROW]), extend_prefix_lens_cpu=[PREFIX],
               extend_seq_lens_cpu=[CHUNK])
    backend.init_forward_metadata(batch)
    q, k, v = (torch.randn(CHUNK, h * D) for h in (H_KV * GROUP, H_KV, H_KV))
    for i in range(LAYERS):
        layer = NS(layer_id=i, tp_q_head_num=H_KV * GROUP, tp_k_head_num=H_KV, qk_head_dim=D, v_head_dim=D,
                   scaling=D ** -0.5, is_cross_attention=False, logit_cap=0, sliding_window_size=-1)
        backend.forward_extend(q, k, v, layer, batch, save_kv_cache=False)
    return found, seen


def maps(backend, i):
    store = backend.pool.layers[i]
    pages = torch.arange(1, 1 + PREFIX // 64)
    return store.index["k"][pages].t(), store.index["v"][pages].t()


@pytest.mark.parametrize("pays", [True, False])
def test_each_layer_reads_its_own_maps_and_split(backend, monkeypatch, pays):
    found, seen = extend(backend, monkeypatch, pays)
    assert len(seen) == LAYERS
    for i, (k_pool, k_index, v_index, split) in enumerate(seen):
        want_k, want_v = maps(backend, i)
        assert k_pool is backend.pool.layers[i].pools["k"]
        assert torch.equal(k_index, want_k) and torch.equal(v_index, want_v) and not torch.equal(want_k, want_v)
        assert (split.sparse.tolist() == [i]) if pays else split is None
    if not pays:
        assert found == []
        return
    (layers, prefix_len), = found  # once, for every layer
    assert prefix_len == PREFIX and len(layers) == LAYERS
    for i, (k_pool, v_pool, k_index, v_index) in enumerate(layers):
        assert k_pool is backend.pool.layers[i].pools["k"] and v_pool is backend.pool.layers[i].pools["v"]
        assert all(torch.equal(got, want) for got, want in zip((k_index, v_index), maps(backend, i)))
