"""Send samples to a model and score the answers: a live server over HTTP (OpenAI /v1/completions or
/v1/chat/completions) or an in-process sglang.Engine with the hs plugin. Greedy decoding throughout.

Cache modes
  cold       the primary question of every sample; the radix cache is flushed first and samples share
             no prefix beyond the chat template's first page (so every answer is a cold prefill).
  warmcold   samples with two questions on one context; pass A: flush, question 0 (cold), then
             question 1 (warm: its context is a cached prefix); pass B: flush, question 1 cold, then
             question 0 warm. Every question is answered once cold and once warm, paired.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .scoring import score
from .tasks import Builder, Sample


class EvalError(RuntimeError):
    """A one-line, user-facing failure."""


def _post(url: str, payload: dict | None, timeout: float) -> dict:
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        raise EvalError(f"{url}: HTTP {e.code}: {e.read().decode(errors='replace')[:300]}") from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        raise EvalError(f"{url}: {getattr(e, 'reason', e)}") from None
    try:
        return json.loads(body or b"null")
    except json.JSONDecodeError:
        return {"raw": body.decode(errors="replace")}


class HTTPClient:
    """A live OpenAI-compatible server (the hs SGLang server or any other)."""

    def __init__(self, url: str, api: str = "completions", concurrency: int = 4, timeout: float = 1800.0,
                 cache_report: bool = False):
        """``cache_report``: the server runs with --enable-cache-report, so a missing count means 0 cached tokens."""
        if api not in ("completions", "chat"):
            raise EvalError(f"--api must be completions or chat, got {api!r}")
        self.url, self.api, self.concurrency, self.timeout = url.rstrip("/"), api, concurrency, timeout
        self.model = "default"
        self.cache_report = cache_report

    def check(self) -> dict:
        try:
            with urllib.request.urlopen(self.url + "/v1/models", timeout=30) as r:
                models = json.loads(r.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError) as e:
            raise EvalError(f"no OpenAI-compatible server at {self.url} ({getattr(e, 'reason', e)})") from None
        self.model = models["data"][0]["id"] if models.get("data") else "default"
        return models

    def server_info(self) -> dict:
        info = {"url": self.url}
        for path in ("/get_model_info", "/hs/stats"):
            try:
                with urllib.request.urlopen(self.url + path, timeout=30) as r:
                    info[path.strip("/").replace("/", "_")] = json.loads(r.read())
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
                pass
        return info

    def flush(self, timeout: float = 120.0) -> None:
        """Empty the server's prefix cache (``server_process.flush_cache``: retried while SGLang refuses)."""
        from ..server_process import flush_cache

        try:
            flush_cache(self.url, timeout)
        except RuntimeError as e:
            raise EvalError(str(e)) from None

    def _one(self, job: tuple) -> dict:
        ids, messages, prefix, max_tokens = job
        common = {"model": self.model, "max_tokens": max_tokens, "temperature": 0.0}
        t0 = time.time()
        if self.api == "completions":
            r = _post(self.url + "/v1/completions", {**common, "prompt": ids}, self.timeout)
            text = r["choices"][0]["text"]
        else:
            r = _post(self.url + "/v1/chat/completions", {**common, "messages": messages}, self.timeout)
            text = r["choices"][0]["message"]["content"] or ""
        usage = r.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens", 0 if self.cache_report else None)
        return {"output": text, "prompt_tokens": usage.get("prompt_tokens"), "cached_tokens": cached,
                "latency_s": round(time.time() - t0, 3)}

    def generate(self, jobs: list[tuple]) -> list[dict]:
        with ThreadPoolExecutor(max(1, self.concurrency)) as pool:
            futures = [pool.submit(self._one, j) for j in jobs]
            try:
                return [f.result() for f in futures]
            except BaseException:  # Ctrl-C or a failed request: do not send the queued ones
                for f in futures:
                    f.cancel()
                raise


