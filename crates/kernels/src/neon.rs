//! aarch64 NEON kernels: dense (f32/f16/bf16) dot products, the quantized panel dot and
//! attention's value accumulation, each in the reduction order of its scalar reference, so
//! results are bit-identical to the scalar tier (the kernels' tests compare every available
//! tier with it; on x86 machines they run under `qemu-aarch64`, see `scripts/test_aarch64.sh`).
//!
//! The 8-lane dense reduction is two vectors (lanes 0–3, 4–7); the 16-lane quantized one four.

#![cfg(target_arch = "aarch64")]

use crate::ggml::GgmlType;
use crate::matmul::{DenseTask, hsum8, hsum16, load1};
use crate::qmatmul::group_step;
use crate::qpanel::{Panel, block_scales};
use crate::quant_act::ActRow;
use std::arch::aarch64::*;

/// f16 → f32 of the low four lanes (`fcvtl`; Rust's f16 vector intrinsics are not stable).
#[inline]
fn f16_lo(h: uint16x8_t) -> float32x4_t {
    let out: float32x4_t;
    // SAFETY: register-only conversion.
    unsafe {
        std::arch::asm!("fcvtl {o:v}.4s, {i:v}.4h", o = lateout(vreg) out, i = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags));
    }
    out
}

/// f16 → f32 of the high four lanes (`fcvtl2`).
#[inline]
fn f16_hi(h: uint16x8_t) -> float32x4_t {
    let out: float32x4_t;
    // SAFETY: register-only conversion.
    unsafe {
        std::arch::asm!("fcvtl2 {o:v}.4s, {i:v}.8h", o = lateout(vreg) out, i = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags));
    }
    out
}

/// Eight elements from `i` of a row of f32 (`T` = 0), f16 (1) or bf16 (2) values at `p`, as f32
/// (exact): lanes 0–3 and 4–7.
///
/// # Safety
/// Elements `i..i + 8` exist.
#[inline]
pub(crate) unsafe fn load8<const T: u8>(p: *const u8, i: usize) -> [float32x4_t; 2] {
    // SAFETY: as vouched by the caller.
    unsafe {
        match T {
            0 => {
                let q = (p as *const f32).add(i);
                [vld1q_f32(q), vld1q_f32(q.add(4))]
            }
            1 => {
                let h = vld1q_u16((p as *const u16).add(i));
                [f16_lo(h), f16_hi(h)]
            }
            _ => {
                let h = vld1q_u16((p as *const u16).add(i));
                let lo = vshll_n_u16::<16>(vget_low_u16(h));
                [vreinterpretq_f32_u32(lo), vreinterpretq_f32_u32(vshll_high_n_u16::<16>(h))]
            }
        }
    }
}

fn lanes8(v: [float32x4_t; 2]) -> [f32; 8] {
    let mut a = [0f32; 8];
    // SAFETY: eight floats.
    unsafe {
        vst1q_f32(a.as_mut_ptr(), v[0]);
        vst1q_f32(a.as_mut_ptr().add(4), v[1]);
    }
    a
}

fn lanes16(v: [float32x4_t; 4]) -> [f32; 16] {
    let mut a = [0f32; 16];
    for (i, vi) in v.iter().enumerate() {
        // SAFETY: four floats at 4i < 16.
        unsafe { vst1q_f32(a.as_mut_ptr().add(4 * i), *vi) };
    }
    a
}

/// Output columns `j0..j1` (weight rows) of all `m` activation rows of a dense matmul: chunks of
/// activation rows that stay in cache, each against groups of four weight rows, two activation
/// rows at a time (each weight vector converted once for both).
///
/// # Safety
/// No other thread writes columns `j0..j1` of `out`.
pub(crate) unsafe fn dense_task(t: &DenseTask) {
    let (w, rb) = (t.w, t.w.row_bytes());
    t.for_each_tile(|c0, c1, j, r, rows, _| {
        let mut i = c0;
        while i < c1 {
            // SAFETY: rows j..j + r exist; each output view is taken once.
            unsafe {
                let (xr, o) = (|i| t.x_row(i), |i| t.out_row(i, j, r));
                if i + 2 <= c1 {
                    dense_rows(w.ty, [xr(i), xr(i + 1)], rows, rb, [o(i), o(i + 1)]);
                } else {
                    dense_rows(w.ty, [xr(i)], rows, rb, [o(i)]);
                }
            }
            i += 2;
        }
    });
}

