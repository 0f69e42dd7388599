//! Launches of the embedded kernels on device buffers: one method per op, with the shapes
//! checked here so that a kernel never reads past a buffer.

use crate::gpu::{Context, Error, Gpu};
use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits};
use vllm_rs_kernels::attention::{AttentionParams, KvDtype, SeqAttention};
use vllm_rs_kernels::{GgmlType, Weight};

type Result<T> = std::result::Result<T, Error>;

fn launch_cfg(grid: (usize, usize), block: u32) -> Result<LaunchConfig> {
    let (x, y) = (u32::try_from(grid.0), u32::try_from(grid.1));
    match (x, y) {
        (Ok(x), Ok(y)) if x > 0 && x < (1 << 31) && y > 0 && y < (1 << 16) => {
            Ok(LaunchConfig { grid_dim: (x, y, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 })
        }
        _ => Err(Error(format!("launch grid {grid:?} is out of range"))),
    }
}

fn i32_of(n: usize, what: &str) -> Result<i32> {
    i32::try_from(n).map_err(|_| Error(format!("{what} = {n} does not fit the kernels' 32-bit sizes")))
}

fn ensure(ok: bool, msg: impl FnOnce() -> String) -> Result<()> {
    if ok { Ok(()) } else { Err(Error(msg())) }
}

/// The kernels' number for a dense element type (kernels/common.cuh's T_*).
fn kv_suffix(dtype: KvDtype) -> &'static str {
    match dtype {
        KvDtype::F32 => "f32",
        KvDtype::F16 => "f16",
        KvDtype::Bf16 => "bf16",
    }
}

/// A weight in device memory, in its GGUF (or dense) bytes as on disk.
pub struct DeviceWeight {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub bytes: CudaSlice<u8>,
}

impl DeviceWeight {
    /// Whether the matmul kernels take weights of type `ty`.
    pub fn supports(ty: GgmlType) -> bool {
        matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::Q8_0 | GgmlType::Q4K)
    }

    /// Copies `w`'s bytes to the device; formats without a kernel yet are refused.
    pub fn upload(gpu: &Gpu, w: &Weight) -> Result<DeviceWeight> {
        ensure(DeviceWeight::supports(w.ty), || {
            format!("{} weights have no CUDA kernel yet (F32, F16, BF16, Q8_0, Q4_K have)", w.ty.name())
        })?;
        Ok(DeviceWeight { ty: w.ty, rows: w.rows, cols: w.cols, bytes: gpu.upload(w.bytes())? })
    }

    pub fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_size() * self.ty.type_size()
    }

    fn suffix(&self) -> &'static str {
        match self.ty {
            GgmlType::F32 => "f32",
            GgmlType::F16 => "f16",
            GgmlType::BF16 => "bf16",
            GgmlType::Q8_0 => "q8_0",
            _ => "q4k",
        }
    }
}

/// Activations quantized to int16 for the quantized matmuls (the CPU's `QuantizedActs`):
/// values, per-32 scales and per-32 `scale · Σq`.
pub struct DeviceActs {
    pub m: usize,
    pub k: usize,
    pub q: CudaSlice<i16>,
    pub d: CudaSlice<f32>,
    pub dsum: CudaSlice<f32>,
}

impl DeviceActs {
    pub fn new(gpu: &Gpu, m: usize, k: usize) -> Result<DeviceActs> {
        ensure(k.is_multiple_of(32), || format!("activation length {k} is not a multiple of 32"))?;
        Ok(DeviceActs { m, k, q: gpu.zeros(m * k)?, d: gpu.zeros(m * k / 32)?, dsum: gpu.zeros(m * k / 32)? })
    }
}

/// What the tables of a batch reach: the cache blocks they name for the requests' tokens (one
/// past the largest block id; 0 when no token is in the cache) and the rows of q (one past the
/// last query row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableExtent {
    pub blocks: usize,
    pub q_rows: usize,
}

