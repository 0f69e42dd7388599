//! [`ChatTemplate`]: renders a Hugging Face chat template the way transformers'
//! `apply_chat_template(..., tokenize=False)` does, byte for byte.
//!
//! transformers runs Jinja2 with `trim_blocks` and `lstrip_blocks`, drops a single trailing newline
//! of the template, adds `raise_exception`, `strftime_now` and a `tojson` that is Python's
//! `json.dumps` (no HTML escaping, keys in insertion order, non-ASCII kept). Templates call Python
//! string and dict methods (`.strip()`, `.items()`...), which minijinja's pycompat provides, and
//! print values with Python's `str()` (`True`, `None`, `['a']`).

use crate::error::{Error, Result};
use crate::py_format::{JsonOptions, dumps, py_str};
use crate::strftime;
use crate::tokenizer::Tokenizer;
use minijinja::value::{Kwargs, Rest, Value, from_args};
use minijinja::{Environment, ErrorKind};
use serde_json::Map;

const TEMPLATE_NAME: &str = "chat_template";

/// The error `raise_exception` raises, found again in the render error's source chain.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

/// A compiled chat template plus the special-token variables it sees.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    variables: Map<String, serde_json::Value>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_len", &self.source.len())
            .field("variables", &self.variables)
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token` / `eos_token` become template variables, as transformers
    /// passes the tokenizer's special tokens.
    pub fn new(source: &str, bos_token: Option<String>, eos_token: Option<String>) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(|out, _state, value| {
            out.write_str(&py_str(value)).map_err(|e| minijinja::Error::new(ErrorKind::WriteFailure, e.to_string()))
        });
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", |format: String| strftime::now(&format));
        env.add_template_owned(TEMPLATE_NAME, rewrite_generation_tags(source))
            .map_err(|e| Error::TemplateSyntax(describe(&e)))?;
        let mut variables = Map::new();
        for (name, tok) in [("bos_token", bos_token), ("eos_token", eos_token)] {
            if let Some(t) = tok {
                variables.insert(name.to_string(), serde_json::Value::String(t));
            }
        }
        Ok(ChatTemplate { env, source: source.to_string(), variables })
    }

    /// The tokenizer's chat template (its `tool_use` one when `with_tools` and it has one), with
    /// all its named special tokens as variables, as transformers renders it. `None`: no template.
    pub fn from_tokenizer(tokenizer: &Tokenizer, with_tools: bool) -> Result<Option<Self>> {
        let Some(source) = tokenizer.chat_template_for(with_tools) else { return Ok(None) };
        let template = Self::new(source, None, None)?.with_special_tokens(tokenizer.special_tokens_map());
        Ok(Some(template))
    }

    /// Adds more special-token variables (`unk_token`, `pad_token`...; see
    /// [`crate::Tokenizer::special_tokens_map`]). Existing names keep their first value.
    pub fn with_special_tokens(mut self, tokens: impl IntoIterator<Item = (String, String)>) -> Self {
        for (name, tok) in tokens {
            self.variables.entry(name).or_insert(serde_json::Value::String(tok));
        }
        self
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages` (a list of message objects). `extra` holds the other template
    /// variables (`tools`, `documents`, `enable_thinking`...) and overrides the special tokens.
    pub fn render(
        &self,
        messages: &serde_json::Value,
        add_generation_prompt: bool,
        extra: &Map<String, serde_json::Value>,
    ) -> Result<String> {
        for reserved in ["messages", "add_generation_prompt"] {
            if extra.contains_key(reserved) {
                return Err(Error::InvalidInput(format!("chat template argument {reserved:?} cannot be overridden")));
            }
        }
        let messages = normalize_messages(messages)?;
        if let Some(docs) = extra.get("documents").filter(|d| !d.is_null()) {
            let ok = docs.as_array().is_some_and(|a| a.iter().all(serde_json::Value::is_object));
            if !ok {
                return Err(Error::InvalidInput("documents must be a list of objects".into()));
            }
        }
        let mut ctx = self.variables.clone();
        for (k, v) in extra {
            ctx.insert(k.clone(), v.clone());
        }
        // transformers always passes these two, as None when absent: `tools is none` holds.
        ctx.entry("tools").or_insert(serde_json::Value::Null);
        ctx.entry("documents").or_insert(serde_json::Value::Null);
        ctx.insert("messages".into(), serde_json::Value::Array(messages));
        ctx.insert("add_generation_prompt".into(), serde_json::Value::Bool(add_generation_prompt));
        let template = self.env.get_template(TEMPLATE_NAME).map_err(|e| Error::TemplateRender(describe(&e)))?;
        template.render(Value::from_serialize(&ctx)).map_err(render_error)
    }
}

