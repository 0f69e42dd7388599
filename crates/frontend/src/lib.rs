//! Frontend: tokenizers (HF directory or GGUF-built), chat templates, incremental detokenizing,
//! stop strings and generation defaults — the text side of a request, between the HTTP server
//! and the engine.

mod chat_template;
mod detokenizer;
mod error;
mod generation_config;
mod gguf_tokenizer;
mod output_processor;
mod py_format;
mod stop;
mod strftime;
mod tokenizer;
mod tokenizer_config;

pub use chat_template::{ChatTemplate, py_json_dumps, py_json_dumps_with};
pub use detokenizer::IncrementalDetokenizer;
pub use error::{Error, Result};
pub use generation_config::GenerationConfig;
pub use output_processor::{OutputDelta, OutputOptions, OutputProcessor, StopReason, token_text};
pub use py_format::py_str_repr;
pub use stop::{StopOutcome, StopStrings};
pub use tokenizer::{Tokenizer, load_tokenizer};
