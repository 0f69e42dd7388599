//! From `--model` and engine options to a ready engine: resolve and fetch the model, load the
//! weights, tokenizer, chat template and generation defaults, size the KV cache.

use crate::args::{
    ActivationBitsArg, EngineArgs, KvCacheDtypeArg, LogprobsModeArg, MambaCacheModeArg, PolicyArg, RunnerArg,
};
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tracing::{info, warn};
use vllm_rs_engine::{
    DraftWeights, EngineConfig, EngineCore, KvDtype, LogprobsMode, PoolingLimits, SchedulingPolicy, draft_state_slots,
    kv_blocks_per_request, kv_bytes_per_block, kv_cache_layout,
};
use vllm_rs_frontend::{ChatTemplate, GenerationConfig, Tokenizer};
use vllm_rs_kernels::backend::{Backend, DeviceMemory};
use vllm_rs_models::Backbone;
use vllm_rs_models::draft_head::DraftHead;

/// Everything `serve`, `generate` and `bench` need about the model, plus the engine.
pub struct Loaded {
    /// The `--model` value as given (vLLM's default served model name).
    pub model_arg: String,
    pub tokenizer: Arc<Tokenizer>,
    pub chat_template: Option<Arc<ChatTemplate>>,
    pub generation: Option<GenerationConfig>,
    pub core: EngineCore,
    pub max_logprobs: usize,
    pub default_seed: Option<u64>,
}

/// What `serve` runs: the generating engine, or the pooling runner of an embedding model.
pub enum LoadedRunner {
    Generate(Box<Loaded>),
    Pooling(Box<LoadedPooling>),
}

/// An embedding model ready to spawn, with its tokenizer.
pub struct LoadedPooling {
    pub model_arg: String,
    pub tokenizer: Arc<Tokenizer>,
    pub model: vllm_rs_models::PoolingModel,
    pub limits: PoolingLimits,
}

/// Loads the model for `generate` and `bench`, which need a generative model.
pub fn load(model: Option<&str>, args: &EngineArgs) -> Result<Loaded> {
    match load_any(model, args)? {
        LoadedRunner::Generate(l) => Ok(*l),
        LoadedRunner::Pooling(p) => bail!(
            "{} is an embedding model ({}): serve it with `vllm-rs serve` (/v1/embeddings, /score, /rerank) or \
             embed files with `vllm-rs embed`",
            p.model_arg,
            p.model.info.architecture
        ),
    }
}

/// Applies `--activation-bits`: int8 activations run on the CPU backends only (a GPU's kernels
/// quantize to int16), and pay only where the AVX-512 VNNI tier dots them.
fn set_activation_bits(arg: ActivationBitsArg, backend: &dyn Backend) -> Result<()> {
    use vllm_rs_kernels::quant_act::{ActBits, set_activation_bits};
    if arg == ActivationBitsArg::Sixteen {
        set_activation_bits(ActBits::Int16);
        return Ok(());
    }
    if !backend.name().starts_with("cpu") {
        bail!(
            "--activation-bits 8: int8 activations are a CPU mode; the {} backend computes with 16 (drop the flag, or use --device cpu)",
            backend.name()
        );
    }
    set_activation_bits(ActBits::Int8);
    if backend.int8_activations_pay() {
        info!(
            "--activation-bits 8: quantized weights are dotted with int8 activations (faster, slightly less accurate)"
        );
    } else {
        warn!(
            "--activation-bits 8: this CPU has no AVX-512 VNNI, so int8 activations are no faster here, only less accurate"
        );
    }
    Ok(())
}

