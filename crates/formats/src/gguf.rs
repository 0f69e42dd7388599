//! GGUF (v2/v3) reader: header, metadata, tensor infos, alignment; tensor data stays memory-mapped.
//!
//! Every malformed input becomes an [`Error`] naming the file and what is wrong.

use crate::error::{Error, Result};
use memmap2::Mmap;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vllm_rs_kernels::{GgmlType, Storage, Weight};

const MAGIC: &[u8; 4] = b"GGUF";

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

impl Value {
    pub fn as_u64(&self) -> Option<u64> {
        Some(match *self {
            Value::U8(v) => v as u64,
            Value::I8(v) => u64::try_from(v).ok()?,
            Value::U16(v) => v as u64,
            Value::I16(v) => u64::try_from(v).ok()?,
            Value::U32(v) => v as u64,
            Value::I32(v) => u64::try_from(v).ok()?,
            Value::U64(v) => v,
            Value::I64(v) => u64::try_from(v).ok()?,
            _ => return None,
        })
    }

    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v as i64),
            Value::I16(v) => Some(v as i64),
            Value::I32(v) => Some(v as i64),
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// One tensor's entry in the GGUF directory.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// GGUF dims, innermost first (`[cols, rows]` for a matrix).
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Absolute byte range in the file.
    pub range: std::ops::Range<usize>,
}

/// An opened GGUF file.
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: BTreeMap<String, TensorInfo>,
    mmap: Arc<Mmap>,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn err(&self, msg: impl Into<String>) -> Error {
        Error::file(self.path, format!("{} (at byte {})", msg.into(), self.pos))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| self.err("file is truncated"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    /// A length that must fit in the rest of the file (`unit` bytes per element at least).
    fn len(&mut self, unit: usize) -> Result<usize> {
        let n = self.u64()?;
        let left = (self.buf.len() - self.pos) as u64;
        if n.saturating_mul(unit as u64) > left {
            return Err(self.err(format!("file is truncated: length {n} runs past the end of the file")));
        }
        Ok(n as usize)
    }

    fn string(&mut self) -> Result<String> {
        let n = self.len(1)?;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.err("string is not valid UTF-8"))
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.u8()?),
            1 => Value::I8(self.u8()? as i8),
            2 => Value::U16(self.u16()?),
            3 => Value::I16(self.u16()? as i16),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(self.u32()? as i32),
            6 => Value::F32(f32::from_bits(self.u32()?)),
            7 => match self.u8()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(self.err(format!("bad bool value {b}"))),
            },
            8 => Value::String(self.string()?),
            9 => {
                if depth > 2 {
                    return Err(self.err("arrays nested too deeply"));
                }
                let item_ty = self.u32()?;
                let n = self.len(1)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(item_ty, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(self.u64()? as i64),
            12 => Value::F64(f64::from_bits(self.u64()?)),
            t => return Err(self.err(format!("unknown metadata value type {t}"))),
        })
    }
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::file(path, format!("cannot open: {e}")))?;
        // SAFETY: the file is opened read-only; we never hand out references that outlive the map.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| Error::file(path, format!("cannot map: {e}")))?;
        let mmap = Arc::new(mmap);
        let mut c = Cursor { buf: &mmap, pos: 0, path };
        let magic = c.take(4).map_err(|_| Error::file(path, "not a GGUF file (shorter than its magic)"))?;
        if magic != MAGIC {
            return Err(Error::file(path, format!("not a GGUF file (magic {magic:02x?}, want \"GGUF\")")));
        }
        let version = c.u32()?;
        if !(2..=3).contains(&version) {
            return Err(Error::file(path, format!("GGUF version {version} is not supported (2 or 3)")));
        }
        let n_tensors = c.len(8)?;
        let n_kv = c.len(8)?;
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = c.string()?;
            let ty = c.u32()?;
            let v = c.value(ty, 0)?;
            metadata.insert(key, v);
        }
        let mut infos = Vec::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            let name = c.string()?;
            let n_dims = c.u32()? as usize;
            if n_dims == 0 || n_dims > 4 {
                return Err(c.err(format!("tensor {name}: {n_dims} dimensions")));
            }
            let dims = (0..n_dims).map(|_| c.u64()).collect::<Result<Vec<_>>>()?;
            let ty_id = c.u32()?;
            let ty = GgmlType::from_id(ty_id)
                .map_err(|what| Error::file(path, format!("tensor {name}: unsupported {what}")))?;
            let offset = c.u64()?;
            infos.push((name, dims, ty, offset));
        }
        let align = match metadata.get("general.alignment") {
            Some(v) => v.as_u64().filter(|a| a.is_power_of_two()).ok_or_else(|| c.err("bad general.alignment"))?,
            None => 32,
        } as usize;
        let data_start = c.pos.next_multiple_of(align);
        let mut tensors = BTreeMap::new();
        for (name, dims, ty, offset) in infos {
            // Quantized blocks never straddle rows: the row length must be whole blocks.
            let rows: u64 = dims[1..].iter().try_fold(1u64, |a, &d| a.checked_mul(d)).unwrap_or(u64::MAX);
            let row_bytes = usize::try_from(dims[0]).ok().and_then(|n| ty.bytes_for(n));
            let bytes =
                row_bytes.zip(usize::try_from(rows).ok()).and_then(|(b, r)| b.checked_mul(r)).ok_or_else(|| {
                    Error::file(path, format!("tensor {name}: shape {dims:?} does not fit {}", ty.name()))
                })?;
            let start = usize::try_from(offset).ok().filter(|o| o.is_multiple_of(align));
            let start = start.ok_or_else(|| Error::file(path, format!("tensor {name}: misaligned offset {offset}")))?;
            // Offsets and sizes from the file must not wrap around: checked, then compared.
            let Some(range) = data_start.checked_add(start).and_then(|s| Some(s..s.checked_add(bytes)?)) else {
                return Err(Error::file(path, format!("tensor {name}: {bytes} bytes at offset {offset} overflow")));
            };
            if range.end > mmap.len() {
                return Err(Error::file(
                    path,
                    format!("file is truncated: tensor {name} needs bytes {range:?}, file has {}", mmap.len()),
                ));
            }
            tensors.insert(name, TensorInfo { dims, ty, range });
        }
        Ok(GgufFile { path: path.to_path_buf(), version, metadata, tensors, mmap })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(Value::as_u64)
    }

    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(Value::as_f64)
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    /// A required integer key, with an error that names it.
    pub fn require_u64(&self, key: &str) -> Result<u64> {
        self.get_u64(key).ok_or_else(|| Error::file(&self.path, format!("metadata key {key} is missing")))
    }

    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
            .ok_or_else(|| Error::file(&self.path, "metadata key general.architecture is missing"))
    }

    /// A tensor as a memory-mapped [`Weight`] (`rows` = product of outer dims).
    pub fn weight(&self, name: &str) -> Option<Weight> {
        let info = self.tensors.get(name)?;
        let cols = info.dims[0] as usize;
        let rows = info.dims[1..].iter().product::<u64>() as usize;
        let storage = Storage::Mapped(self.mmap.clone(), info.range.clone());
        Some(Weight::new(info.ty, rows, cols, storage).expect("sizes checked at open"))
    }
}
