//! Turns one row of logits into a token, in vLLM's order:
//! raw logprobs → allowed_token_ids → bad_words → min_tokens → logit_bias → penalties
//! (repetition, frequency, presence) → greedy, or temperature → min_p → top_k/top_p → sample.
//!
//! Each request has its own random generator, so a seeded request samples the same tokens
//! whatever else is in the batch.

use crate::sampling_params::{LogprobsMode, SamplingParams};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// What the sampler needs to know about the request besides its parameters.
pub struct SampleContext<'a> {
    pub prompt: &'a [u32],
    pub output: &'a [u32],
    /// EOS and every stop token id: masked while fewer than `min_tokens` were generated.
    pub all_stop_token_ids: &'a [u32],
    pub rng: &'a mut ChaCha8Rng,
}

/// The logprob of one chosen token, its rank, and the top alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    pub token_id: u32,
    pub logprob: f32,
    /// 1 = most likely (number of tokens with logprob ≥ this one's).
    pub rank: usize,
    /// The `k` most likely tokens, best first.
    pub top: Vec<(u32, f32)>,
}

/// Samples one token from `logits` (modified in place).
pub fn sample(
    logits: &mut [f32],
    p: &SamplingParams,
    ctx: SampleContext,
    mode: LogprobsMode,
) -> (u32, Option<TokenLogprobs>) {
    sample_checking_draft(logits, p, ctx, mode, None)
}

/// [`sample`] at a position where speculative decoding proposed `draft`. Greedy requests take
/// the argmax as always (the draft survives when it equals it). Sampled requests accept the
/// draft with its probability under the processed distribution and otherwise draw from that
/// distribution with the draft removed: rejection sampling against a one-hot draft
/// distribution (vLLM's for n-gram drafts), so the token keeps the target distribution.
pub fn sample_checking_draft(
    logits: &mut [f32],
    p: &SamplingParams,
    ctx: SampleContext,
    mode: LogprobsMode,
    draft: Option<u32>,
) -> (u32, Option<TokenLogprobs>) {
    let mut report: Option<Vec<f32>> = match (p.logprobs, mode) {
        (Some(_), LogprobsMode::RawLogprobs) => Some(log_softmax(logits)),
        (Some(_), LogprobsMode::RawLogits) => Some(logits.to_vec()),
        _ => None,
    };
    apply_logits_processors(logits, p, &ctx);
    let token = if p.is_greedy() {
        set_processed(&mut report, logits, p, mode);
        argmax(logits)
    } else {
        logits.iter_mut().for_each(|v| *v /= p.temperature);
        apply_min_p(logits, p.min_p);
        apply_top_k_top_p(logits, p.top_k, p.top_p);
        set_processed(&mut report, logits, p, mode);
        match draft {
            Some(d) if ctx.rng.random::<f64>() < probability(logits, d) => d,
            Some(d) => {
                logits[d as usize] = f32::NEG_INFINITY;
                sample_from_logits(logits, ctx.rng)
            }
            None => sample_from_logits(logits, ctx.rng),
        }
    };
    let lp = report.map(|r| gather_logprobs(&r, token, p.logprobs.unwrap_or(0)));
    (token, lp)
}

/// `softmax(logits)[token]`.
fn probability(logits: &[f32], token: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let total: f64 = logits.iter().map(|&v| ((v - max) as f64).exp()).sum();
    ((logits[token as usize] - max) as f64).exp() / total
}

fn set_processed(report: &mut Option<Vec<f32>>, logits: &[f32], p: &SamplingParams, mode: LogprobsMode) {
    if p.logprobs.is_some() {
        match mode {
            LogprobsMode::ProcessedLogprobs => *report = Some(log_softmax(logits)),
            LogprobsMode::ProcessedLogits => *report = Some(logits.to_vec()),
            _ => {}
        }
    }
}

