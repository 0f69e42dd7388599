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
use crate::http::{Fetched, Follow, Http, Method, join_url, origin, status_error};
use crate::lock::lock;
use crate::progress::{Progress, Transfer};

const NETWORK_HINT: &str = "Check the network connection (a proxy is taken from HTTPS_PROXY) or set \
     HF_ENDPOINT to a reachable Hub mirror. Without network, pass a local model directory or .gguf \
     file with --model, or copy a Hugging Face cache into HF_HUB_CACHE (it is then used offline).";

/// Files below this size get no progress bar of their own: a dozen flashing bars for JSON files
/// hide the one that matters.
const QUIET_BELOW: u64 = 4 << 20;

/// `org/name[@revision][:FILE.gguf | :QUANT]` as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HfSpec {
    pub repo: String,
    pub revision: String,
    /// A `.gguf` file name, or a quantization tag like `Q4_K_M` matched against the .gguf names.
    pub select: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HfModel {
    /// The snapshot directory, or the selected .gguf file inside it.
    pub path: PathBuf,
    pub commit: String,
}

impl HfSpec {
    /// Parses a repo reference; `None` when `s` is not shaped like one.
    pub fn parse(s: &str) -> Option<HfSpec> {
        let (main, select) = match s.rsplit_once(':') {
            // A selection is a quant tag, or a .gguf path that may sit in a subfolder.
            Some((main, sel)) if (!sel.is_empty() && !sel.contains('/')) || is_gguf(sel) => {
                (main, Some(sel.to_string()))
            }
            Some(_) => return None,
            None => (s, None),
        };
        let (repo, revision) = match main.split_once('@') {
            Some((repo, rev)) if !rev.is_empty() => (repo, rev.to_string()),
            Some(_) => return None,
            None => (main, "main".to_string()),
        };
        is_repo_id(repo).then(|| HfSpec { repo: repo.to_string(), revision, select })
    }
}

/// huggingface_hub's `validate_repo_id`, for the `org/name` form.
fn is_repo_id(s: &str) -> bool {
    let Some((org, name)) = s.split_once('/') else { return false };
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && !p.starts_with(['-', '.'])
            && !p.ends_with(['-', '.'])
            && !p.contains("--")
            && !p.contains("..")
    };
    s.len() <= 96 && part_ok(org) && part_ok(name)
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

/// What a snapshot must hold for `select`; the path to use if it holds it.
fn complete_snapshot(snapshot: &Path, select: Option<&str>) -> Option<PathBuf> {
    if !snapshot.is_dir() {
        return None;
    }
    match select {
        Some(file) if is_gguf(file) => {
            let path = snapshot.join(file);
            (is_safe_repo_path(file) && path.is_file()).then_some(path)
        }
        Some(tag) => select_gguf(tag, &local_ggufs(snapshot)).ok().map(|f| snapshot.join(f)),
        None if snapshot.join("config.json").is_file() => {
            let index = snapshot.join(SAFETENSORS_INDEX);
            let complete = if index.is_file() {
                let shards = index_shards(&index).ok()?;
                shards.iter().all(|s| snapshot.join(s).is_file())
            } else {
                list_dir(snapshot).iter().any(|f| f.ends_with(".safetensors") && snapshot.join(f).is_file())
            };
            complete.then(|| snapshot.to_path_buf())
        }
        None => match local_ggufs(snapshot).as_slice() {
            [only] => Some(snapshot.join(only)),
            _ => None,
        },
    }
}

/// .gguf files present (with their blobs) at the top of a snapshot.
fn local_ggufs(snapshot: &Path) -> Vec<String> {
    list_dir(snapshot).into_iter().filter(|f| is_gguf(f) && snapshot.join(f).is_file()).collect()
}

fn list_dir(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).filter_map(|e| e.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

fn is_gguf(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".gguf")
}

const SAFETENSORS_INDEX: &str = "model.safetensors.index.json";

enum Plan {
    Gguf(String),
    Dir { small: Vec<String>, shards: Shards },
}

enum Shards {
    All(Vec<String>),
    /// Only the shards the index names: some repos also carry a consolidated copy of the weights.
    FromIndex(String),
}

