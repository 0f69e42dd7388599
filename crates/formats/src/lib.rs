//! Checkpoint file formats, below both `models` (weights) and `frontend` (a GGUF's tokenizer
//! and generation defaults live in its metadata): GGUF and safetensors readers that map the
//! file and hand out tensors as [`vllm_rs_kernels::Weight`]s, with errors naming the file, and
//! a reader of PyTorch `.bin` weights for HF directories that ship no safetensors.

pub mod error;
pub mod gguf;
pub mod safetensors;
pub mod torch_bin;

pub use error::{Error, Result};
