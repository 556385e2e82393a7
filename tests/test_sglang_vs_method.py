"""The served path against the method's simulation (sglang_hs.eval.simulate) on CPU: the same greedy tokens, also
when SGLang prefills a long prompt in chunks, where the earlier chunks are read back from the cache."""

import pytest
import torch

pytest.importorskip("sglang")
pytest.importorskip("transformers")

from sglang_hs.eval.simulate import Simulator  # noqa: E402
from sglang_hs.testing import cpu_engine, prepare, tiny_model, use_cpu_placeholder  # noqa: E402

pytestmark = pytest.mark.slow

# prefill dense, the cache 2:4 in K and V: a later chunk must see the earlier ones as prefill does (dense)
SETTING = {"retrieval_ratio": 0.5, "prefill_sk": 0.0, "prefill_sv": 0.0, "decode_sk": 1.0, "decode_sv": 1.0,
           "sink_tokens": 64, "window_tokens": 128, "extend_graph_tokens": 0}


def test_chunked_prefill_with_a_sparser_cache_is_the_method(tmp_path):
    src = tiny_model(str(tmp_path / "tiny"), layers=2, kv_heads=4, heads=8, hidden=256, seed=7)
    model = prepare(src, str(tmp_path / "r05"), 0.5)
    use_cpu_placeholder()
    torch.manual_seed(8)
    prompts = [torch.randint(2, 500, (n,)).tolist() for n in (900, 700)]
    sim = Simulator(model)
    sim.configure(SETTING)
    sim.stop = set()
    want = sim.greedy(prompts, 10)
    engine = cpu_engine(model, {k: v for k, v in SETTING.items()}, max_total_tokens=8192, chunked_prefill_size=256)
    try:
        got = [engine.generate(input_ids=p, sampling_params={"max_new_tokens": 10, "temperature": 0.0,
                                                             "ignore_eos": True})["output_ids"] for p in prompts]
    finally:
        engine.shutdown()
    assert got == want
