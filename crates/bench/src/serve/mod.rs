//! `vllm-rs bench serve`: vLLM's `vllm bench serve` against any OpenAI-compatible server.
//!
//! The same flags and defaults, the same prompts for the same `--seed` (the random dataset draws
//! from a bit-exact port of numpy's generators), the same request bodies and streaming timing,
//! the same metrics (numpy's arithmetic), the same report block and result-JSON field names.

pub mod args;
pub mod client;
pub mod dataset;
pub mod metrics;
pub mod report;
pub mod rng;
pub mod schedule;
pub mod sse;
pub mod tokenizer;

pub use args::ServeArgs;

use anyhow::{Context, Result, anyhow, bail};
use args::{DatasetName, RampUp};
use client::{HttpClient, RequestInput, RequestOutput, clock};
use dataset::{RandomSpec, RangeRatio, SampleRequest, ShareGptSpec};
use hyper::Method;
use indicatif::{ProgressBar, ProgressStyle};
use metrics::Goodput;
use report::{ReportInput, num, py_float};
use schedule::Ramp;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokenizer::BenchTokenizer;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

/// Runs the benchmark, prints the report, saves the result file if asked; returns the result JSON.
pub fn run(args: ServeArgs) -> Result<Value> {
    raise_open_files_limit();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("tokio runtime")?;
    rt.block_on(run_async(args))
}