/// Which repo files to download, mirroring what vLLM reads: config, generation config, tokenizer
/// and chat template files, and safetensors weights; or one GGUF file.
fn choose(spec: &HfSpec, files: &[String]) -> Result<Plan, HubError> {
    let ggufs: Vec<String> = files.iter().filter(|f| is_gguf(f)).cloned().collect();
    if let Some(sel) = &spec.select {
        return select_gguf(sel, &ggufs).map(Plan::Gguf).map_err(|detail| gguf_error(spec, &ggufs, detail));
    }
    let root = |f: &&String| !f.contains('/');
    let has_config = files.iter().any(|f| f == "config.json");
    let safetensors: Vec<String> = files.iter().filter(root).filter(|f| f.ends_with(".safetensors")).cloned().collect();
    if has_config && !safetensors.is_empty() {
        let small = files.iter().filter(|f| is_metadata_file(f)).cloned().collect();
        let shards = if files.iter().any(|f| f == SAFETENSORS_INDEX) {
            Shards::FromIndex(SAFETENSORS_INDEX.to_string())
        } else {
            Shards::All(safetensors)
        };
        return Ok(Plan::Dir { small, shards });
    }
    match ggufs.as_slice() {
        [] => Err(HubError::NoWeights { repo: spec.repo.clone(), files: files.to_vec() }),
        [only] => Ok(Plan::Gguf(only.clone())),
        _ => Err(gguf_error(
            spec,
            &ggufs,
            format!(
                "it has {} .gguf files; pick one with ':FILE.gguf' or ':QUANT', e.g. --model {}:{}",
                ggufs.len(),
                spec.repo,
                ggufs[0]
            ),
        )),
    }
}

fn gguf_error(spec: &HfSpec, ggufs: &[String], detail: String) -> HubError {
    let list = if ggufs.is_empty() { "(none)".to_string() } else { ggufs.join("\n  ") };
    HubError::GgufChoice {
        repo: spec.repo.clone(),
        files: ggufs.to_vec(),
        detail: format!(
            "Hugging Face repo '{}' at '{}': {detail}. Its .gguf files:\n  {list}",
            spec.repo, spec.revision
        ),
    }
}

