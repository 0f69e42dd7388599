//! The real catalog fetch path (index lookup, wheel download, SHA-256 checks, member extraction,
//! concatenation, atomic rename, reuse) against a local package index serving wheels built here.

mod support;

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use support::server::{Reply, Request, TestServer};
use support::{TempDir, files_under, pseudo_random, sha256_hex};
use vllm_rs_hub::{CatalogEntry, HubConfig, HubError, ModelSource, Progress, ProgressEvent, WheelPart, resolve_with};

/// A fake model split across two wheels, the way the real catalog's large models are.
struct Fixture {
    payload: Vec<u8>,
    wheels: Vec<(String, Vec<u8>)>, // (file name, bytes)
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn wheel(package: &str, member: &str, data: &[u8]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    zip.start_file(format!("{package}-1.0.dist-info/METADATA"), opts).unwrap();
    zip.write_all(b"Metadata-Version: 2.1\n").unwrap();
    zip.start_file(member, opts).unwrap();
    zip.write_all(data).unwrap();
    zip.finish().unwrap().into_inner()
}

impl Fixture {
    fn new() -> Fixture {
        let mut payload = b"GGUF".to_vec();
        payload.extend(pseudo_random(300_000, 7));
        let (a, b) = payload.split_at(120_001);
        let wheels = vec![
            (
                "test_model_part1-1.0-py3-none-any.whl".to_string(),
                wheel("test_model_part1", "test_model_part1/data/part01.bin", a),
            ),
            (
                "test_model_part2-1.0-py3-none-any.whl".to_string(),
                wheel("test_model_part2", "test_model_part2/data/part02.bin", b),
            ),
        ];
        Fixture { payload, wheels }
    }

    /// A catalog holding this model as `testmodel` and, to test the default, as `smollm2`.
    fn catalog(&self, final_sha: Option<&str>) -> &'static [CatalogEntry] {
        let sha = leak(final_sha.map(str::to_string).unwrap_or_else(|| sha256_hex(&self.payload)));
        let parts: &'static [WheelPart] = Box::leak(
            vec![
                WheelPart {
                    package: "Test_Model.Part1",
                    version: "1.0",
                    wheel_sha256: leak(sha256_hex(&self.wheels[0].1)),
                    member: "test_model_part1/data/part01.bin",
                },
                WheelPart {
                    package: "test-model-part2",
                    version: "1.0",
                    wheel_sha256: leak(sha256_hex(&self.wheels[1].1)),
                    member: "test_model_part2/data/part02.bin",
                },
            ]
            .into_boxed_slice(),
        );
        let entry = |name: &'static str| CatalogEntry {
            name,
            aliases: &["Test-Model-1B"],
            description: "test model",
            file_name: "test-model.gguf",
            sha256: sha,
            parts,
        };
        Box::leak(vec![entry("testmodel"), CatalogEntry { aliases: &[], ..entry("smollm2") }].into_boxed_slice())
    }
}

/// Serves part1's listing as PEP 691 JSON and part2's as PEP 503 HTML, each with a decoy file
/// (same project, other hash) that must not be picked. `serve` can alter a wheel's bytes.
fn index_server(fx: &Fixture, serve: impl Fn(usize, &Request, &[u8]) -> Reply + Send + Sync + 'static) -> TestServer {
    let wheels: HashMap<String, (usize, Vec<u8>)> =
        fx.wheels.iter().enumerate().map(|(i, (name, bytes))| (format!("/files/{name}"), (i, bytes.clone()))).collect();
    let (n1, w1) = (fx.wheels[0].0.clone(), fx.wheels[0].1.clone());
    let (n2, w2) = (fx.wheels[1].0.clone(), fx.wheels[1].1.clone());
    TestServer::start(move |req| match req.path.as_str() {
        "/simple/test-model-part1/" => {
            assert!(req.header("accept").unwrap().contains("application/vnd.pypi.simple.v1+json"));
            let json = serde_json::json!({
                "meta": {"api-version": "1.1"},
                "name": "test-model-part1",
                "files": [
                    {"filename": "test_model_part1-0.9-py3-none-any.whl", "url": "/files/decoy.whl",
                     "hashes": {"sha256": "0".repeat(64)}, "size": 3},
                    {"filename": n1, "url": format!("../../files/{n1}"),
                     "hashes": {"sha256": sha256_hex(&w1)}, "size": w1.len()},
                ]
            });
            Reply::new(200).header("Content-Type", "application/vnd.pypi.simple.v1+json").body(json.to_string())
        }
        "/simple/test-model-part2/" => {
            let html = format!(
                "<!DOCTYPE html><html><body>\n<a href=\"/files/decoy.whl#sha256={}\">decoy</a><br/>\n\
                 <a href=\"/files/{n2}#sha256={}\" data-requires-python=\"&gt;=3.8\">{n2}</a><br/>\n</body></html>",
                "1".repeat(64),
                sha256_hex(&w2)
            );
            Reply::new(200).header("Content-Type", "text/html").body(html)
        }
        path => match wheels.get(path) {
            Some((i, bytes)) => serve(*i, req, bytes),
            None => Reply::new(404).header("Content-Type", "text/plain").body("Not Found"),
        },
    })
}

