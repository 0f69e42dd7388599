//! Speculative decoding: `--speculative-config` as vLLM takes it, and the n-gram proposer
//! (prompt lookup); the draft-model proposer is in `draft_model.rs`, the MTP one in
//! `mtp_drafter.rs`. Drafts are verified by the
//! target model in the next step; the runner returns the accepted drafts plus the model's own
//! next token (see [`crate::sampler::sample_checking_draft`]).

use serde::Deserialize;

/// vLLM's `SpeculativeConfig`, the fields that apply to the methods implemented here.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpeculativeConfig {
    /// `ngram` (prompt lookup, no extra weights), `draft_model` (a smaller model with the
    /// same vocabulary), `mtp` (the checkpoint's multi-token-prediction layer; vLLM's older
    /// names `deepseek_mtp` etc. mean the same), `eagle` (an EAGLE-1 head in `model`) or
    /// `eagle3` (an EAGLE-3 head in `model`);
    /// absent with a `model`, `draft_model` (vLLM's inference).
    #[serde(default)]
    pub method: String,
    /// The draft model (`draft_model`): a local folder, GGUF file, catalog name or repo id;
    /// the EAGLE head's folder (`eagle`, `eagle3`); for `mtp`, the checkpoint holding the MTP layer
    /// (default: the target's).
    #[serde(default)]
    pub model: Option<String>,
    /// Draft tokens proposed per step.
    pub num_speculative_tokens: usize,
    /// Shortest and longest suffix n-gram looked up in the request's own tokens. As vLLM sets
    /// them: one given, the other is the same; neither, both 5 ([`SpeculativeConfig::parse`]).
    #[serde(default, deserialize_with = "given")]
    pub prompt_lookup_min: usize,
    #[serde(default, deserialize_with = "given")]
    pub prompt_lookup_max: usize,
    /// No drafts while more requests than this run (verification then costs more compute than
    /// it saves: decode at that batch size is no longer bound by weight reads). Default 4, where
    /// n-gram drafts stopped paying on two Zen 5 cores (BENCHMARKS.md: 1.45x at 1 request, 1.02x
    /// at 4, 0.85x at 8); `null` keeps drafting at any batch size (vLLM's default).
    #[serde(default = "four")]
    pub disable_by_batch_size: Option<usize>,
    /// `draft_model` only, and not a vLLM key: a request's drafts stop before the first token
    /// the draft gives a probability under this (llama.cpp's `--draft-p-min`), since such drafts
    /// are mostly rejected and each costs a draft step and a verified row. Absent:
    /// [`DEFAULT_DRAFT_P_MIN`]; 0: always `num_speculative_tokens` drafts, as vLLM drafts.
    #[serde(default)]
    pub draft_p_min: Option<f32>,
}

/// The draft model's `draft_p_min` when none is given (llama.cpp's default).
pub const DEFAULT_DRAFT_P_MIN: f32 = 0.75;

fn four() -> Option<usize> {
    Some(4)
}

/// A given n-gram length (0 stands for "not given", so a given 0 is refused).
fn given<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    match usize::deserialize(d)? {
        0 => Err(serde::de::Error::custom("prompt_lookup_min and prompt_lookup_max must be at least 1")),
        n => Ok(n),
    }
}

/// vLLM's n-gram lengths when neither is given.
const DEFAULT_NGRAM: usize = 5;

/// vLLM's per-model MTP method names, which it maps to `mtp`.
const MTP_ALIASES: &[&str] = &[
    "deepseek_mtp",
    "mimo_mtp",
    "glm4_moe_mtp",
    "ernie_mtp",
    "qwen3_next_mtp",
    "longcat_flash_mtp",
    "pangu_ultra_moe_mtp",
];

/// The most draft tokens one step may verify per request.
pub const MAX_SPECULATIVE_TOKENS: usize = 32;