unsafe fn dense_rows<const N: usize>(ty: GgmlType, x: [&[f32]; N], w: *const u8, rb: usize, out: [&mut [f32]; N]) {
    // SAFETY: as vouched by the caller.
    unsafe {
        match ty {
            GgmlType::F32 => dense::<0, N>(x, w, rb, out),
            GgmlType::F16 => dense::<1, N>(x, w, rb, out),
            GgmlType::BF16 => dense::<2, N>(x, w, rb, out),
            _ => unreachable!("quantized weights take the int16 path"),
        }
    }
}

/// `out[a][r] = x[a] · row r` for `N` activation rows and up to four weight rows of element type
/// `T`, `rb` bytes apart from `w`, in the order of [`crate::matmul::scalar_dot_of`].
///
/// # Safety
/// `out[a].len()` (≤ 4) rows of `x[a].len()` elements exist at `w`.
pub(crate) unsafe fn dense<const T: u8, const N: usize>(x: [&[f32]; N], w: *const u8, rb: usize, out: [&mut [f32]; N]) {
    let r = out[0].len();
    assert!((0..N).all(|a| x[a].len() == x[0].len() && out[a].len() == r));
    // SAFETY: as vouched by the caller. A constant row count keeps the accumulators in registers.
    unsafe {
        match r {
            4 => dense_r::<T, N, 4>(x, w, rb, out),
            3 => dense_r::<T, N, 3>(x, w, rb, out),
            2 => dense_r::<T, N, 2>(x, w, rb, out),
            1 => dense_r::<T, N, 1>(x, w, rb, out),
            _ => panic!("dense: {r} rows (at most four)"),
        }
    }
}

#[inline]
unsafe fn dense_r<const T: u8, const N: usize, const R: usize>(
    x: [&[f32]; N],
    w: *const u8,
    rb: usize,
    out: [&mut [f32]; N],
) {
    let k = x[0].len();
    let k8 = k / 8 * 8;
    // SAFETY: R rows of k elements at w (the caller); i + 8 ≤ k8 ≤ k.
    unsafe {
        let mut acc = [[[vdupq_n_f32(0.0); 2]; N]; R];
        let mut i = 0;
        while i < k8 {
            let xv: [[float32x4_t; 2]; N] = std::array::from_fn(|a| load8::<0>(x[a].as_ptr() as *const u8, i));
            for (rr, acc_r) in acc.iter_mut().enumerate() {
                let wv = load8::<T>(w.add(rr * rb), i);
                for (c, xa) in acc_r.iter_mut().zip(&xv) {
                    c[0] = vfmaq_f32(c[0], xa[0], wv[0]);
                    c[1] = vfmaq_f32(c[1], xa[1], wv[1]);
                }
            }
            i += 8;
        }
        for (a, out) in out.into_iter().enumerate() {
            for (rr, o) in out.iter_mut().enumerate() {
                let mut s = hsum8(&lanes8(acc[rr][a]));
                for (t, &xt) in x[a].iter().enumerate().skip(k8) {
                    s += xt * load1::<T>(w.add(rr * rb), t);
                }
                *o = s;
            }
        }
    }
}

