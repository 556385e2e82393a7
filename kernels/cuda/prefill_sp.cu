// Prefill on Hopper's sparse tensor cores (wgmma.sp, sm_90a) in the paper's Trans-Both form, warp-specialized: query
// tokens attend to a sequence of 64-token blocks that are all 2:4 for K and V (hs_kernels.format pools, through the
// index maps), without a mask or causally (the queries sit at given positions of the sequence, each sees the keys at
// or before it). Driven by hs_kernels.cuda_prefill (the static offsets, the underflow fallback).
//   S^T [64 keys, 64 rows] = K . Q^T       A = the K block's values [64, D / 2] (2:4 along d), D / 32 x wgmma.sp m64n64k32
//   O^T [D, 64 rows]     += V^T . P^T      A = the V block's values [D, 32] (2:4 along keys), D / 64 x 2 x m64n64k32
// Dense keys (K_DENSE) take S = Q . K^T instead, A = Q's fragments held in registers, B = the K block, 8 x wgmma
// m64n64k16: a block then reads D x 128 bytes less shared memory per consumer (Q^T is not read as a B operand), and P is
// stored as it is (stmatrix) into the same [rows, keys] layout that P^T's transposed stores give.
// A CTA is HS_CONSUMERS (3) consumer warpgroups, each with its own 64 rows (64 / G tokens x the G = HS_G query heads,
// rows past the last whole token's unused where G does not divide 64
// of one KV head; d D = HS_D, 64 or 128, bf16, or fp16 with HS_FP16), and one producer warpgroup that stages each
// block (K and V values, 128B-swizzled / core matrices, and their metadata) by TMA into a ring of STAGES stages shared by the consumers,
// handed over by mbarriers (full: one producer thread's expected bytes, brought by the tensor memory accelerator;
// empty: every consumer thread, once its warpgroup's wgmmas that read the stage are done). The consumers
// never wait for each other: three independent chains (S, exponentials, PV) per SM overlap better than two with
// FA3's intra-warpgroup overlap (docs/kernels.md). Without a mask, 2:4 keys may be split among gridDim.z CTAs per
// row tile (each a consecutive part of the blocks into its own out / lse part, merged by the caller): a short chunk
// then fills the SMs.
// The softmax offset of each row is static (|q| x its KV head's longest key x the scale, log2 units: at least the
// row's largest score, by Cauchy-Schwarz; |q| is summed here as Q is staged), lowered by the caller's headroom: on real
// activations that bound lies up to ~170 above a row's scores, where the exponentials would flush, while no
// exponential exceeds 2^headroom, which fp32 sums and bf16 P hold (hs_kernels.cuda_prefill): nothing is reduced
// across keys or rescaled before the end, so the columns of S^T (the rows) need no exchange between warps. P^T goes
// through the consumer's own shared buffer (stmatrix .trans) as the second GEMM's B operand; a block's PV is left
// running while the next block's S is issued (the wait for S covers it, then the stage is released). The 2:4
// metadata registers are written only where no wgmma is in flight (else ptxas serializes the wgmmas, C7513).
// Layouts as measured by kernels/probes/wgmma_sp_layout.cu and wgmma_tile_layout.cu (docs/kernels.md).
// fp16 (HS_FP16): S is an fp16 GEMM, but P stays bf16, since fp16's range (2^-24 .. 2^16) cannot hold the static
// offset's exponentials; so V must reach the PV GEMM in bf16: the producer warpgroup's other three warps round each
// staged V block in place and hand the stage to the consumers by a ready mbarrier of its own (loading V from global
// memory in those warps instead, to save the 16 KB of shared-memory traffic per block, ran 1.9x slower at d 128).
// kernels/probes/trans_both_sp.py checks and times it against cuDNN. Ablations, to see which part sets the time
// (results then wrong): -DHS_NO_COPY (the producer copies nothing), -DHS_NO_S, -DHS_NO_EXP (an FMA in place of each
// exponential), -DHS_NO_PV (the wgmmas of each part left out).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace {

