// Probe: the Trans-Both inner loop of the paper's prefill on Hopper's sparse tensor cores (wgmma.sp), warp-specialized,
// at N = 128. A tile of 128 query rows (32 tokens x the 4 query heads of one KV head: d 128, G 4, Llama's attention)
// attends to a prefix of 64-token blocks that are all 2:4 for K and V (hs_kernels.format pools, through the index
// maps), no mask, in pairs of blocks:
//   S^T [64 keys, 128 rows] = K . Q^T     A = the K block's values [64, 64] (2:4 along d), 4 x wgmma.sp m64n128k32
//   O^T [128, 128 rows]    += V^T . P^T   A = the V blocks' values [128, 32] (2:4 along keys), 2 x 2 x 2 x m64n128k32
// Two consumer warpgroups: consumer c computes S^T and P^T of block 2 i + c of pair i, and O^T's d rows
// 64 c .. 64 c + 63 over both blocks of the pair (so both read both P^T halves, and each thread holds 64 of O^T and 64
// of S^T). A producer warpgroup stages each block (K and V values, 128B-swizzled / core matrices, and their
// metadata) by cp.async into a ring of STAGES stages, handed over by mbarriers (full: the producer's 128 threads,
// each after its copies landed and were fenced for the async proxy; empty: every consumer thread, once its wgmmas
// that read the stage are done).
// The softmax offset of each row is static (bound, log2 units, at least the row's largest score): nothing is reduced
// across keys or rescaled before the end, and the two consumers' row sums simply add. P^T goes through shared
// memory (stmatrix .trans) as the second GEMM's B operand.
// Layouts as measured by kernels/probes/wgmma_sp_layout.cu and wgmma_tile_layout.cu (kernels/NOTES_GPU.md).
// Driven by kernels/probes/trans_both_sp.py (reference check and timing). Ablations, to see which part sets the time
// (results then wrong): -DHS_NO_COPY (the producer copies nothing), -DHS_NO_S, -DHS_NO_EXP (an FMA in place of each
// exponential), -DHS_NO_PV (the wgmmas of each part left out).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <type_traits>

namespace {

constexpr int BS = 64, D = 128, ROWS = 128, G = 4;
constexpr int CONSUMERS = 2, TOKENS = ROWS / G, THREADS = (CONSUMERS + 1) * 128, STAGES = 6;
// registers per thread: the producer warpgroup hands most of its share of the SM's 64K to the consumers
// (setmaxnreg), as FA3 does; ptxas allocates the consumer's code to that count
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
// shared memory (bytes): 128B-swizzled operands 1024-aligned first
constexpr int Q_BYTES = ROWS * D * 2;  // Q^T as B: [128 rows, 128 d], two 64-element atoms along d
constexpr int P_BYTES = ROWS * BS * 2;  // P^T of one block as B: [128 rows, 64 keys], one atom; 2 x 2 of them
constexpr int Q_OFF = 0, P_OFF = Q_OFF + Q_BYTES, STAGE_OFF = P_OFF + 4 * P_BYTES;
constexpr int KV_BYTES = BS * D, VV_BYTES = D * BS, KM_BYTES = BS * D / 8, VM_BYTES = D * BS / 8;  // per block
constexpr int STAGE_BYTES = KV_BYTES + VV_BYTES + KM_BYTES + VM_BYTES;  // 18 KB, a multiple of 1024
constexpr int RED_OFF = STAGE_OFF + STAGES * STAGE_BYTES;  // [2 consumers][4 warps][128 rows] float
constexpr int M_OFF = RED_OFF + CONSUMERS * 4 * ROWS * 4;  // the rows' offsets, [128] float
constexpr int BAR_OFF = M_OFF + ROWS * 4;  // full[STAGES], then empty[STAGES]
constexpr int SMEM = BAR_OFF + 2 * STAGES * 8;
static_assert(STAGES % 2 == 0 && STAGES >= 6, "a pair of blocks per step, three pairs in the ring");

__device__ __forceinline__ int sw128(int row, int chunk) { return row * 128 + ((chunk ^ (row % 8)) * 16); }

__device__ __forceinline__ uint64_t desc(uint32_t addr, int lbo, int sbo, int swizzle) {
    return ((uint64_t)(addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32) |
           (uint64_t(swizzle) << 62);
}

__device__ __forceinline__ void cp16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src));
}

