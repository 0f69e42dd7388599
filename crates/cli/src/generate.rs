//! `vllm-rs generate`: offline batch generation, the engine stepped in this thread.

use crate::args::EngineArgs;
use crate::setup::{self, Loaded};
use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::json;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use vllm_rs_engine::{EngineRequest, FinishReason, SamplingParams};
use vllm_rs_frontend::{OutputOptions, OutputProcessor};

#[derive(Args)]
pub struct GenerateArgs {
    /// Model: local directory, .gguf file, catalog name or HF repo id (default: SmolLM2-135M-Instruct).
    #[arg(long)]
    pub model: Option<String>,

    /// A prompt; repeat for several (they run as one batch).
    #[arg(long)]
    pub prompt: Vec<String>,

    /// A file of prompts: one per line, or JSON lines with "prompt" or "messages".
    #[arg(long)]
    pub prompts_file: Option<PathBuf>,

    /// Apply the model's chat template (each prompt becomes one user message).
    #[arg(long)]
    pub chat: bool,

    /// System message for --chat.
    #[arg(long, requires = "chat")]
    pub system: Option<String>,

    /// Maximum new tokens per prompt.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,

    /// Sampling temperature; 0 is greedy. Default: the model's generation_config, else 1.0.
    #[arg(long)]
    pub temperature: Option<f32>,
    #[arg(long)]
    pub top_p: Option<f32>,
    #[arg(long)]
    pub top_k: Option<i32>,
    #[arg(long)]
    pub min_p: Option<f32>,
    #[arg(long)]
    pub repetition_penalty: Option<f32>,
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,

    /// Keep generating past end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,

    /// Stop at this string (repeatable); it is not included in the output.
    #[arg(long)]
    pub stop: Vec<String>,

    /// Print one JSON object per prompt (prompt_token_ids, token_ids, text, finish_reason).
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub engine: EngineArgs,
}

/// One prompt, as text or as chat messages.
enum Prompt {
    Text(String),
    Chat(serde_json::Value),
}

fn read_prompts(a: &GenerateArgs) -> Result<Vec<Prompt>> {
    let mut out: Vec<Prompt> = a.prompt.iter().cloned().map(Prompt::Text).collect();
    if let Some(path) = &a.prompts_file {
        let text = std::fs::read_to_string(path).with_context(|| format!("--prompts-file {}", path.display()))?;
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            if !line.trim_start().starts_with('{') {
                out.push(Prompt::Text(line.to_string()));
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("{} line {}: not valid JSON", path.display(), i + 1))?;
            match (v.get("prompt").and_then(|p| p.as_str()), v.get("messages")) {
                (Some(p), _) => out.push(Prompt::Text(p.to_string())),
                (None, Some(m)) if m.is_array() => out.push(Prompt::Chat(m.clone())),
                _ => bail!("{} line {}: expected a \"prompt\" string or a \"messages\" list", path.display(), i + 1),
            }
        }
    }
    if out.is_empty() {
        bail!("nothing to generate: give --prompt TEXT (repeatable) or --prompts-file FILE");
    }
    Ok(out)
}

fn sampling_params(a: &GenerateArgs, l: &Loaded, index: usize) -> SamplingParams {
    let g = l.generation.as_ref();
    SamplingParams {
        temperature: a.temperature.or(g.and_then(|g| g.temperature).map(|v| v as f32)).unwrap_or(1.0),
        top_p: a.top_p.or(g.and_then(|g| g.top_p).map(|v| v as f32)).unwrap_or(1.0),
        top_k: a.top_k.or(g.and_then(|g| g.top_k).map(|v| v as i32)).unwrap_or(0),
        min_p: a.min_p.or(g.and_then(|g| g.min_p).map(|v| v as f32)).unwrap_or(0.0),
        repetition_penalty: a
            .repetition_penalty
            .or(g.and_then(|g| g.repetition_penalty).map(|v| v as f32))
            .unwrap_or(1.0),
        presence_penalty: a.presence_penalty,
        frequency_penalty: a.frequency_penalty,
        seed: l.default_seed.map(|s| s.wrapping_add(index as u64)),
        max_tokens: a.max_tokens,
        ignore_eos: a.ignore_eos,
        ..SamplingParams::default()
    }
}

