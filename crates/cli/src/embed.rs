//! `vllm-rs embed`: a file of texts in, one vector per text out (JSON lines or a `.npy`
//! matrix), with the model's pooling and normalization — offline, in this thread.

use crate::args::EngineArgs;
use crate::setup::{self, LoadedPooling, LoadedRunner};
use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;
use tracing::info;
use vllm_rs_engine::{PoolingHandle, PoolingInput, PoolingTask};

#[derive(Args)]
pub struct EmbedArgs {
    /// Embedding model: a local folder (BERT, RoBERTa, XLM-R or MPNet, e.g. a
    /// sentence-transformers folder) or a Hugging Face repo id.
    #[arg(long)]
    pub model: String,

    /// Texts to embed, one per line (`-`: standard input).
    #[arg(long)]
    pub input: PathBuf,

    /// Where to write the vectors (`-` or absent: standard output).
    #[arg(long)]
    pub output: Option<PathBuf>,

    /// `jsonl`: one `{"index": i, "embedding": [...]}` per line; `npy`: one float32 matrix
    /// (texts × dimensions), which needs --output.
    #[arg(long, value_enum, default_value_t = EmbedFormat::Jsonl)]
    pub format: EmbedFormat,

    /// Fail on texts longer than the model's length instead of truncating them (the default
    /// truncates, as sentence-transformers does).
    #[arg(long)]
    pub no_truncate: bool,

    /// Write the pooled vectors without L2 normalization.
    #[arg(long)]
    pub no_normalize: bool,

    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EmbedFormat {
    Jsonl,
    Npy,
}

pub fn run(a: EmbedArgs) -> Result<()> {
    if a.format == EmbedFormat::Npy && a.output.as_ref().is_none_or(|p| p.as_os_str() == "-") {
        bail!("--format npy writes a binary file: give --output FILE.npy");
    }
    let p = match setup::load_any(Some(&a.model), &a.engine)? {
        LoadedRunner::Pooling(p) => *p,
        LoadedRunner::Generate(l) => bail!(
            "{} generates text; `embed` needs an embedding model ({})",
            l.model_arg,
            vllm_rs_models::encoder_classes().join(", ")
        ),
    };
    let texts = read_lines(&a.input)?;
    let ids = tokenize(&p, &texts, !a.no_truncate)?;
    let (normalize, d) = (!a.no_normalize && p.model.pooling.normalize, p.model.info.hidden_size);
    let vectors = embed_all(p, ids, normalize)?;
    write(&a, &vectors, d)
}

fn read_lines(path: &PathBuf) -> Result<Vec<String>> {
    let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(std::fs::File::open(path).with_context(|| format!("{}", path.display()))?))
    };
    let lines = reader.lines().collect::<std::io::Result<Vec<_>>>().with_context(|| format!("{}", path.display()))?;
    if lines.is_empty() {
        bail!("{}: no texts (one per line)", path.display());
    }
    Ok(lines)
}

/// Token ids of every text, truncated to the model's length or refused when too long.
fn tokenize(p: &LoadedPooling, texts: &[String], truncate: bool) -> Result<Vec<Vec<u32>>> {
    let max = p.limits.max_model_len;
    let mut cut = 0;
    let ids = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let full = p.tokenizer.encode(t, true)?;
            if full.len() <= max {
                return Ok(full);
            }
            if !truncate {
                bail!(
                    "line {}: {} tokens, more than the model's {max} (drop --no-truncate to cut it)",
                    i + 1,
                    full.len()
                );
            }
            cut += 1;
            Ok(p.tokenizer.encode_truncated(t, true, max)?)
        })
        .collect::<Result<Vec<_>>>()?;
    if cut > 0 {
        info!("{cut} of {} texts were longer than {max} tokens and were truncated", texts.len());
    }
    Ok(ids)
}

/// Runs the texts through the pooling runner (the server's: batches of at most
/// `max_num_batched_tokens` tokens), in order.
fn embed_all(p: LoadedPooling, ids: Vec<Vec<u32>>, normalize: bool) -> Result<Vec<Vec<f32>>> {
    let bar = ProgressBar::with_draw_target(Some(ids.len() as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("embedding [{wide_bar}] {pos}/{len} texts {per_sec} ETA {eta}") {
        bar.set_style(style.progress_chars("=> "));
    }
    let runner = PoolingHandle::spawn(p.model, p.limits);
    let pending: Vec<_> = ids
        .into_iter()
        .map(|token_ids| runner.pool(PoolingInput { token_ids, token_type_ids: None, task: PoolingTask::Embed }))
        .collect();
    let mut out = Vec::with_capacity(pending.len());
    for rx in pending {
        let mut v = rx.blocking_recv().context("the pooling runner stopped")?;
        if normalize {
            vllm_rs_engine::normalize(&mut v);
        }
        out.push(v);
        bar.inc(1);
    }
    runner.shutdown();
    bar.finish_and_clear();
    Ok(out)
}

fn write(a: &EmbedArgs, vectors: &[Vec<f32>], d: usize) -> Result<()> {
    let to = a.output.as_ref().filter(|p| p.as_os_str() != "-");
    let mut w: BufWriter<Box<dyn Write>> = BufWriter::new(match to {
        Some(p) => Box::new(std::fs::File::create(p).with_context(|| format!("{}", p.display()))?),
        None => Box::new(std::io::stdout().lock()),
    });
    match a.format {
        EmbedFormat::Jsonl => {
            for (index, v) in vectors.iter().enumerate() {
                serde_json::to_writer(&mut w, &Line { index, embedding: v })?;
                w.write_all(b"\n")?;
            }
        }
        EmbedFormat::Npy => write_npy(&mut w, vectors, d)?,
    }
    w.flush()?;
    if let Some(p) = to {
        info!("wrote {} vectors of {d} dimensions to {}", vectors.len(), p.display());
    }
    Ok(())
}

/// One JSON line (f32 values written in their shortest form).
#[derive(serde::Serialize)]
struct Line<'a> {
    index: usize,
    embedding: &'a [f32],
}

/// NumPy's `.npy` format 1.0: magic, a header dict padded to 64 bytes, then little-endian f32.
fn write_npy(w: &mut impl Write, vectors: &[Vec<f32>], d: usize) -> std::io::Result<()> {
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {d}), }}", vectors.len());
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&(header.len() as u16).to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    for v in vectors {
        for x in v {
            w.write_all(&x.to_le_bytes())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_is_aligned_and_data_follows() {
        let mut buf = Vec::new();
        write_npy(&mut buf, &[vec![1.0, 2.0], vec![3.0, 4.0]], 2).unwrap();
        let header_len = u16::from_le_bytes([buf[8], buf[9]]) as usize;
        assert_eq!((10 + header_len) % 64, 0);
        let header = std::str::from_utf8(&buf[10..10 + header_len]).unwrap();
        assert!(header.contains("'shape': (2, 2)") && header.ends_with('\n'));
        assert_eq!(&buf[10 + header_len..], [1f32, 2.0, 3.0, 4.0].map(f32::to_le_bytes).concat());
    }
}
