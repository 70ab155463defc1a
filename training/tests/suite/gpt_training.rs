//! The GPT on the shared training path: every tensor trains, one sequence can be memorised, the
//! evaluation schedule does not change what is learned, and a continuation never replaces a model
//! with a worse one.

use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use nervus_datasets::text::CharTokenizer;
use nervus_inference::generate::SampleOptions;
use nervus_models::gpt::{Gpt, GptConfig};
use nervus_models::named;
use nervus_training::gpt::{GptOptions, TextData, load_dir, save_dir, train};
use nervus_training::optim::OptimizerSpec;
use nervus_training::options::RunOptions;
use nervus_training::report::Reporter;
use std::path::PathBuf;

// Flex, not ndarray: burn-ndarray 0.21 is not bit-reproducible from run to run once a batch has
// a few rows (measured: ~1e-5 relative after six AdamW steps, single-threaded too), and these tests
// compare runs bit for bit. Flex is.
type B = Autodiff<burn::backend::Flex>;
type I = burn::backend::Flex;

fn tiny(vocab: usize, context: usize) -> GptConfig {
    GptConfig::new(vocab)
        .with_context(context)
        .with_layers(2)
        .with_heads(2)
        .with_d_model(16)
}

fn ids(v: &[u32], rows: usize) -> Tensor<B, 2, Int> {
    let v: Vec<i64> = v.iter().map(|&x| x as i64).collect();
    Tensor::from_data(
        TensorData::new(v.clone(), [rows, v.len() / rows]),
        &Default::default(),
    )
}

fn by_name(
    v: Vec<nervus_models::checkpoint::NamedTensor>,
) -> std::collections::HashMap<String, nervus_models::checkpoint::NamedTensor> {
    v.into_iter().map(|t| (t.name.clone(), t)).collect()
}

fn scratch(name: &str) -> PathBuf {
    crate::scratch(&format!("gpt-{name}"))
}

/// A forgotten parameter is silent: the model trains around it. One step must move every tensor.
#[test]
fn one_step_moves_every_parameter_tensor() {
    let _beside = crate::beside_others();
    B::seed(&Default::default(), 1);
    let model: Gpt<B> = tiny(9, 8).init(&Default::default());
    let before = named::export(&model);
    let mut optim = OptimizerSpec::adamw(0.1).build(Some(1.0));
    let x: Vec<u32> = (0..16).map(|i| (i * 5 % 9) as u32).collect();
    let y: Vec<u32> = x.iter().map(|v| (v + 1) % 9).collect();
    let loss = model.loss(ids(&x, 2), ids(&y, 2));
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    let model = optim.step(1e-3, model, grads);
    let after = named::export(&model);
    assert_eq!(before.len(), after.len());
    for (a, b) in before.iter().zip(&after) {
        assert!(a.data != b.data, "{} did not move", a.name);
    }
}

