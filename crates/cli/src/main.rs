//! `vllm-rs`: serve, generate with, benchmark and fetch LLMs — vLLM's interface in one binary.

mod args;
mod bench;
mod compat;
mod device;
mod embed;
mod generate;
mod serve;
mod setup;
mod vllm_flags;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "vllm-rs",
    version,
    about = "An LLM inference and serving engine with vLLM's API, in one binary",
    long_about = "vllm.rs serves open-weight LLMs behind an OpenAI-compatible API, the way vLLM does \
                  (paged KV cache, continuous batching, chunked prefill, prefix caching), on CPUs; \
                  and embedding models (BERT, RoBERTa, XLM-R, MPNet) behind /v1/embeddings, /score and /rerank.\n\n\
                  Models: a local HF directory, a local .gguf file, a catalog name (smollm2, qwen05, \
                  qwen15, gemma3; fetched on first use), or a Hugging Face repo id (org/name).",
    after_help = "Examples:\n  vllm-rs serve --port 8000\n  vllm-rs serve qwen05 --served-model-name qwen --api-key secret\n  vllm-rs generate --prompt \"The capital of France is\"\n  \
                  vllm-rs generate --model qwen05 --chat --prompt \"Write a haiku about Rust\"\n  \
                  vllm-rs bench throughput --model smollm2 --num-prompts 64\n  vllm-rs pull gemma3\n  \
                  vllm-rs serve ./all-MiniLM-L6-v2   (embeddings: /v1/embeddings, /score, /rerank)\n  \
                  vllm-rs embed --model ./all-MiniLM-L6-v2 --input texts.txt --format npy --output vectors.npy"
)]
struct Cli {
    /// Log level: error, warn, info, debug or trace.
    #[arg(long, global = true, env = "VLLM_LOGGING_LEVEL", default_value = "info")]
    log_level: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a model behind vLLM's OpenAI-compatible HTTP API.
    // A flag given twice takes its last value, as vLLM's argparse does (launch scripts append
    // overrides to a base command line).
    #[command(args_override_self = true)]
    Serve(Box<serve::ServeArgs>),
    /// Generate text for one or more prompts (offline batch).
    Generate(generate::GenerateArgs),
    /// Embed a file of texts (one per line) with an embedding model; JSON lines or .npy out.
    Embed(Box<embed::EmbedArgs>),
    /// Benchmarks shaped like `vllm bench`.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Download a model (catalog name or HF repo id) into the local cache and print its path.
    Pull {
        /// Catalog name or Hugging Face repo id; default: the default model.
        model: Option<String>,
    },
}

fn init_logging(level: &str) -> Result<(), String> {
    let filter = match level.to_ascii_lowercase().as_str() {
        l @ ("error" | "warn" | "info" | "debug" | "trace") => l.to_string(),
        "warning" => "warn".into(),
        "critical" => "error".into(),
        other => return Err(format!("--log-level {other}: expected error, warn, info, debug or trace")),
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
    Ok(())
}

fn main() -> ExitCode {
    let started = std::time::Instant::now();
    let argv = compat::normalize_args(std::env::args_os().collect()).and_then(|a| match vllm_flags::is_serve(&a) {
        true => vllm_flags::apply(a),
        false => Ok((a, Vec::new())),
    });
    let (argv, notes) = match argv {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(argv);
    if let Err(e) = init_logging(&cli.log_level) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    for note in notes {
        tracing::info!("{note}");
    }
    let result = match cli.command {
        Command::Serve(a) => serve::run(*a, started),
        Command::Generate(a) => generate::run(a),
        Command::Embed(a) => embed::run(*a),
        Command::Bench(b) => bench::run(b),
        Command::Pull { model } => vllm_rs_hub::resolve(model.as_deref())
            .map(|r| println!("{}", r.path.display()))
            .map_err(|e| anyhow::anyhow!("{e}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