impl TableExtent {
    /// Checks each request against its table (no more queries than tokens, enough blocks for
    /// the tokens) and measures what the tables reach for a cache of `block_size` positions per
    /// block. Only the first `⌈seq_len / block_size⌉` entries of a table are read by the kernel,
    /// so only those count.
    pub fn of(seqs: &[SeqAttention], block_size: usize) -> Result<TableExtent> {
        ensure(block_size > 0, || "paged attention: block_size 0".into())?;
        let mut e = TableExtent { blocks: 0, q_rows: 0 };
        for s in seqs {
            let used = s.seq_len.div_ceil(block_size);
            ensure(s.query_len <= s.seq_len && used <= s.block_table.len(), || {
                format!(
                    "paged attention: {} queries of {} tokens in {} blocks of {block_size}",
                    s.query_len,
                    s.seq_len,
                    s.block_table.len()
                )
            })?;
            if let Some(&max) = s.block_table[..used].iter().max() {
                e.blocks = e.blocks.max(max as usize + 1);
            }
            if s.query_len > 0 {
                e.q_rows = e.q_rows.max(s.query_start.saturating_add(s.query_len));
            }
        }
        Ok(e)
    }
}

/// The per-request tables of one paged-attention call, on the device, with what they reach
/// (checked against the cache and q at each call, so the kernel never reads outside them).
pub struct PagedBatch {
    pub num_seqs: usize,
    max_blocks: usize,
    max_seq_len: usize,
    block_tables: CudaSlice<u32>,
    query_start: CudaSlice<u32>,
    query_len: CudaSlice<u32>,
    seq_lens: CudaSlice<u32>,
    /// Softmax scratch: a row of max_seq_len scores per (request, head).
    scores: CudaSlice<f32>,
    num_heads: usize,
    block_size: usize,
    extent: TableExtent,
}

impl PagedBatch {
    /// The tables of `seqs` (the CPU kernel's description of a batch) for `num_heads` heads
    /// and a cache of `block_size` positions per block; refused where a request's table is
    /// shorter than its tokens.
    pub fn upload(gpu: &Gpu, seqs: &[SeqAttention], num_heads: usize, block_size: usize) -> Result<PagedBatch> {
        let extent = TableExtent::of(seqs, block_size)?;
        let max_blocks = seqs.iter().map(|s| s.block_table.len()).max().unwrap_or(0).max(1);
        let max_seq_len = seqs.iter().map(|s| s.seq_len).max().unwrap_or(0).max(1);
        let mut tables = vec![0u32; seqs.len() * max_blocks];
        for (s, seq) in seqs.iter().enumerate() {
            tables[s * max_blocks..s * max_blocks + seq.block_table.len()].copy_from_slice(seq.block_table);
        }
        let u32s = |f: &dyn Fn(&SeqAttention) -> usize| -> Result<Vec<u32>> {
            seqs.iter().map(|s| u32::try_from(f(s)).map_err(|_| Error("a batch index exceeds u32".into()))).collect()
        };
        Ok(PagedBatch {
            num_seqs: seqs.len(),
            max_blocks,
            max_seq_len,
            block_tables: gpu.upload(&tables)?,
            query_start: gpu.upload(&u32s(&|s| s.query_start)?)?,
            query_len: gpu.upload(&u32s(&|s| s.query_len)?)?,
            seq_lens: gpu.upload(&u32s(&|s| s.seq_len)?)?,
            scores: gpu.zeros(seqs.len() * num_heads * max_seq_len)?,
            num_heads,
            block_size,
            extent,
        })
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn extent(&self) -> TableExtent {
        self.extent
    }
}

impl Gpu {
    pub fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        self.stream.clone_htod(data).ctx("copying to the GPU")
    }

    pub fn download<T: DeviceRepr>(&self, data: &CudaSlice<T>) -> Result<Vec<T>> {
        self.stream.clone_dtoh(data).ctx("copying from the GPU")
    }

    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>> {
        self.stream.alloc_zeros(n).ctx("allocating GPU memory")
    }

