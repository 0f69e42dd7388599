//! Constrained decoding with `llguidance`: grammars compiled once per request (off the engine
//! thread), and a per-sequence matcher the runner advances with each accepted token and asks for
//! the allowed-token mask before sampling (vLLM's order: the mask is applied to the logits before
//! anything else, so raw logprobs see it too).
//!
//! EOS (and every stop token id the request stops at) is allowed only where the grammar may end.
//!
//! The same per-sequence state carries vLLM's `thinking_token_budget`: once a sequence has
//! thought that many tokens, the end-of-thinking token is forced (vLLM's
//! `ThinkingTokenBudgetLogitsProcessor`).

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;
use std::sync::Arc;

/// What a request constrains its output to.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSpec {
    /// A JSON schema.
    Json(Value),
    /// Any JSON object (`response_format: json_object`).
    JsonObject,
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A Lark grammar (llguidance's dialect, which also reads plain EBNF-style Lark).
    Lark(String),
    /// vLLM's structural tag (`structures` and `triggers`): free text, except that each
    /// trigger must go on into one of the structures whose `begin` starts with it.
    StructuralTag {
        structures: Vec<TagStructure>,
        triggers: Vec<String>,
    },
}

/// One structure of a structural tag: `begin`, then JSON following `schema`, then `end`.
#[derive(Clone, Debug, PartialEq)]
pub struct TagStructure {
    pub begin: String,
    pub schema: Value,
    pub end: String,
}

/// The vocabulary as llguidance sees it, and the grammar compiler built on it. One per model.
pub struct GrammarCompiler {
    factory: ParserFactory,
}

impl std::fmt::Debug for GrammarCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarCompiler").field("vocab_size", &self.factory.tok_env().tok_trie().vocab_size()).finish()
    }
}

impl GrammarCompiler {
    /// `token_bytes[id]` is the text of token `id` as bytes (special tokens prefixed with
    /// [`TokTrie::SPECIAL_TOKEN_MARKER`]), padded with empty entries to the model's vocabulary
    /// (the logits' width). `stop_ids` end a constrained output where the grammar accepts.
    pub fn new(mut token_bytes: Vec<Vec<u8>>, vocab_size: usize, stop_ids: &[u32]) -> Result<Self, String> {
        if token_bytes.len() > vocab_size {
            return Err(format!("the tokenizer has {} tokens, more than the model's {vocab_size}", token_bytes.len()));
        }
        token_bytes.resize(vocab_size, Vec::new());
        let stops: Vec<u32> = stop_ids.iter().copied().filter(|&t| (t as usize) < vocab_size).collect();
        let Some(&eos) = stops.first() else {
            return Err("the model has no EOS token: a constrained output could never end".into());
        };
        let info = TokRxInfo::new(vocab_size as u32, eos);
        let trie = TokTrie::from(&info, &token_bytes).with_eos_tokens(&stops);
        let env: llguidance::toktrie::TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        factory.quiet();
        Ok(GrammarCompiler { factory })
    }

    /// Compiles `spec` and checks the grammar can start (an unsatisfiable grammar fails here).
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Grammar, String> {
        let grammar = match spec {
            GrammarSpec::Json(schema) => TopLevelGrammar::from_json_schema(flexible_whitespace(schema.clone())),
            GrammarSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(flexible_whitespace(serde_json::json!({"type": "object"})))
            }
            GrammarSpec::Regex(rx) => TopLevelGrammar::from_regex(rx),
            GrammarSpec::Choice(choices) => TopLevelGrammar::from_lark(choice_grammar(choices)?),
            GrammarSpec::Lark(src) => TopLevelGrammar::from_lark(src.clone()),
            GrammarSpec::StructuralTag { structures, triggers } => {
                TopLevelGrammar::from_lark(structural_tag_grammar(structures, triggers)?)
            }
        };
        let parser = self.factory.create_parser(grammar).map_err(|e| e.to_string())?;
        let mut matcher = Matcher::new(Ok(parser));
        // The first mask: compile errors llguidance finds lazily, and a grammar that allows
        // nothing at all, show up here rather than mid-generation.
        let mask = matcher.compute_mask().map_err(|e| e.to_string())?;
        if mask.num_set() == 0 {
            return Err("the grammar allows no output at all".into());
        }
        Ok(Grammar(Arc::new(matcher)))
    }
}

