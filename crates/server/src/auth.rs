//! API-key authentication (vLLM's `--api-key` / `VLLM_API_KEY`). Every route needs the key
//! except `/health`, the static pages of [`crate::ui`] (the chat page, `/docs`, `/openapi.json`:
//! they hold no data; the chat page's API calls carry the key) and CORS preflights, as `Authorization: Bearer <key>` or as `x-api-key:
//! <key>` (how Anthropic's SDKs and Claude-compatible tools send it); a missing or wrong key is a
//! 401 in the API's own error shape (Anthropic's on `/v1/messages`, OpenAI's elsewhere). An
//! empty key is refused at start-up (it would turn authentication off). With
//! `--api-key-scope v1` only paths under `/v1` need the key, as in vLLM.

use crate::config::ApiKeyScope;
use crate::errors::unauthorized;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;

/// Paths served without a key.
const OPEN_PATHS: &[&str] = &["/health"];

pub async fn require_api_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let keys = &state.config.api_keys;
    let path = req.uri().path();
    let outside_scope = state.config.api_key_scope == ApiKeyScope::V1 && !(path == "/v1" || path.starts_with("/v1/"));
    if keys.is_empty()
        || req.method() == Method::OPTIONS
        || OPEN_PATHS.contains(&path)
        || crate::ui::is_page(path)
        || outside_scope
    {
        return next.run(req).await;
    }
    let headers = req.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token);
    let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    let valid = |token: &str| keys.iter().fold(false, |ok, k| ok | constant_time_eq(k.as_bytes(), token.as_bytes()));
    if bearer.is_some_and(valid) || x_api_key.is_some_and(valid) {
        return next.run(req).await;
    }
    let denied = unauthorized();
    if req.uri().path().starts_with("/v1/messages") {
        return anthropic_shape(denied);
    }
    denied
}

/// The 401 with Anthropic's error body (`{"type": "error", "error": {…}}`).
fn anthropic_shape(denied: Response) -> Response {
    let (mut parts, _) = denied.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = serde_json::json!({"type": "error", "error": {"type": "authentication_error",
        "message": "invalid x-api-key: this server needs a valid API key (`x-api-key: <key>`)"}});
    Response::from_parts(parts, axum::body::Body::from(body.to_string()))
}

/// Compares without an early exit on the first differing byte (only the length can leak).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn equal_only_when_identical() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
