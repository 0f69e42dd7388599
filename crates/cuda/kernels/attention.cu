// Paged attention over the KV cache (attention::paged_attention): one block per (request,
// query head), the request's query rows one after another (one for decode).
//
// Cache layout as on the CPU: a tensor of num_blocks · block_size slots, slot s holding one
// position's row of num_kv_heads · head_dim elements (f32, f16 or bf16); position p of a
// request is slot block_table[p / block_size] · block_size + p % block_size.
//
// The CPU's order for one query, kept here: scores over positions in order, each the dot of
// matmul::scalar_dot_of (eight lane accumulators, hsum8, tail) times scale; softmax as
// ops::softmax_sink_on (max, the CPU's exp, one sequential sum, the sink's term last, times
// 1/sum); the output acc[d] = fma(w_p, v_p[d], acc[d]) over positions in order. The sequential
// sum and the value loop are chains as long as the sequence; no split over positions, so a
// request's result is the same in any batch.
#include "common.cuh"

#define THREADS 128

template <int T>
__device__ void paged_attention(const float* q, const u8* k_cache, const u8* v_cache, const u32* block_tables,
                                int max_blocks, const u32* query_start, const u32* query_len, const u32* seq_lens,
                                int num_heads, int num_kv_heads, int head_dim, int block_size, float scale,
                                int window, const float* sinks, float* scores, int max_seq_len, float* out) {
    __shared__ float red[THREADS];
    __shared__ float inv_sum;
    int s = blockIdx.x, h = blockIdx.y;
    int kvh = h / (num_heads / num_kv_heads);
    const u32* table = block_tables + (u64)s * max_blocks;
    int seq_len = seq_lens[s], qlen = query_len[s];
    u64 row = (u64)num_kv_heads * head_dim;  // elements per slot
    float* sc = scores + ((u64)s * num_heads + h) * max_seq_len;
    int group = threadIdx.x / 8, lane = threadIdx.x & 7;
    int hd8 = head_dim / 8 * 8;
    for (int r = 0; r < qlen; r++) {
        int pos = seq_len - qlen + r;
        int first = (window > 0 && pos + 1 > window) ? pos + 1 - window : 0;
        int n = pos + 1 - first;
        u64 tok = query_start[s] + r;
        const float* qh = q + (tok * num_heads + h) * head_dim;
        // Scores: a group of 8 lanes per position, lane l owning the CPU's accumulator l.
        for (int p0 = 0; p0 < n; p0 += THREADS / 8) {
            int i = p0 + group;
            float acc = 0.0f;
            const u8* kr = k_cache;
            if (i < n) {
                int p = first + i;
                u64 slot = (u64)table[p / block_size] * block_size + p % block_size;
                kr = k_cache + (slot * row + (u64)kvh * head_dim) * elem_size<T>();
                for (int e = lane; e < hd8; e += 8) acc = fmaf(qh[e], load1<T>(kr, e), acc);
            }
            float dot = hsum8_lanes(acc);
            if (i < n && lane == 0) {
                for (int e = hd8; e < head_dim; e++) dot = dot + qh[e] * load1<T>(kr, e);
                sc[i] = dot * scale;
            }
        }
        __syncthreads();
        // Max (exact in any order), the sink joining it.
        float sink = sinks ? sinks[h] : 0.0f;
        float mx = sinks ? sink : __uint_as_float(0xff800000u);
        for (int i = threadIdx.x; i < n; i += THREADS) mx = fmaxf(mx, sc[i]);
        red[threadIdx.x] = mx;
        __syncthreads();
        for (int w = THREADS / 2; w > 0; w /= 2) {
            if ((int)threadIdx.x < w) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + w]);
            __syncthreads();
        }
        mx = red[0];
        for (int i = threadIdx.x; i < n; i += THREADS) sc[i] = exp_cpu(sc[i] - mx);
        __syncthreads();
        if (threadIdx.x == 0) {
            float sum = 0.0f;
            for (int i = 0; i < n; i++) sum = sum + sc[i];
            if (sinks) sum = sum + exp_cpu(sink - mx);
            inv_sum = 1.0f / sum;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += THREADS) sc[i] = sc[i] * inv_sum;
        __syncthreads();
        // Values: a thread per output element, positions in order.
        for (int d = threadIdx.x; d < head_dim; d += THREADS) {
            float acc = 0.0f;
            for (int i = 0; i < n; i++) {
                int p = first + i;
                u64 slot = (u64)table[p / block_size] * block_size + p % block_size;
                acc = fmaf(sc[i], load1<T>(v_cache, slot * row + (u64)kvh * head_dim + d), acc);
            }
            out[(tok * num_heads + h) * head_dim + d] = acc;
        }
        __syncthreads();  // the next query row reuses sc and red
    }
}

#define PAGED_ATTENTION(NAME, T)                                                                            \
    extern "C" __global__ void NAME(const float* q, const u8* k_cache, const u8* v_cache,                   \
                                    const u32* block_tables, int max_blocks, const u32* query_start,        \
                                    const u32* query_len, const u32* seq_lens, int num_heads,               \
                                    int num_kv_heads, int head_dim, int block_size, float scale, int window, \
                                    const float* sinks, float* scores, int max_seq_len, float* out) {       \
        paged_attention<T>(q, k_cache, v_cache, block_tables, max_blocks, query_start, query_len, seq_lens, \
                           num_heads, num_kv_heads, head_dim, block_size, scale, window, sinks, scores,     \
                           max_seq_len, out);                                                               \
    }
PAGED_ATTENTION(paged_attention_f32, T_F32)
PAGED_ATTENTION(paged_attention_f16, T_F16)
PAGED_ATTENTION(paged_attention_bf16, T_BF16)
