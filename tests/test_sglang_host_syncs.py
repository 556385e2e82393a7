"""The backend's GPU path as the host runs it, checked on CPU: SGLang's layers call ``forward_extend`` and
``forward_decode`` on fake CUDA tensors (torch's FakeTensorMode: shapes and dtypes, no data), the GPU's capabilities
reported as an H100's, and every kernel launch (Triton, and the CUDA libraries' entry points) recorded instead of run.

Host syncs are recorded: reads of a GPU value (``.item()``, ``.tolist()``, ``bool()``; answered from a script, else 0)
and blocking uploads (a copy from pageable memory, a GPU tensor indexed with host indices); a data-dependent shape
(``nonzero``, a boolean mask) raises. Checked: the layers of an extend make none, except the one read of
``prefix_splits`` at the first layer where the CUDA prefix path may take the chunk; a decode step makes none at all (its
metadata is captured in CUDA graphs); every layer launches what the others do; the allocator places tokens, and gives
new pages their slots, with none. The kernels themselves are tested on the GPU (tests/test_kernels_gpu_*.py), the CPU
path's results elsewhere."""

import collections
from types import SimpleNamespace as NS

import pytest
import torch

pytest.importorskip("sglang")
pytest.importorskip("triton")

import triton.runtime.jit  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

from hs_kernels import cuda_decode as cd  # noqa: E402
from hs_kernels import cuda_prefill as cp  # noqa: E402
from hs_kernels import gpu as hs_gpu  # noqa: E402
from hs_kernels.triton_prefix_blocks import HEAD  # noqa: E402
from sglang_hs.backend import HSAttnBackend  # noqa: E402
from sglang_hs.settings import LayerGroups  # noqa: E402
from sglang_hs.testing import small_pool  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")  # an address, not a value

H_KV, GROUP, D, LAYERS = 4, 4, 128, 3
GROUPS = LayerGroups((0, 1), (2, 3))  # retrieval and streaming groups in every layer


def _on_gpu(x) -> bool:
    return (isinstance(x, (FakeTensor, torch.device)) and (x if isinstance(x, torch.device) else x.device).type == "cuda"
            or isinstance(x, str) and x.startswith("cuda"))


def _blocking_upload(func, args, kwargs) -> bool:
    """A copy from host memory to the GPU that waits for the stream (torch syncs unless ``non_blocking``)."""
    if func is torch.ops.aten._to_copy.default:
        return (isinstance(args[0], torch.Tensor) and not _on_gpu(args[0]) and _on_gpu(kwargs.get("device"))
                and not kwargs.get("non_blocking"))
    if func is torch.ops.aten.copy_.default:
        return _on_gpu(args[0]) and not _on_gpu(args[1]) and not (args[2:] or [kwargs.get("non_blocking")])[0]
    if func in (torch.ops.aten.index.Tensor, torch.ops.aten.index_put_.default, torch.ops.aten._index_put_impl_.default):
        return _on_gpu(args[0]) and any(isinstance(i, torch.Tensor) and not _on_gpu(i) for i in args[1])  # moved there
    return False


class HostReads(TorchDispatchMode):
    """Records each host sync on a CUDA stream (in ``reads``, under the current ``where``): a read of a CUDA value,
    answered from ``answers``, else 0, and a blocking upload; ops on real CPU tensors alone run for real, as the host's
    bookkeeping does."""

    def __init__(self):
        super().__init__()
        self.reads, self.answers, self.where = [], iter(()), None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default and _on_gpu(args[0]):
            self.reads.append(self.where)
            return next(self.answers, 0)
        if _blocking_upload(func, args, kwargs):
            self.reads.append((self.where, "upload"))
        if func is torch.ops.aten._pin_memory.default:  # no pinned memory without a GPU: host memory stands in
            return args[0]
        if not any(_on_gpu(x) for x in tree_leaves((args, kwargs))):
            with _disable_current_modes():
                return func(*args, **kwargs)
        return func(*args, **kwargs)