/// Whether anything before the greedy/random choice changes the logits.
pub fn needs_processing(p: &SamplingParams, ctx_output_len: usize) -> bool {
    p.allowed_token_ids.is_some()
        || !p.bad_words_token_ids.is_empty()
        || ctx_output_len < p.min_tokens
        || !p.logit_bias.is_empty()
        || p.repetition_penalty != 1.0
        || p.frequency_penalty != 0.0
        || p.presence_penalty != 0.0
}

/// Masks and biases that can change even the greedy choice, then penalties.
pub fn apply_logits_processors(logits: &mut [f32], p: &SamplingParams, ctx: &SampleContext) {
    if !needs_processing(p, ctx.output.len()) {
        return;
    }
    if let Some(allowed) = &p.allowed_token_ids {
        let mut keep = vec![false; logits.len()];
        allowed.iter().for_each(|&t| keep[t as usize] = true);
        logits.iter_mut().zip(keep).filter(|(_, k)| !k).for_each(|(v, _)| *v = f32::NEG_INFINITY);
    }
    for word in &p.bad_words_token_ids {
        let Some((&last, prefix)) = word.split_last() else { continue };
        if ctx.output.ends_with(prefix) {
            logits[last as usize] = f32::NEG_INFINITY;
        }
    }
    if ctx.output.len() < p.min_tokens {
        ctx.all_stop_token_ids.iter().for_each(|&t| logits[t as usize] = f32::NEG_INFINITY);
    }
    for &(t, b) in &p.logit_bias {
        logits[t as usize] += b;
    }
    apply_penalties(logits, p, ctx.prompt, ctx.output);
}

/// vLLM's penalties: repetition over prompt and output tokens (divide positive logits, multiply
/// negative ones), then frequency (× count) and presence (× seen) over output tokens only.
pub fn apply_penalties(logits: &mut [f32], p: &SamplingParams, prompt: &[u32], output: &[u32]) {
    if p.repetition_penalty != 1.0 {
        let mut seen = vec![false; logits.len()];
        for &t in prompt.iter().chain(output) {
            seen[t as usize] = true;
        }
        for (v, s) in logits.iter_mut().zip(seen) {
            if s {
                *v = if *v > 0.0 { *v / p.repetition_penalty } else { *v * p.repetition_penalty };
            }
        }
    }
    if p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 {
        let mut counts = std::collections::HashMap::<u32, u32>::new();
        for &t in output {
            *counts.entry(t).or_default() += 1;
        }
        for (t, c) in counts {
            logits[t as usize] -= p.frequency_penalty * c as f32 + p.presence_penalty;
        }
    }
}

pub use vllm_rs_kernels::ops::{argmax, log_softmax};

/// Masks tokens whose probability is below `min_p ×` the top probability.
fn apply_min_p(logits: &mut [f32], min_p: f32) {
    if min_p <= 0.0 {
        return;
    }
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    // p_i / p_max = exp(l_i - l_max): no need to normalize.
    let thr = (min_p as f64).ln();
    for v in logits.iter_mut() {
        if ((*v - max) as f64) < thr {
            *v = f32::NEG_INFINITY;
        }
    }
}

/// vLLM's `apply_top_k_top_p`: keep the `k` largest (ties with the k-th kept), then drop the
/// smallest tokens while their cumulative probability stays ≤ `1 - p` (the largest always stays).
fn apply_top_k_top_p(logits: &mut [f32], top_k: i32, top_p: f32) {
    let use_k = top_k > 0 && (top_k as usize) < logits.len();
    if !use_k && top_p >= 1.0 {
        return;
    }
    let mut order: Vec<u32> = (0..logits.len() as u32).filter(|&i| logits[i as usize] > f32::NEG_INFINITY).collect();
    // Descending by logit; equal logits by index, so the result does not depend on sort internals.
    order.sort_unstable_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b)));
    if use_k && order.len() > top_k as usize {
        let kth = logits[order[top_k as usize - 1] as usize];
        let keep = order.iter().take_while(|&&i| logits[i as usize] >= kth).count();
        for &i in &order[keep..] {
            logits[i as usize] = f32::NEG_INFINITY;
        }
        order.truncate(keep);
    }
    if top_p < 1.0 && !order.is_empty() {
        let max = logits[order[0] as usize];
        let exps: Vec<f64> = order.iter().map(|&i| ((logits[i as usize] - max) as f64).exp()).collect();
        let total: f64 = exps.iter().sum();
        // Walk from the smallest up, as vLLM's ascending cumsum does.
        let mut cum = 0.0;
        for j in (1..order.len()).rev() {
            cum += exps[j] / total;
            if cum > 1.0 - top_p as f64 {
                break;
            }
            logits[order[j] as usize] = f32::NEG_INFINITY;
        }
    }
}

