//! `vllm-rs bench`: offline benchmarks shaped like `vllm bench throughput` / `vllm bench latency`,
//! and a `llama-bench`-shaped prompt-processing / token-generation report.

use crate::args::EngineArgs;
use crate::setup;
use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;
use vllm_rs_engine::{EngineCore, EngineRequest, SamplingParams};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Requests/s and tokens/s for a batch of random prompts (like `vllm bench throughput`).
    Throughput(ThroughputArgs),
    /// End-to-end latency of one batch (like `vllm bench latency`).
    Latency(LatencyArgs),
    /// Prompt processing and token generation speed, reported like llama.cpp's `llama-bench`.
    PpTg(PpTgArgs),
    /// Load-test a running OpenAI-compatible server (like `vllm bench serve`).
    Serve(Box<vllm_rs_bench::serve::ServeArgs>),
}

#[derive(Args)]
pub struct ThroughputArgs {
    /// Model: local directory, .gguf file, catalog name or HF repo id (default: SmolLM2-135M-Instruct).
    #[arg(long)]
    pub model: Option<String>,
    /// Number of requests, all submitted at once.
    #[arg(long, default_value_t = 64)]
    pub num_prompts: usize,
    /// Prompt length of every request (random token ids).
    #[arg(long, default_value_t = 128)]
    pub input_len: usize,
    /// Tokens generated per request (EOS ignored).
    #[arg(long, default_value_t = 128)]
    pub output_len: usize,
    /// Seed of the random prompts.
    #[arg(long, default_value_t = 0)]
    pub dataset_seed: u64,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Args)]
pub struct LatencyArgs {
    /// Model: local directory, .gguf file, catalog name or HF repo id (default: SmolLM2-135M-Instruct).
    #[arg(long)]
    pub model: Option<String>,
    /// Prompt length of every request (random token ids).
    #[arg(long, default_value_t = 32)]
    pub input_len: usize,
    /// Tokens generated per request (EOS ignored).
    #[arg(long, default_value_t = 128)]
    pub output_len: usize,
    /// Requests in the batch, run together.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Untimed iterations first.
    #[arg(long, default_value_t = 3)]
    pub num_iters_warmup: usize,
    /// Timed iterations (the report gives their mean and percentiles).
    #[arg(long, default_value_t = 10)]
    pub num_iters: usize,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Args)]
pub struct PpTgArgs {
    /// Model: local directory, .gguf file, catalog name or HF repo id (default: SmolLM2-135M-Instruct).
    #[arg(long)]
    pub model: Option<String>,
    /// Prompt lengths to time (llama-bench `-p`), comma separated.
    #[arg(short = 'p', long, value_delimiter = ',', default_value = "512")]
    pub n_prompt: Vec<usize>,
    /// Generation lengths to time (llama-bench `-n`), comma separated.
    #[arg(short = 'n', long, value_delimiter = ',', default_value = "128")]
    pub n_gen: Vec<usize>,
    /// Tokens already in the KV cache before each test (llama-bench `-d`), comma separated:
    /// `tg128 @ d4096` decodes after a 4,096-token prompt, `pp512 @ d4096` prefills 512 tokens
    /// after 4,096 served from the prefix cache.
    #[arg(short = 'd', long, value_delimiter = ',', default_value = "0")]
    pub n_depth: Vec<usize>,
    /// Repetitions (llama-bench `-r`).
    #[arg(short = 'r', long, default_value_t = 5)]
    pub repetitions: usize,
    /// Output format: `md` (a table) or `json` (llama-bench's field names).
    #[arg(short = 'o', long, default_value = "md", value_parser = ["md", "json"])]
    pub output: String,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Throughput(a) => throughput(a),
        BenchCommand::Latency(a) => latency(a),
        BenchCommand::PpTg(a) => pp_tg(a),
        BenchCommand::Serve(a) => vllm_rs_bench::serve::run(*a).map(|_| ()),
    }
}

fn random_prompt(rng: &mut StdRng, vocab: usize, len: usize) -> Vec<u32> {
    (0..len).map(|_| rng.random_range(0..vocab as u32)).collect()
}

