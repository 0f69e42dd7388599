//! The rest of vLLM 0.33's `vllm serve` flags: those this server has no option of its own for.
//! Each is taken off the command line before it is parsed and is either accepted with one log
//! line saying what it means here, accepted only at the value that means "one process on one
//! machine", or refused with a message saying why. A few are spellings of our own options and
//! are rewritten to them (`-sc`, `--device-memory-utilization`, `--kv-cache-memory-bytes`, and
//! `--spec-method`/`--spec-model`/`--spec-tokens`, vLLM's shorthand for `--speculative-config`).
//! The list is vLLM 0.33's parser (`EngineArgs.add_cli_args` and the frontend's arguments) less
//! the flags `vllm-rs serve --help` has.

use anyhow::{Result, bail};
use std::ffi::OsString;

/// What follows the flag on the command line.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Takes {
    /// A switch (with vLLM's `--no-` form where its default is on).
    Nothing,
    One,
    /// One or more values (vLLM's `nargs="+"`).
    Many,
}

#[derive(Clone, Copy, Debug)]
enum Verdict {
    /// Accepted; the note says what it means here.
    Ignored(&'static str),
    /// Accepted at this value only (what one process on one machine is); refused otherwise.
    OnlyAt(&'static str, &'static str),
    Refused(&'static str),
}

use Takes::{Many, Nothing, One};
use Verdict::{Ignored, OnlyAt, Refused};

const GPU: &str = "a GPU setting; there is nothing to change on the CPU";
const ONE_PROCESS: &str =
    "one process serves the model on one machine here; run several replicas behind a load balancer";
const EXPERTS: &str = "one process holds every expert here; there is nothing to place or balance";
const MEDIA: &str = "image, video and audio inputs are not supported (they are refused with a 400)";
const LORA: &str = "LoRA adapters are not supported (see --enable-lora); nothing to configure";
const NOT_LOGGED: &str = "requests and their outputs are not logged one by one";
const NOT_COLLECTED: &str = "not collected here; /metrics has vLLM's standard metrics";
const PYTHON: &str = "it names Python code (a class, a plugin or a middleware); none can run here";
const SCHEDULER: &str = "not a setting of this scheduler; vLLM's default behaviour applies";
const LOADING: &str = "weights are memory-mapped from their files; there is nothing to tune";
const TLS: &str = "TLS is not built in; terminate TLS in a reverse proxy (nginx, Caddy, an ingress)";
const DISAGGREGATED: &str = "disaggregated serving (transfers between instances) is not supported";
const KERNELS: &str = "the CPU kernels are chosen at start-up from the CPU's features; there is no other backend";
const SLEEP: &str = "sleep mode is not supported: the model's memory is not released while serving";

/// vLLM's flags, by their names (long, then short), with what they take and what they get.
const FLAGS: &[(&[&str], Takes, Verdict)] = &[
    // Parallelism and distribution.
    (&["--data-parallel-size-local", "-dpl"], One, OnlyAt("1", ONE_PROCESS)),
    (&["--data-parallel-rank", "-dpn"], One, OnlyAt("0", ONE_PROCESS)),
    (&["--data-parallel-start-rank", "-dpr"], One, OnlyAt("0", ONE_PROCESS)),
    (&["--data-parallel-address", "-dpa"], One, Ignored(ONE_PROCESS)),
    (&["--data-parallel-rpc-port", "-dpp"], One, Ignored(ONE_PROCESS)),
    (&["--data-parallel-backend", "-dpb"], One, Ignored(ONE_PROCESS)),
    (&["--data-parallel-external-lb", "-dpe"], Nothing, Ignored(ONE_PROCESS)),
    (&["--data-parallel-hybrid-lb", "-dph"], Nothing, Ignored(ONE_PROCESS)),
    (&["--data-parallel-multi-port-external-lb", "-dpm"], Nothing, Ignored(ONE_PROCESS)),
    (&["--data-parallel-supervisor-port"], One, Ignored(ONE_PROCESS)),
    (&["--dp-supervisor-probe-failure-threshold"], One, Ignored(ONE_PROCESS)),
    (&["--dp-supervisor-probe-interval-s"], One, Ignored(ONE_PROCESS)),
    (&["--dp-supervisor-probe-timeout-s"], One, Ignored(ONE_PROCESS)),
    (&["--dp-sync-interval"], One, Ignored(ONE_PROCESS)),
    (&["--disable-nccl-for-dp-synchronization"], Nothing, Ignored(ONE_PROCESS)),
    (&["--decode-context-parallel-size", "-dcp"], One, OnlyAt("1", ONE_PROCESS)),
    (&["--prefill-context-parallel-size", "-pcp"], One, OnlyAt("1", ONE_PROCESS)),
    (&["--dcp-comm-backend"], One, Ignored(ONE_PROCESS)),
    (&["--dcp-kv-cache-interleave-size"], One, Ignored(ONE_PROCESS)),
    (&["--cp-kv-cache-interleave-size"], One, Ignored(ONE_PROCESS)),
    (&["--dcp-q-replicate"], Nothing, Ignored(ONE_PROCESS)),
    (&["--nnodes", "-n"], One, OnlyAt("1", ONE_PROCESS)),
    (&["--node-rank", "-r"], One, OnlyAt("0", ONE_PROCESS)),
    (&["--api-server-count", "-asc"], One, OnlyAt("1", ONE_PROCESS)),
    (&["--headless"], Nothing, Refused("there is no engine-only mode: the engine and its HTTP server are one process")),
    (&["--distributed-executor-backend"], One, Ignored(ONE_PROCESS)),
    (&["--distributed-timeout-seconds"], One, Ignored(ONE_PROCESS)),
    (&["--cpu-distributed-timeout-seconds"], One, Ignored(ONE_PROCESS)),
    (&["--master-addr"], One, Ignored(ONE_PROCESS)),
    (&["--master-port"], One, Ignored(ONE_PROCESS)),
    (&["--disable-custom-all-reduce"], Nothing, Ignored(ONE_PROCESS)),
    (&["--ray-workers-use-nsight"], Nothing, Ignored(ONE_PROCESS)),
    (&["--enable-scale-out"], Nothing, Ignored(ONE_PROCESS)),
    (&["--enable-hc-sp"], Nothing, Ignored(ONE_PROCESS)),
    (&["--enable-fault-tolerance"], Nothing, Ignored(ONE_PROCESS)),
    (&["--fault-tolerance-config"], One, Ignored(ONE_PROCESS)),
    (&["--device-ids"], Many, Ignored("the CPU is the one device here")),
    (&["--numa-bind"], Nothing, Ignored("threads are not pinned to NUMA nodes here")),
    (&["--numa-bind-cpus"], Many, Ignored("threads are not pinned to NUMA nodes here")),
    (&["--numa-bind-nodes"], Many, Ignored("threads are not pinned to NUMA nodes here")),
    // Experts.
    (&["--enable-expert-parallel", "-ep"], Nothing, Ignored(EXPERTS)),
    (&["--enable-eplb"], Nothing, Ignored(EXPERTS)),
    (&["--eplb-config"], One, Ignored(EXPERTS)),
    (&["--expert-placement-strategy"], One, Ignored(EXPERTS)),
    (&["--enable-ep-weight-filter"], Nothing, Ignored(EXPERTS)),
    (&["--enable-elastic-ep"], Nothing, Ignored(EXPERTS)),
    (&["--elastic-ep-max-dp-size"], One, Ignored(EXPERTS)),
    (&["--all2all-backend"], One, Ignored(EXPERTS)),
    (&["--enable-return-routed-experts"], Nothing, Refused("responses do not report routed experts")),
    // GPU mechanisms and kernel backends.
    (&["--compilation-config", "-cc"], One, Ignored(GPU)),
    (&["--cudagraph-capture-sizes"], Many, Ignored(GPU)),
    (&["--max-cudagraph-capture-size"], One, Ignored(GPU)),
    (&["--cudagraph-metrics"], Nothing, Ignored(GPU)),
    (&["--enable-cumem-allocator"], Nothing, Ignored(GPU)),
    (&["--enable-nccl-comm-suspend"], Nothing, Ignored(GPU)),
    (&["--enable-shm-tensor-arena"], Nothing, Ignored(GPU)),
    (&["--enable-layerwise-nvtx-tracing"], Nothing, Ignored(GPU)),
    (&["--enable-flashinfer-autotune"], Nothing, Ignored(GPU)),
    (&["--enable-flash-late-interaction"], Nothing, Ignored(GPU)),
    (&["--disable-cascade-attn"], Nothing, Ignored(GPU)),
    (&["--enable-dbo"], Nothing, Ignored(GPU)),
    (&["--dbo-decode-token-threshold"], One, Ignored(GPU)),
    (&["--dbo-prefill-token-threshold"], One, Ignored(GPU)),
    (&["--ubatch-size"], One, Ignored(GPU)),
    (&["--monokernel"], Nothing, Ignored(GPU)),
    (&["--optimization-level"], One, Ignored(GPU)),
    (&["--performance-mode"], One, Ignored(GPU)),
    (&["--jit-monitor-mode"], One, Ignored(GPU)),
    (&["--jit-monitor-verbose"], Nothing, Ignored(GPU)),
    (&["--ir-op-priority"], One, Ignored(KERNELS)),
    (&["--kernel-config"], One, Ignored(KERNELS)),
    (&["--attention-backend"], One, Ignored(KERNELS)),
    (&["--attention-config", "-ac"], One, Ignored(KERNELS)),
    (&["--linear-backend"], One, Ignored(KERNELS)),
    (&["--moe-backend"], One, Ignored(KERNELS)),
    (&["--mamba-backend"], One, Ignored(KERNELS)),
    (&["--mamba-ssu-algorithm"], One, Ignored(KERNELS)),
    (&["--gdn-prefill-backend"], One, Ignored(KERNELS)),
    (&["--kda-decode-backend"], One, Ignored(KERNELS)),
    (&["--kda-prefill-backend"], One, Ignored(KERNELS)),
    (&["--sparse-indexer-topk-backend"], One, Ignored(KERNELS)),
    (&["--enable-batch-sharded-sampling"], Nothing, Ignored(KERNELS)),
    (&["--use-fp64-gumbel"], Nothing, Ignored("the sampler draws from its own seeded generator")),
    // Memory, offloading, sleep.
    (&["--cpu-offload-gb"], One, Ignored("the weights are in CPU memory already")),
    (&["--cpu-offload-params"], One, Ignored("the weights are in CPU memory already")),
    (&["--offload-backend"], One, Ignored("the weights are in CPU memory already")),
    (&["--offload-group-size"], One, Ignored("the weights are in CPU memory already")),
    (&["--offload-num-in-group"], One, Ignored("the weights are in CPU memory already")),
    (&["--offload-params"], One, Ignored("the weights are in CPU memory already")),
    (&["--offload-prefetch-step"], One, Ignored("the weights are in CPU memory already")),
    (&["--kv-offloading-backend"], One, Ignored("the KV cache is in CPU memory already")),
    (&["--kv-offloading-size"], One, Ignored("the KV cache is in CPU memory already")),
    (&["--enable-sleep-mode"], Nothing, Refused(SLEEP)),
    (&["--sleep-mode-backend"], One, Ignored(SLEEP)),
    (&["--sleep-mode-offload-cudagraph"], Nothing, Ignored(SLEEP)),
    (&["--sleep-preserve-parameter-names"], Many, Ignored(SLEEP)),
    (&["--kv-sharing-fast-prefill"], Nothing, Ignored("layers do not share KV caches here; prefill is unchanged")),
    (&["--kv-cache-dtype-skip-layers"], Many, Ignored("every layer's cache has the --kv-cache-dtype")),
    // Recurrent (Mamba / delta-net) state.
    (&["--enable-mamba-cache-stochastic-rounding"], Nothing, Ignored("recurrent states are kept in float32")),
    (&["--mamba-cache-philox-rounds"], One, Ignored("recurrent states are kept in float32")),
    (
        &["--enable-mamba-shared-prefix-checkpoint"],
        Nothing,
        Ignored("recurrent states are saved for prefix caching anyway (--mamba-cache-mode)"),
    ),
    (&["--use-replayssm"], Nothing, Ignored("recurrent states are saved, not replayed")),
    (&["--replayssm-buffer-len"], One, Ignored("recurrent states are saved, not replayed")),
    (&["--swa-bounded-replay"], Nothing, Ignored("recurrent states are saved, not replayed")),
    // Loading.
    (&["--safetensors-load-strategy"], One, Ignored(LOADING)),
    (&["--safetensors-prefetch-block-size"], One, Ignored(LOADING)),
    (&["--safetensors-prefetch-num-threads"], One, Ignored(LOADING)),
    (&["--max-parallel-loading-workers"], One, Ignored(LOADING)),
    (&["--pt-load-map-location"], One, Ignored(LOADING)),
    (&["--use-tqdm-on-load"], Nothing, Ignored("loading shows its own progress bar")),
    (&["--model-loader-extra-config"], One, Ignored(LOADING)),
    (&["--ignore-patterns"], Many, Ignored("only the files the model needs are read")),
    (&["--allow-deprecated-quantization"], Nothing, Ignored("GGUF quantizations are read; none is deprecated")),
    (&["--code-revision"], One, Ignored("no model code is downloaded or run")),
    (&["--tokenizer-revision"], One, Ignored("the tokenizer comes with the model's --revision, or from --tokenizer")),
    (
        &["--config-format"],
        One,
        OnlyAt("auto", "only Hugging Face config.json (auto, as hf) and GGUF metadata are read"),
    ),
    (&["--model-impl"], One, OnlyAt("auto", "every model runs on this server's own implementation (auto)")),
    (&["--hf-config-path"], One, Refused("the config is read from the model's own folder or GGUF file")),
    (&["--hf-overrides"], One, Refused("the model's config cannot be overridden")),
    (&["--model-class-overrides"], One, Refused(PYTHON)),
    (&["--quantization-config"], One, Refused("only GGUF quantizations are read (see --quantization)")),
    (&["--skip-tokenizer-init"], Nothing, Refused("a tokenizer is needed: requests are text or token ids both")),
    (&["--disable-sliding-window"], Nothing, Refused("sliding-window layers always attend within their window")),
    // Scheduling.
    (
        &["--async-scheduling"],
        Nothing,
        Ignored("scheduling is not overlapped with the forward pass yet; outputs are the same"),
    ),
    (&["--long-prefill-token-threshold"], One, Ignored(SCHEDULER)),
    (&["--long-prefill-token-threshold-adaptive"], Nothing, Ignored(SCHEDULER)),
    (&["--max-num-active-seqs"], One, Ignored("--max-num-seqs bounds the running requests")),
    (&["--max-num-scheduled-tokens"], One, Ignored("--max-num-batched-tokens bounds a step's tokens")),
    (&["--max-num-queued-reqs"], One, Ignored("waiting requests are not limited in number here")),
    (&["--max-num-queued-tokens"], One, Ignored("waiting requests are not limited in number here")),
    (&["--prefill-schedule-interval"], One, Ignored(SCHEDULER)),
    (&["--scheduler-reserve-full-isl"], Nothing, Ignored(SCHEDULER)),
    (&["--stream-interval"], One, Ignored("streams send each step's tokens as they come")),
    (&["--prefix-caching-hash-algo"], One, Ignored("prefix blocks are keyed by this server's own hash")),
    (&["--prefix-cache-retention-interval"], One, Ignored(SCHEDULER)),
    (&["--prefix-match-unit"], One, Ignored("prefixes are matched in whole blocks (--block-size)")),
    (&["--scheduler-cls"], One, Refused(PYTHON)),
    (&["--worker-cls"], One, Refused(PYTHON)),
    (&["--worker-extension-cls"], One, Refused(PYTHON)),
    (&["--logits-processors"], Many, Refused(PYTHON)),
    (&["--io-processor-plugin"], One, Refused(PYTHON)),
    (&["--middleware"], Many, Refused(PYTHON)),
    // Multimodal inputs.
    (&["--mm-encoder-only"], Nothing, Refused("there is no multimodal encoder to serve alone")),
    (&["--enable-mm-embeds"], Nothing, Refused(MEDIA)),
    (&["--enable-prompt-embeds"], Nothing, Refused("prompts are text or token ids; embeddings are not accepted")),
    (&["--allowed-local-media-path"], One, Ignored(MEDIA)),
    (&["--allowed-media-domains"], Many, Ignored(MEDIA)),
    (&["--media-io-kwargs"], One, Ignored(MEDIA)),
    (&["--mm-processor-kwargs"], One, Ignored(MEDIA)),
    (&["--mm-processor-cache-gb"], One, Ignored(MEDIA)),
    (&["--mm-processor-cache-type"], One, Ignored(MEDIA)),
    (&["--mm-processor-device"], One, Ignored(MEDIA)),
    (&["--mm-shm-cache-max-object-size-mb"], One, Ignored(MEDIA)),
    (&["--mm-encoder-tp-mode"], One, Ignored(MEDIA)),
    (&["--mm-encoder-attn-backend"], One, Ignored(MEDIA)),
    (&["--mm-encoder-attn-dtype"], One, Ignored(MEDIA)),
    (&["--mm-encoder-fp8-scale-path"], One, Ignored(MEDIA)),
    (&["--mm-encoder-fp8-scale-save-path"], One, Ignored(MEDIA)),
    (&["--mm-encoder-fp8-scale-save-margin"], One, Ignored(MEDIA)),
    (&["--mm-hasher-algorithm"], One, Ignored(MEDIA)),
    (&["--mm-ipc-gpu-memory-gb"], One, Ignored(MEDIA)),
    (&["--mm-tensor-ipc"], One, Ignored(MEDIA)),
    (&["--mm-device-do-normalize"], Nothing, Ignored(MEDIA)),
    (&["--interleave-mm-strings"], Nothing, Ignored(MEDIA)),
    (&["--disable-chunked-mm-input"], Nothing, Ignored(MEDIA)),
    (&["--skip-mm-profiling"], Nothing, Ignored(MEDIA)),
    (&["--trust-request-mm-kwargs"], Nothing, Ignored(MEDIA)),
    (&["--video-pruning-method"], One, Ignored(MEDIA)),
    (&["--video-pruning-rate"], One, Ignored(MEDIA)),
    (&["--ec-manager-config"], One, Ignored(MEDIA)),
    (&["--ec-transfer-config"], One, Refused(DISAGGREGATED)),
    (&["--kv-transfer-config"], One, Refused(DISAGGREGATED)),
    (&["--weight-transfer-config"], One, Refused(DISAGGREGATED)),
    (&["--kv-events-config"], One, Refused("KV cache events are not published")),
    // LoRA.
    (&["--max-loras"], One, Ignored(LORA)),
    (&["--max-lora-rank"], One, Ignored(LORA)),
    (&["--max-cpu-loras"], One, Ignored(LORA)),
    (&["--lora-dtype"], One, Ignored(LORA)),
    (&["--lora-target-modules"], Many, Ignored(LORA)),
    (&["--max-lora-cls-labels"], One, Ignored(LORA)),
    (&["--fully-sharded-loras"], Nothing, Ignored(LORA)),
    (&["--specialize-active-lora"], Nothing, Ignored(LORA)),
    (&["--enable-moe-shared-loras"], Nothing, Ignored(LORA)),
    (&["--enable-mixed-moe-lora-format"], Nothing, Ignored(LORA)),
    (&["--enable-tower-connector-lora"], Nothing, Ignored(LORA)),
    (&["--default-mm-loras"], One, Ignored(LORA)),
    // Logging, metrics, tracing.
    (&["--aggregate-engine-logging"], Nothing, Ignored("there is one engine to log")),
    (&["--enable-logging-iteration-details"], Nothing, Ignored(NOT_LOGGED)),
    (&["--enable-log-outputs"], Nothing, Ignored(NOT_LOGGED)),
    (&["--enable-log-deltas"], Nothing, Ignored(NOT_LOGGED)),
    (&["--max-log-len"], One, Ignored(NOT_LOGGED)),
    (&["--log-error-stack"], Nothing, Ignored("errors are logged with their causes")),
    (&["--disable-uvicorn-access-log"], Nothing, Ignored("requests are not written to an access log")),
    (&["--disable-access-log-for-endpoints"], One, Ignored("requests are not written to an access log")),
    (&["--log-config-file"], One, Refused("logging is set with --log-level (or RUST_LOG), not a Python logging file")),
    (&["--logging-config"], One, Refused("logging is set with --log-level (or RUST_LOG), not a Python logging file")),
    (&["--kv-cache-metrics"], Nothing, Ignored(NOT_COLLECTED)),
    (&["--kv-cache-metrics-sample"], One, Ignored(NOT_COLLECTED)),
    (&["--enable-mfu-metrics"], Nothing, Ignored(NOT_COLLECTED)),
    (&["--enable-per-request-metrics"], Nothing, Ignored(NOT_COLLECTED)),
    (&["--per-request-spec-decode-metrics"], One, Ignored(NOT_COLLECTED)),
    (&["--show-hidden-metrics-for-version"], One, Ignored("no metric has been hidden yet")),
    (&["--custom-histogram-buckets"], Many, Refused("histogram buckets are vLLM's defaults and cannot be changed")),
    (&["--otlp-traces-endpoint"], One, Refused("OpenTelemetry tracing is not built in")),
    (&["--collect-detailed-traces"], Many, Refused("OpenTelemetry tracing is not built in")),
    (&["--profiler-config"], One, Refused("there is no profiler endpoint; use perf on the process")),
    (&["--enable-trace-replay"], Nothing, Refused("there is no trace recorder")),
    // The HTTP front end.
    (&["--ssl-ca-certs"], One, Refused(TLS)),
    (&["--ssl-cert-reqs"], One, Refused(TLS)),
    (&["--ssl-ciphers"], One, Refused(TLS)),
    (&["--enable-ssl-refresh"], Nothing, Refused(TLS)),
    (&["--uds"], One, Refused("the server listens on TCP only (--host, --port)")),
    (&["--grpc"], Nothing, Refused("there is no gRPC server; the API is HTTP")),
    (&["--grpc-port"], One, Refused("there is no gRPC server; the API is HTTP")),
    (&["--h11-max-header-count"], One, Ignored("header limits are this server's own (see --timeout-keep-alive)")),
    (
        &["--h11-max-incomplete-event-size"],
        One,
        Ignored("header limits are this server's own (see --timeout-keep-alive)"),
    ),
    (&["--renderer-num-workers"], One, Ignored("prompts are rendered on the blocking thread pool")),
    (&["--enable-offline-docs"], Nothing, Ignored("/docs is served from the binary, offline, always")),
    (&["--disable-fastapi-docs"], Nothing, Refused("/docs and /openapi.json are always served; block them in a proxy")),
    (&["--enable-tokenizer-info-endpoint"], Nothing, Refused("there is no /tokenizer_info endpoint")),
    (&["--tokens-only"], Nothing, Refused("there is no token-only front end")),
    (&["--fail-on-environ-validation"], Nothing, Ignored("VLLM_* environment variables are not read here")),
    (&["--additional-config"], One, Ignored("no platform reads additional config here")),
    (&["--engram-config"], One, Refused("the model architectures here have no engram memory")),
    (&["--aux-output-config"], One, Refused("responses carry no auxiliary outputs")),
    (&["--diffusion-config", "-dc"], One, Refused("diffusion models are not supported")),
    (&["--pooler-config"], One, Refused("pooling is read from the model's modules.json (sentence-transformers)")),
    (&["--watchdog-config"], One, Ignored("there is no watchdog process")),
    (&["--fingerprint-mode"], One, Ignored("there is no model fingerprint")),
    (&["--fingerprint-value"], One, Ignored("there is no model fingerprint")),
    // Chat, tools and reasoning.
    (
        &["--default-chat-template-kwargs"],
        One,
        Refused("default chat template arguments are not supported yet; send chat_template_kwargs per request"),
    ),
    (&["--exclude-tools-when-tool-choice-none"], Nothing, Refused("tools are always given to the template")),
    (&["--tool-server"], One, Refused("there are no built-in tools (browser, python) to serve")),
    (&["--tool-strict-level"], One, Ignored("tool_choice required and named calls are held to the tools' schemas")),
    (&["--reasoning-config"], One, Ignored("reasoning is set by --reasoning-parser")),
    (&["--reasoning-effort-map"], One, Ignored("reasoning effort is not mapped to a budget here")),
    (&["--anthropic-disabled-thinking-effort"], One, Ignored("Messages requests' thinking is read as sent")),
    (&["--cohere-format"], One, Ignored("there is no Cohere API here")),
    (&["--cohere-is-reasoning-model"], Nothing, Ignored("there is no Cohere API here")),
    (&["--structured-outputs-config"], One, Ignored("llguidance is the structured-output backend")),
    (&["--return-sampling-mask"], Nothing, Refused("responses carry no sampling masks")),
    (&["--watermark"], One, Refused("watermarking is not supported")),
    (&["--watermark-config"], One, Refused("watermarking is not supported")),
];

/// vLLM spellings of this server's own options.
const RENAMED: &[(&str, &str)] = &[
    ("-sc", "--speculative-config"),
    ("--device-memory-utilization", "--gpu-memory-utilization"),
    ("--kv-cache-memory-bytes", "--kv-cache-memory"),
];

/// vLLM's shorthand flags for `--speculative-config`, and the key each sets.
const SPECULATIVE: &[(&str, &str)] =
    &[("--spec-method", "method"), ("--spec-model", "model"), ("--spec-tokens", "num_speculative_tokens")];

/// Takes vLLM's flags of [`FLAGS`] off a `serve` command line and rewrites [`RENAMED`] and
/// [`SPECULATIVE`] ones; returns the line and the notes to log once logging is set up.
pub fn apply(args: Vec<OsString>) -> Result<(Vec<OsString>, Vec<String>)> {
    let mut out = Vec::with_capacity(args.len());
    let mut notes = Vec::new();
    let mut speculative = serde_json::Map::new();
    let mut it = args.into_iter().peekable();
    while let Some(arg) = it.next() {
        let text = arg.to_string_lossy().into_owned();
        let (name, inline) = text.split_once('=').map_or((text.as_str(), None), |(n, v)| (n, Some(v.to_string())));
        if let Some(&(_, ours)) = RENAMED.iter().find(|(v, _)| *v == name) {
            out.push(OsString::from(match inline {
                Some(v) => format!("{ours}={v}"),
                None => ours.to_string(),
            }));
            continue;
        }
        if let Some(&(_, key)) = SPECULATIVE.iter().find(|(f, _)| *f == name) {
            let v = inline.or_else(|| it.next().map(|v| v.to_string_lossy().into_owned()));
            let v = v.ok_or_else(|| anyhow::anyhow!("{name} needs a value"))?;
            let value = match v.parse::<u64>() {
                Ok(n) if key == "num_speculative_tokens" => serde_json::json!(n),
                _ => serde_json::json!(v),
            };
            speculative.insert(key.to_string(), value);
            continue;
        }
        let negated = name.strip_prefix("--no-").map(|n| format!("--{n}"));
        let found = FLAGS.iter().find(|(names, takes, _)| {
            names.contains(&name) || (*takes == Nothing && negated.as_deref().is_some_and(|n| names.contains(&n)))
        });
        let Some(&(names, takes, verdict)) = found else {
            out.push(arg);
            continue;
        };
        let values = match (takes, inline) {
            (Nothing, _) => Vec::new(),
            (_, Some(v)) => vec![v],
            (One, None) => it.next().map(|v| v.to_string_lossy().into_owned()).into_iter().collect(),
            (Many, None) => {
                let mut vs = Vec::new();
                while let Some(v) = it.next_if(|v| !is_flag(&v.to_string_lossy())) {
                    vs.push(v.to_string_lossy().into_owned());
                }
                vs
            }
        };
        if takes != Nothing && values.is_empty() {
            bail!("{name} needs a value");
        }
        let shown = if values.is_empty() { name.to_string() } else { format!("{name} {}", values.join(" ")) };
        let off = negated.is_some() && takes == Nothing;
        match verdict {
            Ignored(why) => notes.push(format!("{shown}: accepted, {why}")),
            Refused(_) if off => notes.push(format!("{shown}: accepted (off is how it is here)")),
            Refused(why) => bail!("{}: {why}", names[0]),
            OnlyAt(at, _) if values.first().is_some_and(|v| v == at) => {
                notes.push(format!("{shown}: accepted ({at} is how it is here)"))
            }
            OnlyAt(at, why) => bail!("{shown}: only {at} is supported; {why}"),
        }
    }
    if !speculative.is_empty() {
        if out.iter().any(|a| a.to_string_lossy().split('=').next() == Some("--speculative-config")) {
            bail!("--spec-method / --spec-model / --spec-tokens: give these or --speculative-config, not both");
        }
        out.push("--speculative-config".into());
        out.push(serde_json::Value::Object(speculative).to_string().into());
    }
    Ok((out, notes))
}

/// Whether the command line runs `serve` (the one global option, `--log-level`, may come first).
pub fn is_serve(args: &[OsString]) -> bool {
    let mut words = args.iter().skip(1).map(|a| a.to_string_lossy());
    while let Some(w) = words.next() {
        match w.as_ref() {
            "--log-level" => {
                words.next();
            }
            w if w.starts_with("--log-level=") => {}
            w => return w == "serve",
        }
    }
    false
}

/// Whether a command-line word is a flag rather than a value (a negative number is a value).
fn is_flag(s: &str) -> bool {
    s.starts_with('-') && s.len() > 1 && !s[1..].starts_with(|c: char| c.is_ascii_digit() || c == '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str) -> Result<(String, Vec<String>)> {
        let args = line.split(' ').map(OsString::from).collect();
        apply(args).map(|(a, notes)| (a.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" "), notes))
    }

    #[test]
    fn accepted_flags_leave_the_line_with_a_note() {
        let (line, notes) =
            run("vllm-rs serve m --compilation-config {\"level\":3} --enable-expert-parallel --no-async-scheduling \
             --cudagraph-capture-sizes 1 2 4 --port 8000 -cc=3 --nnodes 1")
            .unwrap();
        assert_eq!(line, "vllm-rs serve m --port 8000");
        assert_eq!(notes.len(), 6, "{notes:?}");
        assert!(notes[0].starts_with("--compilation-config {\"level\":3}: accepted, a GPU setting"), "{notes:?}");
        assert!(notes[3].starts_with("--cudagraph-capture-sizes 1 2 4: accepted"), "{notes:?}");
        assert!(notes[5].contains("1 is how it is here"), "{notes:?}");
    }

    #[test]
    fn refused_flags_say_why() {
        let e = run("vllm-rs serve m --kv-transfer-config {}").unwrap_err().to_string();
        assert!(e.contains("--kv-transfer-config: disaggregated serving"), "{e}");
        let e = run("vllm-rs serve m -dcp 2").unwrap_err().to_string();
        assert!(e.contains("-dcp 2: only 1 is supported; one process serves"), "{e}");
        let e = run("vllm-rs serve m --otlp-traces-endpoint").unwrap_err().to_string();
        assert!(e.contains("--otlp-traces-endpoint needs a value"), "{e}");
        // The negative form of a refused switch is how it is here.
        assert!(run("vllm-rs serve m --no-enable-prompt-embeds").is_ok());
        assert!(run("vllm-rs serve m --enable-prompt-embeds").is_err());
    }

    #[test]
    fn vllm_spellings_of_our_options_are_rewritten() {
        let (line, notes) =
            run("vllm-rs serve m -sc {} --kv-cache-memory-bytes=1000 --device-memory-utilization 0.5").unwrap();
        assert_eq!(line, "vllm-rs serve m --speculative-config {} --kv-cache-memory=1000 --gpu-memory-utilization 0.5");
        assert!(notes.is_empty());
        let (line, _) = run("vllm-rs serve m --spec-method ngram --spec-tokens 3").unwrap();
        assert_eq!(line, r#"vllm-rs serve m --speculative-config {"method":"ngram","num_speculative_tokens":3}"#);
        assert!(run("vllm-rs serve m --spec-tokens 3 --speculative-config {}").is_err());
    }

    #[test]
    fn only_serve_command_lines_are_read_as_vllm_serve() {
        let words = |line: &str| line.split(' ').map(OsString::from).collect::<Vec<_>>();
        assert!(is_serve(&words("vllm-rs serve m")));
        assert!(is_serve(&words("vllm-rs --log-level debug serve")));
        assert!(is_serve(&words("vllm-rs --log-level=debug serve")));
        assert!(!is_serve(&words("vllm-rs bench serve")));
        assert!(!is_serve(&words("vllm-rs generate --prompt serve")));
    }

    /// Every flag of vLLM 0.33's `vllm serve` (tests/data/vllm_serve_flags.txt, from
    /// scripts/vllm_serve_flags.py) is an option of ours, one of vLLM's short spellings of ours,
    /// or in the tables here.
    #[test]
    fn every_vllm_serve_flag_is_known() {
        use clap::CommandFactory;
        let cli = crate::Cli::command();
        let serve = cli.find_subcommand("serve").expect("serve");
        let mut ours: Vec<String> = Vec::new();
        // Global options (--log-level) are serve's too.
        let globals = cli.get_arguments().filter(|a| a.is_global_set());
        for a in serve.get_arguments().chain(globals) {
            ours.extend(a.get_long_and_visible_aliases().into_iter().flatten().map(|l| format!("--{l}")));
            ours.extend(a.get_short_and_visible_aliases().into_iter().flatten().map(|c| format!("-{c}")));
        }
        let short_spellings = ["-tp", "-pp", "-dp", "--config"]; // compat::normalize_args
        let list = include_str!("../../../tests/data/vllm_serve_flags.txt");
        let unknown: Vec<&str> = list
            .lines()
            .filter(|f| {
                !ours.iter().any(|o| o == f)
                    && !short_spellings.contains(f)
                    && !FLAGS.iter().any(|(names, _, _)| names.contains(f))
                    && !RENAMED.iter().chain(SPECULATIVE).any(|(n, _)| n == f)
            })
            .collect();
        assert!(unknown.is_empty(), "vLLM flags neither ours nor in the tables: {unknown:?}");
        // And the tables name no option of ours (ours would never be reached).
        for (names, _, _) in FLAGS {
            assert!(!names.iter().any(|n| ours.iter().any(|o| o == n)), "{names:?} is an option of ours");
        }
    }

    #[test]
    fn names_are_unique_and_not_our_own() {
        let mut seen = std::collections::HashSet::new();
        for (names, _, _) in FLAGS {
            for n in *names {
                assert!(seen.insert(*n), "{n} twice");
            }
        }
        for (n, _) in RENAMED.iter().chain(SPECULATIVE) {
            assert!(seen.insert(*n), "{n} twice");
        }
    }
}
