//! Logprobs in the shapes vLLM returns them: completions' `tokens` / `token_logprobs` /
//! `top_logprobs` / `text_offset`, chat's `content[{token, logprob, bytes, top_logprobs}]`, and
//! `prompt_logprobs` as a list of `{token_id: {logprob, rank, decoded_token}}`.
//!
//! vLLM keeps one dict per position in the engine's order: the chosen token first, then the top
//! candidates best first (the chosen one appears once). Chat returns the first `top_logprobs`
//! entries of it, completions the first `logprobs + 1`, keyed by token text (a later entry with
//! the same text overwrites the value in place, as a Python dict does).

use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::HashMap;
use vllm_rs_engine::TokenLogprobs;
use vllm_rs_frontend::{Tokenizer, token_text};

/// What OpenAI uses for `-inf`.
const FLOOR: f32 = -9999.0;

fn clamp(lp: f32) -> f64 {
    if lp.is_nan() { FLOOR as f64 } else { lp.max(FLOOR) as f64 }
}

/// Token texts for logprobs (cached per request), or `token_id:N` placeholders.
pub struct TokenNamer<'a> {
    tokenizer: &'a Tokenizer,
    as_ids: bool,
    cache: HashMap<u32, String>,
}

impl<'a> TokenNamer<'a> {
    pub fn new(tokenizer: &'a Tokenizer, as_ids: bool) -> Self {
        TokenNamer { tokenizer, as_ids, cache: HashMap::new() }
    }

    pub fn name(&mut self, id: u32) -> String {
        if self.as_ids {
            return format!("token_id:{id}");
        }
        self.cache.entry(id).or_insert_with(|| token_text(self.tokenizer, id)).clone()
    }
}

/// (token id, logprob, rank) in vLLM's per-position order.
pub fn engine_order(lp: &TokenLogprobs) -> Vec<(u32, f32, usize)> {
    let mut out = Vec::with_capacity(lp.top.len() + 1);
    out.push((lp.token_id, lp.logprob, lp.rank));
    for (i, &(id, v)) in lp.top.iter().enumerate() {
        if id != lp.token_id {
            out.push((id, v, i + 1));
        }
    }
    out
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct CompletionLogprobs {
    pub text_offset: Vec<usize>,
    pub token_logprobs: Vec<Option<f64>>,
    pub tokens: Vec<String>,
    pub top_logprobs: Vec<Option<Map<String, Value>>>,
}

/// Completions logprobs for `token_ids` (prompt positions may have no entry: `None`).
/// `num_top` is the request's `logprobs`; offsets start at `initial_offset` (characters).
pub fn completion_logprobs(
    token_ids: &[u32],
    entries: &[Option<&TokenLogprobs>],
    num_top: usize,
    namer: &mut TokenNamer,
    initial_offset: usize,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    let mut offset = initial_offset;
    for (i, &id) in token_ids.iter().enumerate() {
        let token = match entries.get(i).copied().flatten() {
            None => {
                let t = namer.name(id);
                out.token_logprobs.push(None);
                out.top_logprobs.push(None);
                t
            }
            Some(lp) => {
                let t = namer.name(id);
                out.token_logprobs.push(Some(clamp(lp.logprob)));
                let mut top = Map::new();
                for (tid, v, _) in engine_order(lp).into_iter().take(num_top + 1) {
                    top.insert(namer.name(tid), Value::from(clamp(v)));
                }
                out.top_logprobs.push(Some(top));
                t
            }
        };
        out.text_offset.push(offset);
        offset += token.chars().count();
        out.tokens.push(token);
    }
    out
}

impl CompletionLogprobs {
    /// Where the next token's text starts (for the next streamed chunk).
    pub fn next_offset(&self, current: usize) -> usize {
        match (self.text_offset.last(), self.tokens.last()) {
            (Some(o), Some(t)) => o + t.chars().count(),
            _ => current,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatLogprob {
    pub token: String,
    pub logprob: f64,
    pub bytes: Option<Vec<u8>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatLogprobContent {
    pub token: String,
    pub logprob: f64,
    pub bytes: Option<Vec<u8>>,
    pub top_logprobs: Vec<ChatLogprob>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ChatLogprobs {
    pub content: Option<Vec<ChatLogprobContent>>,
}

/// Chat logprobs for generated tokens; `top_logprobs` as the request gave it.
pub fn chat_logprobs(
    token_ids: &[u32],
    entries: &[TokenLogprobs],
    top_logprobs: usize,
    namer: &mut TokenNamer,
) -> ChatLogprobs {
    let mut content = Vec::with_capacity(token_ids.len());
    for (i, &id) in token_ids.iter().enumerate() {
        let token = namer.name(id);
        let bytes = Some(token.as_bytes().to_vec());
        match entries.get(i) {
            None => content.push(ChatLogprobContent { token, logprob: FLOOR as f64, bytes, top_logprobs: Vec::new() }),
            Some(lp) => {
                let top = engine_order(lp)
                    .into_iter()
                    .take(top_logprobs)
                    .map(|(tid, v, _)| {
                        let t = namer.name(tid);
                        ChatLogprob { bytes: Some(t.as_bytes().to_vec()), token: t, logprob: clamp(v) }
                    })
                    .collect();
                content.push(ChatLogprobContent { token, logprob: clamp(lp.logprob), bytes, top_logprobs: top });
            }
        }
    }
    ChatLogprobs { content: Some(content) }
}

/// `prompt_logprobs`: `null` for the first position, then `{id: {logprob, rank, decoded_token}}`.
pub fn prompt_logprobs_json(plp: &[Option<TokenLogprobs>], namer: &mut TokenNamer) -> Value {
    let items = plp
        .iter()
        .map(|p| match p {
            None => Value::Null,
            Some(lp) => {
                let mut m = Map::new();
                for (id, v, rank) in engine_order(lp) {
                    let entry = serde_json::json!({
                        "logprob": clamp(v),
                        "rank": rank,
                        "decoded_token": namer.name(id),
                    });
                    m.insert(id.to_string(), entry);
                }
                Value::Object(m)
            }
        })
        .collect();
    Value::Array(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lp(token_id: u32, logprob: f32, rank: usize, top: &[(u32, f32)]) -> TokenLogprobs {
        TokenLogprobs { token_id, logprob, rank, top: top.to_vec() }
    }

    #[test]
    fn chosen_token_first_and_once() {
        let greedy = lp(5, -0.1, 1, &[(5, -0.1), (7, -2.0)]);
        assert_eq!(engine_order(&greedy), vec![(5, -0.1, 1), (7, -2.0, 2)]);
        let sampled = lp(9, -5.0, 40, &[(5, -0.1), (7, -2.0)]);
        assert_eq!(engine_order(&sampled), vec![(9, -5.0, 40), (5, -0.1, 1), (7, -2.0, 2)]);
    }

    #[test]
    fn clamps_minus_infinity() {
        assert_eq!(clamp(f32::NEG_INFINITY), -9999.0);
        assert_eq!(clamp(-1.5), -1.5);
    }
}
