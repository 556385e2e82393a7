"""CPU benchmark: TTFT of a request whose 4K-token prefix is cached vs cold, and cached KV bytes vs stock.

python -m benchmarks.serving.bench_prefix [--prefix-tokens 4096] [--model PREPARED]  (default: a tiny random
Llama prepared by hs-prep at retrieval ratio 0.5, byte tokenizer, float32)
"""

import argparse
import json
import os
import tempfile
import time

from sglang_hs.testing import prepare, tiny_model, use_cpu_placeholder


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix-tokens", type=int, default=4096)
    ap.add_argument("--model", default=None)
    ap.add_argument("--stream-checkpoint", type=int, default=2048)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    model = args.model or prepare(tiny_model(f"{tmp}/tiny", layers=4), f"{tmp}/prepared", 0.5)
    os.environ["SGLANG_HS_STATS_FILE"] = f"{tmp}/stats.json"
    use_cpu_placeholder()
    from sglang_hs.engine import create

    eng = create(model, hs_args={"stream_checkpoint": args.stream_checkpoint}, device="cpu", dtype="float32", max_total_tokens=16384, context_length=8192,
                 mem_fraction_static=0.3, disable_cuda_graph=True, log_level="error")  # pool capped by max_total_tokens
    prefix = ("the quick brown fox jumps over the lazy dog " * 200)[: args.prefix_tokens]
    one = {"max_new_tokens": 1, "temperature": 0}
    try:
        eng.generate("warm up", one)
        t0 = time.perf_counter(); eng.generate(prefix + " first question?", one); cold = time.perf_counter() - t0
        t0 = time.perf_counter(); r = eng.generate(prefix + " second question?", one); cached = time.perf_counter() - t0
        time.sleep(1.5)
        stats = json.load(open(f"{tmp}/stats.json"))
    finally:
        eng.shutdown()
    cfg = json.load(open(f"{model}/config.json"))
    layers, g = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
    d, e = stats["head_dim"], stats["value_bytes"]
    tokens = stats["tree_tokens"]
    hs_bytes = stats["dense_bytes"] + stats["sparse_bytes"] + stats["stream_bytes"]
    stock = tokens * layers * g * 2 * d * e
    print(json.dumps({"prefix_tokens": args.prefix_tokens, "ttft_cold_s": round(cold, 3), "ttft_cached_s": round(cached, 3),
                      "cached_tokens": r["meta_info"]["cached_tokens"], "tree_tokens": tokens,
                      "retrieval_compression_ratio": round(stats["compression_ratio"], 3),
                      "stream_pages": stats["stream_pages"], "stream_bytes": stats["stream_bytes"],
                      "hs_kv_bytes": hs_bytes, "stock_kv_bytes": stock, "hs_over_stock": round(hs_bytes / stock, 3)}))


if __name__ == "__main__":
    main()