#ifndef HS_CONSUMERS
#define HS_CONSUMERS 3
#endif
#ifndef HS_G
#define HS_G 4
#endif
#ifndef HS_D
#define HS_D 128
#endif
constexpr int BS = 64, D = HS_D, ROWS = 64, G = HS_G;
#ifdef HS_FP16
constexpr bool FP16 = true;
using Elem = __half;
#else
constexpr bool FP16 = false;
using Elem = __nv_bfloat16;
#endif
constexpr int CONVERTERS = 96;  // the producer warpgroup's warps 1-3 (fp16)
static_assert(D == 64 || D == 128, "head_dim 64 or 128");
// a 2:4 K block's row (D / 2 values) fills a 128-byte swizzle atom at d 128, a 64-byte one at d 64 (descriptor modes
// 1 and 2; 8 rows an atom); Q^T, P^T and dense keys use 128-byte atoms of 64 elements
constexpr int KC = D / 32, MT = D / 64, K_ROW = D, K_SWIZZLE = D == 128 ? 1 : 2;
static_assert(G >= 1 && G <= ROWS, "the query heads of a KV head fit a consumer's 64 rows");
// rows in use per consumer (whole tokens); even G: rows 2 i and 2 i + 1 are one token's
constexpr int ROWS_USED = ROWS / G * G;
constexpr int CONSUMERS = HS_CONSUMERS, TOKENS = CONSUMERS * (ROWS / G), THREADS = (CONSUMERS + 1) * 128, STAGES = 4;
// registers per thread: the producer warpgroup hands most of its share to the consumers (setmaxnreg, in steps of 8,
// at most 240), as FA3 does; ptxas allocates the consumer's code to that count. The pool is what the CTA got at
// launch (LAUNCH_REGS per thread): asking for more blocks setmaxnreg.inc for ever (at 4 consumers, 640 threads hold
// 96 each, so the consumers can have 112, not 120). 2 consumers: 40 / 232; 3: 24 / 160.
constexpr int PRODUCER_REGS = CONSUMERS == 2 ? 40 : 24;
constexpr int LAUNCH_REGS = 65536 / THREADS / 8 * 8;
constexpr int CONSUMER_REGS_FIT = (LAUNCH_REGS * THREADS - PRODUCER_REGS * 128) / (CONSUMERS * 128) / 8 * 8;
constexpr int CONSUMER_REGS = CONSUMER_REGS_FIT > 240 ? 240 : CONSUMER_REGS_FIT;
static_assert(CONSUMERS != 2 || CONSUMER_REGS == 232, "the measured split at 2 consumers");
static_assert(CONSUMERS != 3 || CONSUMER_REGS == 160, "the measured split at 3 consumers");
// shared memory (bytes): 128B-swizzled operands 1024-aligned first
constexpr int Q_BYTES = ROWS * D * 2;  // per consumer, Q^T as B: [64 rows, D], D / 64 atoms of 64 elements along d
constexpr int P_BYTES = ROWS * BS * 2;  // per consumer, P^T as B: [64 rows, 64 keys], one atom
constexpr int Q_OFF = 0, P_OFF = Q_OFF + CONSUMERS * Q_BYTES, STAGE_OFF = P_OFF + CONSUMERS * P_BYTES;
constexpr int SPARSE_K_BYTES = BS * D, VV_BYTES = D * BS, VM_BYTES = D * BS / 8;  // a pool slot's values, metadata
// a stage: K (2:4 values [64, D / 2] and their metadata, or K_DENSE: [64, D] in D / 64 atoms), then V^T's values and
// metadata; rounded up to 1024 bytes (the swizzle atoms' alignment): at d 128 18 KB or 25 KB, at d 64 9 KB or 13 KB
template <bool K_DENSE>
struct Layout {
    static constexpr int KV_BYTES = K_DENSE ? 2 * BS * D : SPARSE_K_BYTES, KM_BYTES = K_DENSE ? 0 : BS * D / 8;
    static constexpr int STAGE_BYTES = (KV_BYTES + VV_BYTES + KM_BYTES + VM_BYTES + 1023) / 1024 * 1024;
    static constexpr int RED_OFF = STAGE_OFF + STAGES * STAGE_BYTES;  // per consumer [4 warps][64 rows] float
    // full[STAGES], then empty[STAGES], then (fp16) ready[STAGES]
    static constexpr int BAR_OFF = RED_OFF + CONSUMERS * 4 * ROWS * 4;
    static constexpr int SMEM = BAR_OFF + (FP16 ? 3 : 2) * STAGES * 8;
};

__device__ __forceinline__ int sw128(int row, int chunk) { return row * 128 + ((chunk ^ (row % 8)) * 16); }

__device__ __forceinline__ uint64_t desc(uint32_t addr, int lbo, int sbo, int swizzle) {
    return ((uint64_t)(addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32) |
           (uint64_t(swizzle) << 62);
}

__device__ __forceinline__ uint32_t meta_reg(uint32_t lo, uint32_t hi, int t) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(lo), "r"(hi), "r"((t & 1) ? 0x7632 : 0x5410));
    return r;
}

// an m64n64 wgmma's 32 accumulator registers: the operand list, and the outputs (MODE: HS_ACC adds to them, HS_SET
// only writes them)
#define HS_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
               "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define HS_OUT32(MODE)                                                                                                \
    MODE(d[0]), MODE(d[1]), MODE(d[2]), MODE(d[3]), MODE(d[4]), MODE(d[5]), MODE(d[6]), MODE(d[7]), MODE(d[8]),       \
        MODE(d[9]), MODE(d[10]), MODE(d[11]), MODE(d[12]), MODE(d[13]), MODE(d[14]), MODE(d[15]), MODE(d[16]),        \
        MODE(d[17]), MODE(d[18]), MODE(d[19]), MODE(d[20]), MODE(d[21]), MODE(d[22]), MODE(d[23]), MODE(d[24]),       \
        MODE(d[25]), MODE(d[26]), MODE(d[27]), MODE(d[28]), MODE(d[29]), MODE(d[30]), MODE(d[31])
#define HS_ACC(x) "+f"(x)
#define HS_SET(x) "=f"(x)

// D (+)= A . B with A 2:4 (metadata e), A and B fp16 (F16) or bf16; ACC false: D = A . B, its registers only written
// (scale-d 0), so that no instruction defines them while earlier wgmmas run
#define HS_WGMMA_SP(TYPES, SCALE_D, MODE)                                                                             \
    asm volatile("wgmma.mma_async.sp.sync.aligned.m64n64k32.f32." TYPES " " HS_D32 ", %32, %33, %34, 0, " SCALE_D       \
                 ", 1, 1, 0, 0;" : HS_OUT32(MODE) : "l"(a), "l"(b), "r"(e))
template <bool F16, bool ACC = true>
__device__ __forceinline__ void wgmma_sp(float (&d)[32], uint64_t a, uint64_t b, uint32_t e) {
    if constexpr (F16 && ACC) HS_WGMMA_SP("f16.f16", "1", HS_ACC);
    else if constexpr (F16) HS_WGMMA_SP("f16.f16", "0", HS_SET);
    else if constexpr (ACC) HS_WGMMA_SP("bf16.bf16", "1", HS_ACC);
    else HS_WGMMA_SP("bf16.bf16", "0", HS_SET);
}