fn config(cache: &TempDir, index: &str) -> HubConfig {
    HubConfig {
        cache_dir: cache.path().to_path_buf(),
        pypi_index: format!("{index}/simple"),
        hf_endpoint: "http://127.0.0.1:9".into(),
        hf_cache: cache.path().join("hf"),
        hf_token: None,
        offline: false,
        progress: Progress::Hidden,
        catalog: &[],
    }
}

fn recorder() -> (Progress, Arc<Mutex<Vec<ProgressEvent>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    (Progress::Observer(Arc::new(move |e: &ProgressEvent| sink.lock().unwrap().push(e.clone()))), events)
}

#[test]
fn fetches_verifies_and_then_reuses_without_network() {
    let fx = Fixture::new();
    let server = index_server(&fx, |_, req, bytes| Reply::ranged(req, bytes));
    let cache = TempDir::new("cat-ok");
    let (progress, events) = recorder();
    let cfg = HubConfig { catalog: fx.catalog(None), progress, ..config(&cache, &server.base) };

    let model = resolve_with(Some("testmodel"), &cfg).unwrap();
    assert_eq!(model.source, ModelSource::Catalog { name: "testmodel" });
    assert_eq!(model.path, cache.path().join("models/testmodel/test-model.gguf"));
    assert_eq!(std::fs::read(&model.path).unwrap(), fx.payload);
    // Nothing but the finished file and the (released) lock: no partial wheels, no temp file.
    assert_eq!(files_under(&cache.path().join("models/testmodel")), [".lock", "test-model.gguf"]);

    // Two listings, a HEAD for the size the HTML listing lacks, two wheels; never the decoys.
    let calls: Vec<String> = server.requests().iter().map(|r| format!("{} {}", r.method, r.path)).collect();
    let (w1, w2) = (&fx.wheels[0].0, &fx.wheels[1].0);
    assert_eq!(
        calls,
        [
            "GET /simple/test-model-part1/".to_string(),
            "GET /simple/test-model-part2/".to_string(),
            format!("HEAD /files/{w2}"),
            format!("GET /files/{w1}"),
            format!("GET /files/{w2}"),
        ]
    );

    // Progress: one transfer covering both wheels, monotone, ending at the total.
    let events = events.lock().unwrap().clone();
    let total = (fx.wheels[0].1.len() + fx.wheels[1].1.len()) as u64;
    assert_eq!(
        events.first(),
        Some(&ProgressEvent::Start { label: "test-model.gguf".into(), total: Some(total), resumed: 0 })
    );
    assert_eq!(events.last(), Some(&ProgressEvent::Finish { label: "test-model.gguf".into(), done: total }));
    let mut last = 0;
    for e in &events {
        if let ProgressEvent::Advance { done, .. } = e {
            assert!(*done > last && *done <= total);
            last = *done;
        }
    }
    assert_eq!(last, total);

    // Reuse: by alias, by the default, and offline; no request at all.
    let before = server.count();
    assert_eq!(resolve_with(Some("test-model-1b"), &cfg).unwrap().path, model.path);
    let offline = HubConfig { offline: true, ..cfg.clone() };
    assert_eq!(resolve_with(Some("TESTMODEL"), &offline).unwrap().path, model.path);
    assert_eq!(server.count(), before);
}

