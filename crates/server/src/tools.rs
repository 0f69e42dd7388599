//! Tool calling on `/v1/chat/completions`, as vLLM does it: `tools` go to the chat template;
//! `tool_choice` `required` and named functions are enforced with a JSON-schema grammar (the
//! output is always valid JSON for the schema); `auto` leaves the text free and a tool parser
//! (`--tool-call-parser`) finds the calls in it.

use crate::errors::{ApiError, ApiResult};
use serde_json::{Map, Value, json};
use vllm_rs_engine::GrammarSpec;

/// What `tool_choice` asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

/// The request's tools, checked.
#[derive(Clone, Debug)]
pub struct ToolSetup {
    /// The tools as the client sent them (what the chat template renders).
    pub tools: Vec<Value>,
    pub choice: ToolChoice,
    pub parallel: bool,
}

/// One function call in a response.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as a JSON text.
    pub arguments: String,
}

impl ToolCall {
    pub fn new(name: String, arguments: String) -> Self {
        ToolCall { id: tool_call_id(), name, arguments }
    }

    /// `{"id", "type": "function", "function": {"name", "arguments"}}`.
    pub fn to_json(&self) -> Value {
        json!({"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}})
    }
}

/// vLLM's `chatcmpl-tool-<random hex>`.
pub fn tool_call_id() -> String {
    format!("chatcmpl-tool-{}", crate::protocol::common::random_hex())
}

/// `json.dumps(value, ensure_ascii=False)`: how vLLM writes parsed arguments back as text.
pub fn dumps(value: &Value) -> String {
    vllm_rs_frontend::py_json_dumps(value)
}

const CORRECT_USAGE: &str = r#"Correct usage: `{"type": "function", "function": {"name": "my_function"}}`"#;

/// Checks `tools`, `tool_choice` and `parallel_tool_calls` as vLLM's request validators do.
/// `auto_enabled`: the server runs with `--enable-auto-tool-choice` and a parser.
pub fn parse(
    tools: Option<&Value>,
    tool_choice: Option<&Value>,
    parallel: Option<bool>,
    auto_enabled: bool,
) -> ApiResult<Option<ToolSetup>> {
    let tools = match tools {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::invalid(
                "tools",
                "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.",
            ));
        }
        Some(Value::Array(a)) => Some(a.clone()),
        Some(_) => return Err(ApiError::schema("tools", "tools: Input should be a valid list")),
    };
    let choice = match tool_choice {
        None | Some(Value::Null) if tools.is_some() => ToolChoice::Auto,
        None | Some(Value::Null) => ToolChoice::None,
        Some(Value::String(s)) if s == "none" => ToolChoice::None,
        Some(c) => {
            let Some(tools) = &tools else {
                return Err(ApiError::invalid("tool_choice", "When using `tool_choice`, `tools` must be set."));
            };
            named_or_mode(c, tools)?
        }
    };
    let Some(tools) = tools else { return Ok(None) };
    for (i, t) in tools.iter().enumerate() {
        check_tool(i, t)?;
    }
    if choice == ToolChoice::Auto && !auto_enabled {
        return Err(ApiError::invalid(
            "tool_choice",
            "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
        ));
    }
    Ok(Some(ToolSetup { tools, choice, parallel: parallel.unwrap_or(true) }))
}

fn named_or_mode(c: &Value, tools: &[Value]) -> ApiResult<ToolChoice> {
    match c {
        Value::String(s) if s == "auto" => Ok(ToolChoice::Auto),
        Value::String(s) if s == "required" => Ok(ToolChoice::Required),
        Value::Object(o) => {
            let Some(Value::Object(f)) = o.get("function") else {
                return Err(ApiError::invalid(
                    "tool_choice.function",
                    format!(
                        "Invalid value for `function`: `{}` in `tool_choice`! {CORRECT_USAGE}",
                        o.get("function").unwrap_or(&Value::Null)
                    ),
                ));
            };
            let Some(name) = f.get("name").and_then(Value::as_str) else {
                return Err(ApiError::invalid(
                    "tool_choice.function.name",
                    format!("Expected field `name` in `function` in `tool_choice`! {CORRECT_USAGE}"),
                ));
            };
            if !tools.iter().any(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(name)) {
                return Err(ApiError::invalid("tool_choice", format!("Tool '{name}' has not been passed in `tools`.")));
            }
            Ok(ToolChoice::Named(name.to_string()))
        }
        other => Err(ApiError::invalid(
            "tool_choice",
            format!(
                "Invalid value for `tool_choice`: {other}! Only named tools, \"none\", \"auto\" or \"required\" are supported."
            ),
        )),
    }
}

/// `{"type": "function", "function": {"name": str, "description"?: str, "parameters"?: object}}`.
fn check_tool(i: usize, t: &Value) -> ApiResult<()> {
    let at = |field: &str| format!("tools.{i}.{field}");
    let Some(o) = t.as_object() else {
        return Err(ApiError::schema(&format!("tools.{i}"), "tool: Input should be an object"));
    };
    if !o.get("type").is_none_or(|k| k == "function") {
        return Err(ApiError::schema(&at("type"), "type: Input should be 'function'"));
    }
    let Some(f) = o.get("function").and_then(Value::as_object) else {
        return Err(ApiError::schema(&at("function"), "function: Field required (an object)"));
    };
    if !f.get("name").is_some_and(Value::is_string) {
        return Err(ApiError::schema(&at("function.name"), "name: Field required (a string)"));
    }
    if !f.get("description").is_none_or(|d| d.is_string() || d.is_null()) {
        return Err(ApiError::schema(&at("function.description"), "description: Input should be a valid string"));
    }
    match f.get("parameters") {
        None | Some(Value::Null) | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(ApiError::schema(&at("function.parameters"), "parameters: Input should be a valid dictionary")),
    }
}

