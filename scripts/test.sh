#!/usr/bin/env bash
# Runs the CPU test suite (GPU tests are marked and skip without CUDA). Exit 5 (nothing collected) is a failure too.
source "$(dirname "$0")/env.sh"
python -m pytest -q "$@"
