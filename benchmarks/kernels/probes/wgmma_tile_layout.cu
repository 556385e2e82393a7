// Probe: the two operand layouts a Trans-Both prefill on wgmma.sp needs beyond benchmarks/kernels/probes/wgmma_sp_layout.cu,
// on this GPU (bf16, fp32 accumulators, small integers: every product exact; max |D - reference| 0 = right):
//  1. 128-byte swizzle, K-major, as a TMA copy writes a pool slot with 128-byte rows: a row's 16-byte chunk c sits
//     at chunk c ^ (row % 8) of its 128-byte line, 8-row groups 1024 B apart, K beyond 64 elements in further
//     64-element atoms (rows x 128 B apart). Descriptor: swizzle mode 1 (bits 62-63), stride byte offset 1024,
//     the start address advanced by each k step's bytes inside the atom. Checked with a dense A [64, 64] (four
//     m64n8k16 steps) and a 2:4 A (values [64, 64], four m64n8k32 steps over K 128, metadata as measured).
//  2. A dense V^T from a token-major V (the second GEMM's A for dense blocks): A [M 64, K 16] stored K rows of 64
//     M-contiguous elements, read with imm-trans-a = 1 (MN-major), no swizzle: core matrices of 8 K rows x 8 M
//     elements (16 B) 128 B each; layout "M cores adjacent" (M stride 128 B, K stride 1024 B) or "K cores
//     adjacent" (K stride 128 B, M stride 256 B), each with the two strides in (LBO, SBO) either way round.
//   nvcc -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmma_tile_layout benchmarks/kernels/probes/wgmma_tile_layout.cu && /tmp/wgmma_tile_layout
#include "wgmma_probe.h"

// 128-byte swizzle, K-major: byte offset of element (row, k) of an operand of `rows` rows
__host__ __device__ int sw128(int row, int k, int rows) {
    const int atom = k / 64, chunk = (k % 64) / 8;
    return atom * rows * 128 + (row / 8) * 1024 + (row % 8) * 128 + ((chunk ^ (row % 8)) * 16) + (k % 8) * 2;
}

// no swizzle, MN-major: element (m, k) with M cores `m_stride` and K cores `k_stride` bytes apart
__host__ __device__ int mn_major(int m, int k, int m_stride, int k_stride) {
    return (m / 8) * m_stride + (k / 8) * k_stride + (k % 8) * 16 + (m % 8) * 2;
}

__device__ uint64_t descriptor(uint32_t addr, int lbo, int sbo, int swizzle) {
    return ((uint64_t)(addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32) |
           (uint64_t(swizzle) << 62);
}

// case 1: a [64, 64] (dense A, or the 2:4 A's values), b [8, kb] (kb 64 dense, 128 sparse), words [64, 4]
__global__ void swizzled(const uint16_t* a, const uint16_t* b, int kb, const uint32_t* words, float* d, bool sparse) {
    __shared__ __align__(1024) uint8_t sa[M * 128], sb[N * 256];
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    for (int i = tid; i < M * 64; i += 128) *reinterpret_cast<uint16_t*>(sa + sw128(i / 64, i % 64, M)) = a[i];
    for (int i = tid; i < N * kb; i += 128) *reinterpret_cast<uint16_t*>(sb + sw128(i / kb, i % kb, N)) = b[i];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const uint32_t base_a = static_cast<uint32_t>(__cvta_generic_to_shared(sa));
    const uint32_t base_b = static_cast<uint32_t>(__cvta_generic_to_shared(sb));
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int s = 0; s < 4; s++) {
        if (sparse) {  // k32 step s: A's stored elements 16 s.., B's logical 32 s.. (atom s / 2)
            const uint64_t da = descriptor(base_a + 32 * s, 16, 1024, 1);
            const uint64_t db = descriptor(base_b + (s / 2) * N * 128 + 64 * (s % 2), 16, 1024, 1);
            const uint32_t lo = words[(16 * w + g) * 4 + s], hi = words[(16 * w + g + 8) * 4 + s];
            const uint32_t e = (t % 2) ? (lo >> 16) | (hi & 0xFFFF0000u) : (lo & 0xFFFFu) | (hi << 16);
            asm volatile("wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, %6, 0, 1, 1, 1, 0, 0;"
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "l"(da), "l"(db), "r"(e));
        } else {  // k16 step s: 32 bytes into both atoms
            const uint64_t da = descriptor(base_a + 32 * s, 16, 1024, 1), db = descriptor(base_b + 32 * s, 16, 1024, 1);
            asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, 1, 1, 1, 0, 0;"
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "l"(da), "l"(db));
        }
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    store_d(d, c);
}

