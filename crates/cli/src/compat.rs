//! `vllm serve` command lines, unchanged: underscore spellings (`--max_model_len`), a YAML
//! `--config` file, and vLLM's flags that mean nothing or something simpler on one CPU
//! machine — each accepted with one log line saying what it means here, or refused with a
//! message saying why.

use anyhow::{Context, Result, bail};
use clap::Args;
use std::ffi::OsString;
use tracing::info;
use yaml_rust2::{Yaml, YamlLoader};

/// vLLM flags kept for drop-in command lines (see each one's help for what it does here).
#[derive(Args, Clone, Debug, Default)]
pub struct VllmCompatArgs {
    /// Share of the available memory the KV cache takes, e.g. 0.9. With `--device cuda`, as in
    /// vLLM: of the GPU's memory, less the weights (default 0.9 there). `--kv-cache-memory` wins
    /// when both are given.
    #[arg(long)]
    pub gpu_memory_utilization: Option<f64>,

    /// Only 1 (one process on one machine); larger values are refused.
    #[arg(long, default_value_t = 1)]
    pub tensor_parallel_size: usize,

    /// Only 1.
    #[arg(long, default_value_t = 1)]
    pub pipeline_parallel_size: usize,

    /// Accepted: no model code is ever downloaded or run; architectures are built in.
    #[arg(long)]
    pub trust_remote_code: bool,

    /// Accepted: there are no CUDA graphs to turn off on a CPU.
    #[arg(long)]
    pub enforce_eager: bool,

    /// The checkpoint's quantization: `gguf` (or unset: read from the files). Other methods
    /// (awq, gptq, fp8, …) are refused: their checkpoints cannot be read yet.
    #[arg(long, short = 'q')]
    pub quantization: Option<String>,

    /// A tokenizer directory (tokenizer.json, tokenizer_config.json) to use instead of the
    /// model's.
    #[arg(long)]
    pub tokenizer: Option<String>,

    /// Where downloaded models go (the catalog's and the Hugging Face cache).
    #[arg(long)]
    pub download_dir: Option<std::path::PathBuf>,

    /// The Hugging Face revision (branch, tag or commit) of a repo-id model.
    #[arg(long)]
    pub revision: Option<String>,

    /// Accepted: requests are not logged one by one either way.
    #[arg(long)]
    pub disable_log_requests: bool,
    #[arg(long, hide = true)]
    pub enable_log_requests: bool,

    /// Accepted: the HTTP server's own logs follow --log-level.
    #[arg(long)]
    pub uvicorn_log_level: Option<String>,

    /// Accepted: preempted requests are recomputed, never swapped.
    #[arg(long)]
    pub swap_space: Option<f64>,

    /// `auto`, `cpu` or `cuda`. `cuda` (a binary built with `--features cuda`) runs the
    /// matmuls and attention on the first GPU, weights and K/V cache in its memory, the other
    /// ops on the CPU; `auto` takes the GPU when one is usable, else the CPU, and logs which.
    #[arg(long, default_value = "auto")]
    pub device: String,

    /// Element type of the recurrent layers' states (Qwen3.5's delta-net, Mamba): `auto` or
    /// `float32`, which is what they are kept in; others are refused.
    #[arg(long, default_value = "auto")]
    pub mamba_cache_dtype: String,

    /// The same for the SSM part of the state alone (vLLM's finer flag): `auto` or `float32`.
    #[arg(long, default_value = "auto")]
    pub mamba_ssm_cache_dtype: String,

    /// Accepted: a multimodal checkpoint (Qwen3.5's) always serves its text model alone here.
    #[arg(long)]
    pub language_model_only: bool,

    /// Accepted: image, video and audio inputs are refused, whatever the limits.
    #[arg(long)]
    pub limit_mm_per_prompt: Option<String>,

    /// Only 1 (`-dp`): one engine per process; run replicas behind a load balancer.
    #[arg(long, default_value_t = 1)]
    pub data_parallel_size: usize,

    /// Refused: LoRA adapters are not supported yet (merge the adapter into the weights).
    #[arg(long)]
    pub enable_lora: bool,

    /// Refused, as --enable-lora.
    #[arg(long, num_args = 1..)]
    pub lora_modules: Vec<String>,

    /// Refused: TLS is not built in; terminate TLS in a reverse proxy (nginx, Caddy, an ingress).
    #[arg(long)]
    pub ssl_keyfile: Option<String>,

    /// Refused, as --ssl-keyfile.
    #[arg(long)]
    pub ssl_certfile: Option<String>,

    /// Accepted: routes are served at `/`; a proxy that strips the prefix (vLLM's use of
    /// root_path) works unchanged.
    #[arg(long)]
    pub root_path: Option<String>,

    /// `auto`, `safetensors`, `pt` or `gguf` (the format is read from the files either way: a
    /// directory's safetensors, else its `pytorch_model*.bin`); other formats (npcache, dummy,
    /// tensorizer, bitsandbytes, …) are refused.
    #[arg(long, default_value = "auto")]
    pub load_format: String,

