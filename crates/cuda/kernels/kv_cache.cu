// Writes a batch's K/V rows into their paged-cache slots (KvCache::write): slot s holds one
// position's row at element offset s · row, rounded to the cache's type.
#include "common.cuh"

// One thread per element of the `tokens × row` K (and V) values; v null for a cache without V
// rows (multi-head latent attention).
template <int T>
__device__ void write_kv(const float* k, const float* v, const u32* slot_mapping, u8* k_cache, u8* v_cache,
                         int tokens, int row) {
    u64 idx = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (u64)tokens * row) return;
    u64 t = idx / row, e = idx % row;
    u64 at = (u64)slot_mapping[t] * row + e;
    store1<T>(k_cache, at, k[idx]);
    if (v) store1<T>(v_cache, at, v[idx]);
}

#define WRITE_KV(NAME, T)                                                                                \
    extern "C" __global__ void NAME(const float* k, const float* v, const u32* slot_mapping, u8* k_cache, \
                                    u8* v_cache, int tokens, int row) {                                  \
        write_kv<T>(k, v, slot_mapping, k_cache, v_cache, tokens, row);                                  \
    }
WRITE_KV(write_kv_f32, T_F32)
WRITE_KV(write_kv_f16, T_F16)
WRITE_KV(write_kv_bf16, T_BF16)
