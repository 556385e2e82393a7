// Decode on the sparse tensor cores: one new token per sequence against mixed dense / 2:4 KV blocks,
// the semantics of hs_kernels.attention.decode_attention (partial results per split, merged by
// triton_decode.combine_kernel, as the Triton decode kernel writes them).
//
// One warp per (split, KV head, sequence). Both GEMMs put the 2:4 operand first, so mma.sp reads the
// stored values and metadata as they are (no unpacking):
//   S^T [64 tokens, 8 heads] = K [64, D] . Q^T [D, 8]       (K 2:4 along D: mma.sp m16n8k32)
//   O^T [D, 8 heads]        += V^T [D, 64] . P^T [64, 8]    (V^T 2:4 along tokens)
// The G <= 8 query heads of the KV group are the 8 columns (padded with zeros). S^T's accumulator
// layout holds (token, head pairs) per thread; movmatrix.trans turns each 8 x 8 piece of P^T into
// the B-operand layout of the second GEMM, so P never leaves registers. mma.sp's metadata comes in
// pairs of lanes: lane 4g holds bits 0-15 of rows g and g + 8's 32-bit word of the k32 chunk, lane
// 4g + 1 bits 16-31 (measured: kernels/probes/mma_sp_layout.cu). Dense blocks (sink, window, the
// partial last block) take mma m16n8k16 with 16-byte loads: each lane reads 8 consecutive head_dim
// elements of a token, so the reduction index of a K chunk is a permutation of head_dim (Q^T is read
// with the same one), and dense V's 8 x 8 pieces are transposed by movmatrix with the rows of O^T a
// permutation of head_dim (`o_dim`; sparse V^T rows follow it, the output store undoes it).
// Each operand of a block (K, then V; dense or 2:4 values + metadata) is staged in shared memory by cp.async
// in a ring of SLOTS slots of a dense operand's size: SLOTS - 1 operands are in flight while one is computed.
// One warp is latency-bound (v4, two stages of whole blocks, 64 KB: 3 warps per SM, S = 1/1 at 80 % of the copy
// rate, the bytes in flight per SM over the memory latency); operand slots keep more bytes in flight per
// byte of shared memory (3 slots: 48 KB, 4 warps per SM; 4 slots: 64 KB, 3 operands in flight per warp).
// Rows are stored with an XOR swizzle of their 16-byte chunks so that each fragment read is free of
// bank conflicts (`dense_unit`, `k_word`, `v_word`).
// Balanced splits (a `counters` buffer given): the memory system serves the programs of one launch unevenly (equal
// work took 210-280 us at B = 8, 32K on an H100; an SM running fewer programs did not serve them faster), and the last
// one sets the time. So each split takes half its share of a row's blocks as a fixed range, and the rest one block
// at a time from the row's counter, taken a block ahead so that the atomic's latency is hidden: faster programs take
// more. Rows shorter than 2 BALANCE_MIN blocks a split keep fixed ranges: there a program would wait for its first
// atomic before its first copy (one 4K sequence: 9.7 -> 11.6 us). The row's last program to finish taking puts its
// counters back to zero. The order in which a row's blocks are summed then varies from run to run (the results within
// rounding); without counters the splits are fixed ranges and the results bitwise reproducible.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int BS = 64;
constexpr int BALANCE_MIN = 4;  // fixed blocks per split, at least, for balanced splits

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
    return y;
}

template <bool BF16>
__device__ __forceinline__ void mma_sp(float c[4], const uint32_t a[4], const uint32_t b[4], uint32_t e) {
    if constexpr (BF16)
        asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
    else
        asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
}

template <bool BF16>
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if constexpr (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <bool BF16>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
    if constexpr (BF16) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    } else {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    }
}

