//! Data parallelism inside one process: a batch cut into parts along its first axis, each part's
//! forward and backward pass run on a thread of its own, and the parts' gradients summed, each
//! weighted by its share of the predictions the loss averages. That is the whole batch's
//! gradient, up to the order the floats are added in.
//!
//! Why it pays on a CPU: flex spreads matrix products and large reductions over its threads but
//! does elementwise arithmetic (adds, products, activations, the adaLN modulations) on the
//! calling thread, so a video DiT training step keeps about 1.3 of 2 cores busy. Two parts give
//! the elementwise work a second thread. `cargo xtask bench video --parts 1,2` measures it.
//!
//! Each part runs on a fork of the model: the same weights (nothing is copied) under fresh autograd
//! leaves, so the parts' graphs never meet and their backward passes run side by side (Burn keeps
//! one lock per graph, and two uses of the same leaves would merge the graphs into one). A fork
//! keeps every parameter's id, so the gradients land on the learner's model.
//!
//! The parts meet once, between their forward and backward passes: Burn 0.21's autodiff ends
//! every backward pass by sweeping all the graphs in the process for unused nodes, and a sweep that
//! meets a graph another thread is still building can free a step of it, which silently loses part
//! of that part's gradient (burn#5573, fixed upstream after 0.21). Without the meeting point, about
//! 1 run in 300 of the contrasted video test in `training/tests/suite/shard.rs` got a wrong gradient.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex};

use burn::optim::GradientsAccumulator;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::{ClassificationOutput, TrainOutput};
use nervus_models::flow::FlowBatch;
use nervus_models::gpt::LmBatch;
use nervus_models::mlp::ClassBatch;
use nervus_models::output::{LossOutput, Objective, train_step};

/// A training batch that can be cut into parts along its first axis.
pub trait Shard: Sized {
    /// Items (first-axis entries) in the batch.
    fn items(&self) -> usize;
    /// Items `start..start + len` of the batch.
    fn part(&self, start: usize, len: usize) -> Self;
}

/// A training step's output that can be put back together from its parts' outputs.
pub trait Merge: Sized {
    /// How many predictions this part's mean loss is over: its weight in the whole batch's mean.
    fn weight(&self) -> f64;
    /// The whole batch's output from its parts' (in order).
    fn merge(parts: Vec<Self>) -> Self;
}

/// The serde default of a `parts` setting: runs recorded before it existed used one thread.
pub fn one() -> usize {
    1
}

/// The first `n` part threads: each a rayon pool of one thread, kept for the process. A part's
/// step runs inside its pool, so the kernels' own parallel loops (flex's matrix products, the
/// fused ops) run on that one thread instead of meeting the other part's in rayon's global pool:
/// two cores, two threads, no hand-offs. Kept, not spawned a step: a fresh thread costs its stack
/// and a fresh allocator arena each time (page clearing took a fifth of a small GPT's step).
/// Parts never wait on each other, and a one-thread pool never runs a foreign job inside its own,
/// so sharing the pools between trainings in one process (the tests) cannot deadlock.
fn part_pools(n: usize) -> Vec<Arc<rayon::ThreadPool>> {
    static POOLS: Mutex<Vec<Arc<rayon::ThreadPool>>> = Mutex::new(Vec::new());
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    while pools.len() < n {
        let i = pools.len();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(move |_| format!("nervus-part-{i}"))
            .build()
            .expect("starting a part thread");
        pools.push(Arc::new(pool));
    }
    pools[..n].to_vec()
}

/// Item ranges of `n` items cut into at most `parts` consecutive, nearly equal parts (the first
/// `n % parts` one item longer); never an empty part.
pub fn ranges(n: usize, parts: usize) -> Vec<(usize, usize)> {
    let parts = parts.clamp(1, n.max(1));
    let (base, extra) = (n / parts, n % parts);
    let mut start = 0;
    (0..parts)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let r = (start, len);
            start += len;
            r
        })
        .filter(|&(_, len)| len > 0)
        .collect()
}

