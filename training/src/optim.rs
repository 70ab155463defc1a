//! Optimizers for the one training path: SGD with momentum, AdamW that decays matrices only, and
//! Muon on the block matrices beside that AdamW; all behind global-norm clipping.
//!
//! Two departures from Burn's defaults, each deliberate:
//! - Burn's momentum dampens by 0.1 by default; PyTorch's SGD does not dampen. The reference
//!   crate's measured defaults (lr 0.02, momentum 0.9) are PyTorch's semantics, so dampening is 0.
//! - Burn's AdamW decays every parameter. Decay belongs on the weight matrices (embedding tables
//!   included) and never on biases or norm gains, which would be pulled to zero for nothing; here
//!   a parameter of rank ≥ 2 is decayed and one of rank 1 is not.
//!
//! Clipping is by the global norm: every gradient of the model laid end to end, one length, one
//! scale factor for all, so the direction of the update is untouched. Burn's own
//! `GradientClipping::Norm` clips each tensor separately, which changes the direction. The squares
//! are summed per tensor on the device and the per-tensor sums are added in f64.

use crate::muon::Muon;
use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{
    AdamW, AdamWConfig, AdamWState, AdaptiveMomentumState, GradientsParams, MultiGradientsParams,
    Optimizer, Sgd, SgdConfig, SimpleOptimizer,
};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use nervus_models::fused;
use serde::{Deserialize, Serialize};

/// Which optimizer, with its settings; saved with every run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum OptimizerSpec {
    /// SGD with (undampened, PyTorch-style) momentum; `momentum = 0` is plain SGD.
    Sgd { momentum: f64 },
    /// AdamW with decoupled weight decay on rank ≥ 2 parameters only.
    AdamW {
        beta1: f64,
        beta2: f64,
        eps: f64,
        weight_decay: f64,
    },
    /// Muon on the matrices of the transformer blocks (see [`crate::muon`]), at `lr_ratio` times
    /// the schedule's rate; AdamW (betas 0.9, 0.999, eps 1e-8, `weight_decay` on matrices) on
    /// everything else at the schedule's rate.
    Muon {
        momentum: f64,
        nesterov: bool,
        /// Muon's learning rate over AdamW's (the reference: 0.02 against 0.003).
        lr_ratio: f64,
        muon_weight_decay: f64,
        weight_decay: f64,
    },
}

impl OptimizerSpec {
    /// AdamW with the usual betas, eps 1e-8 and the given decay.
    pub fn adamw(weight_decay: f64) -> Self {
        OptimizerSpec::AdamW {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
        }
    }

    /// Muon at peak rate `muon_lr` (the reference's is 0.02) beside AdamW at `adamw_lr`:
    /// momentum 0.95, Nesterov, no decay on the Muon matrices; AdamW's `weight_decay` on the
    /// other matrices.
    pub fn muon(adamw_lr: f64, muon_lr: f64, weight_decay: f64) -> Self {
        OptimizerSpec::Muon {
            momentum: 0.95,
            nesterov: true,
            lr_ratio: muon_lr / adamw_lr,
            muon_weight_decay: 0.0,
            weight_decay,
        }
    }

    /// Builds the optimizer for a model type, clipping the global gradient norm to `clip` if set.
    pub fn build<M: AutodiffModule<B>, B: AutodiffBackend>(
        &self,
        clip: Option<f64>,
    ) -> TrainOptim<M, B> {
        let (sgd, adamw) = match *self {
            OptimizerSpec::Sgd { momentum } => {
                let momentum = (momentum > 0.0).then_some(MomentumConfig {
                    momentum,
                    dampening: 0.0,
                    nesterov: false,
                });
                (Some(SgdConfig::new().with_momentum(momentum).init()), None)
            }
            OptimizerSpec::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay,
            } => (
                None,
                Some(matrix_decay_adamw(
                    (beta1 as f32, beta2 as f32),
                    eps as f32,
                    weight_decay,
                )),
            ),
            // Burn's AdamWConfig defaults to ε = 1e-5; the usual (and OptimizerSpec::adamw's) is 1e-8.
            OptimizerSpec::Muon { weight_decay, .. } => (
                None,
                Some(matrix_decay_adamw((0.9, 0.999), 1e-8, weight_decay)),
            ),
        };
        let muon = match *self {
            OptimizerSpec::Muon {
                momentum,
                nesterov,
                lr_ratio,
                muon_weight_decay,
                ..
            } => Some(MuonPart {
                optim: OptimizerAdaptor::from(Muon {
                    momentum,
                    nesterov,
                    weight_decay: muon_weight_decay,
                }),
                lr_ratio,
                ids: None,
            }),
            _ => None,
        };
        TrainOptim {
            sgd,
            adamw,
            muon,
            clip: clip.filter(|c| *c > 0.0),
        }
    }
}

