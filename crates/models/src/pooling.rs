//! Sentence pooling as sentence-transformers and vLLM define it: which token states make the
//! sentence vector (mean, CLS, last token), and whether it is L2-normalized, read from the
//! model folder's `modules.json` / `1_Pooling/config.json` / `sentence_bert_config.json`.

use crate::error::{Error, Result};
use serde_json::Value;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolingType {
    /// Mean of every token's state.
    Mean,
    /// The first token's state (`[CLS]`).
    Cls,
    /// The last token's state (decoder embedders).
    Last,
}

impl PoolingType {
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_uppercase().as_str() {
            "MEAN" => Some(PoolingType::Mean),
            "CLS" => Some(PoolingType::Cls),
            "LAST" | "LASTTOKEN" | "LAST_TOKEN" => Some(PoolingType::Last),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PoolingType::Mean => "MEAN",
            PoolingType::Cls => "CLS",
            PoolingType::Last => "LAST",
        }
    }

    /// Pools `seq_len` rows of `hidden` (`seq_len × d`) into `out` (`d`).
    pub fn pool(self, hidden: &[f32], d: usize, out: &mut Vec<f32>) {
        let n = hidden.len() / d;
        out.clear();
        match self {
            PoolingType::Cls => out.extend_from_slice(&hidden[..d]),
            PoolingType::Last => out.extend_from_slice(&hidden[(n - 1) * d..]),
            PoolingType::Mean => {
                // Summed in f64 in token order: the same bits whatever else is in the batch.
                let mut acc = vec![0f64; d];
                for row in hidden.chunks_exact(d) {
                    acc.iter_mut().zip(row).for_each(|(a, &v)| *a += v as f64);
                }
                out.extend(acc.iter().map(|a| (a / n as f64) as f32));
            }
        }
    }
}

/// How a model's token states become a sentence vector.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolingConfig {
    pub pooling_type: PoolingType,
    /// L2-normalize the pooled vector (a `Normalize` module, or vLLM's default for embeddings).
    pub normalize: bool,
    /// sentence-transformers' `max_seq_length`, which caps the model length.
    pub max_seq_length: Option<usize>,
    /// Whether a request may shorten the vector (`dimensions`): `config.json`'s `is_matryoshka`
    /// or `matryoshka_dimensions` (which then lists the sizes allowed), as vLLM reads them.
    pub matryoshka: Option<Vec<usize>>,
}

impl PoolingConfig {
    /// `pooling_type` with normalization, nothing else known.
    pub fn defaults(pooling_type: PoolingType) -> Self {
        PoolingConfig { pooling_type, normalize: true, max_seq_length: None, matryoshka: None }
    }

    /// Reads the sentence-transformers files of `dir`; without them, `default` pooling with
    /// normalization (vLLM's defaults for an embedding model).
    pub fn read(dir: &Path, default: PoolingType) -> Result<Self> {
        let mut cfg = Self::defaults(default);
        if let Some(c) = read_json(&dir.join("config.json"))? {
            let dims = c.get("matryoshka_dimensions").and_then(Value::as_array);
            let dims: Vec<usize> = dims.into_iter().flatten().filter_map(Value::as_u64).map(|d| d as usize).collect();
            if !dims.is_empty() || c.get("is_matryoshka").and_then(Value::as_bool) == Some(true) {
                cfg.matryoshka = Some(dims);
            }
        }
        if let Some(v) = read_json(&dir.join("sentence_bert_config.json"))? {
            cfg.max_seq_length = v.get("max_seq_length").and_then(Value::as_u64).map(|n| n as usize);
        }
        let Some(modules) = read_json(&dir.join("modules.json"))? else { return Ok(cfg) };
        let modules = modules.as_array().cloned().unwrap_or_default();
        let kind = |m: &Value| m.get("type").and_then(Value::as_str).unwrap_or("").to_string();
        cfg.normalize = modules.iter().any(|m| kind(m).ends_with(".Normalize"));
        if let Some(m) = modules.iter().find(|m| kind(m).ends_with(".Pooling")) {
            let path = dir.join(m.get("path").and_then(Value::as_str).unwrap_or("")).join("config.json");
            let p = read_json(&path)?.ok_or_else(|| Error::file(&path, "missing (named by modules.json)"))?;
            cfg.pooling_type = pooling_mode(&p).map_err(|e| Error::file(&path, e))?;
        }
        Ok(cfg)
    }
}

/// The one pooling mode a sentence-transformers `Pooling` config switches on.
fn pooling_mode(p: &Value) -> std::result::Result<PoolingType, String> {
    let on = |k: &str| p.get(k).and_then(Value::as_bool).unwrap_or(false);
    let modes = [
        ("pooling_mode_mean_tokens", Some(PoolingType::Mean)),
        ("pooling_mode_cls_token", Some(PoolingType::Cls)),
        ("pooling_mode_lasttoken", Some(PoolingType::Last)),
        ("pooling_mode_max_tokens", None),
        ("pooling_mode_mean_sqrt_len_tokens", None),
        ("pooling_mode_weightedmean_tokens", None),
    ];
    let chosen: Vec<_> = modes.iter().filter(|(k, _)| on(k)).collect();
    match chosen.as_slice() {
        [(_, Some(t))] => Ok(*t),
        [(k, None)] => Err(format!("{k} is not supported (mean, CLS and last-token pooling are)")),
        [] => Err("no pooling mode is switched on".into()),
        _ => Err("several pooling modes at once are not supported".into()),
    }
}

fn read_json(path: &Path) -> Result<Option<Value>> {
    match std::fs::read_to_string(path) {
        Ok(s) => serde_json::from_str(&s).map(Some).map_err(|e| Error::file(path, format!("invalid JSON: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::file(path, e.to_string())),
    }
}

/// `v / max(‖v‖₂, 1e-12)` (torch's `F.normalize`).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x = (*x as f64 / norm) as f32);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_rows() {
        let h = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut out = Vec::new();
        PoolingType::Mean.pool(&h, 2, &mut out);
        assert_eq!(out, [3.0, 4.0]);
        PoolingType::Cls.pool(&h, 2, &mut out);
        assert_eq!(out, [1.0, 2.0]);
        PoolingType::Last.pool(&h, 2, &mut out);
        assert_eq!(out, [5.0, 6.0]);
        let mut v = [3.0, 4.0];
        normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
    }

    #[test]
    fn one_mode_must_be_on() {
        let p: Value = serde_json::json!({"pooling_mode_max_tokens": true});
        assert!(pooling_mode(&p).unwrap_err().contains("max_tokens"));
        let p: Value = serde_json::json!({"pooling_mode_cls_token": true});
        assert_eq!(pooling_mode(&p), Ok(PoolingType::Cls));
    }
}
