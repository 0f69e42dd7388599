//! The "Serving Benchmark Result" block and the result JSON, laid out and named as
//! `vllm bench serve` writes them (so scripts written for vLLM's output read ours).

use super::client::RequestOutput;
use super::metrics::{BenchmarkMetrics, Stats};
use serde_json::{Map, Value, json};
use std::fmt::Write;

/// A float as Python's `repr` writes it (`1.0`, `0.25`, `inf`).
pub fn py_float(x: f64) -> String {
    if x.is_infinite() {
        if x > 0.0 { "inf".into() } else { "-inf".into() }
    } else if x.is_nan() {
        "nan".into()
    } else if x.fract() == 0.0 && x.abs() < 1e16 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// A JSON number, or `null` where Python would write `Infinity` / `NaN` (not JSON).
pub fn num(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// Percentile label as vLLM writes it: `99`, `99.9`.
pub fn p_word(p: f64) -> String {
    if p.fract() == 0.0 { format!("{}", p as i64) } else { format!("{p}") }
}

/// What the report needs besides the metrics.
pub struct ReportInput<'a> {
    pub metrics: &'a BenchmarkMetrics,
    pub outputs: &'a [RequestOutput],
    pub duration: f64,
    pub max_concurrency: Option<usize>,
    pub request_rate: f64,
    /// Whether a tokenizer was loaded (`--skip-tokenizer-init` leaves token metrics out).
    pub has_tokenizer: bool,
    pub goodput: bool,
    /// `--percentile-metrics`.
    pub selected_metrics: &'a [String],
    /// `--metric-percentiles`.
    pub percentiles: &'a [f64],
}

fn line(s: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(s, "{label:<40} {value:<10}");
}

fn line_f(s: &mut String, label: &str, value: f64) {
    let _ = writeln!(s, "{label:<40} {value:<10.2}");
}

fn header(s: &mut String, title: &str, fill: char) {
    let _ = writeln!(s, "{}", center(title, 50, fill));
}

fn center(title: &str, width: usize, fill: char) -> String {
    let n = title.chars().count();
    if n >= width {
        return title.to_string();
    }
    let left = (width - n) / 2;
    let right = width - n - left;
    format!("{}{title}{}", fill.to_string().repeat(left), fill.to_string().repeat(right))
}

/// The report text and the benchmark's part of the result JSON.
pub fn render(r: &ReportInput) -> (String, Map<String, Value>) {
    let m = r.metrics;
    let mut s = String::new();
    header(&mut s, " Serving Benchmark Result ", '=');
    line(&mut s, "Successful requests:", m.completed);
    line(&mut s, "Failed requests:", m.failed);
    if let Some(c) = r.max_concurrency {
        line(&mut s, "Maximum request concurrency:", c);
    }
    if r.request_rate.is_finite() {
        line_f(&mut s, "Request rate configured (RPS):", r.request_rate);
    }
    line_f(&mut s, "Benchmark duration (s):", r.duration);
    line(&mut s, "Total input tokens:", m.total_input);
    if r.has_tokenizer {
        line(&mut s, "Total generated tokens:", m.total_output);
    }
    line_f(&mut s, "Request throughput (req/s):", m.request_throughput);
    if r.goodput {
        line_f(&mut s, "Request goodput (req/s):", m.request_goodput);
    }
    if r.has_tokenizer {
        line_f(&mut s, "Output token throughput (tok/s):", m.output_throughput);
        line_f(&mut s, "Peak output token throughput (tok/s):", m.max_output_tokens_per_s);
    }
    line_f(&mut s, "Peak concurrent requests:", m.max_concurrent_requests as f64);
    if r.has_tokenizer {
        line_f(&mut s, "Total token throughput (tok/s):", m.total_token_throughput);
    }

    let o = r.outputs;
    let mut j = Map::new();
    j.insert("duration".into(), num(r.duration));
    j.insert("completed".into(), json!(m.completed));
    j.insert("failed".into(), json!(m.failed));
    j.insert("total_input_tokens".into(), json!(m.total_input));
    j.insert("total_output_tokens".into(), json!(m.total_output));
    j.insert("request_throughput".into(), num(m.request_throughput));
    j.insert("request_goodput".into(), if r.goodput { num(m.request_goodput) } else { Value::Null });
    j.insert("output_throughput".into(), num(m.output_throughput));
    j.insert("total_token_throughput".into(), num(m.total_token_throughput));
    j.insert("input_lens".into(), o.iter().map(|x| json!(x.prompt_len)).collect());
    j.insert("output_lens".into(), json!(m.actual_output_lens));
    j.insert("ttfts".into(), o.iter().map(|x| num(x.ttft)).collect());
    j.insert("itls".into(), o.iter().map(|x| x.itl.iter().map(|&v| num(v)).collect::<Value>()).collect());
    j.insert("latencies".into(), o.iter().map(|x| num(x.latency)).collect());
    j.insert("start_times".into(), o.iter().map(|x| num(x.start_time)).collect());
    j.insert("queue_times".into(), o.iter().map(|x| num(x.client_queue_time)).collect());
    j.insert("generated_texts".into(), o.iter().map(|x| json!(x.generated_text)).collect());
    j.insert("errors".into(), o.iter().map(|x| json!(x.error)).collect());
    j.insert("max_output_tokens_per_s".into(), num(m.max_output_tokens_per_s));
    j.insert("max_concurrent_requests".into(), json!(m.max_concurrent_requests));
    j.insert("rtfx".into(), num(0.0));

    let mut metric = |attr: &str, name: &str, title: &str, stats: &Stats| {
        if !r.selected_metrics.iter().any(|x| x == attr) {
            return;
        }
        header(&mut s, title, '-');
        line_f(&mut s, &format!("Mean {name} (ms):"), stats.mean_ms);
        line_f(&mut s, &format!("Median {name} (ms):"), stats.median_ms);
        j.insert(format!("mean_{attr}_ms"), num(stats.mean_ms));
        j.insert(format!("median_{attr}_ms"), num(stats.median_ms));
        j.insert(format!("std_{attr}_ms"), num(stats.std_ms));
        for &(p, v) in &stats.percentiles_ms {
            let w = p_word(p);
            line_f(&mut s, &format!("P{w} {name} (ms):"), v);
            j.insert(format!("p{w}_{attr}_ms"), num(v));
        }
    };
    if r.has_tokenizer {
        metric("ttft", "TTFT", "Time to First Token", &m.ttft);
        metric("tpot", "TPOT", "Time per Output Token (excl. 1st token)", &m.tpot);
        metric("itl", "ITL", "Inter-token Latency", &m.itl);
    }
    metric("e2el", "E2EL", "End-to-end Latency", &m.e2el);
    if r.max_concurrency.is_some() {
        let ok = || o.iter().filter(|x| x.success);
        let queue: Vec<f64> = ok().map(|x| x.client_queue_time).collect();
        metric("client_queue_time", "Client Queue Time", "Client-side Queueing", &Stats::of(&queue, r.percentiles));
        if r.request_rate.is_finite() {
            let incl: Vec<f64> = ok().map(|x| x.latency + x.client_queue_time).collect();
            let stats = Stats::of(&incl, r.percentiles);
            metric(
                "e2el_including_client_queue",
                "E2EL incl. Client Queue",
                "Queue-inclusive End-to-end Latency",
                &stats,
            );
        }
    }
    let _ = writeln!(s, "{}", "=".repeat(50));
    (s, j)
}

/// Fields that `--save-detailed` keeps and a plain `--save-result` drops.
pub const DETAILED_FIELDS: [&str; 7] =
    ["input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors"];

/// Days since 1970-01-01 to (year, month, day) (Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// `YYYYmmdd-HHMMSS` (UTC) for the result's `date` and file name.
pub fn date_stamp(unix_secs: u64) -> String {
    let (y, mo, d) = civil_from_days((unix_secs / 86_400) as i64);
    let s = unix_secs % 86_400;
    format!("{y:04}{mo:02}{d:02}-{:02}{:02}{:02}", s / 3600, s % 3600 / 60, s % 60)
}

/// Now as `YYYY-mm-ddTHH:MM:SS.ffffff` (UTC), like Python's `datetime.isoformat()`.
pub fn iso_now() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = now.as_secs();
    let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!("{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:06}", s / 3600, s % 3600 / 60, s % 60, now.subsec_micros())
}

