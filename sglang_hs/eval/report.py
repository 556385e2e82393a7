"""Summaries with counts and 95% Wilson intervals -> markdown table, JSON, PNG (accuracy vs KV bytes/token)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from .scoring import wilson


def summarize(results: dict) -> list[dict]:
    """One entry per (setting, task, length, cache), in the order settings were run."""
    out = []
    for block in results["settings"]:
        groups = defaultdict(list)
        for row in block["rows"]:
            groups[(row["task"], row["length"], row["cache"])].append(row)
        for (task, length, cache), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
            c, n = sum(r["correct"] for r in rows), len(rows)
            lo, hi = wilson(c, n)
            kv = [r["kv_bytes_per_token"] for r in rows if r.get("kv_bytes_per_token") is not None]
            cached = [r["cached_tokens"] for r in rows if r.get("cached_tokens") is not None]
            out.append({"setting": block["setting"]["name"], "description": block["setting"].get("description", ""),
                        "task": task, "length": length, "cache": cache, "correct": c, "total": n,
                        "accuracy": c / n if n else 0.0, "ci95": [lo, hi],
                        "kv_bytes_per_token": sum(kv) / len(kv) if kv else None,
                        "dense_bytes_per_token": block.get("dense_bytes_per_token"),
                        "mean_prompt_tokens": sum(r["n_tokens"] for r in rows) / n,
                        "mean_cached_tokens": sum(cached) / len(cached) if cached else None})
    return out


def markdown(results: dict, summary: list[dict]) -> str:
    lines = [f"Command: `{results['command']}`", "",
             f"Date {results['date']}; machine: {results['machine']}; haystack: {', '.join(results['haystack_sources'])}; "
             f"task set {results['task_fingerprint']}; greedy decoding; KV bytes at 2 bytes/value (bf16), size model of hs_kernels.", "",
             "| setting | task | length | cache | correct / total | accuracy | 95% CI (Wilson) | KV bytes/token | vs dense |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        kv = s["kv_bytes_per_token"]
        ratio = f"{kv / s['dense_bytes_per_token']:.2f}x" if kv and s.get("dense_bytes_per_token") else "n/a"
        lines.append(f"| {s['setting']} | {s['task']} | {s['length']} | {s['cache']} | {s['correct']} / {s['total']} | "
                     f"{s['accuracy']:.2f} | [{s['ci95'][0]:.2f}, {s['ci95'][1]:.2f}] | "
                     f"{'n/a' if kv is None else f'{kv:,.0f}'} | {ratio} |")
    lines += length_table(results)
    lines += depth_table(results)
    lines += pair_table(results)
    descs = {s["setting"]: s["description"] for s in summary}
    lines += ["", "Settings:"] + [f"- `{k}`: {v}" for k, v in descs.items() if v]
    return "\n".join(lines) + "\n"


def length_table(results: dict) -> list[str]:
    """Per setting and length, every task pooled (cold): correct / total, accuracy, 95% interval; and the KV bytes
    against dense at the longest length. The factor table's form."""
    cells = defaultdict(lambda: [0, 0])
    kv = {}
    lengths = sorted({r["length"] for b in results["settings"] for r in b["rows"] if r["cache"] == "cold"})
    if not lengths:
        return []
    names = []
    for block in results["settings"]:
        name = block["setting"]["name"]
        names.append(name)
        for r in block["rows"]:
            if r["cache"] == "cold":
                cells[(name, r["length"])][0] += bool(r["correct"])
                cells[(name, r["length"])][1] += 1
                if r["length"] == lengths[-1] and r.get("kv_bytes_per_token") and block.get("dense_bytes_per_token"):
                    kv.setdefault(name, []).append(r["kv_bytes_per_token"] / block["dense_bytes_per_token"])
    out = ["", "All tasks pooled, by length (cold; correct / total, accuracy [95% Wilson interval]):", "",
           "| setting | " + " | ".join(str(n) for n in lengths) + f" | KV vs dense at {lengths[-1]} |",
           "|---|" + "---|" * (len(lengths) + 1)]
    for name in names:
        row = []
        for n in lengths:
            c, t = cells[(name, n)]
            lo, hi = wilson(c, t)
            row.append(f"{c}/{t} {c / t:.2f} [{lo:.2f}, {hi:.2f}]" if t else "")
        ratio = f"{sum(kv[name]) / len(kv[name]):.2f}x" if kv.get(name) else "n/a"
        out.append(f"| {name} | " + " | ".join(row) + f" | {ratio} |")
    return out


def depth_table(results: dict) -> list[str]:
    """Correct / total per setting and needle depth (cold runs): where in the context retrieval breaks."""
    cells = defaultdict(lambda: [0, 0])
    depths = set()
    for block in results["settings"]:
        for r in block["rows"]:
            if r["cache"] != "cold":
                continue
            d = "spread" if r["depth"] is None else f"{r['depth']:.2f}"
            depths.add(d)
            c = cells[(block["setting"]["name"], r["task"], r["length"], d)]
            c[0] += bool(r["correct"])
            c[1] += 1
    if not cells:
        return []
    cols = sorted(depths)
    out = ["", "By needle depth (cold; correct / total):", "",
           "| setting | task | length | " + " | ".join(f"depth {d}" for d in cols) + " |",
           "|---|---|---|" + "---|" * len(cols)]
    for key in dict.fromkeys(k[:3] for k in cells):
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(
            f"{cells[(*key, d)][0]} / {cells[(*key, d)][1]}" if (*key, d) in cells else "" for d in cols) + " |")
    return out