@pytest.fixture
def gpu(monkeypatch):
    """The GPU path, as on an H100 with nvcc, on fake CUDA tensors; yields ``(host reads, launches)``: launches as
    ``(where, kernel name)``."""
    reads, launches = HostReads(), []

    def cuda_decode(*args, balance=False, **kwargs):  # "fixed": not balanced splits
        launches.append((reads.where, "cuda_decode" if balance else "cuda_decode fixed"))

    def cuda_prefill(q, k, v, *args, **kwargs):
        launches.append((reads.where, "cuda_prefill"))
        return torch.empty(v.index.shape[0] + 1, dtype=torch.int32, device=q.device)  # the launch's work

    def triton_run(self, *args, grid, warmup, **kwargs):
        launches.append((reads.where, self.fn.__name__))

    monkeypatch.setattr(triton.runtime.jit.JITFunction, "run", triton_run)
    monkeypatch.setattr(hs_gpu, "_gpu_allowed", lambda: True)
    monkeypatch.setattr(hs_gpu, "triton_available", lambda: True)
    monkeypatch.setattr(hs_gpu, "_sm_count", lambda device: 132)
    monkeypatch.setattr(hs_gpu, "_sm_major", lambda device: 9)
    for module in (cd, cp):
        monkeypatch.setattr(module, "available", lambda: True)
    monkeypatch.setattr(cd, "built", lambda: True)
    monkeypatch.setattr(cp, "built", lambda *args, **kwargs: True)
    monkeypatch.setattr(cd, "warm_up", lambda *args: None)
    monkeypatch.setattr(cd, "resident_per_sm", lambda *args: 2)
    monkeypatch.setattr(cd, "launch", cuda_decode)
    monkeypatch.setattr(cp, "launch", cuda_prefill)
    with FakeTensorMode(allow_non_fake_inputs=True), reads:
        yield reads, launches


