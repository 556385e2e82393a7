"""hs-eval calibrate: the most compressive hs setting that keeps the model's own answers, measured, written into the
prepared checkpoint.

The model is measured on the synthetic suite under stock settings (every group retrieval, dense KV) and under a
ladder of hs settings, in the simulation of the method (``simulate.py``, which the served path matches: docs/quality.md).
A rung passes when on every task and length it answers at least ``keep`` of what stock answers (correct counts on
the same prompts). The ladder walks three axes, least compressive first, and stops an axis at its first failure:
2:4 sparsity with every group retrieval (V, then K and V), then streaming groups (per model, then per layer; 25, 50,
75 % streaming), each with the sink and window widened when the narrow one fails, then the best of both axes
together. A streaming rung whose sink and window cover the longest prompt is skipped (the suite cannot tell it from
dense). The passing rung with the fewest KV bytes at the longest length is written to config.json's
``hierasparse.calibration`` (with the table and the command); the launcher serves it by default.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from pathlib import Path

from .settings import DENSE, WIDE, checkpoint_facts, custom, dense_bytes_per_token, kv_bytes_per_token

SPARSITY_RUNGS = (("v24", {"prefill_sv": 1.0, "decode_sv": 1.0}),
                  ("kv24", {"prefill_sk": 1.0, "prefill_sv": 1.0, "decode_sk": 1.0, "decode_sv": 1.0}))
STREAMING = (25, 50, 75)  # percent of groups streaming, in the order tried
SCOPE_ORDER = ("model", "layer")  # hs_prep.layout.SCOPES, in the order the ladder tries them
LENGTHS = (1024, 4096, 8192, 16384, 32768)


def supported_lengths(checkpoint: Path) -> list[int]:
    """The suite's lengths that fit the model's context (with room for the answer)."""
    config = json.loads((Path(checkpoint) / "config.json").read_text())
    text = config.get("text_config", config)
    limit = int(text.get("max_position_embeddings", 8192))
    return [n for n in LENGTHS if n + 64 <= limit] or [min(LENGTHS)]


def cells(rows: list[dict]) -> dict:
    """(task, length) -> [correct, total] of cold rows."""
    out = defaultdict(lambda: [0, 0])
    for r in rows:
        if r["cache"] == "cold":
            out[(r["task"], r["length"])][0] += bool(r["correct"])
            out[(r["task"], r["length"])][1] += 1
    return out


def passes(stock: dict, rung: dict, keep: float) -> tuple[bool, list[str]]:
    """Whether ``rung`` keeps ``keep`` of stock's correct answers in every cell; the cells where it does not."""
    failed = [f"{task}@{length}: {rung[(task, length)][0]} vs stock {c}"
              for (task, length), (c, _) in sorted(stock.items()) if rung[(task, length)][0] < keep * c]
    return not failed, failed


def compression(facts: dict, hs: dict, length: int) -> float:
    """KV bytes per token against dense at ``length``."""
    return kv_bytes_per_token(facts, hs["decode_sk"], hs["decode_sv"], length, hs["sink_tokens"],
                              hs["window_tokens"]) / dense_bytes_per_token(facts)