class EngineClient:
    """In-process sglang.Engine with the hs plugin (sglang imported only here); requests go through the
    engine's own event loop, at most ``concurrency`` at a time, each timed on its own."""

    def __init__(self, model_path: str, hs_args: dict, concurrency: int = 4, stats_path: str | None = None,
                 **engine_kwargs):
        if stats_path:  # the scheduler process inherits it and publishes /hs/stats' JSON there
            Path(stats_path).unlink(missing_ok=True)
            os.environ["SGLANG_HS_STATS_FILE"] = str(stats_path)
        from ..engine import create

        self.api = "completions"
        self.concurrency = max(1, concurrency)
        self.stats_path = stats_path
        self.engine = create(model_path, hs_args=hs_args, **engine_kwargs)

    def check(self) -> dict:
        return {}

    def server_info(self, wait_s: float = 10.0) -> dict:
        """``{"in_process": True, "hs_stats": ...}``; the scheduler publishes its stats when it goes idle."""
        info = {"in_process": True}
        deadline = time.time() + wait_s
        while self.stats_path and time.time() < deadline:
            try:
                info["hs_stats"] = json.loads(Path(self.stats_path).read_text())
                break
            except (OSError, json.JSONDecodeError):
                time.sleep(0.5)
        return info

    def flush(self) -> None:
        from ..testing import flush_cache

        try:
            flush_cache(self.engine, timeout_s=120.0)
        except RuntimeError as e:
            raise EvalError(str(e)) from None

    def generate(self, jobs: list[tuple]) -> list[dict]:
        import asyncio

        async def one(job, gate):
            async with gate:
                t0 = time.time()
                o = await self.engine.async_generate(input_ids=job[0],
                                                     sampling_params={"max_new_tokens": job[3], "temperature": 0.0})
                meta = o["meta_info"]
                return {"output": o["text"], "prompt_tokens": meta.get("prompt_tokens"),
                        "cached_tokens": meta.get("cached_tokens", 0), "latency_s": round(time.time() - t0, 3)}

        async def run_all():
            gate = asyncio.Semaphore(self.concurrency)  # made inside the engine's loop
            return await asyncio.gather(*(one(j, gate) for j in jobs))

        return list(self.engine.loop.run_until_complete(run_all()))

    def close(self) -> None:
        self.engine.shutdown()


def _job(builder: Builder, sample: Sample, q: int) -> tuple:
    question = sample.questions[q]
    from .tasks import INTRO

    ids = builder.prompt_ids(sample.task, sample.context, question)
    messages = builder.render(INTRO[sample.task], sample.context, question)
    return ids, messages, question.answer_prefix, sample.max_new_tokens


def _row(sample: Sample, q: int, cache: str, result: dict) -> dict:
    answers = sample.questions[q].answers
    out = result["output"]
    return {"id": sample.id, "task": sample.task, "length": sample.target_length, "n_tokens": sample.n_tokens,
            "depth": sample.depth, "question": q, "cache": cache, "answers": answers, "output": out,
            "correct": score(out, answers), **{k: v for k, v in result.items() if k != "output"}}


def run_samples(client, builder: Builder, samples: list[Sample], mode: str = "cold", log=None) -> list[dict]:
    """Score ``samples`` with ``client``; rows as described in the module docstring."""
    if mode not in ("cold", "warmcold"):
        raise EvalError(f"mode must be cold or warmcold, got {mode!r}")
    rows: list[dict] = []
    if mode == "cold":
        client.flush()
        res = client.generate([_job(builder, s, 0) for s in samples])
        rows += [_row(s, 0, "cold", r) for s, r in zip(samples, res)]
    else:
        two = [s for s in samples if len(s.questions) >= 2]
        if not two:
            raise EvalError("warmcold needs samples with two questions (generate with --questions 2)")
        for first, second in ((0, 1), (1, 0)):
            client.flush()
            res = client.generate([_job(builder, s, first) for s in two])
            rows += [_row(s, first, "cold", r) for s, r in zip(two, res)]
            res = client.generate([_job(builder, s, second) for s in two])
            rows += [_row(s, second, "warm", r) for s, r in zip(two, res)]
    if log:
        log(f"{sum(r['correct'] for r in rows)}/{len(rows)} correct")
    return rows


# ---- a server we start ourselves ----

class Server:
    """``python -m sglang_hs.launch_server`` as a child process (sglang_hs.server_process); always stopped on exit."""

    def __init__(self, model_path: str, hs_flags: list[str], log_path: Path, device: str = "cpu", dtype: str = "float32",
                 context_length: int = 8192, max_total_tokens: int = 40000, mem_fraction: float = 0.15,
                 extra: list[str] | None = None, stock: bool = False,
                 start_timeout: float = 900.0):
        """``stock``: stock ``sglang.launch_server`` (its default attention backend and page size), no hs flags."""
        from ..server_process import ServerProcess
        from ..testing import cpu_env

        args = ["--model-path", str(model_path), "--device", device, "--dtype", dtype,
                "--context-length", str(context_length), "--max-total-tokens", str(max_total_tokens),
                "--mem-fraction-static", str(mem_fraction), "--sampling-backend", "pytorch", "--grammar-backend", "none",
                "--enable-cache-report", "--skip-server-warmup"] + (["--disable-cuda-graph"] if device == "cpu" else []) \
            + list(extra or []) + hs_flags
        if stock and device == "cpu":  # stock's CPU default (intel_amx) needs sgl_kernel's CPU build, which PyPI lacks
            args += ["--attention-backend", "torch_native"]
        env = cpu_env() if device == "cpu" else dict(os.environ)
        env.setdefault("SGLANG_HS_STATS_FILE", str(Path(log_path).with_suffix(".stats.json")))
        module = "sglang.launch_server" if stock else "sglang_hs.launch_server"
        self.process = ServerProcess(args, env, str(log_path), start_timeout, module=module)

    def __enter__(self) -> "Server":
        try:
            self.url = self.process.__enter__().base
        except RuntimeError as e:
            raise EvalError(str(e)) from None
        return self

    def __exit__(self, *exc) -> None:
        self.process.__exit__(*exc)
