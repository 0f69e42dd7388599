//! Quantized weights repacked at load for the AVX-512 VNNI tier: sixteen weight groups side by
//! side, one per 32-bit lane, so integer group sums need no horizontal reduction.
//!
//! The GGUF layouts keep each block's 32 (or 16) values together, which suits AVX2 but makes a
//! 512-bit dot product end in a 16-lane horizontal sum per group. Here a row is cut into
//! *chunks* of up to 16 groups; within a chunk, int16 vector `v` holds in lane `l` (two int16
//! values) one pair of values of group `l`. `vpdpwssd` over the chunk's vectors then leaves the
//! sixteen group sums in the sixteen lanes, ready for the float epilogue of [`crate::qmatmul`],
//! whose reduction order (and so every bit of the result) is unchanged.
//!
//! A tail of at most 8 groups goes in chunks of 8, 4, 2 or 1 groups, each group spread over `s`
//! adjacent lanes (fewer vectors, lanes added after the dot product), so a 2-group tail costs an
//! eighth of a full chunk, not a whole one. Activations are laid out the same way per matmul ([`Plan::interleave`]).
//!
//! Values are stored as unsigned `u = q + bias` in bit planes (4-bit nibbles, 2-bit and 1-bit
//! planes, or signed bytes for Q8_0); `Σ q·x = Σ u·x − bias·Σ x` exactly, in integers. Scales
//! keep their GGUF precision (f16, or f16 per super-block times a small integer per group), so
//! the bytes per weight equal the GGUF file's but for the tail chunks.
//!
//! Kernels work on tiles of four rows taken from the four quarters ("bands") of the matrix:
//! tile `t` is rows `t`, `t + n4`, `t + 2·n4`, `t + 3·n4`. A task's run of tiles then reads four
//! sequential streams at once; DRAM here delivers ~28 GB/s to two threads reading four or more
//! streams each, but ~16 GB/s to one stream per thread.

use crate::ggml::{GgmlType, q3k_scales, scale_min_k4};
use crate::qpanel::group_of;
#[cfg(target_arch = "x86_64")]
use crate::quant_act::QuantizedActs;
use crate::weight::Weight;

/// Groups per chunk: the 32-bit lanes of a 512-bit vector.
pub const LANES: usize = 16;
/// Rows computed together, one from each band; the bands are padded with zero rows.
pub const ROW_TILE: usize = 4;

/// How a format's values and scales are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    /// Bits per stored value: 2, 3, 4, 5, 6, or 8 (signed bytes).
    pub bits: u8,
    /// `u = q + bias` is stored (a power of two, or 0).
    pub bias: i16,
    pub scales: Scales,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scales {
    /// An f16 scale (and an f16 minimum) per group: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
    PerGroup { mins: bool },
    /// An f16 `d` (and `dmin`) per super-block of `per_sb` groups and an integer scale (and
    /// minimum) per group: the k-quants (`vscale = d · sc`, `mcoef = −(dmin · m)`).
    Super { per_sb: usize, signed: bool, mins: bool },
}

impl Scales {
    pub fn mins(self) -> bool {
        match self {
            Scales::PerGroup { mins } | Scales::Super { mins, .. } => mins,
        }
    }
}

/// Formats with a packed layout, in the order of [`format_index`].
pub const FORMATS: [(GgmlType, Format); 10] = {
    use GgmlType::*;
    use Scales::*;
    const fn f(bits: u8, bias: i16, scales: Scales) -> Format {
        Format { bits, bias, scales }
    }
    [
        (Q4_0, f(4, 8, PerGroup { mins: false })),
        (Q4_1, f(4, 0, PerGroup { mins: true })),
        (Q5_0, f(5, 16, PerGroup { mins: false })),
        (Q5_1, f(5, 0, PerGroup { mins: true })),
        (Q8_0, f(8, 0, PerGroup { mins: false })),
        (Q2K, f(2, 0, Super { per_sb: 16, signed: false, mins: true })),
        (Q3K, f(3, 4, Super { per_sb: 16, signed: true, mins: false })),
        (Q4K, f(4, 0, Super { per_sb: 8, signed: false, mins: true })),
        (Q5K, f(5, 0, Super { per_sb: 8, signed: false, mins: true })),
        (Q6K, f(6, 32, Super { per_sb: 16, signed: true, mins: false })),
    ]
};

pub fn format_index(ty: GgmlType) -> Option<usize> {
    FORMATS.iter().position(|(t, _)| *t == ty)
}

/// Bytes of one step of `vectors` (4, or 2 in narrow tails) int16 vectors of 32 values.
pub const fn step_bytes(bits: u8, vectors: usize) -> usize {
    vectors * 32 * bits as usize / 8
}

