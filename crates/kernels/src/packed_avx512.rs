//! AVX-512 VNNI kernels over [`crate::packed`] weights (rows across lanes): per group, a
//! block's sixteen rows widened to int16 vectors, one per value pair, and each activation pair
//! broadcast against them by `vpdpwssd` — sixteen rows' group sums in sixteen lanes, for up to
//! eight activation rows at once.
//!
//! The float epilogue is [`crate::qmatmul::chained_reference`] with rows in lanes: per group,
//! in order, `acc = fma(isum, vscale·dx, acc)` (and the minimums' own chain), where `acc` is a
//! vector of the sixteen rows' accumulators. So results have that reference's bits whatever
//! the batch, block or thread.
//!
//! With int8 activations ([`crate::quant_act::ActBits::Int8`]) two widened vectors make one of
//! bytes, four values a lane (stored unsigned: `u = q + bias`), and each activation quad,
//! broadcast, is dotted with it by `vpdpbusd`: half the dot instructions. The bias comes off
//! the integer sum (`Σ u·x − bias · Σ x`, exact), so the epilogue and the bits are the same
//! reference's, for those activations.

#![cfg(target_arch = "x86_64")]

use crate::packed::{
    ACT_ROWS, ActChunk, ActChunks, FORMATS, LANES, Packed, STEP, Scales, by_format, fetch_part, mask_at, step_bytes,
};
use crate::qpanel::group_of;
use std::arch::x86_64::*;

/// The step at `at` (of a group's steps in a packed block) widened to int16, bias taken off.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn step<const F: usize>(at: *const u8) -> [__m512i; STEP] {
    let f = FORMATS[F].1;
    // SAFETY: a whole step at `at` (the caller).
    let mut v = unsafe { expand::<F, STEP>(at) };
    if f.bias != 0 {
        // (Q4_1, Q8_0 and most k-quants store values unbiased.)
        for v in v.iter_mut() {
            *v = _mm512_sub_epi16(*v, _mm512_set1_epi16(f.bias));
        }
    }
    v
}

/// The sixteen rows' `(vscale, mcoef)` of group `g` of a block, as the scalar tier computes them.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
unsafe fn scales<const F: usize>(blk: *const u8, l: &crate::packed::Layout, g: usize) -> (__m512, __m512) {
    let h16 = |p: *const u8| unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) };
    // SAFETY: the headers hold these fields (the layout).
    unsafe {
        let hdr = blk.add(l.group_at(g));
        match FORMATS[F].1.scales {
            Scales::PerGroup { mins } => (h16(hdr), if mins { h16(hdr.add(2 * LANES)) } else { _mm512_setzero_ps() }),
            Scales::Super { signed, mins, .. } => {
                let sb = blk.add(l.sb_at(g));
                let ints = |p: *const u8| {
                    let b = _mm_loadu_si128(p as *const __m128i);
                    _mm512_cvtepi32_ps(if signed { _mm512_cvtepi8_epi32(b) } else { _mm512_cvtepu8_epi32(b) })
                };
                let vs = _mm512_mul_ps(h16(sb), ints(hdr));
                let mc = if mins {
                    let m = _mm512_mul_ps(h16(sb.add(2 * LANES)), ints(hdr.add(LANES)));
                    _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(m), _mm512_set1_epi32(i32::MIN)))
                } else {
                    _mm512_setzero_ps()
                };
                (vs, mc)
            }
        }
    }
}

/// Two blocks widened once, for several chunks of activation rows: `vals` holds block `k`'s
/// steps group by group (four vectors a step), `scales[k · groups + g]` its group `g`'s.
#[derive(Default)]
struct Expanded {
    vals: Vec<__m512i>,
    scales: Vec<(__m512, __m512)>,
}

thread_local! {
    static EXPANDED: std::cell::RefCell<Expanded> = Default::default();
}

/// Where weights come from: widened in registers from the packed blocks, from the buffer, or
/// widened in registers and written to the buffer (the first of several chunks' passes).
const DIRECT: u8 = 0;
const READ: u8 = 1;
const FILL: u8 = 2;

/// [`Expanded`] sized for two blocks of `groups` groups of `steps` steps, as raw pointers (the
/// first pass writes what the later ones read).
#[derive(Clone, Copy)]
struct Buf {
    vals: *mut __m512i,
    scales: *mut (__m512, __m512),
    groups: usize,
    steps: usize,
}