/// JSON as Python's `json.dump` writes it: `", "` and `": "` separators, non-ASCII escaped.
struct PyJson;

impl serde_json::ser::Formatter for PyJson {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }

    fn write_string_fragment<W: ?Sized + std::io::Write>(&mut self, w: &mut W, fragment: &str) -> std::io::Result<()> {
        for c in fragment.chars() {
            if c.is_ascii() {
                w.write_all(&[c as u8])?;
            } else {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    write!(w, "\\u{u:04x}")?;
                }
            }
        }
        Ok(())
    }
}

pub fn to_py_json(v: &Value) -> String {
    use serde::Serialize;
    let mut buf = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, PyJson);
    v.serialize(&mut ser).expect("JSON to memory");
    String::from_utf8(buf).expect("ASCII")
}

/// Writes (or appends, on a new line) the result file.
pub fn write_result(path: &std::path::Path, result: &Value, append: bool) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    if append && f.metadata().map(|m| m.len() > 0).unwrap_or(false) {
        f.write_all(b"\n")?;
    }
    f.write_all(to_py_json(result).as_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::metrics::calculate;

    #[test]
    fn python_formatting() {
        assert_eq!(py_float(f64::INFINITY), "inf");
        assert_eq!(py_float(1.0), "1.0");
        assert_eq!(py_float(0.25), "0.25");
        assert_eq!(p_word(99.0), "99");
        assert_eq!(p_word(99.9), "99.9");
        assert_eq!(
            center(" Serving Benchmark Result ", 50, '='),
            format!("{0} Serving Benchmark Result {0}", "=".repeat(12))
        );
        // Python's str.center puts the odd fill character on the right.
        assert_eq!(
            center("Time to First Token", 50, '-'),
            format!("{}Time to First Token{}", "-".repeat(15), "-".repeat(16))
        );
        assert_eq!(date_stamp(0), "19700101-000000");
        assert_eq!(date_stamp(1_709_251_199), "20240229-235959");
        assert_eq!(iso_now().len(), "2024-02-29T23:59:59.123456".len());
        // json.dumps({"a": [1, 2.5, None], "t": "é😀"})
        let v = serde_json::json!({"a": [1, 2.5, null], "t": "é😀"});
        assert_eq!(to_py_json(&v), r#"{"a": [1, 2.5, null], "t": "\u00e9\ud83d\ude00"}"#);
    }

    #[test]
    fn report_layout_and_json_names() {
        let out = |start: f64| RequestOutput {
            success: true,
            start_time: start,
            ttft: 0.1,
            itl: vec![0.05; 3],
            latency: 0.25,
            output_tokens: Some(4),
            prompt_len: 8,
            ..Default::default()
        };
        let outputs = vec![out(0.0), out(0.3)];
        let m = calculate(&outputs, 0.6, None, &[50.0, 99.0], None);
        let metrics: Vec<String> = ["ttft", "tpot", "itl", "e2el"].map(String::from).to_vec();
        let (text, json) = render(&ReportInput {
            metrics: &m,
            outputs: &outputs,
            duration: 0.6,
            max_concurrency: Some(1),
            request_rate: f64::INFINITY,
            has_tokenizer: true,
            goodput: false,
            selected_metrics: &metrics,
            percentiles: &[50.0, 99.0],
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "============ Serving Benchmark Result ============");
        assert_eq!(lines[1], format!("{:<40} {:<10}", "Successful requests:", 2));
        assert_eq!(lines[3], "Maximum request concurrency:             1         ");
        assert_eq!(lines[4], "Benchmark duration (s):                  0.60      ");
        assert!(text.contains("Total generated tokens:                  8         \n"));
        assert!(text.contains("Output token throughput (tok/s):         13.33     \n"));
        assert!(text.contains("---------------Time to First Token----------------\n"));
        assert!(text.contains("P99 TTFT (ms):                           100.00    \n"));
        assert!(text.contains("Median TPOT (ms):                        50.00     \n"));
        assert!(!text.contains("Request rate configured"), "only for a finite rate");
        assert!(!text.contains("E2EL incl."), "only for a finite rate");
        assert_eq!(lines.last().unwrap(), &"=".repeat(50));
        for k in [
            "duration",
            "completed",
            "failed",
            "total_input_tokens",
            "total_output_tokens",
            "request_throughput",
            "request_goodput",
            "output_throughput",
            "total_token_throughput",
            "max_output_tokens_per_s",
            "max_concurrent_requests",
            "mean_ttft_ms",
            "median_ttft_ms",
            "std_ttft_ms",
            "p50_ttft_ms",
            "p99_ttft_ms",
            "mean_tpot_ms",
            "p99_itl_ms",
            "mean_e2el_ms",
            "p99_e2el_ms",
            "latencies",
            "queue_times",
        ] {
            assert!(json.contains_key(k), "{k}");
        }
        assert!(!json.contains_key("mean_client_queue_time_ms"), "not selected");
        assert_eq!(json["total_output_tokens"], 8);
        assert_eq!(json["request_goodput"], Value::Null);
    }
}
