//! Checkpoint file formats, below both `models` (weights) and `frontend` (a GGUF's tokenizer
//! and generation defaults live in its metadata): GGUF and safetensors readers that map the
//! file and hand out tensors as [`vllm_rs_kernels::Weight`]s, with errors naming the file.

pub mod error;
pub mod gguf;
pub mod safetensors;

pub use error::{Error, Result};
