//! `--device auto|cpu|cuda`: where the model runs.
//!
//! `cuda` runs the model's matmuls and attention on the first GPU, with the weights and the K/V
//! cache in its memory (crates/cuda, built into the binary with `--features cuda`); the other
//! ops run on the CPU. It stops start-up, saying why, where that cannot be done. `auto` takes
//! the GPU when one is found and usable, else the CPU, and says which: a run never lands on the
//! CPU silently when a GPU was there.

use anyhow::{Result, anyhow, bail};
use tracing::{info, warn};
use vllm_rs_cuda::Probe;

/// Chooses the process's backend; call once, before the model is loaded.
pub fn select(device: &str) -> Result<()> {
    match device {
        "cpu" => Ok(()),
        "auto" => {
            // Without the cuda feature there is nothing to ask (and nothing to load).
            if vllm_rs_cuda::BUILT_WITH_CUDA {
                match vllm_rs_cuda::probe() {
                    Probe::Found(_) => match vllm_rs_cuda::run_on_gpu(0) {
                        Ok(name) => log_gpu("--device auto", name),
                        Err(e) => warn!("--device auto: the GPU cannot be used ({e}); running on the CPU"),
                    },
                    other => info!("--device auto: running on the CPU ({other})"),
                }
            }
            Ok(())
        }
        "cuda" => {
            let name =
                vllm_rs_cuda::run_on_gpu(0).map_err(|e| anyhow!("--device cuda: {e}. Use --device cpu or auto"))?;
            log_gpu("--device cuda", name);
            Ok(())
        }
        other => bail!("--device {other}: expected auto, cpu or cuda"),
    }
}

fn log_gpu(flag: &str, name: &str) {
    info!(
        "{flag}: running on {name}: matmuls and attention on the GPU (weights and the K/V cache in its memory), \
         the other ops on the CPU"
    );
}
