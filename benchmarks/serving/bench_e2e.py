"""End to end over HTTP: stock SGLang vs SGLang + hs on the same model, in one process tree.

    python -m benchmarks.serving.bench_e2e --out DIR [--shape llama-3.1-8b | --model PREPARED]   (or the file:
        cd /tmp && python PATH/benchmarks/serving/bench_e2e.py ..., as scripts/e2e_ab.sh runs it)
        [--contexts 32768,65536,131072] [--batches 1,8] [--output-tokens 32]
        [--prefix 32768 --questions 4 --question-tokens 64] [--device cuda] [--stock-backend triton] [--mem-fraction 0.85]
        [--profile-steps N]

``--shape llama-3.1-8b`` writes a config-only checkpoint with Llama-3.1-8B's shapes and a hierasparse
section marking the first half of every layer's KV groups retrieval; both servers load it with
``--load-format dummy`` (random weights: right for speed and memory, meaningless for answers).
Requests are random token ids (``--skip-tokenizer-init``), greedy, ``ignore_eos``, streamed from
``/generate`` so the first token and the rest are timed apart; the radix cache is flushed before
every cold measurement. Per engine: time to first token and per output token at each context and
batch, throughput, KV bytes per token and the pool's token capacity (``/server_info``), and a
prefix-reuse run (one cold request on a shared prefix, then ``--questions`` cached ones, each question
``--question-tokens`` long; the greedy outputs' token ids are kept, so two runs of one seed compare).
Writes ``results.json`` and ``results.md`` under ``--out`` and prints the markdown.
``--profile-steps N``: after its measurements each engine profiles N forward steps (prefill chunks
and decode steps) of two requests with SGLang's torch profiler (``/start_profile``): one at the first
context, cold (``profile-ENGINE.md`` sums its trace, ``trace_summary``), and one question on the cached
prefix (``profile-ENGINE-cached.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if not __package__:  # run as a file, as scripts/e2e_ab.sh does from /tmp (so that neither this process nor its servers
    # import the checkout's folders in place of the packages on the path): its sibling modules from this checkout, after
    # everything already on the path
    sys.path.append(str(Path(__file__).resolve().parents[2]))

from sglang_hs.server_process import ServerProcess, call, flush_cache  # noqa: E402
from sglang_hs.stats import PUBLISH_QUIET_S  # noqa: E402

from benchmarks.serving.trace_summary import summarize  # noqa: E402

LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
    "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 128000,
    "eos_token_id": 128009,
}

FIT_CONTEXTS = (32768, 65536, 131072)


def write_shape_checkpoint(out_dir: Path, config: dict, retrieval_ratio: float = 0.5) -> Path:
    """A config-only prepared checkpoint (for --load-format dummy): the first ``ratio`` of each
    layer's KV groups are retrieval groups, in place (no permutation: the weights are random)."""
    g = config["num_key_value_heads"]
    k = max(1, round(retrieval_ratio * g))
    flags = [i < k for i in range(g)]
    section = {"format_version": 1, "metric": "synthetic", "selection": "first-groups", "retrieval_ratio": k / g,
               "tp_size": 1, "num_key_value_heads": g,
               "layers": [{"num_retrieval": k, "is_retrieval": flags, "permutation": list(range(g))}
                          for _ in range(config["num_hidden_layers"])]}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps({**config, "hierasparse": section}, indent=1))
    return out_dir


