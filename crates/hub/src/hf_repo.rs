//! Fetching a model repo from the Hugging Face Hub into the shared HF cache, the way
//! huggingface_hub's `snapshot_download` / `hf_hub_download` do: resolve the revision to a commit
//! with `GET /api/models/{repo}/revision/{rev}`, then per file `HEAD /{repo}/resolve/{commit}/{file}`
//! for its ETag (the blob name), and `GET` the file (redirected to a CDN for LFS files) only if
//! that blob is not cached yet.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::HubConfig;
use crate::digest::{is_sha256_hex, reject};
use crate::error::HubError;
use crate::hf_cache::{RepoCache, is_commit_hash, is_safe_etag, is_safe_repo_path, normalize_etag};
use crate::hf_files::{Plan, Shards, choose, complete_snapshot, shards_in_index};
use crate::hf_spec::HfSpec;
use crate::http::{Fetched, Follow, Http, Method, join_url, origin, status_error};
use crate::lock::lock;
use crate::progress::{Progress, Transfer};

const NETWORK_HINT: &str = "Check the network connection (a proxy is taken from HTTPS_PROXY) or set \
     HF_ENDPOINT to a reachable Hub mirror. Without network, pass a local model directory or .gguf \
     file with --model, or copy a Hugging Face cache into HF_HUB_CACHE (it is then used offline).";

/// Files below this size get no progress bar of their own: a dozen flashing bars for JSON files
/// hide the one that matters.
const QUIET_BELOW: u64 = 4 << 20;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HfModel {
    /// The snapshot directory, or the selected .gguf file inside it.
    pub path: PathBuf,
    pub commit: String,
}

/// Makes `spec` available in the HF cache and returns where it is. A snapshot that is already
/// complete for what we need is used without any network access.
pub fn fetch_hf_model(spec: &HfSpec, config: &HubConfig) -> Result<HfModel, HubError> {
    let cache = RepoCache::new(&config.hf_cache, &spec.repo);
    if let Some(commit) = cache.local_commit(&spec.revision)
        && let Some(path) = complete_snapshot(&cache.snapshot_dir(&commit), spec.select.as_deref())
    {
        return Ok(HfModel { path, commit });
    }
    if config.offline {
        let what = format!("Hugging Face repo '{}' at revision '{}'", spec.repo, spec.revision);
        return Err(HubError::Offline { what, path: cache.root() });
    }

    let hub = Hub { http: Http::new(NETWORK_HINT), config, spec, cache: &cache };
    let info = hub.repo_info()?;
    let commit = info.sha;
    let files: Vec<String> = info.siblings.into_iter().map(|s| s.rfilename).filter(|f| is_safe_repo_path(f)).collect();
    cache.write_ref(&spec.revision, &commit)?;

    let path = match choose(spec, &files)? {
        Plan::Gguf(file) => hub.file(&commit, &file)?,
        Plan::Dir { small, shards } => {
            for f in &small {
                hub.file(&commit, f)?;
            }
            let snapshot = cache.snapshot_dir(&commit);
            let shards = match shards {
                Shards::All(all) => all,
                Shards::FromIndex(index) => shards_in_index(&snapshot.join(&index), &files)?,
            };
            for f in &shards {
                hub.file(&commit, f)?;
            }
            snapshot
        }
    };
    Ok(HfModel { path, commit })
}

#[derive(Deserialize)]
struct RepoInfo {
    sha: String,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Deserialize)]
struct Sibling {
    rfilename: String,
}

/// One repo fetch in progress.
struct Hub<'a> {
    http: Http,
    config: &'a HubConfig,
    spec: &'a HfSpec,
    cache: &'a RepoCache,
}