/// `out[a][r] = dot(panel row r, x[a])` for the first `out[a].len()` panel rows and `N`
/// activation rows (each panel load serves all of them), in the reduction of
/// [`crate::qmatmul::dot_scalar`]: four groups' integer sums in one vector, lanes `g mod 16`.
pub(crate) fn panel_dot_rows<const N: usize>(p: &Panel, x: [ActRow; N], out: [&mut [f32]; N]) {
    let (g, k) = (p.group, p.k);
    let groups = k / g;
    let rows = out[0].len();
    assert!(rows <= p.rows && out.iter().all(|o| o.len() == rows));
    assert!(x.iter().all(|xa| xa.q.len() >= k && xa.group_scale(g).len() >= groups));
    let g4 = groups / 4 * 4;
    for r in 0..rows {
        let q = &p.q[r * k..(r + 1) * k];
        let vs = &p.vscale[r * groups..(r + 1) * groups];
        let mc = p.mcoef.as_ref().map(|m| &m[r * groups..(r + 1) * groups]);
        // SAFETY: NEON is part of every aarch64 target.
        let zero = unsafe { vdupq_n_f32(0.0) };
        let (mut acc, mut accm) = ([[zero; 4]; N], [[zero; 4]; N]);
        for gi in (0..g4).step_by(4) {
            let e = gi * g;
            // SAFETY: groups gi..gi + 4 lie within the row and the activation rows (asserts).
            unsafe {
                let isum = isums4::<N>(q[e..].as_ptr(), std::array::from_fn(|a| x[a].q[e..].as_ptr()), g);
                let vsv = vld1q_f32(vs[gi..].as_ptr());
                let j = (gi % 16) / 4;
                for a in 0..N {
                    let scl = vmulq_f32(vsv, vld1q_f32(x[a].group_scale(g)[gi..].as_ptr()));
                    acc[a][j] = vfmaq_f32(acc[a][j], vcvtq_f32_s32(isum[a]), scl);
                    if let Some(mc) = mc {
                        let ds = vld1q_f32(x[a].group_dsum(g)[gi..].as_ptr());
                        accm[a][j] = vfmaq_f32(accm[a][j], vld1q_f32(mc[gi..].as_ptr()), ds);
                    }
                }
            }
        }
        for a in 0..N {
            let (mut l, mut lm) = (lanes16(acc[a]), lanes16(accm[a]));
            // The last groups (fewer than four) by the scalar reference's own step.
            for gi in g4..groups {
                group_step(p, r, &x[a], gi, &mut l, &mut lm);
            }
            out[a][r] = hsum16(&l) + hsum16(&lm);
        }
    }
}

/// The integer sums of four consecutive groups of `g` (16 or 32) int16 elements of weights `w`
/// against `N` activation rows: lane `t` of result `a` is group `t`'s `Σ w·x[a]` (exact).
///
/// # Safety
/// `4g` elements exist at `w` and at every `x[a]`.
#[inline]
unsafe fn isums4<const N: usize>(w: *const i16, x: [*const i16; N], g: usize) -> [int32x4_t; N] {
    // SAFETY: as vouched by the caller.
    unsafe {
        let mut s = [[vdupq_n_s32(0); 4]; N];
        for (t, st) in (0..4).map(|t| (t, t * g)) {
            for e in (st..st + g).step_by(8) {
                let wv = vld1q_s16(w.add(e));
                for (sa, xa) in s.iter_mut().zip(&x) {
                    let xv = vld1q_s16(xa.add(e));
                    sa[t] = vmlal_s16(sa[t], vget_low_s16(wv), vget_low_s16(xv));
                    sa[t] = vmlal_high_s16(sa[t], wv, xv);
                }
            }
        }
        s.map(|sa| vpaddq_s32(vpaddq_s32(sa[0], sa[1]), vpaddq_s32(sa[2], sa[3])))
    }
}

/// Four elements from `i` of a row of type `T` (as in [`load8`]) as f32.
///
/// # Safety
/// Elements `i..i + 4` exist.
#[inline]
unsafe fn load4<const T: u8>(p: *const u8, i: usize) -> float32x4_t {
    // SAFETY: as vouched by the caller.
    unsafe {
        match T {
            0 => vld1q_f32((p as *const f32).add(i)),
            1 => f16_lo(vcombine_u16(vld1_u16((p as *const u16).add(i)), vdup_n_u16(0))),
            _ => vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16((p as *const u16).add(i)))),
        }
    }
}

/// Attention's `out[j] = (q · row j) · scale`, four cache rows at a time through [`dense`].
///
/// # Safety
/// `out.len()` rows of `q.len()` elements, `stride` bytes apart, exist at `k`.
pub(crate) unsafe fn dots<const T: u8>(q: &[f32], k: *const u8, stride: usize, scale: f32, out: &mut [f32]) {
    for (c, rows) in out.chunks_mut(4).enumerate() {
        // SAFETY: the rows exist (caller); at most four per call.
        unsafe { dense::<T, 1>([q], k.add(4 * c * stride), stride, [rows]) };
        rows.iter_mut().for_each(|o| *o *= scale);
    }
}

