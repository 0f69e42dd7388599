//! Structured output request fields (`response_format`, `structured_outputs`) as vLLM takes
//! them, turned into a grammar compiled here, on the request's preparing thread: a grammar that
//! does not compile is a 400 before anything is scheduled.

use crate::errors::{ApiError, ApiResult};
use crate::state::ModelContext;
use serde::Deserialize;
use serde_json::{Map, Value};
use vllm_rs_engine::{Grammar, GrammarSpec, TagStructure};

/// The structured-output fields of a generation request.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct StructuredFields {
    pub response_format: Option<Value>,
    pub structured_outputs: Option<Map<String, Value>>,
}

/// `structured_outputs` keys that choose a constraint (vLLM's `StructuredOutputsParams`).
const KINDS: &[&str] = &["json", "regex", "choice", "grammar", "json_object", "structural_tag"];
/// Its option keys: `disable_any_whitespace` is honoured; `disable_fallback` changes nothing
/// (llguidance is the only backend here, there is nothing to fall back to).
const OPTIONS: &[&str] = &["disable_any_whitespace", "disable_fallback"];

impl StructuredFields {
    /// The constraint the request asks for, if any (`structured_outputs` over
    /// `response_format`), and the field it came from.
    pub fn spec(&self) -> ApiResult<Option<(GrammarSpec, &'static str)>> {
        let found = match (&self.structured_outputs, &self.response_format) {
            (Some(so), _) => structured_outputs_spec(so)?.map(|s| (s, "structured_outputs")),
            (None, None | Some(Value::Null)) => None,
            (None, Some(rf)) => response_format_spec(rf)?.map(|s| (s, "response_format")),
        };
        Ok(found)
    }
}

fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(param, message)
}

/// `{"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema", "strict"}}`.
fn response_format_spec(rf: &Value) -> ApiResult<Option<GrammarSpec>> {
    let kind = rf.get("type").and_then(Value::as_str).ok_or_else(|| {
        ApiError::schema(
            "response_format.type",
            "response_format.type: Field required (text, json_object or json_schema)",
        )
    })?;
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(GrammarSpec::JsonObject)),
        "json_schema" => {
            let Some(js) = rf.get("json_schema").filter(|v| !v.is_null()) else {
                return Err(invalid(
                    "response_format",
                    "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
                ));
            };
            if !js.get("name").is_none_or(Value::is_string) {
                return Err(ApiError::schema("response_format.json_schema.name", "name: Input should be a string"));
            }
            // OpenAI's SDK sends the schema under `schema`; vLLM also reads `json_schema`.
            let schema = js.get("schema").or_else(|| js.get("json_schema")).cloned().unwrap_or(Value::Null);
            json_spec("response_format", schema).map(Some)
        }
        "structural_tag" => structural_tag_spec("response_format", rf).map(Some),
        other => Err(ApiError::schema(
            "response_format.type",
            format!("response_format.type: Input should be 'text', 'json_object' or 'json_schema', got {other:?}"),
        )),
    }
}

fn json_spec(param: &str, schema: Value) -> ApiResult<GrammarSpec> {
    match schema {
        Value::Object(_) | Value::Bool(true) => Ok(GrammarSpec::Json(schema)),
        // vLLM takes the schema as a JSON text too.
        Value::String(text) => match serde_json::from_str::<Value>(&text) {
            Ok(v @ Value::Object(_)) => Ok(GrammarSpec::Json(v)),
            _ => Err(invalid(param, "The JSON schema is not a JSON object (nor a string holding one).")),
        },
        _ => Err(invalid(param, "The JSON schema must be a JSON object.")),
    }
}

