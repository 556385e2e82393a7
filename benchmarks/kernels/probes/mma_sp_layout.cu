// Probe: which thread supplies which 2:4 metadata to mma.sp m16n8k32 (bf16) on this GPU, with the
// metadata words taken straight from the block format (hs_kernels.format: one nibble idx0 | idx1 << 2
// per group of 4 along the reduction axis, group g of a row at bits 4 (g % 8) of the row's 32-bit word
// g / 8). Prints, per hypothesis, the max |D - reference|; 0 means that layout is right.
//   nvcc -arch=sm_90 -o /tmp/mma_sp_layout benchmarks/kernels/probes/mma_sp_layout.cu && /tmp/mma_sp_layout
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>

static uint16_t to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16); }  // exact for small ints

// A: 16 x 32 dense with 2 kept per group of 4 (values vals[16][16], nibble per group nib[16][8]);
// B: 32 x 8 (column-major operand: b[n][k]); hypothesis h picks the metadata register of each lane.
__global__ void probe(const uint16_t* vals, const uint32_t* meta_words, const uint16_t* b, float* d, int h, bool ordered) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    uint32_t a[4], bb[4];
    // A fragment (16 x 16 compressed, as dense m16n8k16 A): rows g / g + 8, compressed columns 2t, 2t + 1 (+ 8)
    const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
    for (int i = 0; i < 4; i++)
        a[i] = vals[rows[i] * 16 + cols[i]] | (uint32_t)vals[rows[i] * 16 + cols[i] + 1] << 16;
    // B fragment (32 x 8): k = 2t, 2t + 1 (+ 8, 16, 24), n = g
    for (int i = 0; i < 4; i++)
        bb[i] = b[g * 32 + 2 * t + 8 * i] | (uint32_t)b[g * 32 + 2 * t + 8 * i + 1] << 16;
    // which lane of a quad plays "first" / "second" (the other two lanes repeat them, so selector 0 and
    // 1 read the same): H0, H1 pair lanes (0, 1) and (2, 3); H2, H3 pair lanes (0, 2) and (1, 3)
    int second = h < 2 ? t % 2 : t / 2;
    uint32_t lo = meta_words[g], hi = meta_words[g + 8], e;
    if (h % 2 == 0)  // H0 / H2: the first lane holds row g's word, the second row g + 8's
        e = second ? hi : lo;
    else  // H1 / H3: the first lane k 0-15 of rows g (low half) and g + 8 (high half), the second k 16-31
        e = second ? (lo >> 16) | (hi & 0xFFFF0000u) : (lo & 0xFFFFu) | (hi << 16);
    float c[4] = {0, 0, 0, 0};
    if (ordered)
        asm volatile(
            "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(bb[0]), "r"(bb[1]), "r"(bb[2]), "r"(bb[3]), "r"(e));
    else
        asm volatile(
            "mma.sp.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, "
            "{%0,%1,%2,%3}, %12, 0x0;\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(bb[0]), "r"(bb[1]), "r"(bb[2]), "r"(bb[3]), "r"(e));
    // C fragment: rows g / g + 8, columns 2t, 2t + 1
    d[g * 8 + 2 * t] = c[0];
    d[g * 8 + 2 * t + 1] = c[1];
    d[(g + 8) * 8 + 2 * t] = c[2];
    d[(g + 8) * 8 + 2 * t + 1] = c[3];
}

int main() {
    const int pairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
    float A[16][32] = {}, B[32][8], ref[16][8] = {};
    uint16_t vals[16 * 16], bt[8 * 32];
    uint32_t words[16] = {};
    srand(7);
    for (int r = 0; r < 16; r++)
        for (int grp = 0; grp < 8; grp++) {
            int p = rand() % 6, i0 = pairs[p][0], i1 = pairs[p][1];
            float v0 = (float)(rand() % 7 - 3), v1 = (float)(rand() % 7 - 3);
            A[r][4 * grp + i0] = v0;
            A[r][4 * grp + i1] = v1;
            vals[r * 16 + 2 * grp] = to_bf16(v0);
            vals[r * 16 + 2 * grp + 1] = to_bf16(v1);
            words[r] |= (uint32_t)(i0 | i1 << 2) << (4 * grp);
        }
    for (int k = 0; k < 32; k++)
        for (int n = 0; n < 8; n++) {
            B[k][n] = (float)(rand() % 5 - 2);
            bt[n * 32 + k] = to_bf16(B[k][n]);
        }
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++)
            for (int k = 0; k < 32; k++) ref[r][n] += A[r][k] * B[k][n];
    uint16_t *dv, *db;
    uint32_t* dm;
    float* dd;
    cudaMalloc(&dv, sizeof vals);
    cudaMalloc(&db, sizeof bt);
    cudaMalloc(&dm, sizeof words);
    cudaMalloc(&dd, 16 * 8 * 4);
    cudaMemcpy(dv, vals, sizeof vals, cudaMemcpyHostToDevice);
    cudaMemcpy(db, bt, sizeof bt, cudaMemcpyHostToDevice);
    cudaMemcpy(dm, words, sizeof words, cudaMemcpyHostToDevice);
    const char* names[4] = {"H0 lanes 0/1: row g / row g+8 words", "H1 lanes 0/1: k 0-15 / k 16-31 of rows g, g+8",
                            "H2 lanes 0/2: row g / row g+8 words", "H3 lanes 0/2: k 0-15 / k 16-31 of rows g, g+8"};
    for (int run = 0; run < 8; run++) {
        int h = run % 4;
        bool ordered = run >= 4;
        float out[16][8];
        cudaMemset(dd, 0xFF, 16 * 8 * 4);  // NaN: every element must be written
        probe<<<1, 32>>>(dv, dm, db, dd, h, ordered);
        cudaError_t err = cudaDeviceSynchronize();
        cudaMemcpy(out, dd, sizeof out, cudaMemcpyDeviceToHost);
        float worst = 0;
        for (int r = 0; r < 16; r++)
            for (int n = 0; n < 8; n++) worst = fmaxf(worst, isnan(out[r][n]) ? INFINITY : fabsf(out[r][n] - ref[r][n]));
        printf("%-18s %-48s max|D - ref| = %g  (%s)\n", ordered ? "sp::ordered_meta" : "sp", names[h], worst,
               cudaGetErrorString(err));
    }
    return 0;
}
