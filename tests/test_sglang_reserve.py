"""The pool's reserve (dense blocks and stream slots beyond the sparsity's and checkpoints' share).

'auto' (the default) is a fixed number of pages, one prefill chunk plus running requests' sinks and
windows, taken off SGLang's memory budget before it divides by the bytes per token; a fraction is
counted in the bytes per token. Either way the pool allocates what the sizing formula charged.
"""

import json

import pytest

pytest.importorskip("sglang")

from sglang.srt.model_executor.pool_configurator import DefaultPoolConfigurator  # noqa: E402
from sglang.srt.plugins.hook_registry import HookRegistry  # noqa: E402

from sglang_hs import plugin  # noqa: E402
from sglang_hs.kv_pool import bytes_per_token, reserve_page_bytes  # noqa: E402
from sglang_hs.settings import HSConfigError, LayerGroups, auto_reserve_pages, resolve, split_hs_flags  # noqa: E402
from sglang_hs.testing import small_pool, tiny_model  # noqa: E402

GROUPS = LayerGroups(retrieval=(0, 1, 2), streaming=(3,))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    model = tiny_model(str(tmp_path_factory.mktemp("m") / "m"), layers=1)
    config = json.load(open(f"{model}/config.json"))
    config["hierasparse"] = {"format_version": 1, "tp_size": 1, "num_key_value_heads": 4, "retrieval_ratio": 0.5,
                             "layers": [{"num_retrieval": 2, "is_retrieval": [True, True, False, False]}]}
    with open(f"{model}/config.json", "w") as f:
        json.dump(config, f)
    return model


def test_auto_reserve_holds_a_chunk_and_the_running_windows():
    # 8192-token chunk: 128 pages + 1 (unaligned start); per request: 2 sink + 4 window + 2 open pages
    assert auto_reserve_pages(8192, 32, 128, 256) == 129 + 32 * 8
    assert auto_reserve_pages(100, 1, 0, 1) == (2 + 1) + 1 * (0 + 1 + 2)


def test_reserve_flag_and_resolution(prepared):
    assert split_hs_flags(["--hs-dense-reserve", "auto"])[0] == {"dense_reserve": None}
    assert split_hs_flags(["--hs-dense-reserve=0.1"])[0] == {"dense_reserve": 0.1}
    with pytest.raises(HSConfigError, match="--hs-dense-reserve must be a fraction or 'auto', got 'lots'"):
        split_hs_flags(["--hs-dense-reserve", "lots"])
    s = resolve(prepared, {}, chunk_tokens=1024, running_requests=4)
    assert s.dense_reserve is None and s.auto_reserve_pages == auto_reserve_pages(1024, 4, s.sink_tokens, s.window_tokens)
    assert s.reserve_pages(10_000) == s.auto_reserve_pages and s.reserve_pages(5) == 5
    assert resolve(prepared, {"dense_reserve": "auto"}).dense_reserve is None
    s = resolve(prepared, {"dense_reserve": 0.1})
    assert s.dense_reserve == 0.1 and s.reserve_pages(1000) == 100
    # unset: the chunk is the whole context (no chunked prefill)
    s = resolve(prepared, {})
    assert s.auto_reserve_pages == auto_reserve_pages(json.load(open(f"{prepared}/config.json"))["max_position_embeddings"],
                                                      32, s.sink_tokens, s.window_tokens)


@pytest.mark.parametrize("s_k, s_v", [(1.0, 1.0), (0.0, 1.0), (0.5, 0.0)])
@pytest.mark.parametrize("reserve", [None, 0.05])
def test_pool_allocates_what_the_sizing_charged(s_k, s_v, reserve):
    pages = 512
    pool = small_pool(GROUPS, s_k, s_v, pages, dense_reserve=reserve, layers=2, auto_reserve_pages=20)
    s = pool.settings
    per_token = bytes_per_token(s, 64, 4)
    fixed = 0 if reserve is not None else 20 * reserve_page_bytes(s, 64, 4)
    charged = pages * 64 * per_token + fixed
    got = pool.get_kv_size_bytes()
    assert abs(got - charged) / charged < 0.01, (got, charged)  # SGLang's dummy page and rounding up
    reserve_pages = 20 if reserve is None else pages * reserve
    assert pages * s.stream_fraction + reserve_pages <= pool.stream_free.capacity <= pages * s.stream_fraction + reserve_pages + 2


def test_budget_loses_the_reserve_bytes_before_the_division():
    plugin.register()
    HookRegistry.apply_hooks()  # as SGLang does at start-up; idempotent
    configurator = object.__new__(DefaultPoolConfigurator)
    configurator._cell_size = 1000
    assert configurator.calculate_pool_sizes(1_064_000, 64).max_total_num_tokens == 1024  # no reserve set: stock sizing
    configurator.hs_reserve = (10, 6_400)  # what _cell_size leaves for an auto reserve: pages, bytes per page
    assert configurator.calculate_pool_sizes(1_064_000, 64).max_total_num_tokens == 960  # (1,064,000 - 64,000) / 1000
    # too small for 10 reserve pages: 5 pages of 64,000 B, each with its 6,400 B reserve share
    assert configurator.calculate_pool_sizes(352_000, 64).max_total_num_tokens == 320


@pytest.mark.parametrize("hs_args, flags, expected", [
    ({}, {}, 32),                                    # auto reserve: running requests capped at what it holds
    ({}, {"max_running_requests": 100}, 100),         # an explicit cap stays (the reserve grows with it)
    ({"dense_reserve": 0.1}, {}, None),               # a fraction: SGLang's own default
])
def test_auto_reserve_caps_running_requests(prepared, monkeypatch, hs_args, flags, expected):
    from sglang.srt.server_args import ServerArgs

    from sglang_hs.settings import ENV_ARGS
    from sglang_hs.testing import use_cpu_placeholder

    use_cpu_placeholder()
    monkeypatch.setenv(ENV_ARGS, json.dumps(hs_args))
    plugin.register()
    HookRegistry.apply_hooks()
    args = ServerArgs(model_path=prepared, attention_backend="hs", device="cpu", **flags)
    assert args.max_running_requests == expected
    assert ServerArgs(model_path=prepared, device="cpu").max_running_requests is None  # inert without hs
