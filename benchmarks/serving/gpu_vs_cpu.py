"""The same prepared model, the same hs settings, on the GPU kernels and on the CPU reference path:
do the greedy outputs agree?

    python -m benchmarks.serving.gpu_vs_cpu pack   --model PREPARED --out DIR [--piece-mib 56]
    python -m benchmarks.serving.gpu_vs_cpu record --model DIR/model --device cpu  --out cpu.json
    python -m benchmarks.serving.gpu_vs_cpu check  --model DIR/model --device cuda --reference cpu.json --out report.json
    (either with --engine stock: the same without hs, the control for bf16 alone)

``pack`` writes a bfloat16 copy of a prepared checkpoint (both sides then read identical weights; the
GPU serves bf16 anyway) to ``DIR/model`` and, for the device machine, which takes at most 64 MiB per
call, the same directory as ``DIR/pieceNN/part`` (a split tar). ``record`` runs the fixed prompts
(one cold, then three more on its cached prefix; all longer than sink + window and several prefill
chunks, so streaming and retrieval groups, chunks over compressed blocks, prefix reuse and
compressed decode all take part) greedily with hs in bf16 and saves
token ids and top-2 logprobs. ``check`` does the same on another device and compares prompt by
prompt: identical, or the first differing token and the top-1/top-2 logprob margin of both runs
there. A flip where that margin is below ``--tie-margin`` is a bf16 near tie; anything else fails
(exit 1). Writes the report to ``--out`` (JSON) and prints a table.

On the H200 (``DIR = .dev/smol``): one call per piece carrying ``.dev/smol/pieceNN`` with
``source scripts/device_env.sh`` (it collects the pieces in /tmp/smolparts), then ``.dev/sgl1``, then
``.dev/sgl2`` and the reference with ``source scripts/device_env.sh && cat /tmp/smolparts/* | tar -x -C /tmp
&& python -m benchmarks.serving.gpu_vs_cpu check --model /tmp/model --device cuda --reference REF --out $OUT/r.json``,
each call within the machine's warm period of the previous one.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from benchmarks.serving.bench_bf16 import DETAIL, PREFIX, TOPICS
from sglang_hs.testing import flush_cache, greedy_divergence

PROMPTS = [PREFIX + f" Question about {t}:{DETAIL} What do the records say about {t}? Answer:" for t in TOPICS[:4]]
PARAMS = {"max_new_tokens": 32, "temperature": 0.0, "ignore_eos": True}  # every step compared
HS_ARGS = {"sink_tokens": 64, "window_tokens": 128, "stream_checkpoint": 256}  # SmolLM2-sized: prompts exceed both
ENGINE = dict(dtype="bfloat16", mem_fraction_static=0.3, log_level="error", max_total_tokens=16384,
              chunked_prefill_size=512)  # several chunks per prompt: chunked prefill over cached blocks


def pack(model: Path, out: Path, piece_mib: int) -> list[Path]:
    import torch
    from safetensors.torch import load_file, save_file

    if out.exists():
        raise SystemExit(f"gpu_vs_cpu: {out} exists; remove it or pick another --out")
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    try:
        dst = tmp / "model"
        dst.mkdir()
        for f in model.iterdir():
            if f.suffix == ".safetensors":
                tensors = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in load_file(f).items()}
                save_file(tensors, dst / f.name, metadata={"format": "pt"})
            elif f.name == "config.json":
                config = json.loads(f.read_text())
                config["torch_dtype"] = "bfloat16"
                (dst / f.name).write_text(json.dumps(config, indent=1))
            elif f.is_file() and not f.name.endswith(".index.json"):
                shutil.copy2(f, dst / f.name)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(dst, arcname="model")
        data, size = buf.getvalue(), piece_mib << 20
        for i in range(0, len(data), size):
            piece = tmp / f"piece{i // size:02d}"
            piece.mkdir()
            (piece / "part").write_bytes(data[i:i + size])
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(out.glob("piece*"))


def generate(model: str, device: str, engine: str = "hs", dtype: str = "bfloat16") -> list[dict]:
    """The fixed prompts' greedy runs with hs, or with stock SGLang (the control: how far bf16 alone
    moves the GPU from the CPU; its GPU attention is SGLang's triton backend)."""
    hs_args = HS_ARGS if engine == "hs" else None
    engine_args = {**ENGINE, "dtype": dtype}
    if device == "cpu":
        from sglang_hs.testing import cpu_engine, use_cpu_placeholder

        use_cpu_placeholder()
        eng = cpu_engine(model, hs_args, **engine_args)
    elif hs_args is None:
        import sglang

        eng = sglang.Engine(model_path=model, device=device, attention_backend="triton", **engine_args)
    else:
        from sglang_hs.engine import create

        eng = create(model, hs_args=hs_args, device=device, **engine_args)
    try:
        runs = []
        flush_cache(eng)
        for prompt in PROMPTS:  # the first cold, the others on its cached prefix (cut back to a checkpoint)
            out = eng.generate(prompt, PARAMS, return_logprob=True, top_logprobs_num=2)
            meta = out["meta_info"]
            runs.append({"output_ids": out["output_ids"], "meta_info": {
                "output_token_logprobs": [x[:2] for x in meta["output_token_logprobs"]],
                "output_top_logprobs": [[x[:2] for x in step] for step in meta["output_top_logprobs"]],
                "prompt_tokens": meta["prompt_tokens"]}})
        return runs
    finally:
        eng.shutdown()


