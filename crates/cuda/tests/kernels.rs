//! The CUDA kernels against the CPU scalar reference (`vllm_rs_cuda::check`). Where there is
//! no GPU (CI) it says so and passes: it is still compiled, so the check program keeps building.

#[test]
fn cuda_kernels_match_the_cpu_reference() {
    let probe = vllm_rs_cuda::probe();
    if probe.gpu().is_none() {
        eprintln!("SKIPPED: no GPU ({probe}); scripts/gpu_check.sh runs these checks on a GPU machine");
        return;
    }
    let gpu = vllm_rs_cuda::Gpu::open(0).expect("opening the GPU");
    let results = vllm_rs_cuda::check::run(&gpu).expect("running the checks");
    for r in &results {
        eprintln!("{}", r.tsv());
    }
    let failed: Vec<&str> = results.iter().filter(|r| !r.passed).map(|r| r.name.as_str()).collect();
    assert!(failed.is_empty(), "failed on {}: {failed:?}", gpu.info);
}
