//! Hostile chat messages (and template variables) rendered through a ChatML template of the
//! kind real models ship. Ok or an error, never a panic or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use vllm_rs_frontend::ChatTemplate;

const TEMPLATE: &str = "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}\
{{ '<|im_start|>system\nYou are helpful.<|im_end|>\n' }}{% endif %}\
{{ '<|im_start|>' + message['role'] + '\n' + message['content'] | trim + '<|im_end|>' + '\n' }}\
{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

fuzz_target!(|data: &[u8]| {
    static T: OnceLock<ChatTemplate> = OnceLock::new();
    let t = T.get_or_init(|| {
        ChatTemplate::new(TEMPLATE, Some("<s>".into()), Some("</s>".into())).expect("the template compiles")
    });
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let (messages, extra) = match &v {
        serde_json::Value::Object(o) => (o.get("messages").cloned().unwrap_or_default(), o.clone()),
        other => (other.clone(), Default::default()),
    };
    let _ = t.render(&messages, true, &extra);
});
