"""Random pools and index maps shared by the kernel tests (decode on CPU interpreter and GPU, prefill on GPU), and
the Trans-Both driver's oracle."""

import importlib.util
from pathlib import Path

import torch

from hs_kernels.attention import streaming_keys
from hs_kernels.format import NO_BLOCK, encode_dense, encode_sparse
from hs_kernels.pool import BlockPool
from hs_kernels.pruner import element_mask


def special_blocks(n, d, dtype, gen, device):
    """Random token-major blocks ``[n, 64, d]`` for the compressors: half the blocks Gaussian, half
    small integers (many equal magnitudes), sprinkled with NaN, inf and -0; block 0 only of NaN,
    +-inf and 1 (groups where NaN and inf compete for the two kept places)."""
    x = torch.randn(n, 64, d, generator=gen, device=device)
    ties = torch.randint(-2, 3, (n, 64, d), generator=gen, device=device).float()
    pick = torch.rand(n, 1, 1, generator=gen, device=device) < 0.5
    x = torch.where(pick, ties, x).to(dtype)
    special = torch.rand(n, 64, d, generator=gen, device=device)
    x[special < 0.002] = float("nan")
    x[(special > 0.002) & (special < 0.004)] = float("inf")
    x[(special > 0.004) & (special < 0.006)] = -0.0
    choices = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0], device=device)
    x[0] = choices[torch.randint(0, 4, (64, d), generator=gen, device=device)].to(dtype)
    return x


def store_shuffled(operand, blocks, sparse, gen):
    """A pool holding token-major ``blocks [N, 64, D]``, block n 2:4-compressed where ``sparse[n]``,
    at shuffled slots; returns ``(pool, index [N])`` (exactly sized: no sparse / no dense slots when
    none / all are sparse, the kernels' single-kind paths)."""
    n_total, n_sp = blocks.shape[0], int(sparse.sum())
    pool = BlockPool.allocate(operand, blocks.shape[-1], n_total - n_sp, n_sp, blocks.dtype, blocks.device)
    dense_slots = torch.randperm(n_total - n_sp, generator=gen, device=blocks.device)
    sparse_slots = torch.randperm(n_sp, generator=gen, device=blocks.device)
    pool.store_dense(dense_slots, blocks[~sparse])
    if n_sp:
        pool.store_sparse(sparse_slots, blocks[sparse], element_mask(blocks[sparse], operand))
    index = torch.empty(n_total, dtype=torch.int32, device=blocks.device)
    index[~sparse] = encode_dense(dense_slots.int())
    index[sparse] = encode_sparse(sparse_slots.int())
    return pool, index


