//! What the pooling endpoints share: inputs to token ids (with vLLM's length checks and
//! `truncate_prompt_tokens`), running them through the pooling runner, and vector
//! post-processing (Matryoshka `dimensions`, normalization, base64).

use crate::errors::{ApiError, ApiResult};
use crate::prompt::{check_chars, check_vocab};
use crate::protocol::pooling::{PoolingInput, Vector};
use crate::state::{AppState, ModelContext};
use base64::Engine as _;
use vllm_rs_engine::{PoolingHandle, PoolingInput as RunnerInput, PoolingTask};

/// OpenAI's limit on inputs per embeddings request.
pub const MAX_INPUTS: usize = 2048;

/// One input to pool, as text or token ids.
pub enum Input {
    Text(String),
    Ids(Vec<u32>),
}

impl PoolingInput {
    pub fn into_inputs(self) -> Vec<Input> {
        match self {
            PoolingInput::Text(t) => vec![Input::Text(t)],
            PoolingInput::Texts(ts) => ts.into_iter().map(Input::Text).collect(),
            PoolingInput::Ids(ids) => vec![Input::Ids(ids)],
            PoolingInput::IdLists(l) => l.into_iter().map(Input::Ids).collect(),
        }
    }
}

/// How inputs become token ids.
pub struct TokenizeFor {
    pub add_special_tokens: bool,
    /// `truncate_prompt_tokens` as sent (`-1`: the model's length).
    pub truncate: Option<i64>,
}

/// Token ids of every input, each within the model's length (cut when `truncate` asks).
pub fn input_ids(
    param: &str,
    inputs: Vec<Input>,
    how: &TokenizeFor,
    state: &AppState,
    model: &ModelContext,
) -> ApiResult<Vec<Vec<u32>>> {
    if inputs.is_empty() {
        return Err(ApiError::invalid(param, "You must pass at least one prompt"));
    }
    if inputs.len() > MAX_INPUTS {
        return Err(ApiError::invalid(
            param,
            format!("`{param}` has {} items; at most {MAX_INPUTS} are accepted per request.", inputs.len()),
        ));
    }
    let max_len = model.max_model_len();
    let cut = truncation(how.truncate, max_len)?;
    inputs
        .into_iter()
        .map(|input| one_input(param, input, how.add_special_tokens, cut, max_len, state, model))
        .collect()
}

/// The checks and tokenizing every `input`-taking pooling request shares (`/v1/embeddings`,
/// `/pooling`, `/classify`): served model name, priority, `input` present, token ids.
pub fn prepare_input(
    state: &AppState,
    model: &ModelContext,
    requested_model: Option<&str>,
    input: Option<PoolingInput>,
    how: &TokenizeFor,
    priority: Option<i64>,
) -> ApiResult<Vec<Vec<u32>>> {
    state.check_model(requested_model)?;
    check_priority(priority)?;
    let input = input.ok_or_else(|| ApiError::schema("input", "input: Field required"))?;
    input_ids("input", input.into_inputs(), how, state, model)
}

/// The length `truncate_prompt_tokens` asks for, checked as vLLM checks it.
pub fn truncation(truncate: Option<i64>, max_len: usize) -> ApiResult<Option<usize>> {
    match truncate {
        None => Ok(None),
        Some(-1) => Ok(Some(max_len)),
        Some(k) if k >= 1 && k as u64 <= max_len as u64 => Ok(Some(k as usize)),
        Some(k) if k >= 1 => Err(ApiError::invalid(
            "truncate_prompt_tokens",
            format!(
                "truncate_prompt_tokens value ({k}) is greater than max_model_len ({max_len}). Please, select a smaller truncation size."
            ),
        )),
        Some(k) => Err(ApiError::invalid(
            "truncate_prompt_tokens",
            format!("truncate_prompt_tokens must be -1 (the model's length) or at least 1, got {k}."),
        )),
    }
}

fn one_input(
    param: &str,
    input: Input,
    add_special: bool,
    cut: Option<usize>,
    max_len: usize,
    state: &AppState,
    model: &ModelContext,
) -> ApiResult<Vec<u32>> {
    let ids = match input {
        Input::Text(t) => {
            check_chars(param, t.chars().count(), &state.config.limits)?;
            match cut {
                Some(k) => model.tokenizer.encode_truncated(&t, add_special, k)?,
                None => model.tokenizer.encode(&t, add_special)?,
            }
        }
        Input::Ids(mut ids) => {
            if let Some(k) = cut.filter(|&k| ids.len() > k) {
                ids.drain(..ids.len() - k);
            }
            ids
        }
    };
    if ids.is_empty() {
        return Err(ApiError::invalid(param, "An input has no tokens: give a non-empty text or token list."));
    }
    check_len(ids.len(), max_len)?;
    check_vocab(param, &ids, model)?;
    Ok(ids)
}

/// An input longer than the model: vLLM's message (and its `param`).
pub fn check_len(n: usize, max_len: usize) -> ApiResult<()> {
    if n <= max_len {
        return Ok(());
    }
    Err(ApiError::invalid(
        "input_tokens",
        format!(
            "This model's maximum context length is {max_len} tokens. However, your prompt contains {n} input \
             tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input \
             prompt (or set truncate_prompt_tokens). (parameter=input_tokens, value={n})"
        ),
    ))
}

