//! A checkpoint's tensors under their Hugging Face names, whatever the file format.
//!
//! Safetensors directories (single file or sharded with `model.safetensors.index.json`) and GGUF
//! files both end up here, memory-mapped. GGUF names are mapped to HF names; format quirks that
//! change the math (llama.cpp's Q/K row permutation, Gemma's `1 + w` norms) are left to the
//! architecture, which knows about them, via [`Checkpoint::format`].

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use vllm_rs_formats::safetensors::{self, ByteTensor};
use vllm_rs_kernels::{GgmlType, Storage, Weight};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Safetensors,
    Gguf,
}

/// Cloning is cheap: tensors share their mapped (or owned) bytes.
#[derive(Clone)]
pub struct Checkpoint {
    pub format: Format,
    /// The file or directory the tensors came from, for error messages.
    pub origin: PathBuf,
    tensors: HashMap<String, (Weight, PathBuf, Stored)>,
    /// `(to, from)` of a [`Checkpoint::rename_prefix`] that moved tensors, so a missing tensor
    /// is named as the file would hold it.
    renamed: Option<(String, String)>,
    /// MXFP4 matrices as the checkpoint stores them, by the name before `_blocks` / `_scales`:
    /// read by [`Checkpoint::mxfp4_rows`].
    mxfp4: HashMap<String, Mxfp4Parts>,
    /// The names a loader has read ([`Checkpoint::unread`] lists the others).
    read: Arc<Mutex<HashSet<String>>>,
}

