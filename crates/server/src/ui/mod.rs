//! The pages the binary serves itself: the chat page at `/`, the API reference at `/docs` and
//! the OpenAPI document it renders at `/openapi.json`. They are static files compiled in (no
//! build step, nothing fetched from elsewhere: the Content-Security-Policy holds each page to
//! this origin) and hold no data, so they are served without the API key; the API calls the
//! chat page makes carry the key its user enters.

use crate::state::AppState;
use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

const ASSETS: &[Asset] = &[
    Asset { path: "/", content_type: HTML, body: include_str!("chat.html") },
    Asset { path: "/ui/chat.js", content_type: JS, body: include_str!("chat.js") },
    Asset { path: "/ui/markdown.js", content_type: JS, body: include_str!("markdown.js") },
    Asset { path: "/ui/chat.css", content_type: CSS, body: include_str!("chat.css") },
    Asset { path: "/docs", content_type: HTML, body: include_str!("docs.html") },
    Asset { path: "/ui/docs.js", content_type: JS, body: include_str!("docs.js") },
    Asset { path: "/ui/docs.css", content_type: CSS, body: include_str!("docs.css") },
    Asset { path: "/openapi.json", content_type: "application/json", body: include_str!("openapi.json") },
];

/// Scripts, styles and requests only from this origin; no inline script, no frames, no plugins.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The routes of every page and the files they load.
pub fn routes() -> Router<Arc<AppState>> {
    ASSETS.iter().fold(Router::new(), |r, a| r.route(a.path, get(move || async move { serve(a) })))
}

/// True for the paths of [`routes`] (served without the API key).
pub fn is_page(path: &str) -> bool {
    ASSETS.iter().any(|a| a.path == path)
}

fn serve(a: &Asset) -> Response {
    let headers = [
        (header::CONTENT_TYPE, a.content_type),
        // Revalidate, so a new binary's pages replace the old ones at once.
        (header::CACHE_CONTROL, "no-cache"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CONTENT_SECURITY_POLICY, CSP),
    ];
    (headers, a.body).into_response()
}
