//! Weight matrices as they come off disk: memory-mapped (or owned) bytes in one of the formats
//! of [`GgmlType`], viewed as `rows × cols` with rows contiguous.

use crate::ggml::{self, GgmlType};
use crate::packed::Packed;
use crate::packed_bf16::PackedBf16;
use memmap2::Mmap;
use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

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

    /// Tells the kernel the mapped pages may be dropped (they are re-read from the file if
    /// touched again), so that bytes copied elsewhere are not resident twice.
    pub fn release_pages(&self) {
        if let Storage::Mapped(m, r) = self {
            const PAGE: usize = 4096;
            let (start, end) = (r.start.next_multiple_of(PAGE), r.end / PAGE * PAGE);
            if start < end {
                // SAFETY: the map is read-only and file-backed: dropped pages are re-read from
                // the file on the next access, so no reader sees different bytes.
                let _ = unsafe { m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
            }
        }
    }
}

/// A 2-D weight (`rows × cols`, row-major; 1-D tensors have `rows == 1`).
#[derive(Clone)]
pub struct Weight {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub storage: Storage,
    /// The same values repacked for the AVX2 and AVX-512 tiers' matmul ([`Weight::for_matmul`]).
    pub packed: Option<Arc<Packed>>,
    /// A dense weight rounded to bf16 for the bf16 compute mode ([`Weight::for_matmul`]).
    pub bf16: Option<Arc<PackedBf16>>,
    /// A device backend's copy of the bytes, made at load ([`crate::Backend::prepare_weight`])
    /// or on the backend's first use of the weight.
    pub device: DeviceCopy,
}

/// A device backend's copy of a tensor in its own memory (a GPU's), made once and shared by the
/// tensor's clones (which share its bytes). Opaque here, so that this crate depends on no device
/// runtime: the backend that made it downcasts it.
#[derive(Clone, Default)]
pub struct DeviceCopy(Arc<OnceLock<Box<dyn Any + Send + Sync>>>);

impl DeviceCopy {
    /// Whether a backend has made its copy.
    pub fn is_made(&self) -> bool {
        self.0.get().is_some()
    }

    /// The copy, made by `make` on the first call (a failed `make` leaves none).
    pub fn get_or_try_init<T: Any + Send + Sync, E>(&self, make: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        if self.0.get().is_none() {
            // A racing thread may have set it meanwhile: its copy is as good.
            let _ = self.0.set(Box::new(make()?));
        }
        Ok(self.0.get().and_then(|b| b.downcast_ref()).expect("one backend type makes a tensor's device copy"))
    }
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
        Ok(Weight { ty, rows, cols, storage, packed: None, bf16: None, device: DeviceCopy::default() })
    }

    pub fn from_f32(rows: usize, cols: usize, values: &[f32]) -> Self {
        assert_eq!(values.len(), rows * cols);
        Weight::new(GgmlType::F32, rows, cols, Storage::from_f32(values)).expect("f32 bytes fit the shape")
    }

    /// This weight made ready for the matmuls of the process's backend
    /// ([`crate::backend::default`], [`crate::Backend::prepare_weight`]): on the CPU, packed as
    /// [`Weight::packed_for_cpu`] says; on a GPU, uploaded (where it has a kernel) instead.
    pub fn for_matmul(self) -> Self {
        crate::backend::default().prepare_weight(self)
    }

    /// Whether the bf16 compute mode ([`crate::bf16_matmul::set_dense_compute`]) takes this
    /// weight: a dense one, while the mode is on.
    pub fn computes_in_bf16(&self) -> bool {
        use crate::bf16_matmul::{DenseCompute, dense_compute};
        !self.ty.is_quantized() && dense_compute() == DenseCompute::Bf16
    }

    /// This weight made ready for [`crate::matmul::matmul`] on the tier in use: quantized
    /// weights are repacked for the AVX2 and AVX-512 tiers ([`crate::packed`]; the same bytes per weight
    /// but for Q2_K's byte-wide integer scales). The original bytes stay for row lookups (a tied
    /// embedding); mapped pages read while packing are handed back to the page cache. In the
    /// bf16 compute mode ([`crate::bf16_matmul::set_dense_compute`]) dense weights are rounded
    /// to bf16 and repacked ([`PackedBf16`]) on every tier.
    pub fn packed_for_cpu(mut self) -> Self {
        if self.computes_in_bf16() {
            if self.bf16.is_none() {
                self.bf16 = Some(Arc::new(PackedBf16::pack(&self)));
                self.storage.release_pages();
            }
            return self;
        }
        if !crate::packed::packs_for(crate::isa::tier()) || self.packed.is_some() {
            return self;
        }
        self.packed = Packed::pack(&self).map(Arc::new);
        if self.packed.is_some() {
            self.storage.release_pages();
        }
        self
    }

    /// The first `n` rows as a weight of their own, sharing this one's bytes (not made ready
    /// for the matmuls: call [`Weight::for_matmul`]).
    pub fn first_rows(&self, n: usize) -> Weight {
        assert!(n <= self.rows, "{n} rows of {}", self.rows);
        let len = n * self.row_bytes();
        let storage = match &self.storage {
            Storage::Mapped(m, r) => Storage::Mapped(m.clone(), r.start..r.start + len),
            Storage::Owned(v) => Storage::Owned(Arc::new(v[..len].to_vec())),
        };
        Weight::new(self.ty, n, self.cols, storage).expect("whole rows fit the shape")
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

#[cfg(test)]
mod tests {
    use super::Weight;

    #[test]
    fn a_device_copy_is_made_once_and_shared_by_clones() {
        let w = Weight::from_f32(1, 2, &[1.0, 2.0]);
        let copy = w.clone();
        assert_eq!(w.device.get_or_try_init(|| Err::<u8, _>("no memory")), Err("no memory"));
        assert_eq!(*w.device.get_or_try_init(|| Ok::<u8, ()>(7)).unwrap(), 7);
        let again = copy.device.get_or_try_init(|| -> Result<u8, ()> { panic!("made twice") });
        assert_eq!(*again.unwrap(), 7, "a clone sees the copy");
        let other = Weight::from_f32(1, 2, &[1.0, 2.0]);
        assert_eq!(*other.device.get_or_try_init(|| Ok::<u8, ()>(9)).unwrap(), 9, "another weight has its own");
    }
}