// the metadata register of lane 4g + t for rows g, g + 8 (their 32-bit words lo, hi of one k32 chunk)
__device__ __forceinline__ uint32_t meta_reg(uint32_t lo, uint32_t hi, int t) {
    return prmt(lo, hi, (t & 1) ? 0x7632 : 0x5410);
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// head_dim element held by row g (< 8) of O^T tile mi; row g + 8 holds o_dim + 2. With lane (g, t) reading
// elements 32s + 8t .. + 7 of a dense V row, word w of that read is column t of the 8 x 8 piece w of the
// 32-element span s: movmatrix makes it row g of piece w, tiles 2s (pieces 0, 1) and 2s + 1 (pieces 2, 3).
__device__ __forceinline__ int o_dim(int mi, int g) { return 32 * (mi >> 1) + 8 * (g >> 1) + 4 * (mi & 1) + (g & 1); }

__device__ __forceinline__ float warp_max(float x) {
    for (int o = 4; o < 32; o <<= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 4; o < 32; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Shared-memory positions of the staged blocks. A dense [64, D] row is D / 8 16-byte units; lanes g, g + 1
// of a quarter warp read rows r, r + 1 (units 4c + t), so odd rows swap their unit halves.
template <int D>
__device__ __forceinline__ int dense_unit(int row, int unit) { return row * (D / 8) + (unit ^ ((row & 1) << 2)); }
// A sparse K row is D / 4 words (D / 16 units); a warp reads words 8c + t (+ 4) of rows 16mt + g: each
// row's units are rotated by its place among the rows that share a bank set.
template <int D>
__device__ __forceinline__ int k_word(int row, int word) {
    constexpr int W = D / 4, UNITS = W / 4, SHARE = W < 32 ? 32 / W : 1;
    return row * W + ((((word >> 2) ^ (row / SHARE)) & (UNITS - 1)) << 2) + (word & 3);
}
// A sparse V^T row is 16 words (64 tokens); a warp reads rows o_dim(mi, g), which differ by 0, 1, 8, 9, ...
__device__ __forceinline__ int v_word(int row, int word) { return row * 16 + ((((word >> 2) ^ (row >> 3)) & 3) << 2) + (word & 3); }

// One operand's block into a stage: dense [64, D] (entry >= 0) or 2:4 values then metadata (entry < 0).
template <int D, bool IS_K>
__device__ __forceinline__ void stage_block(uint8_t* dst, int entry, const uint16_t* dense, const uint32_t* vals,
                                            const uint32_t* meta, int lane) {
    if (entry >= 0) {
        const uint4* src = reinterpret_cast<const uint4*>(dense + (size_t)entry * BS * D);
        #pragma unroll 4
        for (int u = lane; u < BS * D / 8; u += 32)
            cp_async16(reinterpret_cast<uint4*>(dst) + dense_unit<D>(u / (D / 8), u % (D / 8)), src + u);
        return;
    }
    const size_t slot = (size_t)(-entry - 1);
    const uint4* src = reinterpret_cast<const uint4*>(vals + slot * (BS * D / 4));
    uint32_t* words = reinterpret_cast<uint32_t*>(dst);
    #pragma unroll 4
    for (int u = lane; u < BS * D / 16; u += 32) {  // K: 64 rows of D / 16 units; V^T: D rows of 4
        const int row = IS_K ? u / (D / 16) : u / 4, unit = IS_K ? u % (D / 16) : u % 4;
        cp_async16(words + (IS_K ? k_word<D>(row, 4 * unit) : v_word(row, 4 * unit)), src + u);
    }
    const uint4* msrc = reinterpret_cast<const uint4*>(meta + slot * (BS * D / 32));
    uint4* mdst = reinterpret_cast<uint4*>(dst + BS * D);  // after the values (64 x D / 2 16-bit)
    for (int u = lane; u < BS * D / 128; u += 32) cp_async16(mdst + u, msrc + u);
}

// Operand n of a program (K when n is even, V when odd) into its slot, as one commit group (an empty one where its
// block is past the program's last, so that every step waits for the same count).
template <int D>
__device__ __forceinline__ void stage_operand(uint8_t* slot, int n, bool live, int entry, const uint16_t* k_dense,
                                              const uint32_t* k_vals, const uint32_t* k_meta, const uint16_t* v_dense,
                                              const uint32_t* v_vals, const uint32_t* v_meta, int lane) {
    if (live) {
        if (n & 1)
            stage_block<D, false>(slot, entry, v_dense, v_vals, v_meta, lane);
        else
            stage_block<D, true>(slot, entry, k_dense, k_vals, k_meta, lane);
    }
    cp_async_commit();
}

// entries[i]: the index entry of operand op + i; one step on, the next one read from global memory
template <int N>
__device__ __forceinline__ void shift_in(int (&entries)[N], int next) {
    #pragma unroll
    for (int i = 0; i + 1 < N; i++) entries[i] = entries[i + 1];
    entries[N - 1] = next;
}

// Pools: dense [slots, 64, D] elements; K sparse values [slots, 64, D / 2] and metadata [slots, 64, D / 16]
// int16, V^T sparse values [slots, D, 32] and metadata [slots, D, 4] (hs_kernels.format), read as 32-bit words.
// Index maps [B, h_kv, max_blocks]; or, where pages is not null, a pool's maps [num_pages, h_kv] whose row for block
// j of sequence b is pages[b, j] (read in place: no gather of the maps per layer and step).
// counters: null (fixed splits), or int32 [B h_kv, 2] all zero (balanced splits; left zero: calls that share it must
// run in stream order).
template <int D, bool BF16, int SLOTS>
__global__ void __launch_bounds__(32, 1) decode_sp_kernel(
    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k_dense, const uint32_t* __restrict__ k_vals,
    const uint32_t* __restrict__ k_meta, const uint16_t* __restrict__ v_dense, const uint32_t* __restrict__ v_vals,
    const uint32_t* __restrict__ v_meta, const int32_t* __restrict__ k_index, const int32_t* __restrict__ v_index,
    const int32_t* __restrict__ pages, const int32_t* __restrict__ seq_lens, int* __restrict__ counters,
    float* __restrict__ o_part, float* __restrict__ lse_part, float scale_log2, int max_blocks, int splits, int h_kv,
    int group) {
    constexpr int KC = D / 32;  // k32 chunks of head_dim
    constexpr int MI = D / 16;  // 16-row tiles of V^T
    const int split = blockIdx.x, kv = blockIdx.y, b = blockIdx.z;
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    const int seq_len = seq_lens[b];
    const int n_blocks = (seq_len + BS - 1) / BS;
    const int h_q = h_kv * group;
    // this program's blocks in order (take()): a fixed range, then (balanced) those it takes from the row's counter
    // (a row too short to balance keeps fixed ranges: BALANCE_MIN)
    int* const taken = counters && n_blocks >= 2 * splits * BALANCE_MIN ? counters + 2 * (b * h_kv + kv) : nullptr;
    const int per = taken ? n_blocks / 2 / splits : (n_blocks + splits - 1) / splits;
    int fixed_next = split * per;
    const int fixed_end = min(fixed_next + per, n_blocks), shared_base = splits * per;  // the counter's first block
    int ahead = 0, done_ticket = -1;  // lane 0's: the counter's value taken a block ahead; its place among the done
    bool exhausted = !taken;
    if (taken && lane == 0) ahead = atomicAdd(taken, 1);
    auto take = [&]() -> int {  // the next block, -1 when there is none
        if (fixed_next < fixed_end) return fixed_next++;
        if (exhausted) return -1;
        const int j = shared_base + __shfl_sync(0xffffffffu, ahead, 0);
        if (j < n_blocks) {
            if (lane == 0) ahead = atomicAdd(taken, 1);
            return j;
        }
        exhausted = true;
        if (lane == 0) done_ticket = atomicAdd(taken + 1, 1);
        return -1;
    };

    uint32_t qb[KC][4];  // Q^T as mma.sp's B operand: k = 32c + 8i + 2t (+1), n = head g of the group
    uint4 qd[KC];        // Q^T as the dense B operand: elements 32s + 8t .. + 7 (the dense K chunks' order)
    const uint32_t* q32 = reinterpret_cast<const uint32_t*>(q + ((size_t)b * h_q + kv * group + g) * D);
    #pragma unroll
    for (int c = 0; c < KC; c++) {
        #pragma unroll
        for (int i = 0; i < 4; i++) qb[c][i] = g < group ? q32[(32 * c + 8 * i + 2 * t) / 2] : 0u;
        qd[c] = g < group ? reinterpret_cast<const uint4*>(q32)[(32 * c + 8 * t) / 8] : make_uint4(0, 0, 0, 0);
    }

    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // heads 2t, 2t + 1 (l: this lane's tokens)
    float o[MI][4];
    #pragma unroll
    for (int mi = 0; mi < MI; mi++)
        #pragma unroll
        for (int r = 0; r < 4; r++) o[mi][r] = 0.f;
    const size_t index_row = pages ? (size_t)b * max_blocks : ((size_t)b * h_kv + kv) * max_blocks;

    extern __shared__ uint4 smem[];
    constexpr int OPERAND_BYTES = BS * D * 2;
    constexpr int AHEAD = SLOTS - 1;  // operands in flight while one is computed
    uint8_t* slots = reinterpret_cast<uint8_t*>(smem);
    constexpr int LOOK = (AHEAD + 3) / 2;  // blocks past the current one whose entries are read
    int ids[LOOK + 1];  // the current block and the LOOK after it (-1: none)
    #pragma unroll
    for (int k = 0; k <= LOOK; k++) ids[k] = take();
    auto entry = [&](int k, bool is_v) {  // an operand's entry, of the block k past the current one
        if (ids[k] < 0) return 0;
        const size_t j = index_row + ids[k];
        return (is_v ? v_index : k_index)[pages ? (size_t)pages[j] * h_kv + kv : j];
    };
    auto slot = [&](int n) { return slots + (n % SLOTS) * OPERAND_BYTES; };
    int entries[AHEAD + 2];  // operands op .. op + AHEAD + 1: read two steps before their copy is issued
    #pragma unroll
    for (int i = 0; i < AHEAD + 2; i++) entries[i] = entry(i >> 1, i & 1);
    #pragma unroll
    for (int i = 0; i < AHEAD; i++)
        stage_operand<D>(slot(i), i, ids[i >> 1] >= 0, entries[i], k_dense, k_vals, k_meta, v_dense, v_vals, v_meta,
                         lane);
    // each step copies operand op + AHEAD into the slot that operand op - 1 left, then waits for operand op
    for (int op = 0; ids[0] >= 0; op += 2) {
        const int j = ids[0];
        const int valid = min(BS, seq_len - j * BS);
        const int ke = entries[0];
        stage_operand<D>(slot(op + AHEAD), op + AHEAD, ids[AHEAD >> 1] >= 0, entries[AHEAD], k_dense, k_vals, k_meta,
                         v_dense, v_vals, v_meta, lane);
        shift_in(entries, entry((AHEAD + 2) >> 1, AHEAD & 1));
        cp_async_wait<AHEAD>();
        __syncwarp();
        const uint32_t* kw = reinterpret_cast<const uint32_t*>(slot(op));
        float s[4][4];  // S^T tile mt: [0], [1] token 16mt + g, heads 2t, 2t + 1; [2], [3] token + 8
        #pragma unroll
        for (int mt = 0; mt < 4; mt++)
            #pragma unroll
            for (int r = 0; r < 4; r++) s[mt][r] = 0.f;
        if (ke < 0) {
            const uint32_t* km = kw + BS * D / 4;
            #pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                const int r0 = 16 * mt + g, r1 = r0 + 8;
                #pragma unroll
                for (int c = 0; c < KC; c++) {
                    const uint32_t a[4] = {kw[k_word<D>(r0, 8 * c + t)], kw[k_word<D>(r1, 8 * c + t)],
                                           kw[k_word<D>(r0, 8 * c + 4 + t)], kw[k_word<D>(r1, 8 * c + 4 + t)]};
                    mma_sp<BF16>(s[mt], a, qb[c], meta_reg(km[r0 * KC + c], km[r1 * KC + c], t));
                }
            }
        } else {
            // the 16-byte read of span c gives two k16 chunks: words 0, 1 and words 2, 3 (k = 2t, 2t + 8 of each)
            const uint4* kd = reinterpret_cast<const uint4*>(kw);
            #pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                const int r0 = 16 * mt + g, r1 = r0 + 8;
                #pragma unroll
                for (int c = 0; c < KC; c++) {
                    const uint4 x0 = kd[dense_unit<D>(r0, 4 * c + t)], x1 = kd[dense_unit<D>(r1, 4 * c + t)];
                    #pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint32_t a[4] = {word(x0, 2 * h), word(x1, 2 * h), word(x0, 2 * h + 1), word(x1, 2 * h + 1)};
                        mma<BF16>(s[mt], a, word(qd[c], 2 * h), word(qd[c], 2 * h + 1));
                    }
                }
            }
        }
        float mx[2] = {-INFINITY, -INFINITY};
        #pragma unroll
        for (int mt = 0; mt < 4; mt++)
            #pragma unroll
            for (int r = 0; r < 4; r++) {
                const int token = 16 * mt + g + (r >= 2 ? 8 : 0);
                s[mt][r] = token < valid ? s[mt][r] * scale_log2 : -INFINITY;
                mx[r & 1] = fmaxf(mx[r & 1], s[mt][r]);
            }
        float alpha[2];
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            const float m_new = fmaxf(m[h], warp_max(mx[h]));
            alpha[h] = exp2f(m[h] - m_new);
            m[h] = m_new;
            l[h] *= alpha[h];
        }
        uint32_t pt[8];  // P^T in the B layout, per 8-token group: head g, tokens 8 grp + 2t, + 1
        #pragma unroll
        for (int mt = 0; mt < 4; mt++) {
            float p[4];
            #pragma unroll
            for (int r = 0; r < 4; r++) {
                p[r] = exp2f(s[mt][r] - m[r & 1]);
                l[r & 1] += p[r];
            }
            pt[2 * mt] = transpose8x8(pack<BF16>(p[0], p[1]));
            pt[2 * mt + 1] = transpose8x8(pack<BF16>(p[2], p[3]));
        }
        #pragma unroll
        for (int mi = 0; mi < MI; mi++) {
            o[mi][0] *= alpha[0];
            o[mi][1] *= alpha[1];
            o[mi][2] *= alpha[0];
            o[mi][3] *= alpha[1];
        }
        __syncwarp();  // every lane is done with K's slot: the V step copies into it
        const int ve = entries[0];
        stage_operand<D>(slot(op + 1 + AHEAD), op + 1 + AHEAD, ids[(AHEAD + 1) >> 1] >= 0, entries[AHEAD], k_dense,
                         k_vals, k_meta, v_dense, v_vals, v_meta, lane);
        shift_in(entries, entry(LOOK, (AHEAD + 1) & 1));
        cp_async_wait<AHEAD>();
        __syncwarp();
        const uint32_t* vw = reinterpret_cast<const uint32_t*>(slot(op + 1));
        if (ve < 0) {
            const uint32_t* vm = vw + BS * D / 4;
            #pragma unroll
            for (int mi = 0; mi < MI; mi++) {
                const int r0 = o_dim(mi, g), r1 = r0 + 2;
                #pragma unroll
                for (int kc = 0; kc < 2; kc++) {
                    const uint32_t va[4] = {vw[v_word(r0, 8 * kc + t)], vw[v_word(r1, 8 * kc + t)],
                                            vw[v_word(r0, 8 * kc + 4 + t)], vw[v_word(r1, 8 * kc + 4 + t)]};
                    const uint32_t bb[4] = {pt[4 * kc], pt[4 * kc + 1], pt[4 * kc + 2], pt[4 * kc + 3]};
                    mma_sp<BF16>(o[mi], va, bb, meta_reg(vm[r0 * 2 + kc], vm[r1 * 2 + kc], t));
                }
            }
        } else {
            // token-major V, 16 bytes per lane and token, transposed per 8 x 8 piece (o_dim); rows past the
            // sequence end may be stale: zeros
            const uint4* vd = reinterpret_cast<const uint4*>(vw);
            #pragma unroll
            for (int kt = 0; kt < 4; kt++)
                #pragma unroll
                for (int c = 0; c < KC; c++) {
                    uint4 x[2];  // tokens 16kt + g and 16kt + 8 + g
                    #pragma unroll
                    for (int half = 0; half < 2; half++) {
                        const int tok = 16 * kt + 8 * half + g;
                        x[half] = tok < valid ? vd[dense_unit<D>(tok, 4 * c + t)] : make_uint4(0, 0, 0, 0);
                    }
                    #pragma unroll
                    for (int p = 0; p < 2; p++) {
                        const uint32_t a[4] = {transpose8x8(word(x[0], 2 * p)), transpose8x8(word(x[0], 2 * p + 1)),
                                               transpose8x8(word(x[1], 2 * p)), transpose8x8(word(x[1], 2 * p + 1))};
                        mma<BF16>(o[2 * c + p], a, pt[2 * kt], pt[2 * kt + 1]);
                    }
                }
        }
        __syncwarp();  // every lane is done with V's slot: the next K step copies into it
        #pragma unroll
        for (int k = 0; k < LOOK; k++) ids[k] = ids[k + 1];
        ids[LOOK] = take();
    }
    if (lane == 0 && done_ticket == splits - 1) {  // the row's last program to finish taking: counters back to zero
        atomicExch(taken, 0);
        atomicExch(taken + 1, 0);
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // the combine, launched as a programmatic dependent, may be scheduled now; it waits for this grid to finish
    asm volatile("griddepcontrol.launch_dependents;");
#endif

    #pragma unroll
    for (int h = 0; h < 2; h++) {
        const float total = warp_sum(l[h]);
        const int head = 2 * t + h;
        if (head >= group) continue;
        const size_t part = ((size_t)b * h_q + kv * group + head) * splits + split;
        const float inv = total > 0.f ? 1.f / total : 0.f;
        #pragma unroll
        for (int mi = 0; mi < MI; mi++) {
            o_part[part * D + o_dim(mi, g)] = o[mi][h] * inv;
            o_part[part * D + o_dim(mi, g) + 2] = o[mi][2 + h] * inv;
        }
        if (g == 0) lse_part[part] = total > 0.f ? (m[h] + log2f(total)) * 0.6931471805599453f : -INFINITY;
    }
}

