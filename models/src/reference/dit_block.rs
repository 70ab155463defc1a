//! A DiT block: diffusers' `BasicTransformerBlock` with `norm_type = "ada_norm_zero"`, no
//! cross-attention, non-causal self-attention with separate projections (`attn1`), and the
//! feed-forward `ff.net.0.proj [D, 4D] → GELU (tanh) → ff.net.2 [4D, D]`.
//!
//! Conditioning: `emb = norm1.linear(SiLU(c))`, `[B, 6D]`, chunked in this order into
//! `shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp` (`[B, D]` each). Then
//!
//! ```text
//! h  = modulate(x,  shift_msa, scale_msa, eps1)     // AdaLayerNormZero's norm, eps 1e-6
//! x1 = x  + gate_msa ⊙ attn1(h)
//! h2 = modulate(x1, shift_mlp, scale_mlp, eps2)     // diffusers' norm3, eps = norm_eps 1e-5
//! y  = x1 + gate_mlp ⊙ ff(h2)
//! ```
//!
//! In diffusers `c` is produced inside the block (`norm1.emb`: timestep + label embeddings); here
//! it is an input and its gradient `dc` an output, so that the embedder can sit outside and be
//! checked on its own. The backward pass runs the forward pass in reverse, with one join: the six
//! chunks all came from one `emb`, so their six gradients are laid side by side into `demb`
//! (`[B, 6D]`, same order) and sent back through `norm1.linear` and the SiLU once.

use super::attention_qkv::{self, AttentionQkvCache, AttentionQkvGrads, AttentionQkvParams};
use super::gelu::{self, GeluCache};
use super::modulate::{self, ModulateCache};
use super::{Mat, linear, silu};

/// AdaLayerNormZero's LayerNorm eps (before attention), and `norm_out`'s in the final layer.
pub const ADA_NORM_EPS: f64 = 1e-6;
/// The config's `norm_eps`, used by the LayerNorm before the feed-forward (diffusers' `norm3`).
pub const NORM_EPS: f64 = 1e-5;

/// The weights of one block, named after diffusers' tensors, `[in, out]` layout.
#[derive(Clone, Debug)]
pub struct DitBlockParams {
    /// `norm1.linear`, `[D, 6D]`.
    pub norm1_linear_w: Mat,
    /// `[6D]`.
    pub norm1_linear_b: Vec<f64>,
    pub attn1: AttentionQkvParams,
    /// `ff.net.0.proj`, `[D, 4D]`.
    pub ff_proj_w: Mat,
    /// `[4D]`.
    pub ff_proj_b: Vec<f64>,
    /// `ff.net.2`, `[4D, D]`.
    pub ff_out_w: Mat,
    /// `[D]`.
    pub ff_out_b: Vec<f64>,
}

/// Gradients of a block, shaped as [`DitBlockParams`], plus `dx` and `dc`.
#[derive(Clone, Debug)]
pub struct DitBlockGrads {
    /// `[B·N, D]`.
    pub dx: Mat,
    /// `[B, D]`.
    pub dc: Mat,
    pub norm1_linear_w: Mat,
    pub norm1_linear_b: Vec<f64>,
    /// The attention's weights; its `dx` is the gradient at the modulated input `h`.
    pub attn1: AttentionQkvGrads,
    pub ff_proj_w: Mat,
    pub ff_proj_b: Vec<f64>,
    pub ff_out_w: Mat,
    pub ff_out_b: Vec<f64>,
}

/// What the backward pass needs from the forward pass.
#[derive(Clone, Debug)]
pub struct DitBlockCache {
    /// The conditioning `c [B, D]`, SiLU's input.
    pub c: Mat,
    /// `SiLU(c)`, `norm1.linear`'s input.
    pub silu_c: Mat,
    /// The six chunks of `emb`, in diffusers' order, `[B, D]` each.
    pub chunks: [Mat; 6],
    pub mod_msa: ModulateCache,
    pub attn: AttentionQkvCache,
    /// `attn1(h)`, the attention branch before its gate.
    pub attn_out: Mat,
    pub mod_mlp: ModulateCache,
    /// `h2`, the input of `ff.net.0.proj`.
    pub h2: Mat,
    pub gelu: GeluCache,
    /// `gelu(ff.net.0.proj(h2))`, the input of `ff.net.2`.
    pub gelu_out: Mat,
    /// `ff(h2)`, the feed-forward branch before its gate.
    pub ff_out: Mat,
    pub seq: usize,
}

