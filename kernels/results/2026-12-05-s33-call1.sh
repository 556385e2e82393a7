# Call 1 of a device session that serves SGLang (carry [".dev/sgl1"]; the next call, within 30 s of this one's end,
# carries [".dev/sgl2", ".dev/s31-before"] and runs sglang_hs/results/2026-12-05-s32/run.sh). While SGLang's first
# piece is copied to /tmp, the `auto-given-bar` patch (kernels/results/2026-12-05-s30-auto-given-bar.patch, not yet
# run on a GPU) is applied to a copy of this tree and its device script runs there: the CUDA prefix suite with the new
# `auto` bar cases, then "auto, split given" against both paths after served 24586-, 28682- and 32778-token prefixes.
# Merge the patch if the suite passes and `auto` takes the faster path in each row. From the repository root:
# bash THIS_FILE
source scripts/device_env.sh; mkdir -p $OUT
root=$PWD
rm -rf /tmp/agb && mkdir -p /tmp/agb && tar --exclude=./.dev -cf - . | tar -xf - -C /tmp/agb
(cd /tmp/agb && patch -p1 -s < kernels/results/2026-12-05-s30-auto-given-bar.patch) || { echo "patch failed"; exit 1; }
(cd /tmp/agb && timeout 420 bash kernels/results/2026-12-05-s30-auto-given-bar-call.sh)
source "$root/scripts/device_env.sh"  # /tmp/pp back to this tree for the next call