impl Buf {
    #[target_feature(enable = "avx512f")]
    fn new(e: &mut Expanded, groups: usize, steps: usize) -> Buf {
        e.vals.resize(2 * groups * steps * STEP, _mm512_setzero_si512());
        e.scales.resize(2 * groups, (_mm512_setzero_ps(), _mm512_setzero_ps()));
        Buf { vals: e.vals.as_mut_ptr(), scales: e.scales.as_mut_ptr(), groups, steps }
    }
}

/// Where one block's steps of a group are: packed, and in the buffer.
#[derive(Clone, Copy)]
struct Steps {
    packed: *const u8,
    buf: *mut __m512i,
}

/// Where a kernel takes two blocks' weights from: the packed blocks `b` (fetching blocks
/// `ahead`, of the same or another weight) and, with several chunks, `buf` (mode `W`:
/// [`DIRECT`], [`READ`], [`FILL`]).
#[derive(Clone, Copy)]
struct Src<'a> {
    p: &'a Packed,
    b: [usize; 2],
    ahead: Option<(&'a Packed, [usize; 2])>,
    buf: Buf,
    /// Where this chunk's pass starts fetching blocks `ahead`, and the bytes it fetches per
    /// group (the blocks' bytes spread over all groups and passes).
    fetch: (usize, usize),
}

