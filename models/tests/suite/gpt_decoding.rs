//! The GPT's incremental decoding and its training and evaluation steps, held in the model crate
//! itself (the generator and the learner use them from other crates, whose tests a mutation run of
//! this crate does not execute).
//!
//! Decoding with a key/value cache must give the logits of the whole sequence read at once, for
//! every position, however the sequence is fed: this holds the cache's bookkeeping, the cached
//! block's two residual adds, the position offset and grouped-query attention's repetition of key
//! heads (6 query heads over 2 key heads, a group of 3, so a repetition that adds where it should
//! multiply builds the wrong number of heads).

use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::train::{InferenceStep, TrainStep};
use nervus_models::attention::KvCache;
use nervus_models::compare::worst_rel;
use nervus_models::gpt::{Gpt, GptCache, GptConfig, LmBatch};

type TB = burn_ndarray::NdArray<f64>;
type AB = Autodiff<TB>;

use crate::{ids, rng_lock, vals};

const V: usize = 23;

/// GPT-2's layout, and the modern recipe with grouped-query attention; both with a larger init
/// than GPT-2's 0.02, so that attention is far from uniform and a wrong key or position shows.
fn configs() -> Vec<(&'static str, GptConfig)> {
    let base = GptConfig::new(V)
        .with_context(16)
        .with_d_model(48)
        .with_heads(6)
        .with_layers(2)
        .with_init_std(0.3);
    vec![
        ("gpt-2", base.clone()),
        (
            "modern, 6 heads over 2 key heads",
            base.modern().with_kv_heads(Some(2)),
        ),
    ]
}

fn model(config: &GptConfig, seed: u64) -> Gpt<TB> {
    TB::seed(&Default::default(), seed);
    config.init(&Default::default())
}

/// A 2-row batch of 11 tokens: rows differ, so a cache that mixed them up would show.
fn tokens() -> Vec<i64> {
    (0..22).map(|i| (i * 7 + i / 11 * 5) % V as i64).collect()
}

#[test]
fn cached_decoding_gives_the_logits_of_the_whole_sequence() {
    let _rng = rng_lock();
    let toks = tokens();
    let rows = 2;
    let t = toks.len() / rows;
    for (what, config) in configs() {
        let m = model(&config, 5);
        let whole = m.forward(ids::<TB>(&toks, rows)); // [2, 11, V]
        // Fed in pieces of 4, 1, 1, 3 and 2 positions.
        let mut cache: GptCache<TB> = Vec::new();
        let mut start = 0;
        for piece in [4, 1, 1, 3, 2] {
            let part: Vec<i64> = (0..rows)
                .flat_map(|r| toks[r * t + start..r * t + start + piece].to_vec())
                .collect();
            let got = m.forward_cached(ids::<TB>(&part, rows), &mut cache);
            let want = whole.clone().slice([0..rows, start..start + piece, 0..V]);
            let r = worst_rel(&vals(got), &vals(want));
            assert!(
                r < 1e-10,
                "{what}: positions {start}..{} differ by {r:e}",
                start + piece
            );
            start += piece;
            assert_eq!(cache.len(), config.layers, "{what}: one cache per block");
            for c in &cache {
                assert_eq!(
                    c.len(),
                    start,
                    "{what}: the cache holds every position seen"
                );
                assert!(!c.is_empty());
            }
        }
    }
}

#[test]
fn an_empty_cache_holds_nothing_and_a_cache_of_another_depth_is_restarted() {
    let _rng = rng_lock();
    let fresh: KvCache<TB> = KvCache::default();
    assert_eq!(fresh.len(), 0);
    assert!(fresh.is_empty());

    let (_, config) = configs().remove(1);
    let m = model(&config, 6);
    let toks = tokens();
    let whole = m.forward(ids::<TB>(&toks, 2));
    // A cache left over from a deeper model (3 blocks, each holding 5 positions) is not this
    // model's: decoding starts afresh at position 0.
    let mut stale: GptCache<TB> = Vec::new();
    let deeper = config
        .clone()
        .with_layers(3)
        .init::<TB>(&Default::default());
    deeper.forward_cached(ids::<TB>(&toks[..10], 2), &mut stale);
    assert_eq!(stale.len(), 3);
    let got = m.forward_cached(ids::<TB>(&toks, 2), &mut stale);
    assert_eq!(stale.len(), config.layers);
    assert!(stale.iter().all(|c| c.len() == 11));
    let r = worst_rel(&vals(got), &vals(whole));
    assert!(r < 1e-10, "restarted cache differs by {r:e}");
}

/// The learner weights each batch's mean loss by how many predictions it averages: batch × time
/// (3 × 5 here, so neither a sum nor a quotient of the two passes), for training and evaluation.
#[test]
fn steps_report_the_models_loss_over_batch_times_time_predictions() {
    let _rng = rng_lock();
    let (b, t) = (3, 5);
    let x: Vec<i64> = (0..(b * t) as i64)
        .map(|i| (i * 5 + 1) % V as i64)
        .collect();
    let y: Vec<i64> = x.iter().map(|v| (v * 3 + 2) % V as i64).collect();
    let (_, config) = configs().remove(0);

    AB::seed(&Default::default(), 7);
    let m: Gpt<AB> = config.init(&Default::default());
    let want = m.loss(ids(&x, b), ids(&y, b)).into_scalar();
    let out = TrainStep::step(
        &m,
        LmBatch {
            inputs: ids(&x, b),
            targets: ids(&y, b),
            doc_mask: None,
        },
    );
    assert_eq!(out.item.count, b * t);
    let got = out.item.loss.into_scalar();
    assert!((got - want).abs() <= 1e-12 * want.abs(), "{got} vs {want}");

    let inner: Gpt<TB> = m.valid();
    let out = InferenceStep::step(
        &inner,
        LmBatch {
            inputs: ids(&x, b),
            targets: ids(&y, b),
            doc_mask: None,
        },
    );
    assert_eq!(out.count, b * t);
    let got = out.loss.into_scalar();
    assert!((got - want).abs() <= 1e-12 * want.abs(), "{got} vs {want}");
}