#[test]
fn no_model_means_the_default_entry() {
    let fx = Fixture::new();
    let server = index_server(&fx, |_, req, bytes| Reply::ranged(req, bytes));
    let cache = TempDir::new("cat-default");
    let cfg = HubConfig { catalog: fx.catalog(None), ..config(&cache, &server.base) };
    let model = resolve_with(None, &cfg).unwrap();
    assert_eq!(model.source, ModelSource::Catalog { name: "smollm2" });
    assert_eq!(std::fs::read(&model.path).unwrap(), fx.payload);
}

#[test]
fn final_hash_mismatch_is_reported_and_nothing_is_kept() {
    let fx = Fixture::new();
    let server = index_server(&fx, |_, req, bytes| Reply::ranged(req, bytes));
    let cache = TempDir::new("cat-badsha");
    let wrong = "ab".repeat(32);
    let cfg = HubConfig { catalog: fx.catalog(Some(&wrong)), ..config(&cache, &server.base) };

    let err = resolve_with(Some("testmodel"), &cfg).unwrap_err();
    let HubError::ChecksumMismatch { expected, actual, .. } = &err else { panic!("{err}") };
    assert_eq!(expected, &wrong);
    assert_eq!(actual, &sha256_hex(&fx.payload));
    let msg = err.to_string();
    assert!(msg.contains(&wrong) && msg.contains(&sha256_hex(&fx.payload)) && msg.contains("deleted"), "{msg}");
    assert_eq!(files_under(&cache.path().join("models/testmodel")), [".lock"]);
}

#[test]
fn tampered_wheel_is_rejected_and_deleted() {
    let fx = Fixture::new();
    let server = index_server(&fx, |i, req, bytes| {
        let mut bytes = bytes.to_vec();
        if i == 1 {
            let n = bytes.len();
            bytes[n / 2] ^= 0xff;
        }
        Reply::ranged(req, &bytes)
    });
    let cache = TempDir::new("cat-tamper");
    let cfg = HubConfig { catalog: fx.catalog(None), ..config(&cache, &server.base) };

    let err = resolve_with(Some("testmodel"), &cfg).unwrap_err();
    assert!(matches!(err, HubError::ChecksumMismatch { .. }), "{err}");
    assert!(err.to_string().contains("test-model-part2"), "{err}");
    let left = files_under(&cache.path().join("models/testmodel"));
    // The good first wheel is kept for the next attempt; the bad one and any final file are not.
    assert_eq!(left, [".lock".to_string(), format!(".partial/{}.whl", sha256_hex(&fx.wheels[0].1))], "{left:?}");
}

#[test]
fn interrupted_download_leaves_no_final_file_and_resumes() {
    let fx = Fixture::new();
    let first_get = Arc::new(AtomicUsize::new(0));
    let counter = first_get.clone();
    let server = index_server(&fx, move |i, req, bytes| {
        let mut reply = Reply::ranged(req, bytes);
        // The first download of wheel 0 dies halfway through.
        if i == 0 && counter.fetch_add(1, Ordering::SeqCst) == 0 {
            reply.cut_after = Some(bytes.len() / 2);
        }
        reply
    });
    let cache = TempDir::new("cat-resume");
    let (progress, events) = recorder();
    let cfg = HubConfig { catalog: fx.catalog(None), progress, ..config(&cache, &server.base) };

    let err = resolve_with(Some("testmodel"), &cfg).unwrap_err();
    assert!(matches!(err, HubError::Network { .. }), "{err}");
    assert!(err.to_string().contains("run again to resume"), "{err}");
    let final_path = cache.path().join("models/testmodel/test-model.gguf");
    assert!(!final_path.exists());
    let partial = cache.path().join(format!("models/testmodel/.partial/{}.whl.part", sha256_hex(&fx.wheels[0].1)));
    let have = std::fs::metadata(&partial).unwrap().len();
    assert!(have > 0 && have < fx.wheels[0].1.len() as u64);

    events.lock().unwrap().clear();
    let model = resolve_with(Some("testmodel"), &cfg).unwrap();
    assert_eq!(std::fs::read(&model.path).unwrap(), fx.payload);
    let ranges: Vec<String> = server.requests().iter().filter_map(|r| r.header("range").map(str::to_string)).collect();
    assert_eq!(ranges, [format!("bytes={have}-")]);
    let start = events.lock().unwrap()[0].clone();
    assert!(matches!(start, ProgressEvent::Start { resumed, .. } if resumed == have), "{start:?}");
}

