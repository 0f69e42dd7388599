//! The qwen3 reasoning parser with the real Qwen3 tokenizer and chat template: the think
//! markers are found as single tokens; `chat_template_kwargs.enable_thinking: false` renders a
//! closed, empty thinking block, so the answer is all content and structured output applies
//! from its first token; with thinking on, a grammar waits for `</think>`.

use serde_json::{Map, Value, json};
use vllm_rs_engine::structured_output::token_bytes_from_tokenizer_json;
use vllm_rs_engine::{GrammarCompiler, GrammarSpec};
use vllm_rs_frontend::{ChatTemplate, Tokenizer};
use vllm_rs_server::reasoning::{ReasoningParser, reasoning_ended};

fn prompt(tok: &Tokenizer, thinking: bool) -> Vec<u32> {
    let t = ChatTemplate::from_tokenizer(tok, false).unwrap().unwrap();
    let messages = json!([{"role": "user", "content": "2 + 2?"}]);
    let mut extra = Map::new();
    extra.insert("enable_thinking".into(), Value::Bool(thinking));
    tok.encode(&t.render(&messages, true, &extra).unwrap(), false).unwrap()
}

#[test]
fn qwen3_thinking_switch_and_grammar_start() {
    let dir = vllm_rs_testutil::models_dir().join("tokenizers/qwen3");
    let tok = Tokenizer::from_hf_dir(&dir).unwrap();
    let (parser, think) = ReasoningParser::by_name("qwen3", &tok).unwrap();
    let think = think.expect("qwen3 has think tokens");
    assert_eq!(tok.id_to_token(think.end).as_deref(), Some("</think>"));

    let off = prompt(&tok, false);
    assert!(reasoning_ended(&off, think), "enable_thinking false closes the block in the prompt");
    assert!(!parser.starts_thinking(&off, Some(think)));
    assert_eq!(parser.split("The answer is 4.", false), (None, Some("The answer is 4.".into())));
    let on = prompt(&tok, true);
    assert!(!reasoning_ended(&on, think), "thinking on: the model opens and closes the block itself");
    let recorded = "<think>\nOkay, 2 + 2 is 4.\n</think>\n\nThe answer is 4.";
    assert_eq!(
        parser.split(recorded, parser.starts_thinking(&on, Some(think))),
        (Some("\nOkay, 2 + 2 is 4.\n".into()), Some("\n\nThe answer is 4.".into()))
    );

    // A grammar over this vocabulary waits for </think>, then holds.
    let json: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap()).unwrap();
    let bytes = token_bytes_from_tokenizer_json(&json).unwrap();
    let vocab = bytes.len();
    let eos = tok.token_to_id("<|im_end|>").unwrap();
    let c = GrammarCompiler::new(bytes, vocab, &[eos]).unwrap();
    let mut state = c.compile(&GrammarSpec::Choice(vec!["4".into()])).unwrap().start(Some(think.end));
    let allowed = |s: &mut vllm_rs_engine::structured_output::GrammarState| {
        let mut logits = vec![0.0f32; vocab];
        s.apply_mask(&mut logits);
        logits.iter().filter(|v| v.is_finite()).count()
    };
    assert_eq!(allowed(&mut state), vocab, "thinking: free");
    state.accept(tok.token_to_id("<think>").unwrap());
    assert_eq!(allowed(&mut state), vocab);
    state.accept(think.end);
    assert_eq!(allowed(&mut state), 1, "after </think>: only \"4\"");
}