/// Bytes of a chunk header holding `hg` groups' scales.
pub fn header_bytes(f: Format, hg: usize) -> usize {
    match f.scales {
        Scales::PerGroup { mins } => 2 * hg * (1 + mins as usize),
        Scales::Super { per_sb, mins, .. } => (hg + 2 * hg.div_ceil(per_sb)) * (1 + mins as usize),
    }
}

/// One chunk of a row: groups `g0..g0+groups`, each over `s` adjacent lanes of `v` vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub g0: usize,
    pub groups: usize,
    pub s: usize,
    pub v: usize,
    /// Byte offset of this chunk in a row's layout, and its size (header + planes).
    pub offset: usize,
    pub bytes: usize,
    /// Offset of this chunk's `v × 32` int16 values in an interleaved activation row.
    pub x_offset: usize,
}

impl Chunk {
    /// Vectors per step of the kernels: four, or two in a narrow tail.
    pub fn step(&self) -> usize {
        self.v.min(4)
    }

    /// `(vector, lane)` of pair `j` (values `2j, 2j+1`) of the chunk's group `gl`.
    pub fn slot(&self, gl: usize, j: usize) -> (usize, usize) {
        (j % self.v, gl * self.s + j / self.v)
    }
}

/// The chunks of a row of `k` values in groups of `group`, for format `f`.
#[derive(Clone, Debug)]
pub struct Plan {
    pub group: usize,
    pub k: usize,
    pub chunks: Vec<Chunk>,
    pub row_bytes: usize,
    /// int16 values per interleaved activation row.
    pub x_len: usize,
    /// For each pair of an interleaved row, the natural value pair it holds (values `2p`,
    /// `2p + 1` of the row), or −1 for an empty lane: layouts are made by gathering.
    pub xsrc: Vec<i32>,
}

impl Plan {
    pub fn new(f: Format, group: usize, k: usize) -> Plan {
        assert!(k.is_multiple_of(group));
        let pairs = group / 2;
        let groups = k / group;
        let (mut chunks, mut offset, mut x_offset) = (Vec::new(), 0, 0);
        let mut g0 = 0;
        while g0 < groups {
            // Sixteen groups a chunk. A tail of 9–15 groups takes one chunk (some lanes empty:
            // splitting 12 into 8 + 4 stored 13 % fewer bytes but cost prefill 14 % more, for
            // a third epilogue); a shorter one goes in power-of-two pieces that fill the lanes.
            let left = groups - g0;
            let n = if left > LANES / 2 { left.min(LANES) } else { 1 << left.ilog2() };
            // Lanes per group: as many as fit, keeping at least four vectors (two for formats
            // with no 2-bit plane, whose steps can be two vectors).
            let min_v = if matches!(f.bits, 2 | 3 | 6) { 4 } else { 2 };
            let mut s = 1;
            while n * s * 2 <= LANES && pairs / (s * 2) >= min_v {
                s *= 2;
            }
            let v = pairs / s;
            let bytes = header_bytes(f, n) + v / v.min(4) * step_bytes(f.bits, v.min(4));
            chunks.push(Chunk { g0, groups: n, s, v, offset, bytes, x_offset });
            offset += bytes;
            x_offset += v * 32;
            g0 += n;
        }
        let mut xsrc = vec![-1i32; x_offset / 2];
        for c in &chunks {
            for gl in 0..c.groups {
                for j in 0..pairs {
                    let (v, lane) = c.slot(gl, j);
                    xsrc[c.x_offset / 2 + v * LANES + lane] = (((c.g0 + gl) * group) / 2 + j) as i32;
                }
            }
        }
        // Rows start at multiples of 32 bytes, so aligned planes stay aligned in every row.
        Plan { group, k, chunks, row_bytes: offset.next_multiple_of(32), x_len: x_offset, xsrc }
    }

    /// Whether activations interleaved for `other` suit this plan too.
    pub fn same_layout(&self, other: &Plan) -> bool {
        self.group == other.group && self.k == other.k && self.chunks == other.chunks
    }

    /// Lays out `m` rows of int16 activations (`m × k`, natural order) into `out` (`m × x_len`),
    /// zero where no value goes.
    pub fn interleave(&self, q: &[i16], m: usize, out: &mut Interleaved) {
        assert_eq!(q.len(), m * self.k);
        let dst = out.reuse(m * self.x_len);
        for (src, dst) in q.chunks_exact(self.k).zip(dst.chunks_exact_mut(self.x_len)) {
            // SAFETY: both rows hold whole pairs in 4-byte-aligned storage (`Vec<i16>` from
            // the allocator, `Interleaved` 64-byte-aligned), any bits are a valid u32.
            let (src, dst) = unsafe { (src.align_to::<u32>(), dst.align_to_mut::<u32>()) };
            assert!(src.0.is_empty() && dst.0.is_empty(), "i16 buffers not 4-byte aligned");
            self.gather_pairs(src.1, dst.1);
        }
    }