// D (+)= A . B, dense, m64n64k16, A from registers (this warp's 16 rows x 16 k as ldmatrix gives them); F16 and ACC as
// wgmma_sp's
#define HS_WGMMA_RA(TYPES, SCALE_D, MODE)                                                                             \
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPES " " HS_D32 ", {%32, %33, %34, %35}, %36, " SCALE_D \
                 ", 1, 1, 0;" : HS_OUT32(MODE) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b))
template <bool F16, bool ACC = true>
__device__ __forceinline__ void wgmma_dense_ra(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
    if constexpr (F16 && ACC) HS_WGMMA_RA("f16.f16", "1", HS_ACC);
    else if constexpr (F16) HS_WGMMA_RA("f16.f16", "0", HS_SET);
    else if constexpr (ACC) HS_WGMMA_RA("bf16.bf16", "1", HS_ACC);
    else HS_WGMMA_RA("bf16.bf16", "0", HS_SET);
}

// four 8 x 8 bf16 pieces from the rows whose addresses lanes 8 i .. 8 i + 7 give, piece i into r[i]
__device__ __forceinline__ void ldmatrix(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// 2^x flushed to 0 below 2^-126: one MUFU.EX2 (exp2f adds a range fix-up of four instructions per element)
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// four 8 x 8 bf16 pieces, each stored transposed at the rows whose addresses lanes 8 i .. 8 i + 7 give
__device__ __forceinline__ void stmatrix_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3) : "memory");
}
// the same, not transposed
__device__ __forceinline__ void stmatrix(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3) : "memory");
}

__device__ __forceinline__ void async_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

__device__ __forceinline__ void bar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bar_wait(uint32_t bar, int parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(bar), "r"(parity) : "memory");
}
// the 128 threads of consumer warpgroup wg (named barriers 1, 2; 0 is __syncthreads')
__device__ __forceinline__ void group_sync(int wg) { asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory"); }

__device__ __forceinline__ void bar_expect(uint32_t bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void tma_3d(uint32_t dst, const CUtensorMap* map, int x, int y, int z, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
        ::"r"(dst), "l"(map), "r"(x), "r"(y), "r"(z), "r"(bar) : "memory");
}

// block j of KV head hk (entries: sparse, ~slot) of K and V into the stage at base, by one thread, completing on the
// mbarrier bar: K values by a 3-D map ([slots, 64, D / 2], 128B or 64B swizzle: the layout its descriptor reads;
// K_DENSE: the dense keys [tokens, h_kv, D], D / 64 [64, 64] boxes), V^T values by a 5-D map whose box
// order is the core-matrix layout (8 elements, 8 rows, 4 16-byte units, D / 8 row groups, slot), each metadata block by a
// 1-D bulk copy
template <bool K_DENSE>
__device__ __forceinline__ void stage_block(uint32_t base, uint32_t bar, int j, int hk, int k_entry, int v_entry,
                                            const CUtensorMap* k_map, const CUtensorMap* v_map,
                                            const uint32_t* k_meta, const uint32_t* v_meta) {
    using L = Layout<K_DENSE>;
    constexpr int bytes = L::KV_BYTES + VV_BYTES + L::KM_BYTES + VM_BYTES;
    bar_expect(bar, bytes);
#ifndef HS_NO_COPY
    const int ks = ~k_entry, vs = ~v_entry;
    if constexpr (K_DENSE) {
        #pragma unroll
        for (int a = 0; a < MT; a++) tma_3d(base + a * BS * 128, k_map, 64 * a, hk, BS * j, bar);
    } else {
        tma_3d(base, k_map, 0, 0, ks, bar);
    }
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], "
        "[%7];" ::"r"(base + L::KV_BYTES), "l"(v_map), "r"(0), "r"(0), "r"(0), "r"(0), "r"(vs), "r"(bar) : "memory");
    if constexpr (!K_DENSE)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(base + L::KV_BYTES + VV_BYTES), "l"(k_meta + (size_t)ks * BS * D / 32), "r"(L::KM_BYTES),
                       "r"(bar) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(base + L::KV_BYTES + VV_BYTES + L::KM_BYTES), "l"(v_meta + (size_t)vs * D * BS / 32),
                   "r"(VM_BYTES), "r"(bar) : "memory");
#else
    // nothing copied: the expected bytes are declared done by hand
    asm volatile("mbarrier.complete_tx.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}

// two Elem values as floats; a float as Elem
#ifdef HS_FP16
__device__ __forceinline__ float2 pair_to_float2(uint32_t x) { return __half22float2(*reinterpret_cast<const __half2*>(&x)); }
__device__ __forceinline__ Elem to_elem(float x) { return __float2half_rn(x); }
#else
__device__ __forceinline__ float2 pair_to_float2(uint32_t x) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
}
__device__ __forceinline__ Elem to_elem(float x) { return __float2bfloat16(x); }
#endif

// the sum of squares of 8 Elem values
__device__ __forceinline__ float squares8(uint4 x) {
    const uint32_t pairs[4] = {x.x, x.y, x.z, x.w};
    float sum = 0.f;
    #pragma unroll
    for (int e = 0; e < 4; e++) {
        const float2 f = pair_to_float2(pairs[e]);
        sum += f.x * f.x + f.y * f.y;
    }
    return sum;
}

