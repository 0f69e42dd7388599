//! Per-token kernels of the recurrent token mixers (gated delta-net, short convolutions): a fixed
//! state per request, updated one token at a time.
//!
//! Every token runs the same arithmetic whatever the chunking of the prompt or the batch
//! around it, so prefill in any chunks and decode give the same bits (the chunked "WY" form of
//! the GPU kernels reorders sums and would not). On a CPU the recurrent form costs little:
//! `4·dk·dv` FLOPs per value head and token (about 1 % of a Qwen3.5 layer's matmul FLOPs), over a
//! state that stays in L2. The loops are plain `a * b + c` (Rust never fuses them), written once
//! and compiled per tier, so every tier gives the scalar tier's bits.

use crate::isa::Tier;

/// One token of the gated delta rule for one value head, as transformers'
/// `torch_recurrent_gated_delta_rule`: with `S` the `dk × dv` state (row `i` for key index `i`),
/// `S ← decay·S`; `delta = beta·(v − Sᵀk)`; `S ← S + k ⊗ delta`; `out = Sᵀq`.
/// `q` and `k` come L2-normalised (and `q` scaled by `1/√dk`) from the caller. `decay` is one
/// factor for the whole state (gated delta-net) or one per key row, `dk` of them (Kimi's delta
/// attention, `recurrent_kimi_delta_attention`).
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_step(
    state: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: &[f32],
    beta: f32,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    gated_delta_step_on(crate::isa::tier(), state, q, k, v, decay, beta, scratch, out)
}

/// [`gated_delta_step`] on a given tier.
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_step_on(
    tier: Tier,
    state: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: &[f32],
    beta: f32,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    let (dk, dv) = (k.len(), v.len());
    assert!(state.len() == dk * dv && q.len() == dk && out.len() == dv);
    assert!(decay.len() == 1 || decay.len() == dk, "one decay, or one per key row");
    scratch.resize(dv, 0.0);
    let args = DeltaArgs { state, q, k, v, decay, beta, delta: scratch, out };
    match tier {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the tier guarantees AVX-512F.
        Tier::Avx512 => unsafe { x86::delta_avx512(args) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the tier guarantees AVX2 and FMA.
        Tier::Avx2 => unsafe { x86::delta_avx2(args) },
        _ => delta_body(args),
    }
}

struct DeltaArgs<'a> {
    state: &'a mut [f32],
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    decay: &'a [f32],
    beta: f32,
    delta: &'a mut [f32],
    out: &'a mut [f32],
}

/// The rule in two sweeps over the state: decay and read `Sᵀk`, then write `k ⊗ delta` and read
/// `Sᵀq`. Vectorised along `dv`; no sum changes order between tiers.
#[inline(always)]
fn delta_body(a: DeltaArgs) {
    let dv = a.v.len();
    let mem = &mut *a.delta;
    mem.iter_mut().for_each(|m| *m = 0.0);
    let per_row = a.decay.len() > 1;
    for (i, (row, &ki)) in a.state.chunks_exact_mut(dv).zip(a.k).enumerate() {
        let decay = a.decay[if per_row { i } else { 0 }];
        for (s, m) in row.iter_mut().zip(mem.iter_mut()) {
            *s *= decay;
            *m += *s * ki;
        }
    }
    for (m, &vj) in mem.iter_mut().zip(a.v) {
        *m = (vj - *m) * a.beta;
    }
    a.out.iter_mut().for_each(|o| *o = 0.0);
    for ((row, &ki), &qi) in a.state.chunks_exact_mut(dv).zip(a.k).zip(a.q) {
        for ((s, d), o) in row.iter_mut().zip(mem.iter()).zip(a.out.iter_mut()) {
            *s += ki * *d;
            *o += *s * qi;
        }
    }
}

/// One token of the Mamba-2 selective state update for one head, as transformers'
/// `mamba2_selective_state_update`: with `S` the `head_dim × state_size` state,
/// `S ← decay·S + (dt·b) ⊗ x`, then `out = S·c + d·x` (`decay = exp(dt·A)`).
#[allow(clippy::too_many_arguments)]
pub fn ssm_step(state: &mut [f32], x: &[f32], b: &[f32], c: &[f32], dt: f32, decay: f32, d: f32, out: &mut [f32]) {
    ssm_step_on(crate::isa::tier(), state, x, b, c, dt, decay, d, out)
}

