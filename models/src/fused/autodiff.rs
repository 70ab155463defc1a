//! The fused operations under `Autodiff<B>`: each one graph node whose backward pass calls `B`'s
//! kernels on what its forward pass saved.
//!
//! - Attention saves `q`, `k`, `v` and the weights `P`; backward: `dV = Pᵀ·dO`, `dP = dO·Vᵀ`,
//!   `dS = scale·P ⊙ (dP − rowsum(P ⊙ dP))`, `dQ = dS·K`, `dK = dSᵀ·Q` (as
//!   `reference/attention.rs` derives them).
//! - Attention from packed `qkv` rows saves `qkv` and `P`, and hands back `dqkv` in the same
//!   packed layout.
//! - A norm saves `x̂` and `1/σ` (and `gamma`); backward as `reference/layer_norm.rs`.
//! - The GELU saves its derivative at each input, computed beside it in the forward pass.
//! - Cross-entropy saves the softmax `P` and the targets; backward: `(P − onehot) · dloss / N`.
//! - A linear layer saves `x` and `w`; backward: `dx = dy·wᵀ`, `dw = xᵀ·dy`, `db = Σ_rows dy`.

use super::FusedOps;
use burn::tensor::TensorMetadata;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};

#[derive(Debug)]
struct AttentionBackward;

impl<B: FusedOps> Backward<B, 3> for AttentionBackward {
    /// `(q, k, v, P, scale)`.
    type State = (
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        f64,
    );

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dout = grads.consume::<B>(&ops.node);
        let (q, k, v, probs, scale) = ops.state;
        let (dq, dk, dv) = B::attention_bwd(q, k, v, probs, dout, scale);
        for (node, grad) in ops.parents.into_iter().zip([dq, dk, dv]) {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

#[derive(Debug)]
struct PackedAttentionBackward;

impl<B: FusedOps> Backward<B, 1> for PackedAttentionBackward {
    /// `(qkv, P, heads, scale)`.
    type State = (FloatTensor<B>, FloatTensor<B>, usize, f64);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_qkv] = ops.parents;
        let dy = grads.consume::<B>(&ops.node);
        let (qkv, probs, heads, scale) = ops.state;
        if let Some(node) = node_qkv {
            let dqkv = B::packed_attention_bwd(qkv, probs, dy, heads, scale);
            grads.register::<B>(node.id, dqkv);
        }
    }
}

#[derive(Debug)]
struct NormBackward;

impl<B: FusedOps> Backward<B, 3> for NormBackward {
    /// `(x̂, 1/σ, gamma, has beta, rms)`.
    type State = (
        FloatTensor<B>,
        FloatTensor<B>,
        Option<FloatTensor<B>>,
        bool,
        bool,
    );

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_gamma, node_beta] = ops.parents;
        let dy = grads.consume::<B>(&ops.node);
        let (xhat, rstd, gamma, beta, rms) = ops.state;
        let (dx, dgamma, dbeta) = B::norm_bwd(dy, xhat, rstd, gamma, beta, rms);
        if let Some(node) = node_x {
            grads.register::<B>(node.id, dx);
        }
        if let (Some(node), Some(g)) = (node_gamma, dgamma) {
            grads.register::<B>(node.id, g);
        }
        if let (Some(node), Some(b)) = (node_beta, dbeta) {
            grads.register::<B>(node.id, b);
        }
    }
}

#[derive(Debug)]
struct GeluBackward;

impl<B: FusedOps> Backward<B, 1> for GeluBackward {
    /// The GELU's derivative at each input.
    type State = FloatTensor<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x] = ops.parents;
        let dy = grads.consume::<B>(&ops.node);
        if let Some(node) = node_x {
            grads.register::<B>(node.id, B::gelu_bwd(ops.state, dy));
        }
    }
}

#[derive(Debug)]
struct XentBackward;

impl<B: FusedOps> Backward<B, 1> for XentBackward {
    /// `(P, targets)`.
    type State = (FloatTensor<B>, Vec<usize>);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_logits] = ops.parents;
        let dloss = grads.consume::<B>(&ops.node);
        let (probs, targets) = ops.state;
        if let Some(node) = node_logits {
            grads.register::<B>(node.id, B::xent_bwd(probs, &targets, dloss));
        }
    }
}