def pair_table(results: dict) -> list[str]:
    """Warm/cold pairs (the same question answered cold and from a cached prefix): how often they agree."""
    out = []
    for block in results["settings"]:
        by = defaultdict(dict)
        for r in block["rows"]:
            if "id" in r:  # rows from hs-eval run carry the sample id and question index
                by[(r["id"], r["question"])][r["cache"]] = r
        pairs = [p for p in by.values() if "cold" in p and "warm" in p]
        if not pairs:
            continue
        if not out:
            out = ["", "Warm vs cold, paired (same question; warm = its context is a cached prefix):", "",
                   "| setting | pairs | cold correct | warm correct | both | neither | same output | "
                   "mean cached tokens (warm) | mean latency cold / warm (s) |", "|---|---|---|---|---|---|---|---|---|"]
        n = len(pairs)
        cc = sum(p["cold"]["correct"] for p in pairs)
        wc = sum(p["warm"]["correct"] for p in pairs)
        both = sum(p["cold"]["correct"] and p["warm"]["correct"] for p in pairs)
        neither = sum(not p["cold"]["correct"] and not p["warm"]["correct"] for p in pairs)
        same = sum(p["cold"]["output"] == p["warm"]["output"] for p in pairs)
        cached = [p["warm"]["cached_tokens"] for p in pairs if p["warm"].get("cached_tokens") is not None]
        lat = [(p["cold"].get("latency_s"), p["warm"].get("latency_s")) for p in pairs]
        lat = [x for x in lat if None not in x]
        out.append(f"| {block['setting']['name']} | {n} | {cc} / {n} | {wc} / {n} | {both} | {neither} | {same} / {n} | "
                   + (f"{sum(cached) / len(cached):.0f}" if cached else "n/a") + " | "
                   + (f"{sum(a for a, _ in lat) / len(lat):.1f} / {sum(b for _, b in lat) / len(lat):.1f}" if lat else "n/a")
                   + " |")
    return out


def plot(summary: list[dict], path: Path, title: str = "") -> bool:
    """Accuracy vs KV bytes/token with Wilson error bars; one marker per setting, one panel per task/length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [s for s in summary if s["kv_bytes_per_token"] is not None and s["cache"] == "cold"]
    if not pts:
        return False
    panels = sorted({(s["task"], s["length"]) for s in pts})
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    names = list(dict.fromkeys(s["setting"] for s in summary))
    cmap = plt.get_cmap("tab20")
    for ax, (task, length) in zip(axes[0], panels):
        for s in (p for p in pts if (p["task"], p["length"]) == (task, length)):
            i = names.index(s["setting"])
            lo, hi = s["ci95"]
            ax.errorbar(s["kv_bytes_per_token"] / 1024, s["accuracy"], yerr=[[max(0.0, s["accuracy"] - lo)], [max(0.0, hi - s["accuracy"])]],
                        fmt="o", color=cmap(i % 20), capsize=3, label=f"{s['setting']} ({s['correct']}/{s['total']})")
        ax.set_xlabel("KV cache KiB per token (bf16)")
        ax.set_ylabel("accuracy (95% Wilson CI)")
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(f"{task}, {length} tokens")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_outputs(results: dict, out_dir: Path) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(results)
    results = {**results, "summary": summary}
    (out_dir / "results.json").write_text(json.dumps(results, indent=1))
    (out_dir / "results.md").write_text(markdown(results, summary))
    plot(summary, out_dir / "accuracy_vs_kv.png", title=results["command"][:160])
    return results


def compare_table(a: dict, b: dict, names: tuple[str, str] = ("A", "B")) -> str:
    """Two results.json files over the same prompts (say, served and simulated), setting by setting: how many
    answers are the same text, and how often each is right."""
    rows_b = {blk["setting"]["name"]: {(r["id"], r["question"], r["cache"]): r for r in blk["rows"]} for blk in b["settings"]}
    x, y = names
    lines = [f"| setting | prompts | same output | {x} correct | {y} correct | {x} only right | {y} only right |",
             "|---|---|---|---|---|---|---|"]
    for blk in a["settings"]:
        name = blk["setting"]["name"]
        other = rows_b.get(name)
        if other is None:
            continue
        pairs = [(r, other[k]) for r in blk["rows"] if (k := (r["id"], r["question"], r["cache"])) in other]
        if not pairs:
            continue
        n = len(pairs)
        same = sum(p["output"].strip() == q["output"].strip() for p, q in pairs)
        ca, cb = sum(bool(p["correct"]) for p, _ in pairs), sum(bool(q["correct"]) for _, q in pairs)
        only_a = sum(bool(p["correct"]) and not q["correct"] for p, q in pairs)
        only_b = sum(bool(q["correct"]) and not p["correct"] for p, q in pairs)
        lines.append(f"| {name} | {n} | {same} / {n} | {ca} / {n} | {cb} / {n} | {only_a} | {only_b} |")
    return "\n".join(lines) + "\n"

