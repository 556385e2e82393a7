// Probe: the shared-memory and metadata layouts that Hopper's wgmma.sp (bf16, m64n8k32, 2:4 A operand) expects,
// the building blocks of a Trans-Both prefill on it (S^T = K Q^T with K's 2:4 values as A). Prints, per
// hypothesis, the max |D - reference|: 0 means that layout is right (small integers: every product is exact).
//   Descriptors: operands stored as 8-row x 16-byte core matrices (no swizzle), core matrices 128 B apart along K
//   and 256 B (A) / 512 B (B) apart along M / N; "K in LBO" puts the K stride in the leading byte offset and the
//   M / N stride in the stride byte offset, "K in SBO" the other way round. A dense wgmma m64n8k16 checks that
//   first; the sparse A then is the compressed [64, 16] values matrix, stored the same way.
//   Metadata: the block format's row words (hs_kernels.format: one nibble idx0 | idx1 << 2 per group of 4 along K,
//   group j at bits 4 j), warp w of the warpgroup for rows 16 w .. 16 w + 15 (PTX), lane 4 g + t, lo / hi the
//   words of rows 16 w + g and 16 w + g + 8. H0: lanes t = 0, 2 give lo, t = 1, 3 hi; H1: t = 0, 2 give the low
//   halves of lo and hi, t = 1, 3 their high halves (what mma.sp m16n8k32 takes, benchmarks/kernels/probes/mma_sp_layout.cu);
//   H2, H3: the same with lanes paired (0, 1) / (2, 3) instead of (0, 2) / (1, 3).
//   nvcc -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmma_sp_layout benchmarks/kernels/probes/wgmma_sp_layout.cu && /tmp/wgmma_sp_layout
#include "wgmma_probe.h"

// byte offset of element (row, k) of an operand whose core matrices are `k_stride` / `row_stride` bytes apart
__host__ __device__ int offset(int row, int k, int k_stride, int row_stride) {
    return (row / 8) * row_stride + (k / 8) * k_stride + (row % 8) * 16 + (k % 8) * 2;
}

__device__ uint64_t descriptor(const void* p, int lbo, int sbo) {
    const uint64_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    return ((addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32);
}

// a [64, ka] (row-major, ka 16: the dense A or the sparse A's values), b [8, kb] (b[n][k]); words[64]: row words
__global__ void probe(const uint16_t* a, int ka, const uint16_t* b, int kb, const uint32_t* words, float* d,
                      bool sparse, bool k_in_lbo, int h) {
    __shared__ __align__(128) uint8_t sa[4096], sb[4096];  // room for the strides read the other way round
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int a_rows = 256, b_rows = 512;  // core-matrix strides along M / N
    for (int i = tid; i < M * ka; i += 128)
        *reinterpret_cast<uint16_t*>(sa + offset(i / ka, i % ka, 128, a_rows)) = a[i];
    for (int i = tid; i < N * kb; i += 128)
        *reinterpret_cast<uint16_t*>(sb + offset(i / kb, i % kb, 128, b_rows)) = b[i];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy stores, then wgmma's reads
    __syncthreads();
    const uint64_t da = k_in_lbo ? descriptor(sa, 128, a_rows) : descriptor(sa, a_rows, 128);
    const uint64_t db = k_in_lbo ? descriptor(sb, 128, b_rows) : descriptor(sb, b_rows, 128);
    const uint32_t lo = words[16 * w + g], hi = words[16 * w + g + 8];
    const int second = h < 2 ? t % 2 : t / 2;
    uint32_t e;
    if (h % 2 == 0)
        e = second ? hi : lo;
    else
        e = second ? (lo >> 16) | (hi & 0xFFFF0000u) : (lo & 0xFFFFu) | (hi << 16);
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    if (sparse)
        asm volatile("wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, %6, 0, 1, 1, 1, 0, 0;"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "l"(da), "l"(db), "r"(e));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, 1, 1, 1, 0, 0;"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "l"(da), "l"(db));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    store_d(d, c);
}

static float run(const uint16_t* a, int ka, const uint16_t* b, int kb, const uint32_t* words, const float* ref,
                 bool sparse, bool k_in_lbo, int h) {
    uint16_t *da = to_device(a, M * ka), *db = to_device(b, N * kb);
    uint32_t* dw = to_device(words, M);
    float* d = new_output();
    probe<<<1, 128>>>(da, ka, db, kb, dw, d, sparse, k_in_lbo, h);
    const float x = worst(d, ref);
    cudaFree(da), cudaFree(db), cudaFree(dw);
    return x;
}

int main() {
    srand(11);
    static float A[M][32], B[N][32], ref[M * N];
    static uint16_t a16[M * 16], b16[N * 32], b_dense[N * 16], vals[M * 16];
    static uint32_t words[M];
    // dense: A [64, 16], B [8, 16] (the first 16 of B's 32 columns)
    for (int r = 0; r < M; r++)
        for (int k = 0; k < 16; k++) A[r][k] = small_int(), a16[r * 16 + k] = to_bf16(A[r][k]);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < 32; k++) B[n][k] = small_int(), b16[n * 32 + k] = to_bf16(B[n][k]);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < 16; k++) b_dense[n * 16 + k] = b16[n * 32 + k];
    reference(&A[0][0], 32, &B[0][0], 32, 16, ref);
    for (int lbo = 1; lbo >= 0; lbo--)
        printf("dense  m64n8k16, K in %s: max |D - ref| %g\n", lbo ? "LBO" : "SBO",
               run(a16, 16, b_dense, 16, words, ref, false, lbo, 0));
    // sparse: logical A [64, 32] with 2 kept per group of 4, values [64, 16], one word of nibbles per row
    for (int r = 0; r < M; r++) random_24_row(A[r], vals + r * 16, words + r, 8);
    reference(&A[0][0], 32, &B[0][0], 32, 32, ref);
    for (int lbo = 1; lbo >= 0; lbo--)
        for (int h = 0; h < 4; h++)
            printf("sparse m64n8k32, K in %s, H%d: max |D - ref| %g\n", lbo ? "LBO" : "SBO", h,
                   run(vals, 16, b16, 32, words, ref, true, lbo, h));
    return 0;
}