/// What transformers does to messages before rendering: keys whose value is null are dropped
/// (templates test for a missing key, not for None), and reasoning given under any of its names
/// is also given as `reasoning_content` and `thinking`.
fn normalize_messages(messages: &serde_json::Value) -> Result<Vec<serde_json::Value>> {
    let list = messages.as_array().ok_or_else(|| Error::InvalidInput("messages must be a list of objects".into()))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let obj = m.as_object().ok_or_else(|| Error::InvalidInput(format!("message {i} is not an object")))?;
        let mut clean: Map<String, serde_json::Value> =
            obj.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect();
        let reasoning = ["reasoning_content", "thinking", "reasoning"].iter().find_map(|k| clean.get(*k).cloned());
        if let Some(r) = reasoning {
            // {"thinking": r, **message, "reasoning_content": r}: key order as Python builds it.
            let mut aliased = Map::new();
            aliased.insert("thinking".into(), r.clone());
            for (k, v) in clean {
                if k != "thinking" {
                    aliased.insert(k, v);
                }
            }
            aliased.insert("reasoning_content".into(), r);
            clean = aliased;
        }
        out.push(serde_json::Value::Object(clean));
    }
    Ok(out)
}

/// Python's `json.dumps(value, ensure_ascii=False)`: how vLLM writes tool-call arguments.
pub fn py_json_dumps(value: &serde_json::Value) -> String {
    py_json_dumps_with(value, false)
}

/// Python's `json.dumps(value, ensure_ascii=...)` (vLLM's harmony parser keeps the default,
/// `True`: non-ASCII characters as `\uXXXX` escapes).
pub fn py_json_dumps_with(value: &serde_json::Value, ensure_ascii: bool) -> String {
    dumps(&Value::from_serialize(value), &JsonOptions::new(ensure_ascii, None, None, false))
        .expect("a JSON value always serializes")
}

fn raise_exception(message: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

/// `tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: Value, args: Rest<Value>) -> std::result::Result<String, minijinja::Error> {
    let (pos, kwargs): (&[Value], Kwargs) = from_args(&args)?;
    let bad = |msg: String| minijinja::Error::new(ErrorKind::InvalidOperation, msg);
    if pos.len() > 4 {
        return Err(bad(format!("tojson takes at most 4 positional arguments, got {}", pos.len())));
    }
    let arg = |i: usize, name: &str| -> std::result::Result<Option<Value>, minijinja::Error> {
        match (pos.get(i), kwargs.get::<Option<Value>>(name)?) {
            (Some(_), Some(_)) => Err(bad(format!("tojson got multiple values for {name}"))),
            (p, k) => Ok(p.cloned().or(k).filter(|v| !v.is_none())),
        }
    };
    let ensure_ascii = arg(0, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let indent = match arg(1, "indent")? {
        None => None,
        Some(v) if v.is_integer() => Some(" ".repeat(i64::try_from(v).unwrap_or(0).max(0) as usize)),
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => return Err(bad(format!("tojson: indent must be an integer or a string, got {v}"))),
        },
    };
    let separators = match arg(2, "separators")? {
        None => None,
        Some(v) => {
            let items: Vec<Value> = v.try_iter().map(|it| it.collect()).unwrap_or_default();
            match items.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                    Some((a.as_str().unwrap_or_default().to_string(), b.as_str().unwrap_or_default().to_string()))
                }
                _ => return Err(bad("tojson: separators must be a pair of strings".into())),
            }
        }
    };
    let sort_keys = arg(3, "sort_keys")?.is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    dumps(&value, &JsonOptions::new(ensure_ascii, indent, separators, sort_keys)).map_err(bad)
}

fn render_error(e: minijinja::Error) -> Error {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(s) = source {
        if let Some(Raised(message)) = s.downcast_ref::<Raised>() {
            return Error::TemplateRaised { message: message.clone() };
        }
        source = s.source();
    }
    Error::TemplateRender(describe(&e))
}

/// minijinja's message plus the template line it points at.
fn describe(e: &minijinja::Error) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}

