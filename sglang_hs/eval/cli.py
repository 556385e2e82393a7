"""hs-eval: long-context quality of hs settings (passkey + RULER-style needles), offline and reproducible.

  hs-eval tasks  --tokenizer DIR [task options] --output tasks.jsonl
  hs-eval run    --url http://HOST:PORT [--name NAME] [task options] --out DIR       (a live server)
  hs-eval run    --settings stock,full,aoh-s50,... [--ckpt-root DIR] [task options] --out DIR (a server per setting)
  hs-eval run    --settings ... --in-process ...                                    (sglang.Engine in this process)
  hs-eval run    --settings ... --simulate ...                                      (the method in transformers)
  hs-eval report DIR/results.json [...] --out DIR                                   (re-render / merge)
  hs-eval compare A/results.json B/results.json                                     (same prompts, two runs)
  hs-eval lm-eval --settings stock,default [--tasks niah_single_1,...] --out DIR    (lm-eval's RULER, per server)
  hs-eval calibrate PREPARED [task options] [--device cuda --dtype bfloat16]        (write the quality-safe setting)
  hs-eval settings                                                                  (list the presets)
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

DEFAULT_CKPT_ROOT = Path.home() / ".cache" / "hs" / "eval_checkpoints"
LM_EVAL_TASKS = ("niah_single_1", "niah_multikey_2", "niah_multikey_3", "ruler_vt", "ruler_cwe", "ruler_fwe")  # generated, no download


def _floats(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not vals or not all(0.0 <= v <= 1.0 for v in vals):
        raise argparse.ArgumentTypeError(f"depths must be in [0, 1], got {text!r}")
    return vals


def _ints(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 64:
        raise argparse.ArgumentTypeError(f"lengths must be integers >= 64, got {text!r}")
    return vals


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _hs_set(text: str) -> tuple[str, float | int]:
    from ..settings import FLAGS

    keys = {key: typ for key, typ, _ in FLAGS.values()}
    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or key not in keys or key == "recipe":
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with KEY one of {', '.join(k for k in keys if k != 'recipe')}, got {text!r}")
    try:
        return key, keys[key](value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{key} takes a {keys[key].__name__} value, got {value!r}") from None


def add_task_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", type=_names, default=["passkey"], help="comma list of passkey,niah_single,niah_multikey,niah_multivalue,vt")
    p.add_argument("--lengths", type=_ints, default=[1024], help="prompt lengths in tokens (model tokenizer, chat template included)")
    p.add_argument("--depths", type=_floats, default=[0.1, 0.3, 0.5, 0.7, 0.9], help="needle depths, cycled over samples")
    p.add_argument("--samples", type=int, default=10, help="samples per task and length")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--questions", type=int, default=1, choices=(1, 2), help="questions per context (2 for warm/cold cache runs)")
    p.add_argument("--offline", action="store_true", help="do not download the essays; use generated filler if not cached")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hs-eval", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    t = sub.add_parser("tasks", help="generate the task set (JSONL)")
    t.add_argument("--tokenizer", required=True, help="model directory with the tokenizer (a prepared checkpoint)")
    t.add_argument("--output", required=True)
    add_task_args(t)

    r = sub.add_parser("run", help="run the task set against a server or settings")
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument("--url", help="live OpenAI-compatible server (e.g. python -m sglang_hs.launch_server ...)")
    src.add_argument("--settings", type=_names, help="presets to compare (see hs-eval settings); a server is started per setting")
    r.add_argument("--name", default="server", help="setting name for --url")
    r.add_argument("--in-process", action="store_true", help="with --settings: sglang.Engine in this process instead of a server")
    r.add_argument("--simulate", action="store_true",
                   help="with --settings: the method simulated in transformers (sglang_hs.eval.simulate), no SGLang")
    r.add_argument("--model", default=None, help="model for hs-prep convert (default: the embedded SmolLM2-135M-Instruct)")
    r.add_argument("--ckpt-root", default=str(DEFAULT_CKPT_ROOT), help="where prepared checkpoints are kept")
    r.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the first checkpoint / the server's model)")
    r.add_argument("--api", default="completions", choices=("completions", "chat"))
    r.add_argument("--mode", default="cold", choices=("cold", "warmcold"))
    r.add_argument("--concurrency", type=int, default=4)
    r.add_argument("--device", default="cpu")
    r.add_argument("--dtype", default="float32")
    r.add_argument("--server-arg", action="append", default=[], help="extra SGLang flag for started servers (repeatable; not with --in-process)")
    r.add_argument("--hs-set", type=_hs_set, action="append", default=[], metavar="KEY=VALUE",
                   help="override an hs arg of every setting, e.g. stream_checkpoint=256 (repeatable; recorded in results.json)")
    r.add_argument("--out", required=True, help="output directory (results.json, results.md, accuracy_vs_kv.png)")
    add_task_args(r)

    rep = sub.add_parser("report", help="render results.json file(s) to markdown + PNG")
    rep.add_argument("results", nargs="+")
    rep.add_argument("--out", required=True)

    lm = sub.add_parser("lm-eval", help="lm-eval's RULER tasks against a server per setting (a suite written elsewhere)")
    lm.add_argument("--settings", type=_names, default=["stock", "default"])
    lm.add_argument("--tasks", type=_names, default=list(LM_EVAL_TASKS), help="lm-eval task names")
    lm.add_argument("--lengths", type=_ints, default=[4096], help="RULER max_seq_lengths (lm-eval reports 4096 and up)")
    lm.add_argument("--limit", type=int, default=50, help="samples per task")
    lm.add_argument("--model", default=None)
    lm.add_argument("--ckpt-root", default=str(DEFAULT_CKPT_ROOT))
    lm.add_argument("--device", default="cpu")
    lm.add_argument("--dtype", default="float32")
    lm.add_argument("--concurrency", type=int, default=4)
    lm.add_argument("--server-arg", action="append", default=[])
    lm.add_argument("--out", required=True)

    cmp = sub.add_parser("compare", help="two runs over the same prompts (e.g. served and --simulate), setting by setting")
    cmp.add_argument("a")
    cmp.add_argument("b")

    c = sub.add_parser("calibrate", help="measure the ladder of hs settings, write the best quality-safe one into the checkpoint")
    c.add_argument("checkpoint", help="a prepared checkpoint (hs-prep convert)")
    c.add_argument("--keep", type=float, default=0.95, help="fraction of stock's correct answers every task and length must keep")
    c.add_argument("--device", default="cpu")
    c.add_argument("--dtype", default="float32")
    c.add_argument("--out", default=None, help="where the rungs' results go (default: CHECKPOINT/calibration)")
    c.add_argument("--dry-run", action="store_true", help="measure and report, leave config.json as it is")
    add_task_args(c)
    c.set_defaults(tasks=["niah_single", "niah_multikey", "niah_multivalue", "vt"], lengths=None, samples=20)

    sub.add_parser("settings", help="list the setting presets")
    return ap


def _fail(msg: str) -> int:
    print(f"hs-eval: error: {msg}", file=sys.stderr)
    return 2


def _machine() -> str:
    import os

    return f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}"


def _tasks(args, tokenizer_dir: str):
    from transformers import AutoTokenizer

    from .haystack import load_haystack
    from .tasks import TASKS, Builder, generate

    bad = [t for t in args.tasks if t not in TASKS]
    if bad:
        raise ValueError(f"unknown task {bad[0]!r}; known: {', '.join(TASKS)}")
    if args.samples < 1:
        raise ValueError("--samples must be >= 1")
    if not (Path(tokenizer_dir) / "tokenizer_config.json").is_file() and not (Path(tokenizer_dir) / "tokenizer.json").is_file():
        raise ValueError(f"{tokenizer_dir} has no tokenizer")
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    builder = Builder(tok, *load_haystack(offline=args.offline))
    return builder, generate(builder, args.tasks, args.lengths, args.depths, args.samples, args.seed, args.questions)


def cmd_tasks(args) -> int:
    from .tasks import fingerprint

    _, samples = _tasks(args, args.tokenizer)
    with open(args.output, "w") as f:
        for s in samples:
            f.write(json.dumps(s.to_json()) + "\n")
    print(f"{len(samples)} samples, fingerprint {fingerprint(samples)} -> {args.output}")
    return 0


def _with_kv(rows, facts, hs, sink=128, window=256):
    from .settings import dense_bytes_per_token, kv_bytes_per_token

    hs = {**facts.get("hs", {}), **hs} if facts else hs  # what was served, flags or not
    if facts and facts.get("stock"):
        for r in rows:
            r["kv_bytes_per_token"] = dense_bytes_per_token(facts)
        return rows
    for r in rows:
        r["kv_bytes_per_token"] = (kv_bytes_per_token(facts, hs.get("decode_sk", 0.0), hs.get("decode_sv", 0.0), r["n_tokens"],
                                                      hs.get("sink_tokens", sink), hs.get("window_tokens", window))
                                   if facts else None)
    return rows


def _block(setting, ckpt, facts: dict, rows: list[dict], t0: float, info: dict | None = None) -> dict:
    """One setting's entry of results.json: what ran, on what, and its rows with their KV bytes."""
    from .settings import dense_bytes_per_token

    block = {"setting": setting.to_json(), "checkpoint": str(ckpt), "facts": facts, "seconds": round(time.time() - t0, 1),
             "dense_bytes_per_token": dense_bytes_per_token(facts), "rows": _with_kv(rows, facts, setting.hs)}
    if info is not None:
        block["server"] = info
    return block


