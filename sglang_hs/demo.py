"""The README's main job, after hs-prep: serve a prepared model on CPU with the hs extension, send two
requests that share a long prefix over the OpenAI-compatible HTTP API, and print the answers and the
cache statistics.

    python -m sglang_hs.demo PREPARED_DIR
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from .server_process import ServerProcess, call
from .testing import cpu_env

CITIES = ("Lisbon", "Oslo", "Quito", "Hanoi", "Perth", "Dakar", "Lima", "Riga")
ITEMS = ("apples", "copper wire", "tea", "maps", "salt", "glass beads")
DOCUMENT = "\n".join(f"Record {i}: the warehouse in {city} keeps {17 + 13 * i % 89} crates of {item}."
                     for i, (city, item) in enumerate((c, it) for c in CITIES for it in ITEMS))
QUESTIONS = ["How many crates of tea does the warehouse in Oslo keep?",
             "How many crates of maps does the warehouse in Lima keep?"]


def ask(base: str, question: str) -> tuple[dict, float]:
    messages = [{"role": "system", "content": "Answer from the records, in one short sentence."},
                {"role": "user", "content": f"{DOCUMENT}\n\nQuestion: {question}"}]
    start = time.perf_counter()
    status, body = call(base + "/v1/chat/completions", {"model": "default", "messages": messages,
                                                         "max_tokens": 24, "temperature": 0})
    if status != 200:
        raise SystemExit(f"request failed ({status}): {body}")
    return body, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve PREPARED on CPU with hs and send two prefix-sharing requests.")
    parser.add_argument("prepared")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="hs-demo-")
    stats_path = os.path.join(work, "stats.json")
    server_args = ["--model-path", args.prepared, "--device", "cpu", "--dtype", "float32", "--enable-cache-report",
                   "--max-total-tokens", "16384", "--context-length", "8192", "--mem-fraction-static", "0.05",
                   "--disable-cuda-graph", "--sampling-backend", "pytorch", "--grammar-backend", "none"]
    env = cpu_env(os.path.join(work, "placeholder_calls.log"), SGLANG_HS_STATS_FILE=stats_path)
    print(f"starting the server (log: {work}/server.log) ...", flush=True)
    with ServerProcess(server_args, env, os.path.join(work, "server.log")) as server:
        for question in QUESTIONS:
            body, seconds = ask(server.base, question)
            usage = body["usage"]
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            print(f"\nQ: {question}\nA: {body['choices'][0]['message']['content'].strip()}\n"
                  f"   {usage['prompt_tokens']} prompt tokens, {cached} from the prefix cache, {seconds:.2f} s")
        time.sleep(2)  # the scheduler publishes stats when idle
        status, stats = call(server.base + "/hs/stats")
    print("\nhs cache statistics:")
    print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()
