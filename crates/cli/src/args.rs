//! Engine options shared by `serve`, `generate` and `bench`, named as vLLM names them.

use clap::{Args, ValueEnum};
use vllm_rs_engine::SpeculativeConfig;

#[derive(Args, Clone, Debug)]
pub struct EngineArgs {
    /// Maximum tokens per request (prompt + output). Default: the model's context length.
    #[arg(long)]
    pub max_model_len: Option<usize>,

    /// Maximum requests running at once.
    #[arg(long, default_value_t = 256)]
    pub max_num_seqs: usize,

    /// Token budget of one engine step (prefill chunks + decodes).
    #[arg(long)]
    pub max_num_batched_tokens: Option<usize>,

    /// Reuse the KV cache of shared prompt prefixes (on by default, as in vLLM).
    #[arg(long, overrides_with = "no_enable_prefix_caching")]
    pub enable_prefix_caching: bool,
    #[arg(long, hide = true)]
    pub no_enable_prefix_caching: bool,

    /// Split long prompts across steps (on by default).
    #[arg(long, overrides_with = "no_enable_chunked_prefill")]
    pub enable_chunked_prefill: bool,
    #[arg(long, hide = true)]
    pub no_enable_chunked_prefill: bool,

    /// Memory for the KV cache, e.g. 2GiB, 512MB or a byte count. Default: a quarter of the
    /// available memory, capped at what `max_num_seqs` full-length requests need; with
    /// `--device cuda`, `--gpu-memory-utilization` of the GPU's.
    #[arg(long, value_parser = parse_bytes)]
    pub kv_cache_memory: Option<u64>,

    /// Element type of the KV cache. `auto` is the compute dtype (float32): exact, and what keeps
    /// greedy output equal to a float32 reference. float16/bfloat16 halve the cache's memory
    /// (twice the tokens in the same --kv-cache-memory) at a small cost in accuracy.
    #[arg(long, value_enum, default_value_t = KvCacheDtypeArg::Auto)]
    pub kv_cache_dtype: KvCacheDtypeArg,

    /// Keep every position of sliding-window layers (Gemma's local layers) instead of freeing
    /// the blocks that left the window: one cache group for all layers, as before vLLM's hybrid
    /// KV cache manager. Costs memory; for comparisons.
    #[arg(long)]
    pub disable_hybrid_kv_cache_manager: bool,

    /// Prefix caching for models with recurrent layers (Qwen3.5/3.6's gated delta-net): `align`
    /// saves the recurrent state every --mamba-block-size tokens, where a prompt ends and where
    /// two prompts diverged, so a request sharing that prefix resumes there; `all` saves it at
    /// every block; `none` saves nothing (such models then get no prefix hits). Each saved state
    /// is one request's whole recurrent state (e.g. 19 MiB for Qwen3.5-0.8B), kept LRU in a pool
    /// sized from the KV cache memory.
    #[arg(long, value_enum, default_value_t = MambaCacheModeArg::Align)]
    pub mamba_cache_mode: MambaCacheModeArg,

    /// Tokens between saved recurrent states (`align` mode); a multiple of --block-size.
    #[arg(long, default_value_t = 256)]
    pub mamba_block_size: usize,

    /// Speculative decoding, as vLLM's flag takes it: JSON
    /// (`{"method": "ngram", "num_speculative_tokens": 4}`) or `key=value,...`. Methods: `ngram`
    /// (prompt lookup in the request's own tokens, suffixes of prompt_lookup_min to _max tokens;
    /// as in vLLM, one of them alone sets both, and neither means 5, which suits free text,
    /// where one-token lookups draft mostly wrongly and cost chat ~20 %; answers that copy short
    /// spans of the prompt, as a JSON extraction of names, gain more from 1 to 4; no extra
    /// weights), `draft_model` (`{"model": "DRAFT", "num_speculative_tokens": 4}`: a smaller
    /// model of the same family proposes greedily, with int8 activations where that is faster;
    /// it shares the target's KV block ids and takes its own share of the KV memory) and `mtp` (`{"method": "mtp",
    /// "num_speculative_tokens": 2}`: the multi-token-prediction layer a Qwen3.5, Qwen3-Next or
    /// DeepSeek-V3 checkpoint ships; vLLM's `deepseek_mtp`, `qwen3_next_mtp` name it too),
    /// `eagle` (`{"method": "eagle", "model": "HEAD", "num_speculative_tokens": 3}`: an EAGLE-1
    /// head folder made for the target, safetensors) and `eagle3` (the same with an EAGLE-3
    /// head). Greedy output is unchanged; sampled
    /// output keeps its distribution.
    /// `disable_by_batch_size: N` proposes no drafts while more than N requests run (default 4,
    /// where drafts stop paying on a CPU; `null` drafts at any batch size, as vLLM does).
    /// `draft_p_min: P` (draft_model only; llama.cpp's --draft-p-min, not a vLLM key): a
    /// request's drafts stop before the first token the draft gives a probability under P
    /// (default 0.75; 0 always drafts num_speculative_tokens, as vLLM does).
    #[arg(long, value_parser = SpeculativeConfig::parse)]
    pub speculative_config: Option<SpeculativeConfig>,