impl Src<'_> {
    /// Where group `g`'s steps of both blocks start: in the buffer for [`READ`], else in the
    /// packed blocks (worked out once a group: per step it cost more scalar work than the
    /// step's loads).
    #[inline]
    fn steps_at<const F: usize, const W: u8>(&self, g: usize) -> [Steps; 2] {
        std::array::from_fn(|k| {
            let at = (k * self.buf.groups + g) * self.buf.steps * STEP;
            let packed = || self.p.block(self.b[k])[self.p.layout.group_at(g) + self.p.layout.header_bytes..].as_ptr();
            match W {
                // (READ and FILL run only in buffered calls, whose buffer holds both blocks.)
                READ => Steps { packed: std::ptr::null(), buf: self.buf.vals.wrapping_add(at) },
                FILL => Steps { packed: packed(), buf: self.buf.vals.wrapping_add(at) },
                _ => Steps { packed: packed(), buf: std::ptr::null_mut() },
            }
        })
    }

    /// Step `st` of a group whose steps are at `at`, as int8 weight vectors ([`quads`]); the
    /// buffer keeps a step's [`QUADS`] vectors in its first slots.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn quads<const F: usize, const W: u8>(at: Steps, st: usize) -> [__m512i; QUADS] {
        // SAFETY: as in `step`.
        unsafe {
            if W == READ {
                return std::array::from_fn(|i| *at.buf.add(st * STEP + i));
            }
            let v = quads::<F>(at.packed.add(st * step_bytes(FORMATS[F].1.bits)));
            if W == FILL {
                v.iter().enumerate().for_each(|(i, v)| *at.buf.add(st * STEP + i) = *v);
            }
            v
        }
    }

    /// Step `st` of a group whose steps are at `at` ([`Src::steps_at`]).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn step<const F: usize, const W: u8>(at: Steps, st: usize) -> [__m512i; STEP] {
        // SAFETY: the buffer holds both blocks' steps (Buf::new), written in the FILL pass
        // before any READ; the packed group has its steps (the caller).
        unsafe {
            if W == READ {
                return std::array::from_fn(|i| *at.buf.add(st * STEP + i));
            }
            let v = step::<F>(at.packed.add(st * step_bytes(FORMATS[F].1.bits)));
            if W == FILL {
                v.iter().enumerate().for_each(|(i, v)| *at.buf.add(st * STEP + i) = *v);
            }
            v
        }
    }

    /// The `j`th group visited in this pass fetches its share of blocks `ahead`: spread over
    /// all groups and passes, the fetches overlap the dots (issued as a burst while widening,
    /// they stalled on the line fill buffers).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn fetch_share(&self, j: usize) {
        let (Some((q, ahead)), (start, share)) = (self.ahead, self.fetch) else { return };
        for a in ahead {
            fetch_part(q, a, start + j * share, share);
        }
    }

    /// Group `g`'s `mcoef` of block `k` (nothing fetched).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn mcoef<const F: usize, const W: u8>(&self, k: usize, g: usize) -> __m512 {
        if W != DIRECT {
            // SAFETY: written in the FILL pass's values (Src::scales) before this.
            return unsafe { (*self.buf.scales.add(k * self.buf.groups + g)).1 };
        }
        // SAFETY: block b[k] and its group g exist (the caller).
        unsafe { scales::<F>(self.p.block(self.b[k]).as_ptr(), &self.p.layout, g).1 }
    }

    /// Group `g`'s `(vscale, mcoef)` of block `k`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn scales<const F: usize, const W: u8>(&self, k: usize, g: usize) -> (__m512, __m512) {
        let at = k * self.buf.groups + g;
        // SAFETY: as in `step`.
        unsafe {
            if W == READ {
                return *self.buf.scales.add(at);
            }
            let sc = scales::<F>(self.p.block(self.b[k]).as_ptr(), &self.p.layout, g);
            if W == FILL {
                *self.buf.scales.add(at) = sc;
            }
            sc
        }
    }

    /// Group `g`'s integer sums of both blocks and the chunk's `C` rows: step by step, four
    /// weight vectors of each block in registers, each activation pair broadcast once and
    /// dotted with both blocks' (2·C independent chains).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn sums<const F: usize, const C: usize, const W: u8>(&self, x: &ActChunk, g: usize) -> [[__m512i; C]; 2] {
        let group = group_of(FORMATS[F].0);
        let mut s = [[_mm512_setzero_si512(); C]; 2];
        // SAFETY: the chunk has the group's pairs of its C rows.
        let xg = unsafe { x.q.add(group / 2 * g * C) };
        let [a, b] = self.steps_at::<F, W>(g);
        for st in 0..group / 2 / STEP {
            // SAFETY: as above.
            let (wa, wb) = unsafe { (Self::step::<F, W>(a, st), Self::step::<F, W>(b, st)) };
            macro_rules! pair {
                ($j:literal) => {
                    for c in 0..C {
                        // SAFETY: pair STEP·st + j of group g of the chunk's row c.
                        let t = unsafe { _mm512_set1_epi32(*xg.add((STEP * st + $j) * C + c) as i32) };
                        dpwssd(&mut s[0][c], wa[$j], t);
                        dpwssd(&mut s[1][c], wb[$j], t);
                    }
                };
            }
            pair!(0);
            pair!(1);
            pair!(2);
            pair!(3);
        }
        s
    }

    /// [`Src::sums`] with int8 activations: each activation quad broadcast once and dotted with
    /// both blocks' int8 weight vectors; the sums start at `−bias · Σ x` of the group.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn sums_q8<const F: usize, const C: usize, const W: u8>(&self, x: &ActChunk, g: usize) -> [[__m512i; C]; 2] {
        let group = group_of(FORMATS[F].0);
        let bias = q8_bias::<F>();
        // SAFETY: the chunk has the group's sums of its C rows.
        let start: [__m512i; C] = std::array::from_fn(|c| _mm512_set1_epi32(-bias * unsafe { *x.sum.add(g * C + c) }));
        let mut s = [start; 2];
        // SAFETY: the chunk has the group's quads of its C rows.
        let xg = unsafe { x.q.add(group / 4 * g * C) };
        let [a, b] = self.steps_at::<F, W>(g);
        for st in 0..group / 2 / STEP {
            // SAFETY: as above.
            let (wa, wb) = unsafe { (Self::quads::<F, W>(a, st), Self::quads::<F, W>(b, st)) };
            for j in 0..QUADS {
                let [s0, s1] = &mut s;
                for (c, (s0, s1)) in s0.iter_mut().zip(s1.iter_mut()).enumerate() {
                    // SAFETY: quad QUADS·st + j of group g of the chunk's row c.
                    let t = unsafe { _mm512_set1_epi32(*xg.add((QUADS * st + j) * C + c) as i32) };
                    dpbusd(s0, wa[j], t);
                    dpbusd(s1, wb[j], t);
                }
            }
        }
        s
    }

    /// The reference's step for group `g`, row `c` of a block: `acc = fma(isum, vscale·dx, acc)`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn epilogue<const C: usize>(
        x: &ActChunk,
        g: usize,
        c: usize,
        isum: __m512i,
        vs: __m512,
        acc: __m512,
    ) -> __m512 {
        // SAFETY: the chunk has a scale per group and row.
        let dx = unsafe { *x.d.add(g * C + c) };
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(vs, _mm512_set1_ps(dx)), acc)
    }

    /// The reference's minimum step for group `g`, row `c` of a block: `accm = fma(mcoef,
    /// dsum, accm)`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn min_step<const C: usize>(x: &ActChunk, g: usize, c: usize, mc: __m512, accm: __m512) -> __m512 {
        // SAFETY: the chunk has a scaled sum per group and row.
        let ds = unsafe { *x.dsum.add(g * C + c) };
        _mm512_fmadd_ps(mc, _mm512_set1_ps(ds), accm)
    }
}