/// Prompt text → token ids (chat prompts through the template, with its own special tokens).
fn tokenize(a: &GenerateArgs, l: &Loaded, p: &Prompt) -> Result<Vec<u32>> {
    let chat_messages = match p {
        Prompt::Chat(m) => Some(m.clone()),
        Prompt::Text(t) if a.chat => {
            let mut msgs = Vec::new();
            if let Some(s) = &a.system {
                msgs.push(json!({"role": "system", "content": s}));
            }
            msgs.push(json!({"role": "user", "content": t}));
            Some(serde_json::Value::Array(msgs))
        }
        Prompt::Text(_) => None,
    };
    match (chat_messages, p) {
        (Some(m), _) => {
            let t = l
                .chat_template
                .as_ref()
                .context("this model has no chat template; drop --chat, or give one with --chat-template FILE")?;
            let text = t.render(&m, true, &Default::default())?;
            Ok(l.tokenizer.encode(&text, false)?)
        }
        (None, Prompt::Text(t)) => Ok(l.tokenizer.encode(t, true)?),
        (None, Prompt::Chat(_)) => unreachable!(),
    }
}

struct Output {
    prompt_ids: Vec<u32>,
    proc: OutputProcessor,
}

pub fn run(a: GenerateArgs) -> Result<()> {
    let prompts = read_prompts(&a)?;
    let mut l = setup::load(a.model.as_deref(), &a.engine)?;
    let mut outs: Vec<Output> = Vec::with_capacity(prompts.len());
    let mut index: HashMap<String, usize> = HashMap::new();
    for (i, p) in prompts.iter().enumerate() {
        let prompt_ids = tokenize(&a, &l, p)?;
        let max_tokens = a.max_tokens.min(l.core.config.max_model_len.saturating_sub(prompt_ids.len()));
        let mut params = sampling_params(&a, &l, i);
        params.max_tokens = max_tokens.max(1);
        let id = format!("gen-{i}");
        l.core
            .add_request(EngineRequest {
                request_id: id.clone(),
                prompt_token_ids: prompt_ids.clone(),
                params,
                priority: 0,
                cache_salt: None,
            })
            .map_err(|e| anyhow::anyhow!("prompt {}: {e}", i + 1))?;
        index.insert(id, i);
        let opts = OutputOptions { stop: a.stop.clone(), ..OutputOptions::default() };
        outs.push(Output { proc: OutputProcessor::new(l.tokenizer.clone(), &prompt_ids, &opts)?, prompt_ids });
    }
    let t0 = std::time::Instant::now();
    while l.core.has_unfinished() {
        for o in l.core.step() {
            let id = o.request_id.clone();
            let d = outs[index[&id]].proc.process(o)?;
            if d.needs_abort {
                l.core.abort(&[id], FinishReason::Stop);
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let generated: usize = outs.iter().map(|o| o.proc.token_ids.len()).sum();
    tracing::info!("generated {generated} tokens in {secs:.2} s ({:.1} tok/s)", generated as f64 / secs.max(1e-9));
    if let Some(line) = vllm_rs_engine::stat_logger::spec_decode_line(&Default::default(), &l.core.stats, secs) {
        tracing::info!("{line}");
    }
    print_outputs(&a, &prompts, &outs)
}

fn print_outputs(a: &GenerateArgs, prompts: &[Prompt], outs: &[Output]) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    for (p, o) in prompts.iter().zip(outs) {
        let finish = o.proc.finish_reason().map(|f| f.as_str());
        if a.json {
            let prompt = match p {
                Prompt::Text(t) => json!(t),
                Prompt::Chat(m) => m.clone(),
            };
            let line = json!({
                "prompt": prompt,
                "prompt_token_ids": o.prompt_ids,
                "token_ids": o.proc.token_ids,
                "text": o.proc.text,
                "finish_reason": finish,
            });
            writeln!(stdout, "{line}")?;
        } else {
            if outs.len() > 1 {
                let shown = match p {
                    Prompt::Text(t) => t.clone(),
                    Prompt::Chat(m) => m.to_string(),
                };
                writeln!(stdout, "=== {shown}")?;
            }
            writeln!(stdout, "{}", o.proc.text)?;
        }
    }
    Ok(())
}
