//! The numbers of the report, computed as `vllm bench serve` computes them with numpy: pairwise
//! sums for means, population standard deviation, and `np.percentile`'s default linear
//! interpolation (an empty list counts as `[0]`).

use super::client::RequestOutput;
use super::tokenizer::BenchTokenizer;

/// numpy's pairwise summation of float64 (8 accumulators below 128 elements, halves above).
fn pairwise_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        let mut res = 0.0;
        for &x in a {
            res += x;
        }
        res
    } else if n <= 128 {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&a[..8]);
        let mut i = 8;
        while i < n - (n % 8) {
            for j in 0..8 {
                r[j] += a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        while i < n {
            res += a[i];
            i += 1;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        pairwise_sum(&a[..n2]) + pairwise_sum(&a[n2..])
    }
}

fn or_zero(v: &[f64]) -> &[f64] {
    if v.is_empty() { &[0.0] } else { v }
}

/// `np.mean(v or 0)`.
pub fn mean(v: &[f64]) -> f64 {
    let v = or_zero(v);
    pairwise_sum(v) / v.len() as f64
}

/// `np.std(v or 0)` (population, ddof = 0).
pub fn std(v: &[f64]) -> f64 {
    let v = or_zero(v);
    let m = mean(v);
    let sq: Vec<f64> = v.iter().map(|x| (x - m) * (x - m)).collect();
    (pairwise_sum(&sq) / v.len() as f64).sqrt()
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s = or_zero(v).to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// `np.median(v or 0)`.
pub fn median(v: &[f64]) -> f64 {
    let s = sorted(v);
    let n = s.len();
    if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 }
}

/// `np.percentile(v or 0, p)` with the default (linear) method.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    percentile_sorted(&sorted(v), p)
}

fn percentile_sorted(s: &[f64], p: f64) -> f64 {
    let n = s.len();
    let q = p / 100.0;
    let virtual_index = (n - 1) as f64 * q;
    let lo = virtual_index.floor().clamp(0.0, (n - 1) as f64);
    let t = virtual_index - lo;
    let lo = lo as usize;
    let hi = (lo + 1).min(n - 1);
    let (a, b) = (s[lo], s[hi]);
    // numpy's _lerp: from the nearer end, so t = 1 gives exactly b.
    let diff = b - a;
    if t >= 0.5 { b - diff * (1.0 - t) } else { a + diff * t }
}

/// Mean, median, std and the chosen percentiles of one metric, in milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    pub mean_ms: f64,
    pub median_ms: f64,
    pub std_ms: f64,
    pub percentiles_ms: Vec<(f64, f64)>,
}

impl Stats {
    pub fn of(seconds: &[f64], percentiles: &[f64]) -> Self {
        let s = sorted(seconds);
        Stats {
            mean_ms: mean(seconds) * 1000.0,
            median_ms: median(seconds) * 1000.0,
            std_ms: std(seconds) * 1000.0,
            percentiles_ms: percentiles.iter().map(|&p| (p, percentile_sorted(&s, p) * 1000.0)).collect(),
        }
    }
}

/// `--goodput` service level objectives, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Goodput {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2el_ms: Option<f64>,
}

impl Goodput {
    /// Parses `KEY:VALUE` pairs (`ttft`, `tpot`, `e2el`; non-negative milliseconds).
    pub fn parse(pairs: &[String]) -> Result<Option<Self>, String> {
        if pairs.is_empty() {
            return Ok(None);
        }
        let mut g = Goodput::default();
        for pair in pairs {
            let bad = || {
                format!(
                    "Invalid format found for service level objectives. Specify service level objectives for goodput \
                     as \"KEY:VALUE\" pairs, where the key is a metric name, and the value is a number in \
                     milliseconds. (got {pair:?})"
                )
            };
            let (k, v) = pair.split_once(':').ok_or_else(bad)?;
            let v: f64 = v.trim().parse().map_err(|_| bad())?;
            if v < 0.0 {
                return Err(format!(
                    "Invalid value found, {k}: {v}. The service level objective value should be non-negative."
                ));
            }
            match k {
                "ttft" => g.ttft_ms = Some(v),
                "tpot" => g.tpot_ms = Some(v),
                "e2el" => g.e2el_ms = Some(v),
                _ => {
                    return Err(format!(
                        "Invalid metric name found, {k}: {v}. The service level objective name should be one of \
                         ['ttft', 'tpot', 'e2el']."
                    ));
                }
            }
        }
        Ok(Some(g))
    }
}