/// Loads the model with the runner `--runner` asks for (`auto`: pooling for encoder models).
pub fn load_any(model: Option<&str>, args: &EngineArgs) -> Result<LoadedRunner> {
    let t0 = Instant::now();
    use vllm_rs_kernels::bf16_matmul::{DenseCompute, set_dense_compute};
    match args.dtype.as_str() {
        "auto" | "float32" | "float" => set_dense_compute(DenseCompute::F32),
        "bfloat16" => {
            set_dense_compute(DenseCompute::Bf16);
            info!(
                "--dtype bfloat16: dense weights and activations are rounded to bf16 (f32 accumulation); quantized weights are unaffected"
            )
        }
        "float16" | "half" => {
            set_dense_compute(DenseCompute::F32);
            info!("--dtype {}: computing in float32 (f16 compute is not implemented; bfloat16 is)", args.dtype)
        }
        d => bail!("--dtype {d}: expected auto, float32, bfloat16, float16 or half"),
    }
    args.vllm.check()?;
    if let Some(n) = args.threads {
        if n == 0 {
            bail!("--threads must be at least 1");
        }
        vllm_rs_kernels::pool::init_global(n);
    }
    let tier = vllm_rs_kernels::isa::try_init().map_err(anyhow::Error::msg)?;
    crate::device::select(&args.vllm.device)?;
    let backend = vllm_rs_kernels::backend::default();
    info!("compute: the {} backend, {} threads", backend.name(), vllm_rs_kernels::pool::global().n_threads());
    set_activation_bits(args.activation_bits, backend)?;

    let resolved = resolve(model, args)?;
    info!("model: {}", resolved.description);
    let path = resolved.path.as_path();
    let model_arg = model.unwrap_or(vllm_rs_hub::DEFAULT_MODEL).to_string();
    let encoder = vllm_rs_models::is_encoder(path);
    let runner = match args.convert.as_str() {
        "auto" | "none" => args.runner,
        "embed" if args.runner != RunnerArg::Generate => RunnerArg::Pooling,
        "embed" => bail!("--convert embed makes a pooling model: drop --runner generate"),
        other => bail!("--convert {other} is not supported yet (embed is)"),
    };
    match (runner, encoder) {
        (RunnerArg::Generate, true) => bail!(
            "--runner generate: {model_arg} is an encoder (embedding) model; it cannot generate text (use --runner pooling or auto)"
        ),
        (RunnerArg::Pooling, _) | (RunnerArg::Auto, true) => {
            return load_pooling(path, model_arg, args, t0).map(|p| LoadedRunner::Pooling(Box::new(p)));
        }
        _ => {}
    }
    Ok(LoadedRunner::Generate(Box::new(load_generate(path, model_arg, args, tier, t0)?)))
}

