//! [`GenerationConfig`]: end-of-generation tokens and the sampling defaults a model ships with,
//! from `generation_config.json` or from GGUF metadata.
//!
//! vLLM reads `temperature`, `top_p`, `top_k`, `min_p`, `repetition_penalty` and `max_new_tokens`
//! from generation_config.json as default sampling params, and stops on its `eos_token_id`(s).
//! For a GGUF file the end-of-generation set is llama.cpp's: the eos/eot/eom ids, the FIM
//! pad/repo/separator tokens, and every token whose text llama.cpp treats as end of generation.

use crate::error::{Error, Result};
use serde_json::Value;
use std::path::Path;
use vllm_rs_formats::gguf::{GgufFile, Value as GgufValue};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationConfig {
    pub bos_token_id: Option<u32>,
    /// Tokens that end generation; the model's main EOS first.
    pub eos_token_ids: Vec<u32>,
    pub pad_token_id: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub max_new_tokens: Option<u64>,
}

impl GenerationConfig {
    /// `dir/generation_config.json`, or `None` when the directory has none.
    pub fn from_model_dir(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join("generation_config.json");
        if !path.exists() {
            return Ok(None);
        }
        Self::from_file(&path).map(Some)
    }

    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let json: Value =
            serde_json::from_str(&text).map_err(|e| Error::config(path, format!("not valid JSON: {e}")))?;
        Self::from_json(&json).map_err(|msg| Error::config(path, msg))
    }

    pub fn from_json(json: &Value) -> std::result::Result<Self, String> {
        let obj = json.as_object().ok_or("expected a JSON object")?;
        let get = |k: &str| obj.get(k).filter(|v| !v.is_null());
        let id = |k: &str| -> std::result::Result<Option<u32>, String> {
            get(k).map(|v| token_id(v).ok_or_else(|| format!("{k}: expected a token id, got {v}"))).transpose()
        };
        let float = |k: &str| -> std::result::Result<Option<f64>, String> {
            get(k).map(|v| v.as_f64().ok_or_else(|| format!("{k}: expected a number, got {v}"))).transpose()
        };
        let int = |k: &str| -> std::result::Result<Option<i64>, String> {
            get(k).map(|v| v.as_i64().ok_or_else(|| format!("{k}: expected an integer, got {v}"))).transpose()
        };
        let eos_token_ids = match get("eos_token_id") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| token_id(v).ok_or_else(|| format!("eos_token_id: expected token ids, got {v}")))
                .collect::<std::result::Result<_, _>>()?,
            Some(v) => {
                vec![token_id(v).ok_or_else(|| format!("eos_token_id: expected a token id or a list, got {v}"))?]
            }
        };
        let max_new_tokens = int("max_new_tokens")?
            .map(|n| u64::try_from(n).map_err(|_| format!("max_new_tokens: {n} is negative")))
            .transpose()?;
        Ok(GenerationConfig {
            bos_token_id: id("bos_token_id")?,
            eos_token_ids,
            pad_token_id: id("pad_token_id")?,
            temperature: float("temperature")?,
            top_p: float("top_p")?,
            top_k: int("top_k")?,
            min_p: float("min_p")?,
            repetition_penalty: float("repetition_penalty")?,
            max_new_tokens,
        })
    }

    /// From GGUF metadata: special ids, llama.cpp's end-of-generation set, and the
    /// `general.sampling.*` defaults when the file has them.
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let err = |msg: String| Error::config(&g.path, msg);
        let tokens: Vec<&str> = match g.get("tokenizer.ggml.tokens").and_then(GgufValue::as_array) {
            Some(arr) => arr
                .iter()
                .map(GgufValue::as_str)
                .collect::<Option<_>>()
                .ok_or_else(|| err("tokenizer.ggml.tokens holds non-strings".into()))?,
            None => return Err(err("metadata key tokenizer.ggml.tokens is missing".into())),
        };
        let id = |key: &str| -> Result<Option<u32>> {
            match g.get(key) {
                None => Ok(None),
                Some(v) => match v.as_u64() {
                    Some(id) if (id as usize) < tokens.len() => Ok(Some(id as u32)),
                    Some(id) => Err(err(format!("{key} = {id} is outside the vocabulary of {} tokens", tokens.len()))),
                    None => Err(err(format!("{key} is not an integer"))),
                },
            }
        };
        let find = |texts: &[&str]| tokens.iter().position(|t| texts.contains(t)).map(|i| i as u32);
        let eos = id("tokenizer.ggml.eos_token_id")?;
        let mut eog: Vec<u32> = Vec::new();
        // FIM tokens that llama.cpp finds by text when the file does not name them.
        let fim = [
            ("tokenizer.ggml.fim_pad_token_id", FIM_PAD_TEXTS),
            ("tokenizer.ggml.fim_rep_token_id", FIM_REP_TEXTS),
            ("tokenizer.ggml.fim_sep_token_id", FIM_SEP_TEXTS),
        ];
        for (key, texts) in fim {
            eog.extend(id(key)?.or_else(|| find(texts)));
        }
        eog.extend(tokens.iter().enumerate().filter(|(_, t)| EOG_TEXTS.contains(t)).map(|(i, _)| i as u32));
        eog.extend(eos);
        eog.extend(id("tokenizer.ggml.eot_token_id")?);
        eog.extend(id("tokenizer.ggml.eom_token_id")?);
        eog.sort_unstable();
        eog.dedup();
        let has = |ids: &[u32], text: &str| ids.iter().any(|&i| tokens[i as usize] == text);
        // llama.cpp: with gpt-oss's <|return|>/<|call|> (or solar-open's <|calls|>/<|flush|>),
        // <|end|> ends a message, not the generation.
        if (has(&eog, "<|return|>") || has(&eog, "<|flush|>")) && (has(&eog, "<|call|>") || has(&eog, "<|calls|>")) {
            eog.retain(|&i| tokens[i as usize] != "<|end|>");
        }
        // llama.cpp: Gemma 4 has a </s> that is ordinary text.
        if has(&eog, "<|tool_response>") {
            eog.retain(|&i| tokens[i as usize] != "</s>");
        }
        let mut eos_token_ids: Vec<u32> = eos.into_iter().collect();
        eos_token_ids.extend(eog.into_iter().filter(|&i| Some(i) != eos));
        let num = |key: &str| g.get(key).and_then(GgufValue::as_f64);
        Ok(GenerationConfig {
            bos_token_id: id("tokenizer.ggml.bos_token_id")?,
            eos_token_ids,
            pad_token_id: id("tokenizer.ggml.padding_token_id")?,
            temperature: num("general.sampling.temp"),
            top_p: num("general.sampling.top_p"),
            top_k: g.get("general.sampling.top_k").and_then(GgufValue::as_i64),
            min_p: num("general.sampling.min_p"),
            repetition_penalty: num("general.sampling.penalty_repeat"),
            max_new_tokens: None,
        })
    }
}