fn structured_outputs_spec(so: &Map<String, Value>) -> ApiResult<Option<GrammarSpec>> {
    const P: &str = "structured_outputs";
    if let Some(k) = so.keys().find(|k| !KINDS.contains(&k.as_str()) && !OPTIONS.contains(&k.as_str())) {
        return Err(invalid(
            P,
            format!(
                "structured_outputs.{k} is not supported by this server (vllm-rs); it takes {KINDS:?} and {OPTIONS:?}."
            ),
        ));
    }
    let set: Vec<&str> = KINDS
        .iter()
        .copied()
        .filter(|k| so.get(*k).is_some_and(|v| !v.is_null() && v != &Value::Bool(false)))
        .collect();
    if set.len() > 1 {
        return Err(invalid(
            P,
            "You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice').",
        ));
    }
    let flag = |k: &str| so.get(k).and_then(Value::as_bool).unwrap_or(false);
    let text = |k: &str| -> ApiResult<String> {
        so[k]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| invalid(P, format!("structured_outputs.{k} must be a string.")))
    };
    let Some(&kind) = set.first() else { return Ok(None) };
    let spec = match kind {
        "json" => json_spec(P, so["json"].clone())?,
        "json_object" => GrammarSpec::JsonObject,
        "regex" => GrammarSpec::Regex(text("regex")?),
        "grammar" => GrammarSpec::Lark(text("grammar")?),
        "choice" => {
            let choices: Vec<String> = serde_json::from_value(so["choice"].clone())
                .map_err(|_| invalid(P, "structured_outputs.choice must be a list of strings."))?;
            GrammarSpec::Choice(choices)
        }
        // vLLM takes it as a JSON text.
        _ => {
            let tag = serde_json::from_str::<Value>(&text("structural_tag")?)
                .map_err(|e| invalid(P, format!("structured_outputs.structural_tag is not valid JSON: {e}")))?;
            structural_tag_spec(P, &tag)?
        }
    };
    Ok(Some(if flag("disable_any_whitespace") { compact_json(spec) } else { spec }))
}

/// A structural tag as vLLM's (legacy) form has it: `{"structures": [{"begin", "schema",
/// "end"}], "triggers": [...]}`. The newer `format` form (xgrammar's own structural tags) is
/// refused: llguidance is the backend here.
fn structural_tag_spec(param: &str, tag: &Value) -> ApiResult<GrammarSpec> {
    if tag.get("format").is_some() {
        return Err(invalid(
            param,
            "A structural tag's `format` (xgrammar's structural tag) is not supported by this server (vllm-rs); \
             give `structures` and `triggers`.",
        ));
    }
    let bad = |what: &str| invalid(param, format!("structural_tag: {what}"));
    let triggers: Vec<String> = serde_json::from_value(tag.get("triggers").cloned().unwrap_or(Value::Null))
        .map_err(|_| bad("`triggers` must be a list of strings."))?;
    let structures =
        tag.get("structures").and_then(Value::as_array).ok_or_else(|| bad("`structures` must be a list."))?;
    let structures = structures
        .iter()
        .map(|s| {
            let text = |k: &str| {
                s.get(k)
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| bad(&format!("each structure needs a string `{k}`.")))
            };
            let schema = match s.get("schema") {
                None | Some(Value::Null) => serde_json::json!({}),
                Some(v @ Value::Object(_)) => v.clone(),
                Some(_) => return Err(bad("a structure's `schema` must be a JSON object.")),
            };
            Ok(TagStructure { begin: text("begin")?, schema, end: text("end")? })
        })
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(GrammarSpec::StructuralTag { structures, triggers })
}

/// `disable_any_whitespace`: JSON without free whitespace between its tokens.
fn compact_json(spec: GrammarSpec) -> GrammarSpec {
    let schema = match spec {
        GrammarSpec::Json(s) => s,
        GrammarSpec::JsonObject => serde_json::json!({"type": "object"}),
        other => return other,
    };
    let mut schema = match schema {
        Value::Bool(true) => serde_json::json!({}),
        s => s,
    };
    if let Value::Object(o) = &mut schema {
        o.insert("x-guidance".into(), serde_json::json!({"whitespace_flexible": false}));
    }
    GrammarSpec::Json(schema)
}