// 8 fp16 values rounded to bf16 (both 16 bits: in place)
__device__ __forceinline__ uint4 bf16_from_f16(uint4 x) {
    uint32_t w[4] = {x.x, x.y, x.z, x.w};
    #pragma unroll
    for (int e = 0; e < 4; e++) {
        __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(*reinterpret_cast<const __half2*>(&w[e])));
        w[e] = *reinterpret_cast<const uint32_t*>(&b);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// The longest key of each KV head among the blocks of its index map (the norm of a 2:4 block's value row is its
// pruned key's; K_DENSE: among the dense keys [64 nb, h_kv, 128]), into key_norm[h] by atomicMax on the float's bits
// (non-negative floats order as their bits; zeroed before); *status = 1 where an entry of a map in use is not a 2:4
// slot inside its pool. One thread per key row.
template <bool K_DENSE>
__global__ void __launch_bounds__(BS) key_norms(const uint16_t* __restrict__ keys, const int32_t* __restrict__ k_index,
                                               const int32_t* __restrict__ v_index, int nb, int k_slots, int v_slots,
                                               unsigned* __restrict__ key_norm, int* __restrict__ status) {
    const int h = blockIdx.y, entry = h * nb + blockIdx.x, ks = K_DENSE ? 0 : ~k_index[entry], vs = ~v_index[entry];
    if (ks < 0 || ks >= k_slots || vs < 0 || vs >= v_slots) {
        if (threadIdx.x == 0) atomicOr(status, 1);
        return;
    }
    const uint4* row = reinterpret_cast<const uint4*>(
        K_DENSE ? keys + ((size_t)(BS * blockIdx.x + threadIdx.x) * gridDim.y + h) * D
                : keys + ((size_t)ks * BS + threadIdx.x) * (D / 2));
    float squares = 0.f;
    #pragma unroll
    for (int i = 0; i < (K_DENSE ? D / 8 : D / 16); i++) squares += squares8(row[i]);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) squares = fmaxf(squares, __shfl_xor_sync(0xffffffffu, squares, o));
    if (threadIdx.x % 32 == 0) atomicMax(key_norm + h, __float_as_uint(sqrtf(squares)));
}

