"""Block format: metadata bit layout (hand-written cases), index map signs, bit-exact round trips."""

import pytest
import torch

import hs_kernels as hk
from hs_kernels.compressor import compress_24, decompress_24, pack_nibbles, unpack_nibbles
from hs_kernels.format import sparse_shapes

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
NIBBLE = {(0, 1): 0x4, (0, 2): 0x8, (0, 3): 0xC, (1, 2): 0x9, (1, 3): 0xD, (2, 3): 0xE}


def _mask_from_pairs(pairs):
    m = torch.zeros(len(pairs) * 4, dtype=torch.bool)
    for g, (a, b) in enumerate(pairs):
        m[4 * g + a] = m[4 * g + b] = True
    return m


def _as_signed16(word):
    return word - 0x10000 if word >= 0x8000 else word


@pytest.mark.parametrize("pairs, word", [
    ([(0, 1)] * 4, 0x4444),
    ([(2, 3)] * 4, 0xEEEE),
    ([(0, 1), (2, 3), (0, 3), (1, 2)], 0x9CE4),  # nibble j <-> group j, little-endian
    ([(1, 3), (0, 2), (0, 1), (0, 1)], 0x448D),
])
def test_metadata_bits_hand_written(pairs, word):
    x = torch.arange(16, dtype=torch.float32)
    values, meta = compress_24(x, _mask_from_pairs(pairs))
    assert meta.dtype == torch.int16 and meta.shape == (1,)
    assert int(meta[0]) == _as_signed16(word)
    expected_values = [float(4 * g + i) for g, pair in enumerate(pairs) for i in pair]
    assert values.tolist() == expected_values


def test_metadata_matches_independent_bitwise_encoder():
    torch.manual_seed(0)
    pairs = list(NIBBLE)
    choice = torch.randint(0, 6, (3, 32))  # 3 rows x 32 groups = 128 elements
    mask = torch.stack([_mask_from_pairs([pairs[int(c)] for c in row]) for row in choice])
    _, meta = compress_24(torch.randn(3, 128), mask)
    for r in range(3):
        for m in range(8):
            word = sum(NIBBLE[pairs[int(choice[r, 4 * m + j])]] << (4 * j) for j in range(4))
            assert int(meta[r, m]) == _as_signed16(word)
    nibbles = unpack_nibbles(meta)
    assert torch.equal(torch.stack((nibbles & 3, nibbles >> 2), -1), torch.tensor([[pairs[int(c)] for c in row] for row in choice]))
    assert torch.equal(pack_nibbles(nibbles), meta)


def test_v_metadata_runs_along_tokens():
    block = torch.zeros(1, 64, 64)
    mask = torch.zeros(1, 64, 64, dtype=torch.bool)
    mask[0, [1, 3], 5] = True  # channel 5, token group 0 keeps tokens 1 and 3
    mask[0, 4:, 5] = torch.tensor([True, True, False, False]).repeat(15)
    mask[0, :, [c for c in range(64) if c != 5]] = torch.tensor([True, False, True, False]).repeat(16)[:, None]
    block[0, :, 5] = torch.arange(64, dtype=torch.float32)
    values, meta = hk.compress_blocks(block, mask, "v")
    assert values.shape == (1, 64, 32) and meta.shape == (1, 64, 4)
    assert int(meta[0, 5, 0]) & 0xF == NIBBLE[(1, 3)]
    assert (int(meta[0, 5, 0]) & 0xFFFF) >> 4 == 0x444
    assert values[0, 5, :4].tolist() == [1.0, 3.0, 4.0, 5.0]
    assert int(meta[0, 0, 0]) & 0xFFFF == 0x8888


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_sparse_shapes(head_dim):
    assert sparse_shapes("k", head_dim) == ((64, head_dim // 2), (64, head_dim // 16))
    assert sparse_shapes("v", head_dim) == ((head_dim, 32), (head_dim, 4))


def test_index_map_signs():
    slots = torch.arange(5)
    dense, sparse = hk.encode_dense(slots), hk.encode_sparse(slots)
    assert (dense >= 0).all() and (sparse < 0).all()
    assert int(hk.encode_sparse(0)) == -1  # sparse slot 0 is never 0
    assert torch.equal(hk.slot_of(dense.int()), slots) and torch.equal(hk.slot_of(sparse.int()), slots)
    assert not hk.is_sparse(torch.zeros(3, dtype=torch.int32)).any()
    fresh = hk.new_index_map(2, 3)
    assert fresh.dtype == torch.int32 and (fresh == hk.NO_BLOCK).all()
    pool = hk.BlockPool.allocate("k", 64, 2, 2, torch.float32)
    with pytest.raises(ValueError, match="slot out of range"):
        pool.gather(fresh)


def _specials(dtype, shape):
    x = torch.randn(shape).to(dtype)
    flat = x.view(-1)
    flat[:6] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 1e-40]).to(dtype)
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("operand", ["k", "v"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_round_trip_bit_exact(dtype, operand, head_dim):
    torch.manual_seed(1)
    blocks = _specials(dtype, (5, 64, head_dim))
    mask = hk.element_mask(torch.randn(5, 64, head_dim).to(dtype), operand)
    values, meta = hk.compress_blocks(blocks, mask, operand)
    back = hk.decompress_blocks(values, meta, operand)
    expected = torch.where(mask, blocks, torch.zeros((), dtype=dtype))
    int_view = {2: torch.int16, 4: torch.int32}[blocks.element_size()]
    assert back.dtype == dtype and back.shape == blocks.shape
    assert torch.equal(back.view(int_view), expected.view(int_view))


@pytest.mark.parametrize("dtype", DTYPES)
def test_pool_store_gather_round_trip(dtype):
    torch.manual_seed(2)
    blocks = torch.randn(4, 64, 128).to(dtype)
    for operand in ("k", "v"):
        pool = hk.BlockPool.allocate(operand, 128, 3, 3, dtype)
        mask = hk.element_mask(blocks, operand)
        pool.store_dense(torch.tensor([2, 0]), blocks[:2])
        pool.store_sparse(torch.tensor([1, 0]), blocks[2:], mask[2:])
        index = torch.tensor([2, 0, hk.encode_sparse(1), hk.encode_sparse(0)], dtype=torch.int32)
        got = pool.gather(index)
        assert torch.equal(got[:2], blocks[:2])
        assert torch.equal(got[2:], torch.where(mask[2:], blocks[2:], torch.zeros((), dtype=dtype)))


def test_decompress_24_rejects_mismatched_rows_and_corrupt_metadata():
    with pytest.raises(ValueError, match="same 2:4 rows"):
        decompress_24(torch.zeros(3, 8), torch.zeros(3, 2, dtype=torch.int16))
    with pytest.raises(ValueError, match="corrupt"):
        decompress_24(torch.zeros(1, 8), torch.zeros(1, 1, dtype=torch.int16))  # nibble 0: idx0 == idx1 == 0
