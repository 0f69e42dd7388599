//! PyTorch `.bin` weights: `torch.save` of a state dict, as older HF repos and many EAGLE heads
//! ship them (`pytorch_model.bin`, or shards named by `pytorch_model.bin.index.json`). vLLM
//! reads them when a directory has no safetensors; so do we. The `pytorch-reader` crate parses
//! the pickle without running any of it (like `torch.load(weights_only=True)`) and reads each
//! storage from the zip; the bytes are copied into memory (a zip entry is not mapped).

use crate::error::{Error, Result};
use crate::safetensors::{ByteTensor, FileTensors, i64_as_f32, is_index_buffer_name, shaped_weight};
use pytorch_reader::{DType, PytorchReader};
use std::path::Path;
use std::sync::Arc;
use vllm_rs_kernels::{GgmlType, Storage};

/// The index, the single file, and the prefix and extension of other files of a directory's
/// `.bin` weights (not `training_args.bin` and the like, which hold no weights).
pub(crate) const FILES: (&str, &str, &str, &str) =
    ("pytorch_model.bin.index.json", "pytorch_model.bin", "pytorch_model", "bin");

/// Every tensor of one `.bin` file, as [`crate::safetensors::read_tensors`] gives them: float
/// tensors as `rows × cols` weights, i64 index tables as f32, `u8` ones as byte tensors; boolean
/// masks and encoders' position/token-type id buffers are skipped.
pub fn read_tensors(path: &Path) -> Result<FileTensors> {
    let reader =
        PytorchReader::new(path).map_err(|e| Error::file(path, format!("not a readable PyTorch file: {e}")))?;
    let (mut out, mut bytes) = (Vec::new(), Vec::new());
    let mut tensors: Vec<_> = reader.into_tensors().into_values().collect();
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    for t in tensors {
        let name = t.name.clone();
        let integer = matches!(t.dtype(), DType::I64 | DType::I32);
        if t.dtype() == DType::Bool || (integer && is_index_buffer_name(&name)) {
            continue;
        }
        let data = t.read().map_err(|e| Error::file(path, format!("tensor {name}: {e}")))?;
        let shape = t.shape().to_vec();
        let (ty, storage) = match t.dtype() {
            DType::F32 => (GgmlType::F32, Storage::Owned(Arc::new(data))),
            DType::F16 => (GgmlType::F16, Storage::Owned(Arc::new(data))),
            DType::BF16 => (GgmlType::BF16, Storage::Owned(Arc::new(data))),
            DType::I64 => {
                let values = i64_as_f32(&data).map_err(|e| Error::file(path, format!("tensor {name}: {e}")))?;
                (GgmlType::F32, Storage::from_f32(&values))
            }
            DType::U8 => {
                bytes.push((name, ByteTensor { shape, storage: Storage::Owned(Arc::new(data)) }));
                continue;
            }
            other => return Err(Error::file(path, format!("tensor {name}: dtype {other:?} is not supported"))),
        };
        let w = shaped_weight(path, &name, ty, &shape, storage)?;
        out.push((name, w));
    }
    Ok((out, bytes))
}
