//! `vllm-rs bench serve` flags: vLLM's `vllm bench serve` names and defaults.

use super::client::Backend;
use clap::{Args, ValueEnum};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DatasetName {
    /// Synthetic prompts of random tokens (`--random-*`).
    Random,
    /// A ShareGPT-style JSON file (`--dataset-path`): `[{"conversations": [{"value": prompt}, {"value": reply}]}]`.
    Sharegpt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RampUp {
    Linear,
    Exponential,
}

#[derive(Args, Clone, Debug)]
#[command(
    about = "Load-test an OpenAI-compatible server (like `vllm bench serve`)",
    after_help = "Examples:\n  vllm-rs bench serve --base-url http://127.0.0.1:8000 --model smollm2 \\\n    \
                  --dataset-name random --random-input-len 128 --random-output-len 128 \\\n    \
                  --num-prompts 32 --max-concurrency 8 --percentile-metrics ttft,tpot,itl,e2el \\\n    \
                  --metric-percentiles 50,99 --save-result --result-dir results\n  \
                  vllm-rs bench serve --backend openai-chat --endpoint /v1/chat/completions \\\n    \
                  --dataset-name sharegpt --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json \\\n    \
                  --request-rate 4 --num-prompts 200"
)]
pub struct ServeArgs {
    /// The API the requests go to.
    #[arg(long, value_enum, default_value = "openai")]
    pub backend: Backend,
    /// Prefix of the result file name (default: the backend).
    #[arg(long)]
    pub label: Option<String>,
    /// Server or API base URL (instead of --host and --port), e.g. http://127.0.0.1:8000.
    #[arg(long)]
    pub base_url: Option<String>,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// API endpoint, appended to the base URL.
    #[arg(long, default_value = "/v1/completions")]
    pub endpoint: String,
    /// Extra request headers, KEY=VALUE.
    #[arg(long, num_args = 0.., value_name = "KEY=VALUE")]
    pub header: Vec<String>,
    /// At most this many requests in flight (default: no limit).
    #[arg(long)]
    pub max_concurrency: Option<usize>,

    /// Model name sent in requests (default: the first model of the server's /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    /// Name used in the requests' `model` field when it differs from --model.
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Tokenizer for the prompts and for counting tokens: an HF directory, a .gguf file, a catalog
    /// name or an HF repo id (default: --model, or the server's model root).
    #[arg(long)]
    pub tokenizer: Option<String>,
    /// Don't load a tokenizer (token counts and TTFT/TPOT/ITL are then not reported).
    #[arg(long)]
    pub skip_tokenizer_init: bool,
    /// Sets --random-input-len.
    #[arg(long)]
    pub input_len: Option<usize>,
    /// Sets --random-output-len / --sharegpt-output-len.
    #[arg(long)]
    pub output_len: Option<usize>,
    /// Log probabilities per token to request.
    #[arg(long)]
    pub logprobs: Option<i64>,

    /// Requests per second (Poisson arrivals when --burstiness is 1); inf sends all at once.
    #[arg(long, default_value = "inf")]
    pub request_rate: f64,
    /// Gamma-distributed arrivals: < 1 burstier, > 1 more uniform than Poisson.
    #[arg(long, default_value_t = 1.0)]
    pub burstiness: f64,
    /// Raise the request rate over the run from --ramp-up-start-rps to --ramp-up-end-rps.
    #[arg(long, value_enum)]
    pub ramp_up_strategy: Option<RampUp>,
    #[arg(long)]
    pub ramp_up_start_rps: Option<u32>,
    #[arg(long)]
    pub ramp_up_end_rps: Option<u32>,
    /// Warm-up requests (the first prompt) before the measured run.
    #[arg(long, default_value_t = 0)]
    pub num_warmups: usize,
    /// Retry the first prompt for up to this many seconds until the server answers (0: don't).
    #[arg(long, default_value_t = 0)]
    pub ready_check_timeout_sec: u64,
    /// Set `ignore_eos` in requests (always on for the random dataset, as in vLLM).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Prefix of the `x-request-id` of each request (default: bench-<8 hex>-).
    #[arg(long)]
    pub request_id_prefix: Option<String>,
    /// JSON merged into every request body, e.g. '{"temperature": 0}'.
    #[arg(long)]
    pub extra_body: Option<String>,
    #[arg(long, help_heading = "Sampling parameters")]
    pub top_p: Option<f64>,
    #[arg(long, help_heading = "Sampling parameters")]
    pub top_k: Option<i64>,
    #[arg(long, help_heading = "Sampling parameters")]
    pub min_p: Option<f64>,
    #[arg(long, help_heading = "Sampling parameters")]
    pub temperature: Option<f64>,
    #[arg(long, help_heading = "Sampling parameters")]
    pub frequency_penalty: Option<f64>,
    #[arg(long, help_heading = "Sampling parameters")]
    pub presence_penalty: Option<f64>,
    #[arg(long, help_heading = "Sampling parameters")]
    pub repetition_penalty: Option<f64>,