/// `sel` is an exact .gguf path, or a quantization tag matched as a whole `-`/`.`-separated
/// word of the file name (so `Q4_K` does not also pick `Q4_K_M`).
fn select_gguf(sel: &str, ggufs: &[String]) -> Result<String, String> {
    if is_gguf(sel) {
        return ggufs.iter().find(|f| *f == sel).cloned().ok_or_else(|| format!("it has no file '{sel}'"));
    }
    let tag = sel.to_ascii_lowercase();
    let matches: Vec<&String> = ggufs
        .iter()
        .filter(|f| {
            let base = f.rsplit('/').next().unwrap_or(f).to_ascii_lowercase();
            base.split(['-', '.']).any(|word| word == tag)
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(format!("no .gguf file matches '{sel}'")),
        _ => Err(format!("several .gguf files match '{sel}' (split GGUFs are not supported); name one exactly")),
    }
}

/// Top-level files that describe the model rather than hold its weights.
fn is_metadata_file(f: &str) -> bool {
    // sentence-transformers keeps its pooling settings in e.g. `1_Pooling/config.json`.
    if let Some((dir, name)) = f.split_once('/') {
        return dir.ends_with("_Pooling") && name == "config.json";
    }
    let lower = f.to_ascii_lowercase();
    [".json", ".jinja", ".tiktoken"].iter().any(|ext| lower.ends_with(ext))
        || ["tokenizer.model", "merges.txt", "vocab.txt", "spiece.model", "sentencepiece.bpe.model"].contains(&f)
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

#[derive(Deserialize)]
struct SafetensorsIndex {
    weight_map: std::collections::BTreeMap<String, String>,
}

fn index_shards(index: &Path) -> Result<Vec<String>, HubError> {
    let text = fs::read_to_string(index).map_err(HubError::io("cannot read", index))?;
    let parsed: SafetensorsIndex = serde_json::from_str(&text).map_err(|e| HubError::BadResponse {
        url: index.display().to_string(),
        reason: format!("not a safetensors index: {e}"),
    })?;
    let mut shards: Vec<String> = parsed.weight_map.into_values().collect();
    shards.sort();
    shards.dedup();
    Ok(shards)
}

fn shards_in_index(index: &Path, files: &[String]) -> Result<Vec<String>, HubError> {
    let shards = index_shards(index)?;
    if let Some(missing) = shards.iter().find(|s| !files.contains(s)) {
        return Err(HubError::BadResponse {
            url: index.display().to_string(),
            reason: format!("the index names shard '{missing}', which the repo does not have"),
        });
    }
    Ok(shards)
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

    fn spec(s: &str) -> HfSpec {
        HfSpec::parse(s).unwrap()
    }

    #[test]
    fn parses_specs() {
        assert_eq!(spec("org/name"), HfSpec { repo: "org/name".into(), revision: "main".into(), select: None });
        assert_eq!(spec("org/name@v1.0").revision, "v1.0");
        assert_eq!(spec("org/name:model-Q4_K_M.gguf").select.as_deref(), Some("model-Q4_K_M.gguf"));
        assert_eq!(spec("org/name:sub/model.gguf").select.as_deref(), Some("sub/model.gguf"));
        let s = spec("org/na.me-x_1@refs/pr/1:Q8_0");
        assert_eq!(
            (s.repo.as_str(), s.revision.as_str(), s.select.as_deref()),
            ("org/na.me-x_1", "refs/pr/1", Some("Q8_0"))
        );
        for bad in
            ["name", "a/b/c", "/abs/path", "./rel", "org/", "org/name@", "org/na--me", "-org/name", "org/name:", "~/x"]
        {
            assert!(HfSpec::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn selects_gguf_by_name_or_tag() {
        let files: Vec<String> =
            ["m-Q4_K_M.gguf", "m-Q4_K.gguf", "m-Q8_0.gguf", "sub/m.Q2_K.gguf"].iter().map(|s| s.to_string()).collect();
        assert_eq!(select_gguf("m-Q8_0.gguf", &files).unwrap(), "m-Q8_0.gguf");
        assert_eq!(select_gguf("q4_k_m", &files).unwrap(), "m-Q4_K_M.gguf");
        assert_eq!(select_gguf("Q4_K", &files).unwrap(), "m-Q4_K.gguf");
        assert_eq!(select_gguf("Q2_K", &files).unwrap(), "sub/m.Q2_K.gguf");
        assert!(select_gguf("Q5_0", &files).is_err());
        assert!(select_gguf("nope.gguf", &files).is_err());
    }

    #[test]
    fn chooses_weights_and_metadata() {
        let s = spec("o/r");
        let files: Vec<String> = [
            "config.json",
            "generation_config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "model.safetensors",
            "pytorch_model.bin",
            "README.md",
            "onnx/model.onnx",
            "1_Pooling/config.json",
            "merges.txt",
            "model.gguf",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let Plan::Dir { small, shards: Shards::All(shards) } = choose(&s, &files).unwrap() else { panic!() };
        assert_eq!(shards, vec!["model.safetensors"]);
        assert_eq!(
            small,
            [
                "config.json",
                "generation_config.json",
                "tokenizer.json",
                "tokenizer_config.json",
                "1_Pooling/config.json",
                "merges.txt"
            ]
        );
        let only_gguf: Vec<String> = vec!["README.md".into(), "a.gguf".into()];
        assert!(matches!(choose(&s, &only_gguf).unwrap(), Plan::Gguf(f) if f == "a.gguf"));
        let two: Vec<String> = vec!["a.gguf".into(), "b.gguf".into()];
        let err = choose(&s, &two).err().unwrap().to_string();
        assert!(err.contains("a.gguf") && err.contains("b.gguf") && err.contains(":FILE.gguf"), "{err}");
        let none: Vec<String> = vec!["README.md".into()];
        assert!(matches!(choose(&s, &none), Err(HubError::NoWeights { .. })));
    }

    #[test]
    fn quotes_like_python() {
        assert_eq!(quote("refs/pr/1", false), "refs%2Fpr%2F1");
        assert_eq!(quote("a b/c+d.json", true), "a%20b/c%2Bd.json");
    }
}
