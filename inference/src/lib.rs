//! Using trained models: text generation with a KV cache ([`generate`]), drawing by flow matching
//! with classifier-free guidance ([`flow`]), pictures of the results ([`render`]), and passages
//! found in a crawled corpus for a reader's prompt ([`retrieve`]), and a chat model answering from
//! them ([`ask`], through its own chat template: [`chat`]).

pub mod ask;
pub mod chart;
pub mod chat;
pub mod drawing;
pub mod engine;
pub mod flow;
pub mod generate;
pub mod render;
pub mod retrieve;
pub mod tui;
pub mod video;
