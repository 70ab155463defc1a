//! The language model on the shared path: accumulation averages, a run stopped and resumed is
//! the run that never stopped, the evaluation is deterministic, and the corpus is reused.

use burn::backend::Autodiff;
use burn::prelude::*;
use nervus_datasets::documents::{AUSTEN, Source};
use nervus_inference::generate::SampleOptions;
use nervus_models::gpt::{Gpt, GptConfig, LmBatch};
use nervus_models::named;
use nervus_training::lm::{
    Corpus, CorpusOptions, EvalWindows, LmOptions, LmPreset, load_dir, prepare, train,
};
use nervus_training::loader::BatchSource;
use nervus_training::optim::OptimizerSpec;
use nervus_training::options::RunOptions;
use nervus_training::report::Reporter;
use nervus_training::run::{RunConfig, fit};
use nervus_training::schedule::WarmupCosine;
use nervus_training::strategy::{EpochHook, EpochInfo};
use std::path::{Path, PathBuf};

// Flex: bit-reproducible from run to run (burn-ndarray 0.21 is not), and these tests compare
// runs bit for bit.
type B = Autodiff<burn::backend::Flex>;
type I = burn::backend::Flex;

fn scratch(name: &str) -> PathBuf {
    crate::scratch(&format!("lm-{name}"))
}

/// The first chapters of Sense and Sensibility (about 60 KB), as the Austen source splits them.
fn small_text() -> &'static str {
    let end = AUSTEN
        .char_indices()
        .nth(60_000)
        .map_or(AUSTEN.len(), |(i, _)| i);
    &AUSTEN[..end]
}

fn corpus(root: &Path) -> Corpus {
    prepare(
        "austen-head",
        small_text(),
        Source::Austen,
        None,
        &CorpusOptions {
            vocab: 300,
            held_out: 0.2,
            contexts: vec![16],
            root: root.to_path_buf(),
        },
        &Reporter::silent(),
    )
    .unwrap()
}

fn options(dir: &Path, steps: usize, every: usize) -> LmOptions {
    LmOptions {
        run: RunOptions {
            steps,
            batch: 4,
            lr: 0.01,
            warmup: 2,
            decay_to: 0.1,
            clip: Some(1.0),
            seed: 7,
            eval_every: every,
            save: Some(dir.join("model")),
            run_dir: dir.join("train"),
            resume: false,
            stop_after: None,
            continued_from: None,
            overwrite: false,
            parts: 1,
            weight_decay: 0.0,
        },
        model: LmPreset::Tiny.config(300).with_context(16),
        accumulation: 1,
        optimizer: OptimizerSpec::adamw(0.1),
        eval_batches: 3,
        doc_mask: true,
        sample: SampleOptions {
            length: 5,
            temperature: 0.8,
            top_k: Some(20),
        },
        prompt: String::new(),
    }
}

// Burn draws initial weights from one process-wide generator, and lazily, at a parameter's first
// use: tests running side by side would interleave their draws. So a model is made, and every
// parameter touched, while this lock is held.
use crate::INIT;

fn fresh_seeded(config: &GptConfig, seed: u64) -> Gpt<B> {
    let _held = INIT.lock().unwrap_or_else(|e| e.into_inner());
    let dev = Default::default();
    B::seed(&dev, seed);
    let model: Gpt<B> = config.init(&dev);
    let _ = named::export(&model);
    model
}

fn fresh(config: &GptConfig) -> Gpt<B> {
    fresh_seeded(config, 11)
}

fn params(model: &Gpt<I>) -> Vec<(String, Vec<f32>)> {
    named::export(model)
        .into_iter()
        .map(|t| (t.name, t.data))
        .collect()
}

/// The `step` of every row of a `metrics.jsonl`.
fn logged_steps(path: &Path) -> Vec<usize> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                .as_u64()
                .unwrap() as usize
        })
        .collect()
}

#[test]
fn a_run_stopped_and_resumed_is_the_run_that_never_stopped() {
    let _beside = crate::beside_others();
    stop_and_resume("resume-adamw", OptimizerSpec::adamw(0.1));
}

