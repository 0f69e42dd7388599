//! Quantized weights repacked at load for the AVX-512 VNNI and AVX2 tiers ([`crate::packed_avx512`],
//! [`crate::packed_avx2`]: the same layout and bits), *rows across lanes*: sixteen
//! rows make a block, and within a block, group by group, int16 vector `j` of group `g` holds in
//! 32-bit lane `r` pair `j` (values `2j, 2j + 1`) of group `g` of row `r`. One activation pair,
//! broadcast, times such a vector by `vpdpwssd` adds to sixteen rows' group sums at once: a
//! group's integer sums of sixteen rows end in sixteen lanes, with no horizontal reduction, for
//! any number of groups (no tails) and any number of activation rows.
//!
//! The float epilogue is [`crate::qmatmul::chained_reference`]'s: one FMA chain per output over
//! its groups in order, here sixteen rows' chains side by side in one vector, so results have
//! that scalar reference's bits.
//!
//! Values are stored as unsigned `u = q + bias` in bit planes (4-bit nibbles, 2-bit and 1-bit
//! planes, or signed bytes for Q8_0), four vectors a step ([`encode_step`]). Scales keep their
//! GGUF precision (an f16 per group, or an f16 per super-block times a small integer per group),
//! so the bytes per weight equal the GGUF file's (but for Q2_K, whose integer scales take a byte
//! here rather than a nibble).
//!
//! Blocks are dealt to four *bands*: tile `t` is blocks `t`, `t + n`, `t + 2n`, `t + 3n`, and
//! tasks take runs of tiles' halves (two blocks computed together, [`Packed::unit`]), so a task
//! reads four sequential streams (DRAM here delivers ~28 GB/s to two threads reading four or
//! more streams each, ~16 GB/s to one stream per thread).

use crate::aligned::Aligned;
use crate::ggml::{GgmlType, q3k_scales, scale_min_k4};
use crate::isa::Tier;
use crate::qpanel::group_of;
#[cfg(target_arch = "x86_64")]
use crate::quant_act::{ActBits, QuantizedActs};
use crate::weight::Weight;

/// Rows in a block: the 32-bit lanes of a 512-bit vector.
pub const LANES: usize = 16;
/// Blocks in a tile, one from each band.
pub const BANDS: usize = 4;
/// Vectors of 32 stored values in a step ([`encode_step`]).
pub const STEP: usize = 4;

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

