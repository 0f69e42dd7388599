// Greedy sampling: the index of each row's largest logit, the first on ties (ops::argmax).
#include "common.cuh"

#define ARGMAX_THREADS 256

// (value, index) of the better of two candidates; index < 0 is "none".
__device__ __forceinline__ void better(float& v, int& i, float v2, int i2) {
    if (i2 < 0) return;
    if (i < 0 || v2 > v || (v2 == v && i2 < i)) {
        v = v2;
        i = i2;
    }
}

// One block per row. NaNs are never chosen, except that a NaN first logit is kept (the CPU's
// scan starts from index 0 and nothing compares greater than a NaN): the scan's answer in
// every case.
extern "C" __global__ void argmax_f32(const float* logits, int vocab, u32* out) {
    __shared__ float sv[ARGMAX_THREADS];
    __shared__ int si[ARGMAX_THREADS];
    const float* x = logits + (u64)blockIdx.x * vocab;
    float v = 0.0f;
    int idx = -1;
    for (int j = threadIdx.x; j < vocab; j += ARGMAX_THREADS) {
        float xj = x[j];
        if (xj == xj && (idx < 0 || xj > v)) {
            v = xj;
            idx = j;
        }
    }
    sv[threadIdx.x] = v;
    si[threadIdx.x] = idx;
    __syncthreads();
    for (int s = ARGMAX_THREADS / 2; s > 0; s /= 2) {
        if ((int)threadIdx.x < s) {
            float a = sv[threadIdx.x];
            int ai = si[threadIdx.x];
            better(a, ai, sv[threadIdx.x + s], si[threadIdx.x + s]);
            sv[threadIdx.x] = a;
            si[threadIdx.x] = ai;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        bool first_nan = !(x[0] == x[0]);
        out[blockIdx.x] = (first_nan || si[0] < 0) ? 0u : (u32)si[0];
    }
}
