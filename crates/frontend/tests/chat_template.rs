//! Every chat template we have renders byte-identical to transformers' apply_chat_template
//! (goldens from scripts/goldens/frontend_goldens.py); where Jinja raised, we raise too.

mod common;

use vllm_rs_frontend::{ChatTemplate, Error};

#[test]
fn templates_render_like_transformers() {
    let g = vllm_rs_testutil::golden("frontend/chat_templates.json");
    let templates = g["templates"].as_object().unwrap();
    assert_eq!(templates.len(), 5, "smollm2 (hf and gguf), qwen05, gemma3, qwen3");
    let mut rendered = 0;
    let mut raised = 0;
    for (name, t) in templates {
        let opt = |k: &str| t[k].as_str().map(String::from);
        let template = ChatTemplate::new(t["source"].as_str().unwrap(), opt("bos_token"), opt("eos_token"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for case in t["cases"].as_array().unwrap() {
            let what = format!("{name}/{} (add_generation_prompt={})", case["name"], case["add_generation_prompt"]);
            let result = template.render(
                &case["messages"],
                case["add_generation_prompt"].as_bool().unwrap(),
                case["extra"].as_object().unwrap(),
            );
            match (case.get("output").and_then(|o| o.as_str()), case.get("error").and_then(|e| e.as_str()), result) {
                (Some(want), _, Ok(got)) => {
                    assert_eq!(got, want, "{what}");
                    rendered += 1;
                }
                (None, Some(msg), Err(Error::TemplateRaised { message })) => {
                    assert_eq!(message, msg, "{what}");
                    raised += 1;
                }
                // Jinja failed on an undefined value or a type error: any render error will do,
                // but not a raise_exception (that one has the template's own message).
                (None, Some(msg), Err(Error::TemplateRender(_))) => {
                    assert!(!msg.contains("Conversation roles"), "{what}: want the template's message {msg:?}");
                }
                (_, _, other) => panic!("{what}: golden {case} but got {other:?}"),
            }
        }
    }
    assert!(rendered > 100 && raised >= 4, "rendered {rendered}, raised {raised}");
}

#[test]
fn the_tokenizers_template_and_tokens_work_together() {
    let tok = common::hf_tokenizer("gemma3_tokenizer");
    let t = ChatTemplate::new(
        tok.chat_template().unwrap(),
        tok.bos_token().map(String::from),
        tok.eos_token().map(String::from),
    )
    .unwrap()
    .with_special_tokens(tok.special_tokens_map());
    let messages = serde_json::json!([{"role": "user", "content": "Hi"}]);
    let text = t.render(&messages, true, &serde_json::Map::new()).unwrap();
    assert_eq!(text, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    // The template writes <bos> itself, so the prompt is tokenized without adding special tokens.
    let ids = tok.encode(&text, false).unwrap();
    assert_eq!(ids[..2], [2, 105]);
}

#[test]
fn shared_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<vllm_rs_frontend::Tokenizer>();
    assert_send_sync::<ChatTemplate>();
    assert_send_sync::<vllm_rs_frontend::IncrementalDetokenizer>();
    assert_send_sync::<vllm_rs_frontend::StopStrings>();
}