/// Every in-flight request holds a connection: lift the soft open-files limit (often 1024) to the
/// hard one, so `--num-prompts 1000` without `--max-concurrency` does not run out of sockets.
fn raise_open_files_limit() {
    #[cfg(unix)]
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    unsafe {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn key_values(items: &[String], flag: &str) -> Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|item| match item.split_once('=') {
            Some((k, v)) => Ok((k.trim().to_string(), v.trim().to_string())),
            None => bail!("{flag} {item}: Invalid format. Please use KEY=VALUE format."),
        })
        .collect()
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

async fn run_async(mut a: ServeArgs) -> Result<Value> {
    if a.max_concurrency == Some(0) {
        bail!("--max-concurrency must be greater than 0");
    }
    let percentiles: Vec<f64> = a
        .metric_percentiles
        .split(',')
        .map(|p| p.trim().parse::<f64>().with_context(|| format!("--metric-percentiles {}", a.metric_percentiles)))
        .collect::<Result<_>>()?;
    if let Some(p) = percentiles.iter().find(|p| !(0.0..=100.0).contains(*p)) {
        bail!("--metric-percentiles: {p} is not between 0 and 100");
    }
    if a.request_rate.is_nan() || a.request_rate <= 0.0 {
        bail!("--request-rate must be positive (inf sends all requests at once)");
    }
    if a.burstiness.is_nan() || a.burstiness <= 0.0 {
        bail!("A positive burstiness factor is expected, but given {}.", a.burstiness);
    }
    let ramp = match a.ramp_up_strategy {
        None => None,
        Some(strategy) => {
            if a.request_rate.is_finite() {
                bail!(
                    "When using ramp-up, do not specify --request-rate. The request rate will be controlled by \
                     ramp-up parameters. Please remove the --request-rate argument."
                );
            }
            let (Some(start), Some(end)) = (a.ramp_up_start_rps, a.ramp_up_end_rps) else {
                bail!(
                    "When using --ramp-up-strategy, both --ramp-up-start-rps and --ramp-up-end-rps must be specified"
                );
            };
            if start > end {
                bail!("Ramp-up start RPS must be less than end RPS");
            }
            if strategy == RampUp::Exponential && start == 0 {
                bail!("For exponential ramp-up, the start RPS cannot be 0.");
            }
            Some(Ramp { strategy, start_rps: start as f64, end_rps: end as f64 })
        }
    };
    let legacy_seed = u32::try_from(a.seed).map_err(|_| anyhow!("--seed must be between 0 and 2**32 - 1"))?;

    let (api_url, base_url) = match &a.base_url {
        Some(b) => (format!("{b}{}", a.endpoint), b.clone()),
        None => {
            let hp = join_host_port(&a.host, a.port);
            (format!("http://{hp}{}", a.endpoint), format!("http://{hp}"))
        }
    };
    a.backend.check_url(&api_url).map_err(|e| anyhow!(e))?;
    let headers = key_values(&a.header, "--header")?;
    let client = HttpClient::new();

    // The model: as given, or the server's first.
    let (model_id, model_name) = match &a.model {
        Some(m) => (m.clone(), a.served_model_name.clone()),
        None => {
            println!("Model not specified, fetching first model from server...");
            let (name, id) = first_model(&client, &base_url, &headers).await?;
            println!("First model name: {name}, first model id: {id}");
            (id, Some(name))
        }
    };

    let tokenizer_id = (!a.skip_tokenizer_init).then(|| a.tokenizer.clone().unwrap_or_else(|| model_id.clone()));
    let tokenizer: Option<Arc<dyn BenchTokenizer>> = match &tokenizer_id {
        None => None,
        Some(id) => {
            let id = id.clone();
            let tok = tokio::task::spawn_blocking(move || tokenizer::load(&id)).await??;
            Some(Arc::new(tok))
        }
    };

    // The prompts.
    if let Some(n) = a.input_len {
        a.random_input_len = n;
    }
    if let Some(n) = a.output_len {
        a.random_output_len = n;
        a.sharegpt_output_len = Some(n);
    }
    let request_id_prefix =
        a.request_id_prefix.clone().unwrap_or_else(|| format!("bench-{:08x}-", rand::random::<u32>()));
    let need_tok = || tokenizer.clone().ok_or_else(|| anyhow!("--dataset-name {:?} needs a tokenizer", a.dataset_name));
    let requests = match a.dataset_name {
        DatasetName::Random => {
            if let Some(p) = &a.dataset_path {
                bail!(
                    "Cannot use 'random' dataset with --dataset-path. Please specify the appropriate \
                     --dataset-name (e.g., 'sharegpt') for your dataset file: {p}"
                );
            }
            // As vLLM: the random dataset runs to the requested length.
            a.ignore_eos = true;
            let spec = RandomSpec {
                input_len: a.random_input_len,
                output_len: a.random_output_len,
                prefix_len: a.random_prefix_len,
                range_ratio: RangeRatio::parse(&a.random_range_ratio)?,
            };
            let (tok, n, seed, prefix) = (need_tok()?, a.num_prompts, a.seed, request_id_prefix.clone());
            let reqs =
                tokio::task::spawn_blocking(move || dataset::sample_random(tok.as_ref(), n, seed, &spec, &prefix))
                    .await??;
            align_prompts(&client, &base_url, &model_id, &headers, reqs).await
        }
        DatasetName::Sharegpt => {
            let path = a.dataset_path.clone().context("--dataset-name sharegpt needs --dataset-path")?;
            let spec = ShareGptSpec {
                output_len: a.sharegpt_output_len,
                disable_shuffle: a.disable_shuffle,
                no_oversample: a.no_oversample,
            };
            let (tok, n, seed, prefix) = (need_tok()?, a.num_prompts, a.seed, request_id_prefix.clone());
            tokio::task::spawn_blocking(move || {
                dataset::sample_sharegpt(tok.as_ref(), Path::new(&path), n, seed, &spec, &prefix)
            })
            .await??
        }
    };
    if requests.is_empty() {
        bail!("No requests provided (--num-prompts 0?)");
    }

    let goodput = Goodput::parse(&a.goodput).map_err(|e| anyhow!(e))?;
    let mut extra_body = Map::new();
    for (k, v) in [
        ("top_p", a.top_p.map(num)),
        ("top_k", a.top_k.map(|k| json!(k))),
        ("min_p", a.min_p.map(num)),
        ("temperature", a.temperature.map(num)),
        ("frequency_penalty", a.frequency_penalty.map(num)),
        ("presence_penalty", a.presence_penalty.map(num)),
        ("repetition_penalty", a.repetition_penalty.map(num)),
    ] {
        if let Some(v) = v {
            extra_body.insert(k.to_string(), v);
        }
    }
    if a.temperature.is_none() {
        println!(
            "WARNING: vllm-rs bench serve does not set temperature==0 (greedy) in requests by default; the server \
             decides. For greedy requests, include --temperature=0."
        );
    }
    if let Some(eb) = &a.extra_body {
        let v: Value = serde_json::from_str(eb).context("--extra-body: not JSON")?;
        let Value::Object(m) = v else { bail!("--extra-body: expected a JSON object") };
        extra_body.extend(m);
    }
    let selected_metrics: Vec<String> = a
        .percentile_metrics
        .clone()
        .unwrap_or_else(|| "ttft,tpot,itl".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();

    let plan = Plan {
        client: &client,
        api_url: &api_url,
        model: model_name.clone().unwrap_or_else(|| model_id.clone()),
        requests: &requests,
        extra_body,
        headers: &headers,
        ramp,
        legacy_seed,
        args: &a,
    };
    let run = plan.run().await?;

    let m = metrics::calculate(&run.outputs, run.duration, tokenizer.as_deref(), &percentiles, goodput.as_ref());
    let failed: Vec<&RequestOutput> = run.outputs.iter().filter(|o| !o.success).collect();
    if !failed.is_empty() {
        println!("Failed requests during benchmark run detected (capping to 10):");
        for (i, o) in failed.iter().take(10).enumerate() {
            println!("Error {i}: {}", o.error);
        }
    }
    let (text, bench_json) = report::render(&ReportInput {
        metrics: &m,
        outputs: &run.outputs,
        duration: run.duration,
        max_concurrency: a.max_concurrency,
        request_rate: a.request_rate,
        has_tokenizer: tokenizer.is_some(),
        goodput: goodput.is_some(),
        selected_metrics: &selected_metrics,
        percentiles: &percentiles,
    });
    print!("{text}");

    // The result file: setup, traffic, then the benchmark's fields.
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let date = report::date_stamp(now.as_secs());
    let mut result = Map::new();
    result.insert("date".into(), json!(date));
    result.insert("endpoint_type".into(), json!(a.backend.name()));
    result.insert("backend".into(), json!(a.backend.name()));
    result.insert("label".into(), json!(a.label));
    result.insert("model_id".into(), json!(model_id));
    result.insert("tokenizer_id".into(), json!(tokenizer_id));
    result.insert("num_prompts".into(), json!(a.num_prompts));
    for (k, v) in key_values(&a.metadata, "--metadata")? {
        result.insert(k, json!(v));
    }
    result.insert("request_rate".into(), if a.request_rate.is_finite() { num(a.request_rate) } else { json!("inf") });
    result.insert("burstiness".into(), num(a.burstiness));
    result.insert("max_concurrency".into(), json!(a.max_concurrency));
    if let Some(r) = &ramp {
        let name = match r.strategy {
            RampUp::Linear => "linear",
            RampUp::Exponential => "exponential",
        };
        result.insert("ramp_up_strategy".into(), json!(name));
        result.insert("ramp_up_start_rps".into(), json!(a.ramp_up_start_rps));
        result.insert("ramp_up_end_rps".into(), json!(a.ramp_up_end_rps));
    }
    result.extend(bench_json);
    if !run.rps_change_events.is_empty() {
        result.insert("rps_change_events".into(), Value::Array(run.rps_change_events));
    }
    if !a.save_detailed {
        for k in report::DETAILED_FIELDS {
            result.shift_remove(k);
        }
    }
    let result = Value::Object(result);
    if a.save_result || a.append_result {
        let path = result_path(&a, &model_id, &date)?;
        report::write_result(&path, &result, a.append_result)?;
        eprintln!("result saved to {}", path.display());
    }
    Ok(result)
}

/// vLLM's file name: `{label}-{rate}qps[-concurrency{n}]-{model basename}-{date}.json`.
fn result_path(a: &ServeArgs, model_id: &str, date: &str) -> Result<PathBuf> {
    let base = model_id.rsplit('/').next().unwrap_or(model_id);
    let conc = a.max_concurrency.map(|c| format!("-concurrency{c}")).unwrap_or_default();
    let label = a.label.clone().unwrap_or_else(|| a.backend.name().to_string());
    let name = match (&a.result_filename, a.ramp_up_strategy) {
        (Some(f), _) => f.clone(),
        (None, Some(s)) => {
            let s = if s == RampUp::Linear { "linear" } else { "exponential" };
            let (start, end) = (a.ramp_up_start_rps.unwrap_or(0), a.ramp_up_end_rps.unwrap_or(0));
            format!("{label}-ramp-up-{s}-{start}qps-{end}qps{conc}-{base}-{date}.json")
        }
        (None, None) => format!("{label}-{}qps{conc}-{base}-{date}.json", py_float(a.request_rate)),
    };
    Ok(match &a.result_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("--result-dir {dir}"))?;
            Path::new(dir).join(name)
        }
        None => PathBuf::from(name),
    })
}

