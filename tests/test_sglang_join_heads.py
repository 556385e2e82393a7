"""``backend.join_heads``: a layer's output from its retrieval and streaming heads' outputs, by one concatenation where
the kinds' heads are contiguous slices, else by index; the same values either way. And ``forward_extend``'s two paths
(one unpadded sequence: joined; otherwise rows written by index) give the same rows."""

import pytest
import torch

pytest.importorskip("sglang")

from sglang_hs.backend import join_heads  # noqa: E402


def expected(parts, n_heads):
    out = torch.full((parts[0][1].shape[0], n_heads, parts[0][1].shape[2]), float("nan"))
    for heads, x in parts:
        out[:, heads] = x
    return out


def part(heads, t=5, d=4, seed=0):
    n = len(range(8)[heads]) if isinstance(heads, slice) else heads.numel()
    return heads, torch.randn(t, n, d, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("parts", [
    [part(slice(0, 3)), part(slice(3, 8), seed=1)],           # retrieval first
    [part(slice(5, 8)), part(slice(0, 5), seed=1)],           # streaming first
    [part(slice(0, 8))],                                       # one kind
    [part(torch.tensor([0, 1, 4, 5])), part(torch.tensor([2, 3, 6, 7]), seed=1)],  # kinds interleaved: by index
    [part(slice(0, 2)), part(slice(3, 8), seed=1)],            # a gap (no head 2): by index, never a short concat
])
def test_join_heads_matches_writing_each_kind_by_index(parts):
    joined = join_heads(parts, 8)
    want = expected(parts, 8)
    covered = ~want.isnan()
    assert joined.shape == want.shape
    assert torch.equal(joined[covered], want[covered])


def test_contiguous_kinds_are_one_concatenation_or_the_output_itself():
    (h1, x1), (h2, x2) = part(slice(0, 3)), part(slice(3, 8), seed=1)
    joined = join_heads([(h2, x2), (h1, x1)], 8)
    assert torch.equal(joined, torch.cat([x1, x2], 1)) and joined.is_contiguous()
    whole = part(slice(0, 8))
    assert join_heads([whole], 8) is whole[1]


def test_a_padded_extend_computes_the_rows_of_the_unpadded_one():
    """The one-sequence path (no slicing, outputs joined) and the general one (rows sliced, outputs written by index)
    agree: the same question alone, then padded with rows SGLang would send to page 0."""
    from types import SimpleNamespace as NS

    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from benchmarks.serving import probe_host

    args = probe_host.parse(["--device", "cpu", "--dtype", "float32", "--layers", "2", "--prefix", "700",
                             "--question", "16", "--head-dim", "64", "--repeats", "1"])
    backend, locs = probe_host.build(args)
    p, t, pad, h_q, h_kv, d = 700, 16, 5, args.kv_heads * args.group, args.kv_heads, 64
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(t + pad, h * d, generator=gen) for h in (h_q, h_kv, h_kv))
    rows = torch.tensor([probe_host.ROW])
    outs = []
    for n, loc in ((t, locs[p:p + t]), (t + pad, torch.cat([locs[p:p + t], torch.zeros(pad, dtype=locs.dtype)]))):
        batch = NS(forward_mode=ForwardMode.EXTEND, req_pool_indices=rows, extend_prefix_lens_cpu=[p],
                   extend_seq_lens_cpu=[t], out_cache_loc=loc)
        backend.init_forward_metadata(batch)
        outs.append([backend.forward_extend(q[:n], k[:n], v[:n], layer, batch) for layer in probe_host.layers(args)])
    for alone, padded in zip(*outs):
        assert alone.shape == (t, h_q * d) and padded.shape == (t + pad, h_q * d)
        assert torch.equal(alone, padded[:t])