def cmd_run(args) -> int:
    from .report import write_outputs
    from .runner import EngineClient, HTTPClient, Server
    from .settings import checkpoint_facts, dense_bytes_per_token, preset, prepare_checkpoint
    from .tasks import fingerprint

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = lambda m: print(f"[hs-eval {time.strftime('%H:%M:%S')}] {m}", flush=True)  # noqa: E731
    command = "hs-eval " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if args.argv is None else "hs-eval " + " ".join(shlex.quote(a) for a in args.argv)
    results = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": _machine(), "settings": []}

    if args.url:
        client = HTTPClient(args.url, args.api, args.concurrency)
        client.check()
        info = client.server_info()
        model_path = (info.get("get_model_info") or {}).get("model_path")
        tok_dir = args.tokenizer or model_path
        if not tok_dir or not Path(tok_dir).is_dir():
            raise ValueError("cannot find the server's tokenizer locally; pass --tokenizer DIR")
        builder, samples = _tasks(args, tok_dir)
        facts = hs = None
        stats = info.get("hs_stats") or {}
        if model_path and (Path(model_path) / "config.json").is_file() and stats.get("settings"):
            s = stats["settings"]
            hs = {"decode_sk": s["decode"]["s_k"], "decode_sv": s["decode"]["s_v"], "prefill_sk": s["prefill"]["s_k"],
                  "prefill_sv": s["prefill"]["s_v"], "sink_tokens": s["sink_tokens"], "window_tokens": s["window_tokens"]}
            facts = checkpoint_facts(Path(model_path), hs)
            facts["retrieval_groups"] = round(s["retrieval_fraction"] * facts["total_groups"])  # the server's split
        results.update(haystack_sources=sorted({s.haystack_source for s in samples}), task_fingerprint=fingerprint(samples))
        log(f"{len(samples)} samples against {args.url} ({args.mode})")
        t0 = time.time()
        rows = _with_kv(run_samples_logged(client, builder, samples, args.mode, log), facts, hs or {})
        results["settings"].append({"setting": {"name": args.name, "description": f"live server {args.url}", "hs": hs},
                                    "server": info, "facts": facts, "seconds": round(time.time() - t0, 1),
                                    "dense_bytes_per_token": dense_bytes_per_token(facts) if facts else None, "rows": rows})
        write_outputs(results, out)
        log(f"wrote {out}/results.md")
        return 0

    if args.in_process and args.server_arg:
        raise ValueError("--server-arg is for started servers; with --in-process use --hs-set for hs args")
    settings = [preset(n) for n in args.settings]
    for s in settings:
        s.hs.update(dict(args.hs_set))
    root = Path(args.ckpt_root)
    ckpts = [prepare_checkpoint(s, root, args.model) for s in settings]
    builder, samples = _tasks(args, args.tokenizer or str(ckpts[0]))
    results.update(haystack_sources=sorted({s.haystack_source for s in samples}), task_fingerprint=fingerprint(samples))
    log(f"{len(samples)} samples x {len(settings)} settings ({args.mode}); checkpoints under {root}")
    for setting, ckpt in zip(settings, ckpts):
        facts = {**checkpoint_facts(ckpt, setting.hs), "stock": setting.engine == "stock"}
        t0 = time.time()
        if args.simulate:
            from .simulate import SimulatedClient

            client = SimulatedClient(str(ckpt), setting.hs, args.device, args.dtype)
            log(f"{setting.name}: simulation loaded after {time.time() - t0:.0f}s")
            rows = run_samples_logged(client, builder, samples, args.mode, log, setting.name)
            info = client.server_info()
            client.close()
        elif args.in_process:
            from ..testing import ENGINE_DEFAULTS, use_cpu_placeholder

            if args.device == "cpu":
                use_cpu_placeholder()
            client = EngineClient(str(ckpt), setting.hs, concurrency=args.concurrency,
                                  stats_path=str(out / f"engine_{setting.name}.stats.json"),
                                  **{**ENGINE_DEFAULTS, "device": args.device, "dtype": args.dtype,
                                     "disable_cuda_graph": args.device == "cpu"},
                                  context_length=8192, max_total_tokens=40000, enable_cache_report=True)
            log(f"{setting.name}: engine up after {time.time() - t0:.0f}s ({' '.join(setting.hs_flags())})")
            try:
                rows = run_samples_logged(client, builder, samples, args.mode, log, setting.name)
                info = client.server_info()
            finally:
                client.close()
        else:
            with Server(ckpt, setting.hs_flags(), out / f"server_{setting.name}.log", device=args.device, dtype=args.dtype,
                        extra=args.server_arg, stock=setting.engine == "stock") as server:
                log(f"{setting.name}: server up on {server.url} after {time.time() - t0:.0f}s ({' '.join(setting.hs_flags())})")
                client = HTTPClient(server.url, args.api, args.concurrency, cache_report=True)
                client.check()
                rows = run_samples_logged(client, builder, samples, args.mode, log, setting.name)
                info = client.server_info()
        results["settings"].append(_block(setting, ckpt, facts, rows, t0, info))
        write_outputs(results, out)  # after every setting: partial results survive an interruption
    log(f"wrote {out}/results.md, results.json, accuracy_vs_kv.png")
    return 0


