//! Which files of a Hub repo make a model for vllm-rs, and whether a cached snapshot already
//! holds them. Pure decisions over file lists and the snapshot directory; no network.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::HubError;
use crate::hf_cache::is_safe_repo_path;
use crate::hf_spec::HfSpec;

/// What a snapshot must hold for `select`; the path to use if it holds it.
pub(crate) fn complete_snapshot(snapshot: &Path, select: Option<&str>) -> Option<PathBuf> {
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
            let complete = |(index, is_weights): (&str, IsWeights)| {
                let index = snapshot.join(index);
                if index.is_file() {
                    index_shards(&index).is_ok_and(|shards| shards.iter().all(|s| snapshot.join(s).is_file()))
                } else {
                    list_dir(snapshot).iter().any(|f| is_weights(f) && snapshot.join(f).is_file())
                }
            };
            WEIGHTS.into_iter().any(complete).then(|| snapshot.to_path_buf())
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

pub(crate) fn is_gguf(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".gguf")
}

pub(crate) const SAFETENSORS_INDEX: &str = "model.safetensors.index.json";

/// Whether a file name is one of a kind of weight files.
type IsWeights = fn(&str) -> bool;

/// The weights of an HF directory, in vLLM's order of preference (`--load-format auto`): each
/// kind's index and the files of that kind. PyTorch `.bin` weights only where there are no
/// safetensors (and not `training_args.bin` and the like).
const WEIGHTS: [(&str, IsWeights); 2] = [
    (SAFETENSORS_INDEX, |f| f.ends_with(".safetensors")),
    ("pytorch_model.bin.index.json", |f| f.starts_with("pytorch_model") && f.ends_with(".bin")),
];

pub(crate) enum Plan {
    Gguf(String),
    Dir { small: Vec<String>, shards: Shards },
}

pub(crate) enum Shards {
    All(Vec<String>),
    /// Only the shards the index names: some repos also carry a consolidated copy of the weights.
    FromIndex(String),
}

/// Which repo files to download, mirroring what vLLM reads: config, generation config, tokenizer
/// and chat template files, and safetensors weights; or one GGUF file.
pub(crate) fn choose(spec: &HfSpec, files: &[String]) -> Result<Plan, HubError> {
    let ggufs: Vec<String> = files.iter().filter(|f| is_gguf(f)).cloned().collect();
    if let Some(sel) = &spec.select {
        return select_gguf(sel, &ggufs).map(Plan::Gguf).map_err(|detail| gguf_error(spec, &ggufs, detail));
    }
    let root = |f: &&String| !f.contains('/');
    let has_config = files.iter().any(|f| f == "config.json");
    for (index, is_weights) in WEIGHTS {
        let weights: Vec<String> = files.iter().filter(root).filter(|f| is_weights(f)).cloned().collect();
        if has_config && !weights.is_empty() {
            let small = files.iter().filter(|f| is_metadata_file(f)).cloned().collect();
            let shards = if files.iter().any(|f| f == index) {
                Shards::FromIndex(index.to_string())
            } else {
                Shards::All(weights)
            };
            return Ok(Plan::Dir { small, shards });
        }
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

pub(crate) fn shards_in_index(index: &Path, files: &[String]) -> Result<Vec<String>, HubError> {
    let shards = index_shards(index)?;
    if let Some(missing) = shards.iter().find(|s| !files.contains(s)) {
        return Err(HubError::BadResponse {
            url: index.display().to_string(),
            reason: format!("the index names shard '{missing}', which the repo does not have"),
        });
    }
    Ok(shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> HfSpec {
        HfSpec::parse(s).unwrap()
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
        // Without safetensors, PyTorch .bin weights (never training_args.bin), from their index.
        let bins: Vec<String> = ["config.json", "pytorch_model.bin", "training_args.bin"].map(String::from).to_vec();
        let Plan::Dir { shards: Shards::All(shards), .. } = choose(&s, &bins).unwrap() else { panic!() };
        assert_eq!(shards, ["pytorch_model.bin"]);
        let sharded: Vec<String> =
            ["config.json", "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"]
                .into_iter()
                .chain(["pytorch_model.bin.index.json"])
                .map(String::from)
                .collect();
        let Plan::Dir { shards: Shards::FromIndex(index), .. } = choose(&s, &sharded).unwrap() else { panic!() };
        assert_eq!(index, "pytorch_model.bin.index.json");
        let only_gguf: Vec<String> = vec!["README.md".into(), "a.gguf".into()];
        assert!(matches!(choose(&s, &only_gguf).unwrap(), Plan::Gguf(f) if f == "a.gguf"));
        let two: Vec<String> = vec!["a.gguf".into(), "b.gguf".into()];
        let err = choose(&s, &two).err().unwrap().to_string();
        assert!(err.contains("a.gguf") && err.contains("b.gguf") && err.contains(":FILE.gguf"), "{err}");
        let none: Vec<String> = vec!["README.md".into()];
        assert!(matches!(choose(&s, &none), Err(HubError::NoWeights { .. })));
    }
}
