//! `out = x · Wᵀ` for quantized `W`, with int16 activations ([`QuantizedActs`]) and weights
//! unpacked into a [`Panel`].
//!
//! The reduction of one output is fixed, whatever `m`, the thread or the tier:
//! for each weight group `g` in order, an 8-lane integer dot (`lane l` sums elements
//! `{2l, 2l+1, 16+2l, 16+2l+1}` of the group — exact, so its internal order is irrelevant) is
//! converted to f32 and fused-multiply-added into an 8-lane accumulator with scale
//! `vscale[g]·dx`; minimum terms go to a scalar accumulator as `fma(mcoef[g]·dx, Σxq, acc)`;
//! the result is the fixed horizontal sum of the lanes plus the scalar. The scalar tier computes
//! exactly this, so every tier is bit-identical to it.

use crate::isa::Tier;
use crate::matmul::SyncPtr;
use crate::pool;
use crate::qpanel::Panel;
use crate::quant_act::{ActRow, QA_BLOCK, QuantizedActs};
use crate::weight::Weight;
use std::cell::RefCell;

thread_local! {
    static PANEL: RefCell<Panel> = RefCell::new(Panel::default());
}

/// `out[i·n + j] = Σ_k x[i,k] · W[j,k]` with `x` already quantized.
pub fn qmatmul(tier: Tier, x: &QuantizedActs, w: &Weight, out: &mut [f32]) {
    let (n, k, m) = (w.rows, w.cols, x.m);
    assert_eq!(x.k, k, "qmatmul: activations have {} columns, weight has {k}", x.k);
    assert_eq!(out.len(), m * n);
    assert!(w.ty.is_quantized());
    let threads = pool::global().n_threads();
    let per = (n.div_ceil(threads * 4)).next_multiple_of(4).clamp(4, 64);
    let n_tasks = n.div_ceil(per);
    let rb = w.row_bytes();
    let out_ptr = SyncPtr(out.as_mut_ptr());
    let fused = m <= FUSED_MAX_M && fused_available(tier, w.ty);
    pool::global().run(n_tasks, &|t| {
        let j0 = t * per;
        let j1 = (j0 + per).min(n);
        if fused {
            #[cfg(target_arch = "x86_64")]
            for i in 0..m {
                let mut j = j0;
                while j < j1 {
                    let r = (j1 - j).min(4);
                    // SAFETY: this task alone writes columns j0..j1 of every output row; the
                    // weight rows j..j+r exist and the tier supports the kernel.
                    unsafe {
                        let o = std::slice::from_raw_parts_mut(out_ptr.get().add(i * n + j), r);
                        crate::qgemv::dot_rows(w.ty, w.bytes().as_ptr().add(j * rb), rb, x.row(i), o);
                    }
                    j += r;
                }
            }
            return;
        }
        PANEL.with(|cell| {
            let mut p = cell.borrow_mut();
            p.unpack(tier, w.ty, &w.bytes()[j0 * rb..j1 * rb], j1 - j0, k);
            let mut res = [0f32; 4];
            for i in 0..m {
                let xr = x.row(i);
                let mut j = 0;
                while j < j1 - j0 {
                    let r = (j1 - j0 - j).min(4);
                    dot_rows(tier, &p, j, xr, &mut res[..r]);
                    // SAFETY: this task alone writes columns j0..j1 of every output row.
                    let o = unsafe { std::slice::from_raw_parts_mut(out_ptr.get().add(i * n + j0 + j), r) };
                    o.copy_from_slice(&res[..r]);
                    j += r;
                }
            }
        });
    });
}

/// Up to this many activation rows, supported formats skip the panel and expand weights in
/// registers (decode); more rows amortize a panel better (prefill). Results are identical.
const FUSED_MAX_M: usize = 4;

fn fused_available(tier: Tier, ty: crate::ggml::GgmlType) -> bool {
    #[cfg(target_arch = "x86_64")]
    if matches!(tier, Tier::Avx2 | Tier::Avx512) {
        return crate::qgemv::supported(ty);
    }
    let _ = (tier, ty);
    false
}

/// Dots `x` with panel rows `j..j+out.len()` (at most 4).
fn dot_rows(tier: Tier, p: &Panel, j: usize, x: ActRow, out: &mut [f32]) {
    match tier {
        #[cfg(target_arch = "x86_64")]
        Tier::Avx2 | Tier::Avx512 => unsafe { x86::dot_rows(p, j, x, out) },
        _ => {
            for (r, o) in out.iter_mut().enumerate() {
                *o = dot_scalar(p, j + r, x);
            }
        }
    }
}

/// The reference reduction for one panel row (see the module docs).
pub fn dot_scalar(p: &Panel, row: usize, x: ActRow) -> f32 {
    let (g, k) = (p.group, p.k);
    let q = &p.q[row * k..(row + 1) * k];
    let groups = k / g;
    let mut acc = [0f32; 8];
    let mut acc_s = 0f32;
    for gi in 0..groups {
        let base = gi * g;
        let dx = x.d[base / QA_BLOCK];
        let mut lanes = [0i32; 8];
        for h in (0..g).step_by(16) {
            for (l, lane) in lanes.iter_mut().enumerate() {
                let t = base + h + 2 * l;
                *lane += q[t] as i32 * x.q[t] as i32 + q[t + 1] as i32 * x.q[t + 1] as i32;
            }
        }
        let s = p.vscale[row * groups + gi] * dx;
        for (a, &lane) in acc.iter_mut().zip(&lanes) {
            *a = (lane as f32).mul_add(s, *a);
        }
        if let Some(mc) = &p.mcoef {
            let xs = group_sum(x, base, g);
            acc_s = (mc[row * groups + gi] * dx).mul_add(xs as f32, acc_s);
        }
    }
    crate::matmul::hsum8(&acc) + acc_s
}

