//! The whole GPT with the modern recipe (`GptConfig::modern`): token embeddings only (positions
//! come from RoPE inside attention), blocks of `x + attn(rms(x))` then `x + swiglu(rms(x))`, a
//! final RMSNorm, an untied head, logits soft-capped to `c·tanh(z/c)`, and the mean cross-entropy.
//! No biases anywhere.
//!
//! The backward pass reads the forward pass backwards through the pieces that have their own
//! twins: the cross-entropy's `(p − onehot)/(B·T)`, the soft-cap's slope `1 − (y/c)²`, the head,
//! the final norm, then each block from the last: a residual sends its blame both ways, so
//! `dx = dx_out + (branch's dx)` around each of the two branches, and at the bottom the
//! embedding's rows are added by token id.

use super::block::add;
use super::modern_attention::{
    self, ModernAttentionCache, ModernAttentionParams, ModernAttentionShape,
};
use super::rms_norm::{self, RmsNormCache};
use super::swiglu::{self, SwigluCache, SwigluParams};
use super::{Mat, embedding, softcap, softmax_xent};

/// One block's weights (the attention's biases stay zero: the recipe has none).
#[derive(Clone, Debug)]
pub struct ModernBlockParams {
    pub ln_1: Vec<f64>,
    pub attn: ModernAttentionParams,
    pub ln_2: Vec<f64>,
    pub mlp: SwigluParams,
}

/// The model's weights, `[in, out]` layout.
#[derive(Clone, Debug)]
pub struct ModernGptParams {
    /// `[V, C]`.
    pub wte: Mat,
    pub blocks: Vec<ModernBlockParams>,
    pub ln_f: Vec<f64>,
    /// `[C, V]`.
    pub lm_head: Mat,
}

/// Sizes and switches: the attention's (heads, key/value heads, RoPE base, QK-norm's epsilon,
/// documents), the norms' epsilon and the soft-cap.
#[derive(Clone, Debug)]
pub struct ModernGptShape {
    pub attn: ModernAttentionShape,
    pub norm_eps: f64,
    pub softcap: Option<f64>,
}

/// Gradients, shaped as [`ModernGptParams`].
#[derive(Clone, Debug)]
pub struct ModernGptGrads {
    pub wte: Mat,
    pub blocks: Vec<ModernBlockParams>,
    pub ln_f: Vec<f64>,
    pub lm_head: Mat,
}

struct BlockCache {
    ln_1: RmsNormCache,
    attn: ModernAttentionCache,
    ln_2: RmsNormCache,
    mlp: SwigluCache,
}

/// What the backward pass needs.
pub struct ModernGptCache {
    ids: Vec<usize>,
    targets: Vec<usize>,
    blocks: Vec<BlockCache>,
    ln_f: RmsNormCache,
    ln_f_out: Mat,
    /// The soft-capped logits (the soft-cap's backward reads its slope from them).
    capped: Mat,
    probs: Mat,
}

/// The mean cross-entropy of `targets` given `ids` (`B·T` each, batch-major), and the cache.
pub fn forward(
    p: &ModernGptParams,
    s: &ModernGptShape,
    ids: &[usize],
    targets: &[usize],
) -> (f64, ModernGptCache) {
    let rows = s.attn.batch * s.attn.seq;
    assert!(
        ids.len() == rows && targets.len() == rows,
        "modern_gpt: ids and targets must be B·T long"
    );
    let mut x = embedding::forward(&p.wte, ids);
    let mut blocks = Vec::with_capacity(p.blocks.len());
    for bp in &p.blocks {
        let (h1, ln_1) = rms_norm::forward(&x, &bp.ln_1, s.norm_eps);
        let (a, attn) = modern_attention::forward(&h1, &bp.attn, &s.attn);
        let x1 = add(&x, &a);
        let (h2, ln_2) = rms_norm::forward(&x1, &bp.ln_2, s.norm_eps);
        let (m, mlp) = swiglu::forward(&h2, &bp.mlp);
        x = add(&x1, &m);
        blocks.push(BlockCache {
            ln_1,
            attn,
            ln_2,
            mlp,
        });
    }
    let (ln_f_out, ln_f) = rms_norm::forward(&x, &p.ln_f, s.norm_eps);
    let logits = ln_f_out.matmul(&p.lm_head);
    let capped = match s.softcap {
        Some(c) => softcap::forward(&logits, c),
        None => logits,
    };
    let (loss, probs) = softmax_xent::forward(&capped, targets);
    let cache = ModernGptCache {
        ids: ids.to_vec(),
        targets: targets.to_vec(),
        blocks,
        ln_f,
        ln_f_out,
        capped,
        probs,
    };
    (loss, cache)
}

