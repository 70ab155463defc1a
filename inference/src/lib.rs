//! Using trained models: text generation with a KV cache ([`generate`]).

pub mod generate;