/// The point every part reaches after its forward pass and before its backward pass, so that no
/// part's backward pass ends while another part is still building its graph (Burn 0.21 sweeps
/// every graph in the process at the end of a backward pass; see [`Objective`]). Each part brings
/// its [`Merge::weight`] and leaves with the total, so it can scale its own loss to its share of
/// the batch before its backward pass. A part that fails its forward pass opens the gate for the
/// others, who then give up instead of waiting.
struct Gate {
    parts: usize,
    state: Mutex<GateState>,
    opened: Condvar,
}

#[derive(Default)]
struct GateState {
    arrived: usize,
    failed: bool,
    total: f64,
}

impl Gate {
    fn new(parts: usize) -> Self {
        Self {
            parts,
            state: Mutex::new(GateState::default()),
            opened: Condvar::new(),
        }
    }

    /// Arrives with the weight of a forward pass that went well (`None`: it failed), waits for
    /// the other parts, and answers the total weight if every part's forward pass went well.
    fn arrive(&self, weight: Option<f64>) -> Option<f64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.arrived += 1;
        match weight {
            Some(w) => state.total += w,
            None => state.failed = true,
        }
        if state.arrived == self.parts || state.failed {
            self.opened.notify_all();
        }
        while state.arrived < self.parts && !state.failed {
            state = self.opened.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        (!state.failed).then_some(state.total)
    }
}

/// Why a part has no output: its own panic, or another part's (it then stopped at the gate).
enum PartFailure {
    Panicked(Box<dyn std::any::Any + Send>),
    Abandoned,
}

/// One part's step: the fork of `model` it runs on (made here, on the part's own thread), the
/// forward pass, the gate, and the backward pass of the loss scaled to the part's share of the
/// batch (its weight over the total), so the parts' gradients only need adding.
fn part_step<B, M>(
    model: M,
    device: &B::Device,
    input: M::Input,
    gate: &Gate,
) -> Result<TrainOutput<M::Output>, PartFailure>
where
    B: AutodiffBackend,
    M: Objective<B>,
    M::Output: Merge,
{
    let forward = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let fork = model.fork(device);
        let (loss, output) = fork.objective(input);
        (fork, loss, output)
    }));
    let total = gate.arrive(forward.as_ref().ok().map(|(_, _, out)| out.weight()));
    let (fork, loss, output) = forward.map_err(PartFailure::Panicked)?;
    let Some(total) = total else {
        return Err(PartFailure::Abandoned);
    };
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        let share = loss.mul_scalar(output.weight() / total);
        TrainOutput::new(&fork, share.backward(), output)
    }))
    .map_err(PartFailure::Panicked)
}

/// One training step of `model` on `batch`, cut into `parts` parts run on as many threads (1: the
/// model's own step, on this thread). The gradients are the whole batch's: each part's loss is scaled
/// by its [`Merge::weight`] over the total before its backward pass, and the gradients summed. Every part finishes its forward pass before any
/// part starts its backward pass (see [`Gate`]); a panic in any part is raised here.
pub fn step<B, M>(model: &M, batch: M::Input, parts: usize) -> TrainOutput<M::Output>
where
    B: AutodiffBackend,
    M: Objective<B> + 'static,
    M::Input: Shard + Send + 'static,
    M::Output: Merge + Send + 'static,
{
    let cuts = ranges(batch.items(), parts);
    if cuts.len() <= 1 {
        return train_step(model, batch);
    }
    let device = model
        .devices()
        .into_iter()
        .next()
        .expect("a model with parameters");
    let inputs: Vec<M::Input> = cuts.iter().map(|&(s, l)| batch.part(s, l)).collect();
    drop(batch);
    let pools = part_pools(inputs.len());
    let gate = Arc::new(Gate::new(inputs.len()));
    let (send, receive) = std::sync::mpsc::channel();
    let mut inputs = inputs.into_iter().enumerate();
    let (_, first) = inputs.next().expect("two or more parts");
    for (i, input) in inputs {
        let (model, device) = (model.clone(), device.clone());
        let (send, gate) = (send.clone(), gate.clone());
        pools[i].spawn(move || {
            let out = part_step(model, &device, input, &gate);
            // The receiver outlives every part: it waits for all of them below.
            let _ = send.send((i, out));
        });
    }
    drop(send);
    let mut outs: Vec<Option<Result<_, _>>> = (0..cuts.len()).map(|_| None).collect();
    let own = model.clone();
    outs[0] = Some(pools[0].install(|| part_step(own, &device, first, &gate)));
    for (i, out) in receive {
        outs[i] = Some(out);
    }
    let mut done = Vec::with_capacity(outs.len());
    let mut abandoned = false;
    for out in outs {
        match out.expect("every part sends its output") {
            Ok(out) => done.push(out),
            Err(PartFailure::Panicked(e)) => std::panic::resume_unwind(e),
            Err(PartFailure::Abandoned) => abandoned = true,
        }
    }
    assert!(!abandoned, "a part stopped without another part failing");
    let outs = done;
    let mut acc = GradientsAccumulator::new();
    let mut items = Vec::with_capacity(outs.len());
    for out in outs {
        acc.accumulate(model, out.grads);
        items.push(out.item);
    }
    TrainOutput {
        grads: acc.grads(),
        item: M::Output::merge(items),
    }
}