/// The gradient of the loss with respect to every weight.
pub fn backward(p: &ModernGptParams, s: &ModernGptShape, cache: &ModernGptCache) -> ModernGptGrads {
    let dcapped = softmax_xent::backward(&cache.probs, &cache.targets, 1.0);
    let dlogits = match s.softcap {
        Some(c) => softcap::backward(&cache.capped, c, &dcapped),
        None => dcapped,
    };
    let lm_head = cache.ln_f_out.matmul_at_b(&dlogits);
    let gf = rms_norm::backward(&cache.ln_f, &p.ln_f, &dlogits.matmul_a_bt(&p.lm_head));
    let mut dx = gf.dx;
    let mut blocks = Vec::with_capacity(p.blocks.len());
    for (bp, bc) in p.blocks.iter().zip(&cache.blocks).rev() {
        let gm = swiglu::backward(&bc.mlp, &bp.mlp, &dx);
        let g2 = rms_norm::backward(&bc.ln_2, &bp.ln_2, &gm.dx);
        let dx1 = add(&dx, &g2.dx);
        let ga = modern_attention::backward(&bc.attn, &bp.attn, &s.attn, &dx1);
        let g1 = rms_norm::backward(&bc.ln_1, &bp.ln_1, &ga.dx);
        dx = add(&dx1, &g1.dx);
        blocks.push(ModernBlockParams {
            ln_1: g1.dgamma,
            attn: ModernAttentionParams {
                c_attn_w: ga.c_attn_w,
                c_attn_b: ga.c_attn_b,
                c_proj_w: ga.c_proj_w,
                c_proj_b: ga.c_proj_b,
                q_gain: ga.q_gain,
                k_gain: ga.k_gain,
            },
            ln_2: g2.dgamma,
            mlp: SwigluParams {
                w1: gm.w1,
                w3: gm.w3,
                w2: gm.w2,
            },
        });
    }
    blocks.reverse();
    ModernGptGrads {
        wte: embedding::backward(&cache.ids, &dx, p.wte.rows),
        blocks,
        ln_f: gf.dgamma,
        lm_head,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testing::{assert_close, f32_exact, numerical_grad, randn};

    pub(crate) const V: usize = 7;
    pub(crate) const B: usize = 2;
    pub(crate) const T: usize = 5;
    pub(crate) const C: usize = 8;
    pub(crate) const H: usize = 4;
    pub(crate) const KV: usize = 2;
    /// `GptConfig::mlp_hidden` for SwiGLU at C = 8: 8C/3 rounded up to a multiple of 64.
    pub(crate) const HIDDEN: usize = 64;
    pub(crate) const LAYERS: usize = 2;
    pub(crate) const IDS: [usize; B * T] = [3, 1, 4, 1, 5, 2, 6, 5, 3, 5];
    pub(crate) const TARGETS: [usize; B * T] = [1, 4, 1, 5, 2, 6, 5, 3, 5, 0];

    /// A telling point, every value f32-exact: embeddings of std 2, gains 1 ± 0.5, weights of
    /// std 0.5 (0.3 for SwiGLU's gate), a soft-cap of 2 that the logits (std ~3) bend against,
    /// RoPE at base 100, and two documents in the second sequence.
    pub(crate) fn point() -> (ModernGptParams, ModernGptShape) {
        let m =
            |rows, cols, seed, std| Mat::new(rows, cols, f32_exact(randn(seed, rows * cols, std)));
        let gain = |n, seed| f32_exact(randn(seed, n, 0.5).iter().map(|v| 1.0 + v).collect());
        let d = C / H;
        let kvd = KV * d;
        let blocks = (0..LAYERS as u64)
            .map(|l| {
                let s = 700 + 20 * l;
                ModernBlockParams {
                    ln_1: gain(C, s),
                    attn: ModernAttentionParams {
                        c_attn_w: m(C, C + 2 * kvd, s + 1, 0.5),
                        c_attn_b: vec![0.0; C + 2 * kvd],
                        c_proj_w: m(C, C, s + 2, 0.5),
                        c_proj_b: vec![0.0; C],
                        q_gain: Some(gain(d, s + 3)),
                        k_gain: Some(gain(d, s + 4)),
                    },
                    ln_2: gain(C, s + 5),
                    mlp: SwigluParams {
                        w1: m(C, HIDDEN, s + 6, 0.3),
                        w3: m(C, HIDDEN, s + 7, 0.5),
                        w2: m(HIDDEN, C, s + 8, 0.5),
                    },
                }
            })
            .collect();
        let p = ModernGptParams {
            wte: m(V, C, 790, 2.0),
            blocks,
            ln_f: gain(C, 791),
            lm_head: m(C, V, 792, 1.0),
        };
        let s = ModernGptShape {
            attn: ModernAttentionShape {
                batch: B,
                seq: T,
                heads: H,
                kv_heads: KV,
                rope_base: Some(100.0),
                qk_eps: 1e-6,
                docs: Some(vec![0, 0, 0, 0, 0, 0, 0, 1, 1, 1]),
            },
            norm_eps: 1e-5,
            softcap: Some(2.0),
        };
        (p, s)
    }

    /// Every weight of the model, by a name, as a mutable slice (the zero biases left out).
    pub(crate) fn fields(p: &mut ModernGptParams) -> Vec<(String, &mut [f64])> {
        let mut out: Vec<(String, &mut [f64])> = vec![
            ("wte".into(), &mut p.wte.data[..]),
            ("ln_f".into(), &mut p.ln_f[..]),
            ("lm_head".into(), &mut p.lm_head.data[..]),
        ];
        for (i, b) in p.blocks.iter_mut().enumerate() {
            out.push((format!("h.{i}.ln_1"), &mut b.ln_1[..]));
            out.push((format!("h.{i}.c_attn"), &mut b.attn.c_attn_w.data[..]));
            out.push((format!("h.{i}.c_proj"), &mut b.attn.c_proj_w.data[..]));
            out.push((
                format!("h.{i}.q_norm"),
                &mut b.attn.q_gain.as_mut().expect("gain")[..],
            ));
            out.push((
                format!("h.{i}.k_norm"),
                &mut b.attn.k_gain.as_mut().expect("gain")[..],
            ));
            out.push((format!("h.{i}.ln_2"), &mut b.ln_2[..]));
            out.push((format!("h.{i}.mlp.w1"), &mut b.mlp.w1.data[..]));
            out.push((format!("h.{i}.mlp.w3"), &mut b.mlp.w3.data[..]));
            out.push((format!("h.{i}.mlp.w2"), &mut b.mlp.w2.data[..]));
        }
        out
    }

    #[test]
    fn modern_gpt_backward_matches_numerical_for_every_weight() {
        let (p, s) = point();
        let (_, cache) = forward(&p, &s, &IDS, &TARGETS);
        let mut g = {
            let g = backward(&p, &s, &cache);
            ModernGptParams {
                wte: g.wte,
                blocks: g.blocks,
                ln_f: g.ln_f,
                lm_head: g.lm_head,
            }
        };
        let analytic: Vec<(String, Vec<f64>)> = fields(&mut g)
            .into_iter()
            .map(|(n, v)| (n, v.to_vec()))
            .collect();
        let count = fields(&mut p.clone()).len();
        assert_eq!(analytic.len(), count);
        for (k, (name, a)) in analytic.iter().enumerate() {
            let mut q = p.clone();
            let start = fields(&mut q).swap_remove(k).1.to_vec();
            // h = 1e-4, as for attention: q and k pass through a norm, a rotation and a softmax.
            let n = numerical_grad(&start, 1e-4, |v| {
                fields(&mut q).swap_remove(k).1.copy_from_slice(v);
                forward(&q, &s, &IDS, &TARGETS).0
            });
            assert_close(name, a, &n, 1e-6);
        }
    }

    #[test]
    fn an_unseen_token_gets_no_gradient() {
        // Token 0 is a target but never an input: its embedding row is untouched, exactly.
        let (p, s) = point();
        let (_, cache) = forward(&p, &s, &IDS, &TARGETS);
        let g = backward(&p, &s, &cache);
        assert!(g.wte.row(0).iter().all(|v| *v == 0.0));
        assert!(g.wte.row(1).iter().any(|v| *v != 0.0));
    }
}

#[cfg(test)]
mod burn_parity {
    use super::tests::{B, C, H, HIDDEN, IDS, KV, LAYERS, T, TARGETS, V, point};
    use super::*;
    use crate::gpt::GptConfig;
    use crate::testing::{AB, assert_close, grads_by_path, load, to_vec};
    use burn::prelude::*;

    /// `GptConfig::modern()` with grouped key/value heads and a document mask, loaded with the
    /// reference's weights: the loss and the gradient of every parameter, f64 on both sides.
    #[test]
    fn modern_gpt_loss_and_every_gradient_match_burn_autodiff() {
        let (p, s) = point();
        let d = C / H;
        let kvd = KV * d;
        let config = GptConfig::new(V)
            .with_context(T)
            .with_layers(LAYERS)
            .with_heads(H)
            .with_d_model(C)
            .modern()
            .with_kv_heads(Some(KV))
            .with_rope_base(100.0)
            .with_logit_softcap(Some(2.0));
        assert_eq!(config.mlp_hidden(), HIDDEN);
        let mut named: Vec<(String, Vec<usize>, Vec<f64>)> = vec![
            ("wte.weight".into(), vec![V, C], p.wte.data.clone()),
            ("ln_f.gamma".into(), vec![C], p.ln_f.clone()),
            ("lm_head.weight".into(), vec![C, V], p.lm_head.data.clone()),
        ];
        for (i, b) in p.blocks.iter().enumerate() {
            let h = format!("h.{i}");
            let gain = |g: &Option<Vec<f64>>| g.clone().expect("gain");
            named.extend([
                (format!("{h}.ln_1.gamma"), vec![C], b.ln_1.clone()),
                (
                    format!("{h}.attn.c_attn.weight"),
                    vec![C, C + 2 * kvd],
                    b.attn.c_attn_w.data.clone(),
                ),
                (
                    format!("{h}.attn.c_proj.weight"),
                    vec![C, C],
                    b.attn.c_proj_w.data.clone(),
                ),
                (
                    format!("{h}.attn.q_norm.gamma"),
                    vec![d],
                    gain(&b.attn.q_gain),
                ),
                (
                    format!("{h}.attn.k_norm.gamma"),
                    vec![d],
                    gain(&b.attn.k_gain),
                ),
                (format!("{h}.ln_2.gamma"), vec![C], b.ln_2.clone()),
                (
                    format!("{h}.mlp.c_fc.weight"),
                    vec![C, HIDDEN],
                    b.mlp.w1.data.clone(),
                ),
                (
                    format!("{h}.mlp.c_up.weight"),
                    vec![C, HIDDEN],
                    b.mlp.w3.data.clone(),
                ),
                (
                    format!("{h}.mlp.c_proj.weight"),
                    vec![HIDDEN, C],
                    b.mlp.w2.data.clone(),
                ),
            ]);
        }
        let refs: Vec<(&str, &[usize], &[f64])> = named
            .iter()
            .map(|(n, sh, v)| (n.as_str(), &sh[..], &v[..]))
            .collect();
        let model = load(config.init::<AB>(&Default::default()), &refs);
        let device = Default::default();
        let ints = |v: &[usize]| {
            Tensor::<AB, 2, Int>::from_data(
                TensorData::new(v.iter().map(|&i| i as i64).collect::<Vec<_>>(), [B, T]),
                &device,
            )
        };
        let docs = s.attn.docs.as_ref().expect("documents");
        let mask = super::super::modern_attention::burn_parity::doc_mask(docs, B, T);
        let loss = model.loss_masked(ints(&IDS), ints(&TARGETS), Some(mask));
        let (want, cache) = forward(&p, &s, &IDS, &TARGETS);
        assert_close("loss", &to_vec(loss.clone()), &[want], 1e-13);
        let grads = loss.backward();
        let got = grads_by_path(&model, &grads);
        let g = backward(&p, &s, &cache);
        let mut expected: Vec<(String, Vec<f64>)> = vec![
            ("wte.weight".into(), g.wte.data.clone()),
            ("ln_f.gamma".into(), g.ln_f.clone()),
            ("lm_head.weight".into(), g.lm_head.data.clone()),
        ];
        for (i, b) in g.blocks.iter().enumerate() {
            let h = format!("h.{i}");
            let gain = |g: &Option<Vec<f64>>| g.clone().expect("gain");
            expected.extend([
                (format!("{h}.ln_1.gamma"), b.ln_1.clone()),
                (
                    format!("{h}.attn.c_attn.weight"),
                    b.attn.c_attn_w.data.clone(),
                ),
                (
                    format!("{h}.attn.c_proj.weight"),
                    b.attn.c_proj_w.data.clone(),
                ),
                (format!("{h}.attn.q_norm.gamma"), gain(&b.attn.q_gain)),
                (format!("{h}.attn.k_norm.gamma"), gain(&b.attn.k_gain)),
                (format!("{h}.ln_2.gamma"), b.ln_2.clone()),
                (format!("{h}.mlp.c_fc.weight"), b.mlp.w1.data.clone()),
                (format!("{h}.mlp.c_up.weight"), b.mlp.w3.data.clone()),
                (format!("{h}.mlp.c_proj.weight"), b.mlp.w2.data.clone()),
            ]);
        }
        assert_eq!(got.len(), expected.len(), "parameters: {:?}", got.keys());
        for (name, want) in &expected {
            let have = got
                .get(name)
                .unwrap_or_else(|| panic!("Burn has no gradient for {name}"));
            assert_close(name, have, want, 1e-10);
        }
    }
}