/// Attention's `acc += Σ_j w[j] · row j`, 64 elements at a time in sixteen registers (one pass
/// over the rows each: every element still sums its products in row order), the rest from memory.
///
/// # Safety
/// `w.len()` rows of `acc.len()` elements, `stride` bytes apart, exist at `v`.
pub(crate) unsafe fn axpys<const T: u8>(acc: &mut [f32], w: &[f32], v: *const u8, stride: usize) {
    const B: usize = 64;
    let n = acc.len();
    let (nb, n4) = (n / B * B, n / 4 * 4);
    // SAFETY: every access is to elements < n of acc and of rows j < w.len() (the caller).
    unsafe {
        for b in (0..nb).step_by(B) {
            let mut a: [float32x4_t; B / 4] = std::array::from_fn(|i| vld1q_f32(acc.as_ptr().add(b + 4 * i)));
            for (j, &wj) in w.iter().enumerate() {
                let (row, wv) = (v.add(j * stride), vdupq_n_f32(wj));
                for (i, ai) in a.iter_mut().enumerate() {
                    *ai = vfmaq_f32(*ai, wv, load4::<T>(row, b + 4 * i));
                }
            }
            for (i, ai) in a.iter().enumerate() {
                vst1q_f32(acc.as_mut_ptr().add(b + 4 * i), *ai);
            }
        }
        for (j, &wj) in w.iter().enumerate() {
            let (row, wv) = (v.add(j * stride), vdupq_n_f32(wj));
            for i in (nb..n4).step_by(4) {
                let p = acc.as_mut_ptr().add(i);
                vst1q_f32(p, vfmaq_f32(vld1q_f32(p), wv, load4::<T>(row, i)));
            }
            for (t, a) in acc.iter_mut().enumerate().skip(n4) {
                *a = wj.mul_add(load1::<T>(row, t), *a);
            }
        }
    }
}

/// Unpacks `nblocks` consecutive blocks into a panel exactly as the scalar
/// [`crate::qpanel::unpack_block`] does, values by NEON for Q4_0/Q4_1/Q8_0/Q4_K/Q6_K/MXFP4
/// (scales by the scalar [`block_scales`]); false for the other formats.
pub(crate) fn unpack_blocks(
    ty: GgmlType,
    src: &[u8],
    nblocks: usize,
    q: &mut [i16],
    vs: &mut [f32],
    mut mc: Option<&mut [f32]>,
) -> bool {
    use GgmlType::*;
    if !matches!(ty, Q4_0 | Q4_1 | Q8_0 | Q4K | Q6K | MXFP4) {
        return false;
    }
    let (bs, ts) = (ty.block_size(), ty.type_size());
    let gpb = bs / crate::qpanel::group_of(ty);
    assert!(src.len() >= nblocks * ts && q.len() >= nblocks * bs && vs.len() >= nblocks * gpb);
    for i in 0..nblocks {
        let b = &src[i * ts..(i + 1) * ts];
        let qi = &mut q[i * bs..(i + 1) * bs];
        // SAFETY: each helper reads within the block and writes within its `bs` values.
        unsafe {
            match ty {
                Q4_0 | Q4_1 => {
                    let (off, bias) = if ty == Q4_0 { (2, 8) } else { (4, 0) };
                    let qp = qi.as_mut_ptr();
                    nibbles(b[off..].as_ptr(), qp, qp.add(16), bias);
                }
                Q8_0 => bytes32_i8(b[2..].as_ptr(), qi.as_mut_ptr()),
                // Four runs of 32 bytes: low nibbles are elements 64j + l, high ones 64j + 32 + l.
                Q4K => {
                    let qp = qi.as_mut_ptr();
                    for j in 0..4 {
                        for h in 0..2 {
                            let e = 64 * j + 16 * h;
                            nibbles(b[16 + 32 * j + 16 * h..].as_ptr(), qp.add(e), qp.add(e + 32), 0);
                        }
                    }
                }
                MXFP4 => mxfp4(b[1..].as_ptr(), qi.as_mut_ptr()),
                _ => q6k(b.as_ptr(), qi.as_mut_ptr()),
            }
        }
        let mci = mc.as_deref_mut().map(|m| &mut m[i * gpb..(i + 1) * gpb]);
        block_scales(ty, b, &mut vs[i * gpb..(i + 1) * gpb], mci);
    }
    true
}

