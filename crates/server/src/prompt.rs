//! Prompts: completion inputs (texts or token ids) and chat messages rendered through the chat
//! template, tokenized, truncated and checked against the context length and the prompt guard.

use crate::config::Limits;
use crate::errors::{ApiError, ApiResult};
use crate::protocol::completion::PromptInput;
use crate::state::{AppState, ModelContext};
use serde_json::{Map, Value};
use std::sync::Arc;
use vllm_rs_frontend::ChatTemplate;

/// vLLM's `VLLM_MAX_COMPLETION_PROMPTS`.
const MAX_PROMPTS: usize = 1024;

/// One prompt: its token ids and, when known, its text (for `echo`).
#[derive(Clone, Debug)]
pub struct Prompt {
    pub ids: Vec<u32>,
    pub text: Option<String>,
}

/// How prompts are tokenized.
#[derive(Clone, Debug)]
pub struct TokenizeOptions {
    pub add_special_tokens: bool,
    /// `truncate_prompt_tokens`: keep this many tokens (`-1`: as many as the context allows).
    pub truncate: Option<i64>,
    /// Keep the first tokens (`right`, vLLM's default) or the last (`left`).
    pub truncate_left: bool,
}

impl TokenizeOptions {
    pub fn new(
        add_special_tokens: bool,
        truncate: Option<i64>,
        side: Option<&str>,
        model: &ModelContext,
    ) -> ApiResult<Self> {
        let truncate_left = match side {
            None | Some("right") => false,
            Some("left") => true,
            Some(_) => {
                return Err(ApiError::invalid(
                    "truncation_side",
                    "`truncation_side` must be either 'left' or 'right'.",
                ));
            }
        };
        if let Some(t) = truncate {
            if t < -1 {
                return Err(ApiError::schema("truncate_prompt_tokens", "truncate_prompt_tokens: must be >= -1"));
            }
            let max = model.max_model_len();
            if t > max as i64 {
                return Err(ApiError::invalid(
                    "truncate_prompt_tokens",
                    format!(
                        "truncate_prompt_tokens={t} cannot be greater than max_model_len = {max}. Please request a \
                         smaller truncation size."
                    ),
                ));
            }
        }
        Ok(TokenizeOptions { add_special_tokens, truncate, truncate_left })
    }

    fn apply(&self, mut ids: Vec<u32>, model: &ModelContext) -> Vec<u32> {
        let keep = match self.truncate {
            None => return ids,
            Some(-1) => model.max_model_len().saturating_sub(1),
            Some(k) => k as usize,
        };
        if ids.len() > keep {
            if self.truncate_left {
                ids.drain(..ids.len() - keep);
            } else {
                ids.truncate(keep);
            }
        }
        ids
    }
}

/// The prompt-length guard, applied to text before it is tokenized.
pub fn check_chars(param: &str, chars: usize, limits: &Limits) -> ApiResult<()> {
    if limits.max_prompt_chars > 0 && chars > limits.max_prompt_chars {
        return Err(ApiError::invalid(
            param,
            format!(
                "The prompt has {chars} characters, more than this server accepts ({}; see --max-prompt-chars).",
                limits.max_prompt_chars
            ),
        ));
    }
    Ok(())
}

fn check_ids(ids: &[u32], model: &ModelContext) -> ApiResult<()> {
    if ids.is_empty() {
        return Err(ApiError::invalid("prompt", "The decoder prompt cannot be empty"));
    }
    check_vocab("prompt", ids, model)
}

/// Token ids the model has rows for (a token-id input, or a `--tokenizer` larger than the model).
pub fn check_vocab(param: &str, ids: &[u32], model: &ModelContext) -> ApiResult<()> {
    let vocab = model.vocab_size();
    match ids.iter().find(|&&t| t as usize >= vocab) {
        None => Ok(()),
        Some(bad) => Err(ApiError::invalid(param, format!("Token id {bad} is out of vocabulary (size {vocab})."))),
    }
}

pub fn text_prompt(text: String, opts: &TokenizeOptions, model: &ModelContext, limits: &Limits) -> ApiResult<Prompt> {
    check_chars("prompt", text.chars().count(), limits)?;
    let ids = model.tokenizer.encode(&text, opts.add_special_tokens)?;
    let ids = opts.apply(ids, model);
    check_ids(&ids, model)?;
    Ok(Prompt { ids, text: Some(text) })
}