impl SpeculativeConfig {
    /// Parses `--speculative-config`: a JSON object, or `key=value` pairs separated by commas
    /// (`method=ngram,num_speculative_tokens=4`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let json = if text.trim_start().starts_with('{') {
            serde_json::from_str::<serde_json::Value>(text).map_err(|e| format!("not valid JSON: {e}"))?
        } else {
            let mut map = serde_json::Map::new();
            for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
                let (k, v) = pair.split_once('=').ok_or_else(|| format!("{pair:?} is not key=value"))?;
                let v = v.trim();
                // A non-finite float would become JSON null, read as "not given": keep it text,
                // which the field's type then refuses.
                let value = match (v.parse::<u64>(), v.parse::<f64>()) {
                    (Ok(n), _) => n.into(),
                    (_, Ok(x)) if x.is_finite() => x.into(),
                    _ => v.into(),
                };
                map.insert(k.trim().to_string(), value);
            }
            map.into()
        };
        let mut c: SpeculativeConfig = serde_json::from_value(json).map_err(|e| e.to_string())?;
        if c.method.is_empty() && c.model.is_some() {
            c.method = "draft_model".into();
        }
        (c.prompt_lookup_min, c.prompt_lookup_max) = match (c.prompt_lookup_min, c.prompt_lookup_max) {
            (0, 0) => (DEFAULT_NGRAM, DEFAULT_NGRAM),
            (0, n) | (n, 0) => (n, n),
            given => given,
        };
        if MTP_ALIASES.contains(&c.method.as_str()) {
            c.method = "mtp".into(); // as vLLM 0.33 renames them
        }
        c.validate()?;
        Ok(c)
    }

    fn validate(&self) -> Result<(), String> {
        match (self.method.as_str(), &self.model) {
            ("ngram", None) | ("draft_model" | "eagle" | "eagle3", Some(_)) | ("mtp", _) => {}
            ("eagle", None) => return Err("method \"eagle\" needs \"model\": the EAGLE-1 head".into()),
            ("eagle3", None) => return Err("method \"eagle3\" needs \"model\": the EAGLE-3 head".into()),
            ("ngram", Some(_)) => return Err("method \"ngram\" takes no model (drop \"model\")".into()),
            ("draft_model", None) => return Err("method \"draft_model\" needs \"model\": the draft model".into()),
            ("", None) => return Err("give \"method\" (ngram) or a draft \"model\"".into()),
            ("medusa" | "mlp_speculator" | "suffix", _) => {
                return Err(format!(
                    "method {:?} is not implemented yet; available: ngram, draft_model, mtp, eagle, eagle3",
                    self.method
                ));
            }
            (m, _) => return Err(format!("unknown method {m:?}; available: ngram, draft_model, mtp, eagle, eagle3")),
        }
        if !(1..=MAX_SPECULATIVE_TOKENS).contains(&self.num_speculative_tokens) {
            return Err(format!(
                "num_speculative_tokens must be between 1 and {MAX_SPECULATIVE_TOKENS}, got {}",
                self.num_speculative_tokens
            ));
        }
        match self.draft_p_min {
            Some(_) if !self.is_draft_model() => {
                return Err(format!("draft_p_min applies to method \"draft_model\" only, not {:?}", self.method));
            }
            Some(p) if !(0.0..=1.0).contains(&p) => {
                return Err(format!("draft_p_min must be between 0 and 1, got {p}"));
            }
            _ => {}
        }
        if self.prompt_lookup_min == 0 || self.prompt_lookup_min > self.prompt_lookup_max {
            return Err(format!(
                "need 1 <= prompt_lookup_min ({}) <= prompt_lookup_max ({})",
                self.prompt_lookup_min, self.prompt_lookup_max
            ));
        }
        Ok(())
    }

    /// The probability under which a draft model's drafts stop ([`SpeculativeConfig::draft_p_min`]).
    pub fn draft_p_min(&self) -> f32 {
        self.draft_p_min.unwrap_or(DEFAULT_DRAFT_P_MIN)
    }

    pub fn is_draft_model(&self) -> bool {
        self.method == "draft_model"
    }

    pub fn is_mtp(&self) -> bool {
        self.method == "mtp"
    }

    pub fn is_eagle(&self) -> bool {
        self.method == "eagle"
    }

    pub fn is_eagle3(&self) -> bool {
        self.method == "eagle3"
    }

    /// Whether drafts come from weights (a draft model, an MTP layer, an EAGLE head), which
    /// keep K/V of their own in lookahead slots past each request's scheduled tokens.
    pub fn has_weights(&self) -> bool {
        self.is_draft_model() || self.is_mtp() || self.is_eagle() || self.is_eagle3()
    }

    /// N-gram drafts for a request whose tokens so far are `tokens`, at most `limit` of them.
    pub fn propose(&self, tokens: &[u32], limit: usize) -> Vec<u32> {
        propose_ngram(tokens, self.num_speculative_tokens.min(limit), self.prompt_lookup_min, self.prompt_lookup_max)
    }
}