fn request(id: String, prompt: Vec<u32>, max_tokens: usize) -> EngineRequest {
    let params = SamplingParams { max_tokens, ignore_eos: true, ..SamplingParams::greedy() };
    EngineRequest { request_id: id, prompt_token_ids: prompt, params, priority: 0, cache_salt: None }
}

/// Runs requests to completion; returns seconds.
fn run_batch(core: &mut EngineCore, reqs: Vec<EngineRequest>) -> Result<f64> {
    let t0 = Instant::now();
    core.generate(reqs).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(t0.elapsed().as_secs_f64())
}

fn throughput(a: ThroughputArgs) -> Result<()> {
    if a.num_prompts == 0 || a.input_len == 0 || a.output_len == 0 {
        bail!("--num-prompts, --input-len and --output-len must be positive");
    }
    let mut l = setup::load(a.model.as_deref(), &a.engine)?;
    let vocab = l.core.model().info().vocab_size;
    let mut rng = StdRng::seed_from_u64(a.dataset_seed);
    let reqs = (0..a.num_prompts)
        .map(|i| request(format!("tp-{i}"), random_prompt(&mut rng, vocab, a.input_len), a.output_len))
        .collect();
    let secs = run_batch(&mut l.core, reqs)?;
    let (n, pi, po) =
        (a.num_prompts as f64, (a.num_prompts * a.input_len) as f64, (a.num_prompts * a.output_len) as f64);
    println!(
        "Throughput: {:.2} requests/s, {:.2} total tokens/s, {:.2} output tokens/s",
        n / secs,
        (pi + po) / secs,
        po / secs
    );
    println!("Total num prompt tokens:  {}", pi as u64);
    println!("Total num output tokens:  {}", po as u64);
    println!("Elapsed: {secs:.2} s");
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p / 100.0).round() as usize;
    sorted[i]
}

fn latency(a: LatencyArgs) -> Result<()> {
    if a.batch_size == 0 || a.num_iters == 0 || a.input_len == 0 || a.output_len == 0 {
        bail!("--batch-size, --num-iters, --input-len and --output-len must be positive");
    }
    let mut l = setup::load(a.model.as_deref(), &a.engine)?;
    let vocab = l.core.model().info().vocab_size;
    let mut rng = StdRng::seed_from_u64(0);
    let prompts: Vec<Vec<u32>> = (0..a.batch_size).map(|_| random_prompt(&mut rng, vocab, a.input_len)).collect();
    let mut iteration = 0;
    let mut once = |core: &mut EngineCore| -> Result<f64> {
        iteration += 1;
        let reqs = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| request(format!("lat-{iteration}-{i}"), p.clone(), a.output_len))
            .collect();
        run_batch(core, reqs)
    };
    for _ in 0..a.num_iters_warmup {
        once(&mut l.core)?;
    }
    let mut times: Vec<f64> = (0..a.num_iters).map(|_| once(&mut l.core)).collect::<Result<_>>()?;
    times.sort_by(f64::total_cmp);
    println!("Avg latency: {:.6} seconds", times.iter().sum::<f64>() / times.len() as f64);
    for p in [10.0, 25.0, 50.0, 75.0, 90.0, 99.0] {
        println!("{p:.0}% percentile latency: {:.6} seconds", percentile(&times, p));
    }
    Ok(())
}

/// One line of the pp/tg report: a prompt test (`n_gen` 0) or a generation test, at a depth.
struct PpTgRow {
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    mean: f64,
    sd: f64,
}

impl PpTgRow {
    fn new(n_prompt: usize, n_gen: usize, n_depth: usize, rates: &[f64]) -> Self {
        let (mean, sd) = mean_sd(rates);
        PpTgRow { n_prompt, n_gen, n_depth, mean, sd }
    }

    /// llama-bench's name: `pp512`, `tg128`, `tg128 @ d4096`.
    fn test(&self) -> String {
        let t = if self.n_gen == 0 { format!("pp{}", self.n_prompt) } else { format!("tg{}", self.n_gen) };
        if self.n_depth == 0 { t } else { format!("{t} @ d{}", self.n_depth) }
    }
}

