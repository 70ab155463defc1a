//! Text generation: predict, draw, append, ask again.
//!
//! The first call reads the whole prompt and fills a KV cache; every later token costs one row of
//! attention per layer instead of recomputing every earlier position. Once the sequence outgrows
//! the model's context the window slides: the last `context` tokens are read afresh (the cache's
//! positions would all shift by one, and learned position embeddings cannot be shifted in place),
//! which is exactly what an uncached generator would compute.

use burn::prelude::*;
use nervus_datasets::rng::Rng;
use nervus_models::gpt::{Gpt, GptCache};

/// How to draw each token.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleOptions {
    /// Tokens to generate.
    pub length: usize,
    /// Softmax temperature; 0 means greedy (always the most likely token).
    pub temperature: f64,
    /// Keep only the `k` most likely tokens before drawing.
    pub top_k: Option<usize>,
}

/// Draws a token id from `logits` (one row, length V).
pub fn sample(logits: &[f32], opts: &SampleOptions, rng: &mut Rng) -> u32 {
    let argmax = || {
        logits
            .iter()
            .enumerate()
            .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
                if v > best.1 { (i, v) } else { best }
            })
            .0 as u32
    };
    if opts.temperature <= 0.0 {
        return argmax();
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if let Some(k) = opts.top_k {
        order.truncate(k.max(1));
    }
    let top = logits[order[0]] as f64;
    let weights: Vec<f64> = order
        .iter()
        .map(|&i| ((logits[i] as f64 - top) / opts.temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    if !total.is_finite() || total <= 0.0 {
        return argmax();
    }
    let mut r = rng.uniform() * total;
    for (&i, w) in order.iter().zip(&weights) {
        if r < *w {
            return i as u32;
        }
        r -= w;
    }
    order[order.len() - 1] as u32
}

fn last_row<B: Backend>(logits: Tensor<B, 3>) -> Vec<f32> {
    let [_, t, v] = logits.dims();
    logits
        .slice([0..1, t - 1..t, 0..v])
        .into_data()
        .iter::<f32>()
        .collect()
}

fn ids<B: Backend>(tokens: &[u32], device: &B::Device) -> Tensor<B, 2, Int> {
    let v: Vec<i64> = tokens.iter().map(|&t| t as i64).collect();
    Tensor::from_data(TensorData::new(v, [1, tokens.len()]), device)
}

/// Generates `opts.length` tokens after `prompt` (which must not be empty) and returns them (the
/// prompt not included).
pub fn generate<B: Backend>(
    model: &Gpt<B>,
    prompt: &[u32],
    opts: &SampleOptions,
    rng: &mut Rng,
) -> Vec<u32> {
    generate_with(model, prompt, opts, rng, |_| true)
}

/// A model that reads tokens after the ones it holds and gives the next token's logits: the
/// Burn [`Gpt`] with its KV cache ([`BurnDecoder`]), or the engine's CPU decoder.
pub trait Decoder {
    /// Longest sequence the model reads.
    fn context(&self) -> usize;
    /// Positions held.
    fn held(&self) -> usize;
    /// Forgets every position held.
    fn clear(&mut self);
    /// Reads `ids` after the positions held (`held() + ids.len() ≤ context()`) and returns the
    /// logits for the token after the last of them `[V]`.
    fn feed(&mut self, ids: &[u32]) -> Vec<f32>;
}

/// A [`Gpt`] and its KV cache.
pub struct BurnDecoder<'a, B: Backend> {
    pub model: &'a Gpt<B>,
    cache: GptCache<B>,
}

impl<'a, B: Backend> BurnDecoder<'a, B> {
    pub fn new(model: &'a Gpt<B>) -> Self {
        Self {
            model,
            cache: Vec::new(),
        }
    }
}

impl<B: Backend> Decoder for BurnDecoder<'_, B> {
    fn context(&self) -> usize {
        self.model.context()
    }
    fn held(&self) -> usize {
        self.cache.first().map_or(0, |c| c.len())
    }
    fn clear(&mut self) {
        self.cache.clear();
    }
    fn feed(&mut self, tokens: &[u32]) -> Vec<f32> {
        let device = self.model.wte.weight.device();
        last_row(
            self.model
                .forward_cached(ids(tokens, &device), &mut self.cache),
        )
    }
}

/// [`generate`], handing each token to `on_token` as soon as it is drawn; generation stops early
/// when `on_token` returns false (an end-of-turn token, a reader who has seen enough). Returns the
/// tokens drawn, the one that stopped it included.
pub fn generate_with<B: Backend>(
    model: &Gpt<B>,
    prompt: &[u32],
    opts: &SampleOptions,
    rng: &mut Rng,
    on_token: impl FnMut(u32) -> bool,
) -> Vec<u32> {
    stream(&mut BurnDecoder::new(model), prompt, opts, rng, on_token)
}

