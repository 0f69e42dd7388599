//! The chat page at `/` in headless Chromium against the real server on SmolLM2 (with an API
//! key, which the page's user types in): a streamed answer equals the API's answer to the same
//! request, the conversation is sent back with the next question, model output that holds
//! `<script>` is shown as text, and the stop button ends a long answer (the server frees the
//! request). Saves a screenshot (`$CARGO_TARGET_TMPDIR/chat-page.png`; docs/chat-page.png is
//! one). Then `/docs` shows every operation of `/openapi.json`. Skipped, saying so, where Chromium is not installed (scripts/install_chromium.sh).

mod browser;
mod common;

use browser::{Browser, ENTER, find_tools};
use common::Server;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

const KEY: &str = "page-key";
const LAST_ANSWER: &str = "document.querySelector('.msg.assistant:last-of-type')";

/// The message the API answers to `messages` with the page's settings in these tests
/// (temperature 0, top p and top k left empty).
fn api_message(s: &Server, model: &str, messages: &Value, max_tokens: u32) -> Value {
    let body = json!({"model": model, "messages": messages, "temperature": 0, "max_tokens": max_tokens});
    let (status, v) = s.post_auth("/v1/chat/completions", &body, Some(KEY));
    assert_eq!(status, 200, "{v}");
    v["choices"][0]["message"].clone()
}

fn api_answer(s: &Server, messages: &Value, max_tokens: u32) -> String {
    api_message(s, "smol", messages, max_tokens)["content"].as_str().unwrap().to_string()
}

fn browser() -> Option<Browser> {
    match find_tools() {
        Ok((driver, chromium)) => Some(Browser::start(&driver, &chromium, 1100, 720)),
        Err(why) => {
            eprintln!("SKIPPED chat_page: {why}");
            None
        }
    }
}

/// Types `text`, sends it with Enter, and waits until the answer has finished; its text.
/// Waits until the page lists `model`, then sets greedy sampling and `max_tokens`.
fn greedy_once_listed(b: &Browser, model: &str, max_tokens: u32) {
    let listed = format!("return document.getElementById('model').textContent === '{model}'");
    b.wait_for("the model name", Duration::from_secs(10), &listed);
    b.set_field("#temperature", "0");
    b.set_field("#max-tokens", &max_tokens.to_string());
}

fn ask(b: &Browser, text: &str) -> String {
    b.type_into("#input", text);
    b.type_into("#input", ENTER);
    let done = format!("return {LAST_ANSWER}?.dataset.state === 'done'");
    b.wait_for("the streamed answer", Duration::from_secs(120), &done);
    b.js("return window.chat.history.at(-1).content").as_str().unwrap().to_string()
}

fn running_requests(s: &Server) -> f64 {
    let (status, text) = s.get_with("/metrics", &[("Authorization", &format!("Bearer {KEY}"))]);
    assert_eq!(status, 200);
    let line = text.lines().find(|l| l.starts_with("vllm:num_requests_running")).expect("the running gauge");
    line.rsplit_once(' ').unwrap().1.parse().unwrap()
}

