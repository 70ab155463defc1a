//! The language model in bf16: the device's float type is set once, before any tensor exists,
//! and a short run trains, evaluates and saves in it. (Its own test binary: a device's float type
//! is fixed at its first use, for the whole process.)

use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::DType;
use nervus_datasets::documents::{AUSTEN, Source};
use nervus_inference::generate::SampleOptions;
use nervus_training::lm::{CorpusOptions, LmOptions, LmPreset, prepare, train};
use nervus_training::optim::OptimizerSpec;
use nervus_training::options::RunOptions;
use nervus_training::report::Reporter;

type B = Autodiff<burn::backend::Flex>;

#[test]
fn a_short_run_trains_in_bf16() {
    let dev = Default::default();
    burn::tensor::backend::set_default_float_dtype::<burn::backend::Flex>(&dev, DType::BF16)
        .unwrap();
    let dir = std::env::temp_dir().join(format!("nervus-lm-bf16-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let end = AUSTEN
        .char_indices()
        .nth(30_000)
        .map_or(AUSTEN.len(), |(i, _)| i);
    let corpus = prepare(
        "austen-head",
        &AUSTEN[..end],
        Source::Austen,
        None,
        &CorpusOptions {
            vocab: 300,
            held_out: 0.2,
            contexts: vec![16],
            root: dir.join("corpora"),
        },
        &Reporter::silent(),
    )
    .unwrap();
    let opts = LmOptions {
        run: RunOptions {
            steps: 20,
            batch: 4,
            lr: 0.01,
            warmup: 2,
            decay_to: 0.1,
            clip: Some(1.0),
            seed: 7,
            eval_every: 10,
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
        optimizer: OptimizerSpec::muon(0.01, 0.05, 0.1),
        eval_batches: 3,
        doc_mask: true,
        sample: SampleOptions {
            length: 5,
            temperature: 0.8,
            top_k: Some(20),
        },
        prompt: String::new(),
    };
    B::seed(&dev, 3);
    let model = opts.model.init::<B>(&dev);
    assert_eq!(model.lm_head.weight.val().dtype(), DType::BF16);
    let (report, _) = train(&opts, &corpus, model, Reporter::silent()).unwrap();
    let v: Vec<f64> = report.checkpoints.iter().map(|c| c.valid_loss).collect();
    eprintln!("{v:?}");
    assert!(v.iter().all(|l| l.is_finite()), "{v:?}");
    assert!(v[1] < (300f64).ln() - 0.5, "{v:?}");
    // The saved model (f32 on disk) loads back into bf16 and says the same thing.
    let (back, _, _) =
        nervus_training::lm::load_dir::<burn::backend::Flex>(&dir.join("model"), &dev).unwrap();
    assert_eq!(back.lm_head.weight.val().dtype(), DType::BF16);
    let _ = std::fs::remove_dir_all(dir);
}
