//! `pythonic`: calls as a Python list, `[get_weather(city='Paris', days=3), now()]` (Llama 3.2
//! and 4 small models, ToolACE). Keyword arguments only; their values are Python literals
//! (strings, numbers, True / False / None, lists, dicts), written back as JSON. A stream sends
//! each call once it is closed.

use super::{Extracted, ParsedCall, ToolParser, normalized_arguments};
use serde_json::{Map, Value};

pub struct Pythonic;

impl ToolParser for Pythonic {
    fn start_markers(&self) -> &[&str] {
        &["["]
    }

    /// As vLLM: the whole (trimmed) output must be the list; anything else is content.
    fn extract(&self, text: &str) -> Extracted {
        match calls(text.trim()) {
            Some(calls) if !calls.is_empty() => Extracted { content: None, calls },
            _ => Extracted { content: Some(text.to_string()), calls: vec![] },
        }
    }

    /// Each call once its `)` is written, in an output that opens with the list (vLLM streams
    /// only such an output as calls).
    fn calls_so_far(&self, text: &str) -> Vec<ParsedCall> {
        if !text.trim_start().starts_with('[') {
            return vec![];
        }
        leading_calls(text.trim_start()).0
    }
}

/// The calls of the list `text` begins with, and whether the list closed; `None` as the first
/// when it does not begin with `[`.
fn leading_calls(text: &str) -> (Vec<ParsedCall>, Option<usize>) {
    let mut p = Parser { s: text.as_bytes(), i: 0 };
    let mut out = Vec::new();
    if p.eat(b'[').is_none() {
        return (out, None);
    }
    loop {
        p.ws();
        if p.eat(b']').is_some() {
            return (out, Some(p.i));
        }
        if !out.is_empty() && p.eat(b',').is_none() {
            return (out, None);
        }
        match p.call() {
            Some(c) => out.push(c),
            None => return (out, None),
        }
    }
}

/// The calls when `text` is exactly the list (and whitespace).
fn calls(text: &str) -> Option<Vec<ParsedCall>> {
    let (out, end) = leading_calls(text);
    end.filter(|&e| text[e..].trim().is_empty()).map(|_| out)
}

/// A Python literal (what `ast.literal_eval` takes) as JSON; `None` when `text` is not one.
pub(super) fn python_literal(text: &str) -> Option<Value> {
    let mut p = Parser { s: text.as_bytes(), i: 0 };
    let v = p.value()?;
    p.ws();
    (p.i == p.s.len()).then_some(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.s.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    fn ident(&mut self) -> Option<String> {
        self.ws();
        let start = self.i;
        while self.s.get(self.i).is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.') {
            self.i += 1;
        }
        (self.i > start).then(|| String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    /// `name(key=value, ...)`.
    fn call(&mut self) -> Option<ParsedCall> {
        let name = self.ident()?;
        self.eat(b'(')?;
        let mut args = Map::new();
        loop {
            if self.eat(b')').is_some() {
                break;
            }
            if !args.is_empty() {
                self.eat(b',')?;
                if self.eat(b')').is_some() {
                    break;
                }
            }
            let key = self.ident()?;
            self.eat(b'=')?;
            args.insert(key, self.value()?);
        }
        Some(ParsedCall { name, arguments: normalized_arguments(&Value::Object(args)) })
    }

    fn value(&mut self) -> Option<Value> {
        self.ws();
        match *self.s.get(self.i)? {
            q @ (b'\'' | b'"') => self.string(q).map(Value::String),
            b'[' | b'(' => self.list(),
            b'{' => self.dict(),
            _ => self.scalar(),
        }
    }

    fn string(&mut self, quote: u8) -> Option<String> {
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let c = *self.s.get(self.i)?;
            self.i += 1;
            match c {
                b'\\' => {
                    let e = *self.s.get(self.i)?;
                    self.i += 1;
                    out.push(match e {
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        other => other,
                    });
                }
                c if c == quote => return String::from_utf8(out).ok(),
                c => out.push(c),
            }
        }
    }

    fn list(&mut self) -> Option<Value> {
        let close = if self.s[self.i] == b'[' { b']' } else { b')' };
        self.i += 1;
        let mut items = Vec::new();
        loop {
            if self.eat(close).is_some() {
                return Some(Value::Array(items));
            }
            if !items.is_empty() {
                self.eat(b',')?;
                if self.eat(close).is_some() {
                    return Some(Value::Array(items));
                }
            }
            items.push(self.value()?);
        }
    }

    fn dict(&mut self) -> Option<Value> {
        self.i += 1;
        let mut m = Map::new();
        loop {
            if self.eat(b'}').is_some() {
                return Some(Value::Object(m));
            }
            if !m.is_empty() {
                self.eat(b',')?;
                if self.eat(b'}').is_some() {
                    return Some(Value::Object(m));
                }
            }
            let key = match self.value()? {
                Value::String(k) => k,
                other => other.to_string(),
            };
            self.eat(b':')?;
            let v = self.value()?;
            m.insert(key, v);
        }
    }

    /// `True`, `False`, `None`, or a number.
    fn scalar(&mut self) -> Option<Value> {
        let start = self.i;
        while self.s.get(self.i).is_some_and(|&c| c.is_ascii_alphanumeric() || b"+-._".contains(&c)) {
            self.i += 1;
        }
        let word = std::str::from_utf8(&self.s[start..self.i]).ok()?;
        match word {
            "True" => Some(Value::Bool(true)),
            "False" => Some(Value::Bool(false)),
            "None" => Some(Value::Null),
            w => match w.parse::<i64>() {
                Ok(n) => Some(n.into()),
                Err(_) => w.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(Value::Number),
            },
        }
    }
}