/// 16 bytes as int16 less `bias`, to `q[0..16]`.
#[inline]
unsafe fn store_u8x16(v: uint8x16_t, bias: i16, q: *mut i16) {
    // SAFETY: 16 values at q (the caller).
    unsafe {
        let b = vdupq_n_s16(bias);
        vst1q_s16(q, vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(v))), b));
        vst1q_s16(q.add(8), vsubq_s16(vreinterpretq_s16_u16(vmovl_high_u8(v)), b));
    }
}

/// 16 bytes of nibbles: the low nibbles to `lo[0..16]`, the high ones to `hi[0..16]`.
#[inline]
unsafe fn nibbles(p: *const u8, lo: *mut i16, hi: *mut i16, bias: i16) {
    // SAFETY: 16 bytes at p, 16 values at lo and at hi (the caller).
    unsafe {
        let v = vld1q_u8(p);
        store_u8x16(vandq_u8(v, vdupq_n_u8(0x0F)), bias, lo);
        store_u8x16(vshrq_n_u8::<4>(v), bias, hi);
    }
}

/// Q8_0's 32 signed bytes as int16.
#[inline]
unsafe fn bytes32_i8(p: *const u8, q: *mut i16) {
    // SAFETY: 32 bytes at p, 32 values at q (the caller).
    unsafe {
        for h in 0..2 {
            let v = vld1q_s8(p.add(16 * h) as *const i8);
            vst1q_s16(q.add(16 * h), vmovl_s8(vget_low_s8(v)));
            vst1q_s16(q.add(16 * h + 8), vmovl_high_s8(v));
        }
    }
}

/// MXFP4's 16 nibble bytes (elements 0..16 low, 16..32 high), each looked up in the doubled
/// e2m1 table [`crate::mxfp4::KVALUES`], as int16.
#[inline]
unsafe fn mxfp4(p: *const u8, q: *mut i16) {
    // SAFETY: 16 bytes at p, 32 values at q (the caller).
    unsafe {
        let table = vld1q_s8(crate::mxfp4::KVALUES.as_ptr());
        let v = vld1q_u8(p);
        for (h, idx) in [vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v)].into_iter().enumerate() {
            let e = vqtbl1q_s8(table, idx);
            vst1q_s16(q.add(16 * h), vmovl_s8(vget_low_s8(e)));
            vst1q_s16(q.add(16 * h + 8), vmovl_high_s8(e));
        }
    }
}

/// Q6_K's values: per half of 128, low nibbles (two runs of 32 bytes) and two bits each of 32
/// bytes of `qh` as bits 4–5, less 32.
#[inline]
unsafe fn q6k(b: *const u8, q: *mut i16) {
    // SAFETY: the block's 210 bytes at b, 256 values at q (the caller).
    unsafe {
        let (m4, m30) = (vdupq_n_u8(0x0F), vdupq_n_u8(0x30));
        for half in 0..2 {
            for part in 0..2 {
                let at = 16 * part;
                let ql0 = vld1q_u8(b.add(64 * half + at));
                let ql1 = vld1q_u8(b.add(64 * half + 32 + at));
                let qh = vld1q_u8(b.add(128 + 32 * half + at));
                let e = [
                    vorrq_u8(vandq_u8(ql0, m4), vandq_u8(vshlq_n_u8::<4>(qh), m30)),
                    vorrq_u8(vandq_u8(ql1, m4), vandq_u8(vshlq_n_u8::<2>(qh), m30)),
                    vorrq_u8(vshrq_n_u8::<4>(ql0), vandq_u8(qh, m30)),
                    vorrq_u8(vshrq_n_u8::<4>(ql1), vandq_u8(vshrq_n_u8::<2>(qh), m30)),
                ];
                for (t, et) in e.into_iter().enumerate() {
                    store_u8x16(et, 32, q.add(128 * half + 32 * t + at));
                }
            }
        }
    }
}
