//! What `tokenizer_config.json` (and the chat-template files beside it) say about a tokenizer.
//!
//! Special tokens may be written as a plain string or as a serialized `AddedToken`
//! (`{"content": "<s>", "lstrip": false, ...}`); the chat template as a string or as a list of
//! `{name, template}`. `chat_template.jinja` and `additional_chat_templates/*.jinja` take priority
//! over the config's entry, as in transformers.

use crate::error::{Error, Result};
use serde_json::Value;
use std::path::Path;

/// A token named in the config, with the `AddedToken` flags when the config gives them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TokenSpec {
    pub content: String,
    pub special: bool,
    pub lstrip: bool,
    pub rstrip: bool,
    pub single_word: bool,
    pub normalized: bool,
}

impl TokenSpec {
    fn plain_special(content: &str) -> Self {
        TokenSpec {
            content: content.to_string(),
            special: true,
            lstrip: false,
            rstrip: false,
            single_word: false,
            normalized: false,
        }
    }

    pub fn to_added_token(&self) -> tokenizers::AddedToken {
        tokenizers::AddedToken::from(self.content.clone(), self.special)
            .lstrip(self.lstrip)
            .rstrip(self.rstrip)
            .single_word(self.single_word)
            .normalized(self.normalized)
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct TokenizerConfig {
    pub bos_token: Option<TokenSpec>,
    pub eos_token: Option<TokenSpec>,
    pub unk_token: Option<TokenSpec>,
    pub pad_token: Option<TokenSpec>,
    /// Other named special tokens (`mask_token`, `extra_special_tokens`, `additional_special_tokens`...):
    /// (name, token). Names of list entries are empty.
    pub other_special: Vec<(String, TokenSpec)>,
    /// `added_tokens_decoder`: id -> token.
    pub added_tokens_decoder: Vec<(u32, TokenSpec)>,
    /// Present only when the config sets them (transformers then rebuilds the post-processor).
    pub add_bos_token: Option<bool>,
    pub add_eos_token: Option<bool>,
    /// Chat templates by name; a single template is named "default".
    pub chat_templates: Vec<(String, String)>,
}

const NAMED_SPECIAL: [&str; 4] = ["bos_token", "eos_token", "unk_token", "pad_token"];
const OTHER_NAMED_SPECIAL: [&str; 3] = ["mask_token", "sep_token", "cls_token"];

impl TokenizerConfig {
    /// Reads `dir/tokenizer_config.json` (absent = all defaults) and the template files.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer_config.json");
        let mut cfg = if path.exists() {
            let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
            let json: Value =
                serde_json::from_str(&text).map_err(|e| Error::config(&path, format!("not valid JSON: {e}")))?;
            Self::from_json(&json).map_err(|msg| Error::config(&path, msg))?
        } else {
            TokenizerConfig::default()
        };
        let files = read_template_files(dir)?;
        if !files.is_empty() {
            cfg.chat_templates = files;
        }
        Ok(cfg)
    }

    pub fn from_json(json: &Value) -> Result<Self, String> {
        let obj = json.as_object().ok_or("expected a JSON object")?;
        let mut cfg = TokenizerConfig::default();
        for name in NAMED_SPECIAL {
            let spec = match obj.get(name) {
                None | Some(Value::Null) => None,
                Some(v) => Some(token_spec(v).map_err(|e| format!("{name}: {e}"))?),
            };
            match name {
                "bos_token" => cfg.bos_token = spec,
                "eos_token" => cfg.eos_token = spec,
                "unk_token" => cfg.unk_token = spec,
                _ => cfg.pad_token = spec,
            }
        }
        for name in OTHER_NAMED_SPECIAL {
            if let Some(v) = obj.get(name).filter(|v| !v.is_null()) {
                cfg.other_special.push((name.to_string(), token_spec(v).map_err(|e| format!("{name}: {e}"))?));
            }
        }
        for list_key in ["additional_special_tokens", "extra_special_tokens"] {
            match obj.get(list_key) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for v in items {
                        let spec = token_spec(v).map_err(|e| format!("{list_key}: {e}"))?;
                        cfg.other_special.push((String::new(), spec));
                    }
                }
                // transformers 5 also writes `extra_special_tokens` as {name: token}.
                Some(Value::Object(map)) => {
                    for (k, v) in map {
                        let spec = token_spec(v).map_err(|e| format!("{list_key}.{k}: {e}"))?;
                        cfg.other_special.push((k.clone(), spec));
                    }
                }
                Some(_) => return Err(format!("{list_key}: expected a list or an object")),
            }
        }
        if let Some(v) = obj.get("added_tokens_decoder").filter(|v| !v.is_null()) {
            let map = v.as_object().ok_or("added_tokens_decoder: expected an object")?;
            for (k, v) in map {
                let id: u32 = k.parse().map_err(|_| format!("added_tokens_decoder: key {k:?} is not a token id"))?;
                let spec = token_spec(v).map_err(|e| format!("added_tokens_decoder.{k}: {e}"))?;
                cfg.added_tokens_decoder.push((id, spec));
            }
        }
        cfg.add_bos_token = opt_bool(obj, "add_bos_token")?;
        cfg.add_eos_token = opt_bool(obj, "add_eos_token")?;
        cfg.chat_templates = match obj.get("chat_template") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![("default".to_string(), s.clone())],
            Some(Value::Array(items)) => {
                let mut out = Vec::new();
                for item in items {
                    let name = item.get("name").and_then(Value::as_str);
                    let template = item.get("template").and_then(Value::as_str);
                    match (name, template) {
                        (Some(n), Some(t)) => out.push((n.to_string(), t.to_string())),
                        _ => {
                            return Err("chat_template: list entries must be {\"name\": str, \"template\": str}".into());
                        }
                    }
                }
                out
            }
            Some(_) => return Err("chat_template: expected a string or a list of {name, template}".into()),
        };
        Ok(cfg)
    }
}