/// [`ssm_step`] on a given tier.
#[allow(clippy::too_many_arguments)]
pub fn ssm_step_on(
    tier: Tier,
    state: &mut [f32],
    x: &[f32],
    b: &[f32],
    c: &[f32],
    dt: f32,
    decay: f32,
    d: f32,
    out: &mut [f32],
) {
    assert!(state.len() == x.len() * b.len() && b.len() == c.len() && out.len() == x.len());
    let args = SsmArgs { state, x, b, c, dt, decay, d, out };
    match tier {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the tier guarantees AVX-512F.
        Tier::Avx512 => unsafe { x86::ssm_avx512(args) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the tier guarantees AVX2 and FMA.
        Tier::Avx2 => unsafe { x86::ssm_avx2(args) },
        _ => ssm_body(args),
    }
}

struct SsmArgs<'a> {
    state: &'a mut [f32],
    x: &'a [f32],
    b: &'a [f32],
    c: &'a [f32],
    dt: f32,
    decay: f32,
    d: f32,
    out: &'a mut [f32],
}

/// Row `p` of the state: `S[p] = decay·S[p] + x[p]·(dt·b)`, `out[p] = S[p]·c + d·x[p]`, the dot
/// product summed in order (so every tier gives the same bits).
#[inline(always)]
fn ssm_body(a: SsmArgs) {
    let n = a.b.len();
    for ((row, &xp), o) in a.state.chunks_exact_mut(n).zip(a.x).zip(a.out.iter_mut()) {
        let mut acc = 0.0;
        for ((s, &bn), &cn) in row.iter_mut().zip(a.b).zip(a.c) {
            *s = *s * a.decay + a.dt * bn * xp;
            acc += *s * cn;
        }
        *o = acc + xp * a.d;
    }
}

