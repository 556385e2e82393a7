"""Size model (paper eq. 3-6, 10, 11) against the bytes of real compressed pools."""

from fractions import Fraction

import pytest
import torch

import hs_kernels as hk


@pytest.mark.parametrize("dtype, d, h, config", [
    (torch.float16, 128, 2, hk.SparsityConfig(0.5, 1.0)),
    (torch.bfloat16, 64, 3, hk.SparsityConfig(1.0, 1.0, 64, 128)),
    (torch.float32, 256, 1, hk.SparsityConfig(0.3, 0.0)),
    (torch.float16, 128, 2, hk.SparsityConfig(0.0, 0.0)),
])
def test_model_matches_measured_bytes_exactly(dtype, d, h, config):
    torch.manual_seed(0)
    t = 1280  # a multiple of the block size, as eq. 5 assumes
    k, v = torch.randn(2, t, h, d).to(dtype).unbind(0)
    c = hk.compress_sequence(k, v, config)
    nb = t // 64
    s_k = Fraction(int(hk.is_sparse(c.k_index).sum()), h * nb)
    s_v = Fraction(int(hk.is_sparse(c.v_index).sum()), h * nb)
    assert float(s_k) == pytest.approx(hk.measured_sparsity(c.k_index))
    model = hk.model_bytes(t, d, s_k, s_v, num_kv_heads=h, value_bytes=k.element_size())
    measured = hk.measured_bytes(c.k_pool, c.v_pool, c.k_index, c.v_index)
    assert model == measured  # component by component: idx, den, nnz, e
    assert model.total == c.nbytes()  # exactly sized pools: every byte is accounted for
    ratio = Fraction(hk.baseline_bytes(t, d, h, k.element_size())) / measured.total
    assert ratio == hk.compression_ratio(s_k, s_v, head_dim=d, value_bytes=k.element_size())


def test_measured_bytes_count_referenced_slots_of_a_shared_pool():
    torch.manual_seed(1)
    k, v = torch.randn(2, 640, 2, 64, dtype=torch.float16).unbind(0)
    c = hk.compress_sequence(k, v, hk.SparsityConfig(1.0, 1.0, 64, 64))
    big_k = hk.BlockPool("k", torch.cat([c.k_pool.dense] * 3), torch.cat([c.k_pool.values] * 3), torch.cat([c.k_pool.meta] * 3))
    big_v = hk.BlockPool("v", torch.cat([c.v_pool.dense] * 3), torch.cat([c.v_pool.values] * 3), torch.cat([c.v_pool.meta] * 3))
    assert hk.measured_bytes(big_k, big_v, c.k_index, c.v_index) == hk.measured_bytes(c.k_pool, c.v_pool, c.k_index, c.v_index)
    assert big_k.nbytes() == 3 * c.k_pool.nbytes()


def test_compression_ratio_formulas():
    # eq. 6 with the paper's int16 index and fp16 values: 1 / (1 - 0.21875 (S_K + S_V) + 1 / (B D))
    for s_k, s_v in [(Fraction(1, 2), Fraction(1)), (Fraction(1), Fraction(1)), (Fraction(0), Fraction(1, 4))]:
        exact = hk.compression_ratio(s_k, s_v, head_dim=128, value_bytes=2, index_bytes=2)
        assert exact == 1 / (1 - Fraction(7, 32) * (s_k + s_v) + Fraction(1, 64 * 128))
    # with our int32 index map the index term doubles
    assert hk.compression_ratio(Fraction(1), Fraction(1), head_dim=128) == 1 / (1 - Fraction(7, 16) + Fraction(2, 64 * 128))
    # the approximation and the paper's worked examples
    assert hk.compression_ratio(0.5, 1.0) == pytest.approx(1 / (1 - 0.21875 * 1.5))
    assert round(hk.compression_ratio(0.5, 1.0), 2) == 1.49 and round(hk.compression_ratio(1.0, 1.0), 2) == 1.78
    assert hk.decode_speedup(1.0, 1.0) == hk.compression_ratio(1.0, 1.0)
    assert hk.prefill_speedup(0.5, 1.0) == pytest.approx(1.6) and hk.prefill_speedup(1.0, 1.0) == 2.0
    assert hk.prefill_speedup(0, 0) == 1 and hk.compression_ratio(0, 0) == 1


def test_fp32_metadata_is_one_bit_per_element():
    b = hk.model_bytes(64, 128, Fraction(1), Fraction(0), value_bytes=4)
    assert b.e == 64 * 128 / 8 and b.nnz == 64 * 128 * 4 / 2 and b.den == 64 * 128 * 4