def stream_one(url: str, ids: list[int], new_tokens: int) -> dict:
    """One streamed greedy request: seconds to the first token, then per further token, and its output ids."""
    payload = {"input_ids": ids, "stream": True,
               "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True}}
    req = urllib.request.Request(url + "/generate", data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    stamps, tokens, last = [], [], {}
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            last = json.loads(line[5:])
            stamps.append(time.perf_counter() - t0)
            tokens.append(last.get("meta_info", {}).get("completion_tokens", len(stamps)))
    meta = last.get("meta_info", {})
    done = meta.get("completion_tokens", len(stamps))
    ttft = stamps[0]
    tpot = (stamps[-1] - ttft) / (done - 1) if done > 1 else float("nan")
    return {"ttft_s": ttft, "tpot_s": tpot, "total_s": stamps[-1], "completion_tokens": done,
            "cached_tokens": meta.get("cached_tokens", 0), "stamps": [t0 + t for t in stamps], "tokens": tokens,
            "output_ids": last.get("output_ids", [])}


def decode_tpot(runs: list[dict]) -> float:
    """Median time per token between a request's consecutive stream events once every request of the
    batch has its first token: decode steps alone, no other request's prefill in the way (nan if none).
    An event carrying n tokens (``--stream-interval`` n) counts as n tokens of a 1/n share of its gap."""
    start = max(r["stamps"][0] for r in runs)
    per_token = []
    for r in runs:
        events = list(zip(r["stamps"], r["tokens"]))
        for (a, n_a), (b, n_b) in zip(events, events[1:]):
            if a >= start and n_b > n_a:
                per_token += [(b - a) / (n_b - n_a)] * (n_b - n_a)
    return statistics.median(per_token) if per_token else float("nan")


def batch_run(url: str, prompts: list[list[int]], new_tokens: int) -> dict:
    flush_cache(url)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(prompts)) as ex:
        runs = list(ex.map(lambda ids: stream_one(url, ids, new_tokens), prompts))
    wall = time.perf_counter() - t0
    return {"ttft_s": statistics.mean(r["ttft_s"] for r in runs), "tpot_s": statistics.mean(r["tpot_s"] for r in runs),
            "decode_tpot_s": decode_tpot(runs), "tokens_per_s": sum(r["completion_tokens"] for r in runs) / wall, "wall_s": wall}


def prefix_run(url: str, prefix: list[int], questions: list[list[int]], new_tokens: int) -> dict:
    flush_cache(url)
    cold = stream_one(url, prefix + questions[0], new_tokens)
    cached = [stream_one(url, prefix + q, new_tokens) for q in questions[1:]]
    ttfts = [r["ttft_s"] for r in cached]  # each kept: a mean hides a one-off (a first-use compile, say)
    return {"cold_ttft_s": cold["ttft_s"], "cached_ttft_s": statistics.mean(ttfts), "cached_ttfts_s": ttfts,
            "cached_tokens": [r["cached_tokens"] for r in cached], "output_ids": [r["output_ids"] for r in [cold, *cached]]}


def profile_run(url: str, out_dir: Path, ids: list[int], steps: int, cached: int = 0, timeout_s: float = 900) -> str:
    """Profile the first ``steps`` forward steps of one request, its first ``cached`` ids cached beforehand by an
    unprofiled request; return the trace summary."""
    flush_cache(url)
    if cached:
        stream_one(url, ids[:cached], 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    status, body = call(url + "/start_profile", {"output_dir": str(out_dir), "num_steps": steps,
                                                 "activities": ["CPU", "GPU"]}, timeout=120)
    if status != 200:
        raise RuntimeError(f"/start_profile answered {status}: {str(body)[:200]}")
    stream_one(url, ids, steps + 1)  # SGLang stops the profile at the (steps + 1)-th forward step from its start
    deadline = time.monotonic() + timeout_s
    while not (traces := sorted(out_dir.glob("*.trace.json.gz"))):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no trace in {out_dir} after {timeout_s:.0f} s")
        time.sleep(2)
    time.sleep(5)  # the exporter may still be writing
    return summarize(traces[-1])


def kv_info(url: str, engine: str, config: dict, value_bytes: int) -> dict:
    """Pool capacity in tokens (what SGLang sized the pool to) and KV bytes per token: stock's dense
    formula; for hs the pool bytes over the capacity, and the bytes actually stored per cached token
    of the tree (the prefix run leaves its prefix there)."""
    info = call(url + "/server_info", timeout=60)[1]
    capacity = info.get("max_total_num_tokens") or next(
        (s.get("max_total_num_tokens") for s in info.get("internal_states", []) if "max_total_num_tokens" in s), None)
    out = {"capacity_tokens": capacity}
    if engine == "stock":
        d = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        out["kv_bytes_per_token"] = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * d * value_bytes
        return out
    time.sleep(PUBLISH_QUIET_S + 0.5)  # the scheduler publishes once it has been idle that long
    stats = call(url + "/hs/stats", timeout=60)[1]
    out["hs_stats"] = stats
    if capacity and isinstance(stats, dict) and "pool_bytes" in stats:
        out["kv_bytes_per_token"] = round(stats["pool_bytes"] / capacity)
        if stats.get("tree_tokens"):
            stored = stats["dense_bytes"] + stats["sparse_bytes"] + stats["stream_bytes"]
            out["stored_bytes_per_cached_token"] = round(stored / stats["tree_tokens"])
    return out


def measure(engine: str, url: str, args, config: dict, rng: random.Random) -> dict:
    vocab = config["vocab_size"]
    tokens = lambda n: [rng.randrange(10, vocab) for _ in range(n)]  # noqa: E731
    out = {"runs": []}
    # the server's first request, shaped as the prefix run's cold one: what its start-up warm-up left to compile
    out["first_ttft_s"] = stream_one(url, tokens(args.prefix + 64), 2)["ttft_s"]
    # warm-up at the first context: two requests at once (chunks over cached blocks and chunks mixing
    # requests, decode at batch 2), then a question on one's cached prefix (a short chunk after a long
    # cached prefix), then a cold request shaped as the prefix run's (its short last chunk follows a prefix
    # written in the same request, stored at the prefill sparsity); kernel compilation and first-use
    # allocation stay out of the figures
    warm = [tokens(args.contexts[0] - 2) for _ in range(2)]
    batch_run(url, warm, 2)
    stream_one(url, warm[0] + tokens(64), 2)
    flush_cache(url)
    stream_one(url, tokens(args.prefix + 64), 2)
    for ctx in args.contexts:
        for b in args.batches:
            prompts = [tokens(ctx - args.output_tokens) for _ in range(b)]
            try:
                r = batch_run(url, prompts, args.output_tokens)
            except Exception as e:  # too long for the pool, or the server failed: record, go on
                r = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            out["runs"].append({"context": ctx, "batch": b, **r})
            print(f"[{engine}] ctx {ctx} batch {b}: {r}", file=sys.stderr, flush=True)
    prefix = tokens(args.prefix)
    out["prefix"] = prefix_run(url, prefix, [tokens(args.question_tokens) for _ in range(args.questions + 1)], args.output_tokens)
    out["kv"] = kv_info(url, engine, config, 2 if args.dtype in ("bfloat16", "float16") else 4)
    if args.profile_steps:
        runs = ((engine, tokens(args.contexts[0] - args.profile_steps), 0),
                (f"{engine}-cached", prefix + tokens(args.question_tokens), len(prefix)))
        for name, ids, cached in runs:
            try:
                text = profile_run(url, Path(args.out) / f"profile-{name}", ids, args.profile_steps, cached)
                (Path(args.out) / f"profile-{name}.md").write_text(text + "\n")
                print(text, file=sys.stderr, flush=True)
            except Exception as e:
                out.setdefault("profile_errors", {})[name] = f"{type(e).__name__}: {str(e)[:200]}"
    return out


def context_length(args) -> int:
    """Room for the longest request plus slack, within the model's own limit when the requests fit it."""
    need = max(max(args.contexts), args.prefix + args.question_tokens + args.output_tokens)
    limit = args.max_positions or need + 256
    return min(need + 256, limit) if need <= limit else need + 256


def server_args(engine: str, model: str, args) -> tuple[list[str], str]:
    common = ["--model-path", model, "--device", args.device, "--dtype", args.dtype, "--skip-tokenizer-init",
              "--mem-fraction-static", str(args.mem_fraction), "--context-length", str(context_length(args)),
              "--enable-cache-report", *args.extra]  # hs brings page size 64 itself; stock keeps its default
    if args.shape:
        common += ["--load-format", "dummy"]
    if engine == "stock":
        return common + ["--attention-backend", args.stock_backend], "sglang.launch_server"
    return common + shlex.split(args.hs_flags), "sglang_hs.launch_server"


def fmt(run: dict, key: str, scale: float = 1.0, spec: str = "{:.3f}") -> str:
    return spec.format(scale * run[key]) if key in run else run.get("error", "-")[:40]


def markdown(res: dict) -> str:
    lines = [f"# stock SGLang ({res['stock_backend']} attention backend) vs hs: {res['model']}", "",
             f"{res['date']}, {res['device_name']}; {res['output_tokens']} output tokens per request; "
             f"command: `{res['command']}`", "",
             "TPOT: per request, first to last token, averaged (at batch > 1 it includes waiting behind the other "
             "requests' prefill); decode TPOT: median gap between tokens once all requests of the batch have their first.", "",
             "| context | batch | TTFT s stock | TTFT s hs | TPOT ms stock | TPOT ms hs | TPOT stock / hs | "
             "decode TPOT ms stock | decode TPOT ms hs | decode stock / hs | tok/s stock | tok/s hs |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    hs_runs = {(r["context"], r["batch"]): r for r in res["hs"]["runs"]}
    for s in res["stock"]["runs"]:
        h = hs_runs.get((s["context"], s["batch"]), {})
        ratio = lambda key: f"{s[key] / h[key]:.2f}" if key in s and key in h else "-"  # noqa: E731
        lines.append(f"| {s['context']} | {s['batch']} | {fmt(s, 'ttft_s')} | {fmt(h, 'ttft_s')} | "
                     f"{fmt(s, 'tpot_s', 1e3, '{:.2f}')} | {fmt(h, 'tpot_s', 1e3, '{:.2f}')} | {ratio('tpot_s')} | "
                     f"{fmt(s, 'decode_tpot_s', 1e3, '{:.2f}')} | {fmt(h, 'decode_tpot_s', 1e3, '{:.2f}')} | {ratio('decode_tpot_s')} | "
                     f"{fmt(s, 'tokens_per_s', 1, '{:.1f}')} | {fmt(h, 'tokens_per_s', 1, '{:.1f}')} |")
    lines += ["", "| engine | prefix tokens | first request after start, TTFT s | cold TTFT s | cached TTFT s | "
              "cached / cold | cached tokens | KV bytes / token | pool capacity, tokens |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name in ("stock", "hs"):
        p, kv = res[name]["prefix"], res[name]["kv"]
        first = res[name].get("first_ttft_s")
        lines.append(f"| {name} | {res['prefix_tokens']} | {'-' if first is None else f'{first:.3f}'} | "
                     f"{p['cold_ttft_s']:.3f} | {p['cached_ttft_s']:.3f} | "
                     f"{p['cached_ttft_s'] / p['cold_ttft_s']:.3f} | {p['cached_tokens']} | "
                     f"{kv.get('kv_bytes_per_token', '-')} | {kv.get('capacity_tokens', '-')} |")
    cap = [res[n]["kv"].get("capacity_tokens") for n in ("stock", "hs")]
    if all(cap):
        lines += ["", f"KV capacity hs / stock at --mem-fraction-static {res['mem_fraction']}: {cap[1] / cap[0]:.2f}x; "
                  "largest batch whose KV fits the pool at once (capacity // context), stock / hs: "
                  + ", ".join(f"{c // 1024}K {cap[0] // c} / {cap[1] // c}" for c in FIT_CONTEXTS)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--shape", choices=["llama-3.1-8b"], help="config-only checkpoint with these shapes, dummy weights")
    src.add_argument("--model", help="a prepared checkpoint (hs-prep convert) with real weights")
    ap.add_argument("--contexts", default="32768,65536,131072")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--prefix", type=int, default=32768)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--question-tokens", type=int, default=64)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--stock-backend", default="triton")
    ap.add_argument("--mem-fraction", type=float, default=0.85)
    ap.add_argument("--engines", default="stock,hs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hs-flags", default="", help="--hs-* flags for the hs engine only, one string (e.g. '--hs-decode-kernel cuda')")
    ap.add_argument("--profile-steps", type=int, default=0, help="profile this many forward steps per engine (0: off)")
    ap.add_argument("extra", nargs="*", help="more SGLang server flags for both engines (after --)")
    args = ap.parse_args(argv)
    args.contexts = [int(x) for x in args.contexts.split(",")]
    args.batches = [int(x) for x in args.batches.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = str(write_shape_checkpoint(out / "model", LLAMA_31_8B)) if args.shape else args.model
    config = json.loads((Path(model) / "config.json").read_text())
    config = config.get("text_config", config)
    args.max_positions = config.get("max_position_embeddings")
    env = dict(os.environ)
    if args.device == "cpu":
        from sglang_hs.testing import cpu_env

        env = cpu_env()
    res = {"model": args.shape or model, "stock_backend": args.stock_backend, "output_tokens": args.output_tokens,
           "prefix_tokens": args.prefix, "mem_fraction": args.mem_fraction, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "command": "python -m benchmarks.serving.bench_e2e " + " ".join(argv if argv is not None else sys.argv[1:]),
           "device_name": _device_name(args.device)}
    for engine in args.engines.split(","):
        flags, module = server_args(engine, model, args)
        env["SGLANG_HS_STATS_FILE"] = str(out / f"{engine}.stats.json")
        try:
            with ServerProcess(flags, env, str(out / f"{engine}.log"), start_timeout_s=1200, module=module) as srv:
                res[engine] = measure(engine, srv.base, args, config, random.Random(args.seed))
        except RuntimeError as e:  # the server failed: record it, measure the other engine
            res[engine] = {"error": str(e)[:500]}
            print(f"[{engine}] failed: {e}", file=sys.stderr, flush=True)
        (out / "results.json").write_text(json.dumps(res, indent=1))
    if all(name in res and "error" not in res[name] for name in ("stock", "hs")):
        text = markdown(res)
        (out / "results.md").write_text(text + "\n")
        print(text)
    return 0


def _device_name(device: str) -> str:
    if device != "cuda":
        return device
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cuda (not available)"


if __name__ == "__main__":
    sys.exit(main())
