//! Developer tool: batch-1 matmul (decode) speed per weight format, as bytes of weights read per
//! second, over enough matrices that they do not fit in the caches (as in a model's decode step).
//! Compare with `membw` (the DRAM roof).
//!
//! `cargo run --release -p vllm-rs-kernels --example gemv -- TYPE [THREADS] [ROWS] [COLS] [M]`
//! TYPE is a GGUF type id (0 f32, 1 f16, 30 bf16, 3 Q4_1, 6 Q5_0, 8 Q8_0, 12 Q4_K, …);
//! defaults: 2 threads, 1536 × 576 matrices (SmolLM2's MLP), M = 1 activation row.
//! `GEMV_BF16=1` runs dense types in the bf16 compute mode (`--dtype bfloat16`), `GEMV_INT8=1`
//! quantized types with int8 activations (`--activation-bits 8`).
use std::time::Instant;
use vllm_rs_kernels::{GgmlType, bf16_matmul, matmul, pool, quant_act, testing};

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let ty = GgmlType::from_id(*args.first().expect("TYPE (a GGUF type id)") as u32).expect("a known type");
    let threads = args.get(1).copied().unwrap_or(2);
    let (rows, cols) = (args.get(2).copied().unwrap_or(1536), args.get(3).copied().unwrap_or(576));
    let m = args.get(4).copied().unwrap_or(1);
    pool::init_global(threads);
    if std::env::var_os("GEMV_BF16").is_some() {
        bf16_matmul::set_dense_compute(bf16_matmul::DenseCompute::Bf16);
    }
    if std::env::var_os("GEMV_INT8").is_some() {
        quant_act::set_activation_bits(quant_act::ActBits::Int8);
    }
    let one = ty.bytes_for(rows * cols).expect("whole blocks");
    // 256 MiB of weights or more (GEMV_MIB overrides: a small total measures in-cache speed).
    let mib: usize = std::env::var("GEMV_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let count = (mib << 20) / one + 1;
    let ws: Vec<_> = (0..count).map(|s| testing::quantize_random(ty, rows, cols, s as u64).for_matmul()).collect();
    let x = testing::rand_vec(m * cols, 7);
    let mut out = vec![0f32; m * rows];
    // GEMV_PASSES: more passes make the fastest one steadier on a noisy machine.
    let passes: usize = std::env::var("GEMV_PASSES").ok().and_then(|v| v.parse().ok()).unwrap_or(11);
    let mut times: Vec<f64> = (0..passes)
        .map(|_| {
            let t0 = Instant::now();
            for w in &ws {
                matmul::matmul(&x, m, w, &mut out);
            }
            t0.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let best = times[times.len() / 2]; // the median pass
    let bytes = (one * count) as f64;
    println!(
        "{} {rows}x{cols} m={m}, {threads} threads: {:.1} GB/s of weights, {:.1} us per matrix (median of {passes} passes; \
         fastest {:.1} us)",
        ty.name(),
        bytes / best / 1e9,
        best / count as f64 * 1e6,
        times[0] / count as f64 * 1e6
    );
}