/// Eight rows of int16 values (`pairs` pairs each, a multiple of 16) laid out pair-major:
/// `dst[8p + i]` = pair `p` of row `i` — per sixteen pairs, an 8 × 8 transposition of 64-bit
/// elements (pairs of pairs) in three butterfly stages, then the halves of each split.
///
/// # Safety
/// The CPU must support AVX-512 F; `src` holds 8 rows of `2 · pairs` values, `dst` `8 · pairs`.
#[target_feature(enable = "avx512f")]
pub unsafe fn transpose8(src: &[i16], pairs: usize, dst: &mut [u32]) {
    assert!(pairs.is_multiple_of(16) && src.len() == 16 * pairs && dst.len() == 8 * pairs);
    let idx = |v: [i64; 8]| _mm512_setr_epi64(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
    let stage = |r: &mut [__m512i; 8], d: usize, lo: [i64; 8], hi: [i64; 8]| {
        let (lo, hi) = (idx(lo), idx(hi));
        for i in (0..8).filter(|i| i & d == 0) {
            let (a, b) = (r[i], r[i + d]);
            r[i] = _mm512_permutex2var_epi64(a, lo, b);
            r[i + d] = _mm512_permutex2var_epi64(a, hi, b);
        }
    };
    let split = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    for p0 in (0..pairs).step_by(16) {
        // SAFETY: 16 pairs of each row (the assert).
        let mut r: [__m512i; 8] = std::array::from_fn(|i| unsafe {
            _mm512_loadu_si512(src.as_ptr().add(2 * (i * pairs + p0)) as *const __m512i)
        });
        stage(&mut r, 1, [0, 8, 2, 10, 4, 12, 6, 14], [1, 9, 3, 11, 5, 13, 7, 15]);
        stage(&mut r, 2, [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]);
        stage(&mut r, 4, [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]);
        // r[v] holds pairs 2v, 2v + 1 of rows 0..8, interleaved by row.
        for (v, col) in r.into_iter().enumerate() {
            // SAFETY: 16 words at 8·(p0 + 2v) (the assert).
            unsafe {
                _mm512_storeu_si512(
                    dst.as_mut_ptr().add(8 * (p0 + 2 * v)) as *mut __m512i,
                    _mm512_permutexvar_epi32(split, col),
                )
            };
        }
    }
}

/// Int8 activation quads of eight rows from their pair-major words (as [`transpose8`] writes
/// them): `dst[8j + i]` = row `i`'s values `4j, 4j + 2, 4j + 1, 4j + 3` (low bytes), from its
/// pairs `2j` (`pairs[16j + i]`) and `2j + 1` (`pairs[16j + 8 + i]`).
///
/// # Safety
/// The CPU must support AVX-512 F/VL.
#[target_feature(enable = "avx512f,avx512vl")]
pub unsafe fn quads8(pairs: &[u32], dst: &mut [u32]) {
    assert!(pairs.len() == 2 * dst.len() && dst.len().is_multiple_of(8));
    let low = _mm256_set1_epi32(0x00FF_00FF);
    for (j, out) in dst.chunks_exact_mut(8).enumerate() {
        // SAFETY: words 16j .. 16j + 16 of `pairs` and 8 of `out` (the assert).
        unsafe {
            let a = _mm256_loadu_si256(pairs.as_ptr().add(16 * j) as *const __m256i);
            let b = _mm256_slli_epi32::<8>(_mm256_loadu_si256(pairs.as_ptr().add(16 * j + 8) as *const __m256i));
            // Bytes 0 and 2 from a (pair 2j's two values), 1 and 3 from b (pair 2j + 1's).
            _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, _mm256_ternarylogic_epi32::<0xE4>(a, b, low));
        }
    }
}

