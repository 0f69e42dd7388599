//! `/openapi.json` against the router, so the document cannot rot: it lists exactly the API's
//! routes (`app::api_routes`) with exactly the methods the router answers on each; every request
//! schema lists exactly the fields its endpoint takes (`protocol::fields`); every `$ref`
//! resolves. And the pages (`/`, `/docs`, `/openapi.json` and their files) are served without
//! the API key and load nothing from elsewhere, while the API still needs the key.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use tower::ServiceExt;
use vllm_rs_server::protocol::fields::Endpoint;
use vllm_rs_server::{AppState, ServerConfig, app};

fn state(api_keys: &[&str]) -> Arc<AppState> {
    AppState::new(ServerConfig { api_keys: api_keys.iter().map(|k| k.to_string()).collect(), ..Default::default() })
}

/// (status, headers, body text) of one request to the router.
async fn call(state: &Arc<AppState>, method: Method, path: &str) -> (StatusCode, axum::http::HeaderMap, String) {
    let req = Request::builder().method(method).uri(path).body(Body::empty()).unwrap();
    let resp = app::router(state.clone()).oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 16 << 20).await.unwrap();
    (parts.status, parts.headers, String::from_utf8(bytes.to_vec()).unwrap())
}

async fn document() -> Value {
    let (status, headers, text) = call(&state(&[]), Method::GET, "/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    serde_json::from_str(&text).expect("/openapi.json is JSON")
}

/// The methods the router answers on `path`, from the `Allow` header of a 405 (HEAD, which
/// axum adds to every GET, left out).
async fn methods(path: &str) -> BTreeSet<String> {
    let concrete = path.replace("{id}", "resp_x");
    let (status, headers, _) = call(&state(&[]), Method::PATCH, &concrete).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "PATCH {concrete}");
    let allow = headers[header::ALLOW].to_str().unwrap();
    allow.split(',').map(|m| m.trim().to_lowercase()).filter(|m| m != "head").collect()
}

#[tokio::test]
async fn every_route_is_documented_and_nothing_else() {
    let doc = document().await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"), "the document's version is the server's");
    let paths = doc["paths"].as_object().unwrap();
    let routed: BTreeSet<&str> = app::api_routes(&state(&[])).into_iter().map(|(p, _)| p).collect();
    let documented: BTreeSet<&str> = paths.keys().map(String::as_str).collect();
    assert_eq!(routed, documented, "routes (left) and /openapi.json paths (right) differ");
    for (path, ops) in paths {
        let listed: BTreeSet<String> = ops.as_object().unwrap().keys().cloned().collect();
        assert_eq!(methods(path).await, listed, "methods of {path}: the router's (left), the document's (right)");
    }
}

#[tokio::test]
async fn request_schemas_list_the_fields_each_endpoint_takes() {
    let doc = document().await;
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let endpoints = [
        ("CompletionRequest", Endpoint::Completion),
        ("ChatCompletionRequest", Endpoint::Chat),
        ("TokenizeRequest", Endpoint::Tokenize),
        ("DetokenizeRequest", Endpoint::Detokenize),
        ("EmbeddingRequest", Endpoint::Embeddings),
        ("ClassificationRequest", Endpoint::Classify),
        ("ScoreRequest", Endpoint::Score),
        ("RerankRequest", Endpoint::Rerank),
        ("AnthropicMessagesRequest", Endpoint::Messages),
        ("AnthropicCountTokensRequest", Endpoint::CountTokens),
        ("ResponsesRequest", Endpoint::Responses),
    ];
    let requests: BTreeSet<&str> = schemas.keys().map(String::as_str).filter(|n| n.ends_with("Request")).collect();
    assert_eq!(requests, endpoints.iter().map(|(n, _)| *n).collect(), "request schemas without an endpoint here");
    for (name, endpoint) in endpoints {
        let documented: BTreeSet<&str> =
            schemas[name]["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        let taken: BTreeSet<&str> = endpoint.fields().collect();
        assert_eq!(documented, taken, "{name}: documented fields (left), fields {endpoint:?} takes (right)");
    }
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    for r in refs {
        let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("$ref {r}"));
        assert!(schemas.contains_key(name), "$ref to a missing schema {name}");
    }
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.push(r.clone());
            }
            m.values().for_each(|x| collect_refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

#[tokio::test]
async fn pages_need_no_key_and_load_only_their_own_files() {
    let s = state(&["k"]);
    for page in ["/", "/docs"] {
        let (status, headers, html) = call(&s, Method::GET, page).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert!(headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap().contains("default-src 'none'"));
        // Every file the page names is served here (no CDN), without the key.
        // (Relative URLs, so the pages work under a proxy's path prefix.)
        let linked: Vec<String> =
            html.split(['"', '\'']).filter(|t| t.starts_with("ui/")).map(|t| format!("/{t}")).collect();
        assert!(linked.len() >= 2, "{page} names no scripts: {html}");
        assert!(!html.contains("http://") && !html.contains("https://") && !html.contains("//cdn"), "{page}");
        for file in linked {
            let (status, headers, _) = call(&s, Method::GET, &file).await;
            assert_eq!(status, StatusCode::OK, "{file}");
            assert_ne!(headers[header::CONTENT_TYPE], "application/octet-stream");
        }
    }
    assert_eq!(call(&s, Method::GET, "/openapi.json").await.0, StatusCode::OK);
    assert_eq!(call(&s, Method::GET, "/v1/models").await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(call(&s, Method::POST, "/").await.0, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(call(&s, Method::GET, "/ui/missing.js").await.0, StatusCode::UNAUTHORIZED);
}