/// `$body` with `$F` bound, as a constant, to the format index `$index` ([`FORMATS`]): the
/// kernels are compiled once per format, and a runtime index picks one.
#[rustfmt::skip]
#[cfg(target_arch = "x86_64")]
macro_rules! by_format {
    ($index:expr, $F:ident => $body:expr) => {
        match $index {
            0 => { const $F: usize = 0; $body }
            1 => { const $F: usize = 1; $body }
            2 => { const $F: usize = 2; $body }
            3 => { const $F: usize = 3; $body }
            4 => { const $F: usize = 4; $body }
            5 => { const $F: usize = 5; $body }
            6 => { const $F: usize = 6; $body }
            7 => { const $F: usize = 7; $body }
            8 => { const $F: usize = 8; $body }
            _ => { const $F: usize = 9; $body }
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(crate) use by_format;

/// Whether quantized weights are packed for the kernels of `tier` ([`crate::packed_avx512`],
/// [`crate::packed_avx2`]).
pub fn packs_for(tier: Tier) -> bool {
    matches!(tier, Tier::Avx2 | Tier::Avx512)
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

/// Bytes of one step: [`STEP`] vectors of 32 values.
pub const fn step_bytes(bits: u8) -> usize {
    STEP * 32 * bits as usize / 8
}

/// Where in a step ([`encode_step`]) the one-bit mask of vector `t` starts (3- and 5-bit
/// formats): after the nibbles (4 to 6 bits) and the 2-bit plane (2, 3 and 6 bits).
pub const fn mask_at(bits: u8, t: usize) -> usize {
    let nibbles = if matches!(bits, 4..=6) { 16 * STEP } else { 0 };
    let two = if matches!(bits, 2 | 3 | 6) { 32 } else { 0 };
    nibbles + two + 4 * t
}

/// Where things are in a block of sixteen rows of `k` values. A block is a run of super-blocks
/// (one per group for per-group scales), each its header then its groups; a group is its header
/// then its steps.
///
/// - Per-group scales: the group header is the sixteen rows' f16 `d` (then their `dmin`).
/// - Super-block scales: the super-block header is the rows' f16 `d` (then `dmin`), the group
///   header their integer scales (then minimums), a byte each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Values per scale group ([`group_of`]), and groups per row.
    pub group: usize,
    pub groups: usize,
    /// Groups per super-block (a power of two), and the bytes of its header (0 for per-group
    /// scales).
    pub per_sb: usize,
    pub sb_bytes: usize,
    /// Bytes of a group's header, and of the whole group (header and steps).
    pub header_bytes: usize,
    pub group_bytes: usize,
    pub block_bytes: usize,
}

impl Layout {
    pub fn new(ty: GgmlType, k: usize) -> Layout {
        let f = FORMATS[format_index(ty).expect("a packed format")].1;
        let group = group_of(ty);
        assert!(k.is_multiple_of(group) && (group / 2).is_multiple_of(STEP));
        let groups = k / group;
        let fields = 1 + f.scales.mins() as usize;
        let (per_sb, sb_bytes, header_bytes) = match f.scales {
            Scales::PerGroup { .. } => (1, 0, 2 * LANES * fields),
            Scales::Super { per_sb, .. } => (per_sb, 2 * LANES * fields, LANES * fields),
        };
        assert!(groups.is_multiple_of(per_sb) && per_sb.is_power_of_two(), "k = {k} is not whole super-blocks");
        let group_bytes = header_bytes + group / 2 / STEP * step_bytes(f.bits);
        let block_bytes = groups / per_sb * sb_bytes + groups * group_bytes;
        Layout { group, groups, per_sb, sb_bytes, header_bytes, group_bytes, block_bytes }
    }

    /// Offset in a block of the header of group `g`'s super-block.
    pub fn sb_at(&self, g: usize) -> usize {
        // A shift, not a division: kernels ask for every group of every block.
        (g >> self.per_sb.trailing_zeros()) * (self.sb_bytes + self.per_sb * self.group_bytes)
    }

    /// Offset in a block of group `g` (its header, then its steps).
    pub fn group_at(&self, g: usize) -> usize {
        self.sb_at(g) + self.sb_bytes + (g & (self.per_sb - 1)) * self.group_bytes
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
    pub layout: Layout,
    /// `blocks()` blocks of `layout.block_bytes` (the last block's rows past `rows` are zero).
    pub data: Aligned,
}

impl Packed {
    pub fn blocks(&self) -> usize {
        self.rows.div_ceil(LANES)
    }

    /// Blocks per band, which is also the number of tiles.
    pub fn tiles(&self) -> usize {
        self.blocks().div_ceil(BANDS)
    }

    /// The blocks of unit `u`, which the kernels compute together: bands `2(u mod 2)` and
    /// `2(u mod 2) + 1` of tile `u / 2`, and how many of the two the matrix has (the last bands
    /// can be short; a missing second block repeats the first).
    pub fn unit(&self, u: usize) -> ([usize; 2], usize) {
        let (t, r) = (u / 2, 2 * (u % 2));
        let b = [r * self.tiles() + t, (r + 1) * self.tiles() + t];
        let n = b.iter().filter(|&&b| b < self.blocks()).count();
        (if n == 2 { b } else { [b[0]; 2] }, n)
    }

    /// Units of two blocks ([`Packed::unit`]).
    pub fn units(&self) -> usize {
        2 * self.tiles()
    }

    /// Block `b`'s bytes.
    pub fn block(&self, b: usize) -> &[u8] {
        let bb = self.layout.block_bytes;
        &self.data.bytes()[b * bb..(b + 1) * bb]
    }

    /// Repacks `w`; `None` if its format has no packed layout. Blocks are packed in parallel on
    /// the global pool.
    pub fn pack(w: &Weight) -> Option<Packed> {
        let index = format_index(w.ty)?;
        let format = FORMATS[index].1;
        let layout = Layout::new(w.ty, w.cols);
        let bb = layout.block_bytes;
        let p = Packed { ty: w.ty, format, index, rows: w.rows, cols: w.cols, layout, data: Aligned::default() };
        let mut data = Aligned::zeroed(p.blocks() * bb);
        crate::pool::rows_mut(data.bytes_mut(), bb, 1, |b0, blocks| {
            let mut scratch = Scratch::default();
            for (i, dst) in blocks.chunks_exact_mut(bb).enumerate() {
                p.pack_block(w, b0 + i, dst, &mut scratch);
            }
        });
        PACKED_BYTES.fetch_add(data.bytes().len(), std::sync::atomic::Ordering::Relaxed);
        Some(Packed { data, ..p })
    }

    /// Writes block `b` of `w` into `dst` (`layout.block_bytes`, zeroed).
    fn pack_block(&self, w: &Weight, b: usize, dst: &mut [u8], s: &mut Scratch) {
        let (f, l, k) = (self.format, self.layout, self.cols);
        let (r0, n) = (b * LANES, (self.rows - b * LANES).min(LANES));
        // Values as the panel has them (the SIMD unpacker, bit-identical to the reference).
        let rb = w.row_bytes();
        s.panel.unpack(crate::isa::tier(), w.ty, &w.bytes()[r0 * rb..(r0 + n) * rb], n, k);
        let gpb = w.ty.block_size() / l.group;
        s.fields.resize(n * l.groups, GroupScale::default());
        for r in 0..n {
            for (i, blk) in w.row(r0 + r).chunks_exact(w.ty.type_size()).enumerate() {
                let at = r * l.groups + i * gpb;
                group_scales(w.ty, blk, &mut s.fields[at..at + gpb]);
            }
        }
        let field = |r: usize, g: usize| s.fields[r * l.groups + g];
        let put16 = |out: &mut [u8], r: usize, v: u16| out[2 * r..2 * r + 2].copy_from_slice(&v.to_le_bytes());
        let mut vv = [0i16; STEP * 32];
        for g in 0..l.groups {
            let hdr = &mut dst[l.group_at(g)..];
            for r in 0..n {
                let fr = field(r, g);
                match f.scales {
                    Scales::PerGroup { mins } => {
                        put16(hdr, r, fr.d);
                        if mins {
                            put16(&mut hdr[2 * LANES..], r, fr.dmin);
                        }
                    }
                    Scales::Super { mins, .. } => {
                        hdr[r] = fr.sc as u8;
                        if mins {
                            hdr[LANES + r] = fr.m;
                        }
                    }
                }
            }
            if l.sb_bytes > 0 && g.is_multiple_of(l.per_sb) {
                let sb = &mut dst[l.sb_at(g)..];
                for r in 0..n {
                    put16(sb, r, field(r, g).d);
                    if f.scales.mins() {
                        put16(&mut sb[2 * LANES..], r, field(r, g).dmin);
                    }
                }
            }
            // Step st holds pairs 4·st .. 4·st + 4 of the group; lane r of a vector is row r
            // (stored 0 for rows past the matrix).
            let steps = &mut dst[l.group_at(g) + l.header_bytes..l.group_at(g) + l.group_bytes];
            for (st, out) in steps.chunks_exact_mut(step_bytes(f.bits)).enumerate() {
                vv.fill(0);
                for (e, v) in vv.chunks_exact_mut(32).enumerate() {
                    let at = g * l.group + 2 * (STEP * st + e);
                    for r in 0..n {
                        let q = &s.panel.q[r * k + at..r * k + at + 2];
                        v[2 * r] = q[0] + f.bias;
                        v[2 * r + 1] = q[1] + f.bias;
                    }
                }
                encode_step(f.bits, &vv, out);
            }
        }
    }
}

/// Buffers reused across the blocks one packing task does.
#[derive(Default)]
struct Scratch {
    panel: crate::qpanel::Panel,
    fields: Vec<GroupScale>,
}

#[cfg(target_arch = "x86_64")]
/// Activation rows as the kernels read them, in chunks of [`ACT_ROWS`] rows (the last one
/// shorter): within a chunk of `c` rows, word `p·c + i` is pair `p` (values `2p, 2p + 1`) of
/// its row `i` — or with int8 activations quad `p`, values `4p, 4p + 2, 4p + 1, 4p + 3` in that
/// order, as [`crate::packed_avx512`]'s int8 weight vectors have them — and the scale, scaled
/// sum (and, int8, integer sum) of weight group `g` are at `g·c + i`: so a kernel reads every
/// row's values from one pointer and fixed offsets.
#[derive(Default)]
pub struct ActChunks {
    m: usize,
    k: usize,
    /// Words are int8 quads (the AVX-512 kernels with int8 activations), else int16 pairs.
    pub quads: bool,
    q: Vec<u32>,
    /// Per group of 32 values (`[0]`) and of 16 (`[1]`): scales, scaled sums, and sums (which
    /// the int8 kernels read).
    d: [Vec<f32>; 2],
    dsum: [Vec<f32>; 2],
    sum: [Vec<i32>; 2],
}

#[cfg(target_arch = "x86_64")]
/// One chunk of [`ActChunks`]: `c` rows, and where its values, scales, scaled sums and (int8)
/// sums for weight groups of `group` values start.
#[derive(Clone, Copy)]
pub struct ActChunk {
    pub c: usize,
    pub q: *const u32,
    pub d: *const f32,
    pub dsum: *const f32,
    pub sum: *const i32,
}

#[cfg(target_arch = "x86_64")]
/// Rows a kernel dots at once with a block's weights.
pub const ACT_ROWS: usize = 8;

#[cfg(target_arch = "x86_64")]
impl ActChunks {
    /// Values in a word: a pair, or an int8 quad.
    fn per_word(&self) -> usize {
        if self.quads { 4 } else { 2 }
    }

    /// Lays out `a` (reusing the buffers) for the kernels of `tier`, chunks split over the
    /// pool's threads from 16. (The AVX2 kernels take int8 activations as pairs.)
    pub fn build(&mut self, a: &QuantizedActs, tier: Tier) {
        use crate::pool::Rows;
        let (m, k) = (a.m, a.k);
        let avx512 = tier == Tier::Avx512;
        (self.m, self.k, self.quads) = (m, k, avx512 && a.bits == ActBits::Int8);
        let (words, int8) = (k / self.per_word(), self.quads);
        self.q.resize(m * words, 0);
        for (((d, dsum), sum), per) in self.d.iter_mut().zip(&mut self.dsum).zip(&mut self.sum).zip([k / 32, k / 16]) {
            d.resize(m * per, 0.0);
            dsum.resize(m * per, 0.0);
            sum.resize(m * per, 0);
        }
        let q = Rows::new(&mut self.q, words);
        let [d32, d16] = &mut self.d;
        let [s32, s16] = &mut self.dsum;
        let [i32s, i16s] = &mut self.sum;
        let per = [k / 32, k / 16];
        let scales = [
            (Rows::new(d32, per[0]), Rows::new(s32, per[0]), Rows::new(i32s, per[0])),
            (Rows::new(d16, per[1]), Rows::new(s16, per[1]), Rows::new(i16s, per[1])),
        ];
        crate::pool::split(m.div_ceil(ACT_ROWS), 2, &|chunks| {
            for r0 in chunks.map(|c| c * ACT_ROWS) {
                let c = Self::rows(m, r0);
                let src = [(&a.d, &a.dsum32, &a.sum32, per[0]), (&a.d16, &a.dsum16, &a.sum16, per[1])];
                for ((d, dsum, sum), (sd, sdsum, ssum, per)) in scales.iter().zip(src) {
                    // SAFETY: the chunks of one `split` part are its own.
                    let (d, dsum, sum) = unsafe { (d.part(r0..r0 + c), dsum.part(r0..r0 + c), sum.part(r0..r0 + c)) };
                    for i in 0..c {
                        for g in 0..per {
                            let at = (r0 + i) * per + g;
                            (d[g * c + i], dsum[g * c + i], sum[g * c + i]) = (sd[at], sdsum[at], ssum[at]);
                        }
                    }
                }
                // SAFETY: as above.
                let q = unsafe { q.part(r0..r0 + c) };
                let rows = &a.q[r0 * k..(r0 + c) * k];
                if int8 && c == ACT_ROWS {
                    PAIRS8.with_borrow_mut(|pairs| {
                        pairs.resize(c * k / 2, 0);
                        // SAFETY: the tier was checked by the caller; eight whole rows of k values
                        // (a multiple of 32) to their pairs, then to their quads.
                        unsafe {
                            crate::packed_avx512::transpose8(rows, k / 2, pairs);
                            crate::packed_avx512::quads8(pairs, q);
                        }
                    });
                    continue;
                }
                if int8 {
                    for (i, row) in rows.chunks_exact(k).enumerate() {
                        for (w, x) in q.iter_mut().skip(i).step_by(c).zip(row.chunks_exact(4)) {
                            *w = u32::from_le_bytes([x[0], x[2], x[1], x[3]].map(|v| v as i8 as u8));
                        }
                    }
                    continue;
                }
                if c == ACT_ROWS && avx512 {
                    // SAFETY: the tier was checked by the caller; eight whole rows of k values
                    // (a multiple of 32) in and out.
                    unsafe { crate::packed_avx512::transpose8(rows, k / 2, q) };
                    continue;
                }
                for (i, row) in rows.chunks_exact(k).enumerate() {
                    for (w, x) in q.iter_mut().skip(i).step_by(c).zip(row.chunks_exact(2)) {
                        *w = (x[0] as u16 as u32) | ((x[1] as u16 as u32) << 16);
                    }
                }
            }
        });
    }

    /// Rows in the chunk starting at row `r0` (a multiple of [`ACT_ROWS`]) of `m`: exactly the
    /// rows there are (padding 5 rows to 8 made a speculative verification's matmuls dot 8).
    fn rows(m: usize, r0: usize) -> usize {
        (m - r0).min(ACT_ROWS)
    }

    /// The chunk starting at row `r0`, for weight groups of `group` values.
    pub fn chunk(&self, r0: usize, group: usize) -> ActChunk {
        let j = (group == 16) as usize;
        let per = self.k / group;
        ActChunk {
            c: Self::rows(self.m, r0),
            q: self.q[r0 * self.k / self.per_word()..].as_ptr(),
            d: self.d[j][r0 * per..].as_ptr(),
            dsum: self.dsum[j][r0 * per..].as_ptr(),
            sum: self.sum[j][r0 * per..].as_ptr(),
        }
    }
}

/// `out[i·n + j] = Σ x[i,·] · W[j,·]` over packed weights, with `x` quantized (`a`), by the
/// kernels of `tier` (AVX2 or AVX-512: the same bits).
#[cfg(target_arch = "x86_64")]
pub fn matmul(tier: Tier, p: &Packed, a: &QuantizedActs, out: &mut [f32]) {
    matmul_many(tier, &[p], a, &mut [out]);
}

/// [`matmul`] for up to four weights of the same width and the same activations, as one job on
/// the pool (q/k/v or gate/up: one quantization, one start and join).
#[cfg(target_arch = "x86_64")]
pub fn matmul_many(tier: Tier, ps: &[&Packed], a: &QuantizedActs, outs: &mut [&mut [f32]]) {
    assert!(ps.len() == outs.len());
    let mut jobs: Vec<(&Packed, usize, &mut [f32])> =
        ps.iter().zip(outs.iter_mut()).map(|(p, out)| (*p, 0, &mut **out)).collect();
    matmul_jobs(tier, std::slice::from_ref(a), &mut jobs);
}

/// Products of packed weights with several sets of activations (`(weight, index into acts,
/// out)`: a MoE layer's experts, each over its own tokens), as one job on the pool: one start
/// and join for all of them, and the threads balanced over all of them rather than over each
/// small matrix in turn. Each output is [`matmul`]'s for its weight and activations.
///
/// The weights' units of two blocks ([`Packed::unit`]) are cut into runs, which each thread
/// claims one ahead: so the last unit of a run fetches the first of the thread's next run while
/// it computes (a run's first unit was otherwise fetched by nobody: a third of all units in a
/// decode step). Holding one run ahead leaves at most a run's imbalance at the end of the job;
/// runs are short for that.
#[cfg(target_arch = "x86_64")]
pub fn matmul_jobs(tier: Tier, acts: &[QuantizedActs], jobs: &mut [(&Packed, usize, &mut [f32])]) {
    use crate::matmul::SyncPtr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    assert!(packs_for(tier) && tier.supported(), "packed weights need AVX2 or AVX-512 VNNI");
    let threads = crate::pool::global().n_threads();
    // Per job: units per run, and the job's first run (`first[jobs.len()]` = all runs).
    let mut per = Vec::with_capacity(jobs.len());
    let mut first = Vec::with_capacity(jobs.len() + 1);
    first.push(0);
    for (p, ai, out) in jobs.iter_mut() {
        let a = &acts[*ai];
        assert!(a.k == p.cols && out.len() == a.m * p.rows, "packed matmul: shapes do not match");
        let units = p.units();
        // Several chunks of activation rows make a unit microseconds of work: runs of one unit
        // balance the threads best. With one chunk (decode) a unit is a fraction of a
        // microsecond, and runs of up to four amortize claiming them.
        let n = if a.m > ACT_ROWS { 1 } else { units.div_ceil(threads * 4).clamp(1, 4) };
        per.push(n);
        first.push(first.last().unwrap() + units.div_ceil(n));
    }
    let outs: Vec<SyncPtr> = jobs.iter_mut().map(|(_, _, out)| SyncPtr(out.as_mut_ptr())).collect();
    let ps: Vec<(&Packed, usize)> = jobs.iter().map(|(p, ai, _)| (*p, *ai)).collect();
    let runs = *first.last().unwrap();
    // Run r as (job, its units).
    let run = |r: usize| {
        let j = first.partition_point(|&f| f <= r) - 1;
        let r = r - first[j];
        (j, r * per[j]..((r + 1) * per[j]).min(ps[j].0.units()))
    };
    let next = AtomicUsize::new(0);
    let claim = || Some(next.fetch_add(1, Ordering::Relaxed)).filter(|&r| r < runs).map(run);
    ACTS.with_borrow_mut(|chunks| {
        chunks.resize_with(chunks.len().max(acts.len()), Default::default);
        acts.iter().zip(chunks.iter_mut()).for_each(|(a, c)| c.build(a, tier));
        let chunks = &chunks[..];
        crate::pool::global().run(threads.min(runs), &|_| {
            let mut cur = claim();
            while let Some((j, units)) = cur {
                cur = claim();
                let then = cur.as_ref().map(|(k, next)| (ps[*k].0, next.start));
                run_units(tier, ps[j].0, &chunks[ps[j].1], units, then, outs[j]);
            }
        })
    });
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Chunked activations, one per set of a [`matmul_jobs`] call.
    static ACTS: std::cell::RefCell<Vec<ActChunks>> = Default::default();
    /// Eight rows' pairs on their way to int8 quads ([`ActChunks::build`]).
    static PAIRS8: std::cell::RefCell<Vec<u32>> = Default::default();
}

/// Fetches `len` bytes of block `a` of `p` from offset `from`, as far as the block goes.
/// (Offsets are multiples of a share worked out once: divisions per group cost as much as a
/// group's dots at one row.)
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn fetch_part(p: &Packed, a: usize, from: usize, len: usize) {
    let bytes = p.layout.block_bytes;
    let from = from.min(bytes);
    crate::matmul::x86::prefetch_lines(p.block(a)[from..].as_ptr(), len.min(bytes - from));
}

/// A run's units against all activation rows, in blocks of activation rows that stay in L2
/// while every unit's weights (in L1) are dotted with them. The next unit's blocks (the other
/// two bands), or after the last one unit `then` (of the thread's next run), are fetched
/// meanwhile, on the first pass over the weights: four streams in flight.
#[cfg(target_arch = "x86_64")]
fn run_units(
    tier: Tier,
    p: &Packed,
    a: &ActChunks,
    units: std::ops::Range<usize>,
    then: Option<(&Packed, usize)>,
    out: crate::matmul::SyncPtr,
) {
    const ACT_BLOCK: usize = 64;
    for b0 in (0..a.m).step_by(ACT_BLOCK) {
        let xs = b0..(b0 + ACT_BLOCK).min(a.m);
        for u in units.clone() {
            let (b, n) = p.unit(u);
            // Fetched meanwhile: the run's next unit, after its last the next run's first.
            let after = if u + 1 < units.end { Some((p, u + 1)) } else { then };
            let ahead = after.filter(|_| b0 == 0).map(|(q, v)| (q, q.unit(v)));
            let ahead = ahead.and_then(|(q, (next, n))| (n > 0).then_some((q, next)));
            // SAFETY: the tier was checked; this run alone writes these blocks' outputs.
            match tier {
                _ if n == 0 => {}
                Tier::Avx512 => unsafe { crate::packed_avx512::block_rows(p, (b, n), ahead, a, xs.clone(), out.get()) },
                _ => unsafe { crate::packed_avx2::block_rows(p, (b, n), ahead, a, xs.clone(), out.get()) },
            }
        }
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
            debug_assert_eq!(at, mask_at(bits, t));
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

    /// The scalar reading of row `r`'s scale fields of group `g` in a packed block:
    /// `(vscale, mcoef)` as [`crate::qpanel::unpack_block`] computes them.
    fn header_scales(f: Format, l: &Layout, blk: &[u8], g: usize, r: usize) -> (f32, f32) {
        let h = |at: usize| f16::from_bits(f16_bits(blk, at)).to_f32();
        let hdr = l.group_at(g);
        match f.scales {
            Scales::PerGroup { mins } => (h(hdr + 2 * r), if mins { h(hdr + 2 * (LANES + r)) } else { 0.0 }),
            Scales::Super { signed, mins, .. } => {
                let sb = l.sb_at(g);
                let sc = if signed { blk[hdr + r] as i8 as f32 } else { blk[hdr + r] as f32 };
                let mc = if mins { -(h(sb + 2 * (LANES + r)) * blk[hdr + LANES + r] as f32) } else { 0.0 };
                (h(sb + 2 * r) * sc, mc)
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

    /// Every packed value and scale reads back as the panel (the scalar reference) has it, and
    /// rows past the matrix are zero.
    #[test]
    fn packed_blocks_read_back_as_the_panel() {
        for (ty, f) in FORMATS {
            for k in ks(ty) {
                let rows = 21;
                let w = quantize_random(ty, rows, k, 5);
                let p = Packed::pack(&w).expect("packable");
                let l = p.layout;
                let mut panel = Panel::default();
                panel.unpack(crate::isa::Tier::Scalar, ty, w.bytes(), rows, k);
                let g = panel.group;
                for row in 0..p.blocks() * LANES {
                    let (blk, r) = (p.block(row / LANES), row % LANES);
                    for gi in 0..k / g {
                        let (vs, mc) = header_scales(f, &l, blk, gi, r);
                        let steps = &blk[l.group_at(gi) + l.header_bytes..l.group_at(gi) + l.group_bytes];
                        let vecs: Vec<[i16; 32]> =
                            steps.chunks_exact(step_bytes(f.bits)).flat_map(|s| decode_step(f.bits, STEP, s)).collect();
                        assert_eq!(vecs.len(), g / 2);
                        if row >= rows {
                            assert!(vs == 0.0 && mc == 0.0 && vecs.iter().all(|v| v[2 * r] == 0 && v[2 * r + 1] == 0));
                            continue;
                        }
                        let pg = row * (k / g) + gi;
                        assert_eq!(vs.to_bits(), panel.vscale[pg].to_bits(), "{ty:?} k={k} vscale");
                        let want_mc = panel.mcoef.as_ref().map_or(0.0, |m| m[pg]);
                        assert_eq!(mc.to_bits(), want_mc.to_bits(), "{ty:?} k={k} mcoef");
                        for e in 0..g {
                            let got = vecs[e / 2][2 * r + e % 2] - f.bias;
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

    /// The AVX2 and AVX-512 kernels give their scalar reference's bits for every format, tail shape, row
    /// count (tiles padded with zero rows) and batch size (chunks of every row count), with
    /// int16 and int8 activations, and a row's result does not depend on the batch around it
    /// (that reference is held to the f64 budget in `qmatmul`'s tests).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_and_avx512_kernels_are_bit_identical_to_their_scalar_reference() {
        use crate::testing::rand_vec;
        let tiers: Vec<Tier> = [Tier::Avx2, Tier::Avx512].into_iter().filter(|t| t.supported()).collect();
        if tiers.is_empty() {
            eprintln!("skipped: this CPU lacks AVX2");
            return;
        }
        for tier in tiers {
            for (ty, _) in FORMATS {
                for k in ks(ty) {
                    // 13 rows: one block; 150: ten blocks, whose last band is short; 300: runs of
                    // several blocks a task (on two threads).
                    let shapes = [1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 70].map(|m| (13, m)).into_iter().chain([
                        (150, 1),
                        (150, 70),
                        (300, 9),
                    ]);
                    for (n, m) in shapes {
                        let w = quantize_random(ty, n, k, 31);
                        let p = Packed::pack(&w).expect("packable");
                        let x = rand_vec(70 * k, 32);
                        for bits in [ActBits::Int16, ActBits::Int8] {
                            let a = QuantizedActs::quantize_bits(bits, &x[..m * k], m, k);
                            let mut want = vec![0f32; m * n];
                            crate::qmatmul::chained_reference(&a, &w, &mut want);
                            let mut got = vec![0f32; m * n];
                            matmul(tier, &p, &a, &mut got);
                            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                                assert_eq!(
                                    g.to_bits(),
                                    w.to_bits(),
                                    "{tier:?} {ty:?} {bits:?} k={k} m={m} out {i}: {g} vs {w}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Groups and super-block headers tile a block exactly, in order.
    #[test]
    fn layouts_cover_each_block_exactly() {
        for (ty, _) in FORMATS {
            for k in ks(ty) {
                let l = Layout::new(ty, k);
                let mut at = 0;
                for g in 0..l.groups {
                    if g % l.per_sb == 0 {
                        assert_eq!(l.sb_at(g), at, "{ty:?} k={k}");
                        at += l.sb_bytes;
                    }
                    assert_eq!(l.group_at(g), at, "{ty:?} k={k}");
                    at += l.group_bytes;
                }
                assert_eq!(at, l.block_bytes, "{ty:?} k={k}");
                // The bytes per weight of the GGUF format, or a little more for Q2_K's byte scales.
                let gguf = ty.bytes_for(LANES * k).expect("whole blocks");
                assert!(l.block_bytes >= gguf && l.block_bytes <= gguf * 6 / 5, "{ty:?}: {} vs {gguf}", l.block_bytes);
            }
        }
    }
}