/// Blocks `b` of `p` (the first `n` of them real) against activation rows `xs` of `a` (from a
/// multiple of [`ACT_ROWS`]), a chunk at a time: output row `i` gets block `b[k]`'s sixteen
/// values at `out + i · p.rows + 16 · b[k]`, those at or past `p.rows` left alone. With one
/// chunk the weights are widened in registers; with more, the first chunk's pass widens them in
/// registers and writes them to a buffer, which the later passes read (re-widening them per
/// chunk cost up to a quarter more time; widening into the buffer in a pass of its own, 8 % more
/// than filling it on the way). Blocks `ahead` are fetched a share per group computed, over all
/// chunks.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI; no other thread writes these outputs.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn block_rows(
    p: &Packed,
    (b, n): ([usize; 2], usize),
    ahead: Option<(&Packed, [usize; 2])>,
    a: &ActChunks,
    xs: std::ops::Range<usize>,
    out: *mut f32,
) {
    // SAFETY: as vouched by the caller.
    unsafe {
        if a.quads {
            by_format!(p.index, F => block_rows_f::<F, true>(p, (b, n), ahead, a, xs, out))
        } else {
            by_format!(p.index, F => block_rows_f::<F, false>(p, (b, n), ahead, a, xs, out))
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn block_rows_f<const F: usize, const Q8: bool>(
    p: &Packed,
    (b, n): ([usize; 2], usize),
    ahead: Option<(&Packed, [usize; 2])>,
    a: &ActChunks,
    xs: std::ops::Range<usize>,
    out: *mut f32,
) {
    let buffered = xs.len() > ACT_ROWS;
    EXPANDED.with_borrow_mut(|e| {
        let (l, group) = (&p.layout, group_of(FORMATS[F].0));
        let buf = if buffered {
            Buf::new(e, l.groups, group / 2 / STEP)
        } else {
            Buf { vals: std::ptr::null_mut(), scales: std::ptr::null_mut(), groups: 0, steps: 0 }
        };
        // (One division per call: per group it would cost as much as the group's dots.)
        let share = ahead.map_or(0, |(q, _)| q.layout.block_bytes.div_ceil(xs.len().div_ceil(ACT_ROWS) * l.groups));
        for (pass, c0) in xs.clone().step_by(ACT_ROWS).enumerate() {
            let w = Src { p, b, ahead, buf, fetch: (pass * l.groups * share, share) };
            let x = a.chunk(c0, group);
            macro_rules! go {
                ($C:literal) => {{
                    // SAFETY: blocks b and their groups exist; the chunk has C rows; the first
                    // pass fills the buffer that later ones read.
                    let sums = unsafe {
                        match (buffered, $C) {
                            (true, _) if pass == 0 => by_group::<F, $C, FILL, Q8>(&w, &x),
                            (true, _) => by_group::<F, $C, READ, Q8>(&w, &x),
                            _ => by_group::<F, $C, DIRECT, Q8>(&w, &x),
                        }
                    };
                    for (k, sums) in sums.iter().enumerate().take(n) {
                        let row0 = b[k] * LANES;
                        let mask = ((1u32 << (p.rows - row0).min(LANES)) - 1) as u16;
                        for (i, s) in sums.iter().enumerate().take(xs.end - c0) {
                            // SAFETY: the unmasked lanes are outputs of row c0 + i within `p.rows`.
                            unsafe { _mm512_mask_storeu_ps(out.add((c0 + i) * p.rows + row0), mask, *s) };
                        }
                    }
                }};
            }
            match x.c {
                8 => go!(8),
                7 => go!(7),
                6 => go!(6),
                5 => go!(5),
                4 => go!(4),
                3 => go!(3),
                2 => go!(2),
                _ => go!(1),
            }
        }
    });
}

/// Two blocks' results for `C` activation rows: the reference's chain, each block row's
/// accumulator carried through the groups in order. With more than two rows the minimums'
/// chains, which need no dots, are a pass of their own (together they spilled).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn by_group<const F: usize, const C: usize, const W: u8, const Q8: bool>(
    w: &Src,
    x: &ActChunk,
) -> [[__m512; C]; 2] {
    let groups = w.p.layout.groups;
    let mins = FORMATS[F].1.scales.mins();
    let (mut acc, mut accm) = ([[_mm512_setzero_ps(); C]; 2], [[_mm512_setzero_ps(); C]; 2]);
    for g in 0..groups {
        // SAFETY: group g exists; the chunk has C rows.
        unsafe {
            w.fetch_share(g);
            let s = if Q8 { w.sums_q8::<F, C, W>(x, g) } else { w.sums::<F, C, W>(x, g) };
            for k in 0..2 {
                let (vs, mc) = w.scales::<F, W>(k, g);
                for c in 0..C {
                    acc[k][c] = Src::epilogue::<C>(x, g, c, s[k][c], vs, acc[k][c]);
                    if mins && C <= 2 {
                        accm[k][c] = Src::min_step::<C>(x, g, c, mc, accm[k][c]);
                    }
                }
            }
        }
    }
    if mins && C > 2 {
        for g in 0..groups {
            for (k, accm) in accm.iter_mut().enumerate() {
                // SAFETY: as above.
                let mc = unsafe { w.mcoef::<F, W>(k, g) };
                for (c, a) in accm.iter_mut().enumerate() {
                    // SAFETY: as above.
                    *a = unsafe { Src::min_step::<C>(x, g, c, mc, *a) };
                }
            }
        }
    }
    // (Without minimums theirs is +0, as the reference's.)
    std::array::from_fn(|k| std::array::from_fn(|c| _mm512_add_ps(acc[k][c], accm[k][c])))
}

/// Int8 weight vectors in a step: two values a lane of each of two widened vectors.
const QUADS: usize = STEP / 2;

/// The bias of format `F`'s int8 weight vectors: its stored bias, or 128 for Q8_0's signed
/// bytes (`vpdpbusd` takes the weights unsigned).
const fn q8_bias<const F: usize>() -> i32 {
    let f = FORMATS[F].1;
    if f.bits == 8 { 128 } else { f.bias as i32 }
}

/// The step at `at` as int8 weight vectors: vector `j` is widened vectors `2j` (pair `2j`)
/// and `2j + 1` (pair `2j + 1`) in one, lane `r`'s bytes `u(4j), u(4j + 2), u(4j + 1),
/// u(4j + 3)` of row `r` (the order of [`crate::packed::ActChunks`]' quads), with `u = q +
/// bias` ([`q8_bias`]) in 0..=255.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn quads<const F: usize>(at: *const u8) -> [__m512i; QUADS] {
    let bits = FORMATS[F].1.bits;
    if matches!(bits, 4 | 5) {
        // Byte i of the step's half j holds element i of widened vectors 2j (low nibble) and
        // 2j + 1 (high nibble), so quad vector j is the half widened, `z`, as `(z | z << 4) &
        // 0x0F0F` (one ternary-logic op): three instructions where widening both and merging
        // took five. Five bits: widened vector t's fifth bits, a 32-bit mask (`mask_at`), add
        // 16 to its elements: the low bytes of the words for t = 2j, the high
        // ones for 2j + 1.
        // SAFETY: a whole step at `at` (the caller).
        return std::array::from_fn(|j| unsafe {
            let z = zext(at.add(32 * j));
            let mut q = _mm512_ternarylogic_epi32::<0xA8>(z, _mm512_slli_epi16::<4>(z), _mm512_set1_epi16(0x0F0F));
            if bits == 5 {
                let fifth = |t: usize| (at.add(mask_at(bits, t)) as *const u32).read_unaligned();
                add_masked(&mut q, fifth(2 * j), _mm512_set1_epi16(0x0010));
                add_masked(&mut q, fifth(2 * j + 1), _mm512_set1_epi16(0x1000));
            }
            q
        });
    }
    // SAFETY: a whole step at `at` (the caller).
    let v = unsafe { expand::<F, STEP>(at) };
    std::array::from_fn(|j| {
        let hi = _mm512_slli_epi16::<8>(v[2 * j + 1]);
        if FORMATS[F].1.bits == 8 {
            // Sign-extended bytes: the low byte of each, its top bit flipped (+ 128).
            let lo = _mm512_and_si512(v[2 * j], _mm512_set1_epi16(0xFF));
            _mm512_xor_si512(_mm512_or_si512(lo, hi), _mm512_set1_epi16(0x8080u16 as i16))
        } else {
            _mm512_or_si512(v[2 * j], hi)
        }
    })
}

/// `acc += Σ quads of w · x` (`w` unsigned bytes, `x` signed) by `vpdpbusd` on registers
/// (inline assembly, as [`dpwssd`]).
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
fn dpbusd(acc: &mut __m512i, w: __m512i, x: __m512i) {
    // SAFETY: register-only arithmetic.
    unsafe {
        std::arch::asm!("vpdpbusd {a}, {w}, {x}", a = inout(zmm_reg) *acc, w = in(zmm_reg) w, x = in(zmm_reg) x,
            options(pure, nomem, nostack, preserves_flags));
    }
}

/// `acc += Σ pairs of w · x` by `vpdpwssd` on registers.
///
/// Inline assembly because LLVM, for a generic x86-64 target, splits the intrinsic into
/// `vpmaddwd` + `vpaddd`.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
fn dpwssd(acc: &mut __m512i, w: __m512i, x: __m512i) {
    // SAFETY: register-only arithmetic.
    unsafe {
        std::arch::asm!("vpdpwssd {a}, {w}, {x}", a = inout(zmm_reg) *acc, w = in(zmm_reg) w, x = in(zmm_reg) x,
            options(pure, nomem, nostack, preserves_flags));
    }
}

/// 32 bytes at `p`, zero-extended to 32 int16 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn zext(p: *const u8) -> __m512i {
    unsafe { _mm512_cvtepu8_epi16(_mm256_loadu_si256(p as *const __m256i)) }
}

