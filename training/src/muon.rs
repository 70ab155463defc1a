//! Muon for Burn: SGD with Nesterov momentum whose update is orthogonalised by a quintic
//! Newton–Schulz iteration (the maths, and why, are in `nervus_models::reference::muon`, the f64
//! twin this is held against).
//!
//! Why not Burn 0.21's own `Muon`: it panics on parameters that are not matrices, and its
//! shape-dependent scale reads `[rows, cols]` as PyTorch stores a Linear weight (`[out, in]`),
//! while a Burn Linear weight is `[in, out]`, so the scale comes out inverted for every non-square
//! layer. Here the scale is `√max(1, out/in)` read the Burn way round, and only the matrices of
//! the transformer blocks reach Muon at all: [`crate::optim::TrainOptim`] routes embeddings, the
//! head, norms and biases to AdamW.

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::SimpleOptimizer;
use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;

/// The published quintic coefficients `(a, b, c)` and number of iterations.
pub const NS_COEFFS: (f64, f64, f64) = (3.4445, -4.7750, 2.0315);
pub const NS_STEPS: usize = 5;

/// Muon's settings (the learning rate comes from the schedule).
#[derive(Clone, Copy, Debug)]
pub struct Muon {
    /// μ (0.95 in the reference implementation).
    pub momentum: f64,
    pub nesterov: bool,
    /// Decoupled: `W ← W·(1 − lr·wd)` before the update.
    pub weight_decay: f64,
}

/// The momentum buffer of one matrix.
#[derive(Record, Clone)]
pub struct MuonState<B: Backend, const D: usize> {
    pub buf: Tensor<B, D>,
}

/// `steps` quintic Newton–Schulz iterations on `G/(‖G‖_F + 1e-7)`, run on the wide orientation.
///
/// Shapes: `g [R, C]` → `[R, C]`.
pub fn newton_schulz<B: Backend>(g: Tensor<B, 2>, steps: usize) -> Tensor<B, 2> {
    let (a, b, c) = NS_COEFFS;
    let [r, cols] = g.dims();
    let tall = r > cols;
    let x = if tall { g.transpose() } else { g };
    let norm = x
        .clone()
        .square()
        .sum()
        .sqrt()
        .add_scalar(1e-7)
        .reshape([1, 1]);
    let mut x = x.div(norm);
    for _ in 0..steps {
        let gram = x.clone().matmul(x.clone().transpose());
        let poly = gram.clone().mul_scalar(b) + gram.clone().matmul(gram).mul_scalar(c);
        x = x.clone().mul_scalar(a) + poly.matmul(x);
    }
    if tall { x.transpose() } else { x }
}

impl Muon {
    /// The update direction for a Burn weight `[in, out]` with gradient `grad`, advancing the
    /// momentum buffer: `buf ← μ·buf + g`; `g_eff = g + μ·buf` (Nesterov) or `buf`;
    /// `newton_schulz(g_eff)·√max(1, out/in)`.
    pub fn update<B: Backend>(
        &self,
        grad: Tensor<B, 2>,
        buf: Option<Tensor<B, 2>>,
    ) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let buf = match buf {
            Some(b) => b.mul_scalar(self.momentum) + grad.clone(),
            None => grad.clone(),
        };
        let eff = if self.nesterov {
            grad + buf.clone().mul_scalar(self.momentum)
        } else {
            buf.clone()
        };
        let [n_in, n_out] = eff.dims();
        let scale = (n_out as f64 / n_in as f64).max(1.0).sqrt();
        (newton_schulz(eff, NS_STEPS).mul_scalar(scale), buf)
    }
}

impl<B: Backend> SimpleOptimizer<B> for Muon {
    type State<const D: usize> = MuonState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: f64,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        assert_eq!(
            D, 2,
            "Muon orthogonalises matrices; a rank-{D} parameter was routed to it"
        );
        let dims = tensor.dims();
        let as2 = |t: Tensor<B, D>| t.reshape([dims[0], dims[1]]);
        let (update, buf) = self.update(as2(grad), state.map(|s| as2(s.buf)));
        let decayed = tensor.mul_scalar(1.0 - lr * self.weight_decay);
        let new = decayed - update.mul_scalar(lr).reshape(dims);
        (
            new,
            Some(MuonState {
                buf: buf.reshape(dims),
            }),
        )
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        MuonState {
            buf: state.buf.to_device(device),
        }
    }
}

/// The parameters Muon takes: every matrix inside the transformer blocks (Burn paths `h.*`, as
/// the GPT names its block list). Embedding tables, the output head, norms and biases are not.
pub fn block_matrices<B: AutodiffBackend, M: AutodiffModule<B>>(module: &M) -> Vec<ParamId> {
    struct V {
        path: Vec<String>,
        ids: Vec<ParamId>,
    }
    impl<B: Backend> ModuleVisitor<B> for V {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if D == 2 && self.path.first().is_some_and(|p| p == "h") {
                self.ids.push(param.id);
            }
        }
    }
    let mut v = V {
        path: Vec::new(),
        ids: Vec::new(),
    };
    module.visit(&mut v);
    v.ids
}