/// Draws from `softmax(logits)` by inverting the CDF with one uniform number.
fn sample_from_logits(logits: &[f32], rng: &mut ChaCha8Rng) -> u32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let total: f64 = logits.iter().map(|&v| ((v - max) as f64).exp()).sum();
    let u = rng.random::<f64>() * total;
    let mut acc = 0.0;
    let mut last = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v == f32::NEG_INFINITY {
            continue;
        }
        acc += ((v - max) as f64).exp();
        last = i;
        if acc > u {
            return i as u32;
        }
    }
    last as u32
}

/// The chosen token's logprob and rank, and the `k` best tokens of `lp`.
pub fn gather_logprobs(lp: &[f32], token: u32, k: usize) -> TokenLogprobs {
    let logprob = lp[token as usize];
    let rank = lp.iter().filter(|&&v| v >= logprob).count().max(1);
    TokenLogprobs { token_id: token, logprob, rank, top: top_k(lp, k) }
}

/// The `k` largest entries, best first (ties by lower index).
pub fn top_k(lp: &[f32], k: usize) -> Vec<(u32, f32)> {
    if k == 0 {
        return Vec::new();
    }
    let mut idx: Vec<u32> = (0..lp.len() as u32).collect();
    let cmp = |a: &u32, b: &u32| lp[*b as usize].total_cmp(&lp[*a as usize]).then(a.cmp(b));
    let k = k.min(idx.len());
    if k < idx.len() {
        idx.select_nth_unstable_by(k - 1, cmp);
        idx.truncate(k);
    }
    idx.sort_unstable_by(cmp);
    idx.into_iter().map(|i| (i, lp[i as usize])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn ctx<'a>(prompt: &'a [u32], output: &'a [u32], stops: &'a [u32], rng: &'a mut ChaCha8Rng) -> SampleContext<'a> {
        SampleContext { prompt, output, all_stop_token_ids: stops, rng }
    }

    /// Chi-square statistic of `counts` against probabilities `p`.
    fn chi_square(counts: &[u64], p: &[f64]) -> f64 {
        let n: u64 = counts.iter().sum();
        counts.iter().zip(p).map(|(&c, &q)| (c as f64 - n as f64 * q).powi(2) / (n as f64 * q)).sum()
    }

    #[test]
    fn draft_verification_keeps_the_target_distribution() {
        // As vLLM tests its rejection sampler: a fixed logit vector, many seeded draws, the
        // tokens a step emits against softmax(logits / T), for 1 to 5 drafts, drafts likely and
        // unlikely. Each step's first token and (when the first draft survived) its second are
        // checked; both must follow the target distribution whatever the drafts were.
        let logits = [1.2f32, 0.3, -0.5, 2.0, 0.0, -1.5];
        let params = SamplingParams { temperature: 0.8, ..SamplingParams::greedy() };
        let scaled: Vec<f64> = logits.iter().map(|&l| (l / 0.8) as f64).collect();
        let z: f64 = scaled.iter().map(|l| l.exp()).sum();
        let target: Vec<f64> = scaled.iter().map(|l| l.exp() / z).collect();
        // 5 degrees of freedom: P(chi² > 25.7) = 1e-4; the draws are seeded, so no flakes.
        const CRITICAL: f64 = 25.7;
        for k in 1..=5usize {
            let drafts: Vec<u32> = (0..k as u32).map(|j| [3, 5, 0, 3, 2][j as usize]).collect();
            let (mut first, mut second) = (vec![0u64; 6], vec![0u64; 6]);
            for seed in 0..20_000u64 {
                let mut rng = ChaCha8Rng::seed_from_u64(seed * 7 + k as u64);
                let mut emitted = vec![];
                for j in 0..=k {
                    let mut row = logits.to_vec();
                    let (tok, _) = sample_checking_draft(
                        &mut row,
                        &params,
                        ctx(&[], &[], &[], &mut rng),
                        LogprobsMode::RawLogprobs,
                        drafts.get(j).copied(),
                    );
                    emitted.push(tok);
                    if drafts.get(j) != Some(&tok) {
                        break;
                    }
                }
                first[emitted[0] as usize] += 1;
                if emitted.len() > 1 {
                    second[emitted[1] as usize] += 1;
                }
            }
            for (what, counts) in [("first", &first), ("second", &second)] {
                let c = chi_square(counts, &target);
                assert!(c < CRITICAL, "k = {k}: {what} tokens {counts:?} do not follow {target:?} (chi² {c:.1})");
            }
        }
        // And a wrong sampler fails it: always accepting the draft.
        let biased = [0u64, 0, 0, 20_000, 0, 0];
        assert!(chi_square(&biased, &target) > CRITICAL);
    }

    #[test]
    fn penalties_match_hand_computed_values() {
        let p = SamplingParams {
            repetition_penalty: 2.0,
            frequency_penalty: 0.5,
            presence_penalty: 0.25,
            ..SamplingParams::greedy()
        };
        let mut l = vec![1.0, -1.0, 3.0, 0.5, 2.0];
        apply_penalties(&mut l, &p, &[0, 1], &[2, 2, 1]);
        // 0: prompt only → 1/2. 1: prompt+output once → -1*2 - 0.5 - 0.25.
        // 2: output twice → 3/2 - 1.0 - 0.25. 3, 4 untouched.
        assert_eq!(l, vec![0.5, -2.75, 0.25, 0.5, 2.0]);
    }

    #[test]
    fn masks_bias_and_min_tokens() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let base = vec![0.0, 5.0, 1.0, 2.0, 3.0];
        let run = |p: SamplingParams, out: &[u32], rng: &mut ChaCha8Rng| {
            let mut l = base.clone();
            apply_logits_processors(&mut l, &p, &ctx(&[], out, &[1], rng));
            l
        };
        let ni = f32::NEG_INFINITY;
        let allowed = SamplingParams { allowed_token_ids: Some(vec![2, 3]), ..SamplingParams::greedy() };
        assert_eq!(run(allowed, &[], &mut rng), vec![ni, ni, 1.0, 2.0, ni]);
        let bad = SamplingParams { bad_words_token_ids: vec![vec![4], vec![3, 1]], ..SamplingParams::greedy() };
        assert_eq!(run(bad.clone(), &[2], &mut rng), vec![0.0, 5.0, 1.0, 2.0, ni]);
        assert_eq!(run(bad, &[3], &mut rng), vec![0.0, ni, 1.0, 2.0, ni], "a two-token bad word after its prefix");
        let bias = SamplingParams { logit_bias: vec![(0, 10.0)], ..SamplingParams::greedy() };
        assert_eq!(run(bias, &[], &mut rng)[0], 10.0);
        let min = SamplingParams { min_tokens: 2, ..SamplingParams::greedy() };
        assert_eq!(run(min.clone(), &[3], &mut rng)[1], ni, "EOS masked before min_tokens");
        assert_eq!(run(min, &[3, 4], &mut rng)[1], 5.0);
    }

    #[test]
    fn greedy_picks_the_first_maximum_and_reports_logprobs() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let p = SamplingParams { logprobs: Some(2), ..SamplingParams::greedy() };
        let mut l = vec![1.0, 3.0, 3.0, 0.0];
        let (t, lp) = sample(&mut l, &p, ctx(&[], &[], &[], &mut rng), LogprobsMode::RawLogprobs);
        assert_eq!(t, 1);
        let lp = lp.unwrap();
        let z = (1f64.exp() + 2.0 * 3f64.exp() + 1.0).ln();
        assert!((lp.logprob as f64 - (3.0 - z)).abs() < 1e-6);
        assert_eq!(lp.rank, 2, "two tokens share the top logprob");
        assert_eq!(lp.top.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 2]);
    }

    fn histogram(logits: &[f32], p: &SamplingParams, n: usize) -> Vec<f64> {
        let mut rng = ChaCha8Rng::seed_from_u64(123);
        let mut h = vec![0f64; logits.len()];
        for _ in 0..n {
            let mut l = logits.to_vec();
            let (t, _) = sample(&mut l, p, ctx(&[], &[], &[], &mut rng), LogprobsMode::RawLogprobs);
            h[t as usize] += 1.0 / n as f64;
        }
        h
    }

    fn softmax(x: &[f64]) -> Vec<f64> {
        let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = x.iter().map(|v| (v - m).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|v| v / s).collect()
    }

    fn assert_close(got: &[f64], want: &[f64]) {
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 0.01, "{got:?} vs {want:?}");
        }
    }

    const LOGITS: [f32; 5] = [2.0, 1.0, 0.5, 0.0, -1.0];

    #[test]
    fn temperature_scales_the_distribution() {
        for t in [0.5f32, 1.0, 1.5] {
            let p = SamplingParams { temperature: t, ..Default::default() };
            let want = softmax(&LOGITS.iter().map(|&l| (l / t) as f64).collect::<Vec<_>>());
            assert_close(&histogram(&LOGITS, &p, 40_000), &want);
        }
    }

    #[test]
    fn top_k_top_p_min_p_truncate_then_renormalize() {
        let full = softmax(&LOGITS.iter().map(|&l| l as f64).collect::<Vec<_>>());
        let renorm = |keep: usize| {
            let s: f64 = full[..keep].iter().sum();
            (0..5).map(|i| if i < keep { full[i] / s } else { 0.0 }).collect::<Vec<_>>()
        };
        let k2 = SamplingParams { top_k: 2, ..Default::default() };
        assert_close(&histogram(&LOGITS, &k2, 40_000), &renorm(2));
        // Probabilities 0.563, 0.207, 0.126, 0.076, 0.028: from the bottom the cumulative sum
        // stays ≤ 1 - 0.8 for two tokens, so top_p 0.8 keeps three; top_p 0.7 keeps two.
        let p08 = SamplingParams { top_p: 0.8, ..Default::default() };
        assert_close(&histogram(&LOGITS, &p08, 40_000), &renorm(3));
        let p07 = SamplingParams { top_p: 0.7, ..Default::default() };
        assert_close(&histogram(&LOGITS, &p07, 40_000), &renorm(2));
        // min_p 0.3: tokens with p ≥ 0.3·p_max, i.e. logit ≥ 2 + ln 0.3 ≈ 0.796 → two tokens.
        let mp = SamplingParams { min_p: 0.3, ..Default::default() };
        assert_close(&histogram(&LOGITS, &mp, 40_000), &renorm(2));
    }

    #[test]
    fn seeded_sampling_is_reproducible() {
        let p = SamplingParams { temperature: 1.0, ..Default::default() };
        let draw = |seed: u64| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..50)
                .map(|_| {
                    let mut l = LOGITS.to_vec();
                    sample(&mut l, &p, ctx(&[], &[], &[], &mut rng), LogprobsMode::RawLogprobs).0
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn processed_logprobs_reflect_truncation() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let p = SamplingParams { top_k: 1, logprobs: Some(1), ..Default::default() };
        let mut l = LOGITS.to_vec();
        let (t, lp) = sample(&mut l, &p, ctx(&[], &[], &[], &mut rng), LogprobsMode::ProcessedLogprobs);
        assert_eq!(t, 0);
        assert_eq!(lp.unwrap().logprob, 0.0, "only one token survives top_k=1");
    }
}