/// Prompt lookup: the longest suffix of `tokens` (between `min_n` and `max_n` long) that also
/// occurs earlier; the up to `k` tokens that followed its latest earlier occurrence.
pub fn propose_ngram(tokens: &[u32], k: usize, min_n: usize, max_n: usize) -> Vec<u32> {
    let len = tokens.len();
    if k == 0 {
        return Vec::new();
    }
    for n in (min_n..=max_n.min(len.saturating_sub(1))).rev() {
        let suffix = &tokens[len - n..];
        if let Some(i) = (0..len - n).rev().find(|&i| &tokens[i..i + n] == suffix) {
            return tokens[i + n..(i + n + k).min(len)].to_vec();
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_suffix_match_wins_and_its_latest_occurrence() {
        //            0  1  2  3  4  5  6  7  8  9
        let t = [1, 2, 3, 9, 2, 3, 4, 5, 1, 2, 3];
        // Suffix [1, 2, 3] occurs at 0 → proposes what followed: 9, 2, 3.
        assert_eq!(propose_ngram(&t, 3, 1, 3), vec![9, 2, 3]);
        // With n ≤ 2 the latest [2, 3] is at 4 → 4, 5.
        assert_eq!(propose_ngram(&t, 2, 1, 2), vec![4, 5]);
        // Drafts stop at the end of the known tokens.
        assert_eq!(propose_ngram(&[7, 8, 7], 5, 1, 3), vec![8, 7]);
        assert_eq!(propose_ngram(&[1, 2, 3], 4, 1, 3), Vec::<u32>::new(), "no earlier occurrence");
        assert_eq!(propose_ngram(&[4], 4, 1, 3), Vec::<u32>::new());
    }

    #[test]
    fn config_parses_json_and_key_values_and_refuses_what_it_cannot_do() {
        let a = SpeculativeConfig::parse(r#"{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}"#)
            .unwrap();
        let b = SpeculativeConfig::parse("method=ngram, num_speculative_tokens=4, prompt_lookup_max=3").unwrap();
        assert_eq!(a, b);
        // As vLLM fills them in: the one not given is the one given; neither, both 5.
        assert_eq!((a.prompt_lookup_min, a.disable_by_batch_size), (3, Some(4)));
        let lookup = |json: &str| {
            let c = SpeculativeConfig::parse(json).unwrap();
            (c.prompt_lookup_min, c.prompt_lookup_max)
        };
        assert_eq!(lookup(r#"{"method": "ngram", "num_speculative_tokens": 4}"#), (5, 5));
        assert_eq!(lookup(r#"{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2}"#), (2, 2));
        assert_eq!(
            lookup(
                r#"{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 4}"#
            ),
            (1, 4)
        );
        let d = SpeculativeConfig::parse(r#"{"model": "qwen05", "num_speculative_tokens": 3}"#).unwrap();
        assert!(d.is_draft_model() && d.model.as_deref() == Some("qwen05"));
        assert_eq!(d.draft_p_min(), DEFAULT_DRAFT_P_MIN);
        let d = SpeculativeConfig::parse("model=qwen05,num_speculative_tokens=3,draft_p_min=0").unwrap();
        assert_eq!(d.draft_p_min(), 0.0);
        let d = SpeculativeConfig::parse("model=qwen05,num_speculative_tokens=3,draft_p_min=0.5").unwrap();
        assert_eq!(d.draft_p_min(), 0.5);
        let m = SpeculativeConfig::parse("method=deepseek_mtp,num_speculative_tokens=2").unwrap();
        assert!(m.is_mtp() && m.has_weights() && m.model.is_none());
        for (bad, says) in [
            (r#"{"method": "ngram", "num_speculative_tokens": 0}"#, "between 1 and"),
            (r#"{"method": "ngram", "num_speculative_tokens": 100}"#, "between 1 and"),
            (r#"{"method": "lookahead", "num_speculative_tokens": 2}"#, "unknown method"),
            (r#"{"method": "eagle", "num_speculative_tokens": 2}"#, "needs \"model\": the EAGLE-1 head"),
            (r#"{"method": "medusa", "model": "m", "num_speculative_tokens": 2}"#, "not implemented"),
            (r#"{"method": "eagle3", "num_speculative_tokens": 2}"#, "needs \"model\""),
            (r#"{"method": "mtp", "num_speculative_tokens": 0}"#, "between 1 and"),
            (r#"{"method": "draft_model", "num_speculative_tokens": 2}"#, "needs \"model\""),
            (r#"{"method": "ngram", "model": "m", "num_speculative_tokens": 2}"#, "takes no model"),
            (r#"{"num_speculative_tokens": 2}"#, "give \"method\""),
            (r#"{"method": "ngram", "num_speculative_tokens": 2, "colour": 1}"#, "unknown field"),
            (r#"{"method": "ngram", "num_speculative_tokens": 2, "draft_p_min": 0.5}"#, "draft_model\" only"),
            (r#"{"model": "m", "num_speculative_tokens": 2, "draft_p_min": 1.5}"#, "between 0 and 1"),
            (
                r#"{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2}"#,
                "<=",
            ),
            ("method=ngram,num_speculative_tokens", "key=value"),
            ("model=m,num_speculative_tokens=2,draft_p_min=nan", "invalid type"),
            ("method=ngram,num_speculative_tokens=2,disable_by_batch_size=inf", "invalid type"),
            (r#"{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 0}"#, "at least 1"),
        ] {
            let e = SpeculativeConfig::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
