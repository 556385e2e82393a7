#!/usr/bin/env bash
# Print a CUDA decode source whose exports take no slots argument (v4 and before) with the current exports'
# signatures, the slots argument ignored, so that bench_gpu can time it next to the shipped kernel in one
# device call: kernels/cuda/with_slots_abi.sh <rev> > kernels/cuda/decode_sp_v4.cu (untracked, it travels).
set -euo pipefail
git show "${1:?usage: with_slots_abi.sh <rev>}:kernels/cuda/decode_sp.cu" \
    | sed 's/^extern "C" int hs_decode_sp(/static int old_decode_sp(/; s/^extern "C" int hs_decode_sp_resident(/static int old_decode_sp_resident(/'
cat <<'CU'

extern "C" int hs_decode_sp(int head_dim, int bf16, int, const void* q, const void* k_dense, const void* k_vals,
                            const void* k_meta, const void* v_dense, const void* v_vals, const void* v_meta,
                            const int32_t* k_index, const int32_t* v_index, const int32_t* seq_lens, float* o_part,
                            float* lse_part, float scale_log2, int batch, int max_blocks, int splits, int h_kv,
                            int group, void* stream) {
    return old_decode_sp(head_dim, bf16, q, k_dense, k_vals, k_meta, v_dense, v_vals, v_meta, k_index, v_index,
                         seq_lens, o_part, lse_part, scale_log2, batch, max_blocks, splits, h_kv, group, stream);
}

extern "C" int hs_decode_sp_resident(int head_dim, int bf16, int) { return old_decode_sp_resident(head_dim, bf16); }
CU
