//! The groundwork of a CUDA backend (issue 31).
//!
//! Kernels are CUDA C (`kernels/*.cu`), compiled to PTX ahead of time by
//! `scripts/build_ptx.py` with NVRTC from PyPI; the PTX files are committed and embedded here,
//! so a build needs neither a CUDA toolkit nor Python. With the `cuda` feature they run through
//! cudarc, which loads the NVIDIA driver at run time: the same binary starts on machines without
//! one and reports it ([`probe`]). Without the feature this crate only reports that.
//!
//! Every kernel follows its CPU scalar reference's arithmetic (see `kernels/common.cuh`) and
//! keeps one reduction order whatever the batch; `check` compares each with that reference on
//! random data (`examples/cuda_check.rs` on a GPU machine, `scripts/gpu_check.sh`).
//!
//! [`Cuda`] is the engine's backend on a GPU: weights and the K/V cache in device memory, the
//! activations still on the host (README.md says what comes next).

mod probe;
pub use probe::{GpuInfo, Probe, probe};

#[cfg(feature = "cuda")]
mod backend;
#[cfg(feature = "cuda")]
pub mod check;
#[cfg(feature = "cuda")]
mod gpu;
#[cfg(feature = "cuda")]
mod ops;
#[cfg(feature = "cuda")]
pub use backend::{Cuda, GpuCounts};
#[cfg(feature = "cuda")]
pub use gpu::{Error, Gpu};
#[cfg(feature = "cuda")]
pub use ops::{DeviceActs, DeviceWeight, PagedBatch, TableExtent};

/// Whether this build has the CUDA runtime (the `cuda` feature).
pub const BUILT_WITH_CUDA: bool = cfg!(feature = "cuda");

/// Makes the CUDA backend on GPU `ordinal` the process's backend (every model workspace made
/// afterwards runs on it); returns its name. Refused, saying why, without the `cuda` feature,
/// without a usable GPU, or when a backend was already chosen.
pub fn run_on_gpu(ordinal: usize) -> Result<&'static str, String> {
    #[cfg(feature = "cuda")]
    {
        use vllm_rs_kernels::Backend;
        let cuda = Cuda::leak(Gpu::open(ordinal).map_err(|e| e.to_string())?);
        vllm_rs_kernels::backend::set_default(cuda)?;
        Ok(cuda.name())
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = ordinal;
        Err(Probe::NotBuilt.to_string())
    }
}

/// The embedded PTX modules: (name, text), written by `scripts/build_ptx.py`.
#[cfg(feature = "cuda")]
pub(crate) const PTX: [(&str, &str); 9] = [
    ("act", include_str!("../ptx/act.ptx")),
    ("argmax", include_str!("../ptx/argmax.ptx")),
    ("attention", include_str!("../ptx/attention.ptx")),
    ("dense", include_str!("../ptx/dense.ptx")),
    ("embed", include_str!("../ptx/embed.ptx")),
    ("kv_cache", include_str!("../ptx/kv_cache.ptx")),
    ("norm", include_str!("../ptx/norm.ptx")),
    ("qmatmul", include_str!("../ptx/qmatmul.ptx")),
    ("rope", include_str!("../ptx/rope.ptx")),
];