/// mean ± sample standard deviation.
fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    let var = if xs.len() > 1 { xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64 } else { 0.0 };
    (m, var.sqrt())
}

fn pp_tg(a: PpTgArgs) -> Result<()> {
    if a.repetitions == 0 {
        bail!("-r must be at least 1");
    }
    let mut engine = a.engine.clone();
    // One prompt is processed in one step, as llama-bench does with its default batch.
    let depth = a.n_depth.iter().copied().max().unwrap_or(0);
    let longest = depth + a.n_prompt.iter().copied().max().unwrap_or(0).max(1);
    engine.max_num_batched_tokens = Some(engine.max_num_batched_tokens.unwrap_or(2048).max(longest));
    // The depth of a prompt test comes from the prefix cache; without depths, nothing may hit.
    engine.no_enable_prefix_caching = depth == 0;
    let model = a.model.clone().unwrap_or_else(|| vllm_rs_hub::DEFAULT_MODEL.into());
    let mut l = setup::load(Some(&model), &engine)?;
    let vocab = l.core.model().info().vocab_size;
    let threads = vllm_rs_kernels::pool::global().n_threads();
    let mut rng = StdRng::seed_from_u64(0);
    let mut rows: Vec<PpTgRow> = Vec::new();
    let mut id = 0;
    let mut next_id = || {
        id += 1;
        format!("pptg-{id}")
    };
    for &d in &a.n_depth {
        let prefix = random_prompt(&mut rng, vocab, d);
        if d > 0 && !a.n_prompt.is_empty() {
            run_batch(&mut l.core, vec![request(next_id(), prefix.clone(), 1)])?; // fills the prefix cache
        }
        for &p in &a.n_prompt {
            // Warm-up, then repetitions: one request of the depth's prefix and p new tokens,
            // one output token.
            let mut rates = Vec::new();
            for rep in 0..=a.repetitions {
                let prompt = [prefix.clone(), random_prompt(&mut rng, vocab, p)].concat();
                let t0 = Instant::now();
                let out = l.core.generate(vec![request(next_id(), prompt, 1)]).map_err(|e| anyhow::anyhow!("{e}"))?;
                let secs = t0.elapsed().as_secs_f64();
                let cached = out[0].num_cached_tokens;
                // Blocks cut the depth at their bounds; tokens past them are prefilled and counted.
                if cached * 2 < d {
                    bail!("pp{p} @ d{d}: only {cached} of the {d} depth tokens came from the prefix cache");
                }
                if rep > 0 {
                    rates.push((p + d - cached.min(d)) as f64 / secs);
                }
            }
            rows.push(PpTgRow::new(p, 0, d, &rates));
        }
        for &n in &a.n_gen {
            let mut rates = Vec::new();
            for rep in 0..=a.repetitions {
                // The depth's prompt (at least one token) in one step, then n decode steps:
                // time the decodes only.
                let prompt = if d > 0 { prefix.clone() } else { random_prompt(&mut rng, vocab, 1) };
                l.core.add_request(request(next_id(), prompt, n + 1)).map_err(|e| anyhow::anyhow!("{e}"))?;
                l.core.step(); // prompt
                let t0 = Instant::now();
                while l.core.has_unfinished() {
                    l.core.step();
                }
                if rep > 0 {
                    rates.push(n as f64 / t0.elapsed().as_secs_f64());
                }
            }
            rows.push(PpTgRow::new(0, n, d, &rates));
        }
    }
    if a.output == "json" {
        let json: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({"model": model, "n_threads": threads, "test": r.test(), "n_prompt": r.n_prompt,
                    "n_gen": r.n_gen, "n_depth": r.n_depth, "avg_ts": r.mean, "stddev_ts": r.sd})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        println!("| model | threads | test | t/s |");
        println!("| --- | ---: | ---: | ---: |");
        for r in &rows {
            println!("| {model} | {threads} | {} | {:.2} ± {:.2} |", r.test(), r.mean, r.sd);
        }
    }
    Ok(())
}
