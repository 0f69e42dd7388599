//! Developer tool: DRAM read bandwidth, the roof of batch-1 decode (every weight read once per
//! token). Each thread sums its own slice of a buffer far larger than the caches, five times.
//!
//! `cargo run --release -p vllm-rs-kernels --example membw -- [THREADS] [MiB]` (defaults 2, 512)
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let threads = args.first().copied().unwrap_or(2).max(1);
    let mib = args.get(1).copied().unwrap_or(512);
    let words = mib << 17; // u64 words in `mib` MiB
    let buf: Vec<u64> = (0..words as u64).collect();
    let per = words / threads;
    const PASSES: usize = 5;
    let t0 = Instant::now();
    let total: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = buf
            .chunks(per)
            .map(|part| {
                s.spawn(move || {
                    (0..PASSES).fold(0u64, |acc, _| acc.wrapping_add(part.iter().fold(0u64, |a, &x| a.wrapping_add(x))))
                })
            })
            .collect();
        handles.into_iter().fold(0u64, |a, h| a.wrapping_add(h.join().expect("reader thread")))
    });
    let secs = t0.elapsed().as_secs_f64();
    let bytes = (PASSES * words * 8) as f64;
    println!("{threads} threads, {mib} MiB x {PASSES}: {:.1} GB/s (checksum {total})", bytes / secs / 1e9);
}