/// `GET /v1/models`: (id, root) of the first model.
async fn first_model(client: &HttpClient, base_url: &str, headers: &[(String, String)]) -> Result<(String, String)> {
    let url = format!("{base_url}/v1/models");
    let help = |e: String| {
        anyhow!(
            "Failed to fetch models from server at {url}. Check that:\n1. The server is running\n2. The server URL \
             is correct\nError: {e}"
        )
    };
    let (status, body) = client.send(Method::GET, &url, &with_api_key(headers), None).await.map_err(help)?;
    if status != 200 {
        return Err(help(format!("HTTP {status}: {}", String::from_utf8_lossy(&body))));
    }
    let v: Value = serde_json::from_slice(&body).map_err(|e| help(e.to_string()))?;
    let first = v["data"].get(0).ok_or_else(|| {
        anyhow!("No models found on the server at {base_url}. Make sure the server is running and has models loaded.")
    })?;
    let id = first["id"].as_str().unwrap_or_default().to_string();
    let root = first["root"].as_str().map(str::to_string).unwrap_or_else(|| id.clone());
    Ok((id, root))
}

fn with_api_key(headers: &[(String, String)]) -> Vec<(String, String)> {
    let mut h = Vec::new();
    if let Ok(key) = std::env::var("OPENAI_API_KEY")
        && !key.is_empty()
    {
        h.push(("Authorization".to_string(), format!("Bearer {key}")));
    }
    h.extend(headers.iter().cloned());
    h
}

