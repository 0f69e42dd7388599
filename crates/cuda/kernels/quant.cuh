#pragma once
// The two GGUF block formats the GPU reads so far (layouts: vllm_rs_kernels::ggml), as the
// CPU's panel sees them (vllm_rs_kernels::qpanel): per group of 32 elements, int values `q`,
// a scale `vscale` and, for Q4_K, a minimum coefficient `mcoef`, so that w = vscale·q + mcoef.

#define Q8_0_BYTES 34  // f16 d, 32 × i8
#define Q4K_BYTES 144  // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
#define QK_K 256

// Scale and min of sub-block j of a Q4_K / Q5_K super-block (ggml::scale_min_k4).
__device__ __forceinline__ void scale_min_k4(int j, const u8* q, int& sc, int& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Group g (32 elements) of a Q8_0 row: its 32 values and scale.
__device__ __forceinline__ void q8_0_group(const u8* row, int g, int* q, float& vscale) {
    const u8* b = row + (u64)g * Q8_0_BYTES;
    vscale = f16_at(b);
    const u16* qs = (const u16*)(b + 2);  // blocks are 2-byte aligned
#pragma unroll
    for (int t = 0; t < 16; t++) {
        u16 two = qs[t];
        q[2 * t] = (int)(i8)(two & 0xFF);
        q[2 * t + 1] = (int)(i8)(two >> 8);
    }
}

// Group g (sub-block g % 8 of super-block g / 8) of a Q4_K row.
__device__ __forceinline__ void q4k_group(const u8* row, int g, int* q, float& vscale, float& mcoef) {
    const u8* b = row + (u64)(g / 8) * Q4K_BYTES;
    int j = g % 8;
    int sc, m;
    scale_min_k4(j, b + 4, sc, m);
    vscale = f16_at(b) * (float)sc;
    mcoef = -(f16_at(b + 2) * (float)m);
    // Sub-blocks 2i and 2i+1 share 32 bytes: low nibbles, then high nibbles.
    const u32* qs = (const u32*)(b + 16 + (j / 2) * 32);  // 16-byte aligned
    int shift = (j & 1) * 4;
#pragma unroll
    for (int t = 0; t < 8; t++) {
        u32 four = qs[t];
#pragma unroll
        for (int s = 0; s < 4; s++) q[4 * t + s] = (int)((four >> (8 * s + shift)) & 0xF);
    }
}
