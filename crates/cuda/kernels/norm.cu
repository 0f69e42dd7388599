// RMSNorm, alone and after a residual add: one warp per row.
//
// The CPU (vllm_rs_kernels::ops::inv_rms) sums squares in eight lane accumulators over the row
// in steps of 8, adds the eight in order, then the tail one by one. Lanes 0..7 of the warp own
// those eight accumulators here; that is a chain of dim/8 dependent adds (about a microsecond
// at dim 4096), the price of giving the CPU's bits. Rows are independent: batch-invariant.
#include "common.cuh"

#define ROWS_PER_BLOCK 4

// 1 / sqrt(mean(x²) + eps) of one row, in every lane of the warp.
__device__ float inv_rms_warp(const float* x, int dim, float eps) {
    int lane = threadIdx.x & 31;
    int k8 = dim / 8 * 8;
    float acc = 0.0f;
    if (lane < 8) {
        for (int i = lane; i < k8; i += 8) acc = acc + x[i] * x[i];
    }
    float s = __shfl_sync(FULL_MASK, acc, 0);
    for (int l = 1; l < 8; l++) s = s + __shfl_sync(FULL_MASK, acc, l);
    for (int i = k8; i < dim; i++) s = s + x[i] * x[i];
    return 1.0f / sqrtf(s / (float)dim + eps);
}

// x[r] = x[r] / rms(x[r]) * (offset + w), in place, for `rows` rows of `dim`.
extern "C" __global__ void rms_norm_f32(float* x, const float* w, int rows, int dim, float eps, float offset) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= rows) return;  // whole warps leave together
    float* xr = x + (u64)row * dim;
    float inv = inv_rms_warp(xr, dim, eps);
    __syncwarp();  // every lane has read the row before any lane overwrites it
    for (int i = threadIdx.x & 31; i < dim; i += 32) xr[i] = (xr[i] * inv) * (offset + w[i]);
}

// h += y, then x = RMSNorm(h), row by row (ops::add_rms_norm_rows).
extern "C" __global__ void add_rms_norm_f32(float* h, const float* y, float* x, const float* w, int rows, int dim,
                                            float eps, float offset) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= rows) return;
    float* hr = h + (u64)row * dim;
    const float* yr = y + (u64)row * dim;
    float* xr = x + (u64)row * dim;
    for (int i = threadIdx.x & 31; i < dim; i += 32) hr[i] = hr[i] + yr[i];
    __syncwarp();
    float inv = inv_rms_warp(hr, dim, eps);
    for (int i = threadIdx.x & 31; i < dim; i += 32) xr[i] = (hr[i] * inv) * (offset + w[i]);
}