    /// RMSNorm of every `dim`-sized row of `x` in place, weights `offset + w`.
    pub fn rms_norm_rows(
        &self,
        x: &mut CudaSlice<f32>,
        dim: usize,
        w: &CudaSlice<f32>,
        eps: f32,
        offset: f32,
    ) -> Result<()> {
        ensure(dim > 0 && x.len().is_multiple_of(dim) && w.len() == dim, || "rms_norm: shapes".into())?;
        let rows = x.len() / dim;
        let (r, d) = (i32_of(rows, "rows")?, i32_of(dim, "dim")?);
        let mut b = self.stream.launch_builder(self.function("rms_norm_f32"));
        b.arg(x).arg(w).arg(&r).arg(&d).arg(&eps).arg(&offset);
        // SAFETY: the kernel reads and writes rows × dim values of x and dim of w (checked).
        unsafe { b.launch(launch_cfg((rows.div_ceil(4), 1), 128)?) }.ctx("rms_norm")?;
        Ok(())
    }

    /// `h += y`, then `x` = RMSNorm of each row of `h`.
    #[allow(clippy::too_many_arguments)]
    pub fn add_rms_norm_rows(
        &self,
        h: &mut CudaSlice<f32>,
        y: &CudaSlice<f32>,
        x: &mut CudaSlice<f32>,
        dim: usize,
        w: &CudaSlice<f32>,
        eps: f32,
        offset: f32,
    ) -> Result<()> {
        ensure(
            dim > 0 && h.len().is_multiple_of(dim) && y.len() == h.len() && x.len() == h.len() && w.len() == dim,
            || "add_rms_norm: shapes".into(),
        )?;
        let rows = h.len() / dim;
        let (r, d) = (i32_of(rows, "rows")?, i32_of(dim, "dim")?);
        let mut b = self.stream.launch_builder(self.function("add_rms_norm_f32"));
        b.arg(h).arg(y).arg(x).arg(w).arg(&r).arg(&d).arg(&eps).arg(&offset);
        // SAFETY: shapes checked above.
        unsafe { b.launch(launch_cfg((rows.div_ceil(4), 1), 128)?) }.ctx("add_rms_norm")?;
        Ok(())
    }

    /// RoPE on every `row_len`-sized row of `x` (heads of `head_dim`); row t takes row t of
    /// the `half`-wide cos/sin tables (the CPU's `RopeTable`).
    #[allow(clippy::too_many_arguments)]
    pub fn rope_rows(
        &self,
        x: &mut CudaSlice<f32>,
        row_len: usize,
        head_dim: usize,
        cos: &CudaSlice<f32>,
        sin: &CudaSlice<f32>,
        half: usize,
        interleaved: bool,
    ) -> Result<()> {
        ensure(head_dim > 0 && row_len.is_multiple_of(head_dim) && 2 * half <= head_dim, || {
            "rope: head shapes".into()
        })?;
        ensure(row_len > 0 && x.len().is_multiple_of(row_len), || "rope: x is not whole rows".into())?;
        let rows = x.len() / row_len;
        ensure(cos.len() >= rows * half && sin.len() >= rows * half, || "rope: tables shorter than the rows".into())?;
        let n = rows * (row_len / head_dim) * half;
        if n == 0 {
            return Ok(());
        }
        let a = [i32_of(rows, "rows")?, i32_of(row_len, "row")?, i32_of(head_dim, "head_dim")?, i32_of(half, "half")?];
        let il = interleaved as i32;
        let mut b = self.stream.launch_builder(self.function("rope_f32"));
        b.arg(x).arg(cos).arg(sin).arg(&a[0]).arg(&a[1]).arg(&a[2]).arg(&a[3]).arg(&il);
        // SAFETY: shapes checked above.
        unsafe { b.launch(launch_cfg((n.div_ceil(256), 1), 256)?) }.ctx("rope")?;
        Ok(())
    }