__device__ __forceinline__ uint32_t meta_reg(uint32_t lo, uint32_t hi, int t) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(lo), "r"(hi), "r"((t & 1) ? 0x7632 : 0x5410));
    return r;
}

// D (+)= A . B with A 2:4 (metadata e), m64n128k32; ACC false: D = A . B, its registers only written (scale-d 0),
// so that no instruction defines them while earlier wgmmas run
template <bool ACC = true>
__device__ __forceinline__ void wgmma_sp(float (&d)[64], uint64_t a, uint64_t b, uint32_t e) {
#define HS_WGMMA_SP(MODE, SCALE_D)                                                                                  \
    asm volatile(                                                                                                 \
        "wgmma.mma_async.sp.sync.aligned.m64n128k32.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, %66, 0, " SCALE_D ", 1, 1, 0, 0;" \
        : MODE(d[0]), MODE(d[1]), MODE(d[2]), MODE(d[3]), MODE(d[4]), MODE(d[5]), MODE(d[6]), MODE(d[7]), MODE(d[8]), MODE(d[9]), MODE(d[10]), MODE(d[11]), MODE(d[12]), MODE(d[13]), MODE(d[14]), MODE(d[15]), MODE(d[16]), MODE(d[17]), MODE(d[18]), MODE(d[19]), MODE(d[20]), MODE(d[21]), MODE(d[22]), MODE(d[23]), MODE(d[24]), MODE(d[25]), MODE(d[26]), MODE(d[27]), MODE(d[28]), MODE(d[29]), MODE(d[30]), MODE(d[31]), MODE(d[32]), MODE(d[33]), MODE(d[34]), MODE(d[35]), MODE(d[36]), MODE(d[37]), MODE(d[38]), MODE(d[39]), MODE(d[40]), MODE(d[41]), MODE(d[42]), MODE(d[43]), MODE(d[44]), MODE(d[45]), MODE(d[46]), MODE(d[47]), MODE(d[48]), MODE(d[49]), MODE(d[50]), MODE(d[51]), MODE(d[52]), MODE(d[53]), MODE(d[54]), MODE(d[55]), MODE(d[56]), MODE(d[57]), MODE(d[58]), MODE(d[59]), MODE(d[60]), MODE(d[61]), MODE(d[62]), MODE(d[63]) \
        : "l"(a), "l"(b), "r"(e))
#define HS_ACC(x) "+f"(x)
#define HS_SET(x) "=f"(x)
    if constexpr (ACC)
        HS_WGMMA_SP(HS_ACC, "1");
    else
        HS_WGMMA_SP(HS_SET, "0");
#undef HS_SET
#undef HS_ACC
#undef HS_WGMMA_SP
}

// 2^x flushed to 0 below 2^-126: one MUFU.EX2 (exp2f adds a range fix-up of four instructions per element)
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// until at most N committed groups are pending (groups complete in order)
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// four 8 x 8 bf16 pieces, each stored transposed at the rows whose addresses lanes 8 i .. 8 i + 7 give
__device__ __forceinline__ void stmatrix_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
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
// the 256 threads of both consumer warpgroups (named barrier 1; 0 is __syncthreads')
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 256;" ::: "memory"); }

// block (entries: sparse, ~slot) of K and V into the stage at base, by the producer's 128 threads, as one commit
// group: K values 128B-swizzled, V^T values in unswizzled core matrices (8 rows x 16 B, K-direction cores 128 B
// apart, 8-row groups 512 B apart), metadata words as stored. Thread pt copies the same 16-byte units of every
// block: K's unit pt + 128 i (row pt / 8 + 16 i) and V^T's (row pt / 4 + 32 i) land 2048 i bytes after those of
// i = 0 and come 2048 i bytes after them in the pool; then one metadata unit (K's for pt < 64, else V's).
struct StageCopy {
    uint32_t k_dst, v_dst, m_dst;  // offsets in the stage
    uint32_t m_src;  // byte offset of the metadata unit in its block
    bool of_v;  // the metadata unit is V's

    __device__ explicit StageCopy(int pt)
        : k_dst(sw128(pt / 8, pt % 8)),
          v_dst(KV_BYTES + (pt / 4 / 8) * 512 + (pt % 4) * 128 + (pt / 4 % 8) * 16),
          m_dst(KV_BYTES + VV_BYTES + 16 * pt),
          m_src(16 * (pt % 64)),
          of_v(pt >= 64) {}

