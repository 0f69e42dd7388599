//! A CUDA device with the embedded kernels loaded.

use crate::probe::{GpuInfo, Probe};
use cudarc::driver::sys::{CUdevice_attribute, cudaError_enum};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, DriverError, result};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// A failed CUDA call, with what it was doing and, where the fix is known, what to do.
#[derive(Debug)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl Error {
    pub(crate) fn driver(what: &str, e: DriverError) -> Error {
        let hint = match e.0 {
            cudaError_enum::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => {
                ": the driver is older than the PTX (NVRTC 12.4, PTX ISA 8.4); update the NVIDIA driver to 550 or newer"
            }
            cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY => ": out of GPU memory",
            _ => "",
        };
        Error(format!("{what}: {e}{hint}"))
    }
}

/// `result.map_err(|e| Error::driver(what, e))`.
pub(crate) trait Context<T> {
    fn ctx(self, what: &str) -> Result<T, Error>;
}

impl<T> Context<T> for Result<T, DriverError> {
    fn ctx(self, what: &str) -> Result<T, Error> {
        self.map_err(|e| Error::driver(what, e))
    }
}

pub(crate) fn probe() -> Probe {
    // SAFETY: only tries to open the library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Probe::NoDriver;
    }
    let gpus = (|| -> Result<Vec<GpuInfo>, DriverError> {
        result::init()?;
        let n = result::device::get_count()?;
        (0..n)
            .map(|i| {
                let dev = result::device::get(i)?;
                let attr = |a| unsafe { result::device::get_attribute(dev, a) };
                Ok(GpuInfo {
                    ordinal: i as usize,
                    name: result::device::get_name(dev)?,
                    compute_capability: (
                        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
                    ),
                    // SAFETY: dev came from the driver.
                    total_memory: unsafe { result::device::total_mem(dev)? },
                })
            })
            .collect()
    })();
    match gpus {
        Ok(g) if g.is_empty() => Probe::NoDevice,
        Ok(g) => Probe::Found(g),
        Err(e) if e.0 == cudaError_enum::CUDA_ERROR_NO_DEVICE => Probe::NoDevice,
        Err(e) => Probe::DriverError(e.to_string()),
    }
}

/// One GPU: its context, the stream every op runs on, and every kernel of the embedded PTX.
pub struct Gpu {
    pub info: GpuInfo,
    pub(crate) stream: Arc<CudaStream>,
    functions: HashMap<String, CudaFunction>,
    _modules: Vec<Arc<CudaModule>>,
}

impl Gpu {
    /// Opens device `ordinal` and loads the kernels (the driver compiles the PTX for it).
    pub fn open(ordinal: usize) -> Result<Gpu, Error> {
        let info = match probe() {
            Probe::Found(gpus) => gpus.into_iter().find(|g| g.ordinal == ordinal),
            other => return Err(Error(format!("no CUDA device: {other}"))),
        }
        .ok_or_else(|| Error(format!("no CUDA device {ordinal}")))?;
        if info.compute_capability.0 < 8 {
            return Err(Error(format!("{info}: the kernels need compute capability 8.0 or newer (A100, H100, ...)")));
        }
        let ctx = CudaContext::new(ordinal).ctx("creating a CUDA context")?;
        let mut functions = HashMap::new();
        let mut modules = Vec::new();
        for (name, ptx) in crate::PTX {
            let module = ctx.load_module(Ptx::from_src(ptx)).ctx(&format!("loading the {name} kernels"))?;
            for entry in entries(ptx) {
                let f = module.load_function(entry).ctx(&format!("kernel {entry}"))?;
                functions.insert(entry.to_string(), f);
            }
            modules.push(module);
        }
        Ok(Gpu { info, stream: ctx.default_stream(), functions, _modules: modules })
    }

    /// The kernel `name` (a programming error if the PTX has none: the names are fixed).
    pub(crate) fn function(&self, name: &str) -> &CudaFunction {
        self.functions.get(name).unwrap_or_else(|| panic!("no kernel {name} in the embedded PTX"))
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Free and total device memory, in bytes.
    pub fn memory(&self) -> Result<(u64, u64), Error> {
        let (free, total) = self.stream.context().mem_get_info().ctx("asking for the free GPU memory")?;
        Ok((free as u64, total as u64))
    }

    /// Waits for every queued op (and surfaces the first error of any of them).
    pub fn synchronize(&self) -> Result<(), Error> {
        self.stream.synchronize().ctx("synchronizing")
    }
}

/// The kernel names of a PTX module: its `.visible .entry NAME(` lines.
pub(crate) fn entries(ptx: &str) -> impl Iterator<Item = &str> {
    ptx.lines().filter_map(|l| l.strip_prefix(".visible .entry ")?.split('(').next())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_module_has_its_kernels() {
        let names: Vec<&str> = crate::PTX.iter().flat_map(|(_, p)| super::entries(p)).collect();
        for want in ["rms_norm_f32", "qmatmul_q4k", "paged_attention_bf16", "argmax_f32", "write_kv_f16"] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        assert_eq!(names.len(), 22, "{names:?}");
    }
}