/// Non-weight buffers some checkpoints saved with their weights (rotary tables, BERT's position
/// ids, GPT-2's causal masks), which vLLM's loaders skip by these names too: never "unread".
fn is_buffer(name: &str) -> bool {
    const SUFFIXES: [&str; 6] = [
        "rotary_emb.inv_freq",
        "rotary_emb.cos_cached",
        "rotary_emb.sin_cached",
        "embeddings.position_ids",
        ".attn.bias",
        ".attn.masked_bias",
    ];
    SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// The name a tensor has in its file: tensors split, renamed or transposed for a loader keep
/// their source's, so [`Checkpoint::unread`] speaks of the file's tensors.
type Stored = Arc<str>;

/// The two byte tensors of one MXFP4 matrix, seen as `rows` rows of `groups` blocks of 32.
#[derive(Clone)]
struct Mxfp4Parts {
    blocks: ByteTensor,
    scales: ByteTensor,
    rows: usize,
    groups: usize,
    file: PathBuf,
}

impl Checkpoint {
    /// Loads every `*.safetensors` shard of an HF model directory. MXFP4 matrices (`X_blocks`
    /// and `X_scales` of bytes, possibly in different shards) are paired and checked here, and
    /// read as MXFP4 weights by [`Checkpoint::mxfp4_rows`].
    pub fn from_safetensors_dir(dir: &Path) -> Result<Self> {
        let (mut tensors, mut bytes) = (HashMap::new(), HashMap::new());
        for file in safetensors::shard_files(dir)? {
            let (weights, byte_tensors) = safetensors::read_weight_file(&file)?;
            for (name, w) in weights {
                tensors.insert(name.clone(), (w, file.clone(), name.into()));
            }
            for (name, t) in byte_tensors {
                bytes.insert(name, (t, file.clone()));
            }
        }
        let mxfp4 = mxfp4_pairs(bytes)?;
        Ok(Checkpoint {
            format: Format::Safetensors,
            origin: dir.to_path_buf(),
            tensors,
            renamed: None,
            mxfp4,
            read: Arc::default(),
        })
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
            tensors.insert(hf, (w, g.path.clone(), name.as_str().into()));
        }
        Ok(Checkpoint {
            format: Format::Gguf,
            origin: g.path.clone(),
            tensors,
            renamed: None,
            mxfp4: HashMap::new(),
            read: Arc::default(),
        })
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Whether the checkpoint holds the MXFP4 matrix `name` (`{name}_blocks`, `{name}_scales`).
    pub fn contains_mxfp4(&self, name: &str) -> bool {
        self.mxfp4.contains_key(name)
    }

    /// Rows `rows` of the MXFP4 matrix `name`, which must be `shape` (`[rows, cols]` with its
    /// outer dimensions flattened into rows), as one MXFP4 weight in ggml's block layout: the
    /// only copy made of those bytes (a fused projection is split by choosing its rows).
    pub fn mxfp4_rows(&self, name: &str, shape: [usize; 2], rows: impl IntoIterator<Item = usize>) -> Result<Weight> {
        let p = self
            .mxfp4
            .get(name)
            .ok_or_else(|| Error::file(&self.origin, format!("tensor {name}_blocks is missing")))?;
        self.mark_read(name);
        if [p.rows, 32 * p.groups] != shape {
            let have = [p.rows, 32 * p.groups];
            return Err(Error::file(
                &p.file,
                format!("MXFP4 tensor {name}_blocks holds {have:?} values, expected {shape:?}"),
            ));
        }
        let (blocks, scales, g) = (p.blocks.storage.bytes(), p.scales.storage.bytes(), p.groups);
        let mut out = Vec::new();
        let mut n = 0;
        for r in rows {
            assert!(r < p.rows, "row {r} of {name}: the caller's rows lie within the checked shape");
            out.extend(vllm_rs_kernels::mxfp4::from_hf(
                &blocks[r * g * 16..(r + 1) * g * 16],
                &scales[r * g..(r + 1) * g],
            ));
            n += 1;
        }
        Weight::new(GgmlType::MXFP4, n, 32 * g, Storage::Owned(Arc::new(out)))
            .map_err(|e| Error::file(&p.file, format!("tensor {name}_blocks: {e}")))
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// A `rows × cols` matrix; errors name the tensor and the file when missing or misshapen.
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Weight> {
        let (w, file, _) = self.get(name)?;
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
        let (w, file, _) = self.get(name)?;
        if w.rows * w.cols != len {
            return Err(Error::file(file, format!("tensor {name} has {} elements, expected {len}", w.rows * w.cols)));
        }
        Ok(w.to_f32())
    }

    /// [`Checkpoint::vector`] if the tensor exists.
    pub fn optional_vector(&self, name: &str, len: usize) -> Result<Option<Vec<f32>>> {
        if self.contains(name) { self.vector(name, len).map(Some) } else { Ok(None) }
    }

    /// Replaces the tensor `name` by consecutive row ranges of it, `(new name, rows)` each, as
    /// if the checkpoint had stored them separately (fused projections such as Phi-3's
    /// `qkv_proj`, split so the model code loads `q_proj`, `k_proj`, `v_proj`). 1-D tensors
    /// (biases) split by elements.
    pub fn split_rows(&mut self, name: &str, parts: &[(String, usize)]) -> Result<()> {
        let (w, file, stored) = self.lookup(name)?.clone();
        let (rows, cols) = if w.rows == 1 { (w.cols, 1) } else { (w.rows, w.cols) };
        let total: usize = parts.iter().map(|(_, r)| r).sum();
        if total != rows {
            return Err(Error::file(&file, format!("tensor {name} has {rows} rows, expected {total} to split")));
        }
        let row_bytes = w.bytes().len() / rows;
        let mut start = 0;
        for (part, n) in parts {
            let (r, c) = if w.rows == 1 { (1, *n) } else { (*n, cols) };
            let piece = slice(&w, start * row_bytes..(start + n) * row_bytes, r, c)
                .map_err(|e| Error::file(&file, format!("tensor {name}: {e}")))?;
            self.tensors.insert(part.clone(), (piece, file.clone(), stored.clone()));
            start += n;
        }
        self.tensors.remove(name);
        Ok(())
    }

    /// Replaces the 2-D tensor `name` by new tensors, each the concatenation of some of its row
    /// ranges (a fused projection whose rows interleave several, e.g. per head group), copied.
    pub fn regroup_rows(&mut self, name: &str, parts: &[(String, Vec<std::ops::Range<usize>>)]) -> Result<()> {
        let (w, file, stored) = self.lookup(name)?.clone();
        let rb = w.row_bytes();
        for (part, ranges) in parts {
            if let Some(r) = ranges.iter().find(|r| r.end > w.rows) {
                return Err(Error::file(&file, format!("tensor {name} has {} rows, not {}", w.rows, r.end)));
            }
            let bytes: Vec<u8> = ranges.iter().flat_map(|r| &w.bytes()[r.start * rb..r.end * rb]).copied().collect();
            let rows = bytes.len() / rb;
            let piece = Weight::new(w.ty, rows, w.cols, Storage::Owned(Arc::new(bytes)))
                .map_err(|e| Error::file(&file, format!("tensor {name}: {e}")))?;
            self.tensors.insert(part.clone(), (piece, file.clone(), stored.clone()));
        }
        self.tensors.remove(name);
        Ok(())
    }

    /// The `experts` matrices (`rows × cols` each) stacked in the 3-D tensor `name` (GGUF's
    /// `*_exps`, `[experts, rows, cols]`), as views of its bytes, not copies.
    pub fn experts(&self, name: &str, experts: usize, rows: usize, cols: usize) -> Result<Vec<Weight>> {
        let (w, file, _) = self.get(name)?;
        if w.cols != cols || w.rows != experts * rows {
            return Err(Error::file(
                file,
                format!(
                    "tensor {name} holds {} rows of {}, expected {experts} experts of [{rows}, {cols}] (config: \
                     num_experts = {experts})",
                    w.rows, w.cols
                ),
            ));
        }
        let bytes = rows * w.row_bytes();
        (0..experts)
            .map(|e| slice(w, e * bytes..(e + 1) * bytes, rows, cols))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::file(file, format!("tensor {name}: {e}")))
    }

    /// Stores the tensor `name` transposed, as f32: GPT-2's `Conv1D` keeps its weights
    /// `[in, out]` where every other layer keeps `[out, in]`.
    pub fn transpose(&mut self, name: &str) -> Result<()> {
        let (w, file, stored) = self.lookup(name)?.clone();
        let v = w.to_f32();
        let t: Vec<f32> =
            (0..w.cols).flat_map(|c| (0..w.rows).map(move |r| (r, c))).map(|(r, c)| v[r * w.cols + c]).collect();
        self.tensors.insert(name.to_string(), (Weight::from_f32(w.cols, w.rows, &t), file, stored));
        Ok(())
    }

    /// Gives the tensor `from` the name `to` (a checkpoint naming a module otherwise).
    pub fn rename(&mut self, from: &str, to: &str) -> Result<()> {
        let entry = self.lookup(from)?.clone();
        self.tensors.remove(from);
        self.tensors.insert(to.to_string(), entry);
        Ok(())
    }

    /// Renames every tensor under `{from}.` to `{to}.` (a text model inside a multimodal one).
    pub fn rename_prefix(&mut self, from: &str, to: &str) {
        let from = format!("{from}.");
        let names: Vec<String> = self.tensors.keys().filter(|n| n.starts_with(&from)).cloned().collect();
        if !names.is_empty() {
            self.renamed = Some((format!("{to}."), from.clone()));
        }
        for name in names {
            let entry = self.tensors.remove(&name).expect("listed");
            self.tensors.insert(format!("{to}.{}", &name[from.len()..]), entry);
        }
    }

    /// Tensor `name`, which counts as read by the model being loaded.
    fn get(&self, name: &str) -> Result<&(Weight, PathBuf, Stored)> {
        let found = self.lookup(name)?;
        self.mark_read(&found.2);
        Ok(found)
    }

    fn mark_read(&self, name: &str) {
        self.read.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string());
    }

    /// The tensors no loader has read, sorted (MXFP4 matrices by the name before `_blocks`): a
    /// checkpoint holding weights the model never uses — a misread name, or parts of another
    /// model (an MTP layer beside the model) — says so at load.
    pub fn unread(&self) -> Vec<String> {
        let read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let stored = self.tensors.values().map(|(_, _, s)| &**s).chain(self.mxfp4.keys().map(String::as_str));
        let unused = |n: &&str| !read.contains(*n) && !is_buffer(n);
        let mut names: Vec<String> = stored.filter(unused).map(str::to_string).collect();
        names.sort();
        names.dedup();
        names
    }

    /// Leaves the tensors whose names `skipped` picks out of [`Checkpoint::unread`]: parts of
    /// the checkpoint a model leaves out on purpose (its MTP layer, a draft head's own weights).
    pub fn skip(&self, skipped: impl Fn(&str) -> bool) {
        for (name, (_, _, stored)) in &self.tensors {
            if skipped(name) {
                self.mark_read(stored);
            }
        }
    }

    fn lookup(&self, name: &str) -> Result<&(Weight, PathBuf, Stored)> {
        self.tensors.get(name).ok_or_else(|| {
            let stored = match &self.renamed {
                Some((to, from)) if name.starts_with(to.as_str()) => format!("{from}{}", &name[to.len()..]),
                _ => name.to_string(),
            };
            Error::file(&self.origin, format!("tensor {stored} is missing"))
        })
    }
}