    __device__ void operator()(uint32_t base, int k_entry, int v_entry, const uint16_t* k_vals, const uint32_t* k_meta,
                               const uint16_t* v_vals, const uint32_t* v_meta, int pt) const {
#ifndef HS_NO_COPY
        const size_t ks = (size_t)(~k_entry), vs = (size_t)(~v_entry);
        const uint8_t* kv = reinterpret_cast<const uint8_t*>(k_vals + ks * BS * D / 2) + 16 * pt;
        const uint8_t* vv = reinterpret_cast<const uint8_t*>(v_vals + vs * D * BS / 2) + 16 * pt;
        #pragma unroll
        for (int i = 0; i < KV_BYTES / 16 / 128; i++) cp16(base + k_dst + 2048 * i, kv + 2048 * i);
        #pragma unroll
        for (int i = 0; i < VV_BYTES / 16 / 128; i++) cp16(base + v_dst + 2048 * i, vv + 2048 * i);
        const uint8_t* meta = of_v ? reinterpret_cast<const uint8_t*>(v_meta + vs * D * BS / 32)
                                   : reinterpret_cast<const uint8_t*>(k_meta + ks * BS * D / 32);
        cp16(base + m_dst, meta + m_src);
#endif
        asm volatile("cp.async.commit_group;");
    }
};
static_assert(KV_BYTES == 128 * 16 * 4 && VV_BYTES == 128 * 16 * 4 && KM_BYTES == 64 * 16 && VM_BYTES == 64 * 16,
              "StageCopy's fixed unit counts");

