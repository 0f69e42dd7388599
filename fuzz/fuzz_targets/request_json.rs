//! The request body of every endpoint, as far as it is read before a model is needed: parse,
//! field checks, every request type the routes deserialize, the Responses and Messages bodies
//! translated into chat bodies (and those read as chat requests), tools and tool choice, the
//! structured-output fields, and the grammar they ask for compiled over a small byte vocabulary.
//! Any input must give Ok or an ApiError (a 4xx), never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use vllm_rs_engine::GrammarCompiler;
use vllm_rs_server::json_body::{RawObject, typed};
use vllm_rs_server::protocol::chat::ChatRequest;
use vllm_rs_server::protocol::completion::CompletionRequest;
use vllm_rs_server::protocol::fields::{Endpoint, check_fields};
use vllm_rs_server::protocol::messages::MessagesRequest;
use vllm_rs_server::protocol::pooling::{ClassificationRequest, EmbeddingRequest, RerankRequest, ScoreRequest};
use vllm_rs_server::protocol::responses::ResponsesRequest;
use vllm_rs_server::protocol::sampling_fields::SamplingFields;
use vllm_rs_server::protocol::tokenize::{DetokenizeRequest, TokenizeRequest};
use vllm_rs_server::reasoning::ReasoningFields;
use vllm_rs_server::structured::StructuredFields;

const ENDPOINTS: [Endpoint; 11] = [
    Endpoint::Completion,
    Endpoint::Chat,
    Endpoint::Tokenize,
    Endpoint::Detokenize,
    Endpoint::Embeddings,
    Endpoint::Classify,
    Endpoint::Score,
    Endpoint::Rerank,
    Endpoint::Messages,
    Endpoint::CountTokens,
    Endpoint::Responses,
];

/// 256 one-byte tokens and an end token: enough for any grammar to compile against.
fn compiler() -> &'static GrammarCompiler {
    static C: OnceLock<GrammarCompiler> = OnceLock::new();
    C.get_or_init(|| {
        let bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).chain([Vec::new()]).collect();
        GrammarCompiler::new(bytes, 257, &[256]).expect("a byte vocabulary")
    })
}

/// What the chat route reads before it needs the model: tools, structured outputs, reasoning.
fn chat_fields(obj: &RawObject) {
    let Ok(req) = typed::<ChatRequest>(obj) else { return };
    let tools = vllm_rs_server::tools::parse(req.tools.as_ref(), req.tool_choice.as_ref(), req.parallel_tool_calls, true);
    let _ = typed::<ReasoningFields>(obj).map(|r| r.budget(None, &[1, 2, 3]));
    let tool_spec = match tools {
        Ok(Some(t)) => t.grammar().ok().flatten(),
        _ => None,
    };
    let requested = typed::<StructuredFields>(obj).ok().and_then(|s| s.spec().ok().flatten()).map(|(s, _)| s);
    for spec in tool_spec.iter().chain(requested.iter()) {
        let _ = compiler().compile(spec);
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(obj) = RawObject::parse(data) else { return };
    for e in ENDPOINTS {
        let _ = check_fields(&obj, e);
    }
    let _ = typed::<CompletionRequest>(&obj);
    let _ = typed::<SamplingFields>(&obj);
    let _ = typed::<TokenizeRequest>(&obj);
    let _ = typed::<DetokenizeRequest>(&obj);
    let _ = typed::<EmbeddingRequest>(&obj);
    let _ = typed::<ScoreRequest>(&obj);
    let _ = typed::<RerankRequest>(&obj);
    let _ = typed::<ClassificationRequest>(&obj);
    chat_fields(&obj);
    // Messages and Responses bodies become chat bodies; those go through chat's reading too.
    let mut chats = Vec::new();
    if let Ok(m) = typed::<MessagesRequest>(&obj) {
        chats.extend([m.to_chat(false), m.to_chat(true)].into_iter().flatten());
    }
    if let Ok(r) = typed::<ResponsesRequest>(&obj)
        && let Ok(conversation) = r.input_messages()
    {
        chats.extend(r.to_chat(&conversation, Default::default()));
    }
    for chat in chats {
        let text = chat.to_string();
        if let Ok(obj) = RawObject::parse(text.as_bytes()) {
            let _ = check_fields(&obj, Endpoint::Chat);
            chat_fields(&obj);
        }
    }
});