#[derive(Debug)]
struct LinearBackward;

impl<B: FusedOps> Backward<B, 3> for LinearBackward {
    /// `(x, w)`.
    type State = (FloatTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_w, node_b] = ops.parents;
        let dy = grads.consume::<B>(&ops.node);
        let (x, w) = ops.state;
        let need = [node_x.is_some(), node_w.is_some(), node_b.is_some()];
        let (dx, dw, db) = B::linear_bwd(x, w, dy, need);
        for (node, grad) in [(node_x, dx), (node_w, dw), (node_b, db)] {
            if let (Some(node), Some(grad)) = (node, grad) {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: FusedOps, C: CheckpointStrategy> FusedOps for Autodiff<B, C> {
    fn fused_xent(logits: FloatTensor<Self>, targets: &[usize]) -> FloatTensor<Self> {
        let (loss, probs) = B::xent_fwd(logits.primitive, targets);
        match XentBackward
            .prepare::<C>([logits.node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((probs, targets.to_vec()), loss),
            OpsKind::UnTracked(prep) => prep.finish(loss),
        }
    }

    fn fused_linear(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        // An absent bias takes part as an untracked placeholder: no gradient reaches it.
        let b_node = b.as_ref().map_or_else(
            || {
                let device = B::float_device(&x.primitive);
                let dtype = TensorMetadata::dtype(&x.primitive).into();
                Self::from_inner(B::float_zeros([1].into(), &device, dtype)).node
            },
            |b| b.node.clone(),
        );
        let y = B::linear_fwd(
            x.primitive.clone(),
            w.primitive.clone(),
            b.map(|b| b.primitive),
        );
        match LinearBackward
            .prepare::<C>([x.node, w.node, b_node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((x.primitive, w.primitive), y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }

    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
        causal: Option<usize>,
    ) -> FloatTensor<Self> {
        let (out, probs) = B::attention_fwd(
            q.primitive.clone(),
            k.primitive.clone(),
            v.primitive.clone(),
            scale,
            causal,
        );
        match AttentionBackward
            .prepare::<C>([q.node.clone(), k.node.clone(), v.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                prep.finish((q.primitive, k.primitive, v.primitive, probs, scale), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }

    fn fused_packed_attention(
        qkv: FloatTensor<Self>,
        heads: usize,
        scale: f64,
        causal: bool,
    ) -> FloatTensor<Self> {
        let (y, probs) = B::packed_attention_fwd(qkv.primitive.clone(), heads, scale, causal);
        match PackedAttentionBackward
            .prepare::<C>([qkv.node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((qkv.primitive, probs, heads, scale), y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }

    fn fused_norm(
        x: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
        beta: Option<FloatTensor<Self>>,
        eps: f64,
        rms: bool,
    ) -> FloatTensor<Self> {
        // An absent gain or shift takes part as an untracked placeholder: no gradient reaches it.
        let placeholder = || {
            let device = B::float_device(&x.primitive);
            let dtype = TensorMetadata::dtype(&x.primitive).into();
            Self::from_inner(B::float_zeros([1].into(), &device, dtype))
        };
        let has_beta = beta.is_some();
        let gamma_node = gamma
            .as_ref()
            .map_or_else(|| placeholder().node, |g| g.node.clone());
        let beta_node = beta
            .as_ref()
            .map_or_else(|| placeholder().node, |b| b.node.clone());
        let gamma_inner = gamma.map(|g| g.primitive);
        let (y, xhat, rstd) = B::norm_fwd(
            x.primitive,
            gamma_inner.clone(),
            beta.map(|b| b.primitive),
            eps,
            rms,
        );
        match NormBackward
            .prepare::<C>([x.node, gamma_node, beta_node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((xhat, rstd, gamma_inner, has_beta, rms), y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }

    fn fused_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        match GeluBackward
            .prepare::<C>([x.node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (y, slope) = B::gelu_with_slope(x.primitive);
                prep.finish(slope, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::gelu_fwd(x.primitive)),
        }
    }
}
