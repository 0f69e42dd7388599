//! The router: API routes, the pages (`ui`), authentication, CORS, access log, and FastAPI-style 404/405 answers.

use crate::auth::require_api_key;
use crate::config::CorsConfig;
use crate::errors::{method_not_allowed, not_found};
use crate::routes::{
    chat, classify, completions, embeddings, health, messages, metrics, models, responses, sagemaker, score, tokenize,
};
use crate::state::AppState;
use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderName, HeaderValue, Method};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{MethodRouter, get, post};
use std::net::SocketAddr;
use std::sync::Arc;
use tower_http::cors::{AllowHeaders, AllowMethods, AllowOrigin, CorsLayer};

pub fn router(state: Arc<AppState>) -> Router {
    let api = api_routes(&state).into_iter().fold(Router::new(), |app, (path, route)| app.route(path, route));
    let mut app = api
        .merge(crate::ui::routes())
        .fallback(|| async { not_found() })
        .method_not_allowed_fallback(|| async { method_not_allowed() })
        .layer(middleware::from_fn_with_state(state.clone(), require_api_key))
        .layer(middleware::from_fn(access_log));
    if state.config.request_id_headers {
        app = app.layer(middleware::from_fn(request_id_header));
    }
    let mut app = app.with_state(state.clone());
    if let Some(cors) = cors_layer(&state.config.cors) {
        app = app.layer(cors);
    }
    app
}

/// The API: every route but the pages of [`crate::ui`]. `/openapi.json` documents exactly these
/// paths and methods (tests/openapi_routes.rs checks both ways).
pub fn api_routes(state: &Arc<AppState>) -> Vec<(&'static str, MethodRouter<Arc<AppState>>)> {
    // ORCA load reports on completion and chat answers (see `orca.rs`).
    let orca = middleware::from_fn_with_state(state.clone(), crate::orca::load_report);
    // vLLM's `load_aware_call` routes: generation and pooling (see `server_load.rs`).
    let load = middleware::from_fn_with_state(state.clone(), crate::server_load::track);
    vec![
        ("/health", get(health::health)),
        ("/load", get(crate::server_load::load)),
        ("/ping", get(health::ping).post(health::ping)),
        ("/version", get(health::version)),
        ("/metrics", get(metrics::metrics)),
        ("/v1/models", get(models::list)),
        ("/v1/completions", post(completions::create).layer(orca.clone()).layer(load.clone())),
        ("/v1/chat/completions", post(chat::create).layer(orca).layer(load.clone())),
        ("/v1/responses", post(responses::create).layer(load.clone())),
        ("/v1/responses/{id}", get(responses::get).delete(responses::delete)),
        ("/v1/responses/{id}/cancel", post(responses::cancel)),
        ("/v1/messages", post(messages::create).layer(load.clone())),
        ("/v1/messages/count_tokens", post(messages::count_tokens)),
        ("/invocations", post(sagemaker::invocations).layer(load.clone())),
        ("/v1/embeddings", post(embeddings::embeddings).layer(load.clone())),
        ("/pooling", post(embeddings::pooling).layer(load.clone())),
        ("/classify", post(classify::classify).layer(load.clone())),
        ("/score", post(score::score).layer(load.clone())),
        ("/v1/score", post(score::score).layer(load.clone())),
        ("/rerank", post(score::rerank).layer(load.clone())),
        ("/v1/rerank", post(score::rerank).layer(load.clone())),
        ("/v2/rerank", post(score::rerank).layer(load)),
        ("/tokenize", post(tokenize::tokenize)),
        ("/detokenize", post(tokenize::detokenize)),
    ]
}

/// One line per request, as uvicorn's access log (health checks and scrapes at debug).
async fn access_log(req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.to_string()).unwrap_or_default();
    let line = format!("{peer} - \"{} {} {:?}\"", req.method(), req.uri().path(), req.version());
    let quiet = matches!(req.uri().path(), "/health" | "/metrics" | "/ping");
    let resp = next.run(req).await;
    let status = resp.status();
    if quiet {
        tracing::debug!("{line} {status}");
    } else {
        tracing::info!("{line} {status}");
    }
    resp
}

/// `x-request-id` on every response (`--enable-request-id-headers`): the request's own header
/// when it sent one, else a new random id, as vLLM's middleware does.
async fn request_id_header(req: Request, next: Next) -> Response {
    let given = req.headers().get("x-request-id").cloned();
    let mut resp = next.run(req).await;
    let id = given.unwrap_or_else(|| {
        HeaderValue::from_str(&crate::protocol::common::random_hex()).expect("hex is a valid header value")
    });
    resp.headers_mut().insert("x-request-id", id);
    resp
}

/// vLLM's CORS flags; no allowed origins (its default): no CORS layer.
fn cors_layer(c: &CorsConfig) -> Option<CorsLayer> {
    if c.allowed_origins.is_empty() {
        return None;
    }
    let any = |v: &[String]| v.iter().any(|s| s == "*");
    let mut layer = CorsLayer::new();
    layer = if any(&c.allowed_origins) {
        if c.allow_credentials {
            layer.allow_origin(AllowOrigin::mirror_request())
        } else {
            layer.allow_origin(AllowOrigin::any())
        }
    } else {
        let list: Vec<HeaderValue> = c.allowed_origins.iter().filter_map(|o| o.parse().ok()).collect();
        layer.allow_origin(AllowOrigin::list(list))
    };
    layer = if any(&c.allowed_methods) {
        if c.allow_credentials {
            layer.allow_methods(AllowMethods::mirror_request())
        } else {
            layer.allow_methods(AllowMethods::any())
        }
    } else {
        let list: Vec<Method> = c.allowed_methods.iter().filter_map(|m| m.parse().ok()).collect();
        layer.allow_methods(list)
    };
    layer = if any(&c.allowed_headers) {
        if c.allow_credentials {
            layer.allow_headers(AllowHeaders::mirror_request())
        } else {
            layer.allow_headers(AllowHeaders::any())
        }
    } else {
        let list: Vec<HeaderName> = c.allowed_headers.iter().filter_map(|h| h.parse().ok()).collect();
        layer.allow_headers(list)
    };
    Some(layer.allow_credentials(c.allow_credentials))
}
