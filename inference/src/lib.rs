//! Using trained models: text generation with a KV cache ([`generate`]), drawing by flow matching
//! with classifier-free guidance ([`flow`]), and pictures of the results ([`render`]).

pub mod chart;
pub mod drawing;
pub mod flow;
pub mod generate;
pub mod render;
pub mod video;