// q [t, h_q, 128] bf16; bound [t, h_q] float32 (each row's softmax offset, log2 units); out [t, h_q, 128] float32,
// lse [t, h_q]; index maps [h_kv, nb], every entry sparse
__global__ void __launch_bounds__(THREADS, 1) trans_both_sp(
    const __nv_bfloat16* __restrict__ q, const uint16_t* __restrict__ k_vals, const uint32_t* __restrict__ k_meta,
    const uint16_t* __restrict__ v_vals, const uint32_t* __restrict__ v_meta, const int32_t* __restrict__ k_index,
    const int32_t* __restrict__ v_index, const float* __restrict__ bound, float* __restrict__ out,
    float* __restrict__ lse, int t_len, int nb, float scale_log2) {
    extern __shared__ __align__(1024) uint8_t smem[];
    const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32;
    const int tile = blockIdx.x, hk = blockIdx.y, h_q = gridDim.y * G;
    const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    const uint32_t full = sbase + BAR_OFF, empty = full + STAGES * 8;
    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) bar_init(full + 8 * s, 128), bar_init(empty + 8 * s, CONSUMERS * 128);
    }
    __syncthreads();
    const int32_t* ki = k_index + (size_t)hk * nb;
    const int32_t* vi = v_index + (size_t)hk * nb;

    if (wg == CONSUMERS) {  // the producer: block j into stage j % STAGES, two blocks' copies in flight
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PRODUCER_REGS));
        const StageCopy stage_block(tid % 128);
        int k_next = nb > 0 ? ki[0] : 0, v_next = nb > 0 ? vi[0] : 0;
        for (int j = 0; j < nb; j++) {
            const int ke = k_next, ve = v_next;
            if (j + 1 < nb) k_next = ki[j + 1], v_next = vi[j + 1];
            if (j >= STAGES) bar_wait(empty + 8 * (j % STAGES), (j / STAGES - 1) & 1);
            stage_block(sbase + STAGE_OFF + (j % STAGES) * STAGE_BYTES, ke, ve, k_vals, k_meta, v_vals, v_meta, tid % 128);
            if (j > 0) {
                asm volatile("cp.async.wait_group 1;" ::: "memory");
                async_proxy_fence();
                bar_arrive(full + 8 * ((j - 1) % STAGES));
            }
        }
        if (nb > 0) {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
            async_proxy_fence();
            bar_arrive(full + 8 * ((nb - 1) % STAGES));
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CONSUMER_REGS));
    // one copy of the consumer per warpgroup: its branches on its index are then uniform to ptxas, which otherwise
    // serializes the wgmmas behind them (C7520)
    auto consume = [&](auto consumer) {
        constexpr int c = decltype(consumer)::value;
        // consumer c = wg: S^T of the blocks 2 i + c (all 128 rows), then O^T's d rows 64 c .. 64 c + 63 over both blocks
        // of pair i
        const int ct = tid % 128, w = ct / 32, g = lane / 4, t = lane % 4;  // fragment coordinates
        const int token0 = tile * TOKENS;
        uint8_t* q_s = smem + Q_OFF;
        float* red = reinterpret_cast<float*>(smem + RED_OFF);  // [2 consumers][4 warps][128 rows]

        // Q^T: row r = token token0 + r / 4, head 4 hk + r % 4; 16 chunks of 8 d per row, two atoms; half the rows each
        for (int u = ct; u < ROWS / 2 * 16; u += 128) {
            const int r = c * ROWS / 2 + u / 16, ch = u % 16, token = token0 + r / G;
            uint4 x = make_uint4(0, 0, 0, 0);
            if (token < t_len) x = *reinterpret_cast<const uint4*>(q + ((size_t)token * h_q + hk * G + r % G) * D + 8 * ch);
            *reinterpret_cast<uint4*>(q_s + (ch / 8) * ROWS * 128 + sw128(r, ch % 8)) = x;
        }
        // fragments (m64n128): element 4 j + i is row 16 w + g (+ 8 for i >= 2), column 8 j + 2 t + i % 2
        // the offsets stay in shared memory (read as pairs where used), for the registers
        float o[64] = {}, l[32] = {};
        float* m_s = reinterpret_cast<float*>(smem + M_OFF);
        for (int r = ct; r < ROWS / 2; r += 128) {
            const int row = c * ROWS / 2 + r, token = token0 + row / G;
            m_s[row] = token < t_len ? bound[(size_t)token * h_q + hk * G + row % G] : 0.f;
        }
        async_proxy_fence();  // the Q^T stores, before wgmma reads them
        consumers_sync();

        // The 2:4 metadata operands are ordinary registers: one written while any wgmma is in flight makes ptxas
        // serialize the wgmmas (C7513), so they are set only where none is, at the end of each step.
        uint32_t ek[4], ev[2][2];
        auto k_meta_regs = [&](int j) {  // block j's S metadata, once its stage is full
            const int stage = j % STAGES;
            const uint32_t* km = reinterpret_cast<const uint32_t*>(smem + STAGE_OFF + stage * STAGE_BYTES + KV_BYTES + VV_BYTES);
            bar_wait(full + 8 * stage, (j / STAGES) & 1);
            #pragma unroll
            for (int k = 0; k < 4; k++) ek[k] = meta_reg(km[(16 * w + g) * 4 + k], km[(16 * w + g + 8) * 4 + k], t);
        };
        auto v_meta_regs = [&](int i, int blocks) {  // this consumer's V^T rows of pair i's blocks, once their stages are full
            #pragma unroll
            for (int b = 0; b < 2; b++) {
                if (b == blocks) break;
                const int j = 2 * i + b, stage = j % STAGES;
                const uint32_t* vm = reinterpret_cast<const uint32_t*>(smem + STAGE_OFF + stage * STAGE_BYTES + KV_BYTES +
                                                                       VV_BYTES + KM_BYTES);
                bar_wait(full + 8 * stage, (j / STAGES) & 1);
                #pragma unroll
                for (int kk = 0; kk < 2; kk++) {
                    const int r0 = 64 * c + 16 * w + g;
                    ev[b][kk] = meta_reg(vm[r0 * 2 + kk], vm[(r0 + 8) * 2 + kk], t);
                }
            }
        };
        // operand descriptors: a loop-invariant one plus an offset / 16 in its address field (bits 0-13, which shared
        // addresses below 256 KB never carry out of)
        const uint64_t k_desc = desc(sbase + STAGE_OFF, 16, 1024, 1);
        const uint64_t v_desc = desc(sbase + STAGE_OFF + KV_BYTES + c * 8 * 512, 128, 512, 0);
        const uint64_t q_desc = desc(sbase + Q_OFF, 16, 1024, 1), p_desc = desc(sbase + P_OFF, 16, 1024, 1);
        float s[64];
        auto issue_s = [&](int j) {  // S^T of block j into s, committed
            const uint32_t stage_units = (j % STAGES) * STAGE_BYTES / 16;
            wgmma_fence();
    #ifdef HS_NO_S
            #pragma unroll
            for (int n = 0; n < 64; n++) s[n] = __uint_as_float(ek[n % 4] & 0x3f00ffffu);
    #else
            #pragma unroll
            for (int k = 0; k < 4; k++) {  // d 32 k .. 32 k + 31
                const uint64_t a = k_desc + stage_units + 32 * k / 16;
                const uint64_t b = q_desc + ((k / 2) * ROWS * 128 + 64 * (k % 2)) / 16;
                if (k == 0)
                    wgmma_sp<false>(s, a, b, ek[k]);
                else
                    wgmma_sp(s, a, b, ek[k]);
            }
    #endif
            wgmma_commit();
        };
        // P^T of block 2 i + c [128 rows, 64 keys] into buffer (i % 2, c): the accumulator's 8 x 8 pieces (keys
        // 16 w + 8 h + g, rows 8 jj + 2 t, + 1) stored transposed by stmatrix, four per instruction
        auto softmax = [&](int i) {
            uint32_t pk[32];
            #pragma unroll
            for (int jj = 0; jj < 16; jj++) {
                const float2 m = reinterpret_cast<const float2*>(m_s)[4 * jj + t];  // rows 8 jj + 2 t, + 1
                #pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int n = 4 * jj + 2 * h;
    #ifdef HS_NO_EXP
                    const float p0 = s[n] * scale_log2 - m.x, p1 = s[n + 1] * scale_log2 - m.y;
    #else
                    const float p0 = exp2_ftz(s[n] * scale_log2 - m.x);
                    const float p1 = exp2_ftz(s[n + 1] * scale_log2 - m.y);
    #endif
                    l[2 * jj] += p0;
                    l[2 * jj + 1] += p1;
                    pk[2 * jj + h] = pack_bf16(p0, p1);
                }
            }
            const uint32_t p = sbase + P_OFF + ((i % 2) * 2 + c) * P_BYTES;
            #pragma unroll
            for (int n = 0; n < 8; n++) {
                const int piece = lane / 8, row = 8 * (2 * n + piece / 2) + lane % 8, chunk = 2 * w + piece % 2;
                stmatrix_trans(p + row * 128 + ((chunk ^ (row % 8)) * 16), pk[4 * n], pk[4 * n + 1], pk[4 * n + 2],
                               pk[4 * n + 3]);
            }
        };
        // O^T[64 c ..] += V^T . P^T over the first N blocks of pair i, committed
        auto issue_pv = [&](int i, auto n_blocks) {
            constexpr int N = decltype(n_blocks)::value;
            wgmma_fence();
    #ifndef HS_NO_PV
            #pragma unroll
            for (int b = 0; b < N; b++) {
                const uint32_t stage_units = ((2 * i + b) % STAGES) * STAGE_BYTES / 16;
                #pragma unroll
                for (int kk = 0; kk < 2; kk++)  // keys 32 kk ..
                    wgmma_sp(o, v_desc + stage_units + kk * 256 / 16, p_desc + (((i % 2) * 2 + b) * P_BYTES + 64 * kk) / 16,
                             ev[b][kk]);
            }
    #endif
            wgmma_commit();
        };
        // Step i: S of this consumer's block of pair i + 1, then the PV of pair i; the next pair's exponentials run under
        // that PV (P^T double-buffered). Both consumers meet once per step: each PV reads both P^T halves. With an odd
        // number of blocks the last pair has one (consumer 1 then has no block of its own in it). The loop's step has
        // no branch between its wgmmas and their wait (else ptxas serializes them: C7514).
        const int pairs = (nb + 1) / 2;
        auto own = [&](int i) { return i < pairs && 2 * i + c < nb; };
        auto blocks = [&](int i) { return min(2, nb - 2 * i); };
        constexpr std::integral_constant<int, 2> two;
        auto step = [&](int i) {  // the loop's step: a next pair with a block of this consumer's, this pair whole
            issue_s(2 * (i + 1) + c);
            issue_pv(i, two);
            wgmma_wait<1>();
            softmax(i + 1);
            wgmma_wait<0>();
            for (int b = 0; b < 2; b++) bar_arrive(empty + 8 * ((2 * i + b) % STAGES));
            v_meta_regs(i + 1, blocks(i + 1));  // the next pair may be a last one of one block
            if (own(i + 2)) k_meta_regs(2 * (i + 2) + c);
            async_proxy_fence();
            consumers_sync();
        };
        auto last_steps = [&](int i) {  // the other steps (at most two), without the overlap
            const int n = blocks(i);
            if (n == 2) {  // each path whole, so that no branch lies between a wgmma and its wait
                issue_pv(i, two);
                wgmma_wait<0>();
            } else {
                issue_pv(i, std::integral_constant<int, 1>{});
                wgmma_wait<0>();
            }
            for (int b = 0; b < n; b++) bar_arrive(empty + 8 * ((2 * i + b) % STAGES));
            if (own(i + 1)) {
                issue_s(2 * (i + 1) + c);
                wgmma_wait<0>();
                softmax(i + 1);
            }
            if (i + 1 < pairs) v_meta_regs(i + 1, blocks(i + 1));
            if (own(i + 2)) k_meta_regs(2 * (i + 2) + c);
            async_proxy_fence();
            consumers_sync();
        };
        if (own(0)) {
            k_meta_regs(c);
            issue_s(c);
            wgmma_wait<0>();
            softmax(0);
        }
        if (pairs > 0) v_meta_regs(0, blocks(0));
        if (own(1)) k_meta_regs(2 + c);
        async_proxy_fence();
        consumers_sync();
        int i = 0;
        for (; i + 1 < pairs && own(i + 1); i++) step(i);
        for (; i < pairs; i++) last_steps(i);

        // l: this thread's keys -> all keys (lanes of a warp, then the four warps of both consumers)
        #pragma unroll
        for (int n = 0; n < 32; n++)
            #pragma unroll
            for (int o_ = 4; o_ < 32; o_ <<= 1) l[n] += __shfl_xor_sync(0xffffffffu, l[n], o_);
        if (g == 0) {
            #pragma unroll
            for (int n = 0; n < 32; n++) red[(c * 4 + w) * ROWS + 8 * (n / 2) + 2 * t + n % 2] = l[n];
        }
        consumers_sync();
        #pragma unroll
        for (int n = 0; n < 32; n++) {
            const int col = 8 * (n / 2) + 2 * t + n % 2, e = 4 * (n / 2) + n % 2;
            float total = 0.f;
            #pragma unroll
            for (int r = 0; r < 8; r++) total += red[r * ROWS + col];
            const int token = token0 + col / G;
            if (token >= t_len) continue;
            const size_t row = (size_t)token * h_q + hk * G + col % G;
            const float inv = 1.f / total;
            out[row * D + 64 * c + 16 * w + g] = o[e] * inv;
            out[row * D + 64 * c + 16 * w + g + 8] = o[e + 2] * inv;
            if (c == 0 && w == 0 && g == 0) lse[row] = (m_s[col] + log2f(total)) * 0.6931471805599453f;
        }
    };
    if (wg == 0)
        consume(std::integral_constant<int, 0>{});
    else
        consume(std::integral_constant<int, 1>{});
}

}  // namespace

