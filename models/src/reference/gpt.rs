//! The whole GPT-2: token and position embeddings, a stack of blocks, a final LayerNorm and an
//! untied, bias-free output head, scored by the mean cross-entropy over all `B·T` positions.
//!
//! The backward pass is the forward pass read backwards: `dlogits = (p − onehot)/(B·T)`, through
//! the head (`dW = xᵀ·dlogits`, `dx = dlogits·Wᵀ`), `ln_f`, each block from the last to the first,
//! and finally into the two tables. The input was `wte[id] + wpe[t]`, a sum, so both tables receive
//! the same gradient rows: `wte`'s added by token id, `wpe`'s by position (each position is used
//! once per sequence, so its row collects B contributions).

use super::block::{self, BlockCache, BlockGrads, BlockParams, LN_EPS};
use super::layer_norm::{self, LayerNormCache};
use super::{Mat, embedding, softmax_xent};

/// The weights of a GPT-2, in `[in, out]` layout.
#[derive(Clone, Debug)]
pub struct GptParams {
    /// Token embeddings `[V, C]`.
    pub wte: Mat,
    /// Position embeddings `[P, C]`, `P ≥ T`.
    pub wpe: Mat,
    pub blocks: Vec<BlockParams>,
    pub ln_f_g: Vec<f64>,
    pub ln_f_b: Vec<f64>,
    /// The output head `[C, V]`, without bias.
    pub lm_head: Mat,
}

/// Gradients of the loss, shaped as [`GptParams`].
#[derive(Clone, Debug)]
pub struct GptGrads {
    pub wte: Mat,
    pub wpe: Mat,
    pub blocks: Vec<BlockGrads>,
    pub ln_f_g: Vec<f64>,
    pub ln_f_b: Vec<f64>,
    pub lm_head: Mat,
}

/// What the backward pass needs from the forward pass.
#[derive(Clone, Debug)]
pub struct GptCache {
    pub ids: Vec<usize>,
    pub targets: Vec<usize>,
    /// The position of each row: `row mod T`.
    pub positions: Vec<usize>,
    pub blocks: Vec<BlockCache>,
    pub ln_f: LayerNormCache,
    /// `ln_f`'s output, the input of the head.
    pub ln_f_out: Mat,
    /// Softmax of the logits, `[B·T, V]`.
    pub probs: Mat,
}

/// The mean cross-entropy of the next-token predictions for `ids` (`B·T` of them, batch-major)
/// against `targets` (the same length), and the cache for [`backward`].
pub fn forward(
    p: &GptParams,
    ids: &[usize],
    targets: &[usize],
    batch: usize,
    seq: usize,
    heads: usize,
) -> (f64, GptCache) {
    assert_eq!(ids.len(), batch * seq, "gpt: ids must be B·T long");
    assert_eq!(targets.len(), batch * seq, "gpt: targets must be B·T long");
    assert!(
        seq <= p.wpe.rows,
        "gpt: {seq} positions, wpe has {}",
        p.wpe.rows
    );
    let positions: Vec<usize> = (0..batch * seq).map(|r| r % seq).collect();
    let tok = embedding::forward(&p.wte, ids);
    let pos = embedding::forward(&p.wpe, &positions);
    let mut x = Mat::new(
        tok.rows,
        tok.cols,
        tok.data.iter().zip(&pos.data).map(|(a, b)| a + b).collect(),
    );
    let mut blocks = Vec::with_capacity(p.blocks.len());
    for bp in &p.blocks {
        let (y, cache) = block::forward(&x, bp, batch, seq, heads);
        blocks.push(cache);
        x = y;
    }
    let (ln_f_out, ln_f) = layer_norm::forward(&x, &p.ln_f_g, &p.ln_f_b, LN_EPS);
    let logits = ln_f_out.matmul(&p.lm_head);
    let (loss, probs) = softmax_xent::forward(&logits, targets);
    let cache = GptCache {
        ids: ids.to_vec(),
        targets: targets.to_vec(),
        positions,
        blocks,
        ln_f,
        ln_f_out,
        probs,
    };
    (loss, cache)
}