#[test]
fn chat_page_streams_renders_safely_and_stops() {
    let Some(b) = browser() else { return };
    let s = Server::start(&["--served-model-name", "smol", "--api-key", KEY]);
    b.goto(&s.url("/"));
    // The page loads without the key; the API does not answer it until the key is entered.
    b.wait_for("the missing-key notice", Duration::from_secs(10), "return !document.getElementById('error').hidden");
    assert!(b.text("#error").contains("API key"), "{}", b.text("#error"));
    b.type_into("#api-key", KEY);
    b.type_into("#api-key", "\u{E004}"); // Tab: the change event lists the models with the key
    greedy_once_listed(&b, "smol", 48);

    // One question: the streamed answer is the API's greedy answer, and what is shown is it.
    let q1 = "What is the capital of France?";
    let a1 = ask(&b, q1);
    let messages = json!([{"role": "user", "content": q1}]);
    assert_eq!(a1, api_answer(&s, &messages, 48));
    let shown = b.text(".msg.assistant .content");
    assert_eq!(shown.split_whitespace().collect::<Vec<_>>(), a1.split_whitespace().collect::<Vec<_>>());
    let stats = b.text(".msg.assistant .stats");
    assert!(stats.contains("tokens/s") && stats.contains("first token after"), "{stats}");

    // A follow-up carries the conversation; its answer writes a raw <script> tag (outside any
    // code block), which is shown as text.
    let q2 = "Show a minimal HTML page with a script tag.";
    let a2 = ask(&b, q2);
    let messages = json!([{"role": "user", "content": q1}, {"role": "assistant", "content": a1},
        {"role": "user", "content": q2}]);
    assert_eq!(a2, api_answer(&s, &messages, 48));
    assert!(a2.starts_with("<script src="), "the model's answer has no <script> to test with: {a2:?}");
    let content = format!("{LAST_ANSWER}.querySelector('.content')");
    assert_eq!(b.js(&format!("return {content}.querySelectorAll('script, img, iframe').length")), json!(0));
    assert!(b.text(".msg.assistant:last-of-type .content").contains("<script src="));
    assert_eq!(b.alert_text(), None, "a dialog opened");
    // The renderer on raw markup outside code: text nodes only, handlers never attached.
    let raw = "Hi <img src=x onerror=\"window.pwned=1\"> <script>window.pwned=1</script> **bold**";
    let rendered = b.js(&format!(
        "const f = renderMarkdown({raw:?}); const d = document.createElement('div'); d.append(f); \
         document.body.append(d); return [d.textContent, d.querySelectorAll('img, script').length, d.innerHTML]"
    ));
    assert_eq!(rendered[0], json!("Hi <img src=x onerror=\"window.pwned=1\"> <script>window.pwned=1</script> bold"));
    assert_eq!(rendered[1], json!(0), "{}", rendered[2]);
    assert!(rendered[2].as_str().unwrap().contains("<strong>bold</strong>"), "{}", rendered[2]);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(b.js("return window.pwned === undefined"), json!(true));
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chat-page.png");
    b.js("document.body.lastChild.remove(); return null");
    b.screenshot(&shot);

    // Stop: a long answer ends when the button is pressed, and the server frees the request.
    b.click("#new-chat");
    b.set_field("#max-tokens", "1900");
    b.type_into("#input", "Write a short story about a dragon.");
    b.click("#send");
    let some_text = format!("return ({LAST_ANSWER}?.querySelector('.content').textContent.length ?? 0) > 20");
    b.wait_for("the first words of the story", Duration::from_secs(60), &some_text);
    assert_eq!(running_requests(&s), 1.0);
    b.click("#stop");
    let stopped = format!("return {LAST_ANSWER}.dataset.state === 'stopped'");
    b.wait_for("the stopped state", Duration::from_secs(10), &stopped);
    common::eventually("the server to free the request", Duration::from_secs(10), || running_requests(&s) == 0.0);
    let kept = b.js("return window.chat.history.at(-1).content").as_str().unwrap().to_string();
    assert!(!kept.is_empty() && kept.split_whitespace().count() < 600, "{kept}");
    assert!(b.text(".msg.assistant .stats").starts_with("stopped"));
    assert_eq!(b.js("return document.getElementById('send').hidden"), json!(false));
    eprintln!("screenshot: {}", shot.display());

    // /docs renders every operation of /openapi.json and the schemas they name.
    let (_, text) = s.get("/openapi.json");
    let doc: Value = serde_json::from_str(&text).unwrap();
    let ops: usize = doc["paths"].as_object().unwrap().values().map(|p| p.as_object().unwrap().len()).sum();
    b.goto(&s.url("/docs"));
    let all = format!("return document.querySelectorAll('#toc a').length === {ops}");
    b.wait_for("the operations of /docs", Duration::from_secs(10), &all);
    let chat = b.text("section[id='post/v1/chat/completions']");
    assert!(chat.contains("ChatCompletionRequest"), "{chat}");
    assert!(b.text("#schema-ChatCompletionRequest").contains("max_tokens"));
    b.screenshot(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-page.png"));
}

/// `delta.reasoning` (here from the granite parser, which reads plain-text markers that
/// Qwen2.5-Coder-0.5B writes when asked to) is shown collapsed above the answer.
#[test]
fn reasoning_is_shown_collapsed() {
    let Some(b) = browser() else { return };
    let model = vllm_rs_testutil::gguf_path("qwen05");
    let s = Server::start_model(&model, &["--served-model-name", "qwen", "--reasoning-parser", "granite"]);
    b.goto(&s.url("/"));
    greedy_once_listed(&b, "qwen", 40);
    let q = "Repeat exactly: Here is my thought process: two plus three is five. Here is my response: 5";
    let answer = ask(&b, q);
    let expected = api_message(&s, "qwen", &json!([{"role": "user", "content": q}]), 40);
    let reasoning = expected["reasoning"].as_str().expect("the API's answer has reasoning");
    assert_eq!(answer, expected["content"].as_str().unwrap());
    let details = format!("{LAST_ANSWER}.querySelector('details')");
    assert_eq!(b.js(&format!("return [{details}.hidden, {details}.open]")), json!([false, false]));
    let shown = b.js(&format!("return {details}.querySelector('.reasoning').textContent"));
    assert_eq!(shown, json!(reasoning));
    assert!(!b.text(".msg.assistant .content").contains("thought process"));
}