    /// `auto`, `hf` or `slow`: the HF tokenizers library's tokenizer.json either way; `mistral`
    /// (mistral_common) and `custom` are refused.
    #[arg(long, default_value = "auto")]
    pub tokenizer_mode: String,

    /// The Hugging Face token for gated repos (default: $HF_TOKEN, then the saved login).
    #[arg(long)]
    pub hf_token: Option<String>,

    /// Accepted: message contents are given to the chat template as strings or as OpenAI
    /// content parts as the template reads them (vLLM's `auto`).
    #[arg(long)]
    pub chat_template_content_format: Option<String>,

    /// Answer every request with an `x-request-id` header: the client's own, else a new one.
    #[arg(long)]
    pub enable_request_id_headers: bool,

    /// Count generation and pooling requests in flight, reported by `GET /load` as
    /// `{"server_load": N}` (0 without this flag, as in vLLM).
    #[arg(long)]
    pub enable_server_load_tracking: bool,
}

impl VllmCompatArgs {
    /// Refuses what cannot be honoured; logs what each accepted flag means here.
    pub fn check(&self) -> Result<()> {
        if self.tensor_parallel_size != 1 || self.pipeline_parallel_size != 1 {
            bail!(
                "--tensor-parallel-size {} / --pipeline-parallel-size {}: one process serves one model on one \
                 machine here; run several replicas behind a load balancer instead",
                self.tensor_parallel_size,
                self.pipeline_parallel_size
            );
        }
        if let Some(q) = self.quantization.as_deref().filter(|q| !matches!(*q, "gguf" | "none")) {
            bail!(
                "--quantization {q}: only GGUF files are read (quantization gguf); {q} checkpoints are not supported yet"
            );
        }
        for (flag, v) in
            [("--mamba-cache-dtype", &self.mamba_cache_dtype), ("--mamba-ssm-cache-dtype", &self.mamba_ssm_cache_dtype)]
        {
            if !matches!(v.as_str(), "auto" | "float32") {
                bail!("{flag} {v}: recurrent states are kept in float32 (auto or float32)");
            }
        }
        if self.data_parallel_size != 1 {
            bail!(
                "--data-parallel-size {}: one engine per process here; run several replicas behind a load balancer",
                self.data_parallel_size
            );
        }
        if self.enable_lora || !self.lora_modules.is_empty() {
            bail!(
                "--enable-lora / --lora-modules: LoRA adapters are not supported yet; merge the adapter into the weights"
            );
        }
        if self.ssl_keyfile.is_some() || self.ssl_certfile.is_some() {
            bail!(
                "--ssl-keyfile / --ssl-certfile: TLS is not built in; terminate TLS in a reverse proxy (nginx, Caddy)"
            );
        }
        if !matches!(self.load_format.as_str(), "auto" | "safetensors" | "pt" | "gguf") {
            bail!(
                "--load-format {}: only safetensors, PyTorch .bin and GGUF files are read (auto, safetensors, pt or gguf)",
                self.load_format
            );
        }
        if !matches!(self.tokenizer_mode.as_str(), "auto" | "hf" | "slow") {
            bail!(
                "--tokenizer-mode {}: only Hugging Face tokenizers (tokenizer.json) are read (auto, hf or slow)",
                self.tokenizer_mode
            );
        }
        if let Some(f) = self.gpu_memory_utilization.filter(|f| !(*f > 0.0 && *f <= 1.0)) {
            bail!("--gpu-memory-utilization {f}: must be in (0, 1]");
        }
        let notes = [
            (self.trust_remote_code, "--trust-remote-code: no remote code is ever run (architectures are built in)"),
            (self.enforce_eager, "--enforce-eager: there are no CUDA graphs on the CPU; nothing to change"),
            (
                self.disable_log_requests || self.enable_log_requests,
                "--*-log-requests: requests are not logged one by one",
            ),
            (self.uvicorn_log_level.is_some(), "--uvicorn-log-level: HTTP logs follow --log-level"),
            (self.swap_space.is_some(), "--swap-space: preempted requests are recomputed, not swapped"),
            (
                self.language_model_only,
                "--language-model-only: multimodal checkpoints serve their text model here anyway",
            ),
            (
                self.limit_mm_per_prompt.is_some(),
                "--limit-mm-per-prompt: image, video and audio inputs are not supported (refused with a 400)",
            ),
            (
                self.root_path.is_some(),
                "--root-path: routes are served at /; a proxy that strips the prefix works unchanged",
            ),
            (
                self.chat_template_content_format.is_some(),
                "--chat-template-content-format: contents reach the template as it reads them (vLLM's auto)",
            ),
            (
                self.tokenizer_mode == "slow",
                "--tokenizer-mode slow: the one tokenizer here is HF tokenizers' tokenizer.json",
            ),
        ];
        for (_, note) in notes.iter().filter(|(on, _)| *on) {
            info!("{note}");
        }
        Ok(())
    }
}