/// Whitespace between JSON tokens: vLLM's default (`disable_any_whitespace` off) allows any, but
/// a run of it is capped here. Unbounded, a small model can pick newline after newline until
/// `max_tokens` and never close the object (seen with Qwen2.5-0.5B); 24 characters still hold
/// a newline and the indent of a deeply nested pretty-printed value. A schema's own
/// `x-guidance` options win.
const JSON_WHITESPACE: &str = r"[\x20\x0A\x0D\x09]{1,24}";

fn flexible_whitespace(mut schema: Value) -> Value {
    if let Value::Object(o) = &mut schema {
        o.entry("x-guidance")
            .or_insert_with(|| serde_json::json!({"whitespace_flexible": true, "whitespace_pattern": JSON_WHITESPACE}));
    }
    schema
}

/// `start: "a" | "b"` with each choice as a quoted literal.
fn choice_grammar(choices: &[String]) -> Result<String, String> {
    if choices.is_empty() {
        return Err("choice needs at least one option".into());
    }
    let alts: Vec<String> = choices.iter().map(|c| serde_json::to_string(c).expect("a string serializes")).collect();
    Ok(format!("start: {}", alts.join(" | ")))
}

/// A structural tag as Lark: text without any trigger, or such text up to a trigger (lazily:
/// the first one) followed by the rest of a structure that begins with it, any number of times.
fn structural_tag_grammar(structures: &[TagStructure], triggers: &[String]) -> Result<String, String> {
    let lit = |s: &str| serde_json::to_string(s).expect("a string serializes");
    if triggers.is_empty() {
        return Err("a structural tag needs at least one trigger".into());
    }
    if let Some(s) = structures.iter().find(|s| !triggers.iter().any(|t| s.begin.starts_with(t.as_str()))) {
        return Err(format!("the structure beginning {:?} starts with none of the triggers", s.begin));
    }
    let any_trigger: Vec<String> = triggers.iter().map(|t| lit(t)).collect();
    let mut g = format!("start: seg* FREE\nFREE: /(?s:.*)/ & ~(/(?s:.*)/ ({}) /(?s:.*)/)\n", any_trigger.join(" | "));
    let mut segs = Vec::new();
    for (i, t) in triggers.iter().enumerate() {
        let tags: Vec<String> = structures
            .iter()
            .filter(|s| s.begin.starts_with(t.as_str()))
            .map(|s| {
                let schema = match &s.schema {
                    Value::Object(_) => flexible_whitespace(s.schema.clone()),
                    _ => flexible_whitespace(serde_json::json!({})),
                };
                let around = |x: &str| if x.is_empty() { String::new() } else { lit(x) };
                format!("{} %json {schema} {}", around(&s.begin[t.len()..]), around(&s.end))
            })
            .collect();
        if tags.is_empty() {
            return Err(format!("the trigger {t:?} begins none of the structures"));
        }
        g.push_str(&format!("text_{i}[lazy]: FREE {}\ntag_{i}: {}\n", lit(t), tags.join(" | ")));
        segs.push(format!("text_{i} tag_{i}"));
    }
    g.push_str(&format!("seg: {}\n", segs.join(" | ")));
    Ok(g)
}

/// Each token's bytes, read from a `tokenizer.json` (byte-level BPE or SentencePiece-style
/// with byte fallback).
pub fn token_bytes_from_tokenizer_json(json: &Value) -> Result<Vec<Vec<u8>>, String> {
    // llguidance asserts on vocabularies it does not expect: an error here, not a crash.
    std::panic::catch_unwind(|| llguidance::token_bytes_from_tokenizer_json(json))
        .map_err(|_| "the tokenizer's vocabulary could not be read as bytes".to_string())?
        .map_err(|e| e.to_string())
}

/// A compiled grammar, ready to start matchers. Cheap to clone (shared).
#[derive(Clone)]
pub struct Grammar(Arc<Matcher>);

impl Grammar {
    /// A fresh matcher at the grammar's start, owned by one sequence. With `after`, the output
    /// is free until that token (the end of the model's reasoning), and the grammar applies to
    /// what follows it, as vLLM applies structured output after reasoning ends.
    pub fn start(&self, after: Option<u32>) -> GrammarState {
        GrammarState { matcher: Some(self.0.deep_clone()), failed: false, waiting_for: after, thinking: None }
    }
}

/// `thinking_token_budget`: at most `budget` tokens inside a `start` ... `end` thinking block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThinkingBudget {
    pub budget: usize,
    pub start: u32,
    pub end: u32,
    /// The prompt leaves the output inside a block (it ends after a `start` with no `end`).
    pub in_think: bool,
    /// Prompt tokens after that open block's `start` (they count, as in vLLM).
    pub counted: usize,
}

