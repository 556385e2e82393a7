"""Backends with cached prefixes (layers of both kinds, in either order, of retrieval groups only, of streaming
groups only), for the short-extend tests (tests/test_sglang_short_extends.py on CPU,
tests/test_sglang_gpu_short_extends.py on the GPU): the real backend and pool, prefixes prefilled through the
backend itself, then compressed and trimmed as the radix cache leaves them; questions run as SGLang hands an extend
over."""

from types import SimpleNamespace as NS

import torch
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from torch.utils._pytree import tree_leaves

from sglang_hs.backend import HSAttnBackend
from sglang_hs.settings import LayerGroups
from sglang_hs.testing import small_pool

H_KV, GROUP, D, SINK, WINDOW = 4, 2, 64, 64, 128
GROUPS = [LayerGroups((0, 1), (2, 3)), LayerGroups((1, 3), (0, 2)), LayerGroups((0, 1, 2, 3), ()),
          LayerGroups((), (0, 1, 2, 3))]
PAGES, WIDTH = 90, 2048  # pool pages; req_to_token columns


class EagerGraphs:
    """``short_extends.CudaGraphs``' contract without a GPU: a replay runs the call again and writes its results into
    the first call's outputs, as a CUDA graph's replay rewrites its captured outputs. ``captured``: the buckets of
    every capture, in order."""

    def __init__(self):
        self.captured = []

    def __call__(self, fn, bucket: int):
        out = fn()
        self.captured.append(bucket)
        return NS(replay=lambda: [a.copy_(b) for a, b in zip(tree_leaves(out), tree_leaves(fn())) if a is not None]), out


def layer(i: int, d: int = D):
    return NS(layer_id=i, tp_q_head_num=H_KV * GROUP, tp_k_head_num=H_KV, qk_head_dim=d, v_head_dim=d,
              scaling=d ** -0.5, is_cross_attention=False, logit_cap=0, sliding_window_size=-1)


def make_backend(device: str = "cpu", dtype=torch.float32, head_dim: int = D,
                 extend_graph_tokens: int = 0) -> HSAttnBackend:
    pool = small_pool(GROUPS, 1.0, 1.0, PAGES, dense_reserve=1.0, head_dim=head_dim, sink=SINK, window=WINDOW,
                      dtype=dtype, device=device)
    pool.settings.extend_graph_tokens = extend_graph_tokens
    req_to_token = torch.zeros(4, WIDTH, dtype=torch.int32, device=device)
    runner = NS(device=device, req_to_token_pool=NS(req_to_token=req_to_token), token_to_kv_pool=pool,
                model_config=NS(num_attention_heads=H_KV * GROUP, num_key_value_heads=H_KV),
                server_args=NS(disable_cuda_graph=False, enable_deterministic_inference=False))
    return HSAttnBackend(runner)


def extend_batch(backend, seqs):
    """SGLang's extend of ``seqs``: ``(request row, prefix tokens, new tokens)`` each."""
    req_to_token, device = backend.req_to_token_pool.req_to_token, backend.req_to_token_pool.req_to_token.device
    locs = torch.cat([req_to_token[row, p:p + t] for row, p, t in seqs]).long()
    positions = torch.cat([torch.arange(p, p + t, device=device) for _, p, t in seqs])
    return NS(forward_mode=ForwardMode.EXTEND, req_pool_indices=torch.tensor([s[0] for s in seqs], device=device),
              extend_prefix_lens_cpu=[s[1] for s in seqs], extend_seq_lens_cpu=[s[2] for s in seqs],
              extend_seq_lens=torch.tensor([s[2] for s in seqs], device=device), positions=positions,
              out_cache_loc=locs)


def run_extend(backend, seqs, gen):
    """Every layer's ``forward_extend`` of fresh random q, k, v; returns the layers' outputs."""
    batch = extend_batch(backend, seqs)
    backend.init_forward_metadata(batch)
    t, dtype = batch.out_cache_loc.shape[0], backend.pool.dtype
    d = backend.pool.head_dim
    outs = []
    for i in range(len(GROUPS)):
        q, k, v = (torch.randn(t, h * d, generator=gen).to(dtype).to(batch.out_cache_loc.device)
                   for h in (H_KV * GROUP, H_KV, H_KV))
        outs.append(backend.forward_extend(q, k, v, layer(i, d), batch))
    return outs


def open_row(backend, row: int, first_page: int, tokens: int) -> torch.Tensor:
    """Request ``row`` given pages from ``first_page`` for ``tokens`` tokens; returns their locations."""
    device = backend.pool.stream_index.device
    pages = torch.arange(first_page, first_page + -(-tokens // 64), device=device)
    backend.pool.on_alloc_pages(pages)
    locs = (pages[:, None] * 64 + torch.arange(64, device=device)).flatten()[:tokens]
    backend.req_to_token_pool.req_to_token[row, :tokens] = locs.int()
    return locs


def cache_prefix(backend, row: int, first_page: int, tokens: int, room: int, gen):
    """Request ``row`` on pages from ``first_page`` (``tokens`` and ``room`` more): its prompt prefilled,
    compressed and its streaming pages trimmed, as the radix cache leaves a cached prefix."""
    pool = backend.pool
    locs = open_row(backend, row, first_page, tokens + room)
    run_extend(backend, [(row, 0, tokens)], gen)
    pool.compress_row(row, locs[:tokens], tokens)
    pool.trim_stream(row, locs[:tokens], tokens, running=True)