/// Indices into the six chunks, in diffusers' order.
pub const SHIFT_MSA: usize = 0;
pub const SCALE_MSA: usize = 1;
pub const GATE_MSA: usize = 2;
pub const SHIFT_MLP: usize = 3;
pub const SCALE_MLP: usize = 4;
pub const GATE_MLP: usize = 5;

/// Columns `k·d..(k+1)·d` of `m`, as `[m.rows, d]` (`torch.chunk` along dim 1).
pub fn chunk(m: &Mat, k: usize, d: usize) -> Mat {
    let mut out = Mat::zeros(m.rows, d);
    for r in 0..m.rows {
        out.data[r * d..(r + 1) * d].copy_from_slice(&m.row(r)[k * d..(k + 1) * d]);
    }
    out
}

/// The inverse of [`chunk`]: `[rows, d]` pieces laid side by side, `[rows, k·d]`.
pub fn unchunk(parts: &[&Mat]) -> Mat {
    let (rows, d) = (parts[0].rows, parts[0].cols);
    let mut out = Mat::zeros(rows, parts.len() * d);
    for (k, part) in parts.iter().enumerate() {
        for r in 0..rows {
            out.data[r * out.cols + k * d..r * out.cols + (k + 1) * d].copy_from_slice(part.row(r));
        }
    }
    out
}

/// `x [B·N, D]`, `c [B, D]` → `y [B·N, D]`.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    x: &Mat,
    c: &Mat,
    p: &DitBlockParams,
    batch: usize,
    seq: usize,
    heads: usize,
    eps1: f64,
    eps2: f64,
) -> (Mat, DitBlockCache) {
    let d = x.cols;
    assert_eq!(x.rows, batch * seq, "dit_block: x must have B·N rows");
    assert_eq!((c.rows, c.cols), (batch, d), "dit_block: c must be [B, D]");
    let silu_c = silu::forward(c);
    let emb = linear::forward(&silu_c, &p.norm1_linear_w, &p.norm1_linear_b);
    let chunks: [Mat; 6] = std::array::from_fn(|k| chunk(&emb, k, d));
    let (h, mod_msa) = modulate::modulate(x, &chunks[SHIFT_MSA], &chunks[SCALE_MSA], seq, eps1);
    let (attn_out, attn) = attention_qkv::forward(&h, &p.attn1, batch, seq, heads);
    let x1 = modulate::gated_residual(x, &chunks[GATE_MSA], &attn_out, seq);
    let (h2, mod_mlp) = modulate::modulate(&x1, &chunks[SHIFT_MLP], &chunks[SCALE_MLP], seq, eps2);
    let fc = linear::forward(&h2, &p.ff_proj_w, &p.ff_proj_b);
    let (gelu_out, gelu) = gelu::forward(&fc);
    let ff_out = linear::forward(&gelu_out, &p.ff_out_w, &p.ff_out_b);
    let y = modulate::gated_residual(&x1, &chunks[GATE_MLP], &ff_out, seq);
    let cache = DitBlockCache {
        c: c.clone(),
        silu_c,
        chunks,
        mod_msa,
        attn,
        attn_out,
        mod_mlp,
        h2,
        gelu,
        gelu_out,
        ff_out,
        seq,
    };
    (y, cache)
}

