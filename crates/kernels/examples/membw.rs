//! Developer tool: DRAM read bandwidth, the roof of batch-1 decode (every weight read once per
//! token). Each thread sums its own slice of a buffer far larger than the caches, five times,
//! reading `STREAMS` far-apart parts of its slice side by side: one sequential stream per thread
//! reached ~16 GB/s on two threads here, four or more ~28 GB/s (the memory-level parallelism
//! the packed kernels' four row bands give decode).
//!
//! `cargo run --release -p vllm-rs-kernels --example membw -- [THREADS] [MiB] [STREAMS]`
//! (defaults 2, 512, 4)
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let threads = args.first().copied().unwrap_or(2).max(1);
    let mib = args.get(1).copied().unwrap_or(512);
    let streams = args.get(2).copied().unwrap_or(4).max(1);
    let words = mib << 17; // u64 words in `mib` MiB
    let buf: Vec<u64> = (0..words as u64).collect();
    let per = words / threads;
    const PASSES: usize = 5;
    let t0 = Instant::now();
    let total: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = buf
            .chunks(per)
            .map(|part| s.spawn(move || (0..PASSES).fold(0u64, |a, _| a.wrapping_add(sum(part, streams)))))
            .collect();
        handles.into_iter().fold(0u64, |a, h| a.wrapping_add(h.join().expect("reader thread")))
    });
    let secs = t0.elapsed().as_secs_f64();
    let bytes = (PASSES * words * 8) as f64;
    println!(
        "{threads} threads x {streams} streams, {mib} MiB x {PASSES}: {:.1} GB/s (checksum {total})",
        bytes / secs / 1e9
    );
}

/// Sum of `part`, read as `streams` interleaved sequential streams (8 words of each in turn).
fn sum(part: &[u64], streams: usize) -> u64 {
    let len = part.len() / streams / 8 * 8;
    let parts: Vec<&[u64]> = (0..streams).map(|s| &part[s * len..(s + 1) * len]).collect();
    let mut acc = [0u64; 8];
    for i in (0..len).step_by(8) {
        for p in &parts {
            for (a, &x) in acc.iter_mut().zip(&p[i..i + 8]) {
                *a = a.wrapping_add(x);
            }
        }
    }
    acc.iter().fold(0, |a, &b| a.wrapping_add(b))
}