/// transformers' `{% generation %}...{% endgeneration %}` marks assistant text for training masks
/// and renders its body unchanged. minijinja has no such tag: turn each into an `if true` block
/// with the same whitespace-control marks, so the output is the same.
fn rewrite_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        // The closing `%}` after the opening one (`{%}` is no tag: its `%` is the opener's).
        let Some(len) = rest[start + 2..].find("%}") else { break };
        let tag = &rest[start..start + 2 + len + 2];
        let inner = &tag[2..tag.len() - 2];
        let body = inner.trim_start_matches(['-', '+']).trim_end_matches(['-', '+']).trim();
        out.push_str(&rest[..start]);
        match body {
            "generation" => out.push_str(&tag.replacen("generation", "if true", 1)),
            "endgeneration" => out.push_str(&tag.replacen("endgeneration", "endif", 1)),
            _ => out.push_str(tag),
        }
        rest = &rest[start + tag.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(src: &str, messages: serde_json::Value, extra: serde_json::Value) -> Result<String> {
        let t = ChatTemplate::new(src, Some("<s>".into()), Some("</s>".into()))?;
        t.render(&messages, true, extra.as_object().unwrap())
    }

    #[test]
    fn raise_exception_keeps_the_templates_message() {
        let e = render("{{ raise_exception('Roles must alternate: ' ~ messages|length) }}", json!([]), json!({}))
            .unwrap_err();
        match e {
            Error::TemplateRaised { message } => assert_eq!(message, "Roles must alternate: 0"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn syntax_and_render_errors_are_errors() {
        let e = ChatTemplate::new("{% for x in %}", None, None).unwrap_err();
        assert!(matches!(e, Error::TemplateSyntax(_)), "{e:?}");
        let e = render("{{ messages[0].content.nope() }}", json!([{"role": "user", "content": "x"}]), json!({}))
            .unwrap_err();
        assert!(matches!(e, Error::TemplateRender(_)), "{e:?}");
        let e = render("{{ x }}", json!({"role": "user"}), json!({})).unwrap_err();
        assert!(e.to_string().contains("messages must be a list"), "{e}");
        let e = render("{{ x }}", json!([]), json!({"messages": []})).unwrap_err();
        assert!(matches!(e, Error::InvalidInput(_)), "{e:?}");
    }

    #[test]
    fn python_semantics() {
        let src = "{{ bos_token }}{{ flag }} {{ none_val }} {{ [1, 'a'] }} {{ {'k': 2.0} }} {{ tools is none }} {{ 'a b'.split() }}";
        let out = render(src, json!([]), json!({"flag": true, "none_val": null})).unwrap();
        assert_eq!(out, "<s>True None [1, 'a'] {'k': 2.0} True ['a', 'b']");
    }

    #[test]
    fn tojson_arguments() {
        let m = json!([{"role": "user", "content": "é<&>"}]);
        let out = render("{{ messages[0] | tojson }}|{{ messages[0] | tojson(indent=1) }}|{{ messages | tojson(separators=(',', ':')) }}|{{ messages[0] | tojson(sort_keys=true, ensure_ascii=true) }}", m, json!({})).unwrap();
        assert_eq!(
            out,
            "{\"role\": \"user\", \"content\": \"é<&>\"}|{\n \"role\": \"user\",\n \"content\": \"é<&>\"\n}|[{\"role\":\"user\",\"content\":\"é<&>\"}]|{\"content\": \"\\u00e9<&>\", \"role\": \"user\"}"
        );
        let e = render("{{ 1 | tojson(bogus=1) }}", json!([]), json!({})).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }

    #[test]
    fn messages_are_normalized_like_transformers() {
        let m = json!([{"role": "assistant", "content": null, "reasoning": "why", "tool_calls": [1]}]);
        let out = render("{{ messages[0] | tojson }} {{ messages[0].content is defined }}", m, json!({})).unwrap();
        assert_eq!(
            out,
            "{\"thinking\": \"why\", \"role\": \"assistant\", \"reasoning\": \"why\", \"tool_calls\": [1], \"reasoning_content\": \"why\"} False"
        );
    }

    #[test]
    fn generation_tags_render_their_body() {
        let src = "{%- for m in messages %}A{% generation -%}\n  {{ m.content }}{%- endgeneration %}B{% endfor %}";
        let out = render(src, json!([{"role": "assistant", "content": "x"}]), json!({})).unwrap();
        assert_eq!(out, "AxB");
    }

    /// Found by the `tokenizer_config` fuzz target: `{%}` (an opener whose `%` looks like a
    /// closer) panicked the rewrite; such a template is now only a template error.
    #[test]
    fn a_tag_that_closes_inside_its_opener_is_no_tag() {
        assert_eq!(rewrite_generation_tags("a{%}b"), "a{%}b");
        // The opener runs to the next `%}`, as Jinja's lexer reads it.
        let src = "{%}{% generation %}x{% endgeneration %}";
        assert_eq!(rewrite_generation_tags(src), "{%}{% generation %}x{% endif %}");
        assert!(render("{%}", json!([]), json!({})).is_err());
    }

    #[test]
    fn strftime_now_formats_today() {
        let out = render("{{ strftime_now('%Y') }}", json!([]), json!({})).unwrap();
        let year: i32 = out.parse().unwrap();
        assert!((2024..3000).contains(&year), "{out}");
    }
}