fn matrix_decay_adamw<M: AutodiffModule<B>, B: AutodiffBackend>(
    betas: (f32, f32),
    eps: f32,
    weight_decay: f64,
) -> AdamWAdaptor<M, B> {
    OptimizerAdaptor::from(MatrixDecayAdamW {
        betas,
        eps,
        weight_decay: weight_decay as f32,
    })
}

/// AdamW whose decay applies to rank ≥ 2 parameters (matrices, embedding tables, convolution
/// kernels) and not to rank-1 ones (biases, norm gains). On flex each parameter's step is one
/// fused pass (`nervus_models::fused::adamw_step`, the same to the bit as Burn's `AdamW`); on other
/// backends it is Burn's `AdamW`. Both keep Burn's `AdamWState`, so a checkpoint written by one
/// resumes in the other.
#[derive(Clone)]
pub struct MatrixDecayAdamW {
    betas: (f32, f32),
    eps: f32,
    weight_decay: f32,
}

impl<B: Backend> SimpleOptimizer<B> for MatrixDecayAdamW {
    type State<const D: usize> = AdamWState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: f64,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let weight_decay = if D >= 2 { self.weight_decay } else { 0.0 };
        let time = state.as_ref().map_or(0, |s| s.momentum.time) + 1;
        let scalars = fused::AdamWScalars {
            beta1: self.betas.0,
            beta2: self.betas.1,
            eps: self.eps,
            time,
            lr,
            // As Burn's AdamW: the decay's rate in f64 from the f32 setting.
            decay_rate: lr * weight_decay as f64,
        };
        let moments = state.map(|s| (s.momentum.moment_1, s.momentum.moment_2));
        match fused::adamw_step(tensor, grad, moments, &scalars) {
            Ok((tensor, m, v)) => {
                let momentum = AdaptiveMomentumState::new(time, m, v);
                (tensor, Some(AdamWState { momentum }))
            }
            Err((tensor, grad, moments)) => {
                let state = moments.map(|(m, v)| AdamWState {
                    momentum: AdaptiveMomentumState::new(time - 1, m, v),
                });
                let adamw = AdamWConfig::new()
                    .with_beta_1(self.betas.0)
                    .with_beta_2(self.betas.1)
                    .with_epsilon(self.eps)
                    .with_weight_decay(weight_decay)
                    .build();
                adamw.step(lr, tensor, grad, state)
            }
        }
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        <AdamW as SimpleOptimizer<B>>::to_device(state, device)
    }
}

type SgdAdaptor<M, B> = OptimizerAdaptor<Sgd<<B as AutodiffBackend>::InnerBackend>, M, B>;
type AdamWAdaptor<M, B> = OptimizerAdaptor<MatrixDecayAdamW, M, B>;
type MuonAdaptor<M, B> = OptimizerAdaptor<Muon, M, B>;

/// Muon's share of a [`TrainOptim`]: the block matrices, found on the first step.
#[derive(Clone)]
struct MuonPart<M: AutodiffModule<B>, B: AutodiffBackend> {
    optim: MuonAdaptor<M, B>,
    lr_ratio: f64,
    ids: Option<Vec<ParamId>>,
}

/// The optimizer every model trains with: SGD, AdamW, or Muon with AdamW for what is not a block
/// matrix; behind global-norm clipping (taken over all gradients before they are shared out).
#[derive(Clone)]
pub struct TrainOptim<M: AutodiffModule<B>, B: AutodiffBackend> {
    sgd: Option<SgdAdaptor<M, B>>,
    adamw: Option<AdamWAdaptor<M, B>>,
    muon: Option<MuonPart<M, B>>,
    clip: Option<f64>,
}

