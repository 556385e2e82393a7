"""The method's simulation (sglang_hs.eval.simulate): its parts against direct masked attention and the pruner, and
the whole against plain transformers."""

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")

from hs_kernels import BLOCK_SIZE, SparsityConfig  # noqa: E402
from hs_kernels.pruner import prune_blocks  # noqa: E402

from sglang_hs.eval.simulate import Simulator, keep_masks, pruned, streaming_decode, streaming_prefill  # noqa: E402
from sglang_hs.testing import prepare, tiny_model  # noqa: E402


def masked_attention(q, k, v, allowed, scale):
    """Dense reference: ``allowed [T, S]`` bool, GQA by repeating KV heads."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    return (scores.softmax(-1) @ v.double()).to(q.dtype)


@pytest.mark.parametrize("t,sink,window", [(700, 128, 256), (300, 0, 64), (90, 128, 256), (513, 64, 200)])
def test_streaming_prefill_is_sink_plus_window(t, sink, window):
    torch.manual_seed(t)
    q, k, v = torch.randn(2, 6, t, 16), torch.randn(2, 2, t, 16), torch.randn(2, 2, t, 16)
    i, j = torch.arange(t)[:, None], torch.arange(t)[None]
    allowed = (j <= i) & ((j < sink) | (j > i - window))
    want = masked_attention(q, k, v, allowed, 0.25)
    got = streaming_prefill(q, k, v, 0.25, sink, window)
    assert torch.allclose(got, want, atol=1e-5)


def test_streaming_decode_is_sink_plus_window_of_each_row():
    torch.manual_seed(1)
    lengths = torch.tensor([700, 300, 65])
    cap = 768
    q, k, v = torch.randn(3, 4, 1, 16), torch.randn(3, 2, cap, 16), torch.randn(3, 2, cap, 16)
    got = streaming_decode(q, k, v, lengths, 0.25, 128, 256)
    for row, n in enumerate(lengths.tolist()):
        j = torch.arange(cap)[None]
        allowed = (j < n) & ((j < 128) | (j > n - 1 - 256))
        want = masked_attention(q[row:row + 1], k[row:row + 1], v[row:row + 1], allowed, 0.25)
        assert torch.allclose(got[row:row + 1], want, atol=1e-5)


@pytest.mark.parametrize("s", [1.0, 0.5])
@pytest.mark.parametrize("op", ["k", "v"])
def test_pruned_is_the_pruners_choice_per_row(op, s):
    torch.manual_seed(2)
    cfg = SparsityConfig(s, s, 64, 128)
    lengths = torch.tensor([1000, 600])
    x = torch.randn(2, 3, 1024, 64)
    x[1, :, 600:] = 0  # a shorter row's padding
    got = pruned(x, keep_masks(x, op), op, lengths, cfg)
    for row, n in enumerate(lengths.tolist()):
        nb = -(-n // BLOCK_SIZE)
        blocks = x[row, :, :nb * BLOCK_SIZE].reshape(3, nb, BLOCK_SIZE, 64)
        sparse, keep = prune_blocks(blocks, op, n, s, 64, 128)
        want = torch.where(sparse[..., None, None] & ~keep, 0.0, blocks).reshape(3, -1, 64)
        assert torch.equal(got[row, :, :nb * BLOCK_SIZE], want)
        assert sparse.any()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("sim")
    src = tiny_model(str(root / "tiny"), layers=2, kv_heads=4, heads=8, hidden=256)
    return src, prepare(src, str(root / "r05"), 0.5)


def test_every_group_retrieval_dense_is_plain_transformers(checkpoints):
    from transformers import AutoModelForCausalLM

    src, prepared = checkpoints
    torch.manual_seed(3)
    prompts = [torch.randint(2, 500, (n,)).tolist() for n in (300, 170, 333)]
    ref = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
    want = []
    for p in prompts:
        out = ref.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                           max_new_tokens=10, do_sample=False, eos_token_id=None)
        want.append(out[0, len(p):].tolist())
    sim = Simulator(prepared)
    sim.configure({"retrieval_ratio": 1.0, "prefill_sk": 0.0, "prefill_sv": 0.0, "decode_sk": 0.0, "decode_sv": 0.0})
    sim.stop = set()
    assert sim.greedy(prompts, 10) == want


def test_a_row_decodes_as_it_would_alone(checkpoints):
    _, prepared = checkpoints
    torch.manual_seed(4)
    prompts = [torch.randint(2, 500, (n,)).tolist() for n in (700, 420, 133)]
    sim = Simulator(prepared)
    sim.configure({"retrieval_ratio": 0.5, "prefill_sv": 1.0, "decode_sk": 1.0, "decode_sv": 1.0,
                   "sink_tokens": 64, "window_tokens": 128})
    sim.stop = set()
    assert sim.greedy(prompts, 8) == [sim.greedy([p], 8)[0] for p in prompts]


def test_sparsity_and_streaming_change_the_answer(checkpoints):
    """The settings reach the attention: pruning every eligible block of K and V moves the logits."""
    _, prepared = checkpoints
    torch.manual_seed(5)
    prompt = torch.randint(2, 500, (900,)).tolist()
    sim = Simulator(prepared)
    outs = []
    for hs in ({"retrieval_ratio": 1.0}, {"retrieval_ratio": 1.0, "prefill_sk": 1.0, "prefill_sv": 1.0},
               {"retrieval_ratio": 0.25, "window_tokens": 64, "sink_tokens": 0}):
        sim.configure({"prefill_sk": 0.0, "prefill_sv": 0.0, "decode_sk": 0.0, "decode_sv": 0.0, **hs})
        sim.plan.phase, sim.plan.lengths, sim.plan.capacity = "prefill", torch.tensor([900]), 960
        with torch.no_grad():
            hidden = sim.model.model(input_ids=torch.tensor([prompt]), use_cache=False).last_hidden_state
        outs.append(F.log_softmax(sim.model.lm_head(hidden[0, -1]), -1))
    assert (outs[0] - outs[1]).abs().max() > 1e-3 and (outs[0] - outs[2]).abs().max() > 1e-3