/// A 400 unless the model has a classification head (`/classify`).
pub fn need_head(pooler: &PoolingHandle) -> ApiResult<usize> {
    pooler.num_labels().ok_or_else(|| {
        ApiError::bad_request(format!(
            "This model ({}) has no classification head: /classify needs a *ForSequenceClassification model.",
            pooler.info.architecture
        ))
    })
}

/// A 400 if the model classifies instead of embedding (`/v1/embeddings`, `/pooling`).
pub fn need_embedder(pooler: &PoolingHandle) -> ApiResult<()> {
    match pooler.num_labels() {
        None => Ok(()),
        Some(_) => Err(ApiError::bad_request(format!(
            "This model ({}) is a classifier (cross-encoder): use /classify, /score or /rerank.",
            pooler.info.architecture
        ))),
    }
}

/// Runner inputs of plain token-id lists for `task`.
pub fn runner_inputs(ids: Vec<Vec<u32>>, task: PoolingTask) -> Vec<RunnerInput> {
    ids.into_iter().map(|token_ids| RunnerInput { token_ids, token_type_ids: None, task }).collect()
}

/// The runner's vector (pooled, or logits) of every input, in order.
pub async fn pool_all(pooler: &PoolingHandle, inputs: Vec<RunnerInput>) -> ApiResult<Vec<Vec<f32>>> {
    let pending: Vec<_> = inputs.into_iter().map(|i| pooler.pool(i)).collect();
    let mut out = Vec::with_capacity(pending.len());
    for rx in pending {
        out.push(rx.await.map_err(|_| ApiError::internal("the pooling runner stopped"))?);
    }
    Ok(out)
}

/// The `dimensions` a request may ask for, as vLLM checks it (only Matryoshka models).
pub fn check_dimensions(dimensions: Option<i64>, pooler: &PoolingHandle, name: &str) -> ApiResult<Option<usize>> {
    let Some(d) = dimensions else { return Ok(None) };
    let Some(allowed) = &pooler.pooling.matryoshka else {
        return Err(ApiError::invalid(
            "dimensions",
            format!(
                "Model '{name}' does not support Matryoshka embeddings; dimensions must be unset (received dimensions={d})."
            ),
        ));
    };
    if d < 1 {
        return Err(ApiError::invalid("dimensions", "Dimensions must be greater than 0"));
    }
    let d = d as usize;
    if !allowed.is_empty() && !allowed.contains(&d) {
        return Err(ApiError::invalid(
            "dimensions",
            format!(
                "Model \"{name}\" only supports {allowed:?} matryoshka dimensions, use other output dimensions will lead to poor results."
            ),
        ));
    }
    Ok(Some(d.min(pooler.info.hidden_size)))
}

/// Cuts to `dimensions`, then L2-normalizes if asked (vLLM's order).
pub fn finish_vector(mut v: Vec<f32>, dimensions: Option<usize>, normalize: bool) -> Vec<f32> {
    if let Some(d) = dimensions {
        v.truncate(d);
    }
    if normalize {
        vllm_rs_engine::normalize(&mut v);
    }
    v
}

/// `encoding_format`: `float` (default) or `base64`.
pub fn encode_vector(v: Vec<f32>, base64: bool) -> Vector {
    if !base64 {
        return Vector::Float(v);
    }
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    Vector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
}

pub fn parse_encoding_format(f: Option<&str>) -> ApiResult<bool> {
    match f {
        None | Some("float") => Ok(false),
        Some("base64") => Ok(true),
        Some(other) => Err(ApiError::invalid(
            "encoding_format",
            format!("encoding_format must be \"float\" or \"base64\", got {other:?}."),
        )),
    }
}

/// `priority` means nothing without a scheduler: only the default is accepted.
pub fn check_priority(priority: Option<i64>) -> ApiResult<()> {
    match priority {
        None | Some(0) => Ok(()),
        Some(p) => Err(ApiError::invalid(
            "priority",
            format!(
                "priority {p}: embedding models run requests in arrival order here; leave `priority` out or send 0."
            ),
        )),
    }
}

/// Cosine similarity in f64.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-12)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_follows_vllm() {
        assert_eq!(truncation(None, 10).unwrap(), None);
        assert_eq!(truncation(Some(-1), 10).unwrap(), Some(10));
        assert_eq!(truncation(Some(4), 10).unwrap(), Some(4));
        assert!(truncation(Some(11), 10).unwrap_err().message.contains("greater than max_model_len"));
        assert!(truncation(Some(0), 10).is_err());
        assert!(truncation(Some(-2), 10).is_err());
    }

    #[test]
    fn base64_is_little_endian_f32() {
        let Vector::Base64(s) = encode_vector(vec![1.0, -2.0], true) else { panic!() };
        let bytes = base64::engine::general_purpose::STANDARD.decode(s).unwrap();
        assert_eq!(bytes, [1f32.to_le_bytes(), (-2f32).to_le_bytes()].concat());
        let v = finish_vector(vec![3.0, 4.0, 12.0], Some(2), true);
        assert_eq!(v, [0.6, 0.8]);
    }
}