/// vLLM's `_align_prompts_to_server_tokenizer`: when the server's `/tokenize` counts the first
/// prompt differently, each prompt longer on the server is cut to its length there (via
/// `/detokenize`). Servers without `/tokenize` are left alone.
async fn align_prompts(
    client: &HttpClient,
    base_url: &str,
    model_id: &str,
    headers: &[(String, String)],
    requests: Vec<SampleRequest>,
) -> Vec<SampleRequest> {
    let Some(first) = requests.first() else { return requests };
    let headers = with_api_key(headers);
    let tokenize = |prompt: String| {
        let headers = headers.clone();
        let url = format!("{base_url}/tokenize");
        let body = json!({"model": model_id, "prompt": prompt, "add_special_tokens": false});
        async move {
            let (status, bytes) = client.send(Method::POST, &url, &headers, Some(&body)).await.map_err(|e| (0, e))?;
            if status != 200 {
                return Err((status, format!("HTTP {status}")));
            }
            let v: Value = serde_json::from_slice(&bytes).map_err(|e| (status, e.to_string()))?;
            Ok::<usize, (u16, String)>(v["tokens"].as_array().map_or(0, |t| t.len()))
        }
    };
    let n = match tokenize(first.prompt.clone()).await {
        Ok(n) => n,
        Err((0, e)) => {
            println!("WARNING: {base_url} unreachable ({e}), skipping alignment.");
            return requests;
        }
        Err((404, _)) => {
            println!(
                "WARNING: /tokenize unavailable (404 Not Found: either this server has no /tokenize route, or it \
                 does not serve a model named `{model_id}` (its served names are listed by GET /v1/models)), \
                 skipping alignment."
            );
            return requests;
        }
        Err((_, e)) => {
            println!("WARNING: /tokenize unavailable ({e}), skipping alignment.");
            return requests;
        }
    };
    if n == first.prompt_len {
        return requests;
    }
    println!("WARNING: tokenizer mismatch (server={n}, expected={}), re-aligning prompts.", first.prompt_len);
    let mut out = Vec::with_capacity(requests.len());
    for r in requests {
        let fixed = async {
            let body = json!({"model": model_id, "prompt": r.prompt, "add_special_tokens": false});
            let url = format!("{base_url}/tokenize");
            let (_, bytes) = client.send(Method::POST, &url, &headers, Some(&body)).await.ok()?;
            let v: Value = serde_json::from_slice(&bytes).ok()?;
            let tokens = v["tokens"].as_array()?;
            if tokens.len() <= r.prompt_len {
                return None;
            }
            let body = json!({"model": model_id, "tokens": tokens[..r.prompt_len]});
            let url = format!("{base_url}/detokenize");
            let (status, bytes) = client.send(Method::POST, &url, &headers, Some(&body)).await.ok()?;
            if status != 200 {
                return None;
            }
            let v: Value = serde_json::from_slice(&bytes).ok()?;
            v["prompt"].as_str().map(str::to_string)
        }
        .await;
        out.push(match fixed {
            Some(prompt) => SampleRequest { prompt, ..r },
            None => r,
        });
    }
    out
}