/// vLLM's `BenchmarkMetrics`.
#[derive(Clone, Debug)]
pub struct BenchmarkMetrics {
    pub completed: usize,
    pub failed: usize,
    pub total_input: usize,
    pub total_output: usize,
    pub request_throughput: f64,
    pub request_goodput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub ttft: Stats,
    pub tpot: Stats,
    pub itl: Stats,
    pub e2el: Stats,
    pub max_output_tokens_per_s: f64,
    pub max_concurrent_requests: usize,
    /// Per request: the output length counted (0 for a failed request).
    pub actual_output_lens: Vec<usize>,
}

/// vLLM's `calculate_metrics`: output lengths from `usage` (else by tokenizing the text, else 1),
/// TPOT = (latency − TTFT) / (output tokens − 1) for requests of more than one token, ITLs pooled
/// over all requests, and the peak output tokens / concurrent requests over one-second buckets.
pub fn calculate(
    outputs: &[RequestOutput],
    dur_s: f64,
    tokenizer: Option<&dyn BenchTokenizer>,
    percentiles: &[f64],
    goodput: Option<&Goodput>,
) -> BenchmarkMetrics {
    let mut actual_output_lens = Vec::with_capacity(outputs.len());
    let (mut total_input, mut completed, mut good) = (0usize, 0usize, 0usize);
    let (mut itls, mut tpots, mut ttfts, mut e2els) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for o in outputs {
        if !o.success {
            actual_output_lens.push(0);
            continue;
        }
        let output_len = match o.output_tokens {
            Some(n) if n > 0 => n,
            _ => match tokenizer {
                None => 1,
                Some(t) => t.encode(&o.generated_text, false).map(|ids| ids.len()).unwrap_or(0),
            },
        };
        actual_output_lens.push(output_len);
        total_input += o.prompt_len;
        let mut tpot = 0.0;
        if output_len > 1 {
            tpot = (o.latency - o.ttft) / (output_len - 1) as f64;
            tpots.push(tpot);
        }
        if let Some(g) = goodput {
            let ok = |slo: Option<f64>, v: f64| slo.is_none_or(|ms| ms / 1000.0 >= v);
            if ok(g.ttft_ms, o.ttft) && ok(g.tpot_ms, tpot) && ok(g.e2el_ms, o.latency) {
                good += 1;
            }
        }
        itls.extend_from_slice(&o.itl);
        ttfts.push(o.ttft);
        e2els.push(o.latency);
        completed += 1;
    }
    let failed = outputs.len() - completed;
    let (max_output_tokens_per_s, max_concurrent_requests) = peaks(outputs);
    let total_output: usize = actual_output_lens.iter().sum();
    BenchmarkMetrics {
        completed,
        failed,
        total_input,
        total_output,
        request_throughput: completed as f64 / dur_s,
        request_goodput: good as f64 / dur_s,
        output_throughput: total_output as f64 / dur_s,
        total_token_throughput: (total_input + total_output) as f64 / dur_s,
        ttft: Stats::of(&ttfts, percentiles),
        tpot: Stats::of(&tpots, percentiles),
        itl: Stats::of(&itls, percentiles),
        e2el: Stats::of(&e2els, percentiles),
        max_output_tokens_per_s,
        max_concurrent_requests,
        actual_output_lens,
    }
}