/// Pairs each `X_blocks` byte tensor (`[.., groups, 16]`) with its `X_scales` (`[.., groups]`)
/// as the MXFP4 matrix `X`; any other byte tensor is an error naming it.
fn mxfp4_pairs(mut bytes: HashMap<String, (ByteTensor, PathBuf)>) -> Result<HashMap<String, Mxfp4Parts>> {
    let names: Vec<String> = bytes.keys().filter_map(|n| n.strip_suffix("_blocks")).map(str::to_string).collect();
    let mut out = HashMap::new();
    for name in names {
        let (blocks, file) = bytes.remove(&format!("{name}_blocks")).expect("listed");
        let (scales, _) = bytes
            .remove(&format!("{name}_scales"))
            .ok_or_else(|| Error::file(&file, format!("tensor {name}_blocks (MXFP4) has no {name}_scales")))?;
        let n = blocks.shape.len();
        if n < 2 || blocks.shape[n - 1] != 16 || blocks.shape[..n - 1] != scales.shape[..] {
            return Err(Error::file(
                &file,
                format!(
                    "tensor {name}_blocks has shape {:?} and {name}_scales {:?}: MXFP4 needs [.., groups, 16] and \
                     [.., groups]",
                    blocks.shape, scales.shape
                ),
            ));
        }
        let (rows, groups) = (blocks.shape[..n - 2].iter().product(), blocks.shape[n - 2]);
        out.insert(name, Mxfp4Parts { blocks, scales, rows, groups, file });
    }
    if let Some((name, (_, file))) = bytes.into_iter().next() {
        let msg = format!("tensor {name}: dtype U8 is not supported (only MXFP4's `*_blocks` with their `*_scales`)");
        return Err(Error::file(&file, msg));
    }
    Ok(out)
}

/// The bytes `range` of `w` as a `rows × cols` weight: a window of the same map, or a copy of
/// an owned buffer.
fn slice(w: &Weight, range: std::ops::Range<usize>, rows: usize, cols: usize) -> std::result::Result<Weight, String> {
    let storage = match &w.storage {
        Storage::Mapped(map, r) => Storage::Mapped(map.clone(), r.start + range.start..r.start + range.end),
        Storage::Owned(bytes) => Storage::Owned(Arc::new(bytes[range].to_vec())),
    };
    Weight::new(w.ty, rows, cols, storage)
}

#[cfg(test)]
mod tests {
    use super::is_buffer;

    #[test]
    fn saved_buffers_are_not_weights() {
        for b in [
            "model.layers.0.self_attn.rotary_emb.inv_freq",
            "bert.embeddings.position_ids",
            "transformer.h.3.attn.bias",
            "transformer.h.3.attn.masked_bias",
        ] {
            assert!(is_buffer(b), "{b}");
        }
        for w in [
            "transformer.h.3.attn.c_attn.bias",
            "model.layers.0.self_attn.q_proj.bias",
            "embeddings.position_embeddings.weight",
        ] {
            assert!(!is_buffer(w), "{w}");
        }
    }
}