template <int D, int SLOTS>
constexpr int smem_bytes() { return SLOTS * BS * D * 2; }  // each slot the size of a dense operand

template <int D, bool BF16, int SLOTS>
cudaError_t configure() {
    static const cudaError_t rc = cudaFuncSetAttribute(decode_sp_kernel<D, BF16, SLOTS>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<D, SLOTS>());
    return rc;
}

template <int D, bool BF16, int SLOTS>
int resident_per_sm() {
    int n = 0;
    if (configure<D, BF16, SLOTS>() != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_sp_kernel<D, BF16, SLOTS>, 32, smem_bytes<D, SLOTS>()) != cudaSuccess)
        return -1;
    return n;
}

template <int D, bool BF16, int SLOTS>
cudaError_t launch(const void* q, const void* k_dense, const void* k_vals, const void* k_meta, const void* v_dense,
                   const void* v_vals, const void* v_meta, const int32_t* k_index, const int32_t* v_index,
                   const int32_t* pages, const int32_t* seq_lens, int* counters, float* o_part, float* lse_part,
                   float scale_log2, int batch, int max_blocks, int splits, int h_kv, int group, cudaStream_t stream) {
    if (const cudaError_t rc = configure<D, BF16, SLOTS>(); rc != cudaSuccess) return rc;
    decode_sp_kernel<D, BF16, SLOTS><<<dim3(splits, h_kv, batch), 32, smem_bytes<D, SLOTS>(), stream>>>(
        static_cast<const uint16_t*>(q), static_cast<const uint16_t*>(k_dense), static_cast<const uint32_t*>(k_vals),
        static_cast<const uint32_t*>(k_meta), static_cast<const uint16_t*>(v_dense),
        static_cast<const uint32_t*>(v_vals), static_cast<const uint32_t*>(v_meta), k_index, v_index, pages, seq_lens,
        counters, o_part, lse_part, scale_log2, max_blocks, splits, h_kv, group);
    return cudaGetLastError();
}

}  // namespace