def make_backend(reads: HostReads, tokens: int, decode_kernel: str = "auto",
                 deterministic: bool = False) -> HSAttnBackend:
    """The backend over a pool for ``tokens``; what its start-up synced is forgotten (``reads``); ``deterministic``:
    SGLang's --enable-deterministic-inference."""
    pool = small_pool(GROUPS, 1.0, 1.0, -(-tokens // 64) + 8, layers=LAYERS, head_dim=D, sink=128, window=256,
                      dtype=torch.bfloat16, device="cuda")
    pool.settings.decode_kernel = decode_kernel
    req_to_token = torch.zeros(4, tokens + 64, dtype=torch.int32, device="cuda")
    runner = NS(device="cuda", req_to_token_pool=NS(req_to_token=req_to_token), token_to_kv_pool=pool,
                model_config=NS(num_attention_heads=H_KV * GROUP, num_key_value_heads=H_KV),
                server_args=NS(disable_cuda_graph=False, enable_deterministic_inference=deterministic))
    backend = HSAttnBackend(runner)
    reads.reads.clear()
    return backend


def layer(i: int):
    return NS(layer_id=i, tp_q_head_num=H_KV * GROUP, tp_k_head_num=H_KV, qk_head_dim=D, v_head_dim=D,
              scaling=D ** -0.5, is_cross_attention=False, logit_cap=0, sliding_window_size=-1)


def run_layers(backend, reads, forward, batch, tokens: int):
    q, k, v = (torch.randn(tokens, h * D, dtype=torch.bfloat16, device="cuda") for h in (H_KV * GROUP, H_KV, H_KV))
    for i in range(LAYERS):
        reads.where = i
        out = forward(q, k, v, layer(i), batch)
        assert out.shape == q.shape and out.device.type == "cuda"


def per_layer(launches) -> list[list[str]]:
    return [[name for where, name in launches if where == i] for i in range(LAYERS)]


def extend(backend, reads, prefix: int, chunk: int, answers=()):
    batch = NS(forward_mode=ForwardMode.EXTEND, req_pool_indices=torch.tensor([1], device="cuda"),
               extend_prefix_lens_cpu=[prefix], extend_seq_lens_cpu=[chunk],
               extend_seq_lens=torch.tensor([chunk], device="cuda"),
               positions=torch.arange(prefix, prefix + chunk, device="cuda"),
               out_cache_loc=torch.zeros(chunk, dtype=torch.int64, device="cuda"))
    reads.reads.clear()  # the inputs SGLang hands over
    reads.where = "metadata"
    backend.init_forward_metadata(batch)
    reads.answers = iter(answers)
    run_layers(backend, reads, backend.forward_extend, batch, chunk)


@pytest.mark.parametrize("prefix, chunk", [(0, 1000), (4096, 64), (4096, 2048), (4097, 300)])
def test_extend_layers_make_no_host_sync(gpu, prefix, chunk):
    """A cold prompt, a question on a cached prefix, a chunk pruned in flight, a prefix ending inside a block."""
    reads, launches = gpu
    extend(make_backend(reads, prefix + chunk), reads, prefix, chunk)
    assert [where for where in reads.reads if where != "metadata"] == []
    first, *others = per_layer(launches)
    assert {"write_kernel", "prefill_kernel", "stream_kernel"} <= set(first)
    assert all(names == first for names in others)


class RecordedGraphs:
    """``short_extends.CudaGraphs``' contract on fake CUDA: a capture runs the call (its launches recorded where the
    capture happens), a replay is recorded as one launch, "replay"."""

    def __init__(self, reads: HostReads, launches: list):
        self.reads, self.launches = reads, launches

    def __call__(self, fn, bucket: int):
        return NS(replay=lambda: self.launches.append((self.reads.where, "replay"))), fn()


def test_short_extend_layers_are_one_replay_each(gpu):
    """A question on a cached prefix as decode rows: once its bucket's graphs are captured (the first question runs
    the decode kernels), a later question's layers each replay one graph, with no host sync and no other launch (a
    few copies of its q, k, v into the graph's inputs)."""
    from sglang_hs.short_extends import ShortExtends

    reads, launches = gpu
    backend = make_backend(reads, 4096 + 128)
    backend.short_extends = ShortExtends(backend, 64, capture=RecordedGraphs(reads, launches))
    extend(backend, reads, 4096, 64)
    assert {"write_kernel", "cuda_decode", "stream_kernel"} <= set(per_layer(launches)[0])
    launches.clear()
    extend(backend, reads, 4096 + 64, 40)
    assert [where for where in reads.reads if where != "metadata"] == []
    assert per_layer(launches) == [["replay"]] * LAYERS
    assert [name for where, name in launches if where == "metadata"] == ["replay"]


@pytest.mark.parametrize("disabled", [False, True])
def test_short_extends_follow_sglangs_cuda_graph_flag(gpu, caplog, disabled):
    """On CUDA the default flag takes short extends, unless --disable-cuda-graph (one line says so)."""
    reads, _ = gpu
    pool = make_backend(reads, 1024).pool
    pool.settings.extend_graph_tokens = 64
    runner = NS(device="cuda", req_to_token_pool=NS(req_to_token=torch.zeros(4, 1088, dtype=torch.int32, device="cuda")),
                token_to_kv_pool=pool, model_config=NS(num_attention_heads=H_KV * GROUP, num_key_value_heads=H_KV),
                server_args=NS(disable_cuda_graph=disabled, enable_deterministic_inference=False))
    with caplog.at_level("INFO", logger="sglang_hs"):
        backend = HSAttnBackend(runner)
    assert (backend.short_extends is None) == disabled
    assert ("short extends (--hs-extend-graph-tokens) off" in caplog.text) == disabled


class Gathers(TorchDispatchMode):
    """Counts ``aten.index`` (a gather) per ``where`` of the host reads."""

    def __init__(self, reads: HostReads):
        super().__init__()
        self.reads, self.count = reads, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.index.Tensor:
            self.count[self.reads.where] += 1
        return func(*args, **(kwargs or {}))


def test_extend_streaming_call_is_one_launch_on_keys_in_place(gpu):
    """An extend's streaming groups are one launch a layer, not split with a merge, and read their keys in the pool's
    stream rows (no gather a layer): eager extends are host-bound and a sink and window are a few blocks (a decode step,
    under CUDA graphs, still splits them to fill the SMs)."""
    reads, launches = gpu
    backend = make_backend(reads, 4096 + 64)
    with Gathers(reads) as gathers:
        extend(backend, reads, 4096, 64)
    for names in per_layer(launches):
        at = names.index("stream_kernel")
        assert names[at + 1:at + 2] != ["combine_kernel"], names
    assert hs_gpu.stream_splits(H_KV // 2, 7, 132) > 1  # what the default would have split
    assert gathers.count["metadata"] > 0  # the positive control: the count sees the metadata's gathers
    assert [gathers.count[i] for i in range(LAYERS)] == [0] * LAYERS

def test_cuda_prefix_path_reads_the_split_once_per_forward(gpu):
    """A question after a prefix long enough for the CUDA prefix path: ``prefix_splits`` at the first layer is the
    forward's one read; every layer then runs the CUDA kernel on its 2:4 blocks and Triton on the rest."""
    reads, launches = gpu
    prefix, chunk = hs_gpu.CUDA_PREFIX_LONG_KEYS + 40, 64
    assert hs_gpu.cuda_prefix_worth(chunk, hs_gpu.CUDA_PREFIX_LONG_KEYS, given=True)
    header = [prefix // 64, 0, 1, 0, 1, 0]  # every full block 2:4, the partial last one dense (triton_prefix_blocks)
    assert len(header) == HEAD
    extend(make_backend(reads, prefix + chunk), reads, prefix, chunk, answers=header * LAYERS)
    assert [where for where in reads.reads if where != "metadata"] == [0] * HEAD * LAYERS
    first, *others = per_layer(launches)
    assert first.count("prefix_blocks_kernel") == LAYERS  # the split of every layer
    assert {"cuda_prefill", "prefill_kernel", "rescue_kernel"} <= set(others[0])
    assert [name for name in first if name != "prefix_blocks_kernel"] == others[0]
    assert all(names == others[0] for names in others)


@pytest.mark.parametrize("decode_kernel, kernel", [("triton", "decode_kernel"), ("auto", "cuda_decode")])
@pytest.mark.parametrize("graph", [False, True])
def test_decode_step_makes_no_host_sync(gpu, decode_kernel, kernel, graph):
    """A decode step (``decode_step``): no read at all, the step's metadata included (captured in the graph)."""
    reads, launches = gpu
    decode_step(make_backend(reads, max(LENS), decode_kernel), reads, graph)
    assert reads.reads == []
    first, *others = per_layer(launches)
    assert {"write_kernel", kernel, "stream_kernel"} <= set(first)
    assert all(names == first for names in others)


LENS = [4200, 300, 70]


def decode_step(backend, reads, graph: bool = False):
    """A decode step of three sequences (none at a page's end, so no bookkeeping), eager or as a graph's replay."""
    seq_lens = torch.tensor(LENS)
    batch = NS(forward_mode=ForwardMode.DECODE, req_pool_indices=torch.tensor([0, 1, 2], device="cuda"),
               seq_lens=seq_lens.to("cuda"), seq_lens_cpu=seq_lens,
               out_cache_loc=torch.zeros(len(LENS), dtype=torch.int64, device="cuda"))
    reads.reads.clear()  # the inputs SGLang hands over
    reads.where = "metadata"
    if graph:
        backend.init_cuda_graph_state(len(LENS), len(LENS))
        backend.init_forward_metadata_out_graph(batch)
    else:
        backend.init_forward_metadata(batch)
    run_layers(backend, reads, backend.forward_decode, batch, len(LENS))


@pytest.mark.parametrize("deterministic", [False, True])
def test_deterministic_inference_keeps_the_cuda_decode_splits_fixed(gpu, deterministic):
    """Under SGLang's --enable-deterministic-inference the CUDA decode's splits stay fixed ranges of blocks (balanced
    splits sum a row's blocks in an order that varies from run to run); else they are balanced."""
    reads, launches = gpu
    decode_step(make_backend(reads, max(LENS), deterministic=deterministic), reads)
    assert {name for _, name in launches if name.startswith("cuda_decode")} == {
        "cuda_decode fixed" if deterministic else "cuda_decode"}


@pytest.mark.parametrize("opens_page", [False, True])
def test_token_placement_makes_no_host_sync(gpu, opens_page):
    """The allocator places an extend's and a decode step's tokens with SGLang's kernels on CUDA (its PyTorch placement,
    for the CPU, compares on the host), and the pages it hands out get their block and stream slots with no read."""
    from sglang_hs.allocator import HSTokenAllocator

    reads, launches = gpu
    backend = make_backend(reads, 4096)
    alloc = HSTokenAllocator(4096, page_size=64, dtype=torch.bfloat16, device="cuda", kvcache=backend.pool,
                             need_sort=False)
    prefix, seq = torch.tensor([0, 64]), torch.tensor([100, 130])
    step_lens = seq + (29 if opens_page else 1)  # 129 opens a page
    inputs = [x.to("cuda") for x in (prefix, seq, torch.tensor([-1, 63]), step_lens, torch.tensor([127, 200]))]
    reads.reads.clear()  # the inputs SGLang hands over
    out = alloc.alloc_extend(inputs[0], prefix, inputs[1], seq, inputs[2], int((seq - prefix).sum()))
    step = alloc.alloc_decode(inputs[3], step_lens, inputs[4])
    assert out.shape == (166,) and step.shape == (2,) and reads.reads == []
    assert [name for _, name in launches] == ["alloc_extend_kernel"] + ["alloc_decode_kernel"] * opens_page
