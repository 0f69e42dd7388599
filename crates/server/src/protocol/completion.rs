//! `/v1/completions` bodies.

use super::common::Usage;
use super::logprobs::CompletionLogprobs;
use serde::de::{self, SeqAccess, Unexpected, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The completion-only request fields (the shared ones are in `SamplingFields`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct CompletionRequest {
    pub prompt: Option<PromptInput>,
    pub logprobs: Option<i64>,
}

/// `prompt`: a text, a list of texts, a list of token ids, or a list of token-id lists (`[]`:
/// no texts). Token ids go straight into `u32` vectors: the form is told by the first element,
/// so nothing is buffered on the way.
#[derive(Clone, Debug)]
pub enum PromptInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

impl<'de> Deserialize<'de> for PromptInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PromptVisitor)
    }
}

struct PromptVisitor;

impl<'de> Visitor<'de> for PromptVisitor {
    type Value = PromptInput;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string, a list of strings, a list of token ids, or a list of token-id lists")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<PromptInput, E> {
        Ok(PromptInput::Text(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<PromptInput, E> {
        Ok(PromptInput::Text(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PromptInput, A::Error> {
        fn rest<'de, T: Deserialize<'de>, A: SeqAccess<'de>>(first: T, seq: &mut A) -> Result<Vec<T>, A::Error> {
            let mut out = vec![first];
            while let Some(x) = seq.next_element()? {
                out.push(x);
            }
            Ok(out)
        }
        Ok(match seq.next_element::<PromptElement>()? {
            None => PromptInput::Texts(Vec::new()),
            Some(PromptElement::Text(t)) => PromptInput::Texts(rest(t, &mut seq)?),
            Some(PromptElement::Token(t)) => PromptInput::Tokens(rest(t, &mut seq)?),
            Some(PromptElement::Tokens(t)) => PromptInput::TokenLists(rest(t, &mut seq)?),
        })
    }
}

/// The first element of a `prompt` list.
enum PromptElement {
    Text(String),
    Token(u32),
    Tokens(Vec<u32>),
}

impl<'de> Deserialize<'de> for PromptElement {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PromptElement;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string, a token id (0 to 4294967295) or a list of token ids")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PromptElement, E> {
                Ok(PromptElement::Text(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PromptElement, E> {
                u32::try_from(v).map(PromptElement::Token).map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PromptElement, E> {
                u32::try_from(v).map(PromptElement::Token).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PromptElement, A::Error> {
                let mut ids = Vec::new();
                while let Some(t) = seq.next_element::<u32>()? {
                    ids.push(t);
                }
                Ok(PromptElement::Tokens(ids))
            }
        }
        d.deserialize_any(V)
    }
}

/// vLLM's `stop_reason`: the stop string or the stop token id.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum StopReasonJson {
    Text(String),
    Token(u32),
}

impl From<&vllm_rs_frontend::StopReason> for StopReasonJson {
    fn from(r: &vllm_rs_frontend::StopReason) -> Self {
        match r {
            vllm_rs_frontend::StopReason::Text(s) => StopReasonJson::Text(s.clone()),
            vllm_rs_frontend::StopReason::TokenId(t) => StopReasonJson::Token(*t),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
    pub stop_reason: Option<StopReasonJson>,
    pub token_ids: Option<Vec<u32>>,
    pub prompt_logprobs: Option<Value>,
    pub prompt_token_ids: Option<Vec<u32>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    pub service_tier: Option<String>,
    pub system_fingerprint: Option<String>,
    pub usage: Usage,
}

#[derive(Clone, Debug, Serialize)]
pub struct CompletionStreamChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
    pub stop_reason: Option<StopReasonJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CompletionStreamResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionStreamChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}