impl Hub<'_> {
    fn endpoint(&self) -> &str {
        self.config.hf_endpoint.trim_end_matches('/')
    }

    fn token(&self) -> Option<&str> {
        self.config.hf_token.as_deref()
    }

    fn repo_info(&self) -> Result<RepoInfo, HubError> {
        let url =
            format!("{}/api/models/{}/revision/{}", self.endpoint(), self.spec.repo, quote(&self.spec.revision, false));
        let fetched =
            self.http.send(Method::Get, &url, &[("Accept", "application/json")], self.token(), Follow::All)?;
        if fetched.status() != 200 {
            return Err(self.status_error(fetched, None));
        }
        let final_url = fetched.url.clone();
        let text = fetched.text()?;
        let info: RepoInfo = serde_json::from_str(&text).map_err(|e| HubError::BadResponse {
            url: final_url.clone(),
            reason: format!("not a Hub model info: {e}"),
        })?;
        if !is_commit_hash(&info.sha) {
            return Err(HubError::BadResponse { url: final_url, reason: format!("'{}' is not a commit id", info.sha) });
        }
        Ok(info)
    }

    /// Maps the Hub's error statuses (told apart by its `X-Error-Code` header, as huggingface_hub
    /// does) to errors that say what to do.
    fn status_error(&self, fetched: Fetched, file: Option<&str>) -> HubError {
        let (repo, url, status) = (self.spec.repo.clone(), fetched.url.clone(), fetched.status());
        let code = fetched.header("x-error-code").unwrap_or("").to_string();
        let message = fetched.header("x-error-message").unwrap_or("").to_string();
        match (status, code.as_str(), file) {
            (_, "RevisionNotFound", _) => {
                HubError::RevisionNotFound { repo, revision: self.spec.revision.clone(), url }
            }
            (_, "EntryNotFound", Some(file)) | (404, "", Some(file)) => {
                HubError::EntryNotFound { repo, revision: self.spec.revision.clone(), file: file.to_string(), url }
            }
            (_, "GatedRepo", _) => HubError::GatedRepo { repo, url, status },
            (401, _, _) if message != "Invalid credentials in Authorization header" => {
                HubError::RepoNotFound { repo, url, status }
            }
            (_, "RepoNotFound", _) | (404, _, _) => HubError::RepoNotFound { repo, url, status },
            _ => status_error(fetched),
        }
    }

    /// Makes `snapshots/<commit>/<file>` exist, downloading its blob unless some revision
    /// already brought it.
    fn file(&self, commit: &str, file: &str) -> Result<PathBuf, HubError> {
        let pointer = self.cache.snapshot_dir(commit).join(file);
        if pointer.is_file() {
            return Ok(pointer);
        }
        let url = format!("{}/{}/resolve/{commit}/{}", self.endpoint(), self.spec.repo, quote(file, true));
        // Identity encoding, so Content-Length is the file size.
        let head =
            self.http.send(Method::Head, &url, &[("Accept-Encoding", "identity")], self.token(), Follow::SameOrigin)?;
        let status = head.status();
        if !(200..400).contains(&status) {
            return Err(self.status_error(head, Some(file)));
        }
        let redirected = (300..400).contains(&status);
        if head.header("x-repo-commit").is_none() {
            return Err(HubError::BadResponse {
                url,
                reason: "no X-Repo-Commit header: this is not a Hugging Face Hub endpoint (check HF_ENDPOINT)"
                    .to_string(),
            });
        }
        let etag = head.header("x-linked-etag").or_else(|| head.header("etag")).map(normalize_etag);
        let Some(etag) = etag.filter(|e| is_safe_etag(e)) else {
            return Err(HubError::BadResponse { url, reason: "missing or unusable ETag for this file".to_string() });
        };
        let size = head
            .header("x-linked-size")
            .or_else(|| if redirected { None } else { head.header("content-length") })
            .and_then(|v| v.trim().parse::<u64>().ok());
        let location = match head.header("location") {
            Some(loc) if redirected => join_url(&head.url, loc),
            _ => head.url.clone(),
        };
        drop(head);

        let blob = self.cache.blob_path(&etag);
        if !blob.is_file() {
            let _lock = lock(&self.cache.lock_path(&etag), file)?;
            if !blob.is_file() {
                self.download_blob(file, &location, &blob, &etag, size)?;
            }
        }
        self.cache.link(commit, file, &etag)
    }

    fn download_blob(
        &self,
        file: &str,
        location: &str,
        blob: &Path,
        etag: &str,
        size: Option<u64>,
    ) -> Result<(), HubError> {
        let dir = blob.parent().unwrap_or(blob);
        fs::create_dir_all(dir).map_err(HubError::io("cannot create", dir))?;
        // The name huggingface_hub used for resumable partial blobs; we hold the same lock.
        let partial = blob.with_file_name(format!("{etag}.incomplete"));
        let resumed = fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
        let progress = match &self.config.progress {
            Progress::Observer(_) => self.config.progress.clone(),
            _ if size.is_some_and(|s| s < QUIET_BELOW) => Progress::Hidden,
            p => p.clone(),
        };
        let mut transfer = Transfer::start(&progress, file, size, resumed);
        // The token goes to the Hub only, never to the CDN a file redirects to.
        let token = if origin(location) == origin(self.endpoint()) { self.token() } else { None };
        let sha = self.http.download(location, token, &partial, size, true, &mut transfer)?;
        // LFS files are named by their SHA-256: check it. (Small git files are named by their git
        // SHA-1, which TLS already protects in transit.)
        if is_sha256_hex(etag) && sha != etag {
            return Err(reject(&partial, &format!("'{file}' of {}", self.spec.repo), etag, &sha));
        }
        fs::rename(&partial, blob).map_err(HubError::io("cannot rename", &partial))?;
        transfer.finish();
        Ok(())
    }
}

/// Python's `urllib.parse.quote`: keep unreserved characters (and `/` in file paths).
fn quote(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_like_python() {
        assert_eq!(quote("refs/pr/1", false), "refs%2Fpr%2F1");
        assert_eq!(quote("a b/c+d.json", true), "a%20b/c%2Bd.json");
    }
}
