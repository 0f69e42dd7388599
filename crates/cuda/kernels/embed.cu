// Embedding lookup: rows `ids` of a table in its stored format, dequantized as the CPU's scalar
// reference (ggml::dequantize) and times `scale` when it is not 1 (Backend::embedding).
#include "common.cuh"
#include "quant.cuh"

// Element c of a row of format FMT (0..2: T_F32/T_F16/T_BF16, 8: Q8_0, 12: Q4_K, numbered as
// GGUF numbers them where they differ from the dense ones).
template <int FMT>
__device__ __forceinline__ float element(const u8* row, int c) {
    if (FMT == 8) {
        const u8* b = row + (u64)(c / 32) * Q8_0_BYTES;
        return (float)(i8)b[2 + c % 32] * f16_at(b);
    } else if (FMT == 12) {
        const u8* b = row + (u64)(c / QK_K) * Q4K_BYTES;
        int e = c % QK_K, blk = e / 64, l = e % 64, j = 2 * blk + (l >= 32);
        int sc, m;
        scale_min_k4(j, b + 4, sc, m);
        u8 byte = b[16 + blk * 32 + l % 32];
        int q = l < 32 ? (byte & 0xF) : (byte >> 4);
        return f16_at(b) * (float)sc * (float)q - f16_at(b + 2) * (float)m;
    } else {
        return load1<FMT>(row, c);
    }
}

// One block per id; out is ids × cols.
template <int FMT>
__device__ void embedding(const u8* table, u64 row_bytes, const u32* ids, int cols, float scale, float* out) {
    const u8* row = table + ids[blockIdx.x] * row_bytes;
    float* o = out + (u64)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = element<FMT>(row, c);
        o[c] = scale != 1.0f ? v * scale : v;
    }
}

#define EMBEDDING(NAME, FMT)                                                                            \
    extern "C" __global__ void NAME(const u8* table, u64 row_bytes, const u32* ids, int cols, float scale, \
                                    float* out) {                                                       \
        embedding<FMT>(table, row_bytes, ids, cols, scale, out);                                        \
    }
EMBEDDING(embedding_f32, T_F32)
EMBEDDING(embedding_f16, T_F16)
EMBEDDING(embedding_bf16, T_BF16)
EMBEDDING(embedding_q8_0, 8)
EMBEDDING(embedding_q4k, 12)
