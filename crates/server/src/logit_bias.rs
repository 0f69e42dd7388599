//! `logit_bias` as vLLM reads it: keys are token ids written as Python's `int()` reads them
//! (surrounding whitespace, a sign and `_` between digits allowed; a later key naming the same
//! id wins, as in the dict vLLM builds), values are clamped to [-100, 100], and ids outside the
//! vocabulary are refused all together in vLLM's words. Keys keep the request's order, so the
//! message lists them as vLLM does.

use crate::errors::{ApiError, ApiResult};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// The request's `logit_bias` object, in the order it was written.
#[derive(Clone, Debug, Default)]
pub struct LogitBias(pub Vec<(String, f64)>);

impl<'de> Deserialize<'de> for LogitBias {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Pairs;
        impl<'de> Visitor<'de> for Pairs {
            type Value = LogitBias;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of token ids to numbers")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<LogitBias, A::Error> {
                let mut out = Vec::new();
                while let Some(pair) = m.next_entry::<String, f64>()? {
                    out.push(pair);
                }
                Ok(LogitBias(out))
            }
        }
        d.deserialize_map(Pairs)
    }
}

impl LogitBias {
    /// The engine's (token id, bias) list, sorted by id, for a vocabulary of `vocab_size`.
    pub fn to_engine(&self, vocab_size: usize) -> ApiResult<Vec<(u32, f32)>> {
        let mut by_id: Vec<(i128, f32)> = Vec::with_capacity(self.0.len());
        for (key, bias) in &self.0 {
            let id = python_int(key).ok_or_else(|| {
                ApiError::invalid(
                    "logit_bias",
                    format!("invalid literal for int() with base 10: {}", vllm_rs_frontend::py_str_repr(key)),
                )
            })?;
            let bias = bias.clamp(-100.0, 100.0) as f32;
            match by_id.iter_mut().find(|(i, _)| *i == id) {
                Some(slot) => slot.1 = bias,
                None => by_id.push((id, bias)),
            }
        }
        let outside: Vec<String> =
            by_id.iter().filter(|(id, _)| *id < 0 || *id >= vocab_size as i128).map(|(id, _)| id.to_string()).collect();
        if !outside.is_empty() {
            return Err(ApiError::invalid(
                "logit_bias",
                format!(
                    "token_id(s) [{}] in logit_bias contain out-of-vocab token ids. Vocabulary size: {vocab_size}",
                    outside.join(", ")
                ),
            ));
        }
        let mut out: Vec<(u32, f32)> = by_id.into_iter().map(|(id, b)| (id as u32, b)).collect();
        out.sort_by_key(|b| b.0);
        Ok(out)
    }
}

/// Python's `int(s)` for base 10; `None` where Python raises. Too many digits for an i128
/// saturate (such an id is outside any vocabulary either way).
fn python_int(s: &str) -> Option<i128> {
    let t = s.trim();
    let (negative, digits) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let ok_underscores = !digits.starts_with('_') && !digits.ends_with('_') && !digits.contains("__");
    if digits.is_empty() || !ok_underscores || !digits.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
        return None;
    }
    let magnitude = digits
        .bytes()
        .filter(u8::is_ascii_digit)
        .fold(0i128, |n, b| n.saturating_mul(10).saturating_add((b - b'0') as i128));
    Some(if negative { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(json: &str, vocab: usize) -> Result<Vec<(u32, f32)>, String> {
        let lb: LogitBias = serde_json::from_str(json).map_err(|e| e.to_string())?;
        lb.to_engine(vocab).map_err(|e| e.message)
    }

    #[test]
    fn keys_read_as_python_reads_them() {
        assert_eq!(engine(r#"{" 7 ": 1, "+3": 250, "1_0": -1.5}"#, 20), Ok(vec![(3, 100.0), (7, 1.0), (10, -1.5)]));
        // The later key naming an id wins, as in the dict vLLM builds.
        assert_eq!(engine(r#"{"5": 1, "05": 2}"#, 20), Ok(vec![(5, 2.0)]));
        for bad in ["abc", "", " ", "1.0", "_1", "1_", "1__0", "0x10", "--1"] {
            let e = engine(&format!(r#"{{"{bad}": 1}}"#), 20).unwrap_err();
            assert_eq!(e, format!("invalid literal for int() with base 10: '{bad}'"));
        }
        assert_eq!(engine(r#"{"it's": 1}"#, 20).unwrap_err(), r#"invalid literal for int() with base 10: "it's""#);
    }

    #[test]
    fn ids_outside_the_vocabulary_are_listed_in_request_order() {
        let e = engine(r#"{"25": 1, "3": 1, "-1": 2, "99999999999999999999999": 0}"#, 20).unwrap_err();
        assert_eq!(
            e,
            "token_id(s) [25, -1, 99999999999999999999999] in logit_bias contain out-of-vocab token ids. \
             Vocabulary size: 20"
        );
        assert!(engine(r#"{"1": "x"}"#, 20).is_err(), "a value that is not a number");
    }
}
