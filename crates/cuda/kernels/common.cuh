#pragma once
// Shared by every kernel file (NVRTC gets it as a header: no CUDA toolkit, no system headers).
//
// The kernels are compiled with --fmad=false: a product followed by a sum stays two roundings,
// as in the Rust code, and a fused multiply-add is written as fmaf() exactly where the Rust
// reference calls mul_add. With IEEE division and square root (NVRTC's defaults, spelled out by
// scripts/build_ptx.py) every kernel can then follow its CPU reference's arithmetic operation by
// operation, and the reductions below keep the CPU's association, so a GPU result is expected to
// be the CPU scalar tier's bits (the check program reports whether it is).

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef short i16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;

#define FULL_MASK 0xffffffffu

// Element types of dense rows and KV caches, numbered as the Rust side numbers them
// (`vllm_rs_kernels::matmul::load1`).
#define T_F32 0
#define T_F16 1
#define T_BF16 2

#ifdef __CUDA_ARCH__
__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// Round to nearest even, as half::f16::from_f32.
__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#else
// The CPU emulator (crates/cuda/emulator) compiles these files as C++: the same conversions
// without PTX.
__device__ __forceinline__ float f16_to_f32(u16 h) { return emu_f16_to_f32(h); }
__device__ __forceinline__ u16 f32_to_f16(float f) { return emu_f32_to_f16(f); }
#endif

__device__ __forceinline__ float bf16_to_f32(u16 b) { return __uint_as_float((u32)b << 16); }

// Round to nearest even, NaN kept quiet: half::bf16::from_f32's rule.
__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}

// Element i of a row of type T at p, widened to f32 (exact).
template <int T>
__device__ __forceinline__ float load1(const u8* p, u64 i) {
    if (T == T_F32) return ((const float*)p)[i];
    if (T == T_F16) return f16_to_f32(((const u16*)p)[i]);
    return bf16_to_f32(((const u16*)p)[i]);
}

template <int T>
__device__ __forceinline__ void store1(u8* p, u64 i, float v) {
    if (T == T_F32) ((float*)p)[i] = v;
    else if (T == T_F16) ((u16*)p)[i] = f32_to_f16(v);
    else ((u16*)p)[i] = f32_to_bf16(v);
}

template <int T>
__device__ __forceinline__ int elem_size() { return T == T_F32 ? 4 : 2; }

// A little-endian f16 at a 2-byte aligned address.
__device__ __forceinline__ float f16_at(const u8* p) { return f16_to_f32(*(const u16*)p); }

// vllm_rs_kernels::ops::exp: e^x within 2 ulp, the same operations in the same order (and so
// the same bits) as the CPU's scalar and SIMD versions.
__device__ __forceinline__ float exp_cpu(float x) {
    // clamp() as Rust's f32::clamp: a NaN passes through.
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float LOG2E = 1.44269504088896340736f;
    const float LN2_HI = 0.6933594f;
    const float LN2_LO = -2.1219444e-4f;
    float n = rintf(x * LOG2E);
    float r = fmaf(n, -LN2_LO, fmaf(n, -LN2_HI, x));
    float p = 1.0f / 5040.0f;
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(fmaf(p, r, 1.0f), r, 1.0f);
    return p * __uint_as_float((u32)((int)n + 127) << 23);
}

// The sum of the values of 8 consecutive lanes (lane 0 of the group first) in the association
// of the CPU's hsum8: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)). Every lane of the group gets it.
// All 32 lanes of the warp must call it.
__device__ __forceinline__ float hsum8_lanes(float a) {
    a = a + __shfl_xor_sync(FULL_MASK, a, 4, 8);
    a = a + __shfl_xor_sync(FULL_MASK, a, 2, 8);
    return a + __shfl_xor_sync(FULL_MASK, a, 1, 8);
}

// The CPU's hsum16 over 16 consecutive lanes: lanes l and l+8 first, then hsum8.
__device__ __forceinline__ float hsum16_lanes(float a) {
    a = a + __shfl_xor_sync(FULL_MASK, a, 8, 16);
    return hsum8_lanes(a);
}
