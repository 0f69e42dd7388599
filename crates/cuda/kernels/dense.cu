// out = x · Wᵀ for dense f32 / f16 / bf16 weights and f32 activations (matmul::matmul_dense).
//
// The CPU's reduction of one output (matmul::scalar_dot_of): eight lane accumulators over k
// in steps of 8, acc[l] = fma(x, w, acc[l]), summed by hsum8, then the tail one product at a
// time. Here a group of 8 lanes owns one weight row and lane l owns acc[l]; a group keeps
// MT activation rows' accumulators, so one read of a weight element serves MT rows (a simple
// register tile). No split over k: one output, one order, whatever m.
#include "common.cuh"

#define GROUPS 16  // weight rows per block of 128 threads
#define MT 4       // activation rows per block

template <int T>
__device__ void dense(const float* x, int m, int k, const u8* w, int n, float* out) {
    int lane = threadIdx.x & 7;
    int j = blockIdx.x * GROUPS + threadIdx.x / 8;
    int i0 = blockIdx.y * MT;
    bool live = j < n;  // dead groups still take part in the shuffles
    const u8* wr = w + (u64)(live ? j : 0) * k * elem_size<T>();
    int k8 = k / 8 * 8;
    float acc[MT];
#pragma unroll
    for (int i = 0; i < MT; i++) acc[i] = 0.0f;
    if (live) {
        for (int e = lane; e < k8; e += 8) {
            float wv = load1<T>(wr, e);
#pragma unroll
            for (int i = 0; i < MT; i++) {
                if (i0 + i < m) acc[i] = fmaf(x[(u64)(i0 + i) * k + e], wv, acc[i]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < MT; i++) {
        float s = hsum8_lanes(acc[i]);
        if (!live || lane != 0 || i0 + i >= m) continue;
        const float* xr = x + (u64)(i0 + i) * k;
        for (int e = k8; e < k; e++) s = s + xr[e] * load1<T>(wr, e);
        out[(u64)(i0 + i) * n + j] = s;
    }
}

#define DENSE(NAME, T)                                                                           \
    extern "C" __global__ void NAME(const float* x, int m, int k, const u8* w, int n, float* out) { \
        dense<T>(x, m, k, w, n, out);                                                            \
    }
DENSE(dense_f32, T_F32)
DENSE(dense_f16, T_F16)
DENSE(dense_bf16, T_BF16)
