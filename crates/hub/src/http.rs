//! A small blocking HTTP layer over ureq: explicit redirect handling (the Hub puts file metadata
//! on the redirect itself, and a token must never follow a redirect to another host) and
//! resumable, hashed downloads into a partial file.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};
use ureq::http::{HeaderMap, Response, StatusCode};
use ureq::tls::TlsConfig;
use ureq::{Agent, Body};

use crate::digest::{finish_hex, hash_prefix};
use crate::error::HubError;
use crate::progress::Transfer;

const MAX_REDIRECTS: usize = 10;
/// Listings and JSON metadata are small; anything bigger is not what we asked for.
const MAX_TEXT_BYTES: u64 = 64 << 20;
const USER_AGENT: &str = concat!("vllm-rs/", env!("CARGO_PKG_VERSION"));

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Method {
    Get,
    Head,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Follow {
    /// Follow every redirect, dropping the token when leaving the first origin.
    All,
    /// Stop at the first redirect to another origin and return that 3xx response: on the Hub it
    /// carries the file's metadata, and the target is a signed CDN URL.
    SameOrigin,
}

pub(crate) struct Fetched {
    /// The URL that produced `response`, after the redirects followed.
    pub url: String,
    pub response: Response<Body>,
}

impl Fetched {
    pub(crate) fn status(&self) -> u16 {
        self.response.status().as_u16()
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        header(self.response.headers(), name)
    }

    pub(crate) fn text(self) -> Result<String, HubError> {
        let url = self.url;
        self.response
            .into_body()
            .into_with_config()
            .limit(MAX_TEXT_BYTES)
            .read_to_string()
            .map_err(|e| HubError::BadResponse { url, reason: format!("cannot read body: {e}") })
    }
}

pub(crate) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub(crate) struct Http {
    agent: Agent,
    /// Appended to network errors: what the user can do instead (differs for PyPI and the Hub).
    hint: String,
}

impl Http {
    pub(crate) fn new(hint: impl Into<String>) -> Http {
        let config = Agent::config_builder()
            .user_agent(USER_AGENT)
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(Duration::from_secs(20)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            // A stalled transfer should fail (and be resumable) rather than hang forever.
            .timeout_per_read(Some(Duration::from_secs(60)))
            .tls_config(TlsConfig::builder().root_certs(crate::tls::root_certs()).build())
            .build();
        Http { agent: config.new_agent(), hint: hint.into() }
    }

    pub(crate) fn network_error(&self, url: &str, reason: impl ToString) -> HubError {
        HubError::Network { url: url.to_string(), reason: reason.to_string(), hint: self.hint.clone() }
    }

    pub(crate) fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        token: Option<&str>,
        follow: Follow,
    ) -> Result<Fetched, HubError> {
        let first_origin = origin(url).to_string();
        let mut url = url.to_string();
        for _ in 0..=MAX_REDIRECTS {
            let mut req = match method {
                Method::Get => self.agent.get(&url),
                Method::Head => self.agent.head(&url),
            };
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            let same_origin = origin(&url) == first_origin;
            if let Some(token) = token.filter(|_| same_origin) {
                req = req.header("Authorization", format!("Bearer {token}"));
            }
            let response = req.call().map_err(|e| self.network_error(&url, e))?;
            if !response.status().is_redirection() || response.status() == StatusCode::NOT_MODIFIED {
                return Ok(Fetched { url, response });
            }
            let Some(location) = header(response.headers(), "location") else {
                return Ok(Fetched { url, response });
            };
            let target = join_url(&url, location);
            if follow == Follow::SameOrigin && origin(&target) != first_origin {
                return Ok(Fetched { url, response });
            }
            url = target;
        }
        Err(self.network_error(&url, format!("more than {MAX_REDIRECTS} redirects")))
    }

    /// The size a HEAD request reports, if the server answers one; only used for progress totals.
    pub(crate) fn content_length(&self, url: &str) -> Option<u64> {
        let fetched = self.send(Method::Head, url, &[], None, Follow::All).ok()?;
        if fetched.status() != 200 {
            return None;
        }
        fetched.header("content-length")?.trim().parse().ok()
    }

    /// GETs `url` into `dest`, appending to what an earlier interrupted run left there when the
    /// server honours Range. Returns the SHA-256 of the whole file. `dest` is a partial-file name:
    /// the caller verifies the hash and renames it into place (after an fsync here if `sync`).
    pub(crate) fn download(
        &self,
        url: &str,
        token: Option<&str>,
        dest: &Path,
        expected_size: Option<u64>,
        sync: bool,
        transfer: &mut Transfer,
    ) -> Result<String, HubError> {
        let mut have = std::fs::metadata(dest).map(|m| m.len()).unwrap_or(0);
        if expected_size.is_some_and(|n| have > n) {
            transfer.rewind(have);
            have = 0;
        }
        let mut hasher = Sha256::new();
        if have > 0 && Some(have) == expected_size {
            // A previous run got every byte but stopped before the rename.
            hash_prefix(dest, have, &mut hasher)?;
            return Ok(finish_hex(hasher));
        }
        let range = format!("bytes={have}-");
        let headers: &[(&str, &str)] = if have > 0 { &[("Range", &range)] } else { &[] };
        let fetched = self.send(Method::Get, url, headers, token, Follow::All)?;
        let status = fetched.status();
        let content_length = fetched.response.body().content_length();
        let mut file = match status {
            206 if have > 0 && content_range_start(&fetched) == Some(have) => {
                hash_prefix(dest, have, &mut hasher)?;
                OpenOptions::new().append(true).open(dest).map_err(HubError::io("cannot append to", dest))?
            }
            200 => {
                // Full body: the server ignored the Range (or there was nothing to resume).
                transfer.rewind(have);
                have = 0;
                File::create(dest).map_err(HubError::io("cannot create", dest))?
            }
            206 | 416 if have > 0 => {
                // A range other than the one asked for, or what we have is not a prefix the
                // server recognises: start over.
                drop(fetched);
                transfer.rewind(have);
                File::create(dest).map_err(HubError::io("cannot truncate", dest))?;
                return self.download(url, token, dest, expected_size, sync, transfer);
            }
            _ => return Err(status_error(fetched)),
        };
        let final_url = fetched.url.clone();
        let expected = expected_size.or(content_length.map(|n| n + have));
        let mut reader = fetched.response.into_body().into_reader();
        let mut buf = vec![0u8; 1 << 20];
        let mut got = have;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(self.network_error(
                        &final_url,
                        format!("transfer broke off after {got} bytes ({e}); run again to resume"),
                    ));
                }
            };
            file.write_all(&buf[..n]).map_err(HubError::io("cannot write", dest))?;
            hasher.update(&buf[..n]);
            got += n as u64;
            transfer.advance(n as u64);
        }
        if let Some(expected) = expected
            && got != expected
        {
            return Err(self.network_error(&final_url, format!("got {got} of {expected} bytes; run again to resume")));
        }
        if sync {
            // Durable before the caller renames it to its final name.
            file.sync_all().map_err(HubError::io("cannot sync", dest))?;
        }
        Ok(finish_hex(hasher))
    }
}