// The supported (head_dim, dtype, slots), each as X(D, BF16, SLOTS).
#define HS_VARIANTS(X) X(64, true, 3) X(64, false, 3) X(128, true, 3) X(128, false, 3) \
                       X(64, true, 4) X(64, false, 4) X(128, true, 4) X(128, false, 4)

// 0 on success, else a cudaError_t; 1000 for an unsupported (head_dim, dtype, slots).
extern "C" int hs_decode_sp(int head_dim, int bf16, int slots, const void* q, const void* k_dense, const void* k_vals,
                            const void* k_meta, const void* v_dense, const void* v_vals, const void* v_meta,
                            const int32_t* k_index, const int32_t* v_index, const int32_t* pages,
                            const int32_t* seq_lens, int* counters, float* o_part, float* lse_part, float scale_log2,
                            int batch, int max_blocks, int splits, int h_kv, int group, void* stream) {
    auto s = static_cast<cudaStream_t>(stream);
#define HS_LAUNCH(D, B, S)                                                                                            \
    if (head_dim == D && (bf16 != 0) == B && slots == S)                                                             \
        return launch<D, B, S>(q, k_dense, k_vals, k_meta, v_dense, v_vals, v_meta, k_index, v_index, pages, seq_lens, \
                               counters, o_part, lse_part, scale_log2, batch, max_blocks, splits, h_kv, group, s);
    HS_VARIANTS(HS_LAUNCH)
#undef HS_LAUNCH
    return 1000;
}

// Programs of the (head_dim, dtype, slots) kernel resident on one SM at once (registers and shared memory),
// for the split choice; -1 on a CUDA error or an unsupported (head_dim, dtype, slots).
extern "C" int hs_decode_sp_resident(int head_dim, int bf16, int slots) {
#define HS_RESIDENT(D, B, S) \
    if (head_dim == D && (bf16 != 0) == B && slots == S) return resident_per_sm<D, B, S>();
    HS_VARIANTS(HS_RESIDENT)
#undef HS_RESIDENT
    return -1;
}
