//! Is there a GPU this binary can use? Asked without creating a CUDA context (cheap, and
//! nothing is allocated on the device).

use std::fmt;

/// One CUDA device.
#[derive(Clone, Debug)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    /// (major, minor), e.g. (9, 0) for an H100.
    pub compute_capability: (i32, i32),
    pub total_memory: usize,
}

impl fmt::Display for GpuInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = self.compute_capability;
        write!(f, "{} (sm_{major}{minor}, {:.0} GiB)", self.name, self.total_memory as f64 / (1u64 << 30) as f64)
    }
}

/// What [`probe`] found.
#[derive(Clone, Debug)]
pub enum Probe {
    /// The binary was built without the `cuda` feature.
    NotBuilt,
    /// No NVIDIA driver library (libcuda.so) could be loaded.
    NoDriver,
    /// The driver loaded but answered with an error (e.g. no device: CUDA_ERROR_NO_DEVICE).
    DriverError(String),
    /// The driver works and sees no device.
    NoDevice,
    Found(Vec<GpuInfo>),
}

impl Probe {
    /// The first GPU, if any.
    pub fn gpu(&self) -> Option<&GpuInfo> {
        match self {
            Probe::Found(gpus) => gpus.first(),
            _ => None,
        }
    }
}

impl fmt::Display for Probe {
    /// What was found, and for the failures what to do about it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Probe::NotBuilt => {
                write!(
                    f,
                    "this binary was built without CUDA support (rebuild with `cargo build --release --features cuda`)"
                )
            }
            Probe::NoDriver => write!(f, "no NVIDIA driver found (libcuda.so could not be loaded)"),
            Probe::DriverError(e) => {
                write!(f, "the NVIDIA driver reports {e} (is a GPU visible? CUDA_VISIBLE_DEVICES)")
            }
            Probe::NoDevice => write!(f, "the NVIDIA driver sees no GPU (CUDA_VISIBLE_DEVICES?)"),
            Probe::Found(gpus) => {
                let names: Vec<String> = gpus.iter().map(|g| format!("cuda:{} {g}", g.ordinal)).collect();
                write!(f, "{}", names.join(", "))
            }
        }
    }
}

/// Looks for CUDA devices.
pub fn probe() -> Probe {
    #[cfg(feature = "cuda")]
    return crate::gpu::probe();
    #[cfg(not(feature = "cuda"))]
    Probe::NotBuilt
}
