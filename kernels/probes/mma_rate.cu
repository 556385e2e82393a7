// Probe: the issue rate of the warp-level tensor-core instructions on this GPU, the ceiling of a
// FlashAttention-2-style kernel built on them (the CUDA decode's mma.sp, or a prefill written the same
// way): bf16 mma.sync m16n8k16 (dense) vs mma.sp m16n8k32 (2:4 A operand), fp32 accumulators, operands
// in registers, ACC independent accumulators per warp, WARPS warps per block, 4 blocks per SM.
// "Effective" TFLOP/s counts the dense work of the sparse instruction (2 x 16 x 8 x 32 per mma.sp).
//   nvcc -arch=sm_90 -O3 -o /tmp/mma_rate kernels/probes/mma_rate.cu && /tmp/mma_rate
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

constexpr int ITERS = 4096;

template <bool SPARSE, int ACC>
__global__ void rate(float* sink, uint32_t seed) {
    uint32_t a[4], b[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (seed + threadIdx.x * 7 + i) & 0x3f803f80u;  // small bf16 values, no overflow over the loop
        b[i] = (seed + threadIdx.x * 3 + i) & 0x3f803f80u;
    }
    uint32_t e = 0x44444444u;  // every group keeps elements 0 and 1
    float c[ACC][4] = {};
    for (int it = 0; it < ITERS; it++) {
#pragma unroll
        for (int j = 0; j < ACC; j++) {
            if (SPARSE)
                asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                             "{%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;"
                             : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]),
                               "r"(e));
            else
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                             "{%8,%9}, {%0,%1,%2,%3};"
                             : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
        }
    }
    float s = 0.f;
    for (int j = 0; j < ACC; j++) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    if (s == 12345.f) sink[0] = s;  // keeps the loop; never true for these inputs
}

template <bool SPARSE, int ACC>
void run(int sms, int warps) {
    float* sink;
    cudaMalloc(&sink, 4);
    int blocks = 4 * sms;
    rate<SPARSE, ACC><<<blocks, 32 * warps>>>(sink, 1);  // warm-up
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    cudaEventRecord(t0);
    rate<SPARSE, ACC><<<blocks, 32 * warps>>>(sink, 2);
    cudaEventRecord(t1);
    cudaEventSynchronize(t1);
    float ms;
    cudaEventElapsedTime(&ms, t0, t1);
    double mmas = double(blocks) * warps * ITERS * ACC;
    double flop = mmas * 2 * 16 * 8 * (SPARSE ? 32 : 16);
    printf("%-22s acc %d  warps/block %2d  %8.3f ms  %7.1f effective TFLOP/s  (%s)\n",
           SPARSE ? "mma.sp m16n8k32" : "mma.sync m16n8k16", ACC, warps, ms, flop / ms / 1e9,
           cudaGetErrorString(cudaGetLastError()));
    cudaFree(sink);
}

int main() {
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    int khz;
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
    printf("%s, %d SMs, %d MHz\n", p.name, p.multiProcessorCount, khz / 1000);
    for (int warps : {4, 8}) {
        run<false, 4>(p.multiProcessorCount, warps);
        run<false, 8>(p.multiProcessorCount, warps);
        run<true, 4>(p.multiProcessorCount, warps);
        run<true, 8>(p.multiProcessorCount, warps);
    }
    return 0;
}
