//! Weight matrices as they come off disk: memory-mapped (or owned) bytes in one of the formats
//! of [`GgmlType`], viewed as `rows × cols` with rows contiguous.

use crate::ggml::{self, GgmlType};
use memmap2::Mmap;
use std::ops::Range;
use std::sync::Arc;

/// Bytes backing a tensor: a window into a shared memory map, or an owned buffer
/// (for tensors a loader had to transform, e.g. un-permuted or `w - 1` norms).
#[derive(Clone)]
pub enum Storage {
    Mapped(Arc<Mmap>, Range<usize>),
    Owned(Arc<Vec<u8>>),
}

impl Storage {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m, r) => &m[r.clone()],
            Storage::Owned(v) => v,
        }
    }

    pub fn from_f32(values: &[f32]) -> Self {
        let mut bytes = Vec::with_capacity(values.len() * 4);
        for v in values {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        Storage::Owned(Arc::new(bytes))
    }

    pub fn is_mapped(&self) -> bool {
        matches!(self, Storage::Mapped(..))
    }
}

/// A 2-D weight (`rows × cols`, row-major; 1-D tensors have `rows == 1`).
#[derive(Clone)]
pub struct Weight {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub storage: Storage,
}

impl Weight {
    /// Checks that the byte length fits the shape and that rows are whole blocks.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, storage: Storage) -> Result<Self, String> {
        let row_bytes = ty.bytes_for(cols).ok_or_else(|| {
            format!("{} columns is not a multiple of the {} block size {}", cols, ty.name(), ty.block_size())
        })?;
        let want = row_bytes * rows;
        let have = storage.bytes().len();
        if have != want {
            return Err(format!("{} [{rows} x {cols}] needs {want} bytes, found {have}", ty.name()));
        }
        Ok(Weight { ty, rows, cols, storage })
    }

    pub fn from_f32(rows: usize, cols: usize, values: &[f32]) -> Self {
        assert_eq!(values.len(), rows * cols);
        Weight { ty: GgmlType::F32, rows, cols, storage: Storage::from_f32(values) }
    }

    pub fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_size() * self.ty.type_size()
    }

    pub fn row(&self, r: usize) -> &[u8] {
        let rb = self.row_bytes();
        &self.storage.bytes()[r * rb..(r + 1) * rb]
    }

    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// Dequantizes one row into `out` (len `cols`) with the scalar reference.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        ggml::dequantize(self.ty, self.row(r), out);
    }

    /// The whole tensor as f32 (for small tensors: norms, biases; and tests).
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.rows * self.cols];
        ggml::dequantize(self.ty, self.bytes(), &mut out);
        out
    }
}

impl std::fmt::Debug for Weight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Weight({} [{} x {}])", self.ty.name(), self.rows, self.cols)
    }
}