struct Plan<'a> {
    client: &'a HttpClient,
    api_url: &'a str,
    /// The `model` field of requests.
    model: String,
    requests: &'a [SampleRequest],
    extra_body: Map<String, Value>,
    headers: &'a [(String, String)],
    ramp: Option<Ramp>,
    legacy_seed: u32,
    args: &'a ServeArgs,
}

struct RunResult {
    outputs: Vec<RequestOutput>,
    duration: f64,
    rps_change_events: Vec<Value>,
}

impl Plan<'_> {
    fn input(&self, r: &SampleRequest, with_id: bool) -> RequestInput {
        RequestInput {
            backend: self.args.backend,
            api_url: self.api_url.to_string(),
            prompt: r.prompt.clone(),
            prompt_len: r.prompt_len,
            output_len: r.expected_output_len,
            model: self.model.clone(),
            logprobs: self.args.logprobs,
            ignore_eos: self.args.ignore_eos,
            extra_body: self.extra_body.clone(),
            extra_headers: self.headers.to_vec(),
            request_id: with_id.then(|| r.request_id.clone()),
        }
    }

    /// vLLM's `benchmark()`: optional ready check and warm-up, then every request at its arrival
    /// time, at most `--max-concurrency` at once.
    async fn run(&self) -> Result<RunResult> {
        let a = self.args;
        let test_input = self.input(&self.requests[0], false);
        println!("Starting initial single prompt test run...");
        if a.ready_check_timeout_sec > 0 {
            let out = self.wait_ready(&test_input, a.ready_check_timeout_sec).await;
            if !out.success {
                bail!(
                    "Initial test run failed - Please make sure benchmark arguments are correctly specified. Error: {}",
                    out.error
                );
            }
            println!("Initial test run completed.");
        } else {
            println!("Skipping endpoint ready check.");
        }
        let semaphore = a.max_concurrency.map(|c| Arc::new(Semaphore::new(c)));
        if a.num_warmups > 0 {
            println!("Warming up with {} requests...", a.num_warmups);
            let tasks: Vec<_> = (0..a.num_warmups)
                .map(|_| {
                    let (client, input, sem) = (self.client.clone(), test_input.clone(), semaphore.clone());
                    tokio::spawn(async move {
                        let _permit = match &sem {
                            Some(s) => Some(s.clone().acquire_owned().await),
                            None => None,
                        };
                        client.generate(&input, || {}).await
                    })
                })
                .collect();
            for t in tasks {
                t.await?;
            }
            println!("Warmup run completed.");
        }
        println!("Starting main benchmark run...");
        match &self.ramp {
            Some(r) => {
                let s = if r.strategy == RampUp::Linear { "linear" } else { "exponential" };
                println!("Traffic ramp-up strategy: {s}.");
                println!(
                    "Will increase RPS from {} to {} RPS over the duration of the benchmark.",
                    r.start_rps, r.end_rps
                );
            }
            None => println!("Traffic request rate: {}", py_float(a.request_rate)),
        }
        let dist = if a.burstiness == 1.0 { "Poisson process" } else { "Gamma distribution" };
        println!("Burstiness factor: {} ({dist})", py_float(a.burstiness));
        match a.max_concurrency {
            Some(c) => println!("Maximum request concurrency: {c}"),
            None => println!("Maximum request concurrency: None"),
        }

        let n = self.requests.len();
        let (times, rates) =
            schedule::arrival_times(n, a.request_rate, a.burstiness, self.ramp.as_ref(), self.legacy_seed);
        let bar = if a.disable_tqdm { ProgressBar::hidden() } else { ProgressBar::new(n as u64) };
        bar.set_style(
            ProgressStyle::with_template("{percent:>3}%|{wide_bar}| {pos}/{len} [{elapsed_precise}<{eta_precise}]")
                .expect("progress template"),
        );
        let mut rps_change_events = Vec::new();
        let mut last_int_rps: i64 = -1;
        if let Some(r) = &self.ramp {
            last_int_rps = r.start_rps as i64;
            rps_change_events.push(json!({"rps": last_int_rps, "timestamp": report::iso_now()}));
        }

        // Concurrency slots go to requests in arrival order (as asyncio's tasks queue on vLLM's
        // semaphore): one gate task hands out the permits first come, first served.
        let gate = semaphore.map(|sem| {
            let (tx, mut rx) = mpsc::unbounded_channel::<oneshot::Sender<OwnedSemaphorePermit>>();
            tokio::spawn(async move {
                while let Some(waiter) = rx.recv().await {
                    let Ok(permit) = sem.clone().acquire_owned().await else { break };
                    let _ = waiter.send(permit);
                }
            });
            tx
        });

        let t0 = clock();
        let start = tokio::time::Instant::now();
        let mut tasks = Vec::with_capacity(n);
        for (i, r) in self.requests.iter().enumerate() {
            if times[i] > 0.0 {
                tokio::time::sleep_until(start + Duration::from_secs_f64(times[i])).await;
            }
            if self.ramp.is_some() {
                let current = rates[i] as i64;
                if current > last_int_rps {
                    let ts = report::iso_now();
                    for rps in last_int_rps + 1..=current {
                        rps_change_events.push(json!({"rps": rps, "timestamp": ts}));
                    }
                    last_int_rps = current;
                }
            }
            let (client, input, bar) = (self.client.clone(), self.input(r, true), bar.clone());
            let slot = gate.as_ref().map(|g| {
                let (tx, rx) = oneshot::channel();
                let _ = g.send(tx);
                rx
            });
            let arrival = clock();
            tasks.push(tokio::spawn(async move {
                let permit = match slot {
                    Some(rx) => Some(rx.await),
                    None => None,
                };
                let mut out = client.generate(&input, || bar.inc(1)).await;
                drop(permit);
                out.client_queue_time = out.start_time - arrival;
                out
            }));
        }
        let mut outputs = Vec::with_capacity(n);
        for t in tasks {
            outputs.push(t.await?);
        }
        let duration = clock() - t0;
        bar.finish_and_clear();
        Ok(RunResult { outputs, duration, rps_change_events })
    }

    /// vLLM's `wait_for_endpoint`: the first prompt until it succeeds, every 5 s, up to `timeout` s.
    async fn wait_ready(&self, input: &RequestInput, timeout: u64) -> RequestOutput {
        println!("Waiting for endpoint to become up in {timeout} seconds");
        let deadline = clock() + timeout as f64;
        loop {
            let out = self.client.generate(input, || {}).await;
            if out.success {
                return out;
            }
            let last = out.error.trim_end().rsplit('\n').next().unwrap_or("").to_string();
            tracing::warn!("Endpoint is not ready. Error='{last}'");
            let remaining = deadline - clock();
            if remaining <= 0.0 {
                return out;
            }
            tokio::time::sleep(Duration::from_secs_f64(remaining.min(5.0))).await;
        }
    }
}