/// Depthwise causal convolution over `x` (`rows × channels`, one token a row), in place:
/// `y[t][c] = Σ_j w[c][j] · x[t − (K−1) + j][c]`, with the positions before the first row
/// taken from `state` (`(K−1) × channels`, oldest first), which is left holding the last
/// `K−1` inputs. `weight` is `channels × K` (torch's `conv1d.weight` without its middle axis).
pub fn causal_conv1d(x: &mut [f32], state: &mut [f32], weight: &[f32], kernel: usize, row: &mut Vec<f32>) {
    let c = state.len() / (kernel - 1);
    assert!(state.len() == (kernel - 1) * c && weight.len() == c * kernel && x.len().is_multiple_of(c));
    for xt in x.chunks_exact_mut(c) {
        row.clear();
        row.extend_from_slice(xt);
        for (ch, y) in xt.iter_mut().enumerate() {
            let w = &weight[ch * kernel..(ch + 1) * kernel];
            let mut acc = 0.0;
            for (j, wj) in w[..kernel - 1].iter().enumerate() {
                acc += wj * state[j * c + ch];
            }
            *y = acc + w[kernel - 1] * row[ch];
        }
        state.copy_within(c.., 0);
        state[(kernel - 2) * c..].copy_from_slice(row);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{DeltaArgs, SsmArgs, delta_body, ssm_body};

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn delta_avx512(a: DeltaArgs) {
        delta_body(a)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn delta_avx2(a: DeltaArgs) {
        delta_body(a)
    }

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn ssm_avx512(a: SsmArgs) {
        ssm_body(a)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn ssm_avx2(a: SsmArgs) {
        ssm_body(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rand_vec;

    /// The rule as transformers writes it, in f64: decay, read, update, read.
    fn reference(s: &mut [f64], q: &[f32], k: &[f32], v: &[f32], decay: &[f32], beta: f32) -> Vec<f64> {
        let (dk, dv) = (k.len(), v.len());
        for (i, row) in s.chunks_exact_mut(dv).enumerate() {
            let d = decay[if decay.len() > 1 { i } else { 0 }];
            row.iter_mut().for_each(|x| *x *= d as f64);
        }
        let mut out = vec![0.0; dv];
        for j in 0..dv {
            let mem: f64 = (0..dk).map(|i| s[i * dv + j] * k[i] as f64).sum();
            let delta = (v[j] as f64 - mem) * beta as f64;
            for i in 0..dk {
                s[i * dv + j] += k[i] as f64 * delta;
            }
            out[j] = (0..dk).map(|i| s[i * dv + j] * q[i] as f64).sum();
        }
        out
    }

    #[test]
    fn gated_delta_matches_the_reference_and_every_tier_the_scalar_bits() {
        gated_delta_case(false);
    }

    /// Kimi's delta attention: a decay per key row.
    #[test]
    fn per_row_decay_matches_the_reference_and_every_tier_the_scalar_bits() {
        gated_delta_case(true);
    }

    fn gated_delta_case(per_row: bool) {
        let (dk, dv) = (24, 40);
        let mut s64: Vec<f64> = rand_vec(dk * dv, 1).iter().map(|&x| x as f64).collect();
        let mut states: Vec<Vec<f32>> =
            Tier::available().iter().map(|_| s64.iter().map(|&x| x as f32).collect()).collect();
        let mut scratch = Vec::new();
        for t in 0..20u64 {
            let (q, k, v) = (rand_vec(dk, 10 + t), rand_vec(dk, 40 + t), rand_vec(dv, 70 + t));
            let beta = 0.3 + 0.02 * t as f32;
            let decay: Vec<f32> = match per_row {
                false => vec![0.8 + 0.01 * t as f32],
                true => rand_vec(dk, 90 + t).iter().map(|x| 0.85 + 0.1 * x).collect(),
            };
            let want = reference(&mut s64, &q, &k, &v, &decay, beta);
            let mut outs = vec![];
            for (tier, state) in Tier::available().into_iter().zip(&mut states) {
                let mut out = vec![0.0; dv];
                gated_delta_step_on(tier, state, &q, &k, &v, &decay, beta, &mut scratch, &mut out);
                outs.push(out);
            }
            for (tier, out) in Tier::available().iter().zip(&outs) {
                assert_eq!(out, &outs[0], "{tier:?} differs from scalar at token {t}");
            }
            for (o, w) in outs[0].iter().zip(&want) {
                assert!((*o as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()), "token {t}: {o} vs {w}");
            }
        }
        for st in &states[1..] {
            assert_eq!(st, &states[0], "the states differ between tiers");
        }
    }

    #[test]
    fn ssm_step_matches_the_reference_and_every_tier_the_scalar_bits() {
        let (p, n) = (12, 20);
        let mut s64: Vec<f64> = rand_vec(p * n, 2).iter().map(|&x| x as f64).collect();
        let mut states: Vec<Vec<f32>> =
            Tier::available().iter().map(|_| s64.iter().map(|&x| x as f32).collect()).collect();
        for t in 0..15u64 {
            let (x, b, c) = (rand_vec(p, 100 + t), rand_vec(n, 200 + t), rand_vec(n, 300 + t));
            let (dt, decay, d) = (0.1 + 0.05 * t as f32, 0.9 - 0.01 * t as f32, 0.5);
            let mut want = vec![0f64; p];
            for i in 0..p {
                for j in 0..n {
                    let s = &mut s64[i * n + j];
                    *s = *s * decay as f64 + dt as f64 * b[j] as f64 * x[i] as f64;
                    want[i] += *s * c[j] as f64;
                }
                want[i] += d as f64 * x[i] as f64;
            }
            let mut outs = vec![];
            for (tier, state) in Tier::available().into_iter().zip(&mut states) {
                let mut out = vec![0.0; p];
                ssm_step_on(tier, state, &x, &b, &c, dt, decay, d, &mut out);
                outs.push(out);
            }
            for out in &outs {
                assert_eq!(out, &outs[0], "a tier differs from scalar at token {t}");
            }
            for (o, w) in outs[0].iter().zip(&want) {
                assert!((*o as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()), "token {t}: {o} vs {w}");
            }
        }
    }

    #[test]
    fn causal_conv1d_matches_the_reference_however_the_rows_are_split() {
        let (c, kernel, rows) = (6, 4, 11);
        let x = rand_vec(rows * c, 3);
        let w = rand_vec(c * kernel, 4);
        let init = rand_vec((kernel - 1) * c, 5);
        // Reference: pad with the initial state, convolve each channel.
        let mut padded = init.clone();
        padded.extend_from_slice(&x);
        let mut want = vec![0f64; rows * c];
        for t in 0..rows {
            for ch in 0..c {
                want[t * c + ch] = (0..kernel).map(|j| (w[ch * kernel + j] * padded[(t + j) * c + ch]) as f64).sum();
            }
        }
        let mut row = Vec::new();
        let mut whole = x.clone();
        let mut state = init.clone();
        causal_conv1d(&mut whole, &mut state, &w, kernel, &mut row);
        for (g, w) in whole.iter().zip(&want) {
            assert!((*g as f64 - w).abs() < 1e-5, "{g} vs {w}");
        }
        assert_eq!(state, padded[rows * c..], "the state keeps the last K-1 inputs");
        let mut split = x.clone();
        let mut state2 = init;
        let (a, b) = split.split_at_mut(4 * c);
        causal_conv1d(a, &mut state2, &w, kernel, &mut row);
        causal_conv1d(b, &mut state2, &w, kernel, &mut row);
        assert_eq!(split, whole, "chunking changed the bits");
        assert_eq!(state2, state);
    }
}
