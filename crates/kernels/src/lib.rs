//! Tensors, weight formats and CPU kernels for vllm.rs.
//!
//! Every kernel has a scalar reference; optimized tiers are picked once at start-up
//! ([`isa::tier`]) and tested against it on random data.

pub mod aligned;
pub mod attention;
pub mod backend;
pub mod bf16_matmul;
#[cfg(target_arch = "x86_64")]
mod dense_zmm;
pub mod encoder_attention;
pub mod ggml;
pub mod isa;
pub mod matmul;
pub mod mxfp4;
#[cfg(target_arch = "aarch64")]
pub mod neon;
pub mod ops;
pub mod packed;
pub mod packed_avx2;
#[cfg(target_arch = "x86_64")]
pub mod packed_avx512;
pub mod packed_bf16;
pub mod pool;
pub mod qgemv;
pub mod qmatmul;
pub mod qpanel;
pub mod quant_act;
pub mod recurrent;
pub mod testing;
pub mod weight;

pub use backend::Backend;
pub use ggml::GgmlType;
pub use weight::{DeviceCopy, Storage, Weight};