impl ToolSetup {
    /// The grammar `required` and named choices are held to (vLLM's `_get_json_schema_from_tool`).
    pub fn grammar(&self) -> ApiResult<Option<GrammarSpec>> {
        match &self.choice {
            ToolChoice::None | ToolChoice::Auto => Ok(None),
            ToolChoice::Named(name) => {
                let f = self.function(name).expect("checked in parse");
                Ok(Some(GrammarSpec::Json(parameters(f))))
            }
            ToolChoice::Required => self.required_schema().map(|s| Some(GrammarSpec::Json(s))),
        }
    }

    fn function(&self, name: &str) -> Option<&Map<String, Value>> {
        self.tools
            .iter()
            .filter_map(|t| t.get("function").and_then(Value::as_object))
            .find(|f| f.get("name").and_then(Value::as_str) == Some(name))
    }

    /// A non-empty array of `{"name": <one of the tools>, "parameters": <its schema>}`, the
    /// tools' `$defs` merged at the top (a name defined twice differently is refused).
    fn required_schema(&self) -> ApiResult<Value> {
        let mut defs = Map::new();
        let mut choices = Vec::new();
        for f in self.tools.iter().filter_map(|t| t.get("function").and_then(Value::as_object)) {
            let mut params = parameters(f);
            if let Some(Value::Object(d)) = params.as_object_mut().and_then(|p| p.remove("$defs")) {
                for (k, v) in d {
                    if defs.get(&k).is_some_and(|old| old != &v) {
                        return Err(ApiError::invalid(
                            "tools",
                            format!("Tool definition '{k}' has multiple schemas, which is not supported."),
                        ));
                    }
                    defs.insert(k, v);
                }
            }
            choices.push(json!({
                "properties": {"name": {"type": "string", "enum": [f["name"]]}, "parameters": params},
                "required": ["name", "parameters"]
            }));
        }
        let mut schema = json!({"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": choices}});
        if !self.parallel {
            schema["maxItems"] = json!(1);
        }
        if !defs.is_empty() {
            schema["$defs"] = Value::Object(defs);
        }
        Ok(schema)
    }

    /// The calls in a constrained output: for `required`, the JSON list; for a named function,
    /// the arguments object itself. `None`: the output is not what the grammar makes (cut short).
    pub fn constrained_calls(&self, text: &str) -> Option<Vec<ToolCall>> {
        match &self.choice {
            ToolChoice::Named(name) => {
                serde_json::from_str::<Value>(text).ok()?;
                Some(vec![ToolCall::new(name.clone(), text.to_string())])
            }
            ToolChoice::Required => {
                let list: Vec<Value> = serde_json::from_str(text).ok()?;
                list.iter()
                    .map(|c| {
                        let name = c.get("name")?.as_str()?.to_string();
                        Some(ToolCall::new(name, dumps(c.get("parameters")?)))
                    })
                    .collect()
            }
            _ => None,
        }
    }
}

/// A function's parameters schema, or an empty object's when it has none.
fn parameters(f: &Map<String, Value>) -> Value {
    match f.get("parameters") {
        Some(p @ Value::Object(_)) => p.clone(),
        _ => json!({"type": "object", "properties": {}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Value {
        json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
    }

    #[test]
    fn choices_default_and_validate_as_vllm() {
        let t = weather();
        assert_eq!(parse(Some(&t), None, None, true).unwrap().unwrap().choice, ToolChoice::Auto);
        assert!(parse(None, None, None, false).unwrap().is_none());
        assert_eq!(parse(Some(&t), Some(&json!("none")), None, false).unwrap().unwrap().choice, ToolChoice::None);
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        assert_eq!(
            parse(Some(&t), Some(&named), None, false).unwrap().unwrap().choice,
            ToolChoice::Named("get_weather".into())
        );
        for (tools, choice, auto, says) in [
            (Some(json!([])), None, true, "must not be an empty array"),
            (None, Some(json!("required")), true, "`tools` must be set"),
            (Some(t.clone()), Some(json!("sometimes")), true, "Invalid value for `tool_choice`"),
            (Some(t.clone()), Some(json!({"function": {"name": "nope"}})), true, "has not been passed"),
            (Some(t.clone()), Some(json!({"function": "x"})), true, "Invalid value for `function`"),
            (Some(t.clone()), None, false, "--enable-auto-tool-choice"),
            (
                Some(json!([{"type": "function", "function": {"name": "f", "parameters": []}}])),
                None,
                true,
                "dictionary",
            ),
            (Some(json!([{"type": "function", "function": {}}])), None, true, "name"),
        ] {
            let e = parse(tools.as_ref(), choice.as_ref(), None, auto).unwrap_err();
            assert_eq!(e.status.as_u16(), 400);
            assert!(e.message.contains(says), "{says}: {}", e.message);
        }
    }

    #[test]
    fn required_schema_lists_every_tool_and_parses_back() {
        let t = weather();
        let setup = parse(Some(&t), Some(&json!("required")), Some(false), true).unwrap().unwrap();
        let Some(GrammarSpec::Json(schema)) = setup.grammar().unwrap() else { panic!() };
        assert_eq!(schema["minItems"], 1);
        assert_eq!(schema["maxItems"], 1, "parallel_tool_calls false: one call");
        assert_eq!(schema["items"]["anyOf"][0]["properties"]["name"]["enum"], json!(["get_weather"]));
        let calls = setup.constrained_calls(r#"[{"name": "get_weather", "parameters": {"city": "Paris"}}]"#).unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("get_weather", r#"{"city": "Paris"}"#));
        assert!(calls[0].id.starts_with("chatcmpl-tool-"));
        assert!(setup.constrained_calls("[{\"name\": \"get_wea").is_none());
    }
}