// q [t, h_q, D] Elem; k_norm [h_kv] float32 (key_norms: a row's softmax offset is |q| k_norm scale_log2 - headroom,
// log2 units); status: nothing is done where it is set (key_norms found an entry that is not a 2:4 slot); out [t, h_q, D] Elem, lse [t, h_q] float32 (natural log; NaN where the row's sum of
// exponentials fell below min_sum: too few of its scores were kept to trust it); index maps [h_kv, nb], every entry
// sparse; q_pos0 < 0: no mask, else query token i sits at position q_pos0 + i of the prefix and sees the keys at or
// before it. Split z of gridDim.z (2:4 keys without a mask only) attends blocks z nb / splits .. (z + 1) nb / splits
// - 1 into out and lse's z-th [t, h_q] part; a part without keys (or whose exponentials all flushed to zero) gets out 0,
// lse -inf where min_sum is 0
template <bool K_DENSE>
__global__ void __launch_bounds__(THREADS, 1) trans_both_sp(
    const Elem* __restrict__ q, const uint16_t* __restrict__ k_vals, const uint32_t* __restrict__ k_meta,
    const uint16_t* __restrict__ v_vals, const uint32_t* __restrict__ v_meta, const int32_t* __restrict__ k_index,
    const int32_t* __restrict__ v_index, const float* __restrict__ k_norm, const int* __restrict__ status,
    Elem* __restrict__ out,
    float* __restrict__ lse, int t_len, int nb, float scale_log2, int q_pos0, float min_sum, float headroom,
    const __grid_constant__ CUtensorMap k_map,
    const __grid_constant__ CUtensorMap v_map) {
    using L = Layout<K_DENSE>;
    extern __shared__ __align__(1024) uint8_t smem[];
    if (*status) return;
    const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32;
    const int hk = blockIdx.y, h_q = gridDim.y * G;
    // causal: the tiles with the most blocks first; this CTA reads the blocks up to its last token's
    const bool causal = q_pos0 >= 0;
    const int tile = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    // split z's blocks (2:4 keys only: the dense-key loop ran 3-10 % slower for the split's arithmetic alone)
    const int split = K_DENSE ? 0 : blockIdx.z, first = split * nb / gridDim.z;
    const int nbc = causal ? min(nb, (q_pos0 + min(t_len, (tile + 1) * TOKENS) - 1) / BS + 1)
                           : K_DENSE ? nb : (split + 1) * nb / gridDim.z - first;
    const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    // ready: a stage the consumers may read (fp16: once its V is rounded to bf16)
    const uint32_t full = sbase + L::BAR_OFF, empty = full + STAGES * 8, ready = FP16 ? empty + STAGES * 8 : full;
    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            bar_init(full + 8 * s, 1), bar_init(empty + 8 * s, CONSUMERS * 128);
            if constexpr (FP16) bar_init(ready + 8 * s, CONVERTERS);
        }
    }
    // every thread: Q^T of consumer cw, row r = token tile * TOKENS + cw * 64 / G + r / G, head G hk + r % G, D / 8
    // chunks of 8 d per row in D / 64 atoms; and row r's softmax offset (its chunks are in D / 8 consecutive lanes)
    // into the consumer's red[r]: no score of the row exceeds it (Cauchy-Schwarz)
    constexpr int CH = D / 8;
    const float key_scale = k_norm[hk] * scale_log2;
    for (int u = tid; u < CONSUMERS * ROWS * CH; u += THREADS) {
        const int cw = u / (ROWS * CH), r = u / CH % ROWS, c = u % CH, token = tile * TOKENS + cw * (ROWS / G) + r / G;
        uint4 x = make_uint4(0, 0, 0, 0);
        if (token < t_len && r < ROWS_USED)
            x = *reinterpret_cast<const uint4*>(q + ((size_t)token * h_q + hk * G + r % G) * D + 8 * c);
        *reinterpret_cast<uint4*>(smem + Q_OFF + cw * Q_BYTES + (c / 8) * ROWS * 128 + sw128(r, c % 8)) = x;
        float squares = squares8(x);
        #pragma unroll
        for (int o_ = 1; o_ < CH; o_ <<= 1) squares += __shfl_xor_sync(0xffffffffu, squares, o_);
        if (c == 0) {
            reinterpret_cast<float*>(smem + L::RED_OFF)[cw * 4 * ROWS + r] = sqrtf(squares) * key_scale - headroom;
        }
    }
    async_proxy_fence();  // the Q^T stores, before wgmma reads them
    __syncthreads();
    const int32_t* ki = k_index + (size_t)hk * nb + first;
    const int32_t* vi = v_index + (size_t)hk * nb + first;

    if (wg == CONSUMERS) {  // the producer: one thread, block j into stage j % STAGES once the stage is free
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PRODUCER_REGS));
        if (tid % 128 == 0) {
            asm volatile("prefetch.tensormap [%0];" ::"l"(&k_map) : "memory");
            asm volatile("prefetch.tensormap [%0];" ::"l"(&v_map) : "memory");
            // the entries one block ahead (dense keys have none: k_index is null then)
            int k_next = !K_DENSE && nbc > 0 ? ki[0] : 0, v_next = nbc > 0 ? vi[0] : 0;
            for (int j = 0; j < nbc; j++) {
                const int ke = k_next, ve = v_next;
                if (j + 1 < nbc) k_next = K_DENSE ? 0 : ki[j + 1], v_next = vi[j + 1];
                if (j >= STAGES) bar_wait(empty + 8 * (j % STAGES), (j / STAGES - 1) & 1);
                stage_block<K_DENSE>(sbase + STAGE_OFF + (j % STAGES) * L::STAGE_BYTES, full + 8 * (j % STAGES),
                                     first + j, hk, ke, ve, &k_map, &v_map, k_meta, v_meta);
            }
        } else if (FP16 && tid % 128 >= 128 - CONVERTERS) {  // warps 1-3: each staged V block to bf16, in place
            for (int j = 0; j < nbc; j++) {
                const int stage = j % STAGES;
                bar_wait(full + 8 * stage, (j / STAGES) & 1);
                uint4* vals = reinterpret_cast<uint4*>(smem + STAGE_OFF + stage * L::STAGE_BYTES + L::KV_BYTES);
                for (int i = tid % 128 - (128 - CONVERTERS); i < VV_BYTES / 16; i += CONVERTERS)
                    vals[i] = bf16_from_f16(vals[i]);
                async_proxy_fence();  // the stores, before the consumers' wgmmas read them
                bar_arrive(ready + 8 * stage);
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CONSUMER_REGS));
    const int w = (tid % 128) / 32, g = lane / 4, t = lane % 4;  // warp of the warpgroup; fragment coordinates
    const int token0 = tile * TOKENS + wg * (ROWS / G);
    const int diag = causal ? (q_pos0 + token0) / BS : nbc;  // from this block on, some keys follow some tokens
    const uint32_t q_a = sbase + Q_OFF + wg * Q_BYTES, p_a = sbase + P_OFF + wg * P_BYTES;
    float* red = reinterpret_cast<float*>(smem + L::RED_OFF) + wg * 4 * ROWS;  // [4 warps][64 rows]

    // fragments (m64n64): element 4 j + i is row 16 w + g (+ 8 for i >= 2), column 8 j + 2 t + i % 2
    // 2:4 keys: S^T = K . Q^T (columns: rows), each thread's 16 rows' offsets and sums; dense keys: S = Q . K^T with
    // Q from registers (no shared-memory read of Q per block), the offsets and sums of its two rows
    constexpr int NR = K_DENSE ? 2 : 16;
    float o[MT][32] = {}, m[NR], l[NR];
    #pragma unroll
    for (int c = 0; c < NR; c++) {
        m[c] = red[K_DENSE ? 16 * w + g + 8 * c : 8 * (c / 2) + 2 * t + c % 2];
        l[c] = 0.f;
    }
    // this lane's row address of P's stores (2:4 keys: lanes 8 i .. 8 i + 7 give the rows of piece i: keys 16 w + 8 (i %
    // 2), rows 8 (i / 2) + lane % 8 of each 16-row group, stored transposed; dense keys: rows 16 w + 8 (i % 2) + lane %
    // 8, keys 8 (2 n + i / 2) for the n-th store, its 16-byte unit swizzled by the row)
    const int st_row = K_DENSE ? 16 * w + 8 * ((lane / 8) % 2) + lane % 8 : 8 * (lane / 16) + lane % 8;
    const int st_chunk = K_DENSE ? lane / 16 : 2 * w + (lane / 8) % 2;
    const uint32_t p_store = p_a + st_row * 128 + ((st_chunk ^ (st_row % 8)) * 16);
    uint32_t qa[K_DENSE ? D / 16 : 1][4];  // dense keys: Q's A fragments, d 16 k .. 16 k + 15 in qa[k]
    if constexpr (K_DENSE) {
        #pragma unroll
        for (int k = 0; k < D / 16; k++) {
            const int row = 16 * w + 8 * ((lane / 8) % 2) + lane % 8, chunk = 2 * (k % 4) + lane / 16;
            ldmatrix(qa[k], q_a + (k / 4) * ROWS * 128 + sw128(row, chunk));
        }
    }

    // The 2:4 metadata operands are ordinary registers: one written while any wgmma is in flight makes ptxas
    // serialize the wgmmas (C7513), so they are set only where none is: block j's S metadata (ek) at the end of
    // block j - 1's softmax, once its stage is full.
    uint32_t ek[KC];
    auto k_meta_regs = [&](int j) {  // K_DENSE: only the wait for the stage
        const int stage = j % STAGES;
        const uint32_t* km =
            reinterpret_cast<const uint32_t*>(smem + STAGE_OFF + stage * L::STAGE_BYTES + L::KV_BYTES + VV_BYTES);
        bar_wait(ready + 8 * stage, (j / STAGES) & 1);
        if constexpr (!K_DENSE) {
            #pragma unroll
            for (int k = 0; k < KC; k++) ek[k] = meta_reg(km[(16 * w + g) * KC + k], km[(16 * w + g + 8) * KC + k], t);
        }
    };
    if (nbc > 0) k_meta_regs(0);
    for (int j = 0; j < nbc; j++) {
        const int stage = j % STAGES;
        const uint32_t st = sbase + STAGE_OFF + stage * L::STAGE_BYTES;
        const uint32_t* vm = reinterpret_cast<const uint32_t*>(smem + STAGE_OFF + stage * L::STAGE_BYTES + L::KV_BYTES +
                                                               VV_BYTES + L::KM_BYTES);
        float s[32];
        wgmma_fence();
#ifdef HS_NO_S
        #pragma unroll
        for (int i = 0; i < 32; i++) s[i] = __uint_as_float(ek[i % 4] & 0x3f00ffffu);
#else
        if constexpr (K_DENSE) {
            #pragma unroll
            for (int k = 0; k < D / 16; k++) {  // d 16 k .. 16 k + 15, in atom k / 4 of K
                const uint64_t b = desc(st + (k / 4) * BS * 128 + 32 * (k % 4), 16, 1024, 1);
                if (k == 0)
                    wgmma_dense_ra<FP16, false>(s, qa[k], b);
                else
                    wgmma_dense_ra<FP16>(s, qa[k], b);
            }
        } else {
            #pragma unroll
            for (int k = 0; k < KC; k++) {  // d 32 k .. 32 k + 31: 16 values, 32 bytes into each K row
                const uint64_t a = desc(st + 32 * k, 16, 8 * K_ROW, K_SWIZZLE);
                const uint64_t b = desc(q_a + (k / 2) * ROWS * 128 + 64 * (k % 2), 16, 1024, 1);
                if (k == 0)
                    wgmma_sp<FP16, false>(s, a, b, ek[k]);
                else
                    wgmma_sp<FP16>(s, a, b, ek[k]);
            }
        }
#endif
        wgmma_commit();
        wgmma_wait_all();  // also the previous block's PV: its stage is released, its P^T overwritten next
        if (j > 0) bar_arrive(empty + 8 * ((j - 1) % STAGES));

        // P^T [64 rows, 64 keys] in one 128B-swizzled atom (the second GEMM's B operand): 2:4 keys, the accumulator's
        // 8 x 8 pieces (keys 16 w + 8 h + g, rows 8 j + 2 t, + 1) stored transposed by stmatrix, four per
        // instruction; dense keys, S's pieces (rows 16 w + 8 h + g, keys 8 j + 2 t, + 1) stored as they are
        if (j >= diag) {
            #pragma unroll
            for (int jj = 0; jj < 8; jj++)
                #pragma unroll
                for (int h = 0; h < 2; h++) {
                    if constexpr (K_DENSE) {  // key 64 j + 8 jj + 2 t + e, row 16 w + 8 h + g
                        #pragma unroll
                        for (int e = 0; e < 2; e++)
                            if (BS * j + 8 * jj + 2 * t + e > q_pos0 + token0 + (16 * w + 8 * h + g) / G)
                                s[4 * jj + 2 * h + e] = -INFINITY;
                    } else if constexpr (G % 2 == 0) {  // rows 8 jj + 2 t and + 1: one token (a test per row spills)
                        // where G divides 8 or 16 divides G, (8 jj + 2 t) / G splits into a constant and 2 t / G
                        constexpr bool split = 8 % G == 0 || G % 16 == 0;
                        const int pair_token = split ? 8 * jj / G + (G <= 8 ? 2 * t / G : 0) : (8 * jj + 2 * t) / G;
                        if (BS * j + 16 * w + 8 * h + g > q_pos0 + token0 + pair_token)
                            s[4 * jj + 2 * h] = s[4 * jj + 2 * h + 1] = -INFINITY;
                    } else {  // key 64 j + 16 w + 8 h + g, the token of row 8 jj + 2 t + e
                        #pragma unroll
                        for (int e = 0; e < 2; e++)
                            if (BS * j + 16 * w + 8 * h + g > q_pos0 + token0 + (8 * jj + 2 * t + e) / G)
                                s[4 * jj + 2 * h + e] = -INFINITY;
                    }
                }
        }
        uint32_t pk[16];
        #pragma unroll
        for (int jj = 0; jj < 8; jj++)
            #pragma unroll
            for (int h = 0; h < 2; h++) {
                const int i = 4 * jj + 2 * h, r0 = K_DENSE ? h : 2 * jj, r1 = K_DENSE ? h : 2 * jj + 1;
#ifdef HS_NO_EXP
                const float p0 = s[i] * scale_log2 - m[r0], p1 = s[i + 1] * scale_log2 - m[r1];
#else
                const float p0 = exp2_ftz(s[i] * scale_log2 - m[r0]);
                const float p1 = exp2_ftz(s[i + 1] * scale_log2 - m[r1]);
#endif
                l[r0] += p0;
                l[r1] += p1;
                pk[2 * jj + h] = pack_bf16(p0, p1);
            }
        #pragma unroll
        for (int n = 0; n < 4; n++) {
            if constexpr (K_DENSE)  // keys 16 n + 8 (lane / 16): unit 2 n + lane / 16, swizzled by the row
                stmatrix(p_store ^ (32 * n), pk[4 * n], pk[4 * n + 1], pk[4 * n + 2], pk[4 * n + 3]);
            else  // rows 16 n + 8 (lane / 16) + lane % 8: n moves the address by 16 rows
                stmatrix_trans(p_store + 2048 * n, pk[4 * n], pk[4 * n + 1], pk[4 * n + 2], pk[4 * n + 3]);
        }
        uint32_t ev[MT][2];
        #pragma unroll
        for (int mt = 0; mt < MT; mt++)
            #pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                const int r0 = 64 * mt + 16 * w + g;
                ev[mt][kk] = meta_reg(vm[r0 * 2 + kk], vm[(r0 + 8) * 2 + kk], t);
            }
        if (j + 1 < nbc) k_meta_regs(j + 1);
        async_proxy_fence();  // every warp's P^T stores, before the warpgroup's wgmma reads them
        group_sync(wg);
        wgmma_fence();
