//! [`StopStrings`]: vLLM's `stop` strings applied to streamed text.
//!
//! The output ends just before the first stop string (or just after it with
//! `include_stop_str_in_output`). While streaming, text that could still turn out to be the start
//! of a stop string is held back, so nothing is ever emitted that the stop would have cut.
//!
//! When several stop strings complete in the same delta, the one that starts first wins (ties:
//! the one listed first). vLLM picks the first *listed* of them instead, which can leave another
//! stop string in the output; the two agree whenever only one completes at a time.

use crate::error::{Error, Result};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct StopOutcome {
    /// Text that is safe to emit now.
    pub text: String,
    /// The stop string that ended the output, on the push that found it.
    pub stopped: Option<String>,
}

#[derive(Clone, Debug)]
pub struct StopStrings {
    stops: Vec<String>,
    include_stop_str_in_output: bool,
    /// Recent text: the tail of what was emitted (so a stop string can be found across deltas)
    /// followed by what is held back.
    window: String,
    /// Byte offset in `window` where the held-back text starts.
    emitted: usize,
    /// Longest stop string, in characters.
    max_chars: usize,
    done: bool,
}

impl StopStrings {
    /// An empty stop string is rejected, as vLLM does (it would stop before any text).
    pub fn new(stops: Vec<String>, include_stop_str_in_output: bool) -> Result<Self> {
        if stops.iter().any(String::is_empty) {
            return Err(Error::InvalidInput("stop cannot contain an empty string".into()));
        }
        let max_chars = stops.iter().map(|s| s.chars().count()).max().unwrap_or(0);
        Ok(StopStrings { stops, include_stop_str_in_output, window: String::new(), emitted: 0, max_chars, done: false })
    }

    /// Whether a stop string was found (later pushes return nothing).
    pub fn is_stopped(&self) -> bool {
        self.done
    }

    /// Feeds the next text delta.
    pub fn push(&mut self, delta: &str) -> StopOutcome {
        if self.done {
            return StopOutcome::default();
        }
        if self.stops.is_empty() {
            return StopOutcome { text: delta.to_string(), stopped: None };
        }
        self.window.push_str(delta);
        if let Some((pos, stop)) = self.earliest_match() {
            let end = if self.include_stop_str_in_output { pos + stop.len() } else { pos };
            // A match always reaches into the new text, and held-back text covers any stop
            // prefix, so `end` is never before what was already emitted.
            let text = self.window[self.emitted.min(end)..end].to_string();
            let stopped = Some(stop.clone());
            self.done = true;
            self.window.clear();
            self.emitted = 0;
            return StopOutcome { text, stopped };
        }
        let hold = if self.include_stop_str_in_output { 0 } else { self.partial_stop_len() };
        let emit_end = self.window.len() - hold;
        let text = self.window[self.emitted..emit_end].to_string();
        self.emitted = emit_end;
        self.trim();
        StopOutcome { text, stopped: None }
    }

    /// The held-back text, at the end of generation (EOS, length): it did not become a stop string.
    pub fn flush(&mut self) -> String {
        if self.done {
            return String::new();
        }
        let text = self.window[self.emitted..].to_string();
        self.emitted = self.window.len();
        self.trim();
        text
    }

    /// (byte position, stop string) of the match that starts first.
    fn earliest_match(&self) -> Option<(usize, &String)> {
        let mut best: Option<(usize, &String)> = None;
        for s in &self.stops {
            if let Some(pos) = self.window.find(s.as_str())
                && best.is_none_or(|(b, _)| pos < b)
            {
                best = Some((pos, s));
            }
        }
        best
    }

    /// Bytes at the end of the window that are a proper prefix of some stop string.
    fn partial_stop_len(&self) -> usize {
        let w = &self.window;
        // Candidate starts: the last max_chars - 1 character boundaries, longest suffix first.
        let starts: Vec<usize> =
            w.char_indices().rev().take(self.max_chars.saturating_sub(1)).map(|(i, _)| i).collect();
        for &start in starts.iter().rev() {
            let suffix = &w[start..];
            if self.stops.iter().any(|s| s.len() > suffix.len() && s.starts_with(suffix)) {
                return w.len() - start;
            }
        }
        0
    }

