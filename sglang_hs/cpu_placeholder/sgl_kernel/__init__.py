"""CPU placeholder for SGLang's compiled kernel package ``sgl_kernel`` (no CPU build on PyPI).

SGLang 0.5.17 imports these 12 names at start-up on CPU but never calls them on the paths the
hs plugin uses. Every one raises if called, and records the call first (in the file named by
SGLANG_HS_PLACEHOLDER_LOG) so tests can prove none was. Put this folder on PYTHONPATH only for
CPU runs; never on a machine with the real sgl_kernel.
"""

import os

PLACEHOLDER = True
if os.environ.get("SGLANG_HS_PLACEHOLDER_LOG"):  # record that the placeholder is what got imported
    with open(os.path.splitext(os.environ["SGLANG_HS_PLACEHOLDER_LOG"])[0] + ".loaded", "a") as _f:
        _f.write(f"{os.getpid()}\n")
NAMES = (
    "rmsnorm",
    "gptq_gemm",
    "gptq_shuffle",
    "causal_conv1d_fwd",
    "causal_conv1d_update",
    "copy_all_layer_kv_cache_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_tree_kernel_efficient_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "verify_tree_greedy_cpu",
)


def _placeholder(name):
    def call(*args, **kwargs):
        log = os.environ.get("SGLANG_HS_PLACEHOLDER_LOG")
        if log:
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {name}\n")
        raise RuntimeError(f"sgl_kernel.{name} is a CPU placeholder (no CPU build of sgl_kernel); it must not be called")

    call.__name__ = name
    return call


for _name in NAMES:
    globals()[_name] = _placeholder(_name)