    /// `gate = silu(gate) · up`.
    pub fn silu_mul(&self, gate: &mut CudaSlice<f32>, up: &CudaSlice<f32>) -> Result<()> {
        ensure(gate.len() == up.len(), || "silu_mul: lengths differ".into())?;
        if gate.is_empty() {
            return Ok(());
        }
        let (n, cfg) = (gate.len() as u64, launch_cfg((gate.len().div_ceil(256), 1), 256)?);
        let mut b = self.stream.launch_builder(self.function("silu_mul_f32"));
        b.arg(gate).arg(up).arg(&n);
        // SAFETY: n values in both.
        unsafe { b.launch(cfg) }.ctx("silu_mul")?;
        Ok(())
    }

    /// Rows `ids` of `w` into `out` (`ids × w.cols`), times `scale` unless it is 1.
    ///
    /// # Safety
    /// Every id must be below `w.rows` (the ids are on the device: checking them here would
    /// stall the stream).
    pub unsafe fn embedding(
        &self,
        w: &DeviceWeight,
        ids: &CudaSlice<u32>,
        scale: f32,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        ensure(out.len() == ids.len() * w.cols, || "embedding: out is not ids × cols".into())?;
        if ids.is_empty() {
            return Ok(());
        }
        let (rb, cols) = (w.row_bytes() as u64, i32_of(w.cols, "cols")?);
        let mut b = self.stream.launch_builder(self.function(&format!("embedding_{}", w.suffix())));
        b.arg(&w.bytes).arg(&rb).arg(ids).arg(&cols).arg(&scale).arg(out);
        // SAFETY: out holds ids × cols; every id indexes a row of w (caller).
        unsafe { b.launch(launch_cfg((ids.len(), 1), 256)?) }.ctx("embedding")?;
        Ok(())
    }

    /// The index of each `vocab`-sized row's largest logit (the first on ties).
    pub fn argmax_rows(&self, logits: &CudaSlice<f32>, vocab: usize, out: &mut CudaSlice<u32>) -> Result<()> {
        ensure(vocab > 0 && logits.len() == out.len() * vocab, || "argmax: logits are not rows × vocab".into())?;
        if out.is_empty() {
            return Ok(());
        }
        let (v, cfg) = (i32_of(vocab, "vocab")?, launch_cfg((out.len(), 1), 256)?);
        let mut b = self.stream.launch_builder(self.function("argmax_f32"));
        b.arg(logits).arg(&v).arg(out);
        // SAFETY: shapes checked above.
        unsafe { b.launch(cfg) }.ctx("argmax")?;
        Ok(())
    }

    /// Quantizes `x` (`acts.m × acts.k`) into `acts`.
    pub fn quantize_acts(&self, x: &CudaSlice<f32>, acts: &mut DeviceActs) -> Result<()> {
        ensure(x.len() == acts.m * acts.k, || "quantize: x is not m × k".into())?;
        let blocks = x.len() / 32;
        if blocks == 0 {
            return Ok(());
        }
        let nb = blocks as u64;
        let mut b = self.stream.launch_builder(self.function("quantize_acts"));
        b.arg(x).arg(&nb).arg(&mut acts.q).arg(&mut acts.d).arg(&mut acts.dsum);
        // SAFETY: the buffers hold m × k values and m × k / 32 scales (DeviceActs::new).
        unsafe { b.launch(launch_cfg((blocks.div_ceil(4), 1), 128)?) }.ctx("quantize_acts")?;
        Ok(())
    }

