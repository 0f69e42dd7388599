//! Frontend: tokenizers (HF directory or GGUF-built), chat templates, incremental detokenizing
//! and stop strings — the text side of a request, between the HTTP server and the engine.

mod chat_template;
mod error;
mod gguf_tokenizer;
mod py_format;
mod strftime;
mod tokenizer;
mod tokenizer_config;

pub use chat_template::ChatTemplate;
pub use error::{Error, Result};
pub use tokenizer::{Tokenizer, load_tokenizer};