pub fn token_prompt(ids: Vec<u32>, opts: &TokenizeOptions, model: &ModelContext) -> ApiResult<Prompt> {
    let ids = opts.apply(ids, model);
    check_ids(&ids, model)?;
    Ok(Prompt { ids, text: None })
}

/// The prompts of a completion request, in order.
pub fn completion_prompts(
    input: Option<PromptInput>,
    opts: &TokenizeOptions,
    model: &ModelContext,
    limits: &Limits,
) -> ApiResult<Vec<Arc<Prompt>>> {
    let missing = || ApiError::invalid("prompt", "Either prompt or prompt_embeds must be provided and non-empty.");
    let prompts = match input {
        None => return Err(missing()),
        Some(PromptInput::Text(t)) if t.is_empty() => return Err(missing()),
        Some(PromptInput::Text(t)) => vec![text_prompt(t, opts, model, limits)?],
        Some(PromptInput::Tokens(ids)) => vec![token_prompt(ids, opts, model)?],
        Some(PromptInput::Texts(texts)) => {
            check_count(texts.len())?;
            let total: usize = texts.iter().map(|t| t.chars().count()).sum();
            check_chars("prompt", total, limits)?;
            texts.into_iter().map(|t| text_prompt(t, opts, model, limits)).collect::<ApiResult<_>>()?
        }
        Some(PromptInput::TokenLists(lists)) => {
            check_count(lists.len())?;
            lists.into_iter().map(|ids| token_prompt(ids, opts, model)).collect::<ApiResult<_>>()?
        }
    };
    if prompts.is_empty() {
        return Err(missing());
    }
    Ok(prompts.into_iter().map(Arc::new).collect())
}

fn check_count(n: usize) -> ApiResult<()> {
    if n > MAX_PROMPTS {
        return Err(ApiError::invalid(
            "prompt",
            format!("prompt list length {n} exceeds the maximum allowed count of {MAX_PROMPTS}."),
        ));
    }
    Ok(())
}

/// A chat conversation and how to render it.
pub struct ChatInput<'a> {
    pub messages: &'a [Map<String, Value>],
    pub add_generation_prompt: bool,
    pub continue_final_message: bool,
    pub request_template: Option<&'a str>,
    pub template_kwargs: Option<&'a Map<String, Value>>,
    pub documents: Option<&'a [Map<String, Value>]>,
    /// The request's tools, rendered by the template as transformers passes them.
    pub tools: Option<&'a [Value]>,
}

/// A rendered chat prompt.
pub struct ChatPrompt {
    pub prompt: Prompt,
    /// The last message as rendered (role, text content), for chat `echo`.
    pub last_message: Option<(String, String)>,
}

/// Message contents as the template sees them: a list of text parts becomes one string (parts
/// joined by newlines, vLLM's "string" content format); other part types are not supported.
fn normalize_messages(messages: &[Map<String, Value>]) -> ApiResult<(Vec<Value>, usize)> {
    let mut out = Vec::with_capacity(messages.len());
    let mut chars = 0;
    for (i, m) in messages.iter().enumerate() {
        let mut m = m.clone();
        match m.get("role") {
            Some(Value::String(_)) => {}
            _ => return Err(ApiError::schema(&format!("messages[{i}].role"), "role: Field required (a string)")),
        }
        let content = match m.get("content") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Array(parts)) => {
                let mut texts = Vec::new();
                for (j, p) in parts.iter().enumerate() {
                    let kind = p.get("type").and_then(Value::as_str).unwrap_or("text");
                    match (kind, p.get("text").and_then(Value::as_str)) {
                        ("text", Some(t)) => texts.push(t.to_string()),
                        ("text", None) => {
                            return Err(ApiError::schema(
                                &format!("messages[{i}].content[{j}].text"),
                                "text: Field required (a string)",
                            ));
                        }
                        (other, _) => {
                            return Err(ApiError::invalid(
                                "messages",
                                format!(
                                    "Content parts of type `{other}` are not supported by this server (text only)."
                                ),
                            ));
                        }
                    }
                }
                Some(texts.join("\n"))
            }
            Some(_) => {
                return Err(ApiError::schema(
                    &format!("messages[{i}].content"),
                    "content: expected a string, a list of content parts, or null",
                ));
            }
        };
        if let Some(c) = &content {
            chars += c.chars().count();
            m.insert("content".into(), Value::String(c.clone()));
        } else if m.contains_key("tool_calls") || m.get("role").and_then(Value::as_str) == Some("tool") {
            // vLLM renders a missing content of these messages as "".
            m.insert("content".into(), Value::String(String::new()));
        }
        decode_tool_call_arguments(&mut m);
        out.push(Value::Object(m));
    }
    Ok((out, chars))
}