    /// `out = x · wᵀ` (`x` is `m × w.cols`); quantized weights need `acts` as scratch for
    /// the int16 activations (dense ones take none).
    pub fn matmul(
        &self,
        x: &CudaSlice<f32>,
        m: usize,
        w: &DeviceWeight,
        acts: Option<&mut DeviceActs>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let (n, k) = (w.rows, w.cols);
        ensure(x.len() == m * k && out.len() == m * n, || format!("matmul: x is not {m} × {k} or out not {m} × {n}"))?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let (mi, ni, ki) = (i32_of(m, "m")?, i32_of(n, "n")?, i32_of(k, "k")?);
        if !w.ty.is_quantized() {
            let mut b = self.stream.launch_builder(self.function(&format!("dense_{}", w.suffix())));
            b.arg(x).arg(&mi).arg(&ki).arg(&w.bytes).arg(&ni).arg(out);
            // SAFETY: shapes checked above.
            unsafe { b.launch(launch_cfg((n.div_ceil(16), m.div_ceil(4)), 128)?) }.ctx("dense matmul")?;
            return Ok(());
        }
        let acts = acts.ok_or_else(|| Error(format!("matmul: {} weights need an activations scratch", w.ty.name())))?;
        ensure(acts.m == m && acts.k == k, || format!("matmul: activations scratch is {} × {}", acts.m, acts.k))?;
        self.quantize_acts(x, acts)?;
        let rb = w.row_bytes() as u64;
        let mut b = self.stream.launch_builder(self.function(&format!("qmatmul_{}", w.suffix())));
        b.arg(&w.bytes).arg(&rb).arg(&ni).arg(&ki).arg(&acts.q).arg(&acts.d).arg(&acts.dsum).arg(&mi).arg(out);
        // SAFETY: shapes checked above.
        unsafe { b.launch(launch_cfg((n.div_ceil(8), m.div_ceil(4)), 128)?) }.ctx("quantized matmul")?;
        Ok(())
    }