fn token_id(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

/// Token texts llama.cpp treats as end of generation (llama-vocab.cpp).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>",
    "[e~[",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn eos_as_int_or_list_and_sampling_defaults() {
        let c = GenerationConfig::from_json(&json!({
            "bos_token_id": 1, "eos_token_id": [2, 7], "pad_token_id": null,
            "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0, "repetition_penalty": 1.05,
            "max_new_tokens": 512, "do_sample": true
        }))
        .unwrap();
        assert_eq!(c.eos_token_ids, vec![2, 7]);
        assert_eq!((c.bos_token_id, c.pad_token_id), (Some(1), None));
        assert_eq!((c.temperature, c.top_p, c.top_k, c.min_p), (Some(0.6), Some(0.95), Some(20), Some(0.0)));
        assert_eq!((c.repetition_penalty, c.max_new_tokens), (Some(1.05), Some(512)));
        let single = GenerationConfig::from_json(&json!({"eos_token_id": 5})).unwrap();
        assert_eq!(single.eos_token_ids, vec![5]);
        assert_eq!(GenerationConfig::from_json(&json!({})).unwrap(), GenerationConfig::default());
    }

    #[test]
    fn wrong_types_name_the_field() {
        for (json, field) in [
            (json!({"eos_token_id": "2"}), "eos_token_id"),
            (json!({"eos_token_id": [1, -1]}), "eos_token_id"),
            (json!({"temperature": "hot"}), "temperature"),
            (json!({"top_k": 1.5}), "top_k"),
            (json!({"max_new_tokens": -1}), "max_new_tokens"),
        ] {
            let e = GenerationConfig::from_json(&json).unwrap_err();
            assert!(e.contains(field), "{e}");
        }
    }

    #[test]
    fn bad_json_names_the_file() {
        let dir = std::env::temp_dir().join(format!("vllm-rs-frontend-gc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(GenerationConfig::from_model_dir(&dir).unwrap(), None);
        std::fs::write(dir.join("generation_config.json"), "{\"eos_token_id\": [1,}").unwrap();
        let e = GenerationConfig::from_model_dir(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.contains("generation_config.json") && e.contains("not valid JSON"), "{e}");
    }
}
