//! Reading a JSON request body: media type, size limit, time limit, syntax, shape — each failure
//! a 4xx in vLLM's error shape (vLLM answers schema problems with 400 `Bad Request` naming
//! `body.<field>`).
//!
//! The body is parsed once into its top-level fields as raw JSON text borrowed from the body
//! bytes ([`RawObject`]); each request type then deserializes straight from that text into
//! compact types (token ids into `Vec<u32>`), never through a `serde_json::Value` tree, which
//! costs some 30 bytes a number.

use crate::errors::{ApiError, ApiResult};
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// How a body may be read.
#[derive(Clone, Debug)]
pub struct BodyLimits {
    /// Largest body accepted, in bytes (0: no limit).
    pub max_bytes: usize,
    /// The whole body must have arrived this long after the request head (`None`: no limit).
    pub timeout: Option<Duration>,
    /// Bytes all bodies being read or parsed may hold together, one permit a byte (`None`: no
    /// limit): many large bodies at once get 503 instead of taking the memory of the others.
    pub in_flight: Option<Arc<Semaphore>>,
}

/// A request body's bytes and its share of the in-flight budget, given back when dropped.
pub struct BodyBytes {
    pub bytes: Vec<u8>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl std::ops::Deref for BodyBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// The body's bytes, after the media-type check. Ends early with 503 when the server starts to
/// shut down (`shutdown` turns true).
pub async fn read_json_bytes(
    headers: &HeaderMap,
    body: Body,
    limits: &BodyLimits,
    mut shutdown: watch::Receiver<bool>,
) -> ApiResult<BodyBytes> {
    let media_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .unwrap_or_default();
    if media_type != "application/json" {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "Bad Request",
            "Unsupported Media Type: Only 'application/json' is allowed",
        ));
    }
    let limit = if limits.max_bytes == 0 { usize::MAX } else { limits.max_bytes };
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let read = read_limited(body, limit, declared, limits.in_flight.clone());
    let timed = async {
        match limits.timeout {
            Some(t) => tokio::time::timeout(t, read).await.map_err(|_| ApiError::body_timeout(t))?,
            None => read.await,
        }
    };
    tokio::select! {
        r = timed => r,
        _ = shutdown.wait_for(|down| *down) => Err(ApiError::shutting_down()),
    }
}

/// Past the limit a body is still read, and thrown away, up to this many bytes in all before the
/// 413 goes out: a client still sending when the server closes would get a broken pipe instead
/// of the answer. A body declared (`Content-Length`) larger than this is refused before any of
/// it is read; one that turns out larger is cut off (the connection closes).
const DRAIN_CAP: usize = 64 << 20;

/// The whole body if it is at most `limit` bytes; otherwise 413 once it has been drained. Each
/// byte kept takes a permit of `budget` (503 when none are left).
async fn read_limited(
    body: Body,
    limit: usize,
    declared: Option<u64>,
    budget: Option<Arc<Semaphore>>,
) -> ApiResult<BodyBytes> {
    use futures_util::StreamExt;
    if declared.is_some_and(|n| n > limit as u64 && n > DRAIN_CAP as u64) {
        return Err(ApiError::too_large(limit));
    }
    let mut stream = body.into_data_stream();
    let expected = declared.map_or(0, |n| n.min(limit as u64) as usize);
    // A body refused for want of budget is drained like one over the limit, then answered.
    let (mut permit, mut refused) = match take_budget(&budget, expected, None) {
        Ok(p) => (p, None),
        Err(e) => (None, Some(e)),
    };
    let mut bytes = Vec::with_capacity(if refused.is_some() { 0 } else { expected });
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::schema("", format!("Could not read the request body: {e}")))?;
        seen = seen.saturating_add(chunk.len());
        if seen <= limit && refused.is_none() {
            let more = (bytes.len() + chunk.len()).saturating_sub(expected.max(bytes.len()));
            match take_budget(&budget, more, permit.take()) {
                Ok(p) => permit = p,
                Err(e) => {
                    refused = Some(e);
                    bytes = Vec::new();
                    continue;
                }
            }
            bytes.extend_from_slice(&chunk);
        } else if seen > DRAIN_CAP.max(limit) {
            break;
        }
    }
    match refused {
        _ if seen > limit => Err(ApiError::too_large(limit)),
        Some(e) => Err(e),
        None => Ok(BodyBytes { bytes, _permit: permit }),
    }
}

