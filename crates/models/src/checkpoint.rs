//! A checkpoint's tensors under their Hugging Face names, whatever the file format.
//!
//! Safetensors directories (single file or sharded with `model.safetensors.index.json`) and GGUF
//! files both end up here, memory-mapped. GGUF names are mapped to HF names; format quirks that
//! change the math (llama.cpp's Q/K row permutation, Gemma's `1 + w` norms) are left to the
//! architecture, which knows about them, via [`Checkpoint::format`].

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensorError, SafeTensors};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vllm_rs_kernels::{GgmlType, Storage, Weight};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Safetensors,
    Gguf,
}

pub struct Checkpoint {
    pub format: Format,
    /// The file or directory the tensors came from, for error messages.
    pub origin: PathBuf,
    tensors: HashMap<String, (Weight, PathBuf)>,
}

impl Checkpoint {
    /// Loads every `*.safetensors` shard of an HF model directory.
    pub fn from_safetensors_dir(dir: &Path) -> Result<Self> {
        let files = shard_files(dir)?;
        let mut tensors = HashMap::new();
        for file in files {
            load_safetensors(&file, &mut tensors)?;
        }
        Ok(Checkpoint { format: Format::Safetensors, origin: dir.to_path_buf(), tensors })
    }

    /// Takes the tensors of an opened GGUF file, renamed to HF names.
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let arch = g.architecture()?;
        let spec = crate::registry::by_gguf_arch(arch)
            .ok_or_else(|| Error::file(&g.path, format!("GGUF architecture {arch:?} is not supported")))?;
        let mut tensors = HashMap::new();
        for name in g.tensors.keys() {
            let hf = spec
                .hf_tensor_name(name)
                .ok_or_else(|| Error::file(&g.path, format!("tensor {name} has no known Hugging Face equivalent")))?;
            let w = g.weight(name).expect("listed tensor");
            tensors.insert(hf, (w, g.path.clone()));
        }
        Ok(Checkpoint { format: Format::Gguf, origin: g.path.clone(), tensors })
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// A `rows × cols` matrix; errors name the tensor and the file when missing or misshapen.
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Weight> {
        let (w, file) = self.get(name)?;
        if (w.rows, w.cols) != (rows, cols) {
            return Err(Error::file(
                file,
                format!("tensor {name} has shape [{}, {}], expected [{rows}, {cols}]", w.rows, w.cols),
            ));
        }
        Ok(w.clone())
    }

    /// A 1-D tensor of `len` elements as f32 (norm weights, biases).
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let (w, file) = self.get(name)?;
        if w.rows * w.cols != len {
            return Err(Error::file(file, format!("tensor {name} has {} elements, expected {len}", w.rows * w.cols)));
        }
        Ok(w.to_f32())
    }

    /// [`Checkpoint::vector`] if the tensor exists.
    pub fn optional_vector(&self, name: &str, len: usize) -> Result<Option<Vec<f32>>> {
        if self.contains(name) { self.vector(name, len).map(Some) } else { Ok(None) }
    }

    fn get(&self, name: &str) -> Result<&(Weight, PathBuf)> {
        self.tensors.get(name).ok_or_else(|| Error::file(&self.origin, format!("tensor {name} is missing")))
    }
}

/// The safetensors files of a directory: those named in the index, else `model.safetensors`,
/// else every `*.safetensors`.
fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
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
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::file(dir, e.to_string()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::file(dir, "no *.safetensors files"));
    }
    Ok(files)
}

fn load_safetensors(path: &Path, out: &mut HashMap<String, (Weight, PathBuf)>) -> Result<()> {
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
    for (name, info) in meta.tensors() {
        let ty = match info.dtype {
            Dtype::F32 => GgmlType::F32,
            Dtype::F16 => GgmlType::F16,
            Dtype::BF16 => GgmlType::BF16,
            other => return Err(Error::file(path, format!("tensor {name}: dtype {other:?} is not supported"))),
        };
        let (a, b) = info.data_offsets;
        let range = data_start + a..data_start + b;
        if range.end > mmap.len() {
            return Err(Error::file(path, format!("file is truncated (tensor {name})")));
        }
        let cols = *info.shape.last().unwrap_or(&1);
        let rows = info.shape.iter().rev().skip(1).product::<usize>();
        let w = Weight::new(ty, rows, cols, Storage::Mapped(mmap.clone(), range))
            .map_err(|e| Error::file(path, format!("tensor {name}: {e}")))?;
        out.insert(name, (w, path.to_path_buf()));
    }
    Ok(())
}
