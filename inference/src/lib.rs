//! Using trained models: text generation with a KV cache ([`generate`]), drawing by flow matching
//! with classifier-free guidance ([`flow`]), pictures of the results ([`render`]), and passages
//! found in a crawled corpus for a reader's prompt ([`retrieve`]).

pub mod chart;
pub mod drawing;
pub mod flow;
pub mod generate;
pub mod render;
pub mod retrieve;
pub mod video;