/// An assistant message's `tool_calls[].function.arguments` arrive as JSON text; templates
/// iterate them as a mapping, so they are decoded as vLLM does (an empty one becomes `{}`; text
/// that is not JSON stays as it is).
fn decode_tool_call_arguments(m: &mut Map<String, Value>) {
    let Some(Value::Array(calls)) = m.get_mut("tool_calls") else { return };
    for call in calls {
        let Some(Value::Object(f)) = call.get_mut("function") else { continue };
        match f.get("arguments") {
            Some(Value::String(a)) if a.is_empty() => {
                f.insert("arguments".into(), Value::Object(Map::new()));
            }
            Some(Value::String(a)) => {
                if let Ok(v) = serde_json::from_str::<Value>(a) {
                    f.insert("arguments".into(), v);
                }
            }
            None | Some(Value::Null) => {
                f.insert("arguments".into(), Value::Object(Map::new()));
            }
            _ => {}
        }
    }
}

/// Renders and tokenizes a conversation.
pub fn chat_prompt(
    input: &ChatInput,
    opts: &TokenizeOptions,
    state: &AppState,
    model: &ModelContext,
) -> ApiResult<ChatPrompt> {
    let limits = &state.config.limits;
    if input.continue_final_message && input.add_generation_prompt {
        return Err(ApiError::bad_request(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
        ));
    }
    let (messages, chars) = normalize_messages(input.messages)?;
    check_chars("messages", chars, limits)?;
    let request_template;
    let template: &ChatTemplate = match input.request_template {
        Some(_) if !state.config.trust_request_chat_template => {
            return Err(ApiError::invalid(
                "chat_template",
                "Chat template is passed with request, but --trust-request-chat-template is not set. Refused request \
                 with untrusted chat template.",
            ));
        }
        Some(src) => {
            request_template = ChatTemplate::new(
                src,
                model.tokenizer.bos_token().map(str::to_string),
                model.tokenizer.eos_token().map(str::to_string),
            )
            .map_err(|e| ApiError::invalid("chat_template", e.to_string()))?
            .with_special_tokens(model.tokenizer.special_tokens_map());
            &request_template
        }
        None => model.chat_template.as_deref().ok_or_else(|| {
            ApiError::bad_request(
                "As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat \
                 template if the tokenizer does not define one.",
            )
        })?,
    };
    let mut extra = input.template_kwargs.cloned().unwrap_or_default();
    if let Some(docs) = input.documents {
        extra.insert("documents".into(), Value::Array(docs.iter().cloned().map(Value::Object).collect()));
    }
    if let Some(tools) = input.tools {
        extra.insert("tools".into(), Value::Array(tools.to_vec()));
    }
    let conversation = Value::Array(messages.clone());
    let mut text = template.render(&conversation, input.add_generation_prompt, &extra)?;
    let last_message = messages.last().map(|m| {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default().to_string();
        let content = m.get("content").and_then(Value::as_str).unwrap_or_default().to_string();
        (role, content)
    });
    if input.continue_final_message {
        let Some((_, content)) = &last_message else {
            return Err(ApiError::bad_request("continue_final_message needs at least one message."));
        };
        // As transformers: cut the rendering right after the final message's content.
        let trimmed = content.trim();
        let end = text
            .rfind(content.as_str())
            .map(|i| i + content.len())
            .or_else(|| (!trimmed.is_empty()).then(|| text.rfind(trimmed).map(|i| i + trimmed.len())).flatten());
        match end {
            Some(end) => text.truncate(end),
            None => {
                return Err(ApiError::bad_request(
                    "continue_final_message is set but the final message does not appear in the rendered chat.",
                ));
            }
        }
    }
    check_chars("messages", text.chars().count(), limits)?;
    let ids = model.tokenizer.encode(&text, opts.add_special_tokens)?;
    let ids = opts.apply(ids, model);
    check_ids(&ids, model)?;
    Ok(ChatPrompt { prompt: Prompt { ids, text: Some(text) }, last_message })
}
