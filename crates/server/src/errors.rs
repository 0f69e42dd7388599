//! Errors in vLLM's JSON shape: `{"error": {"message", "type", "param", "code"}}` with the HTTP
//! status in `code` (vLLM's `ErrorResponse` / `create_error_response`).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use vllm_rs_engine::{EngineError, ParamError};

#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    /// vLLM's `type`: `BadRequestError`, `NotFoundError`, `Bad Request` (schema errors)...
    pub kind: &'static str,
    pub message: String,
    pub param: Option<String>,
}

pub type ApiResult<T> = Result<T, ApiError>;

#[derive(Serialize)]
struct ErrorInfo<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: u16,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorInfo<'a>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, kind, message: message.into(), param: None }
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// A request vLLM rejects in its own checks (`VLLMValidationError`): 400 `BadRequestError`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequestError", message)
    }

    /// A bad value of one field.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self::bad_request(message).with_param(param)
    }

    /// A body that does not fit the schema (pydantic's `RequestValidationError`): 400 `Bad Request`
    /// with `param` as `body.<field path>`.
    pub fn schema(path: &str, message: impl Into<String>) -> Self {
        let param = if path.is_empty() || path == "." { "body".to_string() } else { format!("body.{path}") };
        Self::new(StatusCode::BAD_REQUEST, "Bad Request", message).with_param(param)
    }

    pub fn model_not_found(requested: &str, served: &[String]) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            format!("The model `{requested}` does not exist. Valid aliases: {}.", served.join(", ")),
        )
        .with_param("model")
    }

    pub fn not_ready() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailableError",
            "The model is still loading; retry when GET /health answers 200.",
        )
    }

    pub fn shutting_down() -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailableError", "The server is shutting down.")
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError", message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Request Entity Too Large",
            format!(
                "The request body is larger than this server accepts ({limit} bytes; see --max-request-body-bytes)."
            ),
        )
    }

    pub fn body_timeout(after: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "RequestTimeoutError",
            format!("The request body did not arrive within {} s (see --timeout-body-read).", after.as_secs_f64()),
        )
    }

    /// The JSON text of the error (for an SSE `data:` line).
    pub fn to_json(&self) -> String {
        let body = ErrorBody {
            error: ErrorInfo {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.status.as_u16(),
            },
        };
        serde_json::to_string(&body).expect("error JSON")
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status.as_u16(), self.kind, self.message)
    }
}

impl From<ParamError> for ApiError {
    fn from(e: ParamError) -> Self {
        ApiError::invalid(e.param, e.message)
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Param(p) => p.into(),
            EngineError::InvalidRequest(m) => ApiError::bad_request(m),
            EngineError::Stopped => ApiError::shutting_down(),
            EngineError::Failed(m) => ApiError::internal(format!("the engine failed and has stopped: {m}")),
        }
    }
}

impl From<vllm_rs_frontend::Error> for ApiError {
    fn from(e: vllm_rs_frontend::Error) -> Self {
        use vllm_rs_frontend::Error as E;
        match e {
            E::TemplateRaised { .. } | E::TemplateRender(_) | E::InvalidInput(_) | E::Codec(_) => {
                ApiError::bad_request(e.to_string())
            }
            other => ApiError::internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, self.to_json()).into_response();
        let headers = r.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        // The rest of the body was not read: the connection cannot carry another request.
        if matches!(self.status, StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT) {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        r
    }
}

/// The answer to a missing or wrong API key: 401 as the OpenAI error object (vLLM answers a bare
/// `{"error": "Unauthorized"}`; clients parse every other error as the object), with the
/// `WWW-Authenticate` challenge HTTP asks for.
pub fn unauthorized() -> Response {
    let mut r = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "AuthenticationError",
        "Unauthorized: this server needs a valid API key (`Authorization: Bearer <key>`).",
    )
    .into_response();
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// FastAPI's answer for an unknown path / a known path with the wrong method.
pub fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Json(serde_json::json!({"detail": "Not Found"}))).into_response()
}

pub fn method_not_allowed() -> Response {
    (StatusCode::METHOD_NOT_ALLOWED, Json(serde_json::json!({"detail": "Method Not Allowed"}))).into_response()
}