/// Given `dy [B·N, D]`, the gradients with respect to `x`, `c` and every weight.
pub fn backward(cache: &DitBlockCache, p: &DitBlockParams, dy: &Mat) -> DitBlockGrads {
    let (seq, ch) = (cache.seq, &cache.chunks);
    // y = x1 + gate_mlp ⊙ ff(h2)
    let g_mlp = modulate::gated_residual_backward(&ch[GATE_MLP], &cache.ff_out, dy, seq);
    let ff_out = linear::backward(&cache.gelu_out, &p.ff_out_w, &g_mlp.dbranch);
    let dfc = gelu::backward(&cache.gelu, &ff_out.dx);
    let ff_proj = linear::backward(&cache.h2, &p.ff_proj_w, &dfc);
    let m_mlp = modulate::modulate_backward(&cache.mod_mlp, &ff_proj.dx);
    // x1 reached y both directly and through h2.
    let dx1 = add(&g_mlp.dx, &m_mlp.dx);
    // x1 = x + gate_msa ⊙ attn1(h)
    let g_msa = modulate::gated_residual_backward(&ch[GATE_MSA], &cache.attn_out, &dx1, seq);
    let attn1 = attention_qkv::backward(&cache.attn, &p.attn1, &g_msa.dbranch);
    let m_msa = modulate::modulate_backward(&cache.mod_msa, &attn1.dx);
    let dx = add(&g_msa.dx, &m_msa.dx);
    // The six chunks' gradients, in emb's column order, back through norm1.linear and the SiLU.
    let demb = unchunk(&[
        &m_msa.dshift,
        &m_msa.dscale,
        &g_msa.dgate,
        &m_mlp.dshift,
        &m_mlp.dscale,
        &g_mlp.dgate,
    ]);
    let norm1 = linear::backward(&cache.silu_c, &p.norm1_linear_w, &demb);
    let dc = silu::backward(&cache.c, &norm1.dx);
    DitBlockGrads {
        dx,
        dc,
        norm1_linear_w: norm1.dw,
        norm1_linear_b: norm1.db,
        attn1,
        ff_proj_w: ff_proj.dw,
        ff_proj_b: ff_proj.db,
        ff_out_w: ff_out.dw,
        ff_out_b: ff_out.db,
    }
}