/// Where a sequence is in its thinking.
#[derive(Debug)]
struct Thinking {
    limit: ThinkingBudget,
    in_think: bool,
    count: usize,
    /// The budget is spent: the next token is `end`.
    forcing: bool,
}

impl Thinking {
    fn new(limit: ThinkingBudget) -> Self {
        // A zero budget with the prompt inside the block forces the end at once (vLLM).
        Thinking { limit, in_think: limit.in_think, count: limit.counted, forcing: limit.in_think && limit.budget == 0 }
    }

    /// vLLM's update after each output token: a `start` opens a block, an `end` closes it,
    /// a token inside counts; reaching the budget forces the end next.
    fn accept(&mut self, token: u32) {
        if token == self.limit.start {
            (self.in_think, self.count) = (true, 0);
        } else if token == self.limit.end {
            (self.in_think, self.count) = (false, 0);
        } else if self.in_think {
            self.count += 1;
        }
        if self.forcing {
            self.forcing = false; // the (one-token) end sequence is out
        } else if self.in_think && self.count >= self.limit.budget {
            (self.in_think, self.forcing) = (false, true);
        }
    }
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Grammar")
    }
}

/// Requests compare equal when they share the compiled grammar.
impl PartialEq for Grammar {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// One sequence's position in its grammar, and in its thinking budget.
pub struct GrammarState {
    /// `None`: no grammar, only a thinking budget.
    matcher: Option<Matcher>,
    /// The matcher hit an internal error: the rest is unconstrained, and says so in the log once.
    failed: bool,
    /// Not constrained until this token has been generated.
    waiting_for: Option<u32>,
    thinking: Option<Thinking>,
}

impl GrammarState {
    /// The state a sequence's sampling needs: its grammar (applying after `after`, see
    /// [`Grammar::start`]) and its thinking budget; `None` when it has neither.
    pub fn for_request(grammar: Option<&Grammar>, after: Option<u32>, budget: Option<ThinkingBudget>) -> Option<Self> {
        let mut state = match grammar {
            Some(g) => g.start(after),
            None if budget.is_some() => {
                GrammarState { matcher: None, failed: false, waiting_for: None, thinking: None }
            }
            None => return None,
        };
        state.thinking = budget.map(Thinking::new);
        Some(state)
    }

    /// Sets every logit the grammar does not allow next to -inf (all but the end of thinking
    /// when the thinking budget is spent).
    pub fn apply_mask(&mut self, logits: &mut [f32]) {
        if let Some(t) = self.thinking.as_ref().filter(|t| t.forcing) {
            let end = t.limit.end as usize;
            for (i, v) in logits.iter_mut().enumerate() {
                *v = if i == end { 0.0 } else { f32::NEG_INFINITY };
            }
            return;
        }
        if self.failed || self.waiting_for.is_some() {
            return;
        }
        let Some(matcher) = &mut self.matcher else { return };
        match matcher.compute_mask_or_eos() {
            Ok(mask) => mask_logits(&mask, logits),
            Err(e) => self.fail(&e.to_string()),
        }
    }

    /// How many of `drafts` in a row the grammar allows from here, without advancing past them
    /// (vLLM's `validate_tokens`). Where this state cannot tell alone (a thinking budget, a
    /// grammar waiting for the end of reasoning, a failed matcher), all of them: each verified
    /// row is still masked after the tokens before it.
    pub fn valid_drafts(&mut self, drafts: &[u32]) -> usize {
        let unsure = self.failed || self.waiting_for.is_some() || self.thinking.is_some();
        match &mut self.matcher {
            Some(m) if !unsure => m.validate_tokens(drafts).unwrap_or(drafts.len()),
            _ => drafts.len(),
        }
    }

    /// Advances past an accepted token.
    pub fn accept(&mut self, token: u32) {
        if let Some(t) = &mut self.thinking {
            t.accept(token);
        }
        if let Some(end) = self.waiting_for {
            if token == end {
                self.waiting_for = None;
            }
            return;
        }
        let Some(matcher) = &mut self.matcher else { return };
        if self.failed || matcher.is_stopped() {
            return;
        }
        if let Err(e) = matcher.consume_token(token) {
            self.fail(&e.to_string());
        }
    }

