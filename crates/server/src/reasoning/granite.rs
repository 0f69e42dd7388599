//! `granite`: IBM Granite 3.2's reasoning, marked in plain text rather than with tokens:
//! `Here is my thought process: ... Here is my response: ...` (or `Here's`), as vLLM reads it.
//! A whole output has its thinking between the two markers wherever they are (no response
//! marker: all of it is the answer); a stream thinks when it starts with the first marker, and
//! answers after the second (vLLM's streaming rule, which differs from its whole-text rule only
//! for outputs that do not follow the format).

use crate::tool_parsers::partial_marker_len;

const THINK_STARTS: [&str; 2] = ["Here's my thought process:", "Here is my thought process:"];
const RESPONSE_STARTS: [&str; 2] = ["Here's my response:", "Here is my response:"];

/// The first of `markers` in `text`: where, and how long.
fn find_first(text: &str, markers: &[&str]) -> Option<(usize, usize)> {
    markers.iter().filter_map(|m| text.find(m).map(|i| (i, m.len()))).min()
}

/// (reasoning, content) of a whole output (vLLM's regex: the first thought-process marker, then
/// the first response marker after it).
pub fn split(text: &str) -> (Option<String>, Option<String>) {
    let whole = || (None, Some(text.to_string()));
    let Some((ts, tlen)) = find_first(text, &THINK_STARTS) else { return whole() };
    let after = &text[ts + tlen..];
    let Some((rs, rlen)) = find_first(after, &RESPONSE_STARTS) else { return whole() };
    let content = &after[rs + rlen..];
    (Some(after[..rs].to_string()), (!content.is_empty()).then(|| content.to_string()))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Part {
    /// Not yet known whether the output opens with the thought-process marker.
    Undecided,
    Thinking,
    /// Content: after the response marker, or an output that never opened the thinking.
    Answer,
}

/// One streamed choice's split.
pub struct GraniteStream {
    text: String,
    /// Bytes of `text` already sent (or skipped: the markers).
    sent: usize,
    part: Part,
}

impl GraniteStream {
    pub fn new() -> Self {
        GraniteStream { text: String::new(), sent: 0, part: Part::Undecided }
    }

    /// The next piece of text, split into (reasoning, content).
    pub fn push(&mut self, piece: &str, finished: bool) -> (String, String) {
        self.text.push_str(piece);
        if self.part == Part::Undecided {
            if let Some(m) = THINK_STARTS.iter().find(|m| self.text.starts_with(*m)) {
                (self.part, self.sent) = (Part::Thinking, m.len());
            } else if !finished && THINK_STARTS.iter().any(|m| m.starts_with(self.text.as_str())) {
                return (String::new(), String::new()); // the marker may still come
            } else {
                self.part = Part::Answer;
            }
        }
        let unsent = &self.text[self.sent..];
        if self.part == Part::Answer {
            self.sent = self.text.len();
            return (String::new(), unsent.to_string());
        }
        if let Some((i, len)) = find_first(unsent, &RESPONSE_STARTS) {
            let out = (unsent[..i].to_string(), unsent[i + len..].to_string());
            (self.part, self.sent) = (Part::Answer, self.text.len());
            return out;
        }
        // Hold back what may be the start of the response marker.
        let held =
            if finished { 0 } else { RESPONSE_STARTS.iter().map(|m| partial_marker_len(unsent, m)).max().unwrap_or(0) };
        let r = unsent[..unsent.len() - held].to_string();
        self.sent = self.text.len() - held;
        (r, String::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_outputs_split_at_the_markers() {
        let text = "Here is my thought process: 2 and 2 make 4.\nHere is my response: The answer is 4.";
        assert_eq!(split(text), (Some(" 2 and 2 make 4.\n".into()), Some(" The answer is 4.".into())));
        assert_eq!(split("Here's my thought process: hmm Here's my response:"), (Some(" hmm ".into()), None));
        // Without the response marker (cut short, or no thinking) all of it is content.
        assert_eq!(
            split("Here is my thought process: still"),
            (None, Some("Here is my thought process: still".into()))
        );
        assert_eq!(split("The answer is 4."), (None, Some("The answer is 4.".into())));
    }

    /// Pieces split at `at`, put back together.
    fn streamed(text: &str, at: usize) -> (String, String) {
        let mut s = GraniteStream::new();
        let (r1, c1) = s.push(&text[..at], false);
        let (r2, c2) = s.push(&text[at..], true);
        (r1 + &r2, c1 + &c2)
    }

    #[test]
    fn streams_split_anywhere_as_vllm_streams_them() {
        for (text, reasoning, content) in [
            (
                "Here's my thought process: 2 and 2 é make 4.\nHere's my response: The answer is 4.",
                " 2 and 2 é make 4.\n",
                " The answer is 4.",
            ),
            ("The answer is 4. Here is my response: no", "", "The answer is 4. Here is my response: no"),
            // Cut short while thinking: a stream has sent it as reasoning (vLLM's stream too).
            ("Here is my thought process: still Here is my", " still Here is my", ""),
            ("Here", "", "Here"),
        ] {
            for at in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
                assert_eq!(streamed(text, at), (reasoning.to_string(), content.to_string()), "{text:?} split at {at}");
            }
        }
    }
}