#ifndef HS_NO_PV
        #pragma unroll
        for (int mt = 0; mt < MT; mt++)
            #pragma unroll
            for (int kk = 0; kk < 2; kk++)  // d rows 64 mt .., keys 32 kk .. (bf16: P, and V as staged or rounded)
                wgmma_sp<false>(o[mt], desc(st + L::KV_BYTES + mt * 8 * 512 + kk * 256, 128, 512, 0),
                         desc(p_a + 64 * kk, 16, 1024, 1), ev[mt][kk]);
#endif
        wgmma_commit();  // left running under the next block's wait and S
    }
    wgmma_wait_all();

    // l: this thread's keys -> all keys (2:4 keys: the lanes of a warp, then the warpgroup's four warps, in red[w][row];
    // dense keys: the four lanes of a row, in red[1][row]); the offsets stay in red[0][row]
    #pragma unroll
    for (int c = 0; c < NR; c++)
        #pragma unroll
        for (int o_ = K_DENSE ? 1 : 4; o_ < (K_DENSE ? 4 : 32); o_ <<= 1) l[c] += __shfl_xor_sync(0xffffffffu, l[c], o_);
    if constexpr (K_DENSE) {
        if (t == 0) red[ROWS + 16 * w + g] = l[0], red[ROWS + 16 * w + g + 8] = l[1];
    } else if (g == 0) {
        #pragma unroll
        for (int c = 0; c < 16; c++) red[w * ROWS + 8 * (c / 2) + 2 * t + c % 2] = l[c];
    }
    group_sync(wg);
    #pragma unroll
    for (int c = 0; c < 16; c++) {
        const int col = 8 * (c / 2) + 2 * t + c % 2, i = 4 * (c / 2) + c % 2;
        const float total = K_DENSE ? red[ROWS + col] : red[col] + red[ROWS + col] + red[2 * ROWS + col] + red[3 * ROWS + col];
        const int token = token0 + col / G;
        if (token >= t_len || col >= ROWS_USED) continue;
        const size_t row = ((size_t)split * t_len + token) * h_q + hk * G + col % G;  // in split z's part
        const float inv = K_DENSE ? 1.f / total : fminf(1.f / total, 3.4e38f);  // a part without keys: 0, not NaN
        #pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            out[row * D + 64 * mt + 16 * w + g] = to_elem(o[mt][i] * inv);
            out[row * D + 64 * mt + 16 * w + g + 8] = to_elem(o[mt][i + 2] * inv);
        }
        if (w == 0 && g == 0) {
            const float offset = K_DENSE ? red[col] : m[c];
            lse[row] = total >= min_sum ? (offset + log2f(total)) * 0.6931471805599453f : NAN;
        }
    }
}

}  // namespace