    fn fail(&mut self, error: &str) {
        tracing::error!(
            "structured output: the grammar matcher failed ({error}); the rest of this output is unconstrained"
        );
        self.failed = true;
    }
}

fn mask_logits(mask: &SimpleVob, logits: &mut [f32]) {
    for (i, v) in logits.iter_mut().enumerate() {
        if !mask.is_allowed(i as u32) {
            *v = f32::NEG_INFINITY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy vocabulary: every printable ASCII byte is a token, plus a few multi-byte tokens and
    /// an EOS; a greedy "model" that prefers the token listed first in `prefs`.
    fn compiler() -> (GrammarCompiler, Vec<Vec<u8>>) {
        let mut words: Vec<Vec<u8>> = (0u8..128).map(|b| vec![b]).collect();
        for w in ["true", "false", "null", "\"name\"", "  "] {
            words.push(w.as_bytes().to_vec());
        }
        words.push(b"\xFF<eos>".to_vec());
        let eos = words.len() as u32 - 1;
        let c = GrammarCompiler::new(words.clone(), words.len() + 3, &[eos]).unwrap();
        (c, words)
    }

    /// Greedy decoding where the "model" likes `want`'s bytes in order, then closing quotes,
    /// and dislikes whitespace (a flat model would pad JSON with whitespace forever).
    fn decode(c: &GrammarCompiler, words: &[Vec<u8>], spec: &GrammarSpec, want: &[u8]) -> (String, bool) {
        let mut state = c.compile(spec).unwrap().start(None);
        let eos = words.len() as u32 - 1;
        let mut out = Vec::new();
        for _ in 0..64 {
            let mut logits = vec![0.0f32; words.len() + 3];
            logits[b'"' as usize] = 0.5;
            for (i, w) in words.iter().enumerate() {
                if !w.is_empty() && w.iter().all(u8::is_ascii_whitespace) {
                    logits[i] = -1.0;
                }
            }
            if let Some(&b) = want.get(out.len()) {
                logits[b as usize] = 5.0;
            }
            logits[eos as usize] = 1.0;
            state.apply_mask(&mut logits);
            let tok = crate::sampler::argmax(&logits);
            assert!(logits[tok as usize].is_finite(), "the mask left nothing");
            state.accept(tok);
            if tok == eos {
                return (String::from_utf8(out).unwrap(), true);
            }
            out.extend_from_slice(&words[tok as usize]);
        }
        (String::from_utf8(out).unwrap(), false)
    }

    #[test]
    fn regex_choice_and_lark_constrain_a_model_that_wants_something_else() {
        let (c, words) = compiler();
        let (s, ended) = decode(&c, &words, &GrammarSpec::Regex("[0-9]{3}-[a-z]+".into()), b"hello");
        assert!(ended, "{s}");
        let re = regex_lite_check(&s);
        assert!(re, "{s:?} does not match");
        let (s, _) = decode(&c, &words, &GrammarSpec::Choice(vec!["yes".into(), "no".into()]), b"nope");
        assert_eq!(s, "no", "the model's preferred prefix picks the choice, then EOS comes when complete");
        let (s, _) = decode(&c, &words, &GrammarSpec::Lark("start: \"a\" B\nB: /[xy]+/".into()), b"axyyx!");
        assert_eq!(s, "axyyx");
    }

    fn regex_lite_check(s: &str) -> bool {
        let (digits, rest) = s.split_at(3.min(s.len()));
        digits.chars().all(|c| c.is_ascii_digit())
            && rest.starts_with('-')
            && rest.len() > 1
            && rest[1..].chars().all(|c| c.is_ascii_lowercase())
    }

    #[test]
    fn json_schema_output_parses_and_eos_waits_for_the_grammar() {
        let (c, words) = compiler();
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
            "required": ["name", "n"],
            "additionalProperties": false
        });
        // The model would rather stop at once: EOS is masked until the object is complete.
        let (s, ended) = decode(&c, &words, &GrammarSpec::Json(schema), b"");
        assert!(ended);
        let v: Value = serde_json::from_str(&s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
        assert!(v["name"].is_string() && v["n"].as_i64().is_some_and(|n| (0..=9).contains(&n)), "{v}");
        let (s, _) = decode(&c, &words, &GrammarSpec::JsonObject, b"{}");
        assert_eq!(s, "{}");
    }

    #[test]
    fn the_grammar_waits_for_the_end_of_reasoning() {
        let (c, words) = compiler();
        let mut state = c.compile(&GrammarSpec::Regex("[0-9]".into())).unwrap().start(Some(b'!' as u32));
        let free = |s: &mut GrammarState| {
            let mut l = vec![0.0f32; words.len() + 3];
            s.apply_mask(&mut l);
            l.iter().filter(|v| v.is_finite()).count()
        };
        assert_eq!(free(&mut state), words.len() + 3, "thinking: unconstrained");
        state.accept(b'a' as u32);
        state.accept(b'!' as u32);
        assert_eq!(free(&mut state), 10, "after the end marker: one digit");
    }

    /// The allowed tokens after a mask.
    fn allowed(s: &mut GrammarState, width: usize) -> Vec<u32> {
        let mut l = vec![0.0f32; width];
        s.apply_mask(&mut l);
        (0..width as u32).filter(|&i| l[i as usize].is_finite()).collect()
    }

    #[test]
    fn a_spent_thinking_budget_forces_the_end_of_thinking() {
        let limit = ThinkingBudget { budget: 3, start: 1, end: 2, in_think: false, counted: 0 };
        let mut s = GrammarState::for_request(None, None, Some(limit)).unwrap();
        assert_eq!(allowed(&mut s, 8).len(), 8, "not thinking yet: free");
        for t in [1, 5, 6] {
            s.accept(t);
            assert_eq!(allowed(&mut s, 8).len(), 8);
        }
        s.accept(7); // the third thinking token
        assert_eq!(allowed(&mut s, 8), vec![2], "budget spent: </think> next");
        s.accept(2);
        assert_eq!(allowed(&mut s, 8).len(), 8, "after the end: free again");
        // The prompt opened the block: its tokens after <think> count; budget 0 forces at once.
        let open = ThinkingBudget { budget: 2, in_think: true, counted: 1, ..limit };
        let mut s = GrammarState::for_request(None, None, Some(open)).unwrap();
        s.accept(5);
        assert_eq!(allowed(&mut s, 8), vec![2]);
        let zero = ThinkingBudget { budget: 0, in_think: true, counted: 1, ..limit };
        assert_eq!(allowed(&mut GrammarState::for_request(None, None, Some(zero)).unwrap(), 8), vec![2]);
        assert!(GrammarState::for_request(None, None, None).is_none());
    }

    #[test]
    fn the_budget_ends_thinking_and_the_grammar_follows() {
        let (c, words) = compiler();
        let end = b'!' as u32;
        let limit = ThinkingBudget { budget: 2, start: b'<' as u32, end, in_think: true, counted: 0 };
        let grammar = c.compile(&GrammarSpec::Regex("[0-9]".into())).unwrap();
        let mut s = GrammarState::for_request(Some(&grammar), Some(end), Some(limit)).unwrap();
        let width = words.len() + 3;
        s.accept(b'a' as u32);
        assert_eq!(allowed(&mut s, width).len(), width, "thinking: unconstrained");
        s.accept(b'b' as u32);
        assert_eq!(allowed(&mut s, width), vec![end]);
        s.accept(end);
        assert_eq!(allowed(&mut s, width).len(), 10, "after the forced end: one digit");
    }

    #[test]
    fn a_structural_tag_leaves_text_free_and_holds_each_triggered_structure() {
        let (c, words) = compiler();
        let tag = |begin: &str, end: &str| TagStructure {
            begin: begin.into(),
            schema: serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}},
                "required": ["a"], "additionalProperties": false}),
            end: end.into(),
        };
        let spec = GrammarSpec::StructuralTag {
            structures: vec![tag("<f=w>", "</f>"), tag("<f=v>", "</f>")],
            triggers: vec!["<f=".into()],
        };
        let (s, ended) = decode(&c, &words, &spec, b"hi <f=w>{\"a\":1}</f> bye");
        assert_eq!((s.as_str(), ended), ("hi <f=w>{\"a\":1}</f> bye", true));
        let (s, _) = decode(&c, &words, &spec, b"plain text");
        assert_eq!(s, "plain text", "no trigger: free text");
        // After the trigger only a structure's begin; its JSON follows the schema.
        let (s, _) = decode(&c, &words, &spec, b"a <f=x>{\"b\":2}</f>");
        assert!(s.starts_with("a <f=w>{\"a\"") || s.starts_with("a <f=v>{\"a\""), "{s:?}");
        let bad = GrammarSpec::StructuralTag { structures: vec![tag("<g>", "</g>")], triggers: vec!["<f=".into()] };
        assert!(c.compile(&bad).unwrap_err().contains("none of the triggers"));
    }

    #[test]
    fn bad_grammars_fail_to_compile_with_a_message() {
        let (c, _) = compiler();
        for spec in [
            GrammarSpec::Regex("(unclosed".into()),
            GrammarSpec::Lark("start: undefined_rule".into()),
            GrammarSpec::Json(serde_json::json!({"type": "no-such-type"})),
            GrammarSpec::Choice(vec![]),
        ] {
            let e = c.compile(&spec).unwrap_err();
            assert!(!e.is_empty(), "{spec:?}");
        }
    }
}