/// Muon's momentum buffers are part of the checkpoint too.
#[test]
fn a_muon_run_stopped_and_resumed_is_the_run_that_never_stopped() {
    let _beside = crate::beside_others();
    stop_and_resume("resume-muon", OptimizerSpec::muon(0.01, 0.05, 0.1));
}

fn stop_and_resume(name: &str, optimizer: OptimizerSpec) {
    let dir = scratch(name);
    let corpus = corpus(&dir.join("corpora"));
    let whole_dir = dir.join("whole");
    let options = |d: &Path, steps, every| LmOptions {
        optimizer: optimizer.clone(),
        ..options(d, steps, every)
    };
    let opts = options(&whole_dir, 6, 2);
    let (whole, whole_model) =
        train(&opts, &corpus, fresh(&opts.model), Reporter::silent()).unwrap();
    assert_eq!(whole.checkpoints.len(), 3);

    let parts_dir = dir.join("parts");
    let mut first = options(&parts_dir, 6, 2);
    first.run.stop_after = Some(2);
    let (stopped, _) = train(&first, &corpus, fresh(&first.model), Reporter::silent()).unwrap();
    assert_eq!(
        stopped
            .checkpoints
            .iter()
            .map(|c| c.step)
            .collect::<Vec<_>>(),
        vec![2],
        "--stop-after 2 ends the run at its first evaluation"
    );
    let mut second = options(&parts_dir, 6, 2);
    second.run.resume = true;
    // A different starting model: the resume must replace it with the checkpoint's.
    let other = fresh_seeded(&second.model, 999);
    let (resumed, resumed_model) = train(&second, &corpus, other, Reporter::silent()).unwrap();

    let steps: Vec<usize> = resumed.checkpoints.iter().map(|c| c.step).collect();
    assert_eq!(steps, vec![4, 6]);
    for (a, b) in whole.checkpoints[1..].iter().zip(&resumed.checkpoints) {
        assert_eq!(a.step, b.step);
        assert_eq!(
            a.train_loss.to_bits(),
            b.train_loss.to_bits(),
            "step {}",
            a.step
        );
        assert_eq!(
            a.valid_loss.to_bits(),
            b.valid_loss.to_bits(),
            "step {}",
            a.step
        );
        assert_eq!(a.reversed_loss.to_bits(), b.reversed_loss.to_bits());
        assert_eq!(a.lr.to_bits(), b.lr.to_bits());
    }
    assert_eq!(
        stopped.checkpoints[0].valid_loss,
        whole.checkpoints[0].valid_loss
    );
    assert_eq!(params(&whole_model), params(&resumed_model));

    // The metrics log was appended to across the two processes, never replaced.
    let metrics = parts_dir.join("train/metrics.jsonl");
    assert_eq!(logged_steps(&metrics), vec![2, 4, 6]);

    // A kill after step 6's row was written but before its checkpoint was whole: the epoch is
    // trained again, and its row replaces the first one instead of following it.
    let ckpt = parts_dir.join("train/checkpoint");
    std::fs::remove_file(ckpt.join("optim-3.mpk")).unwrap();
    let mut third = options(&parts_dir, 6, 2);
    third.run.resume = true;
    train(&third, &corpus, fresh(&third.model), Reporter::silent()).unwrap();
    assert_eq!(logged_steps(&metrics), vec![2, 4, 6]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_evaluation_is_the_same_for_every_run_and_the_corpus_is_reused() {
    let _beside = crate::beside_others();
    let dir = scratch("eval");
    let a = corpus(&dir);
    let b = corpus(&dir); // from the cache this time
    assert_eq!(a.dir, b.dir);
    assert_eq!(a.manifest, b.manifest);
    let model = fresh(&LmPreset::Tiny.config(300).with_context(16));
    use burn::module::AutodiffModule;
    let model = model.valid();
    let ea = EvalWindows::new(&a, 16, 3, 4, true);
    let eb = EvalWindows::new(&b, 16, 3, 4, true);
    let (la, lb) = (ea.mean_loss(&model), eb.mean_loss(&model));
    assert!(la.is_finite() && la > 0.0, "{la}");
    assert_eq!(la.to_bits(), lb.to_bits());
    // An untrained model knows no direction: reversed and forward losses are close; but they are
    // computed on different sequences, so not equal.
    let lr = ea.reversed().mean_loss(&model);
    assert!(lr.is_finite() && (lr - la).abs() < 0.1 * la, "{la} vs {lr}");
    assert_ne!(la, lr);
    let (tokens, bytes) = ea.tokens_and_bytes(&a.token_bytes);
    assert_eq!(tokens, 3 * 4 * 16);
    assert!(
        bytes > tokens,
        "a BPE token stands for more than a byte on average"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The evaluation does not depend on how many threads compute it: the same model on the same
/// windows in a pool of 1, 2 and 4 threads (the CPU backend splits matrix products and
/// reductions across the threads of the pool it runs in) gives the same loss to the bit.
#[test]
fn the_evaluation_is_the_same_at_any_thread_count() {
    let _beside = crate::beside_others();
    let dir = scratch("threads");
    let c = corpus(&dir);
    use burn::module::AutodiffModule;
    // Big enough that the products are split across threads: 512 rows of width 128 into a
    // 512-wide MLP is 33M multiply-adds, past the backend's 7M threshold for going parallel.
    let model = fresh(&LmPreset::Small.config(300).with_context(64)).valid();
    let eval = EvalWindows::new(&c, 64, 2, 8, true);
    let at = |n: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
            .install(|| (rayon::current_num_threads(), eval.mean_loss(&model)))
    };
    let (one, two, four) = (at(1), at(2), at(4));
    assert_eq!((one.0, two.0, four.0), (1, 2, 4));
    assert!(one.1.is_finite());
    assert_eq!(one.1.to_bits(), two.1.to_bits(), "{} vs {}", one.1, two.1);
    assert_eq!(one.1.to_bits(), four.1.to_bits(), "{} vs {}", one.1, four.1);
    let _ = std::fs::remove_dir_all(dir);
}

/// Twelve fixed, different windows of 9 ids, served either as one batch of 4 per step or as two
/// micro-batches of 2.
struct Fixed {
    windows: Vec<Vec<i64>>,
    batch: usize,
}

impl BatchSource<B> for Fixed {
    type Batch = LmBatch<B>;
    fn batches(&self, epoch: usize) -> usize {
        if epoch == 1 {
            self.windows.len() / self.batch
        } else {
            0
        }
    }
    fn items_per_batch(&self) -> usize {
        self.batch
    }
    fn batch(&self, _epoch: usize, index: usize, device: &burn::tensor::Device<B>) -> LmBatch<B> {
        let rows = &self.windows[index * self.batch..(index + 1) * self.batch];
        let x: Vec<i64> = rows.iter().flat_map(|w| w[..8].to_vec()).collect();
        let y: Vec<i64> = rows.iter().flat_map(|w| w[1..].to_vec()).collect();
        LmBatch {
            inputs: Tensor::from_data(TensorData::new(x, [self.batch, 8]), device),
            targets: Tensor::from_data(TensorData::new(y, [self.batch, 8]), device),
            doc_mask: None,
        }
    }
}

struct ValidFixed(Vec<Vec<i64>>);

impl BatchSource<I> for ValidFixed {
    type Batch = LmBatch<I>;
    fn batches(&self, _epoch: usize) -> usize {
        1
    }
    fn items_per_batch(&self) -> usize {
        self.0.len()
    }
    fn batch(&self, _epoch: usize, _index: usize, device: &burn::tensor::Device<I>) -> LmBatch<I> {
        let n = self.0.len();
        let x: Vec<i64> = self.0.iter().flat_map(|w| w[..8].to_vec()).collect();
        let y: Vec<i64> = self.0.iter().flat_map(|w| w[1..].to_vec()).collect();
        LmBatch {
            inputs: Tensor::from_data(TensorData::new(x, [n, 8]), device),
            targets: Tensor::from_data(TensorData::new(y, [n, 8]), device),
            doc_mask: None,
        }
    }
}

struct Quiet;
impl EpochHook<Gpt<I>> for Quiet {
    fn after_epoch(&mut self, _: &EpochInfo, _: &Gpt<I>) -> Result<(), String> {
        Ok(())
    }
}

fn run_accumulated(
    batch: usize,
    k: usize,
    parts: usize,
    windows: &[Vec<i64>],
    dir: &Path,
) -> Gpt<I> {
    let config = LmPreset::Tiny.config(13).with_context(8);
    let run = RunConfig {
        dir: dir.to_path_buf(),
        epochs: 1,
        accumulation: k,
        parts,
        resume: false,
        baseline: false,
        overwrite: true,
        settings: serde_json::Value::Null,
        report: Reporter::silent(),
        unit: None,
    };
    fit(
        run,
        fresh(&config),
        // Plain SGD: AdamW would hide a factor k (it divides the scale of the gradient out).
        OptimizerSpec::Sgd { momentum: 0.0 }.build(None),
        WarmupCosine::new(0.5, 0, 3, 1.0),
        Fixed {
            windows: windows.to_vec(),
            batch,
        },
        ValidFixed(windows[..2].to_vec()),
        |t| t,
        Box::new(Quiet),
    )
    .unwrap()
}

#[test]
fn micro_batches_and_parts_make_the_step_one_whole_batch_makes() {
    let _beside = crate::beside_others();
    let windows: Vec<Vec<i64>> = (0..12)
        .map(|r| {
            (0..9)
                .map(|i| ((r * 5 + i * i * 3 + i) % 13) as i64)
                .collect()
        })
        .collect();
    let dir = scratch("accumulate");
    let start = params(&{
        use burn::module::AutodiffModule;
        fresh(&LmPreset::Tiny.config(13).with_context(8)).valid()
    });
    let one = params(&run_accumulated(4, 1, 1, &windows, &dir.join("one")));
    // The same whole batches, each cut across threads ([`nervus_training::shard`]): two even
    // parts, and three uneven ones (2 + 1 + 1), whose weights must follow their sizes.
    for (label, other) in [
        (
            "2 micro-batches of 2",
            run_accumulated(2, 2, 1, &windows, &dir.join("two")),
        ),
        (
            "batches of 4 in 2 parts",
            run_accumulated(4, 1, 2, &windows, &dir.join("p2")),
        ),
        (
            "batches of 4 in 3 parts",
            run_accumulated(4, 1, 3, &windows, &dir.join("p3")),
        ),
    ] {
        let other = params(&other);
        let (mut moved, mut apart) = (0.0f32, 0.0f32);
        for (((name, s), (_, a)), (_, b)) in start.iter().zip(&one).zip(&other) {
            for ((s, a), b) in s.iter().zip(a).zip(b) {
                assert!(a.is_finite() && b.is_finite(), "{label}: {name}");
                moved = moved.max((a - s).abs());
                apart = apart.max((a - b).abs());
            }
        }
        // Three steps at lr 0.5 move the weights by far more than rounding; summing instead of
        // averaging would put the two runs about as far apart as the steps themselves.
        assert!(moved > 1e-3, "the steps barely moved the weights: {moved}");
        assert!(
            apart <= 1e-4 * moved,
            "{label} and whole batches differ by {apart} (steps moved weights by {moved})"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_saved_model_loads_back_with_its_tokenizer() {
    let _beside = crate::beside_others();
    let dir = scratch("save");
    let corpus = corpus(&dir.join("corpora"));
    let opts = options(&dir, 2, 2);
    let (report, last) = train(&opts, &corpus, fresh(&opts.model), Reporter::silent()).unwrap();
    assert!(report.best.is_some());
    let (model, bpe, settings) = load_dir::<I>(&dir.join("model"), &Default::default()).unwrap();
    assert_eq!(bpe.sha256().unwrap(), corpus.manifest.tokenizer_sha256);
    let settings = settings.unwrap();
    assert_eq!(settings.step, 2);
    assert!(settings.bits_per_byte.unwrap() > 0.0);
    assert_eq!(params(&model), params(&last));
    let _ = std::fs::remove_dir_all(dir);
}