/// The L2 norm of all of a model's gradients together.
pub fn global_grad_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
) -> f64 {
    struct SumSquares<'a, B: AutodiffBackend> {
        grads: &'a GradientsParams,
        parts: Vec<Tensor<B::InnerBackend, 1>>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for SumSquares<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(g) = self.grads.get::<B::InnerBackend, D>(param.id) {
                self.parts.push(g.square().sum());
            }
        }
    }
    let mut v = SumSquares::<B> {
        grads,
        parts: Vec::new(),
    };
    module.visit(&mut v);
    if v.parts.is_empty() {
        return 0.0;
    }
    // One read for all tensors: a sync per tensor would stall a GPU for nothing.
    let sums: Vec<f64> = Tensor::cat(v.parts, 0).into_data().iter::<f64>().collect();
    sums.iter().sum::<f64>().sqrt()
}

/// Scales every gradient by `max_norm / norm` when the global norm exceeds `max_norm`; returns the
/// norm before clipping.
pub fn clip_global_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &mut GradientsParams,
    max_norm: f64,
) -> f64 {
    let norm = global_grad_norm::<B, M>(module, grads);
    if norm.is_finite() && norm > max_norm {
        scale_grads::<B, M>(module, grads, max_norm / norm);
    }
    norm
}

/// Multiplies every gradient of `module` in `grads` by `factor`.
pub fn scale_grads<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &mut GradientsParams,
    factor: f64,
) {
    struct Scale<'a> {
        grads: &'a mut GradientsParams,
        factor: f64,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Scale<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) {
                self.grads.register(param.id, g.mul_scalar(self.factor));
            }
        }
    }
    module.visit(&mut Scale { grads, factor });
}

impl<M: AutodiffModule<B>, B: AutodiffBackend> Optimizer<M, B> for TrainOptim<M, B> {
    type Record = (
        Option<<SgdAdaptor<M, B> as Optimizer<M, B>>::Record>,
        Option<<AdamWAdaptor<M, B> as Optimizer<M, B>>::Record>,
        Option<<MuonAdaptor<M, B> as Optimizer<M, B>>::Record>,
    );

    fn step(&mut self, lr: f64, mut module: M, mut grads: GradientsParams) -> M {
        if let Some(max) = self.clip {
            clip_global_norm::<B, M>(&module, &mut grads, max);
        }
        if let Some(part) = &mut self.muon {
            let ids = part
                .ids
                .get_or_insert_with(|| crate::muon::block_matrices::<B, M>(&module));
            let mut mine = GradientsParams::new();
            for id in ids.iter() {
                if let Some(g) = grads.remove::<B::InnerBackend, 2>(*id) {
                    mine.register(*id, g);
                }
            }
            module = part.optim.step(lr * part.lr_ratio, module, mine);
        }
        match (&mut self.sgd, &mut self.adamw) {
            (Some(o), _) => o.step(lr, module, grads),
            (_, Some(o)) => o.step(lr, module, grads),
            (None, None) => unreachable!("TrainOptim holds one optimizer"),
        }
    }

    fn step_multi(&mut self, lr: f64, module: M, grads: MultiGradientsParams) -> M {
        // The global norm would have to be taken across devices; this workspace trains on one.
        assert!(
            self.clip.is_none() && self.muon.is_none(),
            "global-norm clipping and Muon are implemented for single-device training only"
        );
        match (&mut self.sgd, &mut self.adamw) {
            (Some(o), _) => o.step_multi(lr, module, grads),
            (_, Some(o)) => o.step_multi(lr, module, grads),
            (None, None) => unreachable!("TrainOptim holds one optimizer"),
        }
    }

    fn to_record(&self) -> Self::Record {
        (
            self.sgd.as_ref().map(|o| o.to_record()),
            self.adamw.as_ref().map(|o| o.to_record()),
            self.muon.as_ref().map(|m| m.optim.to_record()),
        )
    }

    fn load_record(mut self, (sgd, adamw, muon): Self::Record) -> Self {
        if let Some(r) = muon {
            self.muon = self.muon.map(|mut m| {
                m.optim = m.optim.load_record(r);
                m
            });
        }
        if let Some(r) = sgd {
            self.sgd = self.sgd.map(|o| o.load_record(r));
        }
        if let Some(r) = adamw {
            self.adamw = self.adamw.map(|o| o.load_record(r));
        }
        self
    }
}