// case 2: at [16, 64] = A^T (K rows of M-contiguous elements), b [8, 16] K-major unswizzled (K cores 128 B apart)
__global__ void transposed(const uint16_t* at, const uint16_t* b, float* d, int m_stride, int k_stride, bool swap) {
    __shared__ __align__(1024) uint8_t sa[16384], sb[1024];  // room for strides read the other way round
    const int tid = threadIdx.x;
    for (int i = tid; i < 16 * M; i += 128) *reinterpret_cast<uint16_t*>(sa + mn_major(i % M, i / M, m_stride, k_stride)) = at[i];
    for (int i = tid; i < N * 16; i += 128)
        *reinterpret_cast<uint16_t*>(sb + (i / 16 / 8) * 256 + ((i % 16) / 8) * 128 + (i / 16 % 8) * 16 + (i % 8) * 2) = b[i];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const uint32_t base_a = static_cast<uint32_t>(__cvta_generic_to_shared(sa));
    const uint64_t da = swap ? descriptor(base_a, k_stride, m_stride, 0) : descriptor(base_a, m_stride, k_stride, 0);
    const uint64_t db = descriptor(static_cast<uint32_t>(__cvta_generic_to_shared(sb)), 128, 256, 0);
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, 1, 1, 1, 1, 0;"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "l"(da), "l"(db));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    store_d(d, c);
}

// case 1 on a [64, 64], b [8, kb], words [64, 4]
static float run_swizzled(const uint16_t* a, const uint16_t* b, int kb, const uint32_t* words, const float* ref, bool sparse) {
    uint16_t *da = to_device(a, M * 64), *db = to_device(b, N * kb);
    uint32_t* dw = to_device(words, M * 4);
    float* d = new_output();
    swizzled<<<1, 128>>>(da, db, kb, dw, d, sparse);
    const float x = worst(d, ref);
    cudaFree(da), cudaFree(db), cudaFree(dw);
    return x;
}

int main() {
    srand(5);
    static float A[M][128], B[N][128], ref[M * N];
    static uint16_t a16[M * 64], b16[N * 128];
    static uint32_t words[M * 4];
    // 1a. dense, K 64
    for (int r = 0; r < M; r++)
        for (int k = 0; k < 64; k++) A[r][k] = small_int(), a16[r * 64 + k] = to_bf16(A[r][k]);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < 64; k++) B[n][k] = small_int(), b16[n * 64 + k] = to_bf16(B[n][k]);
    reference(&A[0][0], 128, &B[0][0], 128, 64, ref);
    printf("128B swizzle, K-major, dense m64n8k16 x 4 steps: max |D - ref| %g\n",
           run_swizzled(a16, b16, 64, words, ref, false));
    // 1b. 2:4, logical K 128: values [64, 64], row words [64, 4]
    for (int r = 0; r < M; r++) random_24_row(A[r], a16 + r * 64, words + r * 4, 32);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < 128; k++) B[n][k] = small_int(), b16[n * 128 + k] = to_bf16(B[n][k]);
    reference(&A[0][0], 128, &B[0][0], 128, 128, ref);
    printf("128B swizzle, K-major, sparse m64n8k32 x 4 steps: max |D - ref| %g\n",
           run_swizzled(a16, b16, 128, words, ref, true));
    // 2. MN-major A (transposed), K 16
    static uint16_t at16[16 * M];
    for (int r = 0; r < M; r++)
        for (int k = 0; k < 16; k++) A[r][k] = small_int(), at16[k * M + r] = to_bf16(A[r][k]);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < 16; k++) B[n][k] = small_int(), b16[n * 16 + k] = to_bf16(B[n][k]);
    reference(&A[0][0], 128, &B[0][0], 128, 16, ref);
    const struct { const char* name; int m_stride, k_stride; } layouts[2] = {{"M cores adjacent", 128, 1024},
                                                                            {"K cores adjacent", 256, 128}};
    for (const auto& l : layouts)
        for (int swap = 0; swap < 2; swap++) {
            uint16_t *da = to_device(at16, 16 * M), *db = to_device(b16, N * 16);
            float* d = new_output();
            transposed<<<1, 128>>>(da, db, d, l.m_stride, l.k_stride, swap);
            printf("MN-major A (imm-trans-a 1), %s, (LBO, SBO) = %s: max |D - ref| %g\n", l.name,
                   swap ? "(K stride, M stride)" : "(M stride, K stride)", worst(d, ref));
            cudaFree(da), cudaFree(db);
        }
    return 0;
}
