//! `deepseek_v3`: DeepSeek-V3's (and R1-0528's) calls between special tokens,
//!
//! ```text
//! <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
//! ```json
//! {"city": "Paris"}
//! ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//! ```
//!
//! The arguments are passed on as the model wrote them (one line of JSON), as vLLM does. A
//! stream sends a call's name once its line is complete, then the arguments as they are
//! written (the closing fence held back).

use super::{Extracted, ParsedCall, ToolParser, content_before};

const CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
const CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const CALL_END: &str = "<｜tool▁call▁end｜>";
const SEP: &str = "<｜tool▁sep｜>";
const FENCE: &str = "\n```json\n";
const CLOSE: &str = "\n```";

pub struct DeepSeekV3;

/// One call block (after `<｜tool▁call▁begin｜>`): its name, its arguments so far, and its
/// type once it is complete (vLLM's regex matched: the arguments are one line followed by the
/// closing fence and `<｜tool▁call▁end｜>`). `None` until the name's line is complete.
fn call_in(block: &str) -> Option<(ParsedCall, Option<&str>)> {
    let line = &block[..block.find('\n').unwrap_or(block.len())];
    let (kind, name) = line.rsplit_once(SEP)?;
    let rest = &block[line.len()..];
    if rest.is_empty() {
        return None; // the name may still grow
    }
    let name = name.to_string();
    let Some(args) = rest.strip_prefix(FENCE) else {
        let partial = FENCE.starts_with(rest);
        return partial.then(|| (ParsedCall { name, arguments: String::new() }, None));
    };
    let line_end = args.find('\n').unwrap_or(args.len());
    let complete = args[line_end..].starts_with(&format!("{CLOSE}{CALL_END}"));
    // Written so far: the line without what may be the start of the closing fence.
    let arguments = if complete { &args[..line_end] } else { args[..line_end].trim_end_matches('`') };
    Some((ParsedCall { name, arguments: arguments.to_string() }, complete.then_some(kind)))
}

/// The call blocks after the calls' start marker.
fn blocks(text: &str) -> impl Iterator<Item = &str> {
    let body = text.find(CALLS_BEGIN).map_or("", |i| &text[i + CALLS_BEGIN.len()..]);
    body.split(CALL_BEGIN).skip(1)
}

impl ToolParser for DeepSeekV3 {
    fn start_markers(&self) -> &[&str] {
        &[CALLS_BEGIN]
    }

    /// The complete calls; a type other than `function` fails the whole parse (in vLLM, the
    /// response model refuses it and the text stays content).
    fn extract(&self, text: &str) -> Extracted {
        let found: Vec<(ParsedCall, &str)> =
            blocks(text).filter_map(call_in).filter_map(|(c, k)| Some((c, k?))).collect();
        match text.find(CALLS_BEGIN) {
            Some(at) if !found.is_empty() && found.iter().all(|(_, kind)| *kind == "function") => {
                Extracted { content: content_before(text, at), calls: found.into_iter().map(|(c, _)| c).collect() }
            }
            _ => Extracted { content: Some(text.to_string()), calls: vec![] },
        }
    }

    fn calls_so_far(&self, text: &str) -> Vec<ParsedCall> {
        let mut out = Vec::new();
        for block in blocks(text) {
            let Some((call, complete)) = call_in(block) else { break };
            out.push(call);
            if complete.is_none() {
                break;
            }
        }
        out
    }
}