// The pools' tensor maps (cuTensorMapEncodeTiled, through the runtime's driver entry points: no link to libcuda).
// Their slot counts are bounded by the allocation that holds each pool (cuMemGetAddressRange).
template <typename F>
static F driver_fn(const char* name) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
        return nullptr;
    return reinterpret_cast<F>(fn);
}

using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                            const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                            CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static bool encode_map(CUtensorMap* map, const void* base, int rank, const cuuint64_t* dim, const cuuint64_t* stride,
                       const cuuint32_t* box, CUtensorMapSwizzle swizzle) {
    static const Encode encode = driver_fn<Encode>("cuTensorMapEncodeTiled");
    const cuuint32_t ones[5] = {1, 1, 1, 1, 1};
    return encode && encode(map, FP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base), dim, stride, box, ones,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// K's map: over the dense keys [64 nb, h_kv, 128] (k_dense), else over the K pool's 2:4 values; V's over its pool's
static bool tensor_maps(bool k_dense, const void* keys, const void* v_vals, int h_kv, int nb, CUtensorMap* k_map,
                        CUtensorMap* v_map) {
    using Range = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
    static const Range range = driver_fn<Range>("cuMemGetAddressRange");
    if (!range) return false;
    auto slots = [&](const void* p, cuuint64_t block_bytes) -> cuuint64_t {
        CUdeviceptr base = 0;
        size_t size = 0;
        if (range(&base, &size, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) return 0;
        return (base + size - reinterpret_cast<CUdeviceptr>(p)) / block_bytes;
    };
    const cuuint64_t vs = slots(v_vals, VV_BYTES);
    // V^T [slot][D rows][4 units of 8]: element e of unit u of row 8 g + r at dims (e, r, u, g, slot)
    const cuuint64_t v_dim[5] = {8, 8, 4, D / 8, vs}, v_stride[4] = {64, 16, 512, VV_BYTES};
    const cuuint32_t v_box[5] = {8, 8, 4, D / 8, 1};
    if (!vs || !encode_map(v_map, v_vals, 5, v_dim, v_stride, v_box, CU_TENSOR_MAP_SWIZZLE_NONE)) return false;
    const cuuint32_t k_box[3] = {D / 2, 64, 1}, dense_box[3] = {64, 1, 64};
    if (k_dense) {
        const cuuint64_t dim[3] = {D, (cuuint64_t)h_kv, (cuuint64_t)BS * nb}, stride[2] = {D * 2, (cuuint64_t)h_kv * D * 2};
        return encode_map(k_map, keys, 3, dim, stride, dense_box, CU_TENSOR_MAP_SWIZZLE_128B);
    }
    const cuuint64_t ks = slots(keys, SPARSE_K_BYTES);
    const cuuint64_t k_dim[3] = {D / 2, 64, ks}, k_stride[2] = {K_ROW, SPARSE_K_BYTES};
    return ks && encode_map(k_map, keys, 3, k_dim, k_stride, k_box,
                            K_SWIZZLE == 1 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B);
}

template <bool K_DENSE>
static int run(const void* q, const void* keys, const void* k_meta, const void* v_vals, const void* v_meta,
               const int32_t* k_index, const int32_t* v_index, int k_slots, int v_slots, int* work, void* out,
               float* lse, int t_len, int h_kv, int nb, int splits, float scale_log2, int q_pos0, float min_sum,
               float headroom, cudaStream_t s) {
    using L = Layout<K_DENSE>;
    static const cudaError_t attr =
        cudaFuncSetAttribute(trans_both_sp<K_DENSE>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::SMEM);
    if (attr != cudaSuccess) return attr;
    CUtensorMap k_map, v_map;
    if (!tensor_maps(K_DENSE, keys, v_vals, h_kv, nb, &k_map, &v_map)) return cudaErrorInvalidValue;
    if (const cudaError_t e = cudaMemsetAsync(work, 0, (h_kv + 1) * sizeof(int), s)) return e;
    key_norms<K_DENSE><<<dim3(nb, h_kv), BS, 0, s>>>(static_cast<const uint16_t*>(keys), k_index, v_index, nb, k_slots,
                                                     v_slots, reinterpret_cast<unsigned*>(work), work + h_kv);
    const dim3 grid((t_len + TOKENS - 1) / TOKENS, h_kv, splits);
    trans_both_sp<K_DENSE><<<grid, THREADS, L::SMEM, s>>>(
        static_cast<const Elem*>(q), static_cast<const uint16_t*>(keys), static_cast<const uint32_t*>(k_meta),
        static_cast<const uint16_t*>(v_vals), static_cast<const uint32_t*>(v_meta), k_index, v_index,
        reinterpret_cast<const float*>(work), work + h_kv, static_cast<Elem*>(out), lse, t_len, nb,
        scale_log2, q_pos0, min_sum, headroom, k_map, v_map);
    return cudaGetLastError();
}

// 0 on success, else a cudaError_t (cudaErrorInvalidValue: a tensor map could not be encoded, or the queries'
// positions do not fit the sequence, or splits is not 1 .. nb for 2:4 keys without a mask, else 1). K: k_dense
// [64 nb, h_kv, D] (q's type) where not null (k_vals, k_meta, k_index then unused), else the K pool's blocks. q_pos0 < 0: no mask; else query token i sits at position q_pos0 + i of the
// sequence (0 <= q_pos0, q_pos0 + t_len <= 64 nb) and sees the keys at or before it. work: h_kv + 1 int32, the
// longest keys (float bits) and the status, set 1 (and nothing else done) where an index entry in use is not a 2:4
// slot of its pool of k_slots / v_slots. out and lse hold splits parts [t, h_q, ...] (trans_both_sp). headroom: how
// far (log2) each row's softmax offset lies below its Cauchy-Schwarz bound.
extern "C" int hs_prefill_sp(const void* q, const void* k_dense, const void* k_vals, const void* k_meta,
                             const void* v_vals, const void* v_meta, const int32_t* k_index, const int32_t* v_index,
                             int k_slots, int v_slots, int* work, void* out, float* lse, int t_len, int h_kv, int nb,
                             int splits, float scale_log2, int q_pos0, float min_sum, float headroom,
                             void* stream) {
    if (q_pos0 >= 0 && q_pos0 + t_len > BS * nb) return cudaErrorInvalidValue;
    if (splits < 1 || splits > (q_pos0 >= 0 || k_dense ? 1 : nb)) return cudaErrorInvalidValue;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    return k_dense ? run<true>(q, k_dense, k_meta, v_vals, v_meta, k_index, v_index, 1, v_slots, work, out, lse, t_len,
                               h_kv, nb, splits, scale_log2, q_pos0, min_sum, headroom, s)
                   : run<false>(q, k_vals, k_meta, v_vals, v_meta, k_index, v_index, k_slots, v_slots, work, out, lse,
                                t_len, h_kv, nb, splits, scale_log2, q_pos0, min_sum, headroom, s);
}

// CTAs per SM (the occupancy calculator on the built kernel for dense or 2:4 keys), -1 on an error
extern "C" int hs_prefill_sp_resident(int k_dense) {
    auto resident = [](auto kernel, int smem) {
        int n = 0;
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, THREADS, smem) != cudaSuccess)
            return -1;
        return n;
    };
    return k_dense ? resident(trans_both_sp<true>, Layout<true>::SMEM) : resident(trans_both_sp<false>, Layout<false>::SMEM);
}
