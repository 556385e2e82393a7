"""The README's main job, after hs-prep: serve the model on CPU twice, stock SGLang on the original checkpoint and SGLang
with the hs extension on the prepared one, send the same two questions about one long document to each over the
OpenAI-compatible HTTP API (the second question shares the first's prefix), and print for each question the answer
the document holds, each server's answer and whether it is right, then the hs cache statistics.

    python -m sglang_hs.demo PREPARED_DIR [--original DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from .eval.scoring import contains
from .server_process import ServerProcess, call
from .testing import cpu_env

CITIES = ("Lisbon", "Oslo", "Quito", "Hanoi", "Perth", "Dakar", "Lima", "Riga")
ITEMS = ("apples", "copper wire", "tea", "maps", "salt", "glass beads")
RECORDS = {(city, item): 17 + 13 * i % 89 for i, (city, item) in enumerate((c, it) for c in CITIES for it in ITEMS)}
DOCUMENT = "\n".join(f"Record {i}: the warehouse in {city} keeps {n} crates of {item}."
                     for i, ((city, item), n) in enumerate(RECORDS.items()))
QUESTIONS = [("Oslo", "tea"), ("Lima", "maps")]
SERVER_ARGS = ["--device", "cpu", "--dtype", "float32", "--enable-cache-report", "--max-total-tokens", "16384",
               "--context-length", "8192", "--mem-fraction-static", "0.05", "--disable-cuda-graph",
               "--sampling-backend", "pytorch", "--grammar-backend", "none"]


def question(city: str, item: str) -> str:
    return f"How many crates of {item} does the warehouse in {city} keep?"


def ask(base: str, text: str) -> tuple[dict, float]:
    messages = [{"role": "system", "content": "Answer from the records, in one short sentence."},
                {"role": "user", "content": f"{DOCUMENT}\n\nQuestion: {text}"}]
    start = time.perf_counter()
    status, body = call(base + "/v1/chat/completions", {"model": "default", "messages": messages,
                                                         "max_tokens": 24, "temperature": 0})
    if status != 200:
        raise SystemExit(f"request failed ({status}): {body}")
    return body, time.perf_counter() - start


def serve_and_ask(model: str, module: str, extra: list[str], work: str, name: str) -> tuple[list[dict], dict | None]:
    """Start ``module`` on ``model``, ask every question; the answers and, from an hs server, its cache statistics."""
    stats_path = os.path.join(work, f"{name}-stats.json")
    env = cpu_env(os.path.join(work, "placeholder_calls.log"), SGLANG_HS_STATS_FILE=stats_path)
    print(f"starting {name} (log: {work}/{name}.log) ...", flush=True)
    answers, stats = [], None
    with ServerProcess(["--model-path", model, *SERVER_ARGS, *extra], env, os.path.join(work, f"{name}.log"),
                       module=module) as server:
        for city, item in QUESTIONS:
            body, seconds = ask(server.base, question(city, item))
            usage = body["usage"]
            answers.append({"text": body["choices"][0]["message"]["content"].strip(), "seconds": seconds,
                            "prompt_tokens": usage["prompt_tokens"],
                            "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)})
        if module == "sglang_hs.launch_server":
            time.sleep(2)  # the scheduler publishes stats when idle
            stats = call(server.base + "/hs/stats")[1]
    return answers, stats


def main() -> None:
    parser = argparse.ArgumentParser(description="Ask stock SGLang and SGLang + hs the same questions; say who is right.")
    parser.add_argument("prepared")
    parser.add_argument("--original", default=None, help="the unprepared checkpoint for stock (default: the prepared "
                        "checkpoint's source, the embedded SmolLM2)")
    args = parser.parse_args()
    from hs_prep.source import resolve

    original = args.original or resolve(None).path
    work = tempfile.mkdtemp(prefix="hs-demo-")
    stock, _ = serve_and_ask(original, "sglang.launch_server", ["--attention-backend", "torch_native"], work, "stock")
    hs, stats = serve_and_ask(args.prepared, "sglang_hs.launch_server", [], work, "hs")
    for (city, item), a, b in zip(QUESTIONS, stock, hs):
        want = str(RECORDS[(city, item)])
        print(f"\nQ: {question(city, item)}\n   the document says: {want}")
        for name, ans in (("stock", a), ("hs", b)):
            verdict = "right" if contains(ans["text"], want) else "wrong"
            print(f"   {name:5s} ({verdict}): {ans['text']}  [{ans['prompt_tokens']} prompt tokens, {ans['cached']} "
                  f"from the prefix cache, {ans['seconds']:.2f} s]")
        print(f"   same answer from both: {'yes' if a['text'] == b['text'] else 'no'}")
    print("\nhs cache statistics:")
    print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()
