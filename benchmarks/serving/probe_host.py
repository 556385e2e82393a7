"""Host time of the hs attention backend per layer, without a server: python -m benchmarks.serving.probe_host
[--prefix 4096] [--question 64] [--layers 32] [--kv-heads 8] [--group 4] [--head-dim 128] [--repeats 20] [--profile N]
[--device cuda] [--dtype bfloat16] [--row-blocks N] [--tile-rows N]

The backend and pool the server runs (its sparsest setting, SPARSEST; half the KV groups of every layer
retrieval groups) hold one sequence: a ``--prefix``-token prefix written and compressed as the radix cache leaves it.
Timed, median of ``--repeats``: the pool's bookkeeping for all layers (the compression of the prefix's next block,
as a decode step does when a page fills; a page opened and freed; the stats' snapshot, published when the scheduler
goes idle after a request, before it takes the next), a cached question of ``--question`` tokens
(``init_forward_metadata``, then every layer's ``forward_extend``; on CUDA also as decode rows replayed from CUDA graphs,
``short_extends``, where the question qualifies) and one eager decode step after it; beside each, the
aten operations of one run. "host" is the wall clock until the last layer returns (the host's work of queueing the
step), "total" until the GPU has finished. A floor for any backend: per layer the same new K/V stored into a flat cache
and SDPA over the gathered keys (one attention launch, as stock SGLang's backends make). Last, each hs step's host time
over its floor's in the same process: trees run in separate processes compare by it, as a process's host speed moves
both. ``--profile N``: cProfile's functions by own time over N more questions, which says whose Python the host time is
(ours, Triton's launcher, torch's)."""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import statistics
import time
from types import SimpleNamespace as NS

import torch
from hs_kernels import BLOCK_SIZE, SparsityConfig
from hs_kernels.gpu import decode_tile_rows
from torch.utils._python_dispatch import TorchDispatchMode
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from sglang_hs.backend import HSAttnBackend
from sglang_hs.kv_pool import HSKVPool
from sglang_hs.settings import HSSettings, LayerGroups
from sglang_hs.short_extends import MIN_ROWS, ShortExtends
from sglang_hs.stats import HSStats

# every kind of block the serving path keeps, so that all of its host work shows (not a quality-safe setting)
SPARSEST = {"prefill": {"s_k": 0.0, "s_v": 1.0}, "decode": {"s_k": 1.0, "s_v": 1.0}, "sink_tokens": 128,
            "window_tokens": 256, "stream_checkpoint": 4096}
ROW = 1  # the sequence's row of req_to_token
CHUNK = 1024  # tokens per prefill chunk while the prefix is written
UNTIMED = 2  # runs of each step before the timed ones