/// Token arrivals and active requests counted in one-second buckets from the first request's start.
fn peaks(outputs: &[RequestOutput]) -> (f64, usize) {
    let ok: Vec<&RequestOutput> = outputs.iter().filter(|o| o.success).collect();
    if ok.is_empty() {
        return (0.0, 0);
    }
    let t0 = ok.iter().map(|o| o.start_time).fold(f64::INFINITY, f64::min);
    let t1 = ok.iter().map(|o| o.start_time + o.latency).fold(f64::NEG_INFINITY, f64::max);
    let buckets = (t1 - t0).ceil() as usize + 1;
    let mut tokens = vec![0usize; buckets];
    let mut active = vec![0usize; buckets];
    for o in ok {
        let mut t = o.start_time + o.ttft;
        let mut times = vec![t];
        for d in &o.itl {
            t += d;
            times.push(t);
        }
        for t in times {
            let b = (t - t0).trunc();
            if b >= 0.0 && (b as usize) < buckets {
                tokens[b as usize] += 1;
            }
        }
        let first = (o.start_time - t0).trunc() as usize;
        let last = (o.start_time + o.latency - t0).trunc() as usize;
        for a in active.iter_mut().take(last + 1).skip(first) {
            *a += 1;
        }
    }
    (*tokens.iter().max().unwrap_or(&0) as f64, *active.iter().max().unwrap_or(&0))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values printed by numpy 2.3.5:
    //   np.percentile(x, p), np.median(x), np.mean(x), np.std(x)

    #[test]
    fn percentiles_interpolate_linearly_like_numpy() {
        let x = [0.5, 0.1, 0.4, 0.2, 0.3];
        assert_eq!(percentile(&x, 50.0), 0.3);
        assert_eq!(percentile(&x, 0.0), 0.1);
        assert_eq!(percentile(&x, 100.0), 0.5);
        // np.percentile([.1,.2,.3,.4,.5], [99, 25, 90]) == [0.496, 0.2, 0.46]
        assert_eq!(percentile(&x, 99.0), 0.496);
        assert_eq!(percentile(&x, 25.0), 0.2);
        assert_eq!(percentile(&x, 90.0), 0.46);
        // Two values: np.percentile([1.0, 3.0], [10, 50, 99.9]) == [1.2, 2.0, 2.998]
        assert_eq!(percentile(&[3.0, 1.0], 10.0), 1.2);
        assert_eq!(percentile(&[3.0, 1.0], 50.0), 2.0);
        assert_eq!(percentile(&[3.0, 1.0], 99.9), 2.998);
        // Empty lists count as [0]; one value is every percentile.
        assert_eq!(percentile(&[], 99.0), 0.0);
        assert_eq!(percentile(&[7.0], 1.0), 7.0);
    }

    #[test]
    fn mean_median_std_like_numpy() {
        let x: Vec<f64> = (0..300).map(|i| ((i * 37) % 101) as f64 * 0.013 + 0.001).collect();
        assert_eq!(mean(&x), NP_MEAN);
        assert_eq!(std(&x), NP_STD);
        assert_eq!(median(&x), NP_MEDIAN);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!((mean(&[]), median(&[]), std(&[])), (0.0, 0.0, 0.0));
    }

    // x = [((i * 37) % 101) * 0.013 + 0.001 for i in range(300)]
    const NP_MEAN: f64 = 0.6496133333333334;
    const NP_STD: f64 = 0.3791163372311401;
    const NP_MEDIAN: f64 = 0.651;

    fn out(start: f64, ttft: f64, itl: &[f64], tokens: Option<usize>) -> RequestOutput {
        RequestOutput {
            success: true,
            start_time: start,
            ttft,
            itl: itl.to_vec(),
            latency: ttft + itl.iter().sum::<f64>(),
            output_tokens: tokens,
            prompt_len: 10,
            generated_text: "x".repeat(itl.len() + 1),
            ..Default::default()
        }
    }

    #[test]
    fn metrics_of_a_small_run() {
        let failed = RequestOutput { error: "HTTP 500".into(), ..Default::default() };
        let outputs = vec![
            out(0.0, 0.1, &[0.2, 0.2, 0.2], Some(4)),
            failed,
            out(0.5, 0.3, &[0.1, 0.1], None),
            out(1.2, 0.2, &[], Some(1)),
        ];
        let m = calculate(&outputs, 2.0, None, &[50.0, 99.0], None);
        assert_eq!((m.completed, m.failed), (3, 1));
        assert_eq!(m.total_input, 30);
        // usage 4; no usage and no tokenizer -> 1; usage 1.
        assert_eq!(m.actual_output_lens, [4, 0, 1, 1]);
        assert_eq!(m.total_output, 6);
        assert_eq!(m.request_throughput, 1.5);
        assert_eq!(m.output_throughput, 3.0);
        assert_eq!(m.total_token_throughput, 18.0);
        // TPOT only for requests of more than one token: (0.7 - 0.1) / 3.
        assert!((m.tpot.mean_ms - 200.0).abs() < 1e-9);
        assert!((m.ttft.mean_ms - 200.0).abs() < 1e-9);
        assert_eq!(m.itl.percentiles_ms.len(), 2);
        assert!(m.itl.percentiles_ms[0].1 <= m.itl.percentiles_ms[1].1);
        // Tokens at 0.1, 0.3, 0.5, 0.7 | 0.8, 0.9, 1.0 | 1.4: buckets [0,1) has 6, [1,2) has 2.
        assert_eq!(m.max_output_tokens_per_s, 6.0);
        assert_eq!(m.max_concurrent_requests, 2);
        let g = Goodput::parse(&["ttft:250".into(), "e2el:800".into()]).unwrap().unwrap();
        assert_eq!(calculate(&outputs, 2.0, None, &[99.0], Some(&g)).request_goodput, 1.0);
        assert!(Goodput::parse(&["ttfx:1".into()]).is_err());
        assert!(Goodput::parse(&["ttft:-1".into()]).is_err());
        assert!(Goodput::parse(&["ttft".into()]).is_err());
    }
}