/// [`generate_with`] for any [`Decoder`] (which it starts afresh).
pub fn stream<D: Decoder>(
    decoder: &mut D,
    prompt: &[u32],
    opts: &SampleOptions,
    rng: &mut Rng,
    mut on_token: impl FnMut(u32) -> bool,
) -> Vec<u32> {
    assert!(
        !prompt.is_empty(),
        "generation needs at least one prompt token"
    );
    let context = decoder.context();
    let mut tokens = prompt.to_vec();
    let window = |t: &[u32]| t[t.len().saturating_sub(context)..].to_vec();
    decoder.clear();
    let mut logits = decoder.feed(&window(&tokens));
    let mut out = Vec::with_capacity(opts.length);
    for _ in 0..opts.length {
        let next = sample(&logits, opts, rng);
        out.push(next);
        tokens.push(next);
        if !on_token(next) || out.len() == opts.length {
            break;
        }
        logits = if decoder.held() < context {
            decoder.feed(&[next])
        } else {
            decoder.clear();
            decoder.feed(&window(&tokens))
        };
    }
    out
}

/// Tokens shown as text while they arrive: a token may end inside a character (byte-level BPE), so
/// text is handed on only up to the last whole one, and the rest when the stream ends.
#[derive(Default)]
pub struct TextStream {
    ids: Vec<u32>,
    shown: usize,
}

impl TextStream {
    /// Adds `id` and hands `on_text` whatever whole characters it completes.
    pub fn push(&mut self, id: u32, decode: impl Fn(&[u32]) -> String, on_text: impl FnMut(&str)) {
        self.ids.push(id);
        let text = decode(&self.ids);
        if !text.ends_with('\u{FFFD}') {
            self.flush(&text, on_text);
        }
    }

    /// Hands on what is left and returns the whole text.
    pub fn finish(
        mut self,
        decode: impl Fn(&[u32]) -> String,
        on_text: impl FnMut(&str),
    ) -> String {
        let text = decode(&self.ids);
        self.flush(&text, on_text);
        text
    }

    fn flush(&mut self, text: &str, mut on_text: impl FnMut(&str)) {
        if let Some(new) = text.get(self.shown..)
            && !new.is_empty()
        {
            on_text(new);
            self.shown = text.len();
        }
    }
}

/// The logits an uncached model gives for the next token after `tokens` (the last `context`
/// of them): the reference [`generate`]'s cache is tested against.
pub fn next_logits_uncached<B: Backend>(model: &Gpt<B>, tokens: &[u32]) -> Vec<f32> {
    let context = model.context();
    let device = model.wte.weight.device();
    let w = &tokens[tokens.len().saturating_sub(context)..];
    last_row(model.forward(ids(w, &device)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nervus_models::gpt::GptConfig;

    type TB = burn_ndarray::NdArray<f64>;

    fn model() -> Gpt<TB> {
        TB::seed(&Default::default(), 5);
        // Larger init than GPT-2's so the logits are far from uniform and a wrong position or a
        // stale cache entry would show.
        GptConfig::new(11)
            .with_context(8)
            .with_layers(2)
            .with_heads(2)
            .with_d_model(16)
            .with_init_std(0.3)
            .init(&Default::default())
    }

    #[test]
    fn cached_and_uncached_give_the_same_logits_inside_and_beyond_the_context() {
        let m = model();
        let dev = Default::default();
        let tokens: Vec<u32> = (0..14).map(|i| (i * 7 % 11) as u32).collect();
        // Feed one token at a time through the cache, sliding past the context as generate does.
        let mut cache: GptCache<TB> = Vec::new();
        let mut worst = 0.0f64;
        for n in 1..=tokens.len() {
            let held = cache.first().map_or(0, |c| c.len());
            let cached = if n == 1 || held >= 8 {
                cache.clear();
                last_row(m.forward_cached(ids(&tokens[n.saturating_sub(8)..n], &dev), &mut cache))
            } else {
                last_row(m.forward_cached(ids(&tokens[n - 1..n], &dev), &mut cache))
            };
            let full = next_logits_uncached(&m, &tokens[..n]);
            let scale = full.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
            for (a, b) in cached.iter().zip(&full) {
                assert!(a.is_finite() && b.is_finite());
                worst = worst.max((*a as f64 - *b as f64).abs() / scale);
            }
        }
        // f64 model read back as f32: equal to f32 rounding of the logits.
        assert!(worst < 1e-6, "worst relative difference {worst:e}");
    }

    #[test]
    fn greedy_generation_is_the_argmax_chain_of_the_uncached_model() {
        let m = model();
        let opts = SampleOptions {
            length: 12,
            temperature: 0.0,
            top_k: None,
        };
        let prompt = [3u32, 4];
        let got = generate(&m, &prompt, &opts, &mut Rng::new(0));
        let mut tokens = prompt.to_vec();
        for &g in &got {
            let l = next_logits_uncached(&m, &tokens);
            let best = l
                .iter()
                .enumerate()
                .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
                .0;
            assert_eq!(g as usize, best);
            tokens.push(g);
        }
    }

    #[test]
    fn top_k_and_temperature() {
        let logits = [0.0f32, 5.0, 1.0, 4.9];
        let mut rng = Rng::new(1);
        let k2 = SampleOptions {
            length: 1,
            temperature: 1.0,
            top_k: Some(2),
        };
        for _ in 0..200 {
            let s = sample(&logits, &k2, &mut rng);
            assert!(
                s == 1 || s == 3,
                "top-2 keeps only the two largest: got {s}"
            );
        }
        let cold = SampleOptions {
            temperature: 0.01,
            top_k: None,
            ..k2
        };
        assert!((0..50).all(|_| sample(&logits, &cold, &mut rng) == 1));
    }
}