fn opt_bool(obj: &serde_json::Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(format!("{key}: expected true or false, got {other}")),
    }
}

/// A token written as a string (a special token) or as a serialized `AddedToken`.
fn token_spec(v: &Value) -> Result<TokenSpec, String> {
    match v {
        Value::String(s) => Ok(TokenSpec::plain_special(s)),
        Value::Object(map) => {
            let content =
                map.get("content").and_then(Value::as_str).ok_or("AddedToken without a string \"content\"")?;
            let flag = |k: &str, default: bool| map.get(k).and_then(Value::as_bool).unwrap_or(default);
            // A serialized AddedToken of a named special token defaults to special (transformers does so).
            let special = flag("special", true);
            Ok(TokenSpec {
                content: content.to_string(),
                special,
                lstrip: flag("lstrip", false),
                rstrip: flag("rstrip", false),
                single_word: flag("single_word", false),
                normalized: flag("normalized", !special),
            })
        }
        other => Err(format!("expected a string or an AddedToken object, got {other}")),
    }
}

/// `chat_template.jinja` (named "default") and `additional_chat_templates/<name>.jinja`.
fn read_template_files(dir: &Path) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let main = dir.join("chat_template.jinja");
    if main.exists() {
        out.push(("default".to_string(), std::fs::read_to_string(&main).map_err(|e| Error::io(&main, e))?));
    }
    let extra_dir = dir.join("additional_chat_templates");
    if extra_dir.is_dir() {
        let entries = std::fs::read_dir(&extra_dir).map_err(|e| Error::io(&extra_dir, e))?;
        let mut extra = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| Error::io(&extra_dir, e))?.path();
            let name = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".jinja"));
            if let Some(name) = name {
                extra.push((name.to_string(), std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?));
            }
        }
        // Directory order is arbitrary; sort so the result does not depend on the file system.
        extra.sort();
        out.extend(extra);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tokens_as_strings_or_added_token_dicts() {
        let cfg = TokenizerConfig::from_json(&json!({
            "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": true, "normalized": false},
            "eos_token": "</s>",
            "pad_token": null,
            "add_bos_token": true,
        }))
        .unwrap();
        let bos = cfg.bos_token.unwrap();
        assert_eq!((bos.content.as_str(), bos.lstrip, bos.special), ("<s>", true, true));
        assert_eq!(cfg.eos_token.unwrap().content, "</s>");
        assert!(cfg.pad_token.is_none());
        assert_eq!((cfg.add_bos_token, cfg.add_eos_token), (Some(true), None));
    }

    #[test]
    fn chat_template_string_or_named_list() {
        let one = TokenizerConfig::from_json(&json!({"chat_template": "{{ x }}"})).unwrap();
        assert_eq!(one.chat_templates, vec![("default".to_string(), "{{ x }}".to_string())]);
        let many = TokenizerConfig::from_json(&json!({"chat_template": [
            {"name": "default", "template": "a"}, {"name": "tool_use", "template": "b"}]}))
        .unwrap();
        assert_eq!(many.chat_templates.len(), 2);
        assert_eq!(many.chat_templates[1], ("tool_use".to_string(), "b".to_string()));
    }

    #[test]
    fn wrong_shapes_are_errors_that_name_the_field() {
        let e = TokenizerConfig::from_json(&json!({"chat_template": 3})).unwrap_err();
        assert!(e.contains("chat_template"), "{e}");
        let e = TokenizerConfig::from_json(&json!({"add_bos_token": "yes"})).unwrap_err();
        assert!(e.contains("add_bos_token"), "{e}");
        let e = TokenizerConfig::from_json(&json!({"eos_token": 5})).unwrap_err();
        assert!(e.contains("eos_token"), "{e}");
        let e = TokenizerConfig::from_json(&json!({"added_tokens_decoder": {"x": {"content": "a"}}})).unwrap_err();
        assert!(e.contains("not a token id"), "{e}");
    }

    #[test]
    fn template_files_win_over_the_config() {
        let dir = std::env::temp_dir().join(format!("vllm-rs-frontend-tc-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("additional_chat_templates")).unwrap();
        std::fs::write(dir.join("tokenizer_config.json"), r#"{"chat_template": "from config"}"#).unwrap();
        std::fs::write(dir.join("chat_template.jinja"), "from file").unwrap();
        std::fs::write(dir.join("additional_chat_templates/tool_use.jinja"), "tools").unwrap();
        let cfg = TokenizerConfig::from_dir(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            cfg.chat_templates,
            vec![("default".into(), "from file".into()), ("tool_use".into(), "tools".into())]
        );
    }

    #[test]
    fn bad_json_names_the_file() {
        let dir = std::env::temp_dir().join(format!("vllm-rs-frontend-badtc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tokenizer_config.json"), "{ not json").unwrap();
        let e = TokenizerConfig::from_dir(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.contains("tokenizer_config.json") && e.contains("not valid JSON"), "{e}");
    }
}