    /// Keeps only what a future match can reach: the last `max_chars - 1` characters and
    /// whatever is still held back.
    fn trim(&mut self) {
        let keep_from = self.window.char_indices().rev().nth(self.max_chars.saturating_sub(2)).map_or(0, |(i, _)| i);
        let cut = keep_from.min(self.emitted);
        if cut > 0 {
            self.window.drain(..cut);
            self.emitted -= cut;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stops(list: &[&str], include: bool) -> StopStrings {
        StopStrings::new(list.iter().map(|s| s.to_string()).collect(), include).unwrap()
    }

    /// Pushes all deltas; returns (all emitted text incl. the final flush, the stop hit).
    fn run(s: &mut StopStrings, deltas: &[&str]) -> (String, Option<String>) {
        let mut out = String::new();
        for d in deltas {
            let o = s.push(d);
            out.push_str(&o.text);
            if o.stopped.is_some() {
                return (out, o.stopped);
            }
        }
        out.push_str(&s.flush());
        (out, None)
    }

    #[test]
    fn stop_spanning_several_deltas() {
        let mut s = stops(&["STOP"], false);
        assert_eq!(s.push("hello S").text, "hello ");
        assert_eq!(s.push("T").text, "");
        let o = s.push("OP and more");
        assert_eq!((o.text.as_str(), o.stopped.as_deref()), ("", Some("STOP")));
        assert!(s.is_stopped());
        assert_eq!(s.push("ignored"), StopOutcome::default());
        assert_eq!(s.flush(), "");
    }

    #[test]
    fn include_stop_string_in_output() {
        let mut s = stops(&["STOP"], true);
        // Nothing is held back: the stop string is part of the output anyway.
        assert_eq!(s.push("hello S").text, "hello S");
        let o = s.push("TOP tail");
        assert_eq!((o.text.as_str(), o.stopped.as_deref()), ("TOP", Some("STOP")));
        assert_eq!(run(&mut stops(&["b"], true), &["abc"]), ("ab".into(), Some("b".into())));
    }

    #[test]
    fn false_start_is_released() {
        let mut s = stops(&["STOP"], false);
        assert_eq!(s.push("ST").text, "");
        assert_eq!(s.push("OMP").text, "STOMP");
        assert_eq!(run(&mut stops(&["STOP"], false), &["S", "T", "O"]), ("STO".into(), None));
    }

    #[test]
    fn overlapping_candidates() {
        // "aab": the held "aa" is not a prefix of "aab" once "a" follows... check overlap.
        assert_eq!(run(&mut stops(&["aab"], false), &["a", "a", "a", "b", "c"]), ("a".into(), Some("aab".into())));
        assert_eq!(run(&mut stops(&["abab"], false), &["aba", "bab"]), ("".into(), Some("abab".into())));
    }

    #[test]
    fn stop_at_the_very_start() {
        assert_eq!(run(&mut stops(&["<|end|>"], false), &["<|end|>rest"]), ("".into(), Some("<|end|>".into())));
        assert_eq!(run(&mut stops(&["\n"], false), &["\n"]), ("".into(), Some("\n".into())));
    }

    #[test]
    fn earliest_of_several_wins() {
        assert_eq!(run(&mut stops(&["world", "lo"], false), &["hello world"]), ("hel".into(), Some("lo".into())));
        // Same start: the one listed first.
        assert_eq!(run(&mut stops(&["ab", "abc"], true), &["xabcd"]), ("xab".into(), Some("ab".into())));
        assert_eq!(run(&mut stops(&["abc", "ab"], true), &["xabcd"]), ("xabc".into(), Some("abc".into())));
    }

    #[test]
    fn unicode_stops_and_deltas() {
        let (text, stop) = run(&mut stops(&["終わり", "🛑"], false), &["日本", "語の終", "わり です"]);
        assert_eq!((text.as_str(), stop.as_deref()), ("日本語の", Some("終わり")));
        let (text, stop) = run(&mut stops(&["🛑x"], false), &["é🛑", "y🛑", "x!"]);
        assert_eq!((text.as_str(), stop.as_deref()), ("é🛑y", Some("🛑x")));
    }

    #[test]
    fn long_streams_keep_a_small_window() {
        let mut s = stops(&["END"], false);
        let mut out = String::new();
        for i in 0..1000 {
            out.push_str(&s.push(&format!("token{i} ")).text);
            assert!(s.window.len() < 32, "window grew to {}", s.window.len());
        }
        let o = s.push("EN");
        out.push_str(&o.text);
        let o = s.push("D");
        assert_eq!(o.stopped.as_deref(), Some("END"));
        assert!(out.ends_with("token999 "));
    }

    #[test]
    fn no_stops_passes_through_and_empty_stop_is_an_error() {
        assert_eq!(run(&mut stops(&[], false), &["a", "b"]), ("ab".into(), None));
        let e = StopStrings::new(vec!["".into()], false).unwrap_err();
        assert!(e.to_string().contains("empty string"), "{e}");
    }
}