class Ladder:
    """Runs rungs once each (``measure(setting) -> rows``) and keeps what they gave."""

    def __init__(self, checkpoint: Path, measure, keep: float, longest: int, log):
        self.checkpoint, self.measure, self.keep, self.longest, self.log = checkpoint, measure, keep, longest, log
        self.table: list[dict] = []
        stock = custom("stock", {})
        self.stock = cells(measure(stock))
        self.record(stock, self.stock, True, [])

    def record(self, setting, got: dict, ok: bool, failed: list[str]) -> dict:
        facts = checkpoint_facts(self.checkpoint, setting.hs)
        kv = 1.0 if setting.name == "stock" else compression(facts, setting.hs, self.longest)
        entry = {"name": setting.name, "hs": setting.hs, "passes": ok, "failed": failed, "kv_vs_dense": round(kv, 4),
                 "retrieval_fraction": round(facts["retrieval_groups"] / facts["total_groups"], 4),
                 "cells": {f"{t}@{n}": v for (t, n), v in sorted(got.items())}}
        self.table.append(entry)
        self.log(f"{setting.name}: {'passes' if ok else 'fails'}, KV {entry['kv_vs_dense']:.2f}x dense"
                 + (f" ({'; '.join(failed[:3])})" if failed else ""))
        return entry

    def rung(self, name: str, hs: dict) -> bool:
        """Measure one rung; False without measuring where its streaming groups would see every token of the longest
        prompt (then the suite cannot tell it from dense)."""
        full = {**DENSE, **hs}
        if full["retrieval_ratio"] < 1.0 and full["sink_tokens"] + full["window_tokens"] >= self.longest:
            self.log(f"{name}: skipped, its sink and window cover the longest prompt ({self.longest} tokens)")
            return False
        setting = custom(name, hs)
        got = cells(self.measure(setting))
        ok, failed = passes(self.stock, got, self.keep)
        return self.record(setting, got, ok, failed)["passes"]

    def best(self) -> dict:
        return min((e for e in self.table if e["passes"]), key=lambda e: (e["kv_vs_dense"], e["name"] != "stock"))


def climb(ladder: Ladder) -> dict:
    """Walk the axes (module docstring); the best passing rung."""
    sparse = {}
    for name, hs in SPARSITY_RUNGS:
        if not ladder.rung(name, hs):
            break
        sparse = hs
    streaming = None
    for scope in SCOPE_ORDER:
        for pct in STREAMING:
            base = {"retrieval_ratio": 1 - pct / 100, "retrieval_scope": scope}
            if ladder.rung(f"s{pct}-{scope}", base):
                streaming = base
            elif ladder.rung(f"s{pct}-{scope}-wide", {**base, **WIDE}):
                streaming = {**base, **WIDE}
            else:
                break
    if sparse and streaming:
        ladder.rung("combined", {**streaming, **sparse})
    return ladder.best()


def write_calibration(checkpoint: Path, calibration: dict) -> None:
    """config.json's ``hierasparse.calibration`` replaced atomically (written beside, then renamed)."""
    path = Path(checkpoint) / "config.json"
    config = json.loads(path.read_text())
    if "hierasparse" not in config:
        raise ValueError(f"{checkpoint} is not a prepared checkpoint (run hs-prep convert first)")
    config["hierasparse"]["calibration"] = calibration
    fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".json", dir=str(checkpoint))
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(config, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def setting_of(entry: dict) -> dict:
    """The served form of a rung: what settings.resolve reads."""
    hs = {**DENSE, **entry["hs"]}
    return {"retrieval_ratio": hs["retrieval_ratio"], "retrieval_scope": hs["retrieval_scope"],
            "prefill": {"s_k": hs["prefill_sk"], "s_v": hs["prefill_sv"]},
            "decode": {"s_k": hs["decode_sk"], "s_v": hs["decode_sv"]},
            "sink_tokens": hs["sink_tokens"], "window_tokens": hs["window_tokens"]}


def markdown(calibration: dict) -> str:
    lines = [f"Command: `{calibration['command']}`", "", f"Date {calibration['date']}; machine: {calibration['machine']}; "
             f"engine: {calibration['engine']}; a rung passes when every task and length keeps "
             f"{calibration['keep']:.0%} of stock's correct answers.", "",
             "| rung | passes | KV vs dense | retrieval groups | " + " | ".join(calibration["table"][0]["cells"]) + " |",
             "|---|---|---|---|" + "---|" * len(calibration["table"][0]["cells"])]
    for e in calibration["table"]:
        lines.append(f"| {e['name']} | {'yes' if e['passes'] else 'no'} | {e['kv_vs_dense']:.2f}x | "
                     f"{e['retrieval_fraction']:.0%} | " + " | ".join(f"{c}/{t}" for c, t in e["cells"].values()) + " |")
    lines += ["", f"Chosen: `{calibration['chosen']}`: {json.dumps(calibration['setting'])}"]
    return "\n".join(lines) + "\n"