    /// `dst[i] = src[xsrc[i]]` (0 where `xsrc[i] < 0`): one row laid out, pairs as words.
    pub fn gather_pairs(&self, src: &[u32], dst: &mut [u32]) {
        assert!(src.len() == self.k / 2 && dst.len() == self.xsrc.len());
        #[cfg(target_arch = "x86_64")]
        if crate::isa::Tier::Avx512.supported() {
            // SAFETY: the CPU has AVX-512 F; every entry of xsrc is < k/2 = src.len() (Plan::new).
            return unsafe { crate::packed_avx512::gather_pairs(&self.xsrc, src, dst) };
        }
        for (d, &from) in dst.iter_mut().zip(&self.xsrc) {
            *d = if from < 0 { 0 } else { src[from as usize] };
        }
    }
}

/// Bytes in 64-byte-aligned storage, so that vectors at multiples of 32 or 64 bytes never
/// straddle cache lines (a plain `Vec` from malloc is 16-byte aligned).
#[derive(Default)]
pub struct Aligned {
    lines: Vec<Line>,
    len: usize,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

impl Aligned {
    /// `len` zero bytes, reusing the allocation.
    pub fn reset(&mut self, len: usize) -> &mut [u8] {
        self.lines.clear();
        self.reuse(len)
    }

    /// `len` bytes as they were (zero where the buffer grows), reusing the allocation.
    pub fn reuse(&mut self, len: usize) -> &mut [u8] {
        self.lines.resize(len.div_ceil(64), Line([0; 64]));
        self.len = len;
        self.bytes_mut()
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `lines` holds at least `len` contiguous bytes (Line has no padding).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const u8, self.len) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr() as *mut u8, self.len) }
    }
}

/// Interleaved activations ([`Plan::interleave`]), 64-byte aligned: every vector the kernels
/// read is one cache line (from a `Vec<i16>` each 64-byte load straddled two: half the rate).
#[derive(Default)]
pub struct Interleaved(Aligned);

impl Interleaved {
    /// `len` values (left as they were, or zero where the buffer grows), reusing the allocation.
    fn reuse(&mut self, len: usize) -> &mut [i16] {
        let b = self.0.reuse(2 * len);
        // SAFETY: 64-byte-aligned storage of 2·len bytes holds len i16.
        unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr() as *mut i16, len) }
    }

    pub fn as_slice(&self) -> &[i16] {
        let b = self.0.bytes();
        // SAFETY: as in `reuse`.
        unsafe { std::slice::from_raw_parts(b.as_ptr() as *const i16, b.len() / 2) }
    }
}