/// The `STEP` vectors of stored values of one step (layout of [`crate::packed::encode_step`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn expand<const F: usize, const STEP: usize>(p: *const u8) -> [__m512i; STEP] {
    let bits = FORMATS[F].1.bits;
    let mut v = [_mm512_setzero_si512(); STEP];
    // SAFETY: the step's bytes (the caller).
    unsafe {
        if bits == 8 {
            for (t, vt) in v.iter_mut().enumerate() {
                *vt = _mm512_cvtepi8_epi16(_mm256_loadu_si256(p.add(32 * t) as *const __m256i));
            }
            return v;
        }
        let mut at = 0;
        if matches!(bits, 4..=6) {
            let m4 = _mm512_set1_epi16(0x0F);
            for e in 0..STEP / 2 {
                let z = zext(p.add(32 * e));
                v[2 * e] = _mm512_and_si512(z, m4);
                v[2 * e + 1] = _mm512_srli_epi16::<4>(z);
            }
            at = 16 * STEP;
        }
        if matches!(bits, 2 | 3 | 6) {
            let h = zext(p.add(at));
            let m3 = _mm512_set1_epi16(3);
            let two = |t: usize| match t {
                0 => h,
                1 => _mm512_srli_epi16::<2>(h),
                2 => _mm512_srli_epi16::<4>(h),
                _ => _mm512_srli_epi16::<6>(h),
            };
            for (t, vt) in v.iter_mut().enumerate() {
                if bits == 6 {
                    // vt | (bits 2t..2t+2 of h) << 4, by one ternary-logic op on (h shifted into place) & 0x30.
                    let hs = match t {
                        0 => _mm512_slli_epi16::<4>(h),
                        1 => _mm512_slli_epi16::<2>(h),
                        2 => h,
                        _ => _mm512_srli_epi16::<2>(h),
                    };
                    *vt = _mm512_ternarylogic_epi32::<0xF8>(*vt, hs, _mm512_set1_epi16(0x30));
                } else {
                    *vt = _mm512_and_si512(two(t), m3);
                }
            }
        }
        if matches!(bits, 3 | 5) {
            let add = _mm512_set1_epi16(if bits == 5 { 16 } else { 4 });
            for (t, vt) in v.iter_mut().enumerate() {
                let k: __mmask32 = (p.add(mask_at(bits, t)) as *const u32).read_unaligned();
                add_masked(vt, k, add);
            }
        }
    }
    v
}

/// `v += c` in the int16 lanes selected by `k` (one merge-masked `vpaddw`; LLVM makes the
/// intrinsic an OR and a masked move, two instructions per vector of the Q5/Q3 expansion).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn add_masked(v: &mut __m512i, k: __mmask32, c: __m512i) {
    // SAFETY: register-only arithmetic.
    unsafe {
        std::arch::asm!("vpaddw {v}{{{k}}}, {v}, {c}", v = inout(zmm_reg) *v, k = in(kreg) k, c = in(zmm_reg) c,
            options(pure, nomem, nostack, preserves_flags));
    }
}
