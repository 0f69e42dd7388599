//! safetensors: the shard files of an HF model directory and the tensors of each file.

use crate::error::{Error, Result};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensorError, SafeTensors};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vllm_rs_kernels::{GgmlType, Storage, Weight};

/// The weight files of an HF model directory, as vLLM's `--load-format auto` picks them: the
/// safetensors files, else the PyTorch `.bin` ones ([`crate::torch_bin`]). Either kind: those
/// named in its index, else the single file, else every file of its extension.
pub fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    for (index, single, prefix, ext) in
        [("model.safetensors.index.json", "model.safetensors", "", "safetensors"), crate::torch_bin::FILES]
    {
        let files = files_of(dir, index, single, (prefix, ext))?;
        if !files.is_empty() {
            return Ok(files);
        }
    }
    Err(Error::file(dir, "no *.safetensors (or pytorch_model*.bin) files"))
}

/// The files `index` names, else `single`, else every `{prefix}*.{ext}`; none if there are none.
fn files_of(dir: &Path, index: &str, single: &str, (prefix, ext): (&str, &str)) -> Result<Vec<PathBuf>> {
    let index = dir.join(index);
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| Error::file(&index, e.to_string()))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::file(&index, format!("bad JSON: {e}")))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| Error::file(&index, "no weight_map object"))?;
        let mut files: Vec<PathBuf> = map.values().filter_map(|v| v.as_str()).map(|f| dir.join(f)).collect::<Vec<_>>();
        files.sort();
        files.dedup();
        return Ok(files);
    }
    let single = dir.join(single);
    if single.exists() {
        return Ok(vec![single]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::file(dir, e.to_string()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix)))
        .collect();
    files.sort();
    Ok(files)
}

/// Every tensor of one weight file of an HF directory ([`shard_files`]), by its kind.
pub fn read_weight_file(path: &Path) -> Result<FileTensors> {
    if path.extension().is_some_and(|x| x == "bin") { crate::torch_bin::read_tensors(path) } else { read_tensors(path) }
}

/// A tensor of raw bytes (dtype `U8`), which is no weight on its own: MXFP4 checkpoints keep
/// each quantized matrix as `*_blocks` and `*_scales` of bytes, which the loader pairs.
#[derive(Clone)]
pub struct ByteTensor {
    pub shape: Vec<usize>,
    pub storage: Storage,
}

/// The tensors of one file: the weights, and the byte tensors.
pub type FileTensors = (Vec<(String, Weight)>, Vec<(String, ByteTensor)>);

/// Every tensor of one safetensors file, memory-mapped: float tensors as `rows × cols` weights
/// (`rows` the product of the outer dimensions), `U8` ones as [`ByteTensor`]s.
pub fn read_tensors(path: &Path) -> Result<FileTensors> {
    let file = File::open(path).map_err(|e| Error::file(path, format!("cannot open: {e}")))?;
    // SAFETY: read-only map of a file we do not modify.
    let mmap = Arc::new(unsafe { Mmap::map(&file) }.map_err(|e| Error::file(path, format!("cannot map: {e}")))?);
    let (header_len, meta) = SafeTensors::read_metadata(&mmap).map_err(|e| {
        let msg = match e {
            // The header runs past the end of the file, or its tensors do not end where the file does.
            SafeTensorError::HeaderTooSmall
            | SafeTensorError::InvalidHeaderLength
            | SafeTensorError::MetadataIncompleteBuffer => {
                format!("file is truncated or corrupt: {e} (the file has {} bytes)", mmap.len())
            }
            e => format!("not a valid safetensors file: {e}"),
        };
        Error::file(path, msg)
    })?;
    let data_start = 8 + header_len;
    let (mut out, mut bytes) = (Vec::new(), Vec::new());
    for (name, info) in meta.tensors() {
        if is_index_buffer(&name, info.dtype) {
            continue;
        }
        let (a, b) = info.data_offsets;
        let range = data_start + a..data_start + b;
        if range.end > mmap.len() {
            return Err(Error::file(path, format!("file is truncated (tensor {name})")));
        }
        let ty = match info.dtype {
            Dtype::F32 => GgmlType::F32,
            Dtype::F16 => GgmlType::F16,
            Dtype::BF16 => GgmlType::BF16,
            Dtype::U8 => {
                bytes.push((
                    name,
                    ByteTensor { shape: info.shape.clone(), storage: Storage::Mapped(mmap.clone(), range) },
                ));
                continue;
            }
            // Boolean masks (EAGLE-3's `t2d`) are nothing a model computes with.
            Dtype::BOOL => continue,
            // Index tables (EAGLE-3's `d2t`, draft-to-target token offsets), read as f32 values.
            Dtype::I64 => GgmlType::F32,
            other => return Err(Error::file(path, format!("tensor {name}: dtype {other:?} is not supported"))),
        };
        let storage = match info.dtype {
            Dtype::I64 => Storage::from_f32(
                &i64_as_f32(&mmap[range]).map_err(|e| Error::file(path, format!("tensor {name}: {e}")))?,
            ),
            _ => Storage::Mapped(mmap.clone(), range),
        };
        let w = shaped_weight(path, &name, ty, &info.shape, storage)?;
        out.push((name, w));
    }
    Ok((out, bytes))
}

/// Tensor `name` of `path`, of shape `shape`, as a `rows × cols` weight: `cols` the last
/// dimension, `rows` the product of the others.
pub(crate) fn shaped_weight(
    path: &Path,
    name: &str,
    ty: GgmlType,
    shape: &[usize],
    storage: Storage,
) -> Result<Weight> {
    let cols = *shape.last().unwrap_or(&1);
    let rows = shape.iter().rev().skip(1).product::<usize>();
    Weight::new(ty, rows, cols, storage).map_err(|e| Error::file(path, format!("tensor {name}: {e}")))
}

/// Little-endian i64 values as f32, refused where a value is not exact in f32.
pub(crate) fn i64_as_f32(bytes: &[u8]) -> std::result::Result<Vec<f32>, String> {
    let values: Vec<f32> =
        bytes.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")) as f32).collect();
    match values.iter().find(|v| v.abs() > (1 << 24) as f32) {
        Some(v) => Err(format!("integer {v} is too large to read exactly")),
        None => Ok(values),
    }
}

/// Integer buffers that encoders save beside their weights (`embeddings.position_ids`, the
/// arange the model would build anyway): skipped, as transformers ignores them at load.
fn is_index_buffer(name: &str, dtype: Dtype) -> bool {
    matches!(dtype, Dtype::I64 | Dtype::I32) && is_index_buffer_name(name)
}

/// The names of those integer buffers.
pub(crate) fn is_index_buffer_name(name: &str) -> bool {
    name.ends_with(".position_ids") || name.ends_with(".token_type_ids")
}
