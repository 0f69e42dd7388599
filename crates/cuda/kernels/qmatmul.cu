// out = x · Wᵀ for Q8_0 and Q4_K weights, with int16 activations: the CPU's exact mode
// (quant_act::QuantizedActs, qmatmul::dot_scalar).
//
// Activations are quantized per block of 32 (scale max|x|/32767, round half to even). One
// output's reduction, fixed whatever m: for each weight group g of 32 in order, the integer
// dot isum_g (exact), acc[g mod 16] = fma(isum_g, vscale_g · dx_g, acc[g mod 16]) and, with
// minimums, accm[g mod 16] = fma(mcoef_g, dx_g · Σq_x, accm[g mod 16]); the result is
// hsum16(acc) + hsum16(accm). Here 16 lanes own one weight row, lane l the accumulators of
// groups l, l+16, …, so the sixteen chains run side by side and hsum16 is a butterfly over the
// lanes. A lane unpacks a weight group once for MT activation rows.
#include "common.cuh"
#include "quant.cuh"

#define QA_BLOCK 32

// One warp per block of 32 activations: xq (m × k int16), xd and xdsum (m × k/32 floats).
extern "C" __global__ void quantize_acts(const float* x, u64 blocks, i16* xq, float* xd, float* xdsum) {
    u64 b = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (b >= blocks) return;  // whole warps leave together
    int lane = threadIdx.x & 31;
    float v = x[b * QA_BLOCK + lane];
    float amax = fabsf(v);
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(FULL_MASK, amax, o));
    float d = amax > 0.0f ? amax / 32767.0f : 0.0f;
    float id = amax > 0.0f ? 32767.0f / amax : 0.0f;
    float r = rintf(v * id);
    r = r < -32767.0f ? -32767.0f : (r > 32767.0f ? 32767.0f : r);
    int q = (int)r;
    xq[b * QA_BLOCK + lane] = (i16)q;
    int sum = q;
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(FULL_MASK, sum, o);
    if (lane == 0) {
        xd[b] = d;
        xdsum[b] = d * (float)sum;
    }
}

#define ROWS 8  // weight rows per block of 128 threads
#define MT 4    // activation rows per block

// FMT: 8 Q8_0, 12 Q4_K (GGUF's type numbers).
template <int FMT>
__device__ void qmatmul(const u8* w, u64 row_bytes, int n, int k, const i16* xq, const float* xd,
                        const float* xdsum, int m, float* out) {
    int lane = threadIdx.x & 15;
    int j = blockIdx.x * ROWS + threadIdx.x / 16;
    int i0 = blockIdx.y * MT;
    int groups = k / QA_BLOCK;
    float acc[MT], accm[MT];
#pragma unroll
    for (int i = 0; i < MT; i++) acc[i] = accm[i] = 0.0f;
    if (j < n) {
        const u8* row = w + (u64)j * row_bytes;
        for (int g = lane; g < groups; g += 16) {
            int q[32];
            float vscale, mcoef = 0.0f;
            if (FMT == 8) q8_0_group(row, g, q, vscale);
            else q4k_group(row, g, q, vscale, mcoef);
#pragma unroll
            for (int i = 0; i < MT; i++) {
                if (i0 + i >= m) break;
                u64 xg = (u64)(i0 + i) * groups + g;
                const int4* xv = (const int4*)(xq + xg * QA_BLOCK);  // 64-byte aligned
                int isum = 0;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    int4 v = xv[c];
                    int words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                    for (int h = 0; h < 4; h++) {
                        isum += q[8 * c + 2 * h] * (int)(i16)(words[h] & 0xFFFF);
                        isum += q[8 * c + 2 * h + 1] * (words[h] >> 16);
                    }
                }
                acc[i] = fmaf((float)isum, vscale * xd[xg], acc[i]);
                if (FMT == 12) accm[i] = fmaf(mcoef, xdsum[xg], accm[i]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < MT; i++) {
        float s = hsum16_lanes(acc[i]) + hsum16_lanes(accm[i]);
        if (j < n && lane == 0 && i0 + i < m) out[(u64)(i0 + i) * n + j] = s;
    }
}

#define QMATMUL(NAME, FMT)                                                                          \
    extern "C" __global__ void NAME(const u8* w, u64 row_bytes, int n, int k, const i16* xq,        \
                                    const float* xd, const float* xdsum, int m, float* out) {       \
        qmatmul<FMT>(w, row_bytes, n, k, xq, xd, xdsum, m, out);                                    \
    }
QMATMUL(qmatmul_q8_0, 8)
QMATMUL(qmatmul_q4k, 12)