def build(args) -> tuple[HSAttnBackend, torch.Tensor]:
    """The backend over a pool holding the prefix (written, then compressed as the radix cache does); the sequence's
    token locations for prefix, question and one decoded token."""
    name, recipe = "probe", SPARSEST
    sink, window = recipe["sink_tokens"], recipe["window_tokens"]
    retrieval = tuple(range(args.kv_heads // 2))
    groups = LayerGroups(retrieval, tuple(range(len(retrieval), args.kv_heads)))
    settings = HSSettings(prefill=SparsityConfig(**recipe["prefill"], sink_tokens=sink, window_tokens=window),
                          decode=SparsityConfig(**recipe["decode"], sink_tokens=sink, window_tokens=window),
                          sink_tokens=sink, window_tokens=window, dense_reserve=0.5, recipe=name,
                          stream_checkpoint=recipe["stream_checkpoint"], layers=[groups] * args.layers,
                          num_kv_heads=args.kv_heads)
    tokens = args.prefix + args.question + 1
    pages = -(-tokens // BLOCK_SIZE)
    spare = CHUNK // BLOCK_SIZE + args.repeats + UNTIMED  # pages dense at once: a chunk's and the compressions'
    pool = HSKVPool((pages + 2 * spare) * BLOCK_SIZE, BLOCK_SIZE, args.dtype, args.kv_heads, args.head_dim, args.layers,
                    args.device, settings)
    page_ids = torch.arange(1, pages + 1, device=args.device)
    locs = (page_ids[:, None] * BLOCK_SIZE + torch.arange(BLOCK_SIZE, device=args.device)).flatten()[:tokens]
    req_to_token = torch.zeros(ROW + 1, tokens, dtype=torch.int32, device=args.device)
    req_to_token[ROW] = locs.int()
    gen = torch.Generator(device=args.device).manual_seed(0)
    for start in range(0, tokens, CHUNK):  # pages are dense until compressed: chunk by chunk, as a prefill goes
        end = min(start + CHUNK, tokens)
        pool.on_alloc_pages(page_ids[start // BLOCK_SIZE:-(-end // BLOCK_SIZE)])
        for layer in range(args.layers):
            k, v = (torch.randn(end - start, args.kv_heads, args.head_dim, generator=gen, device=args.device,
                                dtype=args.dtype) for _ in range(2))
            pool.write(layer, locs[start:end], k, v)
        done = min(end, compressed(args))
        pool.compress_sequence(locs[:done], done)
        kept = min(end, args.prefix)  # the question's window stays, as the radix cache pins it at a prompt's end
        pool.trim_stream(ROW, locs[:kept], kept, running=True)  # as the radix cache does after each chunk
    runner = NS(device=args.device, req_to_token_pool=NS(req_to_token=req_to_token), token_to_kv_pool=pool,
                model_config=NS(num_attention_heads=args.kv_heads * args.group, num_key_value_heads=args.kv_heads),
                server_args=NS(disable_cuda_graph=False, enable_deterministic_inference=False))
    return HSAttnBackend(runner), locs


def compressed(args) -> int:
    """Tokens of the prefix compressed when built: the timed compressions (two untimed first) then take the rest,
    one block each, as decode steps do when a page fills."""
    return max(0, args.prefix - (args.repeats + UNTIMED) * BLOCK_SIZE)


def layers(args) -> list:
    return [NS(layer_id=i, tp_q_head_num=args.kv_heads * args.group, tp_k_head_num=args.kv_heads,
               qk_head_dim=args.head_dim, v_head_dim=args.head_dim, scaling=args.head_dim ** -0.5,
               is_cross_attention=False, logit_cap=0, sliding_window_size=-1) for i in range(args.layers)]


def steps(args, backend: HSAttnBackend, locs: torch.Tensor) -> dict:
    """Each timed step as a function of no arguments: hs's question and decode step, and the floor's."""
    p, t, h_q, h_kv, d = args.prefix, args.question, args.kv_heads * args.group, args.kv_heads, args.head_dim
    new = lambda n, h: torch.randn(n, h * d, device=args.device, dtype=args.dtype)  # noqa: E731
    q, k, v = new(t, h_q), new(t, h_kv), new(t, h_kv)
    q1, k1, v1 = new(1, h_q), new(1, h_kv), new(1, h_kv)
    rows = torch.tensor([ROW], device=args.device)
    question = NS(forward_mode=ForwardMode.EXTEND, req_pool_indices=rows, extend_prefix_lens_cpu=[p],
                  extend_seq_lens_cpu=[t], extend_seq_lens=torch.tensor([t], device=args.device),
                  positions=torch.arange(p, p + t, device=args.device), out_cache_loc=locs[p:p + t])
    n = torch.tensor([p + t + 1])
    decode = NS(forward_mode=ForwardMode.DECODE, req_pool_indices=rows, seq_lens=n.to(args.device), seq_lens_cpu=n,
                out_cache_loc=locs[p + t:p + t + 1])
    model = layers(args)
    pool, done = backend.pool, [compressed(args)]
    spare = torch.tensor([len(locs) // BLOCK_SIZE + 2], device=args.device)  # a page no sequence holds

    def compress_next_block():
        done[0] = min(done[0] + BLOCK_SIZE, p)
        pool.compress_sequence(locs[:done[0]], done[0])

    stats = HSStats(path=os.devnull)
    stats.attach(pool, None)

    def open_and_free_page():
        pool.on_alloc_pages(spare)
        pool.on_free_pages(spare)

    def hs_question():
        backend.init_forward_metadata(question)
        for layer in model:
            backend.forward_extend(q, k, v, layer, question)

    short = (ShortExtends(backend, max(t, MIN_ROWS), max_row_blocks=args.row_blocks, tile_rows=args.tile_rows)
             if args.device != "cpu" else None)

    def hs_question_rows():
        backend.short_extends = short
        hs_question()
        backend.short_extends = None

    def hs_decode():
        backend.init_forward_metadata(decode)
        for layer in model:
            backend.forward_decode(q1, k1, v1, layer, decode)

    cache = [torch.zeros(int(locs.max()) + 1, 2, h_kv, d, device=args.device, dtype=args.dtype) for _ in model]

    def floor(n_new, q_, k_, v_, end):
        at = locs[end - n_new:end]

        def run():
            for kv in cache:
                kv[at, 0], kv[at, 1] = k_.view(-1, h_kv, d), v_.view(-1, h_kv, d)
                keys = kv[locs[:end]]
                torch.nn.functional.scaled_dot_product_attention(
                    q_.view(1, n_new, h_q, d).transpose(1, 2), keys[None, :, 0].transpose(1, 2),
                    keys[None, :, 1].transpose(1, 2), enable_gqa=True)
        return run

    rows_step = {"question, hs rows": hs_question_rows} if short and short.fits([p], [t]) else {}
    return {"compression, next block": compress_next_block, "page opened and freed": open_and_free_page,
            "stats snapshot": stats.snapshot,
            "question, hs": hs_question, **rows_step, "question, floor": floor(t, q, k, v, p + t),
            "decode step, hs": hs_decode, "decode step, floor": floor(1, q1, k1, v1, p + t + 1)}


def sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize(device)


class OpCount(TorchDispatchMode):
    """Counts the aten operations dispatched, by name (kernel launches, allocations, views; not Triton's launches);
    ``ops``: all of them."""

    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    @property
    def ops(self) -> int:
        return sum(self.count.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def timed(step, device: str, repeats: int) -> tuple[float, float, int]:
    """Median host and total seconds of ``step`` after ``UNTIMED`` runs (a first use's one-off work; the last one's
    aten operations counted)."""
    host, total = [], []
    for _ in range(UNTIMED - 1):
        step()
    with OpCount() as count:
        step()
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        step()
        queued = time.perf_counter()
        sync(device)
        host.append(queued - start)
        total.append(time.perf_counter() - start)
    return statistics.median(host), statistics.median(total), count.ops


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefix", type=int, default=4096)
    ap.add_argument("--question", type=int, default=64)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--group", type=int, default=4, help="query heads per KV head")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--row-blocks", type=int, default=None,
                    help="short extends' bound on the blocks a question's rows read (the question runs as rows within "
                         "it; default: the backend's for the tile rows)")
    ap.add_argument("--tile-rows", type=int, default=None,
                    help="rows of the question that share their block reads (default: the backend's; 1: none)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    args = ap.parse_args(argv)
    if args.kv_heads < 2 or min(args.prefix, args.question, args.layers, args.group, args.repeats) < 1:
        ap.error("needs --kv-heads >= 2 and positive --prefix, --question, --layers, --group and --repeats")
    args.dtype = getattr(torch, args.dtype)
    args.tile_rows = args.tile_rows or decode_tile_rows(args.group, args.head_dim)
    return args


def main(argv=None) -> None:
    args = parse(argv)
    backend, locs = build(args)
    rows, hosts = [], {}
    for name, step in steps(args, backend, locs).items():
        host, total, ops = timed(step, args.device, args.repeats)
        hosts[name] = host
        rows.append(f"| {name} | {host * 1e3:.2f} | {total * 1e3:.2f} | {host / args.layers * 1e6:.0f} | {ops} |")
    if args.profile:
        question = steps(args, backend, locs)["question, hs"]
        profile = cProfile.Profile()
        profile.runcall(lambda: [question() for _ in range(args.profile)])
        sync(args.device)
        pstats.Stats(profile).strip_dirs().sort_stats("tottime").print_stats(25)
    print(f"{args.layers} layers, {args.kv_heads * args.group}/{args.kv_heads} heads, head_dim {args.head_dim}, "
          f"{args.dtype}, {args.device}: a {args.question}-token question after a {args.prefix}-token prefix, "
          f"median of {args.repeats}\n")
    print("| step | host ms | total ms | host us per layer | aten ops |\n|---|---|---|---|---|")
    print("\n".join(rows))
    # a process's host speed moves its floor too (2.4-4.0 ms between processes on one H100): compare trees by this
    print("\nhost time over the floor's, same process: " + ", ".join(
        f"{step.replace(', hs', '')} {hosts[step] / hosts[step.split(', ')[0] + ', floor']:.2f}x"
        for step in hosts if ", hs" in step))


if __name__ == "__main__":
    main()