// 0 on success, else a cudaError_t (cudaErrorNotSupported without bound: only the static offset is built)
extern "C" int trans_both_sp_launch(const void* q, const void* k_vals, const void* k_meta, const void* v_vals,
                                    const void* v_meta, const int32_t* k_index, const int32_t* v_index,
                                    const float* bound, float* out, float* lse, int t_len, int h_kv, int nb,
                                    float scale_log2, void* stream) {
    if (!bound) return cudaErrorNotSupported;
    static const cudaError_t attr = cudaFuncSetAttribute(trans_both_sp, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    if (attr != cudaSuccess) return attr;
    const dim3 grid((t_len + TOKENS - 1) / TOKENS, h_kv);
    trans_both_sp<<<grid, THREADS, SMEM, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const __nv_bfloat16*>(q), static_cast<const uint16_t*>(k_vals), static_cast<const uint32_t*>(k_meta),
        static_cast<const uint16_t*>(v_vals), static_cast<const uint32_t*>(v_meta), k_index, v_index, bound, out, lse,
        t_len, nb, scale_log2);
    return cudaGetLastError();
}

extern "C" int trans_both_sp_resident() {
    int n = 0;
    if (cudaFuncSetAttribute(trans_both_sp, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, trans_both_sp, THREADS, SMEM) != cudaSuccess)
        return -1;
    return n;
}