/// Compiles `spec` for `model`; a bad grammar is a 400 naming `param` and the problem.
pub fn compile(model: &ModelContext, spec: &GrammarSpec, param: &str) -> ApiResult<Grammar> {
    let compiler = model.grammar_compiler().map_err(|e| {
        ApiError::invalid(param, format!("Structured outputs are not available for this model's tokenizer: {e}"))
    })?;
    let started = std::time::Instant::now();
    let grammar =
        compiler.compile(spec).map_err(|e| ApiError::invalid(param, format!("Invalid grammar specification: {e}")))?;
    tracing::debug!("{param}: grammar compiled in {:.2} ms", started.elapsed().as_secs_f64() * 1e3);
    Ok(grammar)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> ApiResult<Option<GrammarSpec>> {
        let f: StructuredFields = serde_json::from_value(v).unwrap();
        f.spec().map(|s| s.map(|(spec, _)| spec))
    }

    #[test]
    fn fields_map_to_grammars_as_vllm_reads_them() {
        assert_eq!(spec(json!({})).unwrap(), None);
        assert_eq!(spec(json!({"response_format": {"type": "text"}})).unwrap(), None);
        assert_eq!(spec(json!({"response_format": {"type": "json_object"}})).unwrap(), Some(GrammarSpec::JsonObject));
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let rf = json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}}});
        assert_eq!(spec(rf).unwrap(), Some(GrammarSpec::Json(schema.clone())));
        let so = json!({"structured_outputs": {"json": schema.to_string()}});
        assert_eq!(spec(so).unwrap(), Some(GrammarSpec::Json(schema)));
        assert_eq!(
            spec(json!({"structured_outputs": {"choice": ["a", "b"]}})).unwrap(),
            Some(GrammarSpec::Choice(vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            spec(json!({"structured_outputs": {"regex": "a+"}})).unwrap(),
            Some(GrammarSpec::Regex("a+".into()))
        );
        assert_eq!(
            spec(json!({"structured_outputs": {"grammar": "start: \"x\""}})).unwrap(),
            Some(GrammarSpec::Lark("start: \"x\"".into()))
        );
        let compact = spec(json!({"structured_outputs": {"json_object": true, "disable_any_whitespace": true}}));
        assert_eq!(
            compact.unwrap(),
            Some(GrammarSpec::Json(json!({"type": "object", "x-guidance": {"whitespace_flexible": false}})))
        );
    }

    #[test]
    fn structural_tags_are_read_from_either_field() {
        let tag = json!({"type": "structural_tag", "triggers": ["<f="],
            "structures": [{"begin": "<f=w>", "schema": {"type": "object"}, "end": "</f>"}, {"begin": "<f=v>", "end": "</f>"}]});
        let want = GrammarSpec::StructuralTag {
            structures: vec![
                TagStructure { begin: "<f=w>".into(), schema: json!({"type": "object"}), end: "</f>".into() },
                TagStructure { begin: "<f=v>".into(), schema: json!({}), end: "</f>".into() },
            ],
            triggers: vec!["<f=".into()],
        };
        assert_eq!(spec(json!({"response_format": tag.clone()})).unwrap(), Some(want.clone()));
        assert_eq!(spec(json!({"structured_outputs": {"structural_tag": tag.to_string()}})).unwrap(), Some(want));
        for (body, says) in [
            (json!({"response_format": {"type": "structural_tag", "format": {"type": "any_text"}}}), "`format`"),
            (json!({"response_format": {"type": "structural_tag", "structures": []}}), "triggers"),
            (
                json!({"response_format": {"type": "structural_tag", "triggers": ["a"], "structures": [{"begin": "a"}]}}),
                "`end`",
            ),
            (json!({"structured_outputs": {"structural_tag": "{not json"}}), "not valid JSON"),
        ] {
            let e = spec(body.clone()).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{body}");
            assert!(e.message.contains(says), "{body}: {}", e.message);
        }
    }

    #[test]
    fn bad_fields_are_400s_naming_the_field() {
        for (body, param) in [
            (json!({"response_format": {"type": "json_schema"}}), "response_format"),
            (json!({"response_format": {"type": "xml"}}), "body.response_format.type"),
            (json!({"response_format": {"type": "json_schema", "json_schema": {"schema": 3}}}), "response_format"),
            (json!({"structured_outputs": {"regex": "a", "choice": ["a"]}}), "structured_outputs"),
            (json!({"structured_outputs": {"backend": "xgrammar"}}), "structured_outputs"),
            (json!({"structured_outputs": {"choice": "a"}}), "structured_outputs"),
        ] {
            let e = spec(body.clone()).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {e}");
        }
    }
}
