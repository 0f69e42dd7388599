//! `/metrics` in Prometheus text format with vLLM's metric names, labels and histogram buckets,
//! so dashboards built for vLLM work unchanged.
//!
//! Gauges and token counters come from the engine's [`EngineStats`]; per-request histograms
//! (time to first token, inter-token latency, end-to-end latency, token counts, request params)
//! and `request_success` are recorded here from what the server saw of each sequence.

use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use vllm_rs_engine::{EngineStats, FinishReason};

/// vLLM's `REQUEST_LATENCY_BUCKETS`.
const REQUEST_LATENCY: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];
/// vLLM's `TIME_TO_FIRST_TOKEN_BUCKETS`.
const TIME_TO_FIRST_TOKEN: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];
/// vLLM's `INTER_TOKEN_LATENCY_BUCKETS`.
const INTER_TOKEN_LATENCY: &[f64] =
    &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
/// vLLM's `REQUEST_PARAMS_N_BUCKETS`.
const REQUEST_PARAMS_N: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0];

/// vLLM's `build_1_2_5_buckets(max)`: 1, 2, 5, 10, 20, 50... up to `max`.
pub fn buckets_1_2_5(max: usize) -> Vec<f64> {
    let mut out = Vec::new();
    let mut scale = 1usize;
    loop {
        for m in [1, 2, 5] {
            let v = m * scale;
            if v > max {
                return out;
            }
            out.push(v as f64);
        }
        scale = scale.saturating_mul(10);
    }
}

struct HistogramData {
    /// Per bucket (not cumulative), plus the `+Inf` overflow at the end.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

pub struct Histogram {
    name: &'static str,
    help: &'static str,
    bounds: Vec<f64>,
    data: Mutex<HistogramData>,
}

impl Histogram {
    fn new(name: &'static str, help: &'static str, bounds: Vec<f64>) -> Self {
        let data = HistogramData { counts: vec![0; bounds.len() + 1], sum: 0.0, count: 0 };
        Histogram { name, help, bounds, data: Mutex::new(data) }
    }

    pub fn observe(&self, v: f64) {
        let i = self.bounds.iter().position(|&b| v <= b).unwrap_or(self.bounds.len());
        let mut d = self.data.lock().unwrap_or_else(|e| e.into_inner());
        d.counts[i] += 1;
        d.sum += v;
        d.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.data.lock().unwrap_or_else(|e| e.into_inner()).count
    }

