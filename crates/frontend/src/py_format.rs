//! Python's spelling of template values, so renders match transformers' Jinja byte for byte:
//! `str()` for what `{{ value }}` prints and `json.dumps` for the `tojson` filter.

use minijinja::value::{Value, ValueKind};
use std::fmt::Write;

/// Python's `repr(float)` (also what `str()` and `json.dumps` write): shortest round-trip digits,
/// scientific notation below 1e-4 and from 1e16 on.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // `{:e}` gives the shortest digits that round-trip, as Python does: "1.5e-5", "-0e0".
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').expect("LowerExp has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let e = exp as usize;
            let (int_part, frac) = if digits.len() > e + 1 {
                (digits[..e + 1].to_string(), digits[e + 1..].to_string())
            } else {
                (format!("{digits}{}", "0".repeat(e + 1 - digits.len())), "0".to_string())
            };
            format!("{sign}{int_part}.{frac}")
        } else {
            format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
        }
    } else {
        let mant = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mant}e{esign}{:02}", exp.abs())
    }
}

/// Python's `str(value)`: what Jinja prints for `{{ value }}`.
pub fn py_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        _ => py_repr(v),
    }
}

/// Python's `repr(value)` for the JSON-like values templates see.
pub fn py_repr(v: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, v);
    out
}

fn write_repr(out: &mut String, v: &Value) {
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => out.push_str(&number_repr(v)),
        ValueKind::String => write_str_repr(out, v.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(items) = v.try_iter() {
                for (i, item) in items.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_repr(out, &item);
                }
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(keys) = v.try_iter() {
                for (i, key) in keys.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_repr(out, &key);
                    out.push_str(": ");
                    write_repr(out, &v.get_item(&key).unwrap_or_default());
                }
            }
            out.push('}');
        }
        // Namespaces, macros, bytes: nothing Python-like to imitate; use minijinja's own.
        _ => {
            let _ = write!(out, "{v}");
        }
    }
}

fn number_repr(v: &Value) -> String {
    if v.is_integer() {
        v.to_string()
    } else {
        f64::try_from(v.clone()).map(float_repr).unwrap_or_else(|_| v.to_string())
    }
}

/// Characters Python's `str.isprintable()` rejects, so `repr` escapes them: controls, separators
/// other than the space, and the common format characters.
fn is_unprintable(c: char) -> bool {
    matches!(c as u32,
        0x00..=0x1F | 0x7F..=0xA0 | 0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E
        | 0x1680 | 0x2000..=0x200F | 0x2028..=0x202F | 0x205F..=0x2064 | 0x2066..=0x206F
        | 0x3000 | 0xFEFF | 0xFFF9..=0xFFFB)
}

/// Python's `repr()` of a string (how its error messages quote a bad value).
pub fn py_str_repr(s: &str) -> String {
    let mut out = String::new();
    write_str_repr(&mut out, s);
    out
}

fn write_str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_unprintable(c) => {
                let n = c as u32;
                let _ = if n <= 0xFF { write!(out, "\\x{n:02x}") } else { write!(out, "\\u{n:04x}") };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Options of Python's `json.dumps` that the `tojson` filter exposes.
pub struct JsonOptions {
    pub ensure_ascii: bool,
    /// `None`: one line. `Some(s)`: newline then `s` repeated per level.
    pub indent: Option<String>,
    pub item_separator: String,
    pub key_separator: String,
    pub sort_keys: bool,
}

impl JsonOptions {
    /// Python's defaults for the separators depend on whether there is an indent.
    pub fn new(
        ensure_ascii: bool,
        indent: Option<String>,
        separators: Option<(String, String)>,
        sort_keys: bool,
    ) -> Self {
        let (item_separator, key_separator) = separators
            .unwrap_or_else(|| if indent.is_some() { (",".into(), ": ".into()) } else { (", ".into(), ": ".into()) });
        JsonOptions { ensure_ascii, indent, item_separator, key_separator, sort_keys }
    }
}

/// Python's `json.dumps(value, ...)`. Errors name the value that JSON cannot hold.
pub fn dumps(v: &Value, opts: &JsonOptions) -> Result<String, String> {
    let mut out = String::new();
    write_json(&mut out, v, opts, 0)?;
    Ok(out)
}

fn newline_indent(out: &mut String, opts: &JsonOptions, level: usize) {
    if let Some(ind) = &opts.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

fn write_json(out: &mut String, v: &Value, opts: &JsonOptions, level: usize) -> Result<(), String> {
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&json_number(v)),
        ValueKind::String => write_json_str(out, v.as_str().unwrap_or_default(), opts.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter().map_err(|e| e.to_string())?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_separator);
                }
                newline_indent(out, opts, level + 1);
                write_json(out, item, opts, level + 1)?;
            }
            newline_indent(out, opts, level);
            out.push(']');
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in v.try_iter().map_err(|e| e.to_string())? {
                let value = v.get_item(&key).map_err(|e| e.to_string())?;
                entries.push((json_key(&key)?, value));
            }
            if opts.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            if entries.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (key, value)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_separator);
                }
                newline_indent(out, opts, level + 1);
                write_json_str(out, key, opts.ensure_ascii);
                out.push_str(&opts.key_separator);
                write_json(out, value, opts, level + 1)?;
            }
            newline_indent(out, opts, level);
            out.push('}');
        }
        kind => return Err(format!("Object of type {kind} is not JSON serializable")),
    }
    Ok(())
}