    /// Metrics to report percentiles of: ttft, tpot, itl, e2el, client_queue_time,
    /// e2el_including_client_queue (default: ttft,tpot,itl).
    #[arg(long)]
    pub percentile_metrics: Option<String>,
    /// Percentiles to report, comma separated.
    #[arg(long, default_value = "99")]
    pub metric_percentiles: String,
    /// Service level objectives for goodput, KEY:VALUE in ms (ttft, tpot, e2el).
    #[arg(long, num_args = 1.., value_name = "KEY:VALUE")]
    pub goodput: Vec<String>,
    /// Don't show the progress bar.
    #[arg(long)]
    pub disable_tqdm: bool,

    /// Save the results to a JSON file.
    #[arg(long)]
    pub save_result: bool,
    /// Also save per-request data (lengths, TTFTs, ITLs, texts, errors).
    #[arg(long)]
    pub save_detailed: bool,
    /// Append the result to the file as one more JSON line.
    #[arg(long)]
    pub append_result: bool,
    /// KEY=VALUE pairs recorded in the result JSON.
    #[arg(long, num_args = 0.., value_name = "KEY=VALUE")]
    pub metadata: Vec<String>,
    /// Directory of the result file (default: the current directory).
    #[arg(long)]
    pub result_dir: Option<String>,
    /// Result file name (default: {label}-{request_rate}qps[-concurrency{n}]-{model}-{date}.json).
    #[arg(long)]
    pub result_filename: Option<String>,

    #[arg(long, default_value_t = 0, help_heading = "Dataset")]
    pub seed: u64,
    #[arg(long, default_value_t = 1000, help_heading = "Dataset")]
    pub num_prompts: usize,
    #[arg(long, value_enum, default_value = "random", help_heading = "Dataset")]
    pub dataset_name: DatasetName,
    /// The ShareGPT JSON file.
    #[arg(long, help_heading = "Dataset")]
    pub dataset_path: Option<String>,
    /// Don't repeat samples when the file has fewer than --num-prompts.
    #[arg(long, help_heading = "Dataset")]
    pub no_oversample: bool,
    /// Keep the file's order.
    #[arg(long, help_heading = "Dataset")]
    pub disable_shuffle: bool,
    /// Output length of every ShareGPT request (default: the reply's length).
    #[arg(long, help_heading = "Dataset")]
    pub sharegpt_output_len: Option<usize>,
    #[arg(long, default_value_t = 1024, help_heading = "Dataset")]
    pub random_input_len: usize,
    #[arg(long, default_value_t = 128, help_heading = "Dataset")]
    pub random_output_len: usize,
    /// Lengths drawn from [len·(1−r), len·(1+r)]; a number or '{"input": r1, "output": r2}'.
    #[arg(long, default_value = "0.0", help_heading = "Dataset")]
    pub random_range_ratio: String,
    /// Tokens of one random prefix shared by all prompts.
    #[arg(long, default_value_t = 0, help_heading = "Dataset")]
    pub random_prefix_len: usize,
    /// Accepted for compatibility with vLLM's command line; has no effect.
    #[arg(long, hide = true)]
    pub trust_remote_code: bool,
}