/// Rewrites a command line as vLLM reads it: `--flag_name` → `--flag-name`, and the flags of a
/// `--config FILE.yaml` inserted after the subcommand for every key the command line does not
/// set itself (the command line wins, as in vLLM).
pub fn normalize_args(args: Vec<OsString>) -> Result<Vec<OsString>> {
    let mut out: Vec<OsString> = args.into_iter().map(dashes).collect();
    let Some(i) = out.iter().position(|a| a == "--config" || a.to_string_lossy().starts_with("--config=")) else {
        return Ok(out);
    };
    let arg = out.remove(i).to_string_lossy().into_owned();
    let path = match arg.strip_prefix("--config=") {
        Some(p) => p.to_string(),
        None if i < out.len() => out.remove(i).to_string_lossy().into_owned(),
        None => bail!("--config needs a YAML file"),
    };
    let given: Vec<String> =
        out.iter().map(|a| a.to_string_lossy().split('=').next().unwrap_or("").to_string()).collect();
    let extra: Vec<OsString> = config_flags(&path)?
        .into_iter()
        .filter(|(flag, _)| !given.contains(flag))
        .flat_map(|(flag, values)| std::iter::once(flag).chain(values))
        .map(OsString::from)
        .collect();
    // After the subcommand (`serve`), before its own arguments.
    let at = out.iter().position(|a| a == "serve" || a == "generate").map_or(out.len().min(1), |p| p + 1);
    out.splice(at..at, extra);
    Ok(out)
}

fn dashes(a: OsString) -> OsString {
    let s = a.to_string_lossy();
    // vLLM's two-letter short flags.
    let long = match s.as_ref() {
        "-tp" => Some("--tensor-parallel-size"),
        "-pp" => Some("--pipeline-parallel-size"),
        "-dp" => Some("--data-parallel-size"),
        _ => None,
    };
    if let Some(l) = long {
        return l.into();
    }
    match s.strip_prefix("--") {
        Some(rest) if rest.contains('_') => {
            let (name, value) = rest.split_once('=').map_or((rest, None), |(n, v)| (n, Some(v)));
            let name = name.replace('_', "-");
            OsString::from(match value {
                Some(v) => format!("--{name}={v}"),
                None => format!("--{name}"),
            })
        }
        _ => a,
    }
}

/// A flat YAML mapping as flags: `key: value` → `--key value`, `key: true` → `--key`,
/// `key: false` → nothing, `key: [a, b]` → `--key a b`.
fn config_flags(path: &str) -> Result<Vec<(String, Vec<String>)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("--config {path}: cannot read"))?;
    let docs = YamlLoader::load_from_str(&text).map_err(|e| anyhow::anyhow!("--config {path}: not valid YAML: {e}"))?;
    let Some(Yaml::Hash(map)) = docs.into_iter().next() else {
        bail!("--config {path}: expected a mapping of option names to values");
    };
    let mut flags = Vec::new();
    for (k, v) in map {
        let key = k.as_str().with_context(|| format!("--config {path}: keys must be option names"))?;
        let flag = format!("--{}", key.replace('_', "-"));
        let scalar = |v: &Yaml| -> Result<String> {
            Ok(match v {
                Yaml::String(s) | Yaml::Real(s) => s.clone(),
                Yaml::Integer(i) => i.to_string(),
                Yaml::Boolean(b) => b.to_string(),
                _ => bail!("--config {path}: {key}: expected a number, a string or a list of them"),
            })
        };
        match &v {
            Yaml::Boolean(true) => flags.push((flag, vec![])),
            Yaml::Boolean(false) => {}
            Yaml::Array(items) => flags.push((flag, items.iter().map(scalar).collect::<Result<_>>()?)),
            v => flags.push((flag, vec![scalar(v)?])),
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(args: &[&str]) -> Vec<String> {
        let v = normalize_args(args.iter().map(OsString::from).collect()).unwrap();
        v.into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn underscores_become_dashes_in_flag_names_only() {
        assert_eq!(
            norm(&["vllm-rs", "serve", "my_model", "--max_model_len", "512", "--served_model_name=a_b", "-tp", "1"]),
            [
                "vllm-rs",
                "serve",
                "my_model",
                "--max-model-len",
                "512",
                "--served-model-name=a_b",
                "--tensor-parallel-size",
                "1"
            ]
        );
    }

    #[test]
    fn config_file_flags_come_first_and_the_command_line_wins() {
        let dir = std::env::temp_dir().join(format!("vllm-rs-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.yaml");
        std::fs::write(&file, "port: 9000\nmax_model_len: 512\nenforce_eager: true\ntrust_remote_code: false\n")
            .unwrap();
        let args = norm(&["vllm-rs", "serve", "m", "--config", file.to_str().unwrap(), "--port", "7000"]);
        assert_eq!(args, ["vllm-rs", "serve", "--max-model-len", "512", "--enforce-eager", "m", "--port", "7000"]);
        std::fs::write(&file, "- a\n- b\n").unwrap();
        let e = normalize_args(["vllm-rs", "serve", "--config", file.to_str().unwrap()].map(OsString::from).to_vec());
        assert!(e.unwrap_err().to_string().contains("expected a mapping"));
    }
}