/// The oldest sanity check: forward, backward and the optimizer agree well enough to memorise
/// one sequence.
#[test]
fn memorises_one_short_sequence() {
    let _beside = crate::beside_others();
    let text = "to be or not to be";
    let tok = CharTokenizer::from_text(text);
    let all = tok.encode(text, "text").unwrap();
    B::seed(&Default::default(), 2);
    let mut model: Gpt<B> = tiny(tok.vocab_size(), 17).init(&Default::default());
    let mut optim = OptimizerSpec::adamw(0.0).build(Some(1.0));
    let (x, y) = (ids(&all[..17], 1), ids(&all[1..18], 1));
    let first = model.loss(x.clone(), y.clone()).into_scalar();
    let mut last = f32::NAN;
    for step in 0..200 {
        let loss = model.loss(x.clone(), y.clone());
        last = loss.clone().into_scalar();
        if last < 0.01 {
            println!("memorised at step {step}: {first:.3} -> {last:.4}");
            break;
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
    }
    assert!(last < 0.01, "loss {first:.3} -> {last:.4} after 200 steps");
}

fn options(steps: usize, every: usize, save: Option<PathBuf>, run_dir: PathBuf) -> GptOptions {
    GptOptions {
        run: RunOptions {
            steps,
            batch: 4,
            parts: 1,
            lr: 1e-2,
            warmup: 0,
            decay_to: 1.0,
            clip: Some(1.0),
            weight_decay: 0.0,
            seed: 7,
            eval_every: every,
            save,
            run_dir,
            continued_from: None,
            resume: false,
            overwrite: false,
            stop_after: None,
        },
        model: tiny(2, 8),
        eval_windows: 8,
        sample: SampleOptions {
            length: 4,
            temperature: 0.0,
            top_k: None,
        },
        prompt: String::new(),
    }
}

/// Evaluation draws from a generator of its own, so how often a run evaluates cannot change what
/// it learns.
#[test]
fn evaluating_more_often_trains_the_same_model() {
    let _beside = crate::beside_others();
    let text: String = (0..400)
        .map(|i| if (i * i + 3 * i) % 7 < 3 { 'a' } else { 'b' })
        .collect();
    let data = TextData::new("ab", &text, None, 8).unwrap();
    // Parameters are initialised lazily from a process-wide generator that other tests share:
    // make one model, force its values, and start both runs from copies of it.
    let start: Gpt<B> = tiny(2, 8).init(&Default::default());
    let start = named::import(
        start.clone(),
        by_name(named::export(&start)),
        std::path::Path::new("x"),
    )
    .unwrap();
    let run = |every: usize| {
        let model = start.clone();
        let dir = scratch(&format!("every-{every}"));
        let opts = options(6, every, None, dir.join("train"));
        let (_, last) = train(&opts, &data, model, Reporter::plain()).unwrap();
        (last, dir)
    };
    let ((a, da), (b, db)) = (run(2), run(6));
    let x = Tensor::<I, 2, Int>::from_data([[0i64, 1, 1, 0, 1, 0, 0, 1]], &Default::default());
    let (la, lb): (Vec<f32>, Vec<f32>) = (
        a.forward(x.clone()).into_data().iter::<f32>().collect(),
        b.forward(x).into_data().iter::<f32>().collect(),
    );
    assert_eq!(
        la, lb,
        "same training stream, same weights, whatever the evaluation schedule"
    );
    let _ = std::fs::remove_dir_all(da);
    let _ = std::fs::remove_dir_all(db);
}

/// A corpus whose validation tail contradicts its training part: training can only make
/// validation worse, so a continuation must leave the model it was given untouched, byte for byte.
#[test]
fn a_continuation_that_helps_nothing_changes_nothing() {
    let _beside = crate::beside_others();
    let text: String = "a".repeat(360) + &"b".repeat(40);
    let data = TextData::new("contradiction", &text, None, 8).unwrap();
    let dir = scratch("continue");
    let save = dir.join("model");
    B::seed(&Default::default(), 5);
    let start: Gpt<B> = tiny(2, 8).init(&Default::default());
    let settings = nervus_training::gpt::TrainingSettings {
        data: "x".into(),
        data_sha256: String::new(),
        steps: 0,
        batch: 0,
        parts: 1,
        lr: 0.0,
        warmup: 0,
        decay_to: 1.0,
        clip: None,
        optimizer: OptimizerSpec::adamw(0.0),
        seed: 0,
        eval_every: 1,
        eval_windows: 0,
        backend: "test".into(),
        continued_from: None,
        step: 0,
        valid_loss: None,
        model: None,
    };
    save_dir(&start.valid(), &data.tokenizer, &settings, &save).unwrap();
    let bytes = std::fs::read(save.join("model.safetensors")).unwrap();
    let (model, tok, _) = load_dir::<B>(&save, &Default::default()).unwrap();
    assert_eq!(tok, data.tokenizer);
    let mut opts = options(12, 4, Some(save.clone()), dir.join("train"));
    opts.run.continued_from = Some(save.clone());
    let (report, _) = train(&opts, &data, model, Reporter::plain()).unwrap();
    let base = report
        .baseline
        .expect("a continuation measures its starting model");
    assert!(
        report.best.is_none(),
        "nothing may beat {base}: {:?}",
        report.checkpoints
    );
    assert!(
        report.checkpoints.iter().all(|c| c.2 > base),
        "{:?}",
        report.checkpoints
    );
    assert_eq!(
        std::fs::read(save.join("model.safetensors")).unwrap(),
        bytes,
        "the saved model is untouched"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Save, load back through the GPT-2 loader, and the logits are identical.
#[test]
fn save_then_load_gives_identical_logits() {
    let _beside = crate::beside_others();
    let text = "First Citizen:\nBefore we proceed any further, hear me speak.\n".repeat(4);
    let data = TextData::new("t", &text, None, 8).unwrap();
    B::seed(&Default::default(), 9);
    let model: Gpt<I> = tiny(data.tokenizer.vocab_size(), 8).init(&Default::default());
    let dir = scratch("save");
    let settings = nervus_training::gpt::TrainingSettings {
        data: "t".into(),
        data_sha256: data.sha256.clone(),
        steps: 1,
        batch: 1,
        parts: 1,
        lr: 1e-3,
        warmup: 0,
        decay_to: 1.0,
        clip: None,
        optimizer: OptimizerSpec::adamw(0.1),
        seed: 9,
        eval_every: 1,
        eval_windows: 1,
        backend: "test".into(),
        continued_from: None,
        step: 1,
        valid_loss: Some(1.0),
        model: None,
    };
    save_dir(&model, &data.tokenizer, &settings, &dir).unwrap();
    for f in [
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "training.json",
    ] {
        assert!(dir.join(f).exists(), "{f} is written");
    }
    let (back, tok, s) = load_dir::<I>(&dir, &Default::default()).unwrap();
    assert_eq!(tok, data.tokenizer);
    assert_eq!(s.unwrap(), settings);
    let x = Tensor::<I, 2, Int>::from_data([[1i64, 2, 3, 4, 5]], &Default::default());
    let a: Vec<f32> = model.forward(x.clone()).into_data().iter::<f32>().collect();
    let b: Vec<f32> = back.forward(x).into_data().iter::<f32>().collect();
    assert_eq!(a, b);
    let _ = std::fs::remove_dir_all(dir);
}

/// A run whose loss becomes NaN stops with an error saying so, instead of training on NaN.
#[test]
fn a_diverging_run_stops_and_says_so() {
    let _beside = crate::beside_others();
    let text: String = (0..400)
        .map(|i| if (i * i + 3 * i) % 7 < 3 { 'a' } else { 'b' })
        .collect();
    let data = TextData::new("ab", &text, None, 8).unwrap();
    let dir = scratch("diverge");
    let mut opts = options(8, 2, None, dir.join("train"));
    opts.run.lr = 1e30;
    opts.run.clip = None;
    let model: Gpt<B> = tiny(2, 8).init(&Default::default());
    let result = nervus_training::gpt::train_with(
        &opts,
        OptimizerSpec::Sgd { momentum: 0.0 },
        &data,
        model,
        Reporter::plain(),
    );
    let Err(e) = result else {
        panic!("a learning rate of 1e30 must diverge and fail the run");
    };
    assert!(e.to_string().contains("diverged"), "{e}");
    assert!(
        matches!(e, nervus_training::run::TrainError::Diverged { .. }),
        "{e:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