def make_case(batch, h_kv, d, seq_lens, p_sparse_k, p_sparse_v, dtype, gen, device):
    """Random pools + index maps ``[B, H_kv, nb]``: each (seq, head, block) dense or sparse with
    probability p, entries past each sequence NO_BLOCK (one spare column)."""
    nb = max(-(-s // 64) for s in seq_lens) + 1
    n_total = batch * h_kv * nb
    pools, indexes = [], []
    for operand, p in (("k", p_sparse_k), ("v", p_sparse_v)):
        sparse = torch.rand(n_total, generator=gen, device=device) < p
        blocks = torch.randn(n_total, 64, d, generator=gen, device=device).to(dtype)
        pool, index = store_shuffled(operand, blocks, sparse, gen)
        index = index.view(batch, h_kv, nb)
        for b, s in enumerate(seq_lens):
            index[b, :, -(-s // 64):] = NO_BLOCK
        pools.append(pool)
        indexes.append(index)
    return pools[0], pools[1], indexes[0], indexes[1], torch.tensor(seq_lens, device=device, dtype=torch.int32)


def paged(k_index, v_index, gen, spare_pages=5):
    """``make_case``'s maps ``[B, H_kv, nb]`` as a serving pool holds them: maps ``[num_pages, H_kv]`` and pages
    ``[B, nb]`` (int32, shuffled) with ``maps[pages[b, j]] == index[b, :, j]``. The spare pages hold other pages'
    entries (real slots, wrong ones): a kernel that reads a row it should not gives a wrong result, not a fault."""
    batch, h_kv, nb = k_index.shape
    num_pages = batch * nb + spare_pages
    pages = torch.randperm(num_pages, generator=gen, device=gen.device)[:batch * nb].view(batch, nb)
    maps = []
    for index in (k_index, v_index):
        rows = index.transpose(1, 2).reshape(-1, h_kv)
        used = (rows[:, 0] != NO_BLOCK).nonzero()[:, 0]  # a sequence's column is used in every head or in none
        m = rows[used[torch.randint(0, len(used), (num_pages,), generator=gen, device=gen.device)]].clone()
        m[pages.flatten()] = rows
        maps.append(m)
    return maps[0], maps[1], pages.to(torch.int32)


def extend_rows(seqs, padding, seq_pages):
    """An extend's tokens as decode rows: sequence ``i`` of ``seqs`` ``(prefix, tokens)`` (its pages ``seq_pages[i]``)
    as rows at lengths ``prefix + 1 ..``, group ``7 i + 3``; then ``padding`` rows of length 1, group -1, on the first
    sequence's first page: a page with real slots, as SGLang's padding page 0 is in a serving pool (``paged`` shuffles
    pages, so page 0 may hold a sequence's unused columns, NO_BLOCK). Returns ``(pages, groups, seq_lens)``, int32 on
    ``seq_pages``' device."""
    dev = seq_pages.device
    which = [i for i, (p, t) in enumerate(seqs) for _ in range(t)]
    lens = [p + 1 + r for p, t in seqs for r in range(t)] + [1] * padding
    pages = torch.cat([seq_pages[which], seq_pages[0, 0].expand(padding, seq_pages.shape[1])])
    groups = torch.tensor([7 * i + 3 for i in which] + [-1] * padding, dtype=torch.int32, device=dev)
    return pages, groups, torch.tensor(lens, dtype=torch.int32, device=dev)


def make_prefix(h_kv, d, prefix_len, p_k, p_v, dtype, gen, dev="cuda"):
    """Pools + [H_kv, nb] index maps for a prefix: each (head, block) dense or sparse with
    probability p (p = 0 / 1 exactly all dense / all sparse), slots shuffled, one spare NO_BLOCK
    column, NaN in the rows past the prefix of its last block."""
    used = -(-prefix_len // 64)
    nb = used + 1
    tail = prefix_len % 64
    pools, indexes = [], []
    for operand, p in (("k", p_k), ("v", p_v)):
        sparse = torch.rand(h_kv, used, generator=gen, device=dev) < p
        blocks = torch.randn(h_kv, used, 64, d, generator=gen, device=dev).to(dtype)
        if tail:
            blocks[:, -1, tail:] = float("nan")
        pool, flat_index = store_shuffled(operand, blocks.flatten(0, 1), sparse.flatten(), gen)
        index = torch.full((h_kv, nb), NO_BLOCK, dtype=torch.int32, device=dev)
        index[:, :used] = flat_index.view(h_kv, used)
        pools.append(pool)
        indexes.append(index)
    return pools[0], pools[1], indexes[0], indexes[1]


def prefill_inputs(h_q, h_kv, d, dtype, t, prefix_len, p_k, p_v):
    """Fresh random GPU prefill inputs: ``make_prefix`` pools and index maps, q/k/v of a ``t``-token
    chunk and a scale (the default one, or 0.07 for odd prefixes)."""
    import math

    gen = torch.Generator(device="cuda")
    gen.seed()
    k_pool, v_pool, k_index, v_index = make_prefix(h_kv, d, prefix_len, p_k, p_v, dtype, gen)
    q, k, v = (torch.randn(t, h, d, generator=gen, device="cuda").to(dtype) for h in (h_q, h_kv, h_kv))
    scale = 1.0 / math.sqrt(d) if prefix_len % 2 == 0 else 0.07
    return k_pool, v_pool, k_index, v_index, q, k, v, scale


def interpret(script: str, cases: list, timeout: int = 900) -> list:
    """Run ``script`` (argv: this directory, the JSON cases) under Triton's CPU interpreter in a fresh
    process (it must be chosen before Triton decorates the kernels); return its last line's JSON."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, TRITON_INTERPRET="1", HS_KERNELS_NO_GPU="1")
    proc = subprocess.run([sys.executable, "-c", script, os.path.dirname(__file__), json.dumps(cases)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def rel_err(x, y):
    return ((x.float() - y.float()).norm() / y.float().norm().clamp_min(1e-30)).item()


def stream_case(layout, b, t, n, h_q, h_kv, d, sink, window, dtype, gen, device):
    """Streaming-attention inputs ``(q, q_pos, k, v, k_pos)`` in one of the key layouts:
      * "backend": one sequence as the serving backend passes it (``streaming_keys``), with a prefix
        of ``n`` tokens (the chunk queries are positions n .. n + t - 1);
      * "decode": ``b`` sequences of different lengths, one query each at its last position, ``n``
        key slots (sink, window), padded with empties (-1) after each sequence's own;
      * "shuffled": ``n`` distinct positions in random order, a quarter of the slots empty;
      * "unseen": every key after every query."""
    if layout == "backend":
        k_pos, q_pos = streaming_keys(n, n + t, sink, window)[None], torch.arange(n, n + t)[None]
    elif layout == "decode":
        lens = torch.randint(1, 4 * n, (b,), generator=gen)
        sink_end = -(-sink // 64) * 64
        j = torch.arange(n)
        start = ((lens - window) // 64 * 64).clamp(min=sink_end)[:, None]
        pos = torch.where(j < sink_end, j, start + j - sink_end)
        k_pos, q_pos = torch.where(pos < lens[:, None], pos, -1), (lens - 1)[:, None]
    elif layout == "shuffled":
        k_pos = torch.stack([torch.randperm(2 * n, generator=gen)[:n] for _ in range(b)])
        k_pos[torch.rand(b, n, generator=gen) < 0.25] = -1
        q_pos = torch.stack([torch.randperm(2 * n, generator=gen)[:t] for _ in range(b)])
    else:
        q_pos = torch.arange(t)[None].expand(b, t)
        k_pos = (t + torch.arange(n))[None].expand(b, n)
    b, n = k_pos.shape
    q = torch.randn(b, t, h_q, d, generator=gen).to(dtype)
    k, v = (torch.randn(b, n, h_kv, d, generator=gen).to(dtype) for _ in range(2))
    return q.to(device), q_pos.to(device), k.to(device), v.to(device), k_pos.to(device)


def trans_both_driver():
    """benchmarks/kernels/probes/trans_both_sp.py as a module (a script, not part of the package): its oracle and pools."""
    path = Path(__file__).parent.parent / "benchmarks" / "kernels" / "probes" / "trans_both_sp.py"
    spec = importlib.util.spec_from_file_location("trans_both_sp_driver", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
