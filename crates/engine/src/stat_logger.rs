//! vLLM's periodic engine log (its `LoggingStatLogger`): every interval, the prompt and
//! generation throughput since the last line, the running and waiting requests, KV cache usage
//! and the prefix cache hit rate, and with speculative decoding its acceptance. Lines of an idle
//! engine go to the debug level, as vLLM's do.

use crate::handle::EngineHandle;
use crate::pooling_runner::PoolingHandle;
use crate::stats::EngineStats;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// vLLM's `VLLM_LOG_STATS_INTERVAL` default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// Logs the engine's statistics every `interval` from a thread of its own, until the engine's
/// handle is dropped.
pub fn spawn(handle: &Arc<EngineHandle>, interval: Duration) {
    let handle: Weak<EngineHandle> = Arc::downgrade(handle);
    spawn_with(move || handle.upgrade().map(|h| h.stats()), interval);
}

/// The same for a pooling model (embeddings, scores), as vLLM logs one: its inputs' tokens are
/// the prompt throughput; nothing is generated and there is no KV cache.
pub fn spawn_pooling(handle: &Arc<PoolingHandle>, interval: Duration) {
    let handle: Weak<PoolingHandle> = Arc::downgrade(handle);
    spawn_with(move || handle.upgrade().map(|h| h.engine_stats()), interval);
}

/// Logs what `stats` reads every `interval` until it reads nothing.
fn spawn_with(stats: impl Fn() -> Option<EngineStats> + Send + 'static, interval: Duration) {
    let spawned = std::thread::Builder::new().name("vllm-rs-stats".into()).spawn(move || {
        // The previous line's time and statistics, and whether its interval had activity.
        let (mut then, mut prev, mut was_active) = (Instant::now(), EngineStats::default(), false);
        loop {
            std::thread::sleep(interval);
            let Some(stats) = stats() else { return };
            let now = Instant::now();
            let active = stats.prompt_tokens_total != prev.prompt_tokens_total
                || stats.generation_tokens_total != prev.generation_tokens_total;
            for line in lines(&prev, &stats, now.duration_since(then).as_secs_f64()) {
                // The first idle interval after activity is still logged: it shows the drop.
                if active || was_active {
                    tracing::info!("{line}");
                } else {
                    tracing::debug!("{line}");
                }
            }
            (then, prev, was_active) = (now, stats, active);
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("engine statistics will not be logged: {e}");
    }
}

/// The log lines for the interval of `secs` seconds from `prev` to `now`: vLLM's line, and its
/// speculative decoding line where speculation is on.
pub fn lines(prev: &EngineStats, now: &EngineStats, secs: f64) -> Vec<String> {
    let rate = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs.max(1e-9);
    let queries = now.prefix_cache_queries_total.saturating_sub(prev.prefix_cache_queries_total);
    let hits = now.prefix_cache_hits_total.saturating_sub(prev.prefix_cache_hits_total);
    let mut out = vec![format!(
        "Avg prompt throughput: {:.1} tokens/s, Avg generation throughput: {:.1} tokens/s, Running: {} reqs, \
         Waiting: {} reqs, KV cache usage: {:.1}%, Prefix cache hit rate: {:.1}%",
        rate(prev.prompt_tokens_total, now.prompt_tokens_total),
        rate(prev.generation_tokens_total, now.generation_tokens_total),
        now.num_running,
        now.num_waiting,
        100.0 * now.kv_cache_usage,
        if queries == 0 { 0.0 } else { 100.0 * hits as f64 / queries as f64 },
    )];
    if now.spec_decode_enabled {
        out.extend(spec_decode_line(prev, now, secs));
    }
    out
}

/// vLLM's `SpecDecoding metrics` line over the interval, if drafts were verified in it: the mean
/// acceptance length counts the step's own token, as vLLM's does.
pub fn spec_decode_line(prev: &EngineStats, now: &EngineStats, secs: f64) -> Option<String> {
    let drafts = now.spec_decode_num_drafts.saturating_sub(prev.spec_decode_num_drafts);
    let drafted = now.spec_decode_num_draft_tokens.saturating_sub(prev.spec_decode_num_draft_tokens);
    let accepted = now.spec_decode_num_accepted_tokens.saturating_sub(prev.spec_decode_num_accepted_tokens);
    if drafts == 0 {
        return None;
    }
    let per_pos: Vec<String> = (now.spec_decode_accepted_per_pos.iter().enumerate())
        .map(|(i, &n)| n.saturating_sub(prev.spec_decode_accepted_per_pos.get(i).copied().unwrap_or(0)))
        .map(|n| format!("{:.3}", n as f64 / drafts as f64))
        .collect();
    let secs = secs.max(1e-9);
    Some(format!(
        "SpecDecoding metrics: Mean acceptance length: {:.2}, Accepted throughput: {:.2} tokens/s, Drafted \
         throughput: {:.2} tokens/s, Accepted: {accepted} tokens, Drafted: {drafted} tokens, Per-position \
         acceptance rate: {}, Avg Draft acceptance rate: {:.1}%",
        1.0 + accepted as f64 / drafts as f64,
        accepted as f64 / secs,
        drafted as f64 / secs,
        per_pos.join(", "),
        100.0 * accepted as f64 / drafted.max(1) as f64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_give_the_interval_s_rates_and_acceptance() {
        let prev = EngineStats {
            prompt_tokens_total: 100,
            generation_tokens_total: 50,
            prefix_cache_queries_total: 100,
            prefix_cache_hits_total: 0,
            spec_decode_enabled: true,
            spec_decode_num_drafts: 10,
            spec_decode_num_draft_tokens: 40,
            spec_decode_num_accepted_tokens: 20,
            spec_decode_accepted_per_pos: vec![8, 6, 4, 2],
            ..Default::default()
        };
        let now = EngineStats {
            prompt_tokens_total: 300,
            generation_tokens_total: 150,
            prefix_cache_queries_total: 300,
            prefix_cache_hits_total: 50,
            num_running: 2,
            num_waiting: 1,
            kv_cache_usage: 0.25,
            spec_decode_num_drafts: 30,
            spec_decode_num_draft_tokens: 120,
            spec_decode_num_accepted_tokens: 50,
            spec_decode_accepted_per_pos: vec![24, 14, 8, 4],
            ..prev.clone()
        };
        let l = lines(&prev, &now, 10.0);
        assert_eq!(
            l[0],
            "Avg prompt throughput: 20.0 tokens/s, Avg generation throughput: 10.0 tokens/s, Running: 2 reqs, \
             Waiting: 1 reqs, KV cache usage: 25.0%, Prefix cache hit rate: 25.0%"
        );
        // 20 drafts in the interval, 30 of their 80 tokens accepted: 16, 8, 4 and 2 by position.
        assert_eq!(
            l[1],
            "SpecDecoding metrics: Mean acceptance length: 2.50, Accepted throughput: 3.00 tokens/s, Drafted \
             throughput: 8.00 tokens/s, Accepted: 30 tokens, Drafted: 80 tokens, Per-position acceptance rate: \
             0.800, 0.400, 0.200, 0.100, Avg Draft acceptance rate: 37.5%"
        );
        // No drafts in the interval: no speculation line; speculation off: never one.
        assert_eq!(lines(&now, &now, 10.0).len(), 1);
        let off = EngineStats { spec_decode_enabled: false, ..now.clone() };
        assert_eq!(lines(&prev, &off, 10.0).len(), 1);
    }
}
