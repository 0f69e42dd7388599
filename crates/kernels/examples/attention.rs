//! Developer tool: decode attention at a long context, alone (no weights). One request's query
//! (Qwen2.5-0.5B's shape by default: 14 heads, 2 kv heads, head size 64) against `CONTEXT`
//! cached tokens in every one of `LAYERS` layers, whose blocks are scattered in the cache as a
//! serving engine's are; the layers' K/V together outgrow the last-level cache, as in a real
//! decode step. Prints ms per step and the K/V bytes read per second (each read once is the
//! roof: bytes / DRAM bandwidth, see the `membw` example). One layer (its K/V stay in cache
//! between steps) gives the kernel's speed without DRAM.
//!
//! `cargo run --release -p vllm-rs-kernels --example attention -- [CONTEXT] [LAYERS] [HEADS] [KV_HEADS] [HEAD_DIM]`
//! (defaults 3000, 24, 14, 2, 64; env SPREAD: the cache is that many times the request's blocks, 8;
//! env QUERIES: new tokens a step, 1)
use std::time::Instant;
use vllm_rs_kernels::attention::{AttentionParams, KvCache, KvDtype, SeqAttention, paged_attention};
use vllm_rs_kernels::testing::rand_vec;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let arg = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
    let (context, layers, heads, kv_heads, hd) = (arg(0, 3000), arg(1, 24), arg(2, 14), arg(3, 2), arg(4, 64));
    let bs = 16;
    let blocks = context.div_ceil(bs);
    // Logical block b sits at a pseudo-random physical block of a cache SPREAD times larger
    // (a serving engine's cache holds many requests' blocks; its request's are far apart).
    let spread = std::env::var("SPREAD").map_or(8, |s| s.parse().expect("SPREAD: a number"));
    let mut table: Vec<u32> = (0..(blocks * spread) as u32).collect();
    let mut x = 12345u64;
    for i in (1..table.len()).rev() {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        table.swap(i, (x >> 33) as usize % (i + 1));
    }
    table.truncate(blocks);
    let mut cache = KvCache::new(layers, blocks * spread, bs, kv_heads, hd, KvDtype::F32);
    let slots: Vec<usize> = (0..context).map(|p| table[p / bs] as usize * bs + p % bs).collect();
    let row = kv_heads * hd;
    for l in 0..layers {
        let (k, v) = (rand_vec(context * row, 2 * l as u64), rand_vec(context * row, 2 * l as u64 + 1));
        cache.write(l, &slots, &k, &v);
    }
    let params = AttentionParams {
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        sliding_window: None,
        softcap: None,
        sinks: None,
    };
    // QUERIES new tokens a step (1: decode; k + 1: a speculative step's verification).
    let queries = std::env::var("QUERIES").map_or(1, |s| s.parse().expect("QUERIES: a number"));
    let q = rand_vec(queries * heads * hd, 7);
    let mut out = vec![0f32; queries * heads * hd];
    let seq = [SeqAttention { query_start: 0, query_len: queries, seq_len: context, block_table: &table }];
    let step = |out: &mut [f32]| (0..layers).for_each(|l| paged_attention(&q, cache.layer(l), bs, &seq, &params, out));
    step(&mut out);
    let mut times = Vec::new();
    let iters = std::env::var("ITERS").map_or(15, |s| s.parse().expect("ITERS: a number"));
    for _ in 0..iters {
        let t0 = Instant::now();
        step(&mut out);
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let bytes = (2 * layers * context * row * 4) as f64;
    println!(
        "context {context}, {queries} queries, {layers} layers, {heads}/{kv_heads} heads of {hd}: {:.3} ms a step (median of {iters}), K/V {:.1} MB at {:.1} GB/s",
        median * 1e3,
        bytes / 1e6,
        bytes / median / 1e9
    );
}