impl<B: Backend, const D: usize> Shard for FlowBatch<B, D> {
    fn items(&self) -> usize {
        self.t.dims()[0]
    }

    fn part(&self, start: usize, len: usize) -> Self {
        FlowBatch {
            x: self.x.clone().narrow(0, start, len),
            noise: self.noise.clone().narrow(0, start, len),
            t: self.t.clone().narrow(0, start, len),
            labels: self.labels.clone().narrow(0, start, len),
        }
    }
}

impl<B: Backend> Shard for nervus_models::video_dit::ClipBatch<B> {
    fn items(&self) -> usize {
        self.flow.items()
    }

    fn part(&self, start: usize, len: usize) -> Self {
        Self {
            flow: self.flow.part(start, len),
            doubles: self.doubles[start..start + len].to_vec(),
            double_contrast: self.double_contrast,
        }
    }
}

impl<B: Backend> Shard for LmBatch<B> {
    fn items(&self) -> usize {
        self.inputs.dims()[0]
    }

    fn part(&self, start: usize, len: usize) -> Self {
        LmBatch {
            inputs: self.inputs.clone().narrow(0, start, len),
            targets: self.targets.clone().narrow(0, start, len),
            doc_mask: self
                .doc_mask
                .as_ref()
                .map(|m| m.clone().narrow(0, start, len)),
        }
    }
}

impl<B: Backend> Shard for ClassBatch<B> {
    fn items(&self) -> usize {
        self.targets.dims()[0]
    }

    fn part(&self, start: usize, len: usize) -> Self {
        ClassBatch {
            inputs: self.inputs.clone().narrow(0, start, len),
            targets: self.targets.clone().narrow(0, start, len),
        }
    }
}

impl<B: Backend> Merge for LossOutput<B> {
    fn weight(&self) -> f64 {
        self.count as f64
    }

    fn merge(parts: Vec<Self>) -> Self {
        let count: usize = parts.iter().map(|p| p.count).sum();
        let loss = parts
            .into_iter()
            .map(|p| p.loss * (p.count as f64 / count as f64))
            .reduce(|a, b| a + b)
            .expect("at least one part");
        LossOutput { loss, count }
    }
}

impl<B: Backend> Merge for ClassificationOutput<B> {
    fn weight(&self) -> f64 {
        self.targets.dims()[0] as f64
    }

    fn merge(parts: Vec<Self>) -> Self {
        let n: f64 = parts.iter().map(|p| p.weight()).sum();
        let loss = parts
            .iter()
            .map(|p| p.loss.clone().detach() * (p.weight() / n))
            .reduce(|a, b| a + b)
            .expect("at least one part");
        let output = Tensor::cat(parts.iter().map(|p| p.output.clone().detach()).collect(), 0);
        let targets = Tensor::cat(parts.into_iter().map(|p| p.targets).collect(), 0);
        ClassificationOutput {
            loss,
            output,
            targets,
        }
    }
}
