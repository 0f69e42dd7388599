//! The request fields both generation endpoints share (sampling, stops, output options),
//! read from the same JSON body as the endpoint's own fields.

use super::common::{StopParam, StreamOptions};
use crate::logit_bias::LogitBias;
use serde::{Deserialize, Deserializer};

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct SamplingFields {
    pub model: Option<String>,
    pub n: Option<i64>,
    #[serde(deserialize_with = "seed_in_i64")]
    pub seed: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub echo: Option<bool>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub logit_bias: Option<LogitBias>,
    pub stop: Option<StopParam>,
    pub stop_token_ids: Option<Vec<i64>>,
    pub include_stop_str_in_output: Option<bool>,
    pub ignore_eos: Option<bool>,
    pub min_tokens: Option<i64>,
    pub skip_special_tokens: Option<bool>,
    pub allowed_token_ids: Option<Vec<i64>>,
    pub bad_words: Option<Vec<String>>,
    pub prompt_logprobs: Option<i64>,
    pub add_special_tokens: Option<bool>,
    pub priority: Option<i64>,
    pub request_id: Option<String>,
    pub cache_salt: Option<String>,
    pub truncate_prompt_tokens: Option<i64>,
    pub truncation_side: Option<String>,
    pub return_token_ids: Option<bool>,
    pub return_tokens_as_token_ids: Option<bool>,
    pub use_beam_search: Option<bool>,
    pub logprob_token_ids: Option<Vec<i64>>,
    pub length_penalty: Option<f64>,
    // Accepted and type-checked, without effect on the output.
    pub user: Option<String>,
    pub session_id: Option<String>,
}

/// `seed` as vLLM bounds it (a torch long), refused in pydantic's words when outside i64, so
/// that clients matching on vLLM's message see the same one. An integral float is taken as an
/// integer, as pydantic's lax mode does.
fn seed_in_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    use serde::de::Error;
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else { return Ok(None) };
    if let Some(v) = n.as_i64() {
        return Ok(Some(v));
    }
    let above = || D::Error::custom(format!("Input should be less than or equal to {}", i64::MAX));
    let below = || D::Error::custom(format!("Input should be greater than or equal to {}", i64::MIN));
    if n.is_u64() {
        return Err(above());
    }
    let f = n.as_f64().unwrap_or(f64::NAN);
    if f.fract() != 0.0 || !f.is_finite() {
        return Err(D::Error::custom("Input should be a valid integer, got a number with a fractional part"));
    }
    // An integer outside i64 reaches here as the nearest f64, which may be ±2^63 itself: i64::MAX
    // as f64 rounds up to 2^63 (out of range), and -2^63 - 1 rounds to -2^63 = i64::MIN. So -2^63
    // is refused here too; only a float literal of exactly -2^63 (`-9223372036854775808.0`),
    // which pydantic would take, is refused with it.
    match f {
        f if f >= i64::MAX as f64 => Err(above()),
        f if f <= i64::MIN as f64 => Err(below()),
        f => Ok(Some(f as i64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(json: &str) -> Result<Option<i64>, String> {
        serde_json::from_str::<SamplingFields>(&format!("{{\"seed\": {json}}}"))
            .map(|f| f.seed)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn seed_outside_i64_is_refused_in_vllms_words() {
        assert_eq!(seed("null"), Ok(None));
        assert_eq!(seed("-9223372036854775808"), Ok(Some(i64::MIN)));
        assert_eq!(seed("9223372036854775807"), Ok(Some(i64::MAX)));
        assert_eq!(seed("42.0"), Ok(Some(42)));
        for (bad, words) in [
            ("9223372036854775808", "less than or equal to 9223372036854775807"),
            ("100000000000000000000", "less than or equal to 9223372036854775807"),
            ("-9223372036854775809", "greater than or equal to -9223372036854775808"),
            ("1.5", "fractional part"),
        ] {
            let e = seed(bad).unwrap_err();
            assert!(e.contains(words), "{bad}: {e}");
        }
        assert!(seed("\"7\"").is_err());
    }
}
