//! ORCA load reports, as vLLM sends them: a completion or chat request carrying
//! `endpoint-load-metrics-format: text|json` gets its (non-streaming) answer with an
//! `endpoint-load-metrics` header holding the KV cache usage and the waiting requests, which
//! load balancers (Envoy, the Gateway API inference extension) read.

use crate::state::{AppState, Runner};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;

const FORMAT_HEADER: &str = "endpoint-load-metrics-format";
const REPORT_HEADER: &str = "endpoint-load-metrics";

pub async fn load_report(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let format = req.headers().get(FORMAT_HEADER).and_then(|v| v.to_str().ok()).map(str::to_ascii_lowercase);
    let mut resp = next.run(req).await;
    let is_json =
        resp.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let (Some(format), true) = (format, is_json) else { return resp };
    let Some(Runner::Generate(engine)) = state.model().map(|m| &m.runner) else { return resp };
    let s = engine.stats();
    let metrics = [("kv_cache_usage_perc", s.kv_cache_usage), ("num_requests_waiting", s.num_waiting as f64)];
    if let Some(v) = report(&format, &metrics).and_then(|r| HeaderValue::from_str(&r).ok()) {
        resp.headers_mut().insert(REPORT_HEADER, v);
    }
    resp
}

/// The header value: `TEXT named_metrics.a=0.4, named_metrics.b=2.0` or
/// `JSON {"named_metrics": {"a": 0.4, "b": 2.0}}`; `None` for another format (vLLM logs and
/// sends none).
fn report(format: &str, metrics: &[(&str, f64)]) -> Option<String> {
    match format {
        "text" => {
            let items: Vec<String> =
                metrics.iter().map(|(k, v)| format!("named_metrics.{k}={}", py_float(*v))).collect();
            Some(format!("TEXT {}", items.join(", ")))
        }
        "json" => {
            let items: Vec<String> = metrics.iter().map(|(k, v)| format!("\"{k}\": {}", py_float(*v))).collect();
            Some(format!("JSON {{\"named_metrics\": {{{}}}}}", items.join(", ")))
        }
        other => {
            tracing::warn!("`{other}` format is not supported in the ORCA response header");
            None
        }
    }
}

/// A float as Python prints it for these values (`2.0`, `0.4`).
fn py_float(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e16 { format!("{v:.1}") } else { format!("{v}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_in_vllms_text_and_json_forms() {
        let m = [("kv_cache_usage_perc", 0.4), ("num_requests_waiting", 2.0)];
        assert_eq!(
            report("text", &m).unwrap(),
            "TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=2.0"
        );
        assert_eq!(
            report("json", &m).unwrap(),
            r#"JSON {"named_metrics": {"kv_cache_usage_perc": 0.4, "num_requests_waiting": 2.0}}"#
        );
        assert!(report("xml", &m).is_none());
    }
}
