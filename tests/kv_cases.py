"""Random decode inputs shared by the decode kernel tests (CPU interpreter and GPU)."""

import torch

from hs_kernels.format import NO_BLOCK, encode_dense, encode_sparse
from hs_kernels.pool import BlockPool
from hs_kernels.pruner import element_mask


def make_case(batch, h_kv, d, seq_lens, p_sparse_k, p_sparse_v, dtype, gen, device):
    """Random pools + index maps: each (seq, head, block) dense or sparse at random, slots shuffled,
    entries past each sequence NO_BLOCK (one spare column). p = 0 / 1 give pools with no sparse /
    no dense slots (the kernel's single-kind paths)."""
    nb = max(-(-s // 64) for s in seq_lens) + 1
    n_total = batch * h_kv * nb
    pools, indexes = [], []
    for operand, p in (("k", p_sparse_k), ("v", p_sparse_v)):
        sparse = torch.rand(batch, h_kv, nb, generator=gen, device=device) < p
        n_sp = int(sparse.sum())
        pool = BlockPool.allocate(operand, d, n_total - n_sp, n_sp, dtype, device)
        blocks = torch.randn(n_total, 64, d, generator=gen, device=device).to(dtype)
        flat = sparse.flatten()
        dense_slots = torch.randperm(n_total - n_sp, generator=gen, device=device)
        sparse_slots = torch.randperm(n_sp, generator=gen, device=device)
        pool.store_dense(dense_slots, blocks[~flat])
        if n_sp:
            sb = blocks[flat]
            pool.store_sparse(sparse_slots, sb, element_mask(sb, operand))
        index = torch.empty(n_total, dtype=torch.int32, device=device)
        index[~flat] = encode_dense(dense_slots.int())
        index[flat] = encode_sparse(sparse_slots.int())
        index = index.view(batch, h_kv, nb)
        for b, s in enumerate(seq_lens):
            index[b, :, -(-s // 64):] = NO_BLOCK
        pools.append(pool)
        indexes.append(index)
    return pools[0], pools[1], indexes[0], indexes[1], torch.tensor(seq_lens, device=device, dtype=torch.int32)


def rel_err(x, y):
    return ((x.float() - y.float()).norm() / y.float().norm().clamp_min(1e-30)).item()