def compare(reference: list[dict], runs: list[dict], tie_margin: float) -> dict:
    rows = []
    for i, (ref, run) in enumerate(zip(reference, runs)):
        first, diff, margin = greedy_divergence(ref, run)
        rows.append({"prompt": i, "prompt_tokens": run["meta_info"]["prompt_tokens"], "first_difference": first,
                     "max_logprob_diff_before": round(diff, 4), "margin_at_difference": margin,
                     "near_tie": first is not None and margin < tie_margin})
    ok = len(reference) == len(runs) and all(r["first_difference"] is None or r["near_tie"] for r in rows)
    return {"ok": ok, "tie_margin": tie_margin, "rows": rows}


def table(report: dict) -> str:
    lines = ["| prompt | prompt tokens | first differing token | max logprob diff before | top-1 - top-2 margin there |",
             "|---|---|---|---|---|"]
    for r in report["rows"]:
        first = "none (identical)" if r["first_difference"] is None else str(r["first_difference"])
        margin = "-" if r["first_difference"] is None else f"{r['margin_at_difference']:.4f}"
        lines.append(f"| {r['prompt']} | {r['prompt_tokens']} | {first} | {r['max_logprob_diff_before']} | {margin} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["pack", "record", "check"])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reference", type=Path)
    ap.add_argument("--piece-mib", type=int, default=56)
    ap.add_argument("--tie-margin", type=float, default=0.1)
    ap.add_argument("--engine", choices=["hs", "stock"], default="hs", help="stock: the control without hs")
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16",
                    help="compute dtype (float32 on CPU: how far bf16 alone moves each engine)")
    args = ap.parse_args(argv)
    if not (args.model / "config.json").is_file():
        raise SystemExit(f"gpu_vs_cpu: {args.model} is not a checkpoint directory (no config.json)")
    if args.command == "pack":
        pieces = pack(args.model, args.out, args.piece_mib)
        print(f"{args.out}/model and {len(pieces)} pieces of <= {args.piece_mib} MiB: {', '.join(p.name for p in pieces)}")
        return 0
    if args.command == "check" and (args.reference is None or not args.reference.is_file()):
        raise SystemExit("gpu_vs_cpu: check needs --reference, a file written by record")
    runs = generate(str(args.model), args.device, args.engine, args.dtype)
    if args.command == "record":
        result = {"device": args.device, "engine": args.engine, "hs_args": HS_ARGS if args.engine == "hs" else None,
                  "engine_args": {**ENGINE, "dtype": args.dtype}, "runs": runs}
    else:
        reference = json.loads(args.reference.read_text())
        result = {"device": args.device, "reference_device": reference["device"],
                  **compare(reference["runs"], runs, args.tie_margin), "runs": runs}
        print(table(result))
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, args.out)
    return 0 if result.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
