# End-to-end A/B on the GPU machine: this checkout's benchmarks/serving/bench_e2e.py once per variant, in the order given
# (repeat a name to alternate), then one summary line per run; run as a file from /tmp, so that neither it nor the
# servers it starts import this checkout's folders in place of the variant's packages (/tmp/pp). A variant is a source
# tree holding kernels/ and sglang_hs/ ("." for this checkout; else a directory, e.g. .scratch/main after
# `git archive REV kernels sglang_hs | tar -x -C .scratch/main`), served as hs, with hs flags after an @ (no spaces:
# `.@--hs-extend-graph-tokens=64`); "stock" is stock SGLang. Source scripts/device_env.sh first (it links /tmp/pp).
#   bash scripts/e2e_ab.sh OUT VARIANT... -- BENCH_E2E_FLAGS...   (each run's log, results.json, server log and
#   --profile-steps tables in OUT/runs.tar.gz: a device call brings back at most 8 files, and four runs make 12)
out=$1; shift
variants=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do variants+=("$1"); shift; done
shift
mkdir -p "$out"
root=$PWD
i=0
for v in "${variants[@]}"; do
  i=$((i + 1))
  tree=${v%%@*}
  hs_flags=${v#"$tree"}
  hs_flags=${hs_flags#@}
  engine=hs
  if [ "$v" = stock ]; then engine=stock; src=$root; name=r$i-stock
  else src=$(cd "$tree" && pwd); name=r$i-$(basename "$src")${hs_flags:+-flags}; fi
  ln -sfn "$src/sglang_hs" /tmp/pp/sglang_hs
  ln -sfn "$src/kernels" /tmp/pp/hs_kernels
  (cd /tmp && timeout "${RUN_TIMEOUT:-240}" python "$root/benchmarks/serving/bench_e2e.py" --shape llama-3.1-8b --out "/tmp/ab-$name" \
    --engines $engine --hs-flags="$hs_flags" "$@" > "$out/$name.log" 2>&1)
  echo "$name rc $? $(date -u +%T)"
  cp "/tmp/ab-$name/results.json" "$out/$name.json" 2>/dev/null
  cp "/tmp/ab-$name/$engine.log" "$out/$name.server.log" 2>/dev/null
  for f in /tmp/ab-$name/profile-*.md; do [ -f "$f" ] && cp "$f" "$out/$name-${f##*/}"; done
done
ln -sfn "$root/sglang_hs" /tmp/pp/sglang_hs
ln -sfn "$root/kernels" /tmp/pp/hs_kernels
python - "$out" <<'PY'
import glob, hashlib, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "r*.json")), key=lambda p: int(os.path.basename(p)[1:].split("-")[0])):
    res = json.load(open(path))
    engine = "stock" if "stock" in res else "hs"
    d = res[engine]
    p = d.get("prefix", {})
    runs = " ".join(f"{r['context']}x{r['batch']}: " + (r["error"][:40] if "error" in r else
                    f"ttft {r['ttft_s']:.3f} decode {1e3 * r['decode_tpot_s']:.2f} ms") for r in d.get("runs", []))
    ids = hashlib.md5(str(p.get("output_ids")).encode()).hexdigest()[:8] if p else "-"
    each = " ".join("%.3f" % x for x in p.get("cached_ttfts_s", []))
    print(os.path.basename(path)[:-5], engine, runs, "| prefix cold %.3f cached %.3f [%s] ids %s" % (
        p.get("cold_ttft_s", float("nan")), p.get("cached_ttft_s", float("nan")), each, ids))
PY
(cd "$out" && tar -czf runs.tar.gz --remove-files r[0-9]*)