/// Adds `n` bytes to what `held` holds of the budget, or 503 if the budget is spent.
fn take_budget(
    budget: &Option<Arc<Semaphore>>,
    n: usize,
    held: Option<OwnedSemaphorePermit>,
) -> ApiResult<Option<OwnedSemaphorePermit>> {
    let Some(b) = budget else { return Ok(None) };
    if n == 0 {
        return Ok(held);
    }
    let more = u32::try_from(n).ok().and_then(|n| b.clone().try_acquire_many_owned(n).ok()).ok_or_else(|| {
        ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailableError",
            "The server is reading too many large request bodies at once (see --max-request-bytes-in-flight); retry shortly.",
        )
    })?;
    Ok(Some(match held {
        Some(mut h) => {
            h.merge(more);
            h
        }
        None => more,
    }))
}

/// A JSON object's top-level fields, each as its raw JSON text (borrowed from the body). A key
/// given twice keeps its last value, as JSON parsers commonly do.
pub struct RawObject<'a> {
    fields: BTreeMap<String, &'a RawValue>,
}

impl<'a> RawObject<'a> {
    /// Parses `bytes`, which must be one JSON object.
    pub fn parse(bytes: &'a [u8]) -> ApiResult<Self> {
        match serde_json::from_slice::<BTreeMap<String, &'a RawValue>>(bytes) {
            Ok(fields) => Ok(RawObject { fields }),
            Err(e) if e.is_data() => Err(ApiError::schema(
                "",
                format!(
                    "Input should be a valid dictionary or object to extract fields from, got {}",
                    kind(bytes).unwrap_or("something else")
                ),
            )),
            Err(e) => {
                Err(ApiError::schema("", format!("JSON decode error: {e} (line {}, column {})", e.line(), e.column())))
            }
        }
    }

    /// The fields, by name.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &'a RawValue)> + '_ {
        self.fields.iter().map(|(k, v)| (k.as_str(), *v))
    }

    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.fields.get(key).copied()
    }
}

/// What a JSON text that is not an object is, from its first byte.
fn kind(bytes: &[u8]) -> Option<&'static str> {
    Some(match bytes.iter().find(|b| !b.is_ascii_whitespace())? {
        b'n' => "null",
        b't' | b'f' => "a boolean",
        b'"' => "a string",
        b'[' => "a list",
        b'{' => "an object",
        _ => "a number",
    })
}

/// Deserializes the fields into `T`; a wrong type names the field (`body.temperature`).
pub fn typed<T: DeserializeOwned>(obj: &RawObject) -> ApiResult<T> {
    let de = serde::de::value::MapDeserializer::<_, serde_json::Error>::new(obj.fields());
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        // serde_json's position counts from the start of the field's text: of no use to a client.
        let mut inner = e.inner().to_string();
        if let Some(at) = inner.rfind(" at line ") {
            inner.truncate(at);
        }
        let inner = match inner.strip_prefix("data did not match any variant of untagged enum ") {
            Some(name) => format!("the value has none of the accepted forms ({name})"),
            None => inner,
        };
        ApiError::schema(&path, format!("{path}: {inner}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::completion::{CompletionRequest, PromptInput};

    #[test]
    fn token_ids_parse_into_u32_and_wrong_shapes_name_the_field() {
        let body = br#"{"prompt": [1, 2, 3], "prompt": [4, 5], "max_tokens": 3}"#;
        let obj = RawObject::parse(body).unwrap();
        let req: CompletionRequest = typed(&obj).unwrap();
        assert!(matches!(req.prompt, Some(PromptInput::Tokens(ref t)) if t == &[4, 5]));
        for (bad, param) in [
            (r#"{"prompt": {"a": 1}}"#, "body.prompt"),
            (r#"{"prompt": [1, "a"]}"#, "body.prompt"),
            (r#"{"prompt": [-1]}"#, "body.prompt"),
            (r#"{"prompt": [[1], 2]}"#, "body.prompt"),
            (r#"[1, 2]"#, "body"),
        ] {
            let e = RawObject::parse(bad.as_bytes()).and_then(|o| typed::<CompletionRequest>(&o)).unwrap_err();
            assert!(e.param.as_deref().is_some_and(|p| p.starts_with(param)), "{bad}: {e}");
            assert!(!e.message.contains(" at line "), "{bad}: {e}");
        }
        let e = RawObject::parse(br#"{"prompt": "#).err().unwrap();
        assert_eq!(e.param.as_deref(), Some("body"));
        assert!(e.message.starts_with("JSON decode error"), "{e}");
        let e = RawObject::parse(b" 7").err().unwrap();
        assert!(e.message.contains("got a number"), "{e}");
    }
}