/// The pooling model (an encoder, or a decoder pooled as vLLM's `--runner pooling` converts
/// it), its tokenizer and the pooling runner's limits.
fn load_pooling(path: &Path, model_arg: String, args: &EngineArgs, t0: Instant) -> Result<LoadedPooling> {
    let model = match vllm_rs_models::is_encoder(path) {
        true => vllm_rs_models::load_encoder(path),
        false => vllm_rs_models::load_decoder_for_pooling(path),
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let tokenizer = load_tokenizer(args, path, model.gguf.as_deref())?;
    let info = &model.info;
    // sentence-transformers' max_seq_length caps the model's length, as vLLM reads it.
    let model_len =
        model.pooling.max_seq_length.map_or(info.max_position_embeddings, |m| m.min(info.max_position_embeddings));
    let max_model_len = max_model_len(args, model_len)?;
    let limits = PoolingLimits {
        max_model_len,
        // A decoder keeps a scratch KV cache for the batch: smaller batches by default.
        max_num_batched_tokens: args.max_num_batched_tokens.unwrap_or(match model.backbone {
            Backbone::Encoder(_) => 8192,
            Backbone::Decoder(_) => 2048,
        }),
        max_num_seqs: args.max_num_seqs.max(1),
    };
    info!(
        "embedding model {} ({} pooling{}, {} dimensions, inputs up to {max_model_len} tokens) ready in {:.2} s",
        info.architecture,
        model.pooling.pooling_type.name(),
        if model.pooling.normalize { ", normalized" } else { "" },
        info.hidden_size,
        t0.elapsed().as_secs_f64()
    );
    Ok(LoadedPooling { model_arg, tokenizer, model, limits })
}

fn load_generate(
    path: &Path,
    model_arg: String,
    args: &EngineArgs,
    tier: vllm_rs_kernels::isa::Tier,
    t0: Instant,
) -> Result<Loaded> {
    let lm = vllm_rs_models::load(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    let tokenizer = load_tokenizer(args, path, lm.gguf.as_deref())?;
    let generation = generation_config(&args.generation_config, path, lm.gguf.as_deref())?;
    let chat_template = chat_template(args.chat_template.as_deref(), &tokenizer)?;

    let info = lm.model.info().clone();
    let max_model_len = max_model_len(args, info.max_position_embeddings)?;
    let block_size = args.block_size;
    if !(1..=1024).contains(&block_size) {
        bail!("--block-size must be between 1 and 1024");
    }
    let kv_dtype = match args.kv_cache_dtype {
        KvCacheDtypeArg::Auto | KvCacheDtypeArg::Float32 => KvDtype::F32,
        KvCacheDtypeArg::Float16 => KvDtype::F16,
        KvCacheDtypeArg::Bfloat16 => KvDtype::Bf16,
    };
    let mut cfg = EngineConfig::new(max_model_len, 0);
    cfg.block_size = block_size;
    cfg.kv_cache_dtype = kv_dtype;
    cfg.max_num_seqs = args.max_num_seqs;
    if let Some(n) = args.max_num_batched_tokens {
        cfg.max_num_batched_tokens = n;
    }
    cfg.disable_hybrid_kv_cache_manager = args.disable_hybrid_kv_cache_manager;
    cfg.speculative_config = args.speculative_config.clone();
    let layout = kv_cache_layout(lm.model.as_ref(), block_size, !cfg.disable_hybrid_kv_cache_manager);
    let draft = load_draft(args, path, lm.model.as_ref())?;
    // A drafter keeps its own K/V for every block id the target has.
    let draft_per_block = draft.as_ref().map_or(0, |d| {
        let specs: Vec<_> = d.info().kv_cache_specs.iter().map(|s| s.without_window()).collect();
        kv_bytes_per_block(&vllm_rs_core::KvCacheLayout::new(&specs, block_size), kv_dtype)
    });
    let per_block = kv_bytes_per_block(&layout, kv_dtype) + draft_per_block;
    let per_request = kv_blocks_per_request(&layout, block_size, max_model_len, cfg.max_num_batched_tokens) as u64;
    // Recurrent layers keep a fixed f32 state per running request, whatever its length, and
    // the prefix cache keeps snapshots of such states.
    let state_per_request = (layout.state_elements_per_request() * 4) as u64;
    let snapshots_wanted = args.prefix_caching() && args.mamba_cache_mode != MambaCacheModeArg::None;
    cfg.mamba_block_size = match args.mamba_cache_mode {
        MambaCacheModeArg::All => block_size,
        _ => args.mamba_block_size,
    };
    if cfg.mamba_block_size == 0 || !cfg.mamba_block_size.is_multiple_of(block_size) {
        bail!(
            "--mamba-block-size ({}) must be a positive multiple of --block-size ({block_size})",
            cfg.mamba_block_size
        );
    }
    cfg.num_state_snapshots = 0;
    cfg.num_blocks = match args.num_gpu_blocks_override {
        Some(n) => {
            if state_per_request > 0 && snapshots_wanted {
                info!("--num-gpu-blocks-override sizes no memory for recurrent-state snapshots: no prefix-cache hits");
            }
            n
        }
        None => {
            let share = |f: f64| (available_memory().unwrap_or(4 << 30) as f64 * f) as u64;
            let one = per_block * per_request + state_per_request;
            let bytes = match (args.kv_cache_memory, vllm_rs_kernels::backend::default().device_memory()) {
                (Some(b), _) => b,
                (None, Some(dev)) => device_kv_bytes(dev, args.vllm.gpu_memory_utilization),
                (None, None) => args
                    .vllm
                    .gpu_memory_utilization
                    .map(share)
                    .unwrap_or_else(|| default_kv_bytes(one, args.max_num_seqs)),
            };
            let left = state_budget(&mut cfg, bytes, state_per_request, snapshots_wanted);
            // The states after each draft, for rolling back rejected ones.
            let drafts = draft_state_slots(&cfg) as u64 * state_per_request;
            (left.saturating_sub(drafts) / per_block) as usize
        }
    };
    let num_blocks = cfg.num_blocks;
    info!(
        "KV cache: {num_blocks} blocks of {block_size} tokens in {} group(s) ({:.1} MiB of {}); maximum \
         concurrency for {max_model_len} tokens per request: {:.2}x",
        layout.groups.len(),
        (num_blocks as u64 * per_block) as f64 / (1 << 20) as f64,
        kv_dtype.name(),
        num_blocks as f64 / per_request as f64
    );
    if state_per_request > 0 {
        let drafts = draft_state_slots(&cfg);
        let slots = cfg.max_num_seqs + cfg.num_state_snapshots + drafts;
        info!(
            "recurrent state: {} running-request slots, {} prefix-cache snapshots (every {} tokens, and where \
             prompts end or diverge) and {drafts} for speculative rollback, of {:.2} MiB, {:.1} MiB in all (f32)",
            cfg.max_num_seqs,
            cfg.num_state_snapshots,
            cfg.mamba_block_size,
            state_per_request as f64 / (1 << 20) as f64,
            (slots as u64 * state_per_request) as f64 / (1 << 20) as f64
        );
    }

    if !args.chunked_prefill() && cfg.max_num_batched_tokens < max_model_len {
        bail!(
            "without chunked prefill --max-num-batched-tokens ({}) must be at least --max-model-len ({max_model_len})",
            cfg.max_num_batched_tokens
        );
    }
    cfg.enable_prefix_caching = args.prefix_caching();
    cfg.enable_chunked_prefill = args.chunked_prefill();
    cfg.policy = match args.scheduling_policy {
        PolicyArg::Fcfs => SchedulingPolicy::Fcfs,
        PolicyArg::Priority => SchedulingPolicy::Priority,
    };
    cfg.logprobs_mode = match args.logprobs_mode {
        LogprobsModeArg::RawLogprobs => LogprobsMode::RawLogprobs,
        LogprobsModeArg::RawLogits => LogprobsMode::RawLogits,
        LogprobsModeArg::ProcessedLogprobs => LogprobsMode::ProcessedLogprobs,
        LogprobsModeArg::ProcessedLogits => LogprobsMode::ProcessedLogits,
    };
    cfg.eos_token_id = tokenizer.eos_token_id();
    if let Some(g) = &generation {
        cfg.generation_eos_ids = g.eos_token_ids.clone();
    }
    let core = EngineCore::with_draft(lm.model, draft, cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
    let packed = vllm_rs_kernels::packed::packed_bytes();
    if packed > 0 {
        info!(
            "quantized weights repacked for the {} kernels: {:.0} MiB",
            tier.name(),
            packed as f64 / (1 << 20) as f64
        );
    }
    let bf16 = vllm_rs_kernels::packed_bf16::packed_bf16_bytes();
    if bf16 > 0 {
        let kernel = vllm_rs_kernels::bf16_matmul::Kernel::for_tier(tier);
        info!("dense weights rounded to bf16 for the {kernel:?} kernel: {:.0} MiB", bf16 as f64 / (1 << 20) as f64);
    }
    info!("model ready in {:.2} s", t0.elapsed().as_secs_f64());
    Ok(Loaded {
        model_arg,
        tokenizer,
        chat_template,
        generation,
        core,
        max_logprobs: args.max_logprobs,
        default_seed: args.seed,
    })
}

/// `--tokenizer`, else the model's own (its folder, or the GGUF's metadata).
fn load_tokenizer(
    args: &EngineArgs,
    path: &Path,
    gguf: Option<&vllm_rs_models::gguf::GgufFile>,
) -> Result<Arc<Tokenizer>> {
    let t = match &args.vllm.tokenizer {
        Some(t) => vllm_rs_frontend::load_tokenizer(Path::new(t), None),
        None => vllm_rs_frontend::load_tokenizer(path, gguf),
    };
    Ok(Arc::new(t.map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?))
}

/// `--max-model-len`, at most the model's context length (`model_len`); default: all of it.
fn max_model_len(args: &EngineArgs, model_len: usize) -> Result<usize> {
    match args.max_model_len {
        Some(0) => bail!("--max-model-len must be positive"),
        Some(n) if n > model_len => {
            bail!("--max-model-len {n} is greater than the model's context length ({model_len}); lower it")
        }
        Some(n) => Ok(n),
        None => Ok(model_len),
    }
}

/// The drafter of `--speculative-config`: the draft model (method `draft_model`) or EAGLE
/// head (`eagle`, `eagle3`, for `target`), resolved like `--model`, or the MTP layer (method `mtp`) of
/// its `model` or else of the target's checkpoint (`target_path`).
fn load_draft(
    args: &EngineArgs,
    target_path: &Path,
    target: &dyn vllm_rs_models::Model,
) -> Result<Option<DraftWeights>> {
    let Some(c) = args.speculative_config.as_ref().filter(|c| c.has_weights()) else {
        return Ok(None);
    };
    let resolved = match c.model.as_deref() {
        Some(name) => Some(resolve(Some(name), args).context("--speculative-config model")?),
        None => None,
    };
    if c.is_mtp() {
        let path = resolved.as_ref().map_or(target_path, |r| r.path.as_path());
        let mtp = vllm_rs_models::mtp::load(path).map_err(|e| anyhow::anyhow!("--speculative-config mtp: {e}"))?;
        info!("MTP drafter: {} layer(s) of {}", mtp.info().num_layers, path.display());
        return Ok(Some(DraftWeights::Head(Box::new(mtp))));
    }
    if c.is_eagle() {
        let r = resolved.context("--speculative-config: eagle needs \"model\"")?;
        let head = vllm_rs_models::eagle::load(&r.path, target)
            .map_err(|e| anyhow::anyhow!("--speculative-config eagle: {e}"))?;
        info!("EAGLE drafter: {}, {} layer(s)", r.description, head.info().num_layers);
        return Ok(Some(DraftWeights::Head(Box::new(head))));
    }
    if c.is_eagle3() {
        let r = resolved.context("--speculative-config: eagle3 needs \"model\"")?;
        let head = vllm_rs_models::eagle3::load(&r.path, target)
            .map_err(|e| anyhow::anyhow!("--speculative-config eagle3: {e}"))?;
        info!("EAGLE-3 drafter: {}, reading target layers {:?}", r.description, head.aux_layers());
        return Ok(Some(DraftWeights::Head(Box::new(head))));
    }
    let resolved = resolved.context("--speculative-config: draft_model needs \"model\"")?;
    info!("draft model: {}", resolved.description);
    let lm = vllm_rs_models::load(&resolved.path).map_err(|e| anyhow::anyhow!("draft model: {e}"))?;
    Ok(Some(DraftWeights::Model(lm.model)))
}

/// The model as `--model`, `--revision` and `--download-dir` name it.
fn resolve(model: Option<&str>, args: &EngineArgs) -> Result<vllm_rs_hub::ResolvedModel> {
    let mut config = vllm_rs_hub::HubConfig::from_env();
    if let Some(t) = args.vllm.hf_token.as_deref().filter(|t| !t.is_empty()) {
        config.hf_token = Some(t.to_string());
    }
    if let Some(dir) = &args.vllm.download_dir {
        config.cache_dir = dir.clone();
        config.hf_cache = dir.clone();
    }
    let with_revision = match (model, &args.vllm.revision) {
        (Some(m), Some(r)) if !Path::new(m).exists() && m.contains('/') && !m.contains('@') => Some(format!("{m}@{r}")),
        _ => None,
    };
    vllm_rs_hub::resolve_with(with_revision.as_deref().or(model), &config).map_err(|e| anyhow::anyhow!("{e}"))
}

/// A quarter of the available memory, capped at what `max_num_seqs` full-length requests need,
/// and at least one full-length request (`one`, in bytes).
/// Takes the recurrent states out of the cache's `bytes` and returns what is left for blocks.
/// The states get at most half: those of the running requests (`max_num_seqs` lowered, with a
/// log line, rather than leaving no room for their attention layers) and, with `snapshots`, as
/// many prefix-cache snapshots again.
fn state_budget(cfg: &mut EngineConfig, bytes: u64, state_per_request: u64, snapshots: bool) -> u64 {
    if state_per_request == 0 {
        return bytes;
    }
    let fit = ((bytes / 2) / state_per_request).max(1) as usize;
    let running = if snapshots { (fit / 2).max(1) } else { fit };
    if running < cfg.max_num_seqs {
        info!(
            "recurrent state takes {:.1} MiB per request: --max-num-seqs lowered from {} to {running} so the states \
             fit in half of the KV cache memory",
            state_per_request as f64 / (1 << 20) as f64,
            cfg.max_num_seqs
        );
        cfg.max_num_seqs = running;
    }
    if snapshots {
        cfg.num_state_snapshots = fit.saturating_sub(cfg.max_num_seqs).max(1);
    }
    let states = (cfg.max_num_seqs + cfg.num_state_snapshots) as u64;
    bytes.saturating_sub(states * state_per_request)
}

fn default_kv_bytes(one: u64, max_num_seqs: usize) -> u64 {
    let all = one.saturating_mul(max_num_seqs as u64);
    let quarter = available_memory().map_or(4 << 30, |m| m / 4);
    all.min(quarter).max(one)
}

/// The K/V cache's bytes on a GPU, as vLLM sizes it: `--gpu-memory-utilization` (default 0.9)
/// of the device's memory, less what is in use now (the weights, uploaded at load) and a
/// reserve for a step's activations (1/16 of the device, at most 512 MiB). The CUDA backend
/// still keeps a host copy of the cache, so the host's available memory caps it at 80 %.
fn device_kv_bytes(dev: DeviceMemory, utilization: Option<f64>) -> u64 {
    let f = utilization.unwrap_or(0.9);
    let used = dev.total - dev.free.min(dev.total);
    let reserve = (dev.total / 16).min(512 << 20);
    let budget = ((dev.total as f64 * f) as u64).saturating_sub(used + reserve);
    let host = available_memory().map_or(u64::MAX, |m| m / 5 * 4);
    let mib = |b: u64| format!("{:.1}", b as f64 / (1 << 20) as f64);
    info!(
        "KV cache sized from the GPU's memory: {f} of {} MiB, less {} MiB in use (weights) and {} MiB for \
         activations: {} MiB{}",
        mib(dev.total),
        mib(used),
        mib(reserve),
        mib(budget),
        if host < budget {
            format!("; capped at {} MiB by the host's memory (it holds a copy)", mib(host))
        } else {
            String::new()
        }
    );
    budget.min(host)
}

fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn generation_config(
    arg: &str,
    path: &Path,
    gguf: Option<&vllm_rs_models::gguf::GgufFile>,
) -> Result<Option<GenerationConfig>> {
    Ok(match arg {
        "vllm" => None,
        "auto" => match gguf {
            Some(g) => Some(GenerationConfig::from_gguf(g)?),
            None => GenerationConfig::from_model_dir(path)?,
        },
        dir => Some(
            GenerationConfig::from_model_dir(Path::new(dir))?
                .with_context(|| format!("--generation-config {dir}: no generation_config.json there"))?,
        ),
    })
}

fn chat_template(arg: Option<&str>, tokenizer: &Tokenizer) -> Result<Option<Arc<ChatTemplate>>> {
    let source = match arg {
        Some(a) if Path::new(a).is_file() => {
            Some(std::fs::read_to_string(a).with_context(|| format!("--chat-template {a}: cannot read"))?)
        }
        Some(a) if a.contains("{{") || a.contains("{%") => Some(a.to_string()),
        Some(a) => bail!("--chat-template {a}: not a file, and does not look like a Jinja template"),
        None => tokenizer.chat_template().map(str::to_string),
    };
    let Some(source) = source else { return Ok(None) };
    let t = ChatTemplate::new(
        &source,
        tokenizer.bos_token().map(str::to_string),
        tokenizer.eos_token().map(str::to_string),
    )
    .map_err(|e| anyhow::anyhow!("chat template: {e}"))?
    .with_special_tokens(tokenizer.special_tokens_map());
    Ok(Some(Arc::new(t)))
}