/// The error for a status the caller did not expect, with the start of the body when it is text
/// (index servers explain themselves there).
pub(crate) fn status_error(fetched: Fetched) -> HubError {
    let status = fetched.status();
    let url = fetched.url.clone();
    let is_text = fetched.header("content-type").is_some_and(|t| t.starts_with("text/") || t.contains("json"));
    let detail = if is_text {
        fetched
            .response
            .into_body()
            .into_with_config()
            .limit(4096)
            .read_to_string()
            .ok()
            .map(|s| s.trim().chars().take(300).collect::<String>())
            .filter(|s| !s.is_empty())
            .map(|s| format!(": {s}"))
            .unwrap_or_default()
    } else {
        String::new()
    };
    HubError::HttpStatus { url, status, detail }
}

fn content_range_start(fetched: &Fetched) -> Option<u64> {
    // "bytes 100-199/200"
    let v = fetched.header("content-range")?;
    let range = v.trim().strip_prefix("bytes")?.trim_start();
    range.split('-').next()?.trim().parse().ok()
}

/// scheme://host[:port], lower-cased, default ports dropped: what decides whether a token may
/// be sent along.
pub(crate) fn origin(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return String::new();
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let scheme = scheme.to_ascii_lowercase();
    let mut authority = authority.to_ascii_lowercase();
    let default_port = if scheme == "https" { ":443" } else { ":80" };
    if authority.ends_with(default_port) {
        authority.truncate(authority.len() - default_port.len());
    }
    format!("{scheme}://{authority}")
}

/// Resolves a Location header or index link against the URL it came from (RFC 3986, for the
/// shapes servers actually send: absolute, scheme-relative, absolute-path and relative paths).
pub(crate) fn join_url(base: &str, reference: &str) -> String {
    if reference.contains("://") {
        return reference.to_string();
    }
    if let Some(rest) = reference.strip_prefix("//") {
        let scheme = base.split("://").next().unwrap_or("https");
        return format!("{scheme}://{rest}");
    }
    let base = &base[..base.find(['?', '#']).unwrap_or(base.len())];
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..].find('/').map_or(base.len(), |i| authority_start + i);
    let (prefix, base_path) = base.split_at(path_start);
    let joined = if reference.starts_with('/') {
        reference.to_string()
    } else {
        let dir = base_path.rfind('/').map_or("/", |i| &base_path[..=i]);
        format!("{dir}{reference}")
    };
    let (path, query) = match joined.find('?') {
        Some(i) => joined.split_at(i),
        None => (joined.as_str(), ""),
    };
    format!("{prefix}{}{query}", remove_dot_segments(path))
}

fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *seg {
            "." | ".." => {
                if *seg == ".." {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        assert_eq!(origin("https://HuggingFace.co/api/x"), "https://huggingface.co");
        assert_eq!(origin("https://huggingface.co:443/x"), "https://huggingface.co");
        assert_eq!(origin("http://127.0.0.1:8080/x?y"), "http://127.0.0.1:8080");
        assert_ne!(origin("https://cdn-lfs.hf.co/x"), origin("https://huggingface.co/x"));
    }

    #[test]
    fn joins() {
        assert_eq!(join_url("https://a.b/c/d", "https://x.y/z"), "https://x.y/z");
        assert_eq!(join_url("https://a.b/c/d", "//x.y/z"), "https://x.y/z");
        assert_eq!(join_url("https://a.b/c/d?q=1", "/z"), "https://a.b/z");
        assert_eq!(join_url("https://a.b/simple/pkg/", "../../files/w.whl"), "https://a.b/files/w.whl");
        assert_eq!(join_url("https://a.b/simple/pkg/", "./w.whl?x=1"), "https://a.b/simple/pkg/w.whl?x=1");
        assert_eq!(join_url("http://h:1/x/", ".."), "http://h:1/");
        assert_eq!(join_url("https://a.b/c/d", "e"), "https://a.b/c/e");
        assert_eq!(join_url("https://a.b", "e"), "https://a.b/e");
    }
}
