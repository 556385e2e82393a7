"""Benchmark hs-prep convert against a plain copy, its peak memory, and AoH ranking at Llama-3.1-8B shapes.

    python -m benchmarks.prep.bench_convert [--workdir DIR]

Prints one table; the current figures are in docs/performance.md.
"""
import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the hs-prep command sets it
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from safetensors.torch import save_file

from hs_prep.architecture import AttentionGeometry
from hs_prep.rank import head_effective_ranks


def synthetic_checkpoint(path: str, layers: int, hidden=2048, heads=32, kv_heads=8, head_dim=64,
                         intermediate=8192, vocab=32000, layers_per_shard=4) -> int:
    """A 1B-shaped bf16 Llama checkpoint, sharded like the hub's; returns its size in bytes."""
    import json

    os.makedirs(path)
    config = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=hidden,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                  num_hidden_layers=layers, intermediate_size=intermediate, vocab_size=vocab,
                  torch_dtype="bfloat16", rope_theta=500000.0)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    weight_map, shards = {}, [list(range(i, min(i + layers_per_shard, layers))) for i in range(0, layers, layers_per_shard)]
    for index, shard_layers in enumerate(shards):
        tensors = {"model.embed_tokens.weight": rand(vocab, hidden)} if index == 0 else {}
        for layer in shard_layers:
            p = f"model.layers.{layer}."
            tensors.update({
                p + "self_attn.q_proj.weight": rand(heads * head_dim, hidden),
                p + "self_attn.k_proj.weight": rand(kv_heads * head_dim, hidden),
                p + "self_attn.v_proj.weight": rand(kv_heads * head_dim, hidden),
                p + "self_attn.o_proj.weight": rand(hidden, heads * head_dim),
                p + "mlp.gate_proj.weight": rand(intermediate, hidden),
                p + "mlp.up_proj.weight": rand(intermediate, hidden),
                p + "mlp.down_proj.weight": rand(hidden, intermediate),
                p + "input_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
                p + "post_attention_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
            })
        name = f"model-{index + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, os.path.join(path, name), metadata={"format": "pt"})
        weight_map.update({k: name for k in tensors})
        del tensors
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))


# A small interpreter starts the measured command, so its peak RSS is not inflated by the pages this
# (large) process would lend a forked child before exec.
_MEASURE = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
            "print(code, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def drop_page_cache() -> bool:
    """Evict file pages (root only), so that reads come from disk as for a checkpoint not touched lately."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def timed_child(cmd: list[str], cold: bool) -> tuple[float, float]:
    """Wall seconds and peak RSS (GiB) of a command."""
    if cold and not drop_page_cache():
        raise SystemExit("--cold needs write access to /proc/sys/vm/drop_caches (root)")
    out = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, check=True)
    code, seconds, rss_kib = out.stdout.split()
    if code != "0":
        raise SystemExit(f"{cmd[0]} failed with status {code}")
    return float(seconds), int(rss_kib) / 2**20


def rank_llama8b_seconds() -> float:
    geo = AttentionGeometry("llama", 32, 32, 8, 128, 4096, 500000.0, None)
    g = np.random.default_rng(0)
    q = g.standard_normal((4096, 4096), np.float32) * 0.02
    k = g.standard_normal((1024, 4096), np.float32) * 0.02
    start = time.perf_counter()
    for _ in range(geo.num_layers):
        head_effective_ranks(q, k, geo)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=None, help="Scratch directory (needs ~12 GB free).")
    parser.add_argument("--cold", action="store_true", help="Drop the page cache before each timed command.")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="hs-bench-", dir=args.workdir)
    hs_prep = shutil.which("hs-prep", path=os.path.dirname(sys.executable)) or "hs-prep"
    rows = []
    try:
        for layers in (8, 16, 32):
            src = os.path.join(work, f"src{layers}")
            size = synthetic_checkpoint(src, layers)
            copies, converts = [], []
            for attempt in range(2):  # best of two: the page cache and other load are the same for both
                copy_dst, out = os.path.join(work, f"copy{attempt}"), os.path.join(work, f"out{attempt}")
                copies.append(timed_child(["cp", "-r", src, copy_dst], args.cold))
                converts.append(timed_child([hs_prep, "convert", src, "--output", out], args.cold))
                shutil.rmtree(copy_dst)
                shutil.rmtree(out)
            copy_s, conv_s = min(c[0] for c in copies), min(c[0] for c in converts)
            rows.append((layers, size / 2**30, copy_s, conv_s, conv_s / copy_s, max(c[1] for c in converts)))
            shutil.rmtree(src)
        rank_s = rank_llama8b_seconds()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"page cache: {'dropped before each command' if args.cold else 'hot (files just written)'}")
    print(f"{'layers':>6} {'GiB':>6} {'cp -r s':>8} {'convert s':>10} {'ratio':>6} {'peak RSS GiB':>13}")
    for layers, gib, copy_s, conv_s, ratio, rss in rows:
        print(f"{layers:>6} {gib:>6.2f} {copy_s:>8.2f} {conv_s:>10.2f} {ratio:>6.2f} {rss:>13.2f}")
    print(f"AoH ranking, Llama-3.1-8B attention shapes (32 layers x 32 heads, d 128): {rank_s:.2f} s")
    print(f"(this process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB)")


if __name__ == "__main__":
    main()
