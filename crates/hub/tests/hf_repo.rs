//! Hugging Face Hub repos against a local server that answers the way the Hub does: the model
//! info API, `resolve/` URLs with ETag + X-Repo-Commit, a relative redirect for a small file and a
//! cross-host redirect to a "CDN" (carrying X-Linked-Etag / X-Linked-Size) for LFS files.

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use support::server::{Reply, Request, TestServer};
use support::{TempDir, files_under, pseudo_random, sha256_hex};
use vllm_rs_hub::{HubConfig, HubError, ModelSource, Progress, ProgressEvent, resolve_with};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

#[derive(Clone)]
struct RepoFile {
    name: String,
    bytes: Vec<u8>,
    lfs: bool,
}

impl RepoFile {
    /// What the Hub uses as ETag: the LFS sha256, or (for git files) a 40-hex git blob id.
    fn etag(&self) -> String {
        let sha = sha256_hex(&self.bytes);
        if self.lfs { sha } else { sha[..40].to_string() }
    }
}

fn file(name: &str, bytes: impl Into<Vec<u8>>) -> RepoFile {
    let lfs = name.ends_with(".safetensors") || name.ends_with(".gguf") || name.ends_with(".bin");
    RepoFile { name: name.to_string(), bytes: bytes.into(), lfs }
}

