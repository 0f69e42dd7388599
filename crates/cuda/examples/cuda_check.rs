//! Runs every CUDA kernel against the CPU scalar reference (`vllm_rs_cuda::check`) and writes
//! the results to a folder: `results.tsv` (one line per check), `summary.txt`, `device.txt`.
//!
//!     cuda_check [--exact] [OUT_DIR]      (default: $OUT, else ./cuda-check)
//!
//! `--exact` also fails when any value's bits differ from the CPU's (the kernels follow the
//! CPU's operations, so none should; CI runs it so under the emulator, scripts/cuda_emulator.sh).
//! Exit status: 0 every check passed, 1 a check failed or CUDA failed, 2 no GPU (nothing run).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let exact = args.iter().any(|a| a == "--exact");
    let dir = args
        .into_iter()
        .find(|a| a != "--exact")
        .or_else(|| std::env::var("OUT").ok())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("cuda-check"));
    std::fs::create_dir_all(&dir).expect("creating the output folder");
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).expect("writing results");
    let probe = vllm_rs_cuda::probe();
    write("device.txt", &format!("{probe}\n"));
    if probe.gpu().is_none() {
        eprintln!("cuda_check: SKIPPED, no GPU: {probe}");
        write("summary.txt", &format!("SKIPPED: no GPU: {probe}\n"));
        std::process::exit(2);
    }
    let t0 = Instant::now();
    let results = vllm_rs_cuda::Gpu::open(0).and_then(|gpu| {
        let r = vllm_rs_cuda::check::run(&gpu)?;
        gpu.synchronize()?;
        Ok((gpu.info.clone(), r))
    });
    let (info, results) = match results {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cuda_check: FAILED: {e}");
            write("summary.txt", &format!("FAILED: {e}\n"));
            std::process::exit(1);
        }
    };
    let mut tsv = format!("{}\n", vllm_rs_cuda::check::CheckResult::TSV_HEADER);
    for r in &results {
        let _ = writeln!(tsv, "{}", r.tsv());
    }
    write("results.tsv", &tsv);
    let failed: Vec<&str> =
        results.iter().filter(|r| !r.passed || (exact && r.bits_differ > 0)).map(|r| r.name.as_str()).collect();
    let inexact = results.iter().filter(|r| r.bits_differ > 0).count();
    let mut summary = format!(
        "{info}: {} checks, {} failed, {inexact} not bit-identical to the CPU, {:.1} s\n",
        results.len(),
        failed.len(),
        t0.elapsed().as_secs_f64()
    );
    for f in &failed {
        let _ = writeln!(summary, "FAILED: {f}");
    }
    write("summary.txt", &summary);
    print!("{tsv}\n{summary}");
    std::process::exit(if failed.is_empty() { 0 } else { 1 });
}
