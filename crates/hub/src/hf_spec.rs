//! Reading `org/name[@revision][:FILE.gguf | :QUANT]`, the Hugging Face form of `--model`.

use crate::hf_files::is_gguf;

/// `org/name[@revision][:FILE.gguf | :QUANT]` as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HfSpec {
    pub repo: String,
    pub revision: String,
    /// A `.gguf` file name, or a quantization tag like `Q4_K_M` matched against the .gguf names.
    pub select: Option<String>,
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
}
