//! `--device auto|cpu|cuda`: where the model runs.
//!
//! The engine runs on the CPU only so far. The CUDA kernels exist (crates/cuda, built into the
//! binary with `--features cuda`), but the model layers reach the hardware through the kernels'
//! `Backend` trait on host buffers, and no backend keeps tensors on a GPU yet (issue 31). So
//! `cuda` stops start-up saying what is missing on this machine and in this binary, and `auto`
//! takes the CPU, saying why when a GPU is there: a run never lands on the CPU silently when a
//! GPU was asked for.

use anyhow::{Result, bail};
use tracing::info;
use vllm_rs_cuda::Probe;

pub fn select(device: &str) -> Result<()> {
    match device {
        "cpu" => Ok(()),
        "auto" => {
            // Without the cuda feature there is nothing to ask (and nothing to load).
            if vllm_rs_cuda::BUILT_WITH_CUDA {
                match vllm_rs_cuda::probe() {
                    found @ Probe::Found(_) => {
                        info!("--device auto: {found} found; running on the CPU (the engine does not run on a GPU yet)")
                    }
                    other => info!("--device auto: running on the CPU ({other})"),
                }
            }
            Ok(())
        }
        "cuda" => {
            let probe = vllm_rs_cuda::probe();
            let here = match &probe {
                Probe::Found(_) => format!("the GPU is there ({probe}) and the kernels are built in"),
                Probe::NotBuilt => format!("besides, {probe}"),
                other => format!("besides, on this machine: {other}"),
            };
            bail!(
                "--device cuda: the engine does not run on a GPU yet: the CUDA kernels exist (crates/cuda) but the model \
                 layers have no GPU backend that keeps weights and the KV cache in device memory (issue 31); {here}. \
                 Use --device cpu or auto"
            )
        }
        other => bail!("--device {other}: expected auto, cpu or cuda"),
    }
}