#[test]
fn a_server_that_ignores_range_gets_a_clean_restart() {
    let fx = Fixture::new();
    let gets = Arc::new(AtomicUsize::new(0));
    let counter = gets.clone();
    let server = index_server(&fx, move |i, _req, bytes| {
        // Never a 206: every answer is the whole file; the first one for wheel 0 breaks off.
        let mut reply = Reply::new(200).body(bytes);
        if i == 0 && counter.fetch_add(1, Ordering::SeqCst) == 0 {
            reply.cut_after = Some(bytes.len() / 3);
        }
        reply
    });
    let cache = TempDir::new("cat-norange");
    let (progress, events) = recorder();
    let cfg = HubConfig { catalog: fx.catalog(None), progress, ..config(&cache, &server.base) };
    assert!(resolve_with(Some("testmodel"), &cfg).is_err());
    events.lock().unwrap().clear();
    let model = resolve_with(Some("testmodel"), &cfg).unwrap();
    assert_eq!(std::fs::read(&model.path).unwrap(), fx.payload);
    // The Range was asked for, ignored, and the bytes counted twice were taken back.
    assert!(server.requests().iter().any(|r| r.header("range").is_some()));
    let total = (fx.wheels[0].1.len() + fx.wheels[1].1.len()) as u64;
    assert_eq!(
        events.lock().unwrap().last(),
        Some(&ProgressEvent::Finish { label: "test-model.gguf".into(), done: total })
    );
}

#[test]
fn unknown_package_names_the_index() {
    let fx = Fixture::new();
    let server = TestServer::start(|_| Reply::new(404).body("Not Found"));
    let cache = TempDir::new("cat-404");
    let cfg = HubConfig { catalog: fx.catalog(None), ..config(&cache, &server.base) };
    let err = resolve_with(Some("testmodel"), &cfg).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, HubError::PackageNotFound { .. }), "{msg}");
    assert!(
        msg.contains(&server.base) && msg.contains("Test_Model.Part1") && msg.contains("VLLM_RS_PYPI_INDEX"),
        "{msg}"
    );
}

#[test]
fn network_down_says_which_url_and_what_to_do() {
    let fx = Fixture::new();
    // A port nothing listens on: bind, learn the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cache = TempDir::new("cat-down");
    let cfg = HubConfig { catalog: fx.catalog(None), ..config(&cache, &format!("http://127.0.0.1:{port}")) };
    let err = resolve_with(Some("testmodel"), &cfg).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, HubError::Network { .. }), "{msg}");
    assert!(msg.contains(&format!("http://127.0.0.1:{port}/simple/test-model-part1/")), "{msg}");
    assert!(msg.contains("--model"), "{msg}");
}

#[test]
fn offline_without_cache_fails_without_touching_the_network() {
    let fx = Fixture::new();
    let server = index_server(&fx, |_, req, bytes| Reply::ranged(req, bytes));
    let cache = TempDir::new("cat-offline");
    let cfg = HubConfig { catalog: fx.catalog(None), offline: true, ..config(&cache, &server.base) };
    let err = resolve_with(Some("testmodel"), &cfg).unwrap_err();
    assert!(matches!(err, HubError::Offline { .. }), "{err}");
    assert!(err.to_string().contains("HF_HUB_OFFLINE"), "{err}");
    assert_eq!(server.count(), 0);
}
