# Source on the GPU machine, from the repository root: installs what the carried .dev pieces hold
# and puts this checkout on PYTHONPATH with its SGLang plugin entry point. Three calls in a row
# (one call carries at most 64 MiB): carry [".dev/sgl1"], then [".dev/sgl2"], then [".dev/site.tar.xz"]
# plus the real command; a warm machine keeps /tmp between calls (../shared/tools/device-bundle-sglang).
mkdir -p /tmp/sglparts /tmp/sglsite /tmp/site /tmp/pp
if [ -d .dev/sgl1 ]; then cp .dev/sgl1/* /tmp/sglparts/; fi
if [ -d .dev/sgl2 ]; then cat /tmp/sglparts/* .dev/sgl2/* | tar -xJ -C /tmp/sglsite && touch /tmp/sglsite/.complete; fi
# a packed checkpoint travels in pieces, one call each (python -m benchmarks.serving.gpu_vs_cpu pack): collect them
for piece in .dev/smol/piece*; do [ -f "$piece/part" ] && mkdir -p /tmp/smolparts && cp "$piece/part" "/tmp/smolparts/$(basename "$piece")"; done
if [ -f .dev/site.tar.xz ] && [ ! -d /tmp/site/tilelang ]; then tar -xJf .dev/site.tar.xz -C /tmp/site; fi
ln -sfn "$PWD/kernels" /tmp/pp/hs_kernels
ln -sfn "$PWD/prep" /tmp/pp/hs_prep
ln -sfn "$PWD/sglang_hs" /tmp/pp/sglang_hs
ln -sfn "$PWD/recipes" /tmp/pp/hs_recipes
# a dist-info so that SGLang's plugin loader (importlib.metadata entry points) finds "hs"
dist=/tmp/pp/hierasparse_serving-0.1.0.dist-info
mkdir -p "$dist"
printf 'Metadata-Version: 2.1\nName: hierasparse-serving\nVersion: 0.1.0\n' > "$dist/METADATA"
printf '[sglang.srt.plugins]\nhs = sglang_hs.plugin:register\n' > "$dist/entry_points.txt"
export PYTHONPATH=/tmp/pp:/tmp/sglsite:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
