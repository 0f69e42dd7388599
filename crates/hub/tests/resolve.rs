//! How `--model X` is read: local paths first, then catalog names, then repo ids; and the errors
//! for everything else.

mod support;

use support::TempDir;
use vllm_rs_hub::{HubConfig, HubError, ModelSource, Progress, catalog, resolve_with, usage_help};

fn config(dir: &TempDir) -> HubConfig {
    // Every endpoint is a closed port: none of these cases may touch the network.
    HubConfig {
        cache_dir: dir.path().join("cache"),
        pypi_index: "http://127.0.0.1:9/simple".into(),
        hf_endpoint: "http://127.0.0.1:9".into(),
        hf_cache: dir.path().join("hub"),
        hf_token: None,
        offline: false,
        progress: Progress::Hidden,
        catalog: catalog(),
    }
}

#[test]
fn local_directory_and_gguf_are_used_in_place() {
    let dir = TempDir::new("res-local");
    let cfg = config(&dir);

    let hf_dir = dir.path().join("hf-model");
    std::fs::create_dir_all(&hf_dir).unwrap();
    std::fs::write(hf_dir.join("config.json"), "{}").unwrap();
    let m = resolve_with(Some(hf_dir.to_str().unwrap()), &cfg).unwrap();
    assert_eq!((m.path.as_path(), &m.source), (hf_dir.as_path(), &ModelSource::Local));

    let gguf = dir.path().join("model.gguf");
    std::fs::write(&gguf, b"GGUF\x03\0\0\0").unwrap();
    assert_eq!(resolve_with(Some(gguf.to_str().unwrap()), &cfg).unwrap().path, gguf);

    // A directory holding just one .gguf resolves to that file.
    let gguf_dir = dir.path().join("gguf-only");
    std::fs::create_dir_all(&gguf_dir).unwrap();
    std::fs::write(gguf_dir.join("x.gguf"), b"GGUF\x03\0\0\0").unwrap();
    assert_eq!(resolve_with(Some(gguf_dir.to_str().unwrap()), &cfg).unwrap().path, gguf_dir.join("x.gguf"));
}

#[test]
fn unusable_local_paths_say_why() {
    let dir = TempDir::new("res-bad");
    let cfg = config(&dir);

    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let err = resolve_with(Some(empty.to_str().unwrap()), &cfg).unwrap_err();
    assert!(matches!(err, HubError::BadLocalModel { .. }) && err.to_string().contains("config.json"), "{err}");

    let two = dir.path().join("two");
    std::fs::create_dir_all(&two).unwrap();
    std::fs::write(two.join("a.gguf"), b"GGUF").unwrap();
    std::fs::write(two.join("b.gguf"), b"GGUF").unwrap();
    let err = resolve_with(Some(two.to_str().unwrap()), &cfg).unwrap_err();
    assert!(err.to_string().contains("a.gguf") && err.to_string().contains("b.gguf"), "{err}");

    let fake = dir.path().join("fake.gguf");
    std::fs::write(&fake, b"<html>").unwrap();
    let err = resolve_with(Some(fake.to_str().unwrap()), &cfg).unwrap_err();
    assert!(err.to_string().contains("GGUF magic"), "{err}");

    let st = dir.path().join("model.safetensors");
    std::fs::write(&st, b"{}").unwrap();
    let err = resolve_with(Some(st.to_str().unwrap()), &cfg).unwrap_err();
    assert!(err.to_string().contains("directory that holds config.json"), "{err}");

    for missing in ["./no/such/model.gguf", "/no/such/dir", "no-such.gguf"] {
        let err = resolve_with(Some(missing), &cfg).unwrap_err();
        assert!(matches!(err, HubError::PathNotFound { .. }), "{missing}: {err}");
        assert!(err.to_string().contains("does not exist"), "{err}");
    }
}

#[test]
fn unknown_name_lists_the_catalog_and_the_other_forms() {
    let dir = TempDir::new("res-unknown");
    let err = resolve_with(Some("llama-9000"), &config(&dir)).unwrap_err();
    assert!(matches!(err, HubError::UnknownModel { .. }), "{err}");
    let msg = err.to_string();
    for e in catalog() {
        assert!(msg.contains(e.name) && msg.contains(e.description), "{msg}");
    }
    assert!(msg.contains("default") && msg.contains("org/name") && msg.contains(".gguf"), "{msg}");
    assert!(usage_help(catalog()).lines().count() >= catalog().len() + 2);
}

#[test]
fn catalog_names_and_repo_ids_go_to_their_fetchers() {
    // With everything offline, the error tells which fetcher was chosen.
    let dir = TempDir::new("res-route");
    let cfg = HubConfig { offline: true, ..config(&dir) };
    for name in ["smollm2", "SmolLM2-135M-Instruct", "qwen05", "qwen15", "gemma3"] {
        let err = resolve_with(Some(name), &cfg).unwrap_err();
        assert!(err.to_string().contains("catalog model"), "{name}: {err}");
    }
    let err = resolve_with(None, &cfg).unwrap_err();
    assert!(err.to_string().contains("catalog model 'smollm2'"), "{err}");
    for repo in ["Qwen/Qwen3-0.6B", "org/name@v1", "org/name:model-Q4_K_M.gguf"] {
        let err = resolve_with(Some(repo), &cfg).unwrap_err();
        assert!(err.to_string().contains("Hugging Face repo"), "{repo}: {err}");
    }
}
