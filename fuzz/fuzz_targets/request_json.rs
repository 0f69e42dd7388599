//! The request body of every endpoint: parse, field checks, and every request type the routes
//! deserialize. Any input must give Ok or an ApiError (a 4xx), never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vllm_rs_server::json_body::{RawObject, typed};
use vllm_rs_server::protocol::chat::ChatRequest;
use vllm_rs_server::protocol::completion::CompletionRequest;
use vllm_rs_server::protocol::fields::{Endpoint, check_fields};
use vllm_rs_server::protocol::sampling_fields::SamplingFields;
use vllm_rs_server::protocol::tokenize::{DetokenizeRequest, TokenizeRequest};

fuzz_target!(|data: &[u8]| {
    let Ok(obj) = RawObject::parse(data) else { return };
    for e in [Endpoint::Completion, Endpoint::Chat, Endpoint::Tokenize, Endpoint::Detokenize] {
        let _ = check_fields(&obj, e);
    }
    let _ = typed::<CompletionRequest>(&obj);
    let _ = typed::<ChatRequest>(&obj);
    let _ = typed::<SamplingFields>(&obj);
    let _ = typed::<TokenizeRequest>(&obj);
    let _ = typed::<DetokenizeRequest>(&obj);
});
