//! Unfinished JSON, for streaming the arguments of the JSON call formats in fragments: what of
//! `json.dumps(arguments)` is already final while the model is still writing them. vLLM sends
//! the same text (the common prefix of the re-serialized partial parses); here it is read off
//! the tokens written so far, so it does not depend on how the text was split.

use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// `{ } [ ] : ,`
    Punct(u8),
    /// A string; `true` once its closing quote is there.
    Str(bool),
    /// A number or literal; `true` once something after it ends it.
    Scalar(bool),
}

#[derive(Clone, Copy, Debug)]
struct Token {
    kind: Kind,
    start: usize,
    end: usize,
}

/// The tokens of `text`, stopping at the first byte no JSON token starts with.
fn tokens(text: &str) -> Vec<Token> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let kind = match b[i] {
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            c @ (b'{' | b'}' | b'[' | b']' | b':' | b',') => {
                i += 1;
                Kind::Punct(c)
            }
            b'"' => {
                i += 1;
                let mut closed = false;
                while i < b.len() {
                    match b[i] {
                        b'\\' => i += 2,
                        b'"' => {
                            i += 1;
                            closed = true;
                            break;
                        }
                        _ => i += 1,
                    }
                }
                i = i.min(b.len());
                Kind::Str(closed)
            }
            c if c == b'-' || c.is_ascii_alphanumeric() => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b"+-.".contains(&b[i])) {
                    i += 1;
                }
                Kind::Scalar(i < b.len())
            }
            _ => break,
        };
        out.push(Token { kind, start, end: i });
    }
    out
}

/// `json.dumps(value, ensure_ascii=False)` of the JSON value that `raw` begins, as far as it is
/// final: a prefix of the dumps of the whole value once it is written. Stops at the value's
/// end and at anything that is not JSON.
pub(super) fn stable_dumps_prefix(raw: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for t in tokens(raw) {
        let piece = match t.kind {
            Kind::Punct(c @ (b':' | b',')) => format!("{} ", c as char),
            Kind::Punct(c @ (b'{' | b'[')) => {
                depth += 1;
                (c as char).to_string()
            }
            Kind::Punct(c) => {
                depth = depth.saturating_sub(1);
                (c as char).to_string()
            }
            Kind::Str(true) | Kind::Scalar(true) => match serde_json::from_str::<Value>(&raw[t.start..t.end]) {
                Ok(v) => super::normalized_arguments(&v),
                Err(_) => break,
            },
            Kind::Str(false) => {
                out.push_str(&partial_string(&raw[t.start + 1..t.end]));
                break;
            }
            // A number or literal still being written may yet change.
            Kind::Scalar(false) => break,
        };
        out.push_str(&piece);
        if depth == 0 {
            break; // the value is complete
        }
    }
    out
}

/// The body of an unclosed string (`abc` of `"abc`) as json.dumps writes it, without the
/// closing quote; an escape cut short is left out until it is whole.
fn partial_string(body: &str) -> String {
    // At most the last 11 bytes (`\ud83d\ude0` and shorter) can be an unfinished escape.
    let cuts = (0..=body.len().min(11)).map(|n| body.len() - n);
    for end in cuts.filter(|&e| body.is_char_boundary(e)) {
        if let Ok(v) = serde_json::from_str::<Value>(&format!("\"{}\"", &body[..end])) {
            let dumped = super::normalized_arguments(&v);
            return dumped[..dumped.len() - 1].to_string();
        }
    }
    String::new()
}

/// An unfinished call object `{"name": "...", <args key>: {...`: its name once that string is
/// closed, and the final part of its arguments' dumps (empty until they begin). `None` when
/// the text is not the start of such an object or the name is not complete yet.
pub(super) fn partial_call(text: &str, args_keys: &[&str]) -> Option<(String, String)> {
    let toks = tokens(text);
    if !matches!(toks.first()?.kind, Kind::Punct(b'{')) {
        return None;
    }
    let (mut name, mut args) = (None, String::new());
    let mut i = 1;
    // Each member: a closed key string, `:`, then a value (skipped over by depth).
    while let (Some(k), Some(colon), Some(value)) = (toks.get(i), toks.get(i + 1), toks.get(i + 2)) {
        if k.kind != Kind::Str(true) || colon.kind != Kind::Punct(b':') {
            break;
        }
        let key: String = serde_json::from_str(&text[k.start..k.end]).ok()?;
        if key == "name" && value.kind == Kind::Str(true) {
            name = serde_json::from_str::<String>(&text[value.start..value.end]).ok();
        } else if args_keys.contains(&key.as_str()) {
            args = stable_dumps_prefix(&text[value.start..]);
        }
        i = value_end(&toks, i + 2);
        match toks.get(i).map(|t| t.kind) {
            Some(Kind::Punct(b',')) => i += 1,
            _ => break,
        }
    }
    Some((name?, args))
}

/// The index of the token after the value starting at token `i`.
fn value_end(toks: &[Token], mut i: usize) -> usize {
    let mut depth = 0usize;
    while let Some(t) = toks.get(i) {
        i += 1;
        match t.kind {
            Kind::Punct(b'{' | b'[') => depth += 1,
            Kind::Punct(b'}' | b']') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 {
            break;
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_part_of_unfinished_json() {
        for (raw, want) in [
            (r#"{"city":"Par"#, r#"{"city": "Par"#),
            (r#"{"n":12"#, r#"{"n": "#),
            (r#"{"n":12,"#, r#"{"n": 12, "#),
            (r#"{"a":[1,tr"#, r#"{"a": [1, "#),
            (r#"{"a":[1,true]} trailing"#, r#"{"a": [1, true]}"#),
            (r#"{"s":"x\"#, r#"{"s": "x"#),
            (r#"{"s":"x\u00e"#, r#"{"s": "x"#),
            (r#"{"s":"x\u00e9\n"#, r#"{"s": "xé\n"#),
            (r#"{"f":1.50}"#, r#"{"f": 1.5}"#),
        ] {
            assert_eq!(stable_dumps_prefix(raw), want, "{raw}");
        }
    }

    #[test]
    fn unfinished_calls_give_their_name_then_their_arguments() {
        let keys = &["arguments"];
        assert_eq!(partial_call(r#"{"name": "get_wea"#, keys), None);
        assert_eq!(partial_call(r#"{"name": "f", "argu"#, keys), Some(("f".into(), String::new())));
        assert_eq!(
            partial_call(r#"{"name": "f", "arguments": {"x": "a"#, keys),
            Some(("f".into(), r#"{"x": "a"#.into()))
        );
        assert_eq!(partial_call(r#"{"arguments": {"x": 1}, "name": "f"#, keys), None, "the name still open");
        assert_eq!(
            partial_call(r#"{"arguments": {"x": 1}, "name": "f""#, keys),
            Some(("f".into(), r#"{"x": 1}"#.into()))
        );
    }
}