def run_samples_logged(client, builder, samples, mode, log, name="server"):
    from .runner import run_samples

    t0 = time.time()
    rows = run_samples(client, builder, samples, mode)
    log(f"{name}: {sum(r['correct'] for r in rows)}/{len(rows)} correct in {time.time() - t0:.0f}s")
    return rows


def cmd_report(args) -> int:
    from .report import write_outputs

    merged = None
    for path in args.results:
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"{path} does not exist")
        data = json.loads(p.read_text())
        if "settings" not in data:
            raise ValueError(f"{path} is not an hs-eval results.json")
        if merged is None:
            merged = {k: v for k, v in data.items() if k != "summary"}
        else:
            merged["settings"] += data["settings"]
            merged["command"] += " ; " + data["command"]
            merged["haystack_sources"] = sorted(set(merged["haystack_sources"]) | set(data["haystack_sources"]))
    write_outputs(merged, Path(args.out))
    print(f"wrote {args.out}/results.md")
    return 0


def cmd_calibrate(args) -> int:
    from .calibrate import Ladder, climb, markdown, setting_of, supported_lengths, write_calibration
    from .report import write_outputs
    from .settings import checkpoint_facts
    from .simulate import SimulatedClient, Simulator
    from .tasks import fingerprint

    ckpt = Path(args.checkpoint)
    if not (ckpt / "config.json").is_file() or "hierasparse" not in json.loads((ckpt / "config.json").read_text()):
        raise ValueError(f"{ckpt} is not a prepared checkpoint (hs-prep convert MODEL --output DIR first)")
    if not 0.0 < args.keep <= 1.0:
        raise ValueError(f"--keep must be in (0, 1], got {args.keep}")
    args.lengths = args.lengths or supported_lengths(ckpt)
    out = Path(args.out) if args.out else ckpt / "calibration"
    log = lambda m: print(f"[hs-eval {time.strftime('%H:%M:%S')}] {m}", flush=True)  # noqa: E731
    command = "hs-eval " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if args.argv is None else args.argv))
    builder, samples = _tasks(args, str(ckpt))
    results = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": _machine(), "settings": [],
               "haystack_sources": sorted({s.haystack_source for s in samples}), "task_fingerprint": fingerprint(samples)}
    sim = Simulator(str(ckpt), args.device, args.dtype)
    log(f"{len(samples)} samples ({', '.join(args.tasks)} at {', '.join(map(str, args.lengths))} tokens) per rung")

    def measure(setting):
        t0 = time.time()
        rows = run_samples_logged(SimulatedClient(sim, setting.hs), builder, samples, "cold", log, setting.name)
        facts = checkpoint_facts(ckpt, setting.hs)
        results["settings"].append(_block(setting, ckpt, facts, rows, t0))
        write_outputs(results, out)
        return rows

    ladder = Ladder(ckpt, measure, args.keep, max(args.lengths), log)
    best = climb(ladder)
    calibration = {"setting": setting_of(best), "chosen": best["name"], "keep": args.keep, "command": command,
                   "date": results["date"], "machine": results["machine"],
                   "engine": f"the method simulated in transformers (sglang_hs.eval.simulate), {args.device} {args.dtype}",
                   "task_fingerprint": results["task_fingerprint"], "table": ladder.table}
    (out / "calibration.md").write_text(markdown(calibration))
    if not args.dry_run:
        write_calibration(ckpt, calibration)
    log(f"chosen {best['name']} (KV {best['kv_vs_dense']:.2f}x dense)" + ("" if args.dry_run else f", written to {ckpt}/config.json")
        + f"; table in {out}/calibration.md")
    return 0