fn add(a: &Mat, b: &Mat) -> Mat {
    assert_eq!(
        (a.rows, a.cols),
        (b.rows, b.cols),
        "dit_block: shapes differ"
    );
    Mat::new(
        a.rows,
        a.cols,
        a.data.iter().zip(&b.data).map(|(x, y)| x + y).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::attention_qkv::tests as aq;
    use super::*;
    use crate::testing::{randn, worst_rel};

    const B: usize = 2;
    const N: usize = 4;
    const D: usize = 8;
    const H: usize = 2;

    /// Block weights at a telling point: std 0.3–0.5, biases non-zero. `norm1.linear` has std
    /// 0.3 so that, on `SiLU(c)` with `c` of std 3, the chunks come out of size ~1–2: shifts,
    /// scales and gates far from 0 and from 1 (diffusers initialises this layer to zero; a
    /// check there would see none of the gates' or scales' factors).
    fn params(seed: u64) -> DitBlockParams {
        DitBlockParams {
            norm1_linear_w: Mat::new(D, 6 * D, randn(seed, 6 * D * D, 0.3)),
            norm1_linear_b: randn(seed + 1, 6 * D, 0.5),
            attn1: aq::params(D, seed + 2),
            ff_proj_w: Mat::new(D, 4 * D, randn(seed + 10, 4 * D * D, 0.5)),
            ff_proj_b: randn(seed + 11, 4 * D, 0.5),
            ff_out_w: Mat::new(4 * D, D, randn(seed + 12, 4 * D * D, 0.3)),
            ff_out_b: randn(seed + 13, D, 0.5),
        }
    }

    fn dot(a: &Mat, b: &Mat) -> f64 {
        a.data.iter().zip(&b.data).map(|(x, y)| x * y).sum()
    }

    type Field = fn(&mut DitBlockParams) -> &mut [f64];

    #[test]
    fn dit_block_backward_matches_numerical() {
        let p = params(271);
        let x = Mat::new(B * N, D, randn(290, B * N * D, 3.0));
        let c = Mat::new(B, D, randn(291, B * D, 3.0));
        let dy = Mat::new(B * N, D, randn(292, B * N * D, 1.0));
        let (e1, e2) = (ADA_NORM_EPS, NORM_EPS);
        let loss =
            |x: &Mat, c: &Mat, p: &DitBlockParams| dot(&forward(x, c, p, B, N, H, e1, e2).0, &dy);
        let (_, cache) = forward(&x, &c, &p, B, N, H, e1, e2);
        for (k, name) in [
            "shift_msa",
            "scale_msa",
            "gate_msa",
            "shift_mlp",
            "scale_mlp",
            "gate_mlp",
        ]
        .iter()
        .enumerate()
        {
            let m = &cache.chunks[k].data;
            let min = m.iter().fold(f64::INFINITY, |a, v| a.min(v.abs()));
            let max = m.iter().fold(0.0f64, |a, v| a.max(v.abs()));
            println!("dit_block point: |{name}| in [{min:.2}, {max:.2}]");
        }
        let g = backward(&cache, &p, &dy);
        let h = aq::STEP;
        let mut checks: Vec<(String, Vec<f64>, Vec<f64>)> = vec![
            (
                "dx".into(),
                g.dx.data.clone(),
                aq::numeric(&x, h, |x| &mut x.data[..], |x| loss(x, &c, &p)),
            ),
            (
                "dc".into(),
                g.dc.data.clone(),
                aq::numeric(&c, h, |c| &mut c.data[..], |c| loss(&x, c, &p)),
            ),
        ];
        let fields: [(&str, Vec<f64>, Field); 6] = [
            ("norm1.linear.w", g.norm1_linear_w.data.clone(), |p| {
                &mut p.norm1_linear_w.data[..]
            }),
            ("norm1.linear.b", g.norm1_linear_b.clone(), |p| {
                &mut p.norm1_linear_b[..]
            }),
            ("ff.net.0.proj.w", g.ff_proj_w.data.clone(), |p| {
                &mut p.ff_proj_w.data[..]
            }),
            ("ff.net.0.proj.b", g.ff_proj_b.clone(), |p| {
                &mut p.ff_proj_b[..]
            }),
            ("ff.net.2.w", g.ff_out_w.data.clone(), |p| {
                &mut p.ff_out_w.data[..]
            }),
            ("ff.net.2.b", g.ff_out_b.clone(), |p| &mut p.ff_out_b[..]),
        ];
        for (name, a, field) in fields {
            let n = aq::numeric(&p, h, field, |p| loss(&x, &c, p));
            checks.push((name.into(), a, n));
        }
        for (name, a, field) in aq::weight_checks(&g.attn1) {
            let n = aq::numeric(&p.attn1, h, field, |a| {
                let mut whole = p.clone();
                whole.attn1 = a.clone();
                loss(&x, &c, &whole)
            });
            checks.push((format!("attn1.{name}"), a, n));
        }
        // The block composes layers checked beside it, at the attention's step (5e-5: the
        // modulated tokens reach the attention at size ~2–3, as in attention_qkv.rs). Measured
        // (printed): 1.4e-8 at worst (norm1.linear.w); 1e-6 as there, a millionth of any lost
        // factor.
        for (name, a, n) in &checks {
            let r = worst_rel(a, n);
            println!("dit_block {name}: worst relative difference {r:.2e}");
            assert!(r <= 1e-6, "{name}: {r:.3e}");
        }
        // attn1.to_k.b, left out above: zero in theory (see attention_qkv.rs), rounding here.
        let scale = g.attn1.to_q_b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let kb = g.attn1.to_k_b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        println!("dit_block attn1.to_k.b: max |g| {kb:.1e} of scale {scale:.1e}");
        assert!(kb < 1e-12 * scale, "key bias gradient {:?}", g.attn1.to_k_b);
    }

    #[test]
    fn zero_initialised_norm1_makes_the_block_the_identity() {
        // adaLN-Zero: with norm1.linear all zero every gate is 0, so y = x exactly, whatever the
        // attention and feed-forward weights, and dx = dy.
        let mut p = params(271);
        p.norm1_linear_w = Mat::zeros(D, 6 * D);
        p.norm1_linear_b = vec![0.0; 6 * D];
        let x = Mat::new(B * N, D, randn(293, B * N * D, 3.0));
        let c = Mat::new(B, D, randn(294, B * D, 3.0));
        let (y, cache) = forward(&x, &c, &p, B, N, H, ADA_NORM_EPS, NORM_EPS);
        assert_eq!(y, x);
        let dy = Mat::new(B * N, D, randn(295, B * N * D, 1.0));
        let g = backward(&cache, &p, &dy);
        assert_eq!(g.dx, dy);
        // The branches' weights get nothing; norm1.linear's gate columns do.
        assert!(g.ff_out_w.data.iter().all(|&v| v == 0.0));
        assert!(g.attn1.to_out_w.data.iter().all(|&v| v == 0.0));
        let gate_cols =
            |k: usize| (0..D).flat_map(move |r| (k * D..(k + 1) * D).map(move |j| (r, j)));
        assert!(gate_cols(GATE_MSA).all(|(r, j)| g.norm1_linear_w.at(r, j) != 0.0));
        assert!(gate_cols(GATE_MLP).all(|(r, j)| g.norm1_linear_w.at(r, j) != 0.0));
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::reference::attention_qkv::burn_parity::{
        compare, exact_params, named as attn_named, named_grads as attn_grads, refs,
    };
    use crate::testing::{AB, assert_close, f32_exact, grads_by_path, load, randn, tensor, to_vec};

    #[test]
    fn dit_block_matches_burn_autodiff() {
        let (b, n, d, h) = (2, 4, 8, 2);
        let m = |r: usize, c: usize, s: u64| Mat::new(r, c, f32_exact(randn(s, r * c, 0.5)));
        let p = DitBlockParams {
            norm1_linear_w: m(d, 6 * d, 471),
            norm1_linear_b: f32_exact(randn(472, 6 * d, 0.5)),
            attn1: exact_params(d, 473),
            ff_proj_w: m(d, 4 * d, 481),
            ff_proj_b: f32_exact(randn(482, 4 * d, 0.5)),
            ff_out_w: m(4 * d, d, 483),
            ff_out_b: f32_exact(randn(484, d, 0.5)),
        };
        let x = Mat::new(b * n, d, f32_exact(randn(485, b * n * d, 3.0)));
        let c = Mat::new(b, d, f32_exact(randn(486, b * d, 1.5)));
        let dy = Mat::new(b * n, d, randn(487, b * n * d, 1.0));
        let mut named = attn_named(&p.attn1, "attn1.");
        named.push((
            "norm1.linear.weight".into(),
            vec![d, 6 * d],
            p.norm1_linear_w.data.clone(),
        ));
        named.push((
            "norm1.linear.bias".into(),
            vec![6 * d],
            p.norm1_linear_b.clone(),
        ));
        named.push((
            "ff.c_fc.weight".into(),
            vec![d, 4 * d],
            p.ff_proj_w.data.clone(),
        ));
        named.push(("ff.c_fc.bias".into(), vec![4 * d], p.ff_proj_b.clone()));
        named.push((
            "ff.c_proj.weight".into(),
            vec![4 * d, d],
            p.ff_out_w.data.clone(),
        ));
        named.push(("ff.c_proj.bias".into(), vec![d], p.ff_out_b.clone()));
        let block = load(
            crate::dit_block::DitBlockConfig::new(d, h, 10).init::<AB>(&Default::default()),
            &refs(&named),
        );
        let xt = tensor::<AB, 3>(x.data.clone(), [b, n, d]).require_grad();
        let ct = tensor::<AB, 2>(c.data.clone(), [b, d]).require_grad();
        let y = block.forward_conditioned(xt.clone(), ct.clone(), None);
        let (want, cache) = forward(&x, &c, &p, b, n, h, ADA_NORM_EPS, NORM_EPS);
        assert_close("y", &to_vec(y.clone()), &want.data, 1e-12);
        let grads = (y * tensor::<AB, 3>(dy.data.clone(), [b, n, d]))
            .sum()
            .backward();
        let g = backward(&cache, &p, &dy);
        assert_close("dx", &to_vec(xt.grad(&grads).unwrap()), &g.dx.data, 1e-11);
        assert_close("dc", &to_vec(ct.grad(&grads).unwrap()), &g.dc.data, 1e-11);
        let got = grads_by_path(&block, &grads);
        let mut want = attn_grads(&g.attn1, "attn1.");
        want.push(("norm1.linear.weight".into(), g.norm1_linear_w.data.clone()));
        want.push(("norm1.linear.bias".into(), g.norm1_linear_b.clone()));
        want.push(("ff.c_fc.weight".into(), g.ff_proj_w.data.clone()));
        want.push(("ff.c_fc.bias".into(), g.ff_proj_b.clone()));
        want.push(("ff.c_proj.weight".into(), g.ff_out_w.data.clone()));
        want.push(("ff.c_proj.bias".into(), g.ff_out_b.clone()));
        compare(&got, &want, 1e-10);
    }
}
