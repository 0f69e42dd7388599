// Rotary embeddings over token rows (ops::rope): one thread per rotated pair.
//
// cos/sin come from the host's RopeTable (one row of `half` values per token, computed in f64
// and rounded, as on the CPU), so the rotation is two products and a sum per value, the same
// operations as the CPU's.
#include "common.cuh"

// x: `rows` rows of `row_len` floats, each `row_len / head_dim` heads; row t takes row t of
// the tables. interleaved: pairs (2i, 2i+1) (llama.cpp's GGUF layout), else (i, i + half).
extern "C" __global__ void rope_f32(float* x, const float* cos, const float* sin, int rows, int row_len,
                                    int head_dim, int half, int interleaved) {
    int heads = row_len / head_dim;
    u64 n = (u64)rows * heads * half;
    u64 idx = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    int i = (int)(idx % half);
    u64 head = idx / half;  // over all rows
    u64 t = head / heads;
    float* hp = x + t * row_len + (head % heads) * head_dim;
    int a = interleaved ? 2 * i : i;
    int b = interleaved ? 2 * i + 1 : i + half;
    float c = cos[t * half + i], s = sin[t * half + i];
    float x0 = hp[a], x1 = hp[b];
    hp[a] = x0 * c - x1 * s;
    hp[b] = x1 * c + x0 * s;
}