    /// Writes `tokens` K/V rows of `row` values into their cache slots (`v` and `v_cache`
    /// absent for a cache without V rows).
    ///
    /// # Safety
    /// Every slot must lie in the caches: `(slot + 1) · row` values of `dtype` within each (the
    /// slot mapping is on the device, uploaded once per step for every layer: checking it here
    /// would stall the stream).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn write_kv(
        &self,
        dtype: KvDtype,
        k_cache: &mut CudaSlice<u8>,
        v_cache: Option<&mut CudaSlice<u8>>,
        slot_mapping: &CudaSlice<u32>,
        k: &CudaSlice<f32>,
        v: Option<&CudaSlice<f32>>,
        row: usize,
    ) -> Result<()> {
        let tokens = slot_mapping.len();
        ensure(
            k.len() == tokens * row && v.is_none_or(|v| v.len() == k.len()) && v.is_some() == v_cache.is_some(),
            || "write_kv: shapes".into(),
        )?;
        if tokens * row == 0 {
            return Ok(());
        }
        let (t, r) = (i32_of(tokens, "tokens")?, i32_of(row, "row")?);
        let null = 0u64;
        let mut b = self.stream.launch_builder(self.function(&format!("write_kv_{}", kv_suffix(dtype))));
        b.arg(k);
        match v {
            Some(v) => b.arg(v),
            None => b.arg(&null),
        };
        b.arg(slot_mapping).arg(k_cache);
        match v_cache {
            Some(vc) => b.arg(vc),
            None => b.arg(&null),
        };
        b.arg(&t).arg(&r);
        // SAFETY: every slot lies in the caches (the caller's contract).
        unsafe { b.launch(launch_cfg(((tokens * row).div_ceil(256), 1), 256)?) }.ctx("write_kv")?;
        Ok(())
    }

    /// Causal attention of `q` (`tokens × heads × head_dim`) over one layer's paged cache of
    /// `batch.block_size()` positions per block; `v_cache` is `k_cache` for a cache without V
    /// rows. Refused where the tables reach past either cache or past q. Soft-capping has no
    /// kernel yet.
    #[allow(clippy::too_many_arguments)]
    pub fn paged_attention(
        &self,
        q: &CudaSlice<f32>,
        dtype: KvDtype,
        k_cache: &CudaSlice<u8>,
        v_cache: &CudaSlice<u8>,
        batch: &mut PagedBatch,
        p: &AttentionParams,
        sinks: Option<&CudaSlice<f32>>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        ensure(p.softcap.is_none(), || "paged attention: soft-capping has no CUDA kernel yet".into())?;
        ensure(p.sinks.is_some() == sinks.is_some(), || "paged attention: sinks given to one side only".into())?;
        ensure(sinks.is_none_or(|s| s.len() == p.num_heads), || "paged attention: not one sink per head".into())?;
        ensure(p.num_kv_heads > 0 && p.num_heads.is_multiple_of(p.num_kv_heads), || "attention: heads".into())?;
        ensure(batch.num_heads == p.num_heads, || "paged attention: the batch was uploaded for other heads".into())?;
        let (block_size, extent) = (batch.block_size, batch.extent);
        let cache_bytes = [extent.blocks, block_size, p.num_kv_heads, p.head_dim, dtype.size()]
            .into_iter()
            .try_fold(1usize, usize::checked_mul);
        ensure(cache_bytes.is_some_and(|b| k_cache.len() >= b && v_cache.len() >= b), || {
            format!(
                "paged attention: the tables reach block {} of caches of {} and {} bytes",
                extent.blocks.saturating_sub(1),
                k_cache.len(),
                v_cache.len()
            )
        })?;
        let q_values = extent.q_rows.checked_mul(p.num_heads * p.head_dim);
        ensure(q.len() == out.len() && q_values.is_some_and(|n| q.len() >= n), || {
            format!(
                "paged attention: q and out ({} and {} values) do not hold the tables' {} rows",
                q.len(),
                out.len(),
                extent.q_rows
            )
        })?;
        if batch.num_seqs == 0 {
            return Ok(());
        }
        let ints = [
            i32_of(batch.max_blocks, "blocks")?,
            i32_of(p.num_heads, "heads")?,
            i32_of(p.num_kv_heads, "kv heads")?,
            i32_of(p.head_dim, "head_dim")?,
            i32_of(block_size, "block_size")?,
            i32_of(p.sliding_window.unwrap_or(0), "window")?,
            i32_of(batch.max_seq_len, "seq_len")?,
        ];
        let null = 0u64;
        let mut b = self.stream.launch_builder(self.function(&format!("paged_attention_{}", kv_suffix(dtype))));
        b.arg(q).arg(k_cache).arg(v_cache).arg(&batch.block_tables).arg(&ints[0]);
        b.arg(&batch.query_start).arg(&batch.query_len).arg(&batch.seq_lens);
        b.arg(&ints[1]).arg(&ints[2]).arg(&ints[3]).arg(&ints[4]).arg(&p.scale).arg(&ints[5]);
        match sinks {
            Some(s) => b.arg(s),
            None => b.arg(&null),
        };
        b.arg(&mut batch.scores).arg(&ints[6]).arg(out);
        // SAFETY: the tables address blocks of the caches and rows of q and out, and there is a
        // sink per head (checked above).
        unsafe { b.launch(launch_cfg((batch.num_seqs, p.num_heads), 128)?) }.ctx("paged attention")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::TableExtent;
    use vllm_rs_kernels::attention::SeqAttention;

    fn seq(query_start: usize, query_len: usize, seq_len: usize, block_table: &[u32]) -> SeqAttention<'_> {
        SeqAttention { query_start, query_len, seq_len, block_table }
    }

    #[test]
    fn the_extent_counts_the_blocks_the_tokens_use() {
        // 17 tokens in blocks of 16 use two entries; the third (never read) does not count.
        let (a, b) = ([3, 9, 40], [5]);
        let e = TableExtent::of(&[seq(0, 1, 17, &a), seq(1, 4, 16, &b)], 16).unwrap();
        assert_eq!(e, TableExtent { blocks: 10, q_rows: 5 });
        // No tokens, no blocks; no queries, no rows.
        assert_eq!(TableExtent::of(&[seq(7, 0, 0, &[])], 16).unwrap(), TableExtent { blocks: 0, q_rows: 0 });
        assert_eq!(TableExtent::of(&[], 16).unwrap(), TableExtent { blocks: 0, q_rows: 0 });
    }

    #[test]
    fn a_table_short_of_its_tokens_is_refused() {
        let err = TableExtent::of(&[seq(0, 1, 33, &[0, 1])], 16).unwrap_err();
        assert!(err.0.contains("1 queries of 33 tokens in 2 blocks of 16"), "{err}");
        assert!(TableExtent::of(&[seq(0, 5, 4, &[0])], 16).is_err(), "more queries than tokens");
        assert!(TableExtent::of(&[seq(0, 1, 1, &[0])], 0).is_err(), "block_size 0");
    }
}
