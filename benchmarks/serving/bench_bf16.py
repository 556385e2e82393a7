"""bf16 cold vs cached on the real SmolLM2-135M-Instruct (hs-prep, retrieval ratio 0.5), hs vs stock SGLang.

For each question: warm the cache with a different question on the same prefix, run the question
(cached), flush, run it again (cold). Reports the largest first-token top-5 logprob difference and
how often the 16-token greedy continuations differ, for stock torch_native and for hs.

python -m benchmarks.serving.bench_bf16 [--questions 8] [--hs-args JSON]
"""

import argparse
import json
import tempfile

from sglang_hs.testing import flush_cache, prepare_embedded, use_cpu_placeholder

PREFIX = " ".join(f"Record {i}: shipment {i * 37 % 101} left dock {i % 9} on day {i % 28 + 1}, carrying {i * 13 % 50 + 5} crates of "
                  f"{['apples', 'tin', 'cloth', 'salt', 'paper'][i % 5]}." for i in range(60))
TOPICS = ["apples", "tin", "cloth", "salt", "paper", "dock 3", "day 12", "crates"]
# The topic comes first, so requests diverge right after PREFIX and the new suffix is longer than
# window + 64 tokens: then hs cached == cold up to rounding (sglang_hs/README.md), which is what is measured.
DETAIL = (" I am auditing this shipping log for the quarterly report and need a short, exact summary that I can"
          " paste into a table for the harbour office, listing the docks, the days and the number of crates,"
          " without any commentary, guesses or information that is not written in the records themselves, and"
          " keeping the original order of the records so that the office can check every line against its own"
          " copy of the log when the inspectors arrive at the end of the month.")


def run(eng, questions, params):
    gen = lambda text: eng.generate(text, params, return_logprob=True, top_logprobs_num=5)  # noqa: E731
    diffs, flips, cached_tokens = [], 0, []
    for i, q in enumerate(questions):
        flush_cache(eng)
        gen(PREFIX + questions[(i + 1) % len(questions)])
        hot = gen(PREFIX + q)
        flush_cache(eng)
        cold = gen(PREFIX + q)
        cached_tokens.append(hot["meta_info"]["cached_tokens"])
        a = {t: lp for lp, t, _ in hot["meta_info"]["output_top_logprobs"][0]}
        b = {t: lp for lp, t, _ in cold["meta_info"]["output_top_logprobs"][0]}
        diffs.append(max(abs(a[t] - b[t]) for t in a.keys() & b.keys()))
        flips += hot["output_ids"] != cold["output_ids"]
    return {"max_first_token_logprob_diff": round(max(diffs), 4), "continuations_differ": f"{flips}/{len(questions)}",
            "cached_tokens": cached_tokens}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--hs-args", default='{"prefill_sk": 1, "prefill_sv": 1, "decode_sk": 1, "decode_sv": 1, '
                                         '"sink_tokens": 64, "window_tokens": 64, "stream_checkpoint": 128}')
    args = ap.parse_args()
    model = prepare_embedded(tempfile.mkdtemp() + "/smol", 0.5)
    use_cpu_placeholder()
    import sglang

    from sglang_hs.engine import create

    questions = [f" Question about {t}:{DETAIL} What do the records say about {t}? Answer:" for t in TOPICS[:args.questions]]
    params = {"max_new_tokens": 16, "temperature": 0.0}
    common = dict(device="cpu", dtype="bfloat16", max_total_tokens=8192, mem_fraction_static=0.3, disable_cuda_graph=True,
                  log_level="error", sampling_backend="pytorch", grammar_backend="none")
    out = {}
    for name in ("stock", "hs"):
        eng = (sglang.Engine(model_path=model, attention_backend="torch_native", **common) if name == "stock"
               else create(model, hs_args=json.loads(args.hs_args), **common))
        try:
            out[name] = run(eng, questions, params)
        finally:
            eng.shutdown()
    print(json.dumps({"prefix_chars": len(PREFIX), "hs_args": json.loads(args.hs_args), **out}))


if __name__ == "__main__":
    main()