    /// Use exactly this many KV cache blocks (overrides --kv-cache-memory).
    #[arg(long)]
    pub num_gpu_blocks_override: Option<usize>,

    /// Tokens per KV cache block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,

    /// Compute threads (default: one per physical core).
    #[arg(long, env = "VLLM_RS_THREADS")]
    pub threads: Option<usize>,

    /// Compute dtype of dense (f32/f16/bf16) weights: auto/float32 computes in float32 (exact:
    /// greedy output equals a float32 reference); bfloat16 rounds weights and activations to
    /// bf16 and accumulates in float32 (`vdpbf16ps` on AVX512-BF16, an exact emulation
    /// elsewhere), as vLLM does for bf16 checkpoints. Faster only where `vdpbf16ps` outruns
    /// FMA (AMD Zen 4/5: ~2× prefill; Zen 4: ~1.8× batched serving and embeddings); on Intel
    /// Xeons without AMX it is ~0.65× of float32. float16 and half compute in float32.
    /// Quantized GGUF weights are unaffected.
    #[arg(long, default_value = "auto")]
    pub dtype: String,

    /// Bits of the activations that quantized (GGUF) weights are dotted with. 16 (the default)
    /// rounds each value to within 1.5e-5 of the largest of its block of 32: greedy output
    /// stays with a float32 reference about as long as with unquantized activations. 8, as llama.cpp
    /// quantizes them, dots four values an instruction instead of two on CPUs with AVX-512
    /// VNNI: prefill and batched decode ~1.3–1.4× faster on an AMD Zen 4 (the matmuls alone
    /// 1.4–1.7×), batch-1 decode unchanged (bound by memory), and greedy output leaves the
    /// float32 reference about as soon as llama.cpp's does (BENCHMARKS.md measures both). CPU
    /// backend only; dense weights are unaffected.
    #[arg(long, value_enum, default_value_t = ActivationBitsArg::Sixteen)]
    pub activation_bits: ActivationBitsArg,

    /// Default sampling values and stop tokens: `auto` (the model's generation_config.json),
    /// `vllm` (none), or a directory holding a generation_config.json.
    #[arg(long, default_value = "auto")]
    pub generation_config: String,

    /// A chat template (a file, or the template text itself) replacing the model's.
    #[arg(long)]
    pub chat_template: Option<String>,

    /// Seed for requests that do not set one.
    #[arg(long)]
    pub seed: Option<u64>,

    /// Largest `logprobs` / `prompt_logprobs` a request may ask for.
    #[arg(long, default_value_t = 20)]
    pub max_logprobs: usize,

    /// What logprobs report.
    #[arg(long, value_enum, default_value_t = LogprobsModeArg::RawLogprobs)]
    pub logprobs_mode: LogprobsModeArg,

    /// Order of waiting requests.
    #[arg(long, value_enum, default_value_t = PolicyArg::Fcfs)]
    pub scheduling_policy: PolicyArg,

    /// `auto`: pooling for encoder (embedding) models, generate for the rest; `pooling` also
    /// runs a decoder as an embedding model (last-token pooling, as vLLM converts
    /// `*ForCausalLM`, e.g. Qwen3-Embedding); `generate` insists on text generation.
    #[arg(long, value_enum, default_value_t = RunnerArg::Auto)]
    pub runner: RunnerArg,

