// Host helpers shared by the wgmma layout probes (wgmma_sp_layout.cu, wgmma_tile_layout.cu): a 64 x 8 fp32
// result of one warpgroup, checked against a host reference built from small integers (every product exact).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

constexpr int M = 64, N = 8;

inline uint16_t to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16); }  // exact for small ints
inline float small_int() { return (float)(rand() % 7 - 3); }

// the m64n8 D fragment: rows 16 w + g (c[0], c[1]) and + 8 (c[2], c[3]), columns 2 t, 2 t + 1
__device__ inline void store_d(float* d, const float (&c)[4]) {
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4, r = 16 * w + g;
    d[r * N + 2 * t] = c[0];
    d[r * N + 2 * t + 1] = c[1];
    d[(r + 8) * N + 2 * t] = c[2];
    d[(r + 8) * N + 2 * t + 1] = c[3];
}

template <typename T>
T* to_device(const T* x, size_t n) {
    T* p;
    cudaMalloc(&p, n * sizeof(T));
    cudaMemcpy(p, x, n * sizeof(T), cudaMemcpyHostToDevice);
    return p;
}

inline float* new_output() {
    float* d;
    cudaMalloc(&d, M * N * sizeof(float));
    cudaMemset(d, 0xFF, M * N * sizeof(float));  // NaN: an unwritten element fails
    return d;
}

// max |D - ref| of the result at d (freed), infinite where an element is NaN; exits on a CUDA error
inline float worst(float* d, const float* ref) {
    float out[M * N];
    const cudaError_t err = cudaMemcpy(out, d, sizeof(out), cudaMemcpyDeviceToHost);
    cudaFree(d);
    if (err != cudaSuccess) {
        printf("CUDA error: %s\n", cudaGetErrorString(err));
        exit(1);
    }
    float x = 0.f;
    for (int i = 0; i < M * N; i++) x = std::isnan(out[i]) ? INFINITY : fmaxf(x, fabsf(out[i] - ref[i]));
    return x;
}

// ref [64, 8] = a [64, k] . b [8, k]^T (row strides lda, ldb)
inline void reference(const float* a, int lda, const float* b, int ldb, int k, float* ref) {
    for (int r = 0; r < M; r++)
        for (int n = 0; n < N; n++) {
            float s = 0.f;
            for (int i = 0; i < k; i++) s += a[r * lda + i] * b[n * ldb + i];
            ref[r * N + n] = s;
        }
}

// one row of a random 2:4 A of `groups` groups of 4: the logical row (a), its kept values (vals, bf16) and its
// metadata words (words: the block format's nibble idx0 | idx1 << 2 of group j at bits 4 (j % 8) of word j / 8)
inline void random_24_row(float* a, uint16_t* vals, uint32_t* words, int groups) {
    static const int pairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
    for (int j = 0; j < groups / 8; j++) words[j] = 0;
    for (int j = 0; j < groups; j++) {
        const int* p = pairs[rand() % 6];
        for (int i = 0; i < 4; i++) a[4 * j + i] = 0.f;
        for (int i = 0; i < 2; i++) {
            const float v = small_int();
            a[4 * j + p[i]] = v;
            vals[2 * j + i] = to_bf16(v);
        }
        words[j / 8] |= (uint32_t)(p[0] | p[1] << 2) << (4 * (j % 8));
    }
}