fn json_number(v: &Value) -> String {
    if v.is_integer() {
        return v.to_string();
    }
    match f64::try_from(v.clone()) {
        Ok(x) if x.is_nan() => "NaN".into(),
        Ok(x) if x.is_infinite() => {
            if x > 0.0 {
                "Infinity".into()
            } else {
                "-Infinity".into()
            }
        }
        Ok(x) => float_repr(x),
        Err(_) => v.to_string(),
    }
}

/// JSON object keys: Python converts numbers, booleans and None to strings.
fn json_key(k: &Value) -> Result<String, String> {
    match k.kind() {
        ValueKind::String => Ok(k.as_str().unwrap_or_default().to_string()),
        ValueKind::Number => Ok(json_number(k)),
        ValueKind::Bool => Ok(if k.is_true() { "true" } else { "false" }.into()),
        ValueKind::None => Ok("null".into()),
        kind => Err(format!("keys must be str, int, float, bool or None, not {kind}")),
    }
}

fn write_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_python() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1.5, "1.5"),
            (-0.0, "-0.0"),
            (0.30000000000000004, "0.30000000000000004"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (123456789012345.6, "123456789012345.6"),
            (9999999999999998.0, "9999999999999998.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.25e-7, "1.25e-07"),
            (1e300, "1e+300"),
            (-2.5, "-2.5"),
            (100.0, "100.0"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want, "{x:e}");
        }
    }

    #[test]
    fn repr_of_containers_is_pythons() {
        let v = Value::from_serialize(serde_json::json!({"a": [1, 2.5, null, true], "it's": "x\ny", "q": "'\""}));
        assert_eq!(py_str(&v), r#"{'a': [1, 2.5, None, True], "it's": 'x\ny', 'q': '\'"'}"#);
        assert_eq!(py_str(&Value::from("plain")), "plain");
        assert_eq!(py_str(&Value::from(false)), "False");
        assert_eq!(py_str(&Value::UNDEFINED), "");
        assert_eq!(py_repr(&Value::from("nbsp\u{a0}")), "'nbsp\\xa0'");
    }

    #[test]
    fn dumps_like_python_json() {
        let v = Value::from_serialize(serde_json::json!({"b": 1, "a": ["é", {"c": null}], "e": {}, "f": []}));
        let compact = JsonOptions::new(false, None, None, false);
        assert_eq!(dumps(&v, &compact).unwrap(), r#"{"b": 1, "a": ["é", {"c": null}], "e": {}, "f": []}"#);
        let ascii_sorted = JsonOptions::new(true, None, None, true);
        assert_eq!(dumps(&v, &ascii_sorted).unwrap(), r#"{"a": ["\u00e9", {"c": null}], "b": 1, "e": {}, "f": []}"#);
        let indented = JsonOptions::new(false, Some("  ".into()), None, false);
        assert_eq!(
            dumps(&v, &indented).unwrap(),
            "{\n  \"b\": 1,\n  \"a\": [\n    \"é\",\n    {\n      \"c\": null\n    }\n  ],\n  \"e\": {},\n  \"f\": []\n}"
        );
        let tight = JsonOptions::new(false, None, Some((",".into(), ":".into())), false);
        assert_eq!(dumps(&v, &tight).unwrap(), r#"{"b":1,"a":["é",{"c":null}],"e":{},"f":[]}"#);
        let s = Value::from("tab\t nl\n quote\" bs\\ ctl\u{1} emoji😀 <&>'");
        assert_eq!(dumps(&s, &compact).unwrap(), r#""tab\t nl\n quote\" bs\\ ctl\u0001 emoji😀 <&>'""#);
        assert_eq!(dumps(&Value::from("😀"), &ascii_sorted).unwrap(), r#""\ud83d\ude00""#);
        assert!(dumps(&Value::UNDEFINED, &compact).unwrap_err().contains("not JSON serializable"));
    }
}