    /// vLLM's `--convert`: `embed` serves a generative model as an embedding model (the same
    /// as `--runner pooling`); `auto` and `none` change nothing; `classify` and `reward` (a
    /// model with a new head) are not supported yet.
    #[arg(long, default_value = "auto", value_parser = ["auto", "none", "embed", "classify", "reward", "mm_encoder_only"])]
    pub convert: String,

    #[command(flatten)]
    pub vllm: crate::compat::VllmCompatArgs,
}

/// Tool calling and reasoning output (`vllm serve`'s flags).
#[derive(Args, Clone, Debug, Default)]
pub struct ToolArgs {
    /// Let `tool_choice: "auto"` requests call tools: the `--tool-call-parser` finds the calls
    /// in the model's text.
    #[arg(long)]
    pub enable_auto_tool_choice: bool,

    /// How the model writes tool calls: hermes (Qwen2.5, Hermes), llama3_json, mistral, pythonic,
    /// qwen3_coder (Qwen3-Coder, Qwen3.5 XML), deepseek_v3, granite, openai (gpt-oss harmony).
    #[arg(long, value_name = "NAME")]
    pub tool_call_parser: Option<String>,

    /// vLLM's Python tool-parser plugin: refused (no Python runs here).
    #[arg(long, value_name = "PATH")]
    pub tool_parser_plugin: Option<String>,

    /// Split the model's thinking into `reasoning`: qwen3, deepseek_r1, granite, openai_gptoss
    /// (gpt-oss harmony; alias gpt_oss).
    #[arg(long, value_name = "NAME")]
    pub reasoning_parser: Option<String>,

    /// vLLM's Python reasoning-parser plugin: refused (no Python runs here).
    #[arg(long, value_name = "PATH")]
    pub reasoning_parser_plugin: Option<String>,
}

impl ToolArgs {
    /// vLLM's start-up checks, and ours: plugins refused, parser names known.
    pub fn check(&self) -> Result<(), String> {
        if self.tool_parser_plugin.is_some() || self.reasoning_parser_plugin.is_some() {
            return Err("--tool-parser-plugin / --reasoning-parser-plugin load Python code, which this server cannot \
                        run; use a built-in --tool-call-parser or --reasoning-parser instead"
                .into());
        }
        if self.enable_auto_tool_choice && self.tool_call_parser.is_none() {
            return Err("When `--enable-auto-tool-choice` is set, `--tool-call-parser` must be set".into());
        }
        if let Some(p) = &self.tool_call_parser {
            vllm_rs_server::tool_parsers::check_name(p).map_err(|e| format!("--tool-call-parser: {e}"))?;
        }
        if let Some(p) = self.reasoning_parser.as_deref().filter(|p| !vllm_rs_server::reasoning::NAMES.contains(p)) {
            return Err(format!(
                "--reasoning-parser {p:?}: not available; available: {}",
                vllm_rs_server::reasoning::NAMES.join(", ")
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RunnerArg {
    Auto,
    Generate,
    Pooling,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum LogprobsModeArg {
    RawLogprobs,
    RawLogits,
    ProcessedLogprobs,
    ProcessedLogits,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KvCacheDtypeArg {
    Auto,
    Float32,
    Float16,
    Bfloat16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ActivationBitsArg {
    #[value(name = "16")]
    Sixteen,
    #[value(name = "8")]
    Eight,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MambaCacheModeArg {
    None,
    All,
    Align,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PolicyArg {
    Fcfs,
    Priority,
}

impl EngineArgs {
    pub fn prefix_caching(&self) -> bool {
        !self.no_enable_prefix_caching
    }

    pub fn chunked_prefill(&self) -> bool {
        !self.no_enable_chunked_prefill
    }
}

/// `2GiB`, `1.5G`, `512MB`, `1048576` → bytes (binary multiples for `Ki/Mi/Gi`, decimal otherwise).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("{s:?} is not a size (examples: 4GiB, 512MB, 1073741824)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "ki" | "kib" => 1024.0,
        "mi" | "mib" => 1024.0 * 1024.0,
        "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        other => return Err(format!("unknown size unit {other:?} in {s:?} (use B, KB, MB, GB, KiB, MiB, GiB)")),
    };
    Ok((value * mult) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("512MB"), Ok(512_000_000));
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("1.5G"), Ok(1_500_000_000));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("3 parsecs").is_err());
    }
}
