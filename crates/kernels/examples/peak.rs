//! Developer tool: the compute roof, as instructions a second per core of the dot products the
//! kernels are built on — `vpdpwssd` (the packed int16 kernels: 32 multiply-adds each),
//! `vpdpbusd` (their int8 mode, `--activation-bits 8`: 64 each) and
//! `vfmadd231ps` on zmm and ymm (the float kernels), `vdpbf16ps` (the bf16 mode: 32 bf16
//! multiply-adds), sixteen independent chains each; on AVX2, `vpmaddwd` ymm alone and with the
//! `vpaddd` that accumulates it (the AVX2 packed kernels' dot: 16 multiply-adds a pair), 14 and 6
//! independent chains — so that throughput, not latency, bounds them; and the clock, from a
//! chain of dependent `imul`s (three cycles each). Pairs with `membw` (the bandwidth roof): a kernel's roof is the larger of its
//! bytes over bandwidth and its instructions over these rates.
//!
//! `cargo run --release -p vllm-rs-kernels --example peak -- [THREADS]` (default 1; with more,
//! each thread runs the same loops at once and the rates are per thread).

fn main() {
    let threads: usize = std::env::args().nth(1).map_or(1, |a| a.parse().expect("THREADS: a number"));
    #[cfg(target_arch = "x86_64")]
    {
        let rates: Vec<[f64; 6]> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads.max(1)).map(|_| s.spawn(x86::rates)).collect();
            handles.into_iter().map(|h| h.join().expect("measuring thread")).collect()
        });
        let avx2: Vec<[f64; 3]> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads.max(1)).map(|_| s.spawn(x86::rates_avx2)).collect();
            handles.into_iter().map(|h| h.join().expect("measuring thread")).collect()
        });
        for (t, ([ghz, ..], [md, mda, fy])) in rates.iter().zip(&avx2).enumerate() {
            println!(
                "thread {t}: AVX2 G/s: vpmaddwd ymm {md:.2}, vpmaddwd + vpaddd ymm {mda:.2} (pairs), fma ymm {fy:.2} \
                 ({:.2}, {:.2}, {:.2} a cycle)",
                md / ghz,
                mda / ghz,
                fy / ghz
            );
        }
        for (t, [ghz, dp, fz, fy, bf, db]) in rates.iter().enumerate() {
            println!(
                "thread {t}: clock {ghz:.2} GHz; G/s: vpdpwssd zmm {dp:.2}, fma zmm {fz:.2}, fma ymm {fy:.2}, \
                 vdpbf16ps zmm {bf:.2}, vpdpbusd zmm {db:.2} ({:.2}, {:.2}, {:.2}, {:.2}, {:.2} a cycle)",
                dp / ghz,
                fz / ghz,
                fy / ghz,
                bf / ghz,
                db / ghz
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    println!("peak measures x86-64 instructions only ({threads} threads asked)");
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::time::Instant;

    const ITERS: u64 = 50_000_000;

    /// Instructions a second (in units of 1e9) of `body`, run `ITERS` times, each run `n`
    /// instructions.
    fn rate(n: u64, body: impl Fn()) -> f64 {
        let t0 = Instant::now();
        for _ in 0..ITERS {
            body();
        }
        (ITERS * n) as f64 / t0.elapsed().as_secs_f64() / 1e9
    }

    /// Registers 0–15, 30 and 31 zeroed (zero idioms, free at rename: no denormal operands in
    /// the float loops), then four times sixteen copies of one accumulating instruction (Intel
    /// syntax: destination first) into registers 0–15 from 30 and 31.
    macro_rules! body {
        ($op:literal, $r:literal) => {
            body!(@ $op, $r; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
        };
        (@ $op:literal, $r:literal; $($n:literal)*) => {
            concat!(
                $("vpxord xmm", $n, ", xmm", $n, ", xmm", $n, "\n",)*
                "vpxord xmm30, xmm30, xmm30\nvpxord xmm31, xmm31, xmm31\n",
                $($op, " ", $r, $n, ", ", $r, "30, ", $r, "31\n",)*
                $($op, " ", $r, $n, ", ", $r, "30, ", $r, "31\n",)*
                $($op, " ", $r, $n, ", ", $r, "30, ", $r, "31\n",)*
                $($op, " ", $r, $n, ", ", $r, "30, ", $r, "31\n",)*
            )
        };
    }

    /// `[vpmaddwd ymm, vpmaddwd + vpaddd ymm (pairs a second), fma ymm]` on this thread (VEX
    /// encodings, registers 0–15: what the AVX2 tier's int16 dots and float kernels issue);
    /// zeros where the CPU lacks AVX2/FMA.
    pub fn rates_avx2() -> [f64; 3] {
        if !(std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")) {
            return [0.0; 3];
        }
        macro_rules! go {
            ($n:literal, $body:expr) => {
                // SAFETY: register-only arithmetic on the registers named, declared clobbered; the
                // CPU has AVX2 and FMA (checked above).
                rate($n, || unsafe {
                    std::arch::asm!("vpxor xmm14, xmm14, xmm14", "vpxor xmm15, xmm15, xmm15", $body,
                        out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _, out("ymm4") _,
                        out("ymm5") _, out("ymm6") _, out("ymm7") _, out("ymm8") _, out("ymm9") _,
                        out("ymm10") _, out("ymm11") _, out("ymm12") _, out("ymm13") _, out("ymm14") _,
                        out("ymm15") _, options(nomem, nostack))
                })
            };
        }
        macro_rules! each {
            ($($n:literal)*) => { concat!($("vpmaddwd ymm", $n, ", ymm14, ymm15\n",)*) };
            (pair $($t:literal $a:literal)*) => {
                concat!($("vpmaddwd ymm", $t, ", ymm14, ymm15\nvpaddd ymm", $a, ", ymm", $a, ", ymm", $t, "\n",)*)
            };
            (fma $($n:literal)*) => { concat!($("vfmadd231ps ymm", $n, ", ymm14, ymm15\n",)*) };
        }
        [
            go!(
                56,
                concat!(
                    each!(0 1 2 3 4 5 6 7 8 9 10 11 12 13),
                    each!(0 1 2 3 4 5 6 7 8 9 10 11 12 13),
                    each!(0 1 2 3 4 5 6 7 8 9 10 11 12 13),
                    each!(0 1 2 3 4 5 6 7 8 9 10 11 12 13)
                )
            ),
            go!(12, concat!(each!(pair 0 6 1 7 2 8 3 9 4 10 5 11), each!(pair 0 6 1 7 2 8 3 9 4 10 5 11))),
            go!(
                56,
                concat!(
                    each!(fma 0 1 2 3 4 5 6 7 8 9 10 11 12 13),
                    each!(fma 0 1 2 3 4 5 6 7 8 9 10 11 12 13),
                    each!(fma 0 1 2 3 4 5 6 7 8 9 10 11 12 13),
                    each!(fma 0 1 2 3 4 5 6 7 8 9 10 11 12 13)
                )
            ),
        ]
    }

    /// `[GHz, vpdpwssd zmm, fma zmm, fma ymm, vdpbf16ps zmm, vpdpbusd zmm]` on this thread; the vector rates
    /// are zeros where the CPU lacks AVX-512 VNNI (the loops use registers 16–31 and EVEX
    /// encodings), `vdpbf16ps`'s where it lacks AVX512-BF16 (32 bf16 multiply-adds each).
    pub fn rates() -> [f64; 6] {
        // One chain through the whole loop (its counter runs alongside): three cycles an imul.
        let t0 = Instant::now();
        // SAFETY (all asm here): register-only arithmetic on the registers it names, which are
        // declared clobbered; the vector loops run only where the CPU has their instructions.
        unsafe {
            std::arch::asm!("2:", "imul {x}, {x}", "imul {x}, {x}", "imul {x}, {x}", "imul {x}, {x}", "dec {n}", "jnz 2b",
                x = inout(reg) 3u64 => _, n = inout(reg) ITERS => _, options(nomem, nostack))
        };
        let ghz = (3 * 4 * ITERS) as f64 / t0.elapsed().as_secs_f64() / 1e9;
        let avx512 = std::arch::is_x86_feature_detected!("avx512vnni");
        macro_rules! run {
            ($ok:expr, $op:literal, $r:literal) => {
                if $ok {
                    rate(64, || unsafe {
                        std::arch::asm!(body!($op, $r),
                            out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _, out("zmm4") _,
                            out("zmm5") _, out("zmm6") _, out("zmm7") _, out("zmm8") _, out("zmm9") _,
                            out("zmm10") _, out("zmm11") _, out("zmm12") _, out("zmm13") _, out("zmm14") _,
                            out("zmm15") _, out("zmm30") _, out("zmm31") _, options(nomem, nostack))
                    })
                } else {
                    0.0
                }
            };
        }
        let bf16 = avx512 && std::arch::is_x86_feature_detected!("avx512bf16");
        [
            ghz,
            run!(avx512, "vpdpwssd", "zmm"),
            run!(avx512, "vfmadd231ps", "zmm"),
            run!(avx512, "vfmadd231ps", "ymm"),
            run!(bf16, "vdpbf16ps", "zmm"),
            run!(avx512, "vpdpbusd", "zmm"),
        ]
    }
}