#[inline]
fn group_sum(x: ActRow, base: usize, g: usize) -> i32 {
    if g == 32 { x.sum16[base / 16] + x.sum16[base / 16 + 1] } else { x.sum16[base / 16] }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// Up to four panel rows against one activation row, sharing the activation loads.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_rows(p: &Panel, j: usize, x: ActRow, out: &mut [f32]) {
        let (g, k) = (p.group, p.k);
        let groups = k / g;
        let r = out.len();
        assert!(r <= 4 && (j + r) * k <= p.q.len() && (j + r) * groups <= p.vscale.len());
        assert!(x.q.len() == k && x.d.len() * QA_BLOCK == k && x.sum16.len() * 16 == k);
        let mc = p.mcoef.as_deref();
        if let Some(mc) = mc {
            assert!((j + r) * groups <= mc.len());
        }
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut acc_s = [0f32; 4];
        let (qp, xp, vp) = (p.q.as_ptr(), x.q.as_ptr(), p.vscale.as_ptr());
        let (dp, sp) = (x.d.as_ptr(), x.sum16.as_ptr());
        for gi in 0..groups {
            let base = gi * g;
            // SAFETY: every index below is bounded by the asserts above.
            unsafe {
                let dx = *dp.add(base / QA_BLOCK);
                let x0 = _mm256_loadu_si256(xp.add(base) as *const __m256i);
                let x1 = if g == 32 { _mm256_loadu_si256(xp.add(base + 16) as *const __m256i) } else { x0 };
                let xs = if g == 32 { *sp.add(base / 16) + *sp.add(base / 16 + 1) } else { *sp.add(base / 16) } as f32;
                for rr in 0..r {
                    let row = j + rr;
                    let wq = qp.add(row * k + base);
                    let mut lanes = _mm256_madd_epi16(_mm256_loadu_si256(wq as *const __m256i), x0);
                    if g == 32 {
                        let hi = _mm256_madd_epi16(_mm256_loadu_si256(wq.add(16) as *const __m256i), x1);
                        lanes = _mm256_add_epi32(lanes, hi);
                    }
                    let s = *vp.add(row * groups + gi) * dx;
                    acc[rr] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(s), acc[rr]);
                    if let Some(mc) = mc {
                        acc_s[rr] = (*mc.as_ptr().add(row * groups + gi) * dx).mul_add(xs, acc_s[rr]);
                    }
                }
            }
        }
        for rr in 0..r {
            out[rr] = crate::matmul::x86_hsum(acc[rr]) + acc_s[rr];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::GgmlType;
    use crate::testing::{quantize_random, rand_vec};

    /// f64 reference on the dequantized weights and the *unquantized* activations.
    fn reference(x: &[f32], m: usize, w: &Weight) -> Vec<f64> {
        let wf = w.to_f32();
        let k = w.cols;
        let mut out = vec![0f64; m * w.rows];
        for i in 0..m {
            for j in 0..w.rows {
                out[i * w.rows + j] = (0..k).map(|t| x[i * k + t] as f64 * wf[j * k + t] as f64).sum();
            }
        }
        out
    }

    #[test]
    fn every_format_matches_the_f64_reference_within_the_activation_error() {
        for ty in GgmlType::ALL.into_iter().filter(|t| t.is_quantized()) {
            let (n, k, m) = (9, 512, 3);
            let w = quantize_random(ty, n, k, 21);
            let x = rand_vec(m * k, 22);
            let xq = QuantizedActs::quantize(&x, m, k);
            let want = reference(&x, m, &w);
            // Budget: Σ|w|·(max|x_block|/65534) from activation rounding, plus f32 accumulation.
            let wf = w.to_f32();
            for tier in Tier::available() {
                let mut out = vec![0f32; m * n];
                qmatmul(tier, &xq, &w, &mut out);
                for i in 0..m {
                    for j in 0..n {
                        let budget: f64 = (0..k)
                            .map(|t| {
                                let b = &x[i * k + t / 32 * 32..i * k + t / 32 * 32 + 32];
                                let amax = b.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                                wf[j * k + t].abs() as f64 * amax / 65534.0
                            })
                            .sum::<f64>()
                            + 1e-5 * (1.0 + want[i * n + j].abs());
                        let got = out[i * n + j] as f64;
                        assert!(
                            (got - want[i * n + j]).abs() <= budget,
                            "{tier:?} {}: {got} vs {} (budget {budget})",
                            ty.name(),
                            want[i * n + j]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn tiers_are_bit_identical_and_rows_are_batch_invariant() {
        for ty in GgmlType::ALL.into_iter().filter(|t| t.is_quantized()) {
            let (n, k) = (13, 256);
            let w = quantize_random(ty, n, k, 3);
            let x = rand_vec(7 * k, 4);
            let xq = QuantizedActs::quantize(&x, 7, k);
            let mut reference_out = vec![0f32; 7 * n];
            qmatmul(Tier::Scalar, &xq, &w, &mut reference_out);
            for tier in Tier::available() {
                let mut all = vec![0f32; 7 * n];
                qmatmul(tier, &xq, &w, &mut all);
                assert_eq!(all, reference_out, "{tier:?} {} differs from scalar", ty.name());
                for i in 0..7 {
                    let one = QuantizedActs::quantize(&x[i * k..(i + 1) * k], 1, k);
                    let mut o = vec![0f32; n];
                    qmatmul(tier, &one, &w, &mut o);
                    assert_eq!(o, all[i * n..(i + 1) * n], "{tier:?} {} row {i}", ty.name());
                }
            }
        }
    }
}