static PACKED_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Bytes of packed weights made so far in this process (for the load log).
pub fn packed_bytes() -> usize {
    PACKED_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// A quantized weight in the packed layout.
pub struct Packed {
    pub ty: GgmlType,
    pub format: Format,
    /// Index into [`FORMATS`] (the kernels' const parameter).
    pub index: usize,
    pub rows: usize,
    pub cols: usize,
    pub plan: Plan,
    /// `ROW_TILE · tiles()` rows of `plan.row_bytes` (the rows past `rows` are zero).
    pub data: Aligned,
}

impl Packed {
    /// Rows per band, which is also the number of tiles.
    pub fn tiles(&self) -> usize {
        self.rows.div_ceil(ROW_TILE)
    }

    /// The matrix row computed as row `r` (0..4) of tile `t` (may be a padding row ≥ `rows`).
    pub fn row_of(&self, t: usize, r: usize) -> usize {
        r * self.tiles() + t
    }

    /// Where chunk `c` of (padded) row `row` starts.
    pub fn chunk_at(&self, row: usize, c: &Chunk) -> usize {
        row * self.plan.row_bytes + c.offset
    }

    /// Repacks `w`; `None` if its format has no packed layout. Rows are packed in parallel on
    /// the global pool.
    pub fn pack(w: &Weight) -> Option<Packed> {
        let index = format_index(w.ty)?;
        let format = FORMATS[index].1;
        let group = group_of(w.ty);
        let plan = Plan::new(format, group, w.cols);
        let rb = plan.row_bytes;
        let mut data = Aligned::default();
        let out = SendPtr(data.reset(w.rows.div_ceil(ROW_TILE) * ROW_TILE * rb).as_mut_ptr());
        let p = Packed { ty: w.ty, format, index, rows: w.rows, cols: w.cols, plan, data: Aligned::default() };
        const ROWS_PER_TASK: usize = 64;
        crate::pool::global().run(w.rows.div_ceil(ROWS_PER_TASK), &|task| {
            let mut scratch = Scratch::default();
            for row in task * ROWS_PER_TASK..((task + 1) * ROWS_PER_TASK).min(w.rows) {
                // SAFETY: this task alone writes these rows' bytes.
                let dst = unsafe { std::slice::from_raw_parts_mut(out.get().add(row * rb), rb) };
                p.pack_row(w, row, dst, &mut scratch);
            }
        });
        PACKED_BYTES.fetch_add(data.bytes().len(), std::sync::atomic::Ordering::Relaxed);
        Some(Packed { data, ..p })
    }

    /// Writes row `row` of `w` into `dst` (`plan.row_bytes`).
    fn pack_row(&self, w: &Weight, row: usize, dst: &mut [u8], s: &mut Scratch) {
        let (f, plan) = (self.format, &self.plan);
        let (bs, ts) = (w.ty.block_size(), w.ty.type_size());
        let gpb = bs / plan.group;
        // Values as the panel has them (the SIMD unpacker, bit-identical to the reference).
        s.panel.unpack(crate::isa::tier(), w.ty, w.row(row), 1, w.cols);
        s.fields.resize(w.cols / plan.group, GroupScale::default());
        for (b, blk) in w.row(row).chunks_exact(ts).enumerate() {
            group_scales(w.ty, blk, &mut s.fields[b * gpb..(b + 1) * gpb]);
        }
        // Stored (biased) values in the slots the activations take ([`Plan::xsrc`]).
        s.panel.q.iter_mut().for_each(|q| *q += f.bias);
        // (Every slot is written by the gather below: no need to zero them first.)
        s.slots.resize(plan.x_len, 0);
        // Pairs of values moved as 32-bit words (both buffers come from the allocator, which
        // aligns them for u32; `align_to` checks).
        // SAFETY: any bit pattern is a valid u32 and a valid pair of i16.
        let (src, slots) = unsafe { (s.panel.q.align_to::<u32>(), s.slots.align_to_mut::<u32>()) };
        assert!(src.0.is_empty() && slots.0.is_empty(), "i16 buffers not 4-byte aligned");
        plan.gather_pairs(src.1, slots.1);
        for c in &plan.chunks {
            let dst = &mut dst[c.offset..c.offset + c.bytes];
            let hb = header_bytes(f, c.groups);
            write_header(f, &s.fields[c.g0..c.g0 + c.groups], &mut dst[..hb]);
            let vecs = &s.slots[c.x_offset..c.x_offset + 32 * c.v];
            let (step, sb) = (c.step(), step_bytes(f.bits, c.step()));
            for (st, vv) in vecs.chunks_exact(32 * step).enumerate() {
                encode_step(f.bits, vv, &mut dst[hb + st * sb..hb + (st + 1) * sb]);
            }
        }
    }
}

/// Buffers reused across the rows one packing task does.
#[derive(Default)]
struct Scratch {
    panel: crate::qpanel::Panel,
    fields: Vec<GroupScale>,
    slots: Vec<i16>,
}

/// `out[i·n + j] = Σ x[i,·] · W[j,·]` over packed weights, with `x` quantized (`a`) and
/// interleaved by `p.plan` (`qi`).
#[cfg(target_arch = "x86_64")]
pub fn matmul(p: &Packed, a: &QuantizedActs, qi: &[i16], out: &mut [f32]) {
    matmul_many(&[p], a, qi, &mut [out]);
}

/// [`matmul`] for up to four weights of one layout ([`Plan::same_layout`]) and the same
/// activations, as one job on the pool (q/k/v or gate/up: one quantization, one interleave,
/// one start and join). Tasks take runs of tiles.
#[cfg(target_arch = "x86_64")]
pub fn matmul_many(ps: &[&Packed], a: &QuantizedActs, qi: &[i16], outs: &mut [&mut [f32]]) {
    use crate::matmul::SyncPtr;
    const MAX: usize = 4;
    let (m, plan) = (a.m, &ps[0].plan);
    assert!(ps.len() <= MAX && ps.len() == outs.len());
    assert!(crate::isa::Tier::Avx512.supported(), "packed weights need AVX-512 VNNI");
    assert!(a.k == ps[0].cols && qi.len() == m * plan.x_len);
    let threads = crate::pool::global().n_threads();
    // Per weight: tiles per task, and the first task of each weight.
    let mut per = [0usize; MAX];
    let mut first = [0usize; MAX + 1];
    let mut out_ptr = [SyncPtr(std::ptr::null_mut()); MAX];
    for (i, (p, out)) in ps.iter().zip(outs.iter_mut()).enumerate() {
        assert!(p.plan.same_layout(plan) && out.len() == m * p.rows);
        per[i] = p.tiles().div_ceil(threads * 4).clamp(1, 32);
        first[i + 1] = first[i] + p.tiles().div_ceil(per[i]);
        out_ptr[i] = SyncPtr(out.as_mut_ptr());
    }
    crate::pool::global().run(first[ps.len()], &|task| {
        let wi = (0..ps.len()).find(|&i| task < first[i + 1]).expect("task of some weight");
        let (p, task) = (ps[wi], task - first[wi]);
        let tiles = (task * per[wi])..((task + 1) * per[wi]).min(p.tiles());
        let out = out_ptr[wi];
        if m >= EXPAND_MIN_ROWS {
            EXPANDED.with_borrow_mut(|e| run_expanded(p, a, qi, tiles, out, e));
        } else {
            run_in_registers(p, a, qi, tiles, out);
        }
    });
}

/// From this many activation rows on, a tile's weights are expanded once ([`crate::packed_gemm`])
/// rather than in registers for every four rows.
#[cfg(target_arch = "x86_64")]
const EXPAND_MIN_ROWS: usize = 8;

#[cfg(target_arch = "x86_64")]
thread_local! {
    static EXPANDED: std::cell::RefCell<crate::packed_gemm::Expanded> = Default::default();
}

/// Activation rows `b0..b0 + n` as kernel rows (the rest of the block repeats row `b0`: blocks
/// are built whole, and only their first `n` rows are read).
#[cfg(target_arch = "x86_64")]
fn x_rows<const N: usize>(
    a: &QuantizedActs,
    qi: &[i16],
    plan: &Plan,
    b0: usize,
    n: usize,
) -> [crate::packed_avx512::XRow; N] {
    let row = |i| crate::packed_avx512::XRow::new(a, qi, plan.x_len, plan.group, i);
    let mut rows = [row(b0); N];
    for (i, r) in rows.iter_mut().enumerate().take(n).skip(1) {
        *r = row(b0 + i);
    }
    rows
}

/// A task's tiles against all activation rows, expanding weights in registers: activation rows
/// go in blocks that stay in L1, four at a time against each tile.
#[cfg(target_arch = "x86_64")]
fn run_in_registers(
    p: &Packed,
    a: &QuantizedActs,
    qi: &[i16],
    tiles: std::ops::Range<usize>,
    out: crate::matmul::SyncPtr,
) {
    const ACT_BLOCK: usize = 16;
    let m = a.m;
    for b0 in (0..m).step_by(ACT_BLOCK) {
        let nb = (m - b0).min(ACT_BLOCK);
        let xs = x_rows::<ACT_BLOCK>(a, qi, &p.plan, b0, nb);
        for t in tiles.clone() {
            let mut i = 0;
            while i < nb {
                let c = (nb - i).min(4);
                let first = b0 == 0 && i == 0;
                // SAFETY: the tier was checked; rows were interleaved by this layout; this
                // task alone writes the columns of these tiles of this weight's output.
                unsafe {
                    let (o, xs) = (out.get().add((b0 + i) * p.rows), &xs[i..i + c]);
                    let f = |res: &[[f32; ROW_TILE]]| write_tile(p, t, res, o);
                    use crate::packed_avx512::tile;
                    match c {
                        4 => f(&tile::<4>(p, t, xs.try_into().expect("4"), first)),
                        3 => f(&tile::<3>(p, t, xs.try_into().expect("3"), first)),
                        2 => f(&tile::<2>(p, t, xs.try_into().expect("2"), first)),
                        _ => f(&tile::<1>(p, t, xs.try_into().expect("1"), first)),
                    }
                }
                i += c;
            }
        }
    }
}

/// A task's tiles against all activation rows, each tile expanded once per block of activation
/// rows (whose interleaved rows, read again for every tile, stay in L2: capping a block at
/// 192 KiB cost more in re-expanded weights than it saved).
#[cfg(target_arch = "x86_64")]
fn run_expanded(
    p: &Packed,
    a: &QuantizedActs,
    qi: &[i16],
    tiles: std::ops::Range<usize>,
    out: crate::matmul::SyncPtr,
    e: &mut crate::packed_gemm::Expanded,
) {
    const ACT_BLOCK: usize = 64;
    let m = a.m;
    let mut staged = std::mem::take(&mut e.staged);
    for b0 in (0..m).step_by(ACT_BLOCK) {
        let nb = (m - b0).min(ACT_BLOCK);
        let xs = x_rows::<ACT_BLOCK>(a, qi, &p.plan, b0, nb);
        let (nt, per_tile) = (tiles.len(), ROW_TILE * nb);
        staged.resize(per_tile * nt, 0.0);
        // The runs' output lines, fetched for writing a few per tile while the tiles compute:
        // the copy below then finds them owned (its stores otherwise waited on each line, often
        // held by the other core that read the previous output).
        let ahead = per_tile.div_ceil(nt);
        // Each (activation row, band) takes a run of consecutive outputs from its band's start.
        let starts = [0, 1, 2, 3].map(|r| p.row_of(tiles.start, r));
        for (i, (t, st)) in tiles.clone().zip(staged.chunks_exact_mut(per_tile)).enumerate() {
            // SAFETY: the tier was checked; rows were interleaved by this layout; `e` holds
            // tile t when the rows are dotted.
            unsafe {
                crate::packed_gemm::expand_tile(p, t, e, b0 == 0);
                crate::packed_gemm::tile_rows(p, e, &xs[..nb], st);
            }
            for k in (i * ahead..(i + 1) * ahead).take_while(|&k| k < per_tile) {
                let (c, r) = (k / ROW_TILE, k % ROW_TILE);
                let at = out.get().wrapping_add((b0 + c) * p.rows + starts[r]);
                crate::matmul::x86::prefetch_lines_for_write(at as *const u8, nt * 4);
            }
        }
        // SAFETY: the tier was checked; this task alone writes these outputs (the columns of
        // its tiles) of rows b0..b0 + nb.
        unsafe { crate::packed_gemm::write_runs(&staged, nb, starts, p.rows, out.get().add(b0 * p.rows)) };
    }
    e.staged = staged;
}

/// A tile's results for `res.len()` activation rows, written to `out` (row `c` at `out + c·rows`;
/// padding rows dropped).
///
/// # Safety
/// `out` must hold `res.len()` rows of `p.rows` outputs.
#[cfg(target_arch = "x86_64")]
unsafe fn write_tile(p: &Packed, t: usize, res: &[[f32; ROW_TILE]], out: *mut f32) {
    for (c, row) in res.iter().enumerate() {
        for (r, &v) in row.iter().enumerate() {
            let j = p.row_of(t, r);
            if j < p.rows {
                unsafe { *out.add(c * p.rows + j) = v };
            }
        }
    }
}

#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}
impl SendPtr {
    fn get(self) -> *mut u8 {
        self.0
    }
}

/// A group's scale fields as stored: f16 bits of `d` and `dmin` (per group, or of its
/// super-block) and the integer scale and minimum of k-quants.
#[derive(Clone, Copy, Default)]
struct GroupScale {
    d: u16,
    dmin: u16,
    sc: i8,
    m: u8,
}

fn f16_bits(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

/// The scale fields of each group of one block, as [`unpack_block`] combines them.
fn group_scales(ty: GgmlType, b: &[u8], out: &mut [GroupScale]) {
    use GgmlType::*;
    let (d, dmin) = match ty {
        Q4_0 | Q5_0 | Q8_0 => (f16_bits(b, 0), 0),
        Q4_1 | Q5_1 | Q4K | Q5K => (f16_bits(b, 0), f16_bits(b, 2)),
        Q2K => (f16_bits(b, 80), f16_bits(b, 82)),
        Q3K => (f16_bits(b, 108), 0),
        Q6K => (f16_bits(b, 208), 0),
        _ => unreachable!("dense formats are not packed"),
    };
    let q3 = if ty == Q3K { q3k_scales(&b[96..108]) } else { [0; 16] };
    for (i, o) in out.iter_mut().enumerate() {
        let (sc, m) = match ty {
            Q4K | Q5K => {
                let (sc, m) = scale_min_k4(i, &b[4..16]);
                (sc as i8, m)
            }
            Q2K => ((b[i] & 0xF) as i8, b[i] >> 4),
            Q3K => (q3[i] as i8, 0),
            Q6K => (b[192 + i] as i8, 0),
            _ => (0, 0),
        };
        *o = GroupScale { d, dmin, sc, m };
    }
}

/// Header: per-group f16 `d` (then `m`); or integer scales, minimums, then per-super-block
/// f16 `d` and `dmin`.
fn write_header(f: Format, gs: &[GroupScale], out: &mut [u8]) {
    let hg = gs.len();
    let put16 = |out: &mut [u8], i: usize, v: u16| out[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
    match f.scales {
        Scales::PerGroup { mins } => {
            for (i, g) in gs.iter().enumerate() {
                put16(out, i, g.d);
                if mins {
                    put16(&mut out[2 * hg..], i, g.dmin);
                }
            }
        }
        Scales::Super { per_sb, mins, .. } => {
            let nsb = hg.div_ceil(per_sb);
            let (ints, tail) = out.split_at_mut(hg * (1 + mins as usize));
            for (i, g) in gs.iter().enumerate() {
                ints[i] = g.sc as u8;
                if mins {
                    ints[hg + i] = g.m;
                }
            }
            for sb in 0..nsb {
                put16(tail, sb, gs[sb * per_sb].d);
                if mins {
                    put16(&mut tail[2 * nsb..], sb, gs[sb * per_sb].dmin);
                }
            }
        }
    }
}

/// Encodes one step (`vv`: 4 or 2 vectors of 32 values) of stored values into its bit planes, in the
/// order the kernels read them: nibble entries (vectors `2e`, `2e+1` in the low and high
/// nibbles of each byte), then a 2-bit entry (vector `t` in bits `2t..2t+2`), then one 32-bit
/// mask per vector (the 1-bit plane); or signed bytes per vector for 8 bits.
fn encode_step(bits: u8, vv: &[i16], out: &mut [u8]) {
    let vec = |t: usize| &vv[32 * t..32 * t + 32];
    let n = vv.len() / 32;
    let mut at = 0;
    if bits == 8 {
        for (o, &u) in out.iter_mut().zip(vv) {
            *o = u as i8 as u8;
        }
        return;
    }
    if matches!(bits, 4..=6) {
        for e in 0..n / 2 {
            let (lo, hi) = (vec(2 * e), vec(2 * e + 1));
            for i in 0..32 {
                out[at + i] = (lo[i] & 0xF) as u8 | (((hi[i] & 0xF) as u8) << 4);
            }
            at += 32;
        }
    }
    if matches!(bits, 2 | 3 | 6) {
        let shift = if bits == 6 { 4 } else { 0 };
        for i in 0..32 {
            out[at + i] = (0..n).map(|t| (((vec(t)[i] >> shift) & 3) as u8) << (2 * t)).sum();
        }
        at += 32;
    }
    if matches!(bits, 3 | 5) {
        let bit = if bits == 5 { 4 } else { 2 };
        for t in 0..n {
            let mask: u32 = vec(t).iter().enumerate().map(|(i, &u)| (((u >> bit) & 1) as u32) << i).sum();
            out[at..at + 4].copy_from_slice(&mask.to_le_bytes());
            at += 4;
        }
    }
    debug_assert_eq!(at, out.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qpanel::Panel;
    use crate::testing::quantize_random;
    use half::f16;

    /// The scalar reading of a packed chunk header: `(vscale, mcoef)` of its groups, as
    /// [`unpack_block`] computes them (tests check they are the same bits).
    fn header_scales(f: Format, hdr: &[u8], hg: usize) -> (Vec<f32>, Vec<f32>) {
        let h = |i: usize| f16::from_bits(f16_bits(hdr, 2 * i)).to_f32();
        match f.scales {
            Scales::PerGroup { mins } => {
                let vs = (0..hg).map(h).collect();
                let mc = if mins { (0..hg).map(|i| h(hg + i)).collect() } else { vec![0.0; hg] };
                (vs, mc)
            }
            Scales::Super { per_sb, signed, mins } => {
                let nsb = hg.div_ceil(per_sb);
                let ints = hg * (1 + mins as usize);
                let hd = |i: usize| f16::from_bits(f16_bits(&hdr[ints..], 2 * i)).to_f32();
                let vs = (0..hg)
                    .map(|i| {
                        let sc = if signed { hdr[i] as i8 as f32 } else { hdr[i] as f32 };
                        hd(i / per_sb) * sc
                    })
                    .collect();
                let mc =
                    (0..hg).map(|i| if mins { -(hd(nsb + i / per_sb) * hdr[hg + i] as f32) } else { 0.0 }).collect();
                (vs, mc)
            }
        }
    }

    /// The scalar reading of a packed step: the stored values of its vectors.
    fn decode_step(bits: u8, step: usize, src: &[u8]) -> Vec<[i16; 32]> {
        let mut vv = vec![[0i16; 32]; step];
        let mut at = 0;
        if bits == 8 {
            for v in vv.iter_mut() {
                for (o, &b) in v.iter_mut().zip(&src[at..at + 32]) {
                    *o = b as i8 as i16;
                }
                at += 32;
            }
            return vv;
        }
        if matches!(bits, 4..=6) {
            for e in 0..step / 2 {
                for i in 0..32 {
                    vv[2 * e][i] = (src[at + i] & 0xF) as i16;
                    vv[2 * e + 1][i] = (src[at + i] >> 4) as i16;
                }
                at += 32;
            }
        }
        if matches!(bits, 2 | 3 | 6) {
            let shift = if bits == 6 { 4 } else { 0 };
            for (t, v) in vv.iter_mut().enumerate() {
                for i in 0..32 {
                    v[i] |= (((src[at + i] >> (2 * t)) & 3) as i16) << shift;
                }
            }
            at += 32;
        }
        if matches!(bits, 3 | 5) {
            let bit = if bits == 5 { 4 } else { 2 };
            for v in vv.iter_mut() {
                let mask = u32::from_le_bytes([src[at], src[at + 1], src[at + 2], src[at + 3]]);
                for (i, o) in v.iter_mut().enumerate() {
                    *o |= (((mask >> i) & 1) as i16) << bit;
                }
                at += 4;
            }
        }
        vv
    }

    fn ks(ty: GgmlType) -> Vec<usize> {
        if ty.block_size() == 256 {
            vec![256, 768, 2048 + 256]
        } else {
            (1..=17).chain([18, 28, 33]).map(|g| 32 * g).collect()
        }
    }

    /// Every packed value and scale reads back as the panel (the scalar reference) has it.
    #[test]
    fn packed_rows_read_back_as_the_panel() {
        for (ty, f) in FORMATS {
            for k in ks(ty) {
                let rows = 6;
                let w = quantize_random(ty, rows, k, 5);
                let p = Packed::pack(&w).expect("packable");
                let mut panel = Panel::default();
                panel.unpack(crate::isa::Tier::Scalar, ty, w.bytes(), rows, k);
                let g = panel.group;
                for row in 0..rows {
                    for c in &p.plan.chunks {
                        let at = p.chunk_at(row, c);
                        let chunk = &p.data.bytes()[at..at + c.bytes];
                        let hb = header_bytes(f, c.groups);
                        let (vs, mc) = header_scales(f, &chunk[..hb], c.groups);
                        let step = c.step();
                        let vecs: Vec<[i16; 32]> = chunk[hb..]
                            .chunks_exact(step_bytes(f.bits, step))
                            .flat_map(|s| decode_step(f.bits, step, s))
                            .collect();
                        assert_eq!(vecs.len(), c.v);
                        for gl in 0..c.groups {
                            let gi = c.g0 + gl;
                            let pg = row * (k / g) + gi;
                            assert_eq!(vs[gl].to_bits(), panel.vscale[pg].to_bits(), "{ty:?} k={k} vscale");
                            let want_mc = panel.mcoef.as_ref().map_or(0.0, |m| m[pg]);
                            assert_eq!(mc[gl].to_bits(), want_mc.to_bits(), "{ty:?} k={k} mcoef");
                            for e in 0..g {
                                let (v, lane) = c.slot(gl, e / 2);
                                let got = vecs[v][2 * lane + e % 2] - f.bias;
                                assert_eq!(
                                    got,
                                    panel.q[row * k + gi * g + e],
                                    "{ty:?} k={k} row {row} group {gi} value {e}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The AVX-512 kernels give the scalar tier's bits for every format, tail shape, row count
    /// (tiles padded with zero rows) and batch size, and a row's result does not depend on the
    /// batch around it.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_kernels_are_bit_identical_to_the_scalar_tier() {
        use crate::isa::Tier;
        use crate::testing::rand_vec;
        if !Tier::Avx512.supported() {
            eprintln!("skipped: this CPU lacks AVX-512 VNNI");
            return;
        }
        for (ty, _) in FORMATS {
            for k in ks(ty) {
                // 13 rows: one tile a task; 150: runs of five tiles a task (on two threads).
                for (n, m) in [1, 2, 3, 4, 5, 8, 9, 70].map(|m| (13, m)).into_iter().chain([(150, 1), (150, 70)]) {
                    let w = quantize_random(ty, n, k, 31);
                    let p = Packed::pack(&w).expect("packable");
                    let x = rand_vec(70 * k, 32);
                    let a = QuantizedActs::quantize(&x[..m * k], m, k);
                    let mut want = vec![0f32; m * n];
                    crate::qmatmul::qmatmul(Tier::Scalar, &a, &w, &mut want);
                    let mut qi = Interleaved::default();
                    p.plan.interleave(&a.q, m, &mut qi);
                    let mut got = vec![0f32; m * n];
                    matmul(&p, &a, qi.as_slice(), &mut got);
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(g.to_bits(), w.to_bits(), "{ty:?} k={k} m={m} out {i}: {g} vs {w}");
                    }
                }
            }
        }
    }

    /// The vector gather lays out rows as the plain loop over `xsrc` does.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn interleave_gathers_as_the_plain_loop() {
        if !crate::isa::Tier::Avx512.supported() {
            return;
        }
        for (ty, f) in FORMATS {
            for k in ks(ty) {
                let plan = Plan::new(f, group_of(ty), k);
                let src: Vec<u32> = (0..k as u32 / 2).map(|i| i.wrapping_mul(2654435761) | 1).collect();
                let want: Vec<u32> = plan.xsrc.iter().map(|&p| if p < 0 { 0 } else { src[p as usize] }).collect();
                let mut got = vec![7u32; want.len()];
                // SAFETY: checked above; xsrc entries are < k/2.
                unsafe { crate::packed_avx512::gather_pairs(&plan.xsrc, &src, &mut got) };
                assert_eq!(got, want, "{ty:?} k={k}");
            }
        }
    }

    #[test]
    fn plans_cover_every_value_once_and_tails_are_narrow() {
        for (ty, f) in FORMATS {
            for k in ks(ty) {
                let plan = Plan::new(f, group_of(ty), k);
                let mut seen = vec![false; k / 2];
                for &from in plan.xsrc.iter().filter(|&&p| p >= 0) {
                    assert!(!std::mem::replace(&mut seen[from as usize], true), "{ty:?} k={k}: pair taken twice");
                }
                assert!(seen.iter().all(|&s| s), "{ty:?} k={k}: a pair left out");
                let last = plan.chunks.last().unwrap();
                assert!(last.groups * last.s <= LANES && last.v >= 2);
                if last.groups <= 2 && f.bits == 4 {
                    assert_eq!(last.v, 2, "{ty:?} k={k}: a 1–2 group tail takes two vectors");
                }
            }
        }
    }
}