def cmd_lm_eval(args) -> int:
    try:
        import lm_eval
    except ImportError:
        raise ValueError("hs-eval lm-eval needs lm-eval (pip install 'lm-eval[ruler]')") from None
    from .runner import Server
    from .settings import preset, prepare_checkpoint

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "hs-eval " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if args.argv is None else args.argv))
    report = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": _machine(),
              "lm_eval": lm_eval.__version__, "settings": {}}
    settings = [preset(n) for n in args.settings]
    ckpts = [prepare_checkpoint(s, Path(args.ckpt_root), args.model) for s in settings]
    tokenizer = str(ckpts[0])
    for setting, ckpt in zip(settings, ckpts):
        with Server(ckpt, setting.hs_flags(), out / f"server_{setting.name}.log", device=args.device, dtype=args.dtype,
                    context_length=max(args.lengths) + 256, extra=args.server_arg, stock=setting.engine == "stock") as server:
            res = lm_eval.simple_evaluate(
                model="local-completions", tasks=args.tasks, limit=args.limit, log_samples=False,
                model_args={"model": "default", "base_url": f"{server.url}/v1/completions", "tokenizer": tokenizer,
                            "tokenized_requests": False, "num_concurrent": args.concurrency, "max_retries": 1},
                metadata={"max_seq_lengths": args.lengths, "tokenizer": tokenizer})
        scores = {task: {str(n): res["results"][task].get(f"{n},none") for n in args.lengths} for task in args.tasks}
        report["settings"][setting.name] = scores
        (out / "lm_eval.json").write_text(json.dumps(report, indent=1))
        print(f"{setting.name}: {json.dumps(scores)}", flush=True)
    lines = [f"Command: `{command}`", "", f"Date {report['date']}; machine: {report['machine']}; lm-eval {report['lm_eval']}; "
             f"{args.limit} samples a task, greedy, scores are lm-eval's RULER string match.", "",
             "| setting | " + " | ".join(f"{t} {n}" for t in args.tasks for n in args.lengths) + " |",
             "|---|" + "---|" * (len(args.tasks) * len(args.lengths))]
    for name, scores in report["settings"].items():
        lines.append(f"| {name} | " + " | ".join("n/a" if scores[t][str(n)] is None else f"{scores[t][str(n)]:.2f}"
                                                 for t in args.tasks for n in args.lengths) + " |")
    (out / "lm_eval.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def cmd_compare(args) -> int:
    from .report import compare_table

    runs = []
    for path in (args.a, args.b):
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"{path} does not exist")
        runs.append(json.loads(p.read_text()))
    print(compare_table(*runs, names=(Path(args.a).parent.name or "A", Path(args.b).parent.name or "B")), end="")
    return 0


def cmd_settings(_args) -> int:
    from .settings import PRESETS, preset

    for name in PRESETS:
        s = preset(name)
        print(f"{name:16s} {s.checkpoint_name():22s} {' '.join(s.hs_flags())}  # {s.description}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        return {"tasks": cmd_tasks, "run": cmd_run, "report": cmd_report, "calibrate": cmd_calibrate, "compare": cmd_compare, "lm-eval": cmd_lm_eval,
                "settings": cmd_settings}[args.cmd](args)
    except (ValueError, OSError, RuntimeError) as e:  # EvalError is a RuntimeError
        return _fail(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
    except KeyboardInterrupt:
        return _fail("interrupted")


if __name__ == "__main__":
    sys.exit(main())
