//! Reading a JSON request body: media type, size limit, syntax, shape — each failure a 4xx in
//! vLLM's error shape (vLLM answers schema problems with 400 `Bad Request` naming `body.<field>`).

use crate::errors::{ApiError, ApiResult};
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The body as a JSON object. `limit` is the largest body accepted (0: no limit).
pub async fn read_object(headers: &HeaderMap, body: Body, limit: usize) -> ApiResult<Map<String, Value>> {
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
    let limit = if limit == 0 { usize::MAX } else { limit };
    let bytes = read_limited(body, limit).await?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::schema("", format!("JSON decode error: {e} (line {}, column {})", e.line(), e.column()))
    })?;
    match value {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::schema(
            "",
            format!("Input should be a valid dictionary or object to extract fields from, got {}", kind(&other)),
        )),
    }
}

/// Past the limit a body is still read, and thrown away, up to this many bytes in all before the
/// 413 goes out: a client still sending when the server closes would get a broken pipe instead
/// of the answer. Bodies larger than this are cut off (the connection closes).
const DRAIN_CAP: usize = 64 << 20;

/// The whole body if it is at most `limit` bytes; otherwise 413 once it has been drained.
async fn read_limited(body: Body, limit: usize) -> ApiResult<Vec<u8>> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let (mut bytes, mut seen) = (Vec::new(), 0usize);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::schema("", format!("Could not read the request body: {e}")))?;
        seen = seen.saturating_add(chunk.len());
        if seen <= limit {
            bytes.extend_from_slice(&chunk);
        } else if seen > DRAIN_CAP.max(limit) {
            break;
        }
    }
    if seen > limit { Err(ApiError::too_large(limit)) } else { Ok(bytes) }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Deserializes `value` into `T`; a wrong type names the field (`body.temperature`).
pub fn typed<T: DeserializeOwned>(value: &Value) -> ApiResult<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.inner().to_string();
        let inner = match inner.strip_prefix("data did not match any variant of untagged enum ") {
            Some(name) => format!("the value has none of the accepted forms ({name})"),
            None => inner,
        };
        ApiError::schema(&path, format!("{path}: {inner}"))
    })
}