    fn render(&self, out: &mut String, labels: &str) {
        let d = self.data.lock().unwrap_or_else(|e| e.into_inner());
        header(out, self.name, self.help, "histogram");
        let mut cumulative = 0;
        for (i, b) in self.bounds.iter().enumerate() {
            cumulative += d.counts[i];
            let _ = writeln!(out, "{}_bucket{{{labels},le=\"{}\"}} {}", self.name, float(*b), float(cumulative as f64));
        }
        cumulative += d.counts[self.bounds.len()];
        let _ = writeln!(out, "{}_bucket{{{labels},le=\"+Inf\"}} {}", self.name, float(cumulative as f64));
        let _ = writeln!(out, "{}_count{{{labels}}} {}", self.name, float(d.count as f64));
        let _ = writeln!(out, "{}_sum{{{labels}}} {}", self.name, float(d.sum));
    }
}

/// Python's float formatting as prometheus_client prints it (`1.0`, `0.25`, `1e-05`).
fn float(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if v == v.trunc() && v.abs() < 1e16 { format!("{v:.1}") } else { format!("{v}") }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Timing of one finished (or abandoned) sequence, as the server saw it.
#[derive(Clone, Debug, Default)]
pub struct SequenceRecord {
    pub finish_reason: Option<FinishReason>,
    pub time_to_first_token: Option<f64>,
    /// Gaps between successive outputs after the first.
    pub inter_token_latencies: Vec<f64>,
    pub e2e_latency: f64,
    /// (last token − first token) / (generated − 1), when more than one token came.
    pub time_per_output_token: Option<f64>,
    /// Last token − first token (vLLM's decode phase).
    pub decode_time: Option<f64>,
    pub prompt_tokens: usize,
    pub generation_tokens: usize,
    pub max_tokens_param: usize,
}

pub struct Metrics {
    labels: String,
    ttft: Histogram,
    itl: Histogram,
    tpot: Histogram,
    e2e: Histogram,
    decode: Histogram,
    prompt_tokens: Histogram,
    generation_tokens: Histogram,
    params_n: Histogram,
    params_max_tokens: Histogram,
    success: [AtomicU64; 3],
}

impl Metrics {
    pub fn new(model_name: &str, max_model_len: usize) -> Self {
        let tokens = buckets_1_2_5(max_model_len);
        let escaped = model_name.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
        Metrics {
            labels: format!("engine=\"0\",model_name=\"{escaped}\""),
            ttft: Histogram::new(
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                TIME_TO_FIRST_TOKEN.to_vec(),
            ),
            itl: Histogram::new(
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                INTER_TOKEN_LATENCY.to_vec(),
            ),
            tpot: Histogram::new(
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                INTER_TOKEN_LATENCY.to_vec(),
            ),
            e2e: Histogram::new(
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                REQUEST_LATENCY.to_vec(),
            ),
            decode: Histogram::new(
                "vllm:request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.",
                REQUEST_LATENCY.to_vec(),
            ),
            prompt_tokens: Histogram::new(
                "vllm:request_prompt_tokens",
                "Number of prefill tokens processed.",
                tokens.clone(),
            ),
            generation_tokens: Histogram::new(
                "vllm:request_generation_tokens",
                "Number of generation tokens processed.",
                tokens.clone(),
            ),
            params_n: Histogram::new(
                "vllm:request_params_n",
                "Histogram of the n request parameter.",
                REQUEST_PARAMS_N.to_vec(),
            ),
            params_max_tokens: Histogram::new(
                "vllm:request_params_max_tokens",
                "Histogram of the max_tokens request parameter.",
                tokens,
            ),
            success: Default::default(),
        }
    }

    /// One API request (with `n` sequences per prompt) was accepted.
    pub fn record_request(&self, n: usize) {
        self.params_n.observe(n as f64);
    }

    pub fn record_sequence(&self, r: &SequenceRecord) {
        let reason = r.finish_reason.unwrap_or(FinishReason::Abort);
        let slot = match reason {
            FinishReason::Stop => 0,
            FinishReason::Length => 1,
            FinishReason::Abort => 2,
        };
        self.success[slot].fetch_add(1, Ordering::Relaxed);
        if let Some(t) = r.time_to_first_token {
            self.ttft.observe(t);
        }
        for &t in &r.inter_token_latencies {
            self.itl.observe(t);
        }
        if let Some(t) = r.time_per_output_token {
            self.tpot.observe(t);
        }
        self.e2e.observe(r.e2e_latency);
        if let Some(t) = r.decode_time {
            self.decode.observe(t);
        }
        self.prompt_tokens.observe(r.prompt_tokens as f64);
        self.generation_tokens.observe(r.generation_tokens as f64);
        self.params_max_tokens.observe(r.max_tokens_param as f64);
    }

    /// Number of sequences recorded so far (for tests and logs).
    pub fn sequences_recorded(&self) -> u64 {
        self.e2e.count()
    }

    /// The whole exposition: engine gauges and counters, then the histograms.
    pub fn render(&self, s: &EngineStats) -> String {
        let l = &self.labels;
        let mut out = String::with_capacity(16 << 10);
        let gauge = |out: &mut String, name: &str, help: &str, v: f64| {
            header(out, name, help, "gauge");
            let _ = writeln!(out, "{name}{{{l}}} {}", float(v));
        };
        let counter = |out: &mut String, name: &str, help: &str, v: f64| {
            header(out, name, help, "counter");
            let _ = writeln!(out, "{name}_total{{{l}}} {}", float(v));
        };
        gauge(
            &mut out,
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            s.num_running as f64,
        );
        gauge(
            &mut out,
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            s.num_waiting as f64,
        );
        gauge(&mut out, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_cache_usage);
        counter(
            &mut out,
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            s.prefix_cache_queries_total as f64,
        );
        counter(
            &mut out,
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            s.prefix_cache_hits_total as f64,
        );
        counter(
            &mut out,
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            s.num_preemptions_total as f64,
        );
        counter(&mut out, "vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens_total as f64);
        counter(
            &mut out,
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local + external).",
            s.prompt_tokens_cached_total as f64,
        );
        counter(
            &mut out,
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            s.generation_tokens_total as f64,
        );
        counter(
            &mut out,
            "vllm_rs:request_ignored_fields",
            "Unknown request fields accepted and ignored (as vLLM does); the log names them.",
            crate::protocol::fields::ignored_fields() as f64,
        );
        if s.spec_decode_enabled {
            render_spec_decode(&mut out, l, s);
        }
        header(&mut out, "vllm:request_success", "Count of successfully processed requests.", "counter");
        for (i, reason) in ["stop", "length", "abort"].iter().enumerate() {
            let v = self.success[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "vllm:request_success_total{{{l},finished_reason=\"{reason}\"}} {}", float(v as f64));
        }
        for h in [
            &self.prompt_tokens,
            &self.generation_tokens,
            &self.params_n,
            &self.params_max_tokens,
            &self.ttft,
            &self.itl,
            &self.tpot,
            &self.e2e,
            &self.decode,
        ] {
            h.render(&mut out, l);
        }
        out
    }
}

/// Process metrics prometheus_client exports by default (resident memory, CPU time, start time).
pub fn render_process(out: &mut String, start_time_unix: f64) {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        let kb = |key: &str| {
            status.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        };
        if let Some(v) = kb("VmRSS:") {
            header(out, "process_resident_memory_bytes", "Resident memory size in bytes.", "gauge");
            let _ = writeln!(out, "process_resident_memory_bytes {}", float(v * 1024.0));
        }
        if let Some(v) = kb("VmSize:") {
            header(out, "process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge");
            let _ = writeln!(out, "process_virtual_memory_bytes {}", float(v * 1024.0));
        }
    }
    header(out, "process_start_time_seconds", "Start time of the process since unix epoch in seconds.", "gauge");
    let _ = writeln!(out, "process_start_time_seconds {}", float(start_time_unix));
}

/// vLLM's speculative decoding counters (shown when `--speculative-config` is set).
fn render_spec_decode(out: &mut String, l: &str, s: &EngineStats) {
    for (name, help, v) in [
        ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", s.spec_decode_num_drafts),
        ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", s.spec_decode_num_draft_tokens),
        ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", s.spec_decode_num_accepted_tokens),
    ] {
        header(out, name, help, "counter");
        let _ = writeln!(out, "{name}_total{{{l}}} {}", float(v as f64));
    }
    let name = "vllm:spec_decode_num_accepted_tokens_per_pos";
    header(out, name, "Accepted tokens per draft position.", "counter");
    for (pos, v) in s.spec_decode_accepted_per_pos.iter().enumerate() {
        let _ = writeln!(out, "{name}_total{{{l},position=\"{pos}\"}} {}", float(*v as f64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_two_five_buckets_as_vllm() {
        assert_eq!(buckets_1_2_5(100), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        assert_eq!(buckets_1_2_5(2048).last(), Some(&2000.0));
    }

    #[test]
    fn histogram_is_cumulative_with_inf() {
        let h = Histogram::new("x", "help", vec![1.0, 2.0]);
        for v in [0.5, 1.5, 1.5, 9.0] {
            h.observe(v);
        }
        let mut out = String::new();
        h.render(&mut out, "a=\"b\"");
        assert!(out.contains("x_bucket{a=\"b\",le=\"1.0\"} 1.0\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"2.0\"} 3.0\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"+Inf\"} 4.0\n"), "{out}");
        assert!(out.contains("x_count{a=\"b\"} 4.0\n") && out.contains("x_sum{a=\"b\"} 12.5\n"), "{out}");
    }

    #[test]
    fn floats_print_as_python() {
        assert_eq!(float(3.0), "3.0");
        assert_eq!(float(0.25), "0.25");
        assert_eq!(float(f64::INFINITY), "+Inf");
    }

    #[test]
    fn render_has_vllm_names() {
        let m = Metrics::new("m", 2048);
        m.record_sequence(&SequenceRecord {
            finish_reason: Some(FinishReason::Length),
            time_to_first_token: Some(0.01),
            e2e_latency: 0.5,
            prompt_tokens: 5,
            generation_tokens: 16,
            ..Default::default()
        });
        let text = m.render(&EngineStats::default());
        for name in [
            "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0.0",
            "vllm:kv_cache_usage_perc{",
            "vllm:prompt_tokens_total{",
            "vllm:generation_tokens_total{",
            "vllm:prefix_cache_queries_total{",
            "vllm:prefix_cache_hits_total{",
            "vllm:request_success_total{engine=\"0\",model_name=\"m\",finished_reason=\"length\"} 1.0",
            "vllm:time_to_first_token_seconds_bucket{",
            "vllm:e2e_request_latency_seconds_count{engine=\"0\",model_name=\"m\"} 1.0",
        ] {
            assert!(text.contains(name), "{name} missing in\n{text}");
        }
    }
}