fn safetensors_repo() -> Vec<RepoFile> {
    vec![
        file("config.json", r#"{"architectures":["LlamaForCausalLM"]}"#),
        file("generation_config.json", r#"{"eos_token_id":2}"#),
        file("tokenizer.json", r#"{"model":{"type":"BPE"}}"#),
        file("tokenizer_config.json", r#"{"chat_template":"{{ x }}"}"#),
        file("model.safetensors", pseudo_random(200_000, 1)),
        file("pytorch_model.bin", pseudo_random(1000, 2)),
        file("README.md", "# model"),
    ]
}

struct Hub {
    hub: TestServer,
    cdn: TestServer,
}

/// `corrupt_cdn`: the CDN flips a byte of everything it serves.
fn start_hub(repos: Vec<(&str, Vec<RepoFile>)>, corrupt_cdn: bool) -> Hub {
    let repos: HashMap<String, Vec<RepoFile>> = repos.into_iter().map(|(r, f)| (r.to_string(), f)).collect();
    let blobs: HashMap<String, Vec<u8>> =
        repos.values().flatten().filter(|f| f.lfs).map(|f| (f.etag(), f.bytes.clone())).collect();
    let cdn = TestServer::start(move |req| {
        let sha = req.path.trim_start_matches("/lfs/").split('?').next().unwrap_or("");
        match blobs.get(sha) {
            Some(bytes) => {
                let mut bytes = bytes.clone();
                if corrupt_cdn {
                    bytes[10] ^= 1;
                }
                Reply::ranged(req, &bytes)
            }
            None => Reply::new(404),
        }
    });
    let cdn_base = cdn.base.clone();
    let repos = Arc::new(repos);
    let hub = TestServer::start(move |req| hub_reply(req, &repos, &cdn_base));
    Hub { hub, cdn }
}

fn error(status: u16, code: &str) -> Reply {
    Reply::new(status)
        .header("X-Error-Code", code)
        .header("Content-Type", "application/json")
        .body(format!(r#"{{"error":"{code}"}}"#))
}

fn hub_reply(req: &Request, repos: &HashMap<String, Vec<RepoFile>>, cdn: &str) -> Reply {
    let path = req.path.as_str();
    if let Some(rest) = path.strip_prefix("/api/models/") {
        let (repo, rev) = rest.split_once("/revision/").unwrap();
        let Some(files) = repos.get(repo) else { return error(404, "RepoNotFound") };
        if rev != "main" && rev != COMMIT {
            return error(404, "RevisionNotFound");
        }
        let siblings: Vec<_> = files.iter().map(|f| serde_json::json!({ "rfilename": f.name })).collect();
        let info = serde_json::json!({ "id": repo, "sha": COMMIT, "siblings": siblings });
        return Reply::new(200).header("Content-Type", "application/json").body(info.to_string());
    }
    // /{org}/{name}/resolve/{commit}/{file}  or the relative-redirect target
    // /api-cache/{org}/{name}/{commit}/{file}
    let (repo, file_name, cached) = if let Some(rest) = path.strip_prefix("/api-cache/") {
        let mut it = rest.splitn(4, '/');
        let (org, name, _commit, file) =
            (it.next().unwrap(), it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        (format!("{org}/{name}"), file.to_string(), true)
    } else {
        let Some((repo, rest)) = path[1..].split_once("/resolve/") else { return Reply::new(404) };
        let (commit, file) = rest.split_once('/').unwrap();
        assert_eq!(commit, COMMIT, "files are fetched by commit, not by branch");
        (repo.to_string(), file.to_string(), false)
    };
    let Some(files) = repos.get(&repo) else { return error(404, "RepoNotFound") };
    let Some(f) = files.iter().find(|f| f.name == file_name) else { return error(404, "EntryNotFound") };
    if f.lfs {
        return Reply::new(302)
            .header("Location", format!("{cdn}/lfs/{}?X-Amz-Signature=abc", f.etag()))
            .header("X-Repo-Commit", COMMIT)
            .header("X-Linked-Etag", format!("\"{}\"", f.etag()))
            .header("X-Linked-Size", f.bytes.len().to_string())
            .header("ETag", "\"pointer-file-etag\"");
    }
    if f.name == "tokenizer.json" && !cached {
        // The Hub serves some small files through a relative redirect.
        return Reply::new(307).header("Location", format!("/api-cache/{repo}/{COMMIT}/{file_name}"));
    }
    Reply::new(200).header("ETag", format!("W/\"{}\"", f.etag())).header("X-Repo-Commit", COMMIT).body(f.bytes.clone())
}

fn config(cache: &TempDir, endpoint: &str) -> HubConfig {
    HubConfig {
        cache_dir: cache.path().join("vllm-rs"),
        pypi_index: "http://127.0.0.1:9/simple".into(),
        hf_endpoint: endpoint.to_string(),
        hf_cache: cache.path().join("hub"),
        hf_token: None,
        offline: false,
        progress: Progress::Hidden,
        catalog: &[],
    }
}

fn dead_endpoint() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("http://127.0.0.1:{port}")
}

fn snapshot(cache: &TempDir, repo_folder: &str) -> PathBuf {
    cache.path().join("hub").join(repo_folder).join("snapshots").join(COMMIT)
}

#[test]
fn safetensors_repo_lands_in_the_hf_cache_layout_and_is_reused() {
    let files = safetensors_repo();
    let hub = start_hub(vec![("org/model", files.clone())], false);
    let cache = TempDir::new("hf-layout");
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = events.clone();
    let cfg = HubConfig {
        hf_token: Some("hf_test_token".into()),
        progress: Progress::Observer(Arc::new(move |e: &ProgressEvent| sink.lock().unwrap().push(e.clone()))),
        ..config(&cache, &hub.hub.base)
    };

    let model = resolve_with(Some("org/model"), &cfg).unwrap();
    let repo_dir = cache.path().join("hub/models--org--model");
    assert_eq!(model.path, snapshot(&cache, "models--org--model"));
    assert_eq!(
        model.source,
        ModelSource::HuggingFace { repo: "org/model".into(), revision: "main".into(), commit: COMMIT.into() }
    );
    assert_eq!(std::fs::read_to_string(repo_dir.join("refs/main")).unwrap(), COMMIT);

    // Weights and metadata only: no README, no PyTorch pickle.
    let wanted =
        ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"];
    let mut listed: Vec<String> =
        std::fs::read_dir(&model.path).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    listed.sort();
    assert_eq!(listed, wanted);
    for f in files.iter().filter(|f| wanted.contains(&f.name.as_str())) {
        let pointer = model.path.join(&f.name);
        assert_eq!(std::fs::read_link(&pointer).unwrap(), Path::new("../../blobs").join(f.etag()), "{}", f.name);
        assert_eq!(std::fs::read(&pointer).unwrap(), f.bytes, "{}", f.name);
    }
    let mut blobs = files_under(&repo_dir.join("blobs"));
    let mut etags: Vec<String> = files.iter().filter(|f| wanted.contains(&f.name.as_str())).map(|f| f.etag()).collect();
    blobs.sort();
    etags.sort();
    assert_eq!(blobs, etags, "only finished blobs, no .incomplete files");

    // The token went to the Hub on every request, and never to the CDN.
    let hub_reqs = hub.hub.requests();
    assert!(hub_reqs.iter().all(|r| r.header("authorization") == Some("Bearer hf_test_token")));
    let cdn_reqs = hub.cdn.requests();
    assert_eq!(cdn_reqs.len(), 1);
    assert!(cdn_reqs[0].header("authorization").is_none());
    assert!(!hub_reqs.iter().any(|r| r.path.contains("README") || r.path.contains(".bin")));
    // Progress for the weights file went through the observer.
    let events = events.lock().unwrap();
    assert!(events.contains(&ProgressEvent::Finish { label: "model.safetensors".into(), done: 200_000 }), "{events:?}");

    // Reuse: a second resolve and an offline one make no request at all.
    let (n_hub, n_cdn) = (hub.hub.count(), hub.cdn.count());
    assert_eq!(resolve_with(Some("org/model"), &cfg).unwrap().path, model.path);
    let offline = HubConfig { offline: true, ..cfg.clone() };
    assert_eq!(resolve_with(Some("org/model@main"), &offline).unwrap().path, model.path);
    assert_eq!(resolve_with(Some(&format!("org/model@{COMMIT}")), &offline).unwrap().path, model.path);
    assert_eq!((hub.hub.count(), hub.cdn.count()), (n_hub, n_cdn));
}

#[test]
#[cfg(unix)] // builds the symlinks by hand
fn a_cache_written_by_python_works_with_no_network() {
    // The layout huggingface_hub writes, made by hand; the endpoint is a closed port.
    let cache = TempDir::new("hf-python");
    let repo_dir = cache.path().join("hub/models--org--py-model");
    let snap = repo_dir.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo_dir.join("blobs")).unwrap();
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    std::fs::write(repo_dir.join("refs/main"), COMMIT).unwrap();
    for (name, body) in [("config.json", &b"{}"[..]), ("model.safetensors", &b"weights"[..])] {
        let etag = sha256_hex(body);
        std::fs::write(repo_dir.join("blobs").join(&etag), body).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/{etag}"), snap.join(name)).unwrap();
    }
    let cfg = config(&cache, &dead_endpoint());
    let model = resolve_with(Some("org/py-model"), &cfg).unwrap();
    assert_eq!(model.path, snap);
    assert!(model.description.contains("org/py-model"), "{}", model.description);
}

#[test]
fn incomplete_snapshot_is_completed_from_the_hub() {
    let files = safetensors_repo();
    let hub = start_hub(vec![("org/model", files)], false);
    let cache = TempDir::new("hf-partial");
    let cfg = config(&cache, &hub.hub.base);
    resolve_with(Some("org/model"), &cfg).unwrap();
    // Lose the weights' blob (a broken link now), as after an interrupted Python download.
    let blob_dir = cache.path().join("hub/models--org--model/blobs");
    let weights = std::fs::read_link(snapshot(&cache, "models--org--model").join("model.safetensors")).unwrap();
    std::fs::remove_file(blob_dir.join(weights.file_name().unwrap())).unwrap();

    let offline = HubConfig { offline: true, ..cfg.clone() };
    assert!(matches!(resolve_with(Some("org/model"), &offline), Err(HubError::Offline { .. })));
    let before = hub.cdn.count();
    let model = resolve_with(Some("org/model"), &cfg).unwrap();
    assert!(model.path.join("model.safetensors").is_file());
    assert_eq!(hub.cdn.count(), before + 1, "only the missing blob is fetched");
}

#[test]
fn offline_without_a_cache_fails_without_network() {
    let hub = start_hub(vec![("org/model", safetensors_repo())], false);
    let cache = TempDir::new("hf-offline");
    let cfg = HubConfig { offline: true, ..config(&cache, &hub.hub.base) };
    let err = resolve_with(Some("org/model"), &cfg).unwrap_err();
    assert!(matches!(err, HubError::Offline { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("org/model") && msg.contains("HF_HUB_OFFLINE"), "{msg}");
    assert_eq!(hub.hub.count(), 0);
}

#[test]
fn missing_repo_and_revision_are_clear_errors() {
    let hub = start_hub(vec![("org/model", safetensors_repo())], false);
    let cache = TempDir::new("hf-404");
    let cfg = config(&cache, &hub.hub.base);

    let err = resolve_with(Some("org/missing"), &cfg).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, HubError::RepoNotFound { status: 404, .. }), "{msg}");
    assert!(msg.contains("'org/missing'") && msg.contains("HF_TOKEN") && msg.contains("404"), "{msg}");

    let err = resolve_with(Some("org/model@v9"), &cfg).unwrap_err();
    assert!(matches!(err, HubError::RevisionNotFound { .. }), "{err}");
    assert!(err.to_string().contains("'v9'"), "{err}");

    let err = resolve_with(Some("org/model"), &config(&cache, &dead_endpoint())).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, HubError::Network { .. }), "{msg}");
    assert!(msg.contains("/api/models/org/model/revision/main") && msg.contains("--model"), "{msg}");
}

#[test]
fn gguf_repo_needs_a_choice_and_downloads_only_that_file() {
    let files = vec![
        file("README.md", "# quants"),
        file("m-Q4_K_M.gguf", [b"GGUF".as_slice(), &pseudo_random(5000, 3)].concat()),
        file("m-Q8_0.gguf", [b"GGUF".as_slice(), &pseudo_random(9000, 4)].concat()),
    ];
    let hub = start_hub(vec![("org/quants", files.clone())], false);
    let cache = TempDir::new("hf-gguf");
    let cfg = config(&cache, &hub.hub.base);

    let err = resolve_with(Some("org/quants"), &cfg).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(&err, HubError::GgufChoice { files, .. } if files.len() == 2), "{msg}");
    assert!(msg.contains("m-Q4_K_M.gguf") && msg.contains("m-Q8_0.gguf") && msg.contains("org/quants:"), "{msg}");

    let model = resolve_with(Some("org/quants:m-Q8_0.gguf"), &cfg).unwrap();
    assert_eq!(model.path, snapshot(&cache, "models--org--quants").join("m-Q8_0.gguf"));
    assert_eq!(std::fs::read(&model.path).unwrap(), files[2].bytes);
    assert!(!snapshot(&cache, "models--org--quants").join("m-Q4_K_M.gguf").exists());

    let model = resolve_with(Some("org/quants:q4_k_m"), &cfg).unwrap();
    assert_eq!(std::fs::read(&model.path).unwrap(), files[1].bytes);

    let err = resolve_with(Some("org/quants:m-Q2_K.gguf"), &cfg).unwrap_err();
    assert!(err.to_string().contains("no file 'm-Q2_K.gguf'"), "{err}");

    // Chosen files are reused offline.
    let offline = HubConfig { offline: true, ..cfg.clone() };
    assert_eq!(
        resolve_with(Some("org/quants:m-Q8_0.gguf"), &offline).unwrap().path,
        model.path.with_file_name("m-Q8_0.gguf")
    );
}

#[test]
fn corrupted_lfs_download_is_rejected() {
    let hub = start_hub(vec![("org/model", safetensors_repo())], true);
    let cache = TempDir::new("hf-corrupt");
    let err = resolve_with(Some("org/model"), &config(&cache, &hub.hub.base)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, HubError::ChecksumMismatch { .. }), "{msg}");
    assert!(msg.contains("model.safetensors"), "{msg}");
    let blobs = files_under(&cache.path().join("hub/models--org--model/blobs"));
    assert!(!blobs.iter().any(|b| b.len() == 64 || b.ends_with(".incomplete")), "{blobs:?}");
    assert!(!snapshot(&cache, "models--org--model").join("model.safetensors").exists());
}

#[test]
fn sharded_weights_follow_the_index() {
    let index = r#"{"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors","c":"model-00001-of-00002.safetensors"}}"#;
    let files = vec![
        file("config.json", "{}"),
        file("model.safetensors.index.json", index),
        file("model-00001-of-00002.safetensors", pseudo_random(3000, 5)),
        file("model-00002-of-00002.safetensors", pseudo_random(3000, 6)),
        file("consolidated.safetensors", pseudo_random(6000, 7)),
    ];
    let hub = start_hub(vec![("org/sharded", files)], false);
    let cache = TempDir::new("hf-sharded");
    let model = resolve_with(Some("org/sharded"), &config(&cache, &hub.hub.base)).unwrap();
    let mut listed: Vec<String> =
        std::fs::read_dir(&model.path).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json"
        ]
    );
}
