//! From a text to a trained model to the engine's output: the engine writes what the training
//! path's own sampler writes, and its int8 cache never outlives the model it was made from (the
//! reference's stale-cache bug: train, run with q8, retrain into the same directory, run again).

use nervus_inference::engine::{Engine, Quant, RunOptions, quant};
use nervus_inference::generate::SampleOptions;
use nervus_training::gpt::{GptRun, run};
use nervus_training::options::RunOptions as TrainOptions;
use nervus_training::report::Reporter;
use std::path::Path;

type B = burn::backend::Autodiff<burn::backend::Flex>;
type I = burn::backend::Flex;

const GREEDY: SampleOptions = SampleOptions {
    length: 40,
    temperature: 0.0,
    top_k: None,
};

/// Trains a tiny GPT on `text` for `steps` steps into `save` (afresh, over whatever is there).
fn train(dir: &Path, text: &Path, save: &Path, steps: usize, seed: u64) -> String {
    let _init = crate::INIT.lock().unwrap_or_else(|e| e.into_inner());
    let mut opts = TrainOptions::new(steps, 8, 0.01, dir.join(format!("run-{seed}")));
    opts.save = Some(save.to_path_buf());
    opts.seed = seed;
    opts.overwrite = true;
    opts.eval_every = steps;
    let spec = GptRun {
        run: opts,
        size: "small".into(),
        layers: Some(1),
        heads: Some(2),
        d_model: Some(16),
        context: Some(32),
        eval_windows: Some(4),
        sample: GREEDY,
        prompt: "the ".into(),
        download: None,
        data: Some(text.to_path_buf()),
    };
    let out = run::<B>(&spec, &Reporter::silent(), &Default::default()).unwrap();
    out.writes.expect("the run writes at its end")
}

fn engine_writes(save: &Path, quant: Quant) -> (String, String) {
    let e = Engine::<I>::load(save, quant, true, &Default::default()).unwrap();
    let opts = RunOptions {
        sample: GREEDY,
        seed: 0,
        stop_at_eos: false,
    };
    let r = e.run("the ", &opts, |_| {}).unwrap();
    (r.text, e.summary)
}

#[test]
fn the_engine_writes_what_training_wrote_and_int8_follows_a_retrained_model() {
    let _g = crate::beside_others();
    let dir = crate::scratch("engine-journey");
    std::fs::create_dir_all(&dir).unwrap();
    let text = dir.join("text.txt");
    let line = "the cat sat on the mat and the dog ate the hat. ";
    std::fs::write(&text, line.repeat(60)).unwrap();
    let save = dir.join("model");

    // Greedy, the engine (CPU decoder and Burn alike) writes what the training path wrote.
    let trained = train(&dir, &text, &save, 30, 1);
    assert_eq!(engine_writes(&save, Quant::F32).0, trained);
    let burn = Engine::<I>::load(&save, Quant::F32, false, &Default::default()).unwrap();
    let opts = RunOptions {
        sample: GREEDY,
        seed: 0,
        stop_at_eos: false,
    };
    assert_eq!(burn.run("the ", &opts, |_| {}).unwrap().text, trained);

    // int8: quantised and cached, then read from the cache.
    let (first_q8, how) = engine_writes(&save, Quant::Q8);
    assert!(how.contains("quantised now, cached"), "{how}");
    assert_eq!(
        engine_writes(&save, Quant::Q8),
        (
            first_q8.clone(),
            how.replace("quantised now, cached in", "read from")
        )
    );

    // Retrained into the same directory: same shape, same file size, other weights. (This
    // project's save replaces the whole directory, so the old cache goes with it; the engine's
    // own test `the_int8_cache_follows_the_checkpoint_it_was_made_from` saves over the file in
    // place, where only the cache's key can tell.)
    let size = std::fs::metadata(save.join("model.safetensors"))
        .unwrap()
        .len();
    let retrained = train(&dir, &text, &save, 60, 2);
    assert_eq!(
        std::fs::metadata(save.join("model.safetensors"))
            .unwrap()
            .len(),
        size
    );
    let (second_q8, how) = engine_writes(&save, Quant::Q8);
    assert!(!how.contains("read from"), "the old cache was used: {how}");
    assert_eq!(engine_writes(&save, Quant::F32).0, retrained);
    // What int8 of the new weights writes with no cache anywhere.
    std::fs::remove_file(save.join(quant::CACHE)).unwrap();
    assert_eq!(engine_writes(&save, Quant::Q8).0, second_q8);
    assert_ne!(
        trained, retrained,
        "the two models should write differently"
    );
}