/// The gradient of the loss with respect to every weight.
pub fn backward(p: &GptParams, cache: &GptCache) -> GptGrads {
    let dlogits = softmax_xent::backward(&cache.probs, &cache.targets, 1.0);
    let lm_head = cache.ln_f_out.matmul_at_b(&dlogits);
    let ln_f = layer_norm::backward(&cache.ln_f, &p.ln_f_g, &dlogits.matmul_a_bt(&p.lm_head));
    let mut dx = ln_f.dx;
    let mut blocks = Vec::with_capacity(p.blocks.len());
    for (bp, bc) in p.blocks.iter().zip(&cache.blocks).rev() {
        let g = block::backward(bc, bp, &dx);
        dx = g.dx.clone();
        blocks.push(g);
    }
    blocks.reverse();
    GptGrads {
        wte: embedding::backward(&cache.ids, &dx, p.wte.rows),
        wpe: embedding::backward(&cache.positions, &dx, p.wpe.rows),
        blocks,
        ln_f_g: ln_f.dgamma,
        ln_f_b: ln_f.dbeta,
        lm_head,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testing::{assert_close, numerical_grad, randn, worst_rel};

    const V: usize = 7;
    const P: usize = 6;
    const T: usize = 5;
    const B: usize = 2;
    const C: usize = 8;
    const H: usize = 2;
    const LAYERS: usize = 2;
    /// Token 0 never appears, so its `wte` row must get exactly nothing; position 5 ≥ T likewise.
    pub(crate) const IDS: [usize; B * T] = [3, 1, 4, 1, 5, 2, 6, 5, 3, 5];
    pub(crate) const TARGETS: [usize; B * T] = [1, 4, 1, 5, 2, 6, 5, 3, 5, 0];

    pub(crate) fn point() -> GptParams {
        GptParams {
            wte: Mat::new(V, C, randn(110, V * C, 2.0)),
            wpe: Mat::new(P, C, randn(111, P * C, 1.0)),
            blocks: (0..LAYERS)
                .map(|l| block::tests::params(C, 120 + 20 * l as u64))
                .collect(),
            ln_f_g: randn(112, C, 0.5).iter().map(|v| 1.0 + v).collect(),
            ln_f_b: randn(113, C, 0.5),
            lm_head: Mat::new(C, V, randn(114, C * V, 0.5)),
        }
    }

    fn loss(p: &GptParams) -> f64 {
        forward(p, &IDS, &TARGETS, B, T, H).0
    }

    fn numeric(p: &GptParams, field: impl Fn(&mut GptParams) -> &mut [f64]) -> Vec<f64> {
        let mut q = p.clone();
        let start = field(&mut q).to_vec();
        numerical_grad(&start, 1e-3, |v| {
            field(&mut q).copy_from_slice(v);
            loss(&q)
        })
    }

    #[test]
    fn gpt_backward_matches_numerical_for_every_weight() {
        let p = point();
        let (_, cache) = forward(&p, &IDS, &TARGETS, B, T, H);
        let g = backward(&p, &cache);
        let kb = |b: &[f64]| -> Vec<f64> { b[..C].iter().chain(&b[2 * C..]).copied().collect() };
        let mut checks: Vec<(String, Vec<f64>, Vec<f64>)> = vec![
            (
                "wte".into(),
                g.wte.data.clone(),
                numeric(&p, |p| &mut p.wte.data[..]),
            ),
            (
                "wpe".into(),
                g.wpe.data.clone(),
                numeric(&p, |p| &mut p.wpe.data[..]),
            ),
            (
                "ln_f.g".into(),
                g.ln_f_g.clone(),
                numeric(&p, |p| &mut p.ln_f_g[..]),
            ),
            (
                "ln_f.b".into(),
                g.ln_f_b.clone(),
                numeric(&p, |p| &mut p.ln_f_b[..]),
            ),
            (
                "lm_head".into(),
                g.lm_head.data.clone(),
                numeric(&p, |p| &mut p.lm_head.data[..]),
            ),
        ];
        for (l, gb) in g.blocks.iter().enumerate() {
            let f = |field: fn(&mut BlockParams) -> &mut [f64]| {
                numeric(&p, move |p: &mut GptParams| field(&mut p.blocks[l]))
            };
            let n = |s: &str| format!("h.{l}.{s}");
            checks.extend([
                (n("ln_1.g"), gb.ln_1_g.clone(), f(|b| &mut b.ln_1_g[..])),
                (n("ln_1.b"), gb.ln_1_b.clone(), f(|b| &mut b.ln_1_b[..])),
                (
                    n("attn.c_attn.w"),
                    gb.attn.c_attn_w.data.clone(),
                    f(|b| &mut b.attn.c_attn_w.data[..]),
                ),
                // The key columns of the bias get zero in theory; see attention.rs.
                (
                    n("attn.c_attn.b (q, v)"),
                    kb(&gb.attn.c_attn_b),
                    kb(&f(|b| &mut b.attn.c_attn_b[..])),
                ),
                (
                    n("attn.c_proj.w"),
                    gb.attn.c_proj_w.data.clone(),
                    f(|b| &mut b.attn.c_proj_w.data[..]),
                ),
                (
                    n("attn.c_proj.b"),
                    gb.attn.c_proj_b.clone(),
                    f(|b| &mut b.attn.c_proj_b[..]),
                ),
                (n("ln_2.g"), gb.ln_2_g.clone(), f(|b| &mut b.ln_2_g[..])),
                (n("ln_2.b"), gb.ln_2_b.clone(), f(|b| &mut b.ln_2_b[..])),
                (
                    n("mlp.c_fc.w"),
                    gb.mlp_c_fc_w.data.clone(),
                    f(|b| &mut b.mlp_c_fc_w.data[..]),
                ),
                (
                    n("mlp.c_fc.b"),
                    gb.mlp_c_fc_b.clone(),
                    f(|b| &mut b.mlp_c_fc_b[..]),
                ),
                (
                    n("mlp.c_proj.w"),
                    gb.mlp_c_proj_w.data.clone(),
                    f(|b| &mut b.mlp_c_proj_w.data[..]),
                ),
                (
                    n("mlp.c_proj.b"),
                    gb.mlp_c_proj_b.clone(),
                    f(|b| &mut b.mlp_c_proj_b[..]),
                ),
            ]);
            let kbias = gb.attn.c_attn_b[C..2 * C]
                .iter()
                .fold(0.0f64, |m, v| m.max(v.abs()));
            let scale = gb.attn.c_attn_b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            assert!(
                kbias < 1e-12 * scale,
                "h.{l} key bias {kbias:e} of {scale:e}"
            );
        }
        // A composition of the layers checked beside this file, through a smooth loss: the
        // centred difference's O(h²) truncation measured 4.7e-7 of the gradient at worst
        // (h.0.attn.c_attn.w, printed), so 1e-5 is a ceiling with room and still far below any
        // missing factor.
        for (name, a, n) in &checks {
            println!(
                "gpt {name}: worst relative difference {:.2e}",
                worst_rel(a, n)
            );
            assert_close(name, a, n, 1e-5);
        }
        // Rows nothing selected get nothing, exactly: token 0 and position 5.
        assert!(g.wte.row(0).iter().all(|v| *v == 0.0));
        assert!(g.wpe.row(5).iter().all(|v| *v == 0.0));
    }

    #[test]
    fn gpt_loss_is_the_mean_cross_entropy() {
        // Zero head: uniform predictions, so the loss is ln V whatever the rest computes.
        let mut p = point();
        p.lm_head = Mat::zeros(C, V);
        let l = loss(&p);
        assert!((l - (V as f64).ln()).abs() < 1e-14, "{l}");
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::gpt::GptConfig;
    use crate::reference::block::burn_parity::{
        compare, named as block_named, named_grads as block_grads,
    };
    use crate::testing::{AB, f32_exact, grads_by_path, load};
    use burn::prelude::*;

    #[test]
    fn gpt_loss_and_every_gradient_match_burn_autodiff() {
        let (v, p_ctx, t, b, c, h, layers) = (7, 6, 5, 2, 8, 2, 2);
        let mut p = tests::point();
        let m = |m: &Mat| Mat::new(m.rows, m.cols, f32_exact(m.data.clone()));
        p.wte = m(&p.wte);
        p.wpe = m(&p.wpe);
        p.lm_head = m(&p.lm_head);
        p.ln_f_g = f32_exact(p.ln_f_g.clone());
        p.ln_f_b = f32_exact(p.ln_f_b.clone());
        p.blocks = p
            .blocks
            .iter()
            .map(|blk| {
                let r = |v: &Vec<f64>| f32_exact(v.clone());
                BlockParams {
                    ln_1_g: r(&blk.ln_1_g),
                    ln_1_b: r(&blk.ln_1_b),
                    attn: super::super::attention::AttentionParams {
                        c_attn_w: m(&blk.attn.c_attn_w),
                        c_attn_b: r(&blk.attn.c_attn_b),
                        c_proj_w: m(&blk.attn.c_proj_w),
                        c_proj_b: r(&blk.attn.c_proj_b),
                    },
                    ln_2_g: r(&blk.ln_2_g),
                    ln_2_b: r(&blk.ln_2_b),
                    mlp_c_fc_w: m(&blk.mlp_c_fc_w),
                    mlp_c_fc_b: r(&blk.mlp_c_fc_b),
                    mlp_c_proj_w: m(&blk.mlp_c_proj_w),
                    mlp_c_proj_b: r(&blk.mlp_c_proj_b),
                }
            })
            .collect();
        let mut named: Vec<(String, Vec<usize>, Vec<f64>)> = vec![
            ("wte.weight".into(), vec![v, c], p.wte.data.clone()),
            ("wpe.weight".into(), vec![p_ctx, c], p.wpe.data.clone()),
            ("ln_f.gamma".into(), vec![c], p.ln_f_g.clone()),
            ("ln_f.beta".into(), vec![c], p.ln_f_b.clone()),
            ("lm_head.weight".into(), vec![c, v], p.lm_head.data.clone()),
        ];
        for (i, blk) in p.blocks.iter().enumerate() {
            named.extend(block_named(blk, &format!("h.{i}.")));
        }
        let refs: Vec<(&str, &[usize], &[f64])> = named
            .iter()
            .map(|(n, s, d)| (n.as_str(), &s[..], &d[..]))
            .collect();
        let model = load(
            GptConfig::new(v)
                .with_context(p_ctx)
                .with_layers(layers)
                .with_heads(h)
                .with_d_model(c)
                .init::<AB>(&Default::default()),
            &refs,
        );
        let ids = |v: &[usize]| {
            Tensor::<AB, 2, Int>::from_data(
                TensorData::new(v.iter().map(|&i| i as i64).collect(), [b, t]),
                &Default::default(),
            )
        };
        let loss = model.loss(ids(&tests::IDS), ids(&tests::TARGETS));
        let (want_loss, cache) = forward(&p, &tests::IDS, &tests::TARGETS, b, t, h);
        let got_loss = loss.clone().into_scalar();
        assert!(
            (got_loss - want_loss).abs() <= 1e-12 * want_loss,
            "loss {got_loss} vs {want_loss}"
        );
        let grads = loss.backward();
        let g = backward(&p, &cache);
        let mut want: Vec<(String, Vec<f64>)> = vec![
            ("wte.weight".into(), g.wte.data.clone()),
            ("wpe.weight".into(), g.wpe.data.clone()),
            ("ln_f.gamma".into(), g.ln_f_g.clone()),
            ("ln_f.beta".into(), g.ln_f_b.clone()),
            ("lm_head.weight".into(), g.lm_head.data.clone()),
        ];
        for (i, bg) in g.blocks.iter().enumerate() {
            want.extend(block_grads(bg, &format!("h.{i}.")));
        }
        let got = grads_by_path(&model, &grads);
        assert_eq!(got.len(), want.len(), "every parameter is compared");
        // f64 on both sides through two blocks: ~1e-14; 1e-10 is far below any real defect.
        compare(&got, &want, 1e-10);
    }
}
